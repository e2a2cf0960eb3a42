//! `LocalComm`: collective results against a plain reference, byte
//! accounting, and the failure model (mismatch, panic, drop, timeout).

#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use core::time::Duration;

use basis_std::local::LocalComm;
use comm_traits::{Collective, CommError, CommStats, Communicator};

/// Deterministic, rank-dependent test data.
fn data(rank: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((rank * 7919 + i * 104_729) % 1000) as f32 * 0.001 - 0.37)
        .collect()
}

fn ok<T>(results: Vec<std::thread::Result<T>>) -> Vec<T> {
    results.into_iter().map(|r| r.unwrap()).collect()
}

#[test]
fn all_reduce_sums_in_rank_order_on_every_rank() {
    for p in [1, 2, 3, 5] {
        let n = 37;
        let out = ok(LocalComm::run(p, |mut c| {
            let mut buf = data(c.rank(), n);
            c.all_reduce_sum(&mut buf).unwrap();
            (buf, c.stats())
        }));
        let mut want = data(0, n);
        for r in 1..p {
            for (w, x) in want.iter_mut().zip(data(r, n)) {
                *w += x;
            }
        }
        for (buf, stats) in &out {
            assert_eq!(
                buf.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            );
            let mut s = CommStats::default();
            s.record(Collective::AllReduceSum, p, 4 * n);
            assert_eq!(*stats, s);
        }
    }
}

#[test]
fn all_to_all_and_all_gather_route_bytes() {
    let p = 4;
    let chunk = 3;
    let out = ok(LocalComm::run(p, |mut c| {
        let r = c.rank();
        let send: Vec<u8> = (0..p * chunk).map(|i| (r * 100 + i) as u8).collect();
        let mut recv = vec![0u8; p * chunk];
        c.all_to_all(&send, chunk, &mut recv).unwrap();
        let mut gathered = vec![0u8; p * 2];
        c.all_gather(&[r as u8, 42], &mut gathered).unwrap();
        c.barrier().unwrap();
        (recv, gathered, c.stats())
    }));
    for (r, (recv, gathered, stats)) in out.iter().enumerate() {
        for i in 0..p {
            for k in 0..chunk {
                assert_eq!(recv[i * chunk + k], (i * 100 + r * chunk + k) as u8);
            }
            assert_eq!(&gathered[2 * i..2 * i + 2], &[i as u8, 42]);
        }
        assert_eq!(stats.calls, 3);
        assert_eq!(stats.bytes_sent, ((p - 1) * chunk + (p - 1) * 2) as u64);
    }
}

#[test]
fn length_mismatch_is_an_error_on_every_rank_and_group_survives() {
    let out = ok(LocalComm::run(3, |mut c| {
        let n = if c.rank() == 1 { 5 } else { 4 };
        let mut buf = vec![1.0f32; n];
        let first = c.all_reduce_sum(&mut buf);
        let mut g = vec![0u8; if c.rank() == 2 { 5 } else { 6 }];
        let second = c.all_gather(&[1, 2], &mut g);
        let mut fine = [1.0f32];
        let third = c.all_reduce_sum(&mut fine).map(|()| fine[0]);
        (first, second, third)
    }));
    for (r, (first, second, third)) in out.into_iter().enumerate() {
        assert!(
            matches!(first, Err(CommError::LengthMismatch { .. })),
            "rank {r}: {first:?}"
        );
        if r == 2 {
            assert!(matches!(second, Err(CommError::BadArgument(_))));
        } else {
            assert!(matches!(second, Err(CommError::LengthMismatch { .. })));
        }
        assert_eq!(third, Ok(3.0));
    }
}

#[test]
fn different_collectives_are_a_header_mismatch() {
    let out = ok(LocalComm::run(2, |mut c| {
        if c.rank() == 0 {
            c.barrier()
        } else {
            let mut b = [0u8; 2];
            c.all_gather(&[1], &mut b)
        }
    }));
    for r in out {
        assert!(matches!(
            r,
            Err(CommError::HeaderMismatch {
                field: "collective",
                ..
            })
        ));
    }
}

#[test]
fn a_panicking_rank_makes_the_others_fail_not_hang() {
    let out = LocalComm::run(3, |mut c| {
        c.barrier().unwrap();
        if c.rank() == 1 {
            panic!("rank 1 fails on purpose");
        }
        let mut b = [1.0f32];
        c.all_reduce_sum(&mut b)
    });
    assert!(out[1].is_err());
    for r in [0, 2] {
        let res = out[r].as_ref().unwrap();
        assert_eq!(*res, Err(CommError::PeerLost { rank: Some(1) }));
    }
}

#[test]
fn a_dropped_rank_poisons_later_calls() {
    let mut comms = LocalComm::group(2);
    let survivor = comms.remove(0);
    drop(comms);
    let mut survivor = survivor;
    assert_eq!(
        survivor.barrier(),
        Err(CommError::PeerLost { rank: Some(1) })
    );
}

#[test]
fn timeout_fires_and_the_group_is_dead_afterwards() {
    let mut comms = LocalComm::group_with_timeout(2, Duration::from_millis(50));
    let mut lonely = comms.remove(0);
    // Rank 1 exists but never calls: rank 0 times out.
    assert_eq!(lonely.barrier(), Err(CommError::Timeout));
    let mut late = comms.remove(0);
    assert_eq!(late.barrier(), Err(CommError::PeerLost { rank: Some(0) }));
}

#[test]
fn many_rounds_stay_in_lockstep() {
    let p = 4;
    let rounds = 200;
    let out = ok(LocalComm::run(p, |mut c| {
        let mut acc = 0.0f32;
        for k in 0..rounds {
            let mut b = [(c.rank() + k) as f32];
            c.all_reduce_sum(&mut b).unwrap();
            acc += b[0];
        }
        acc
    }));
    let want: f32 = (0..rounds)
        .map(|k| (0..p).map(|r| (r + k) as f32).sum::<f32>())
        .sum();
    assert!(out.iter().all(|&a| a == want));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]
    /// Every collective against its one-line definition, on random group
    /// sizes, chunk sizes and data.
    #[test]
    fn collectives_match_their_definitions(
        p in 1usize..6,
        chunk in 0usize..9,
        n in 0usize..40,
        seed in proptest::prelude::any::<u64>(),
    ) {
        let byte = |r: usize, i: usize| (seed.wrapping_mul(r as u64 + 3) >> (i % 50)) as u8 ^ i as u8;
        let out = ok(LocalComm::run(p, |mut c| {
            let r = c.rank();
            let send: Vec<u8> = (0..p * chunk).map(|i| byte(r, i)).collect();
            let mut a2a = vec![0u8; p * chunk];
            c.all_to_all(&send, chunk, &mut a2a).unwrap();
            let mine: Vec<u8> = (0..chunk).map(|i| byte(r, 1000 + i)).collect();
            let mut gathered = vec![0u8; p * chunk];
            c.all_gather(&mine, &mut gathered).unwrap();
            let mut sum = data(r, n);
            c.all_reduce_sum(&mut sum).unwrap();
            (a2a, gathered, sum)
        }));
        for (r, (a2a, gathered, sum)) in out.iter().enumerate() {
            for i in 0..p {
                for k in 0..chunk {
                    proptest::prop_assert_eq!(a2a[i * chunk + k], byte(i, r * chunk + k));
                    proptest::prop_assert_eq!(gathered[i * chunk + k], byte(i, 1000 + k));
                }
            }
            let want: Vec<u32> = (0..n)
                .map(|j| (1..p).fold(data(0, n)[j], |acc, q| acc + data(q, n)[j]).to_bits())
                .collect();
            proptest::prop_assert_eq!(sum.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want);
        }
    }
}
