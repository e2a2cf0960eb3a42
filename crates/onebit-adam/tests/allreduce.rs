//! `compressed_allreduce` on `LocalComm` against the single-threaded
//! reference simulation (bit for bit), error-feedback conservation, byte
//! accounting, and failures on every rank.

#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use core::time::Duration;

use basis_std::local::LocalComm;
use comm_traits::{CommError, CommStats, Communicator};
use onebit_adam::reference::{ReferenceState, simulate_allreduce};
use onebit_adam::testing::{bits, rank_input as input};
use onebit_adam::{
    AllReduceState, OneBitError, compressed_allreduce, compressed_allreduce_bytes, padded_len,
};
use proptest::prelude::*;

/// Run `calls` compressed all-reduces on `p` LocalComm ranks; per rank the
/// outputs of every call and the final state.
fn run_local(p: usize, n: usize, calls: usize) -> Vec<(Vec<Vec<f32>>, AllReduceState)> {
    LocalComm::run(p, |mut c| {
        let mut st = AllReduceState::new();
        let mut outs = Vec::new();
        for t in 0..calls {
            let mut buf = input(c.rank(), t, n);
            let rep = compressed_allreduce(&mut c, &mut buf, &mut st).unwrap();
            assert_eq!(rep.bytes.bytes_sent, compressed_allreduce_bytes(n, p));
            outs.push(buf);
        }
        (outs, st)
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

#[test]
fn equals_reference_bit_for_bit_on_every_rank() {
    for p in [1usize, 2, 3, 4, 8] {
        // The awkward lengths, plus 16P (no padding: the worker
        // compresses the caller's buffer directly).
        for n in [1, 7, 8 * p - 1, 8 * p + 1, 16 * p, 100_003] {
            let calls = if n > 1000 { 2 } else { 4 };
            let local = run_local(p, n, calls);
            let mut reference = ReferenceState::new(n, p);
            for t in 0..calls {
                let mut bufs: Vec<Vec<f32>> = (0..p).map(|r| input(r, t, n)).collect();
                simulate_allreduce(&mut bufs, &mut reference);
                for (r, (outs, _)) in local.iter().enumerate() {
                    assert_eq!(bits(&outs[t]), bits(&bufs[r]), "p={p} n={n} t={t} rank {r}");
                }
            }
            for (r, (_, st)) in local.iter().enumerate() {
                assert_eq!(bits(&st.worker_error()), bits(&reference.worker[r]));
                assert_eq!(bits(&st.server_error()), bits(&reference.server[r]));
                assert_eq!(st.calls(), calls as u64);
                assert_eq!(st.shape(), Some((n, p, r)));
            }
        }
    }
}

#[test]
fn error_feedback_loses_nothing() {
    // Σ_t x̂_t + e_s + mean_i(e_w,i) = Σ_t mean_i(x_i,t) (up to f32 rounding).
    let (p, n, calls) = (4usize, 1000usize, 50usize);
    let local = run_local(p, n, calls);
    let big_n = padded_len(n, p);
    let m = big_n / p;
    let mut lhs = vec![0.0f64; n];
    for out in &local[0].0 {
        for (l, x) in lhs.iter_mut().zip(out) {
            *l += f64::from(*x);
        }
    }
    for (i, l) in lhs.iter_mut().enumerate() {
        *l += f64::from(local[i / m].1.server_error()[i % m]);
        for (_, st) in &local {
            *l += f64::from(st.worker_error()[i]) / p as f64;
        }
    }
    let mut worst = 0.0f64;
    let mut total = 0.0f64;
    for (i, l) in lhs.iter().enumerate() {
        let want: f64 = (0..calls)
            .map(|t| (0..p).map(|r| f64::from(input(r, t, n)[i])).sum::<f64>() / p as f64)
            .sum();
        worst = worst.max((l - want).abs());
        total = total.max(want.abs());
    }
    // 50 calls of O(1) values: accumulated f32 rounding stays far below 1e-4.
    assert!(worst < 1e-4, "conservation error {worst} (max |Σ| {total})");
    // And it is not trivially satisfied: single results are far from exact.
    let err0: f32 = local[0].0[0]
        .iter()
        .enumerate()
        .map(|(i, x)| (x - (0..p).map(|r| input(r, 0, n)[i]).sum::<f32>() / p as f32).abs())
        .fold(0.0, f32::max);
    assert!(err0 > 0.01);
}

#[test]
fn bytes_match_the_formula_and_beat_f32_by_25x() {
    for p in [2usize, 4, 8] {
        let n = 100_003;
        let local = run_local(p, n, 1);
        let want = compressed_allreduce_bytes(n, p);
        let big_n = padded_len(n, p) as u64;
        let pu = p as u64;
        assert_eq!(want, (pu - 1) * (40 + 2 * (big_n / (8 * pu) + 4)));
        let f32_bytes = CommStats::allreduce_f32_bytes(p, n);
        let ratio = f32_bytes as f64 / want as f64;
        println!("p={p} n={n}: compressed {want} B/rank, f32 ring {f32_bytes} B/rank, {ratio:.1}x");
        assert!(ratio >= 25.0, "ratio {ratio}");
        for (_, st) in &local {
            assert_eq!(st.calls(), 1);
        }
    }
    assert_eq!(compressed_allreduce_bytes(1000, 1), 0);
}

fn all_ranks<T: Send>(p: usize, f: impl Fn(LocalComm) -> T + Sync) -> Vec<T> {
    let f = &f;
    std::thread::scope(|s| {
        let hs: Vec<_> = LocalComm::group_with_timeout(p, Duration::from_secs(20))
            .into_iter()
            .map(|c| s.spawn(move || f(c)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn length_mismatch_fails_on_every_rank() {
    let out = all_ranks(3, |mut c| {
        let n = if c.rank() == 2 { 17 } else { 16 };
        let mut buf = input(c.rank(), 0, n);
        let mut st = AllReduceState::new();
        let r = compressed_allreduce(&mut c, &mut buf, &mut st);
        (r, buf == input(c.rank(), 0, n), st.calls())
    });
    for (r, unchanged, calls) in out {
        assert!(matches!(
            r,
            Err(OneBitError::Comm(CommError::LengthMismatch { .. }))
        ));
        assert!(unchanged);
        assert_eq!(calls, 0);
    }
}

#[test]
fn call_counter_mismatch_fails_on_every_rank() {
    let out = all_ranks(2, |mut c| {
        let mut st = AllReduceState::new();
        if c.rank() == 0 {
            // Rank 0's state has already made one call on a one-rank group.
            let mut b = vec![1.0f32; 8];
            compressed_allreduce(&mut comm_traits::SingleRank::default(), &mut b, &mut st).unwrap();
        }
        let mut buf = vec![1.0f32; 8];
        compressed_allreduce(&mut c, &mut buf, &mut st)
    });
    let step = |local, remote| {
        Err(OneBitError::Comm(CommError::HeaderMismatch {
            field: "step",
            local,
            remote,
        }))
    };
    // Rank 0 also knows its own state is bound to a one-rank group (its own
    // verdict wins); rank 1 sees the disagreeing call counter.
    assert_eq!(
        out[0],
        Err(OneBitError::StateShape {
            expected: 1,
            found: 2
        })
    );
    assert_eq!(out[1], step(0, 1));
}

#[test]
fn different_operations_fail_on_every_rank() {
    let out = all_ranks(2, |mut c| {
        let mut buf = vec![0.5f32; 8];
        if c.rank() == 0 {
            compressed_allreduce(&mut c, &mut buf, &mut AllReduceState::new()).map(|_| ())
        } else {
            let mut opt = onebit_adam::OneBitAdam::new(8, onebit_adam::Config::default()).unwrap();
            opt.step_with_grad(&mut c, &mut buf, &[0.1; 8]).map(|_| ())
        }
    });
    for r in out {
        assert!(matches!(
            r,
            Err(OneBitError::Comm(CommError::HeaderMismatch {
                field: "op",
                ..
            }))
        ));
    }
}

#[test]
fn non_finite_input_fails_everywhere_and_changes_nothing() {
    let (p, n) = (3usize, 50usize);
    let out = all_ranks(p, |mut c| {
        let mut st = AllReduceState::new();
        let mut first = input(c.rank(), 0, n);
        compressed_allreduce(&mut c, &mut first, &mut st).unwrap();
        let mut bad = input(c.rank(), 1, n);
        if c.rank() == 1 {
            bad[7] = f32::NAN;
        }
        let before = bad.clone();
        let err = compressed_allreduce(&mut c, &mut bad, &mut st);
        let unchanged = bits(&bad) == bits(&before);
        // The group and the state are still good: the next call matches the
        // reference that never saw the failed call.
        let mut next = input(c.rank(), 1, n);
        compressed_allreduce(&mut c, &mut next, &mut st).unwrap();
        (err, unchanged, next)
    });
    let mut reference = ReferenceState::new(n, p);
    for t in 0..2 {
        let mut bufs: Vec<Vec<f32>> = (0..p).map(|r| input(r, t, n)).collect();
        simulate_allreduce(&mut bufs, &mut reference);
        if t == 1 {
            for (r, (err, unchanged, next)) in out.iter().enumerate() {
                let want = if r == 1 {
                    OneBitError::NonFinite { index: 7 }
                } else {
                    OneBitError::RemoteInput { rank: 1 }
                };
                assert_eq!(err, &Err(want));
                assert!(unchanged);
                assert_eq!(bits(next), bits(&bufs[r]));
            }
        }
    }
}

#[test]
fn single_rank_communicator_works_too() {
    let mut c = comm_traits::SingleRank::default();
    let mut st = AllReduceState::new();
    let mut buf = input(0, 0, 13);
    compressed_allreduce(&mut c, &mut buf, &mut st).unwrap();
    let mut reference = ReferenceState::new(13, 1);
    let mut bufs = vec![input(0, 0, 13)];
    simulate_allreduce(&mut bufs, &mut reference);
    assert_eq!(bits(&buf), bits(&bufs[0]));
    // An empty buffer is a no-op that still counts as a call.
    let mut empty: [f32; 0] = [];
    let mut st2 = AllReduceState::new();
    let rep = compressed_allreduce(&mut c, &mut empty, &mut st2).unwrap();
    assert_eq!((rep.len, rep.padded_len, st2.calls()), (0, 0, 1));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_inputs_match_reference(
        p in 1usize..5,
        n in 1usize..300,
        seed in any::<u64>(),
        calls in 1usize..4,
    ) {
        let make = |r: usize, t: usize| -> Vec<f32> {
            let mut s = seed ^ ((r as u64) << 32) ^ (t as u64);
            (0..n).map(|_| {
                s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                // Mix magnitudes and exact zeros.
                let v = (s >> 33) as i32 as f32 / 1024.0;
                if s.is_multiple_of(7) { 0.0 } else { v }
            }).collect()
        };
        let local: Vec<Vec<Vec<f32>>> = LocalComm::run(p, |mut c| {
            let mut st = AllReduceState::new();
            (0..calls).map(|t| {
                let mut b = make(c.rank(), t);
                compressed_allreduce(&mut c, &mut b, &mut st).unwrap();
                b
            }).collect()
        }).into_iter().map(|r| r.unwrap()).collect();
        let mut reference = ReferenceState::new(n, p);
        for t in 0..calls {
            let mut bufs: Vec<Vec<f32>> = (0..p).map(|r| make(r, t)).collect();
            simulate_allreduce(&mut bufs, &mut reference);
            for (mine, want) in local.iter().zip(&bufs) {
                prop_assert_eq!(bits(&mine[t]), bits(want));
            }
        }
    }
}
