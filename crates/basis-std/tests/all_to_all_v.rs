//! `LocalComm::all_to_all_v` and `all_to_all_counts` against an obviously
//! correct reference (rank `j` receives the concatenation over `i` of the
//! chunk `i → j`), with random counts including empty chunks and all-to-one
//! skew; disagreements and a lost peer are errors on every rank.

#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use basis_std::local::LocalComm;
use comm_traits::{CommError, Communicator, V_COUNTS};
use proptest::prelude::*;

/// The bytes rank `i` sends to rank `j`: `n` bytes that name their route.
fn chunk(i: usize, j: usize, n: usize) -> Vec<u8> {
    (0..n).map(|k| (i * 31 + j * 7 + k * 13) as u8).collect()
}

/// Rank `me`'s arguments for the count matrix `m` (`m[i][j]` bytes `i → j`).
fn args(m: &[Vec<usize>], me: usize) -> (Vec<u8>, Vec<usize>, Vec<usize>) {
    let p = m.len();
    let send: Vec<u8> = (0..p).flat_map(|j| chunk(me, j, m[me][j])).collect();
    let send_counts = m[me].clone();
    let recv_counts = (0..p).map(|i| m[i][me]).collect();
    (send, send_counts, recv_counts)
}

/// The slow reference: what rank `j` must hold afterwards.
fn reference(m: &[Vec<usize>], j: usize) -> Vec<u8> {
    (0..m.len()).flat_map(|i| chunk(i, j, m[i][j])).collect()
}

fn run_matrix(m: &[Vec<usize>]) -> Vec<(Vec<u8>, comm_traits::CommStats)> {
    LocalComm::run(m.len(), |mut c| {
        let (send, sc, rc) = args(m, c.rank());
        let mut recv = vec![0u8; rc.iter().sum()];
        c.all_to_all_v(&send, &sc, &mut recv, &rc).unwrap();
        (recv, c.stats())
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

fn matrix() -> impl Strategy<Value = Vec<Vec<usize>>> {
    (1usize..6, any::<bool>()).prop_flat_map(|(p, skew)| {
        prop::collection::vec(prop::collection::vec(0usize..40, p), p).prop_map(move |mut m| {
            if skew {
                // Everything goes to rank 0 (all ids hash to one owner).
                for row in &mut m {
                    for c in row.iter_mut().skip(1) {
                        *c = 0;
                    }
                }
            }
            m
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn routes_bytes_like_the_reference(m in matrix()) {
        let p = m.len();
        for (j, (recv, stats)) in run_matrix(&m).into_iter().enumerate() {
            prop_assert_eq!(&recv, &reference(&m, j));
            let sent: usize = (0..p).filter(|&k| k != j).map(|k| m[j][k]).sum();
            let got: usize = (0..p).filter(|&k| k != j).map(|k| m[k][j]).sum();
            prop_assert_eq!(stats.bytes_sent, sent as u64);
            prop_assert_eq!(stats.bytes_received, got as u64);
            prop_assert_eq!(stats.calls, 1);
        }
    }

    /// Many rounds on one group, of varying sizes (a large one between small
    /// ones) and mixed with `all_to_all_counts` and `all_gather`: each rank
    /// fills byte buffers handed back from earlier rounds, and no stale byte
    /// of an earlier, larger round may reach a later one.
    #[test]
    fn rounds_on_one_group_route_like_the_reference(
        p in 1usize..5,
        sizes in prop::collection::vec((0usize..300, any::<bool>()), 1..8),
    ) {
        // Round r's matrix: every chunk `i → j` of size n_r (scaled per pair).
        let mat = |n: usize| -> Vec<Vec<usize>> {
            (0..p).map(|i| (0..p).map(|j| (n * (i + 2 * j + 1)) % 301).collect()).collect()
        };
        let out = LocalComm::run(p, |mut c| {
            let me = c.rank();
            let mut got = Vec::new();
            for &(n, gather) in &sizes {
                let m = mat(n);
                let (send, sc, rc) = args(&m, me);
                let mut recv = vec![0xAAu8; rc.iter().sum()];
                c.all_to_all_v(&send, &sc, &mut recv, &rc).unwrap();
                got.push(recv);
                if gather {
                    let mut all = vec![0u8; p];
                    c.all_gather(&[me as u8], &mut all).unwrap();
                    got.push(all);
                } else {
                    let mut counts = vec![0u64; p];
                    c.all_to_all_counts(&vec![n as u64; p], &mut counts).unwrap();
                    got.push(counts.iter().map(|&x| x as u8).collect());
                }
            }
            got
        });
        for (j, r) in out.into_iter().enumerate() {
            let mut want = Vec::new();
            for &(n, gather) in &sizes {
                want.push(reference(&mat(n), j));
                want.push(if gather {
                    (0..p).map(|i| i as u8).collect()
                } else {
                    vec![n as u8; p]
                });
            }
            prop_assert_eq!(r.unwrap(), want);
        }
    }

    #[test]
    fn counts_are_transposed(p in 1usize..6, seed in any::<u64>()) {
        let val = |i: usize, j: usize| seed ^ ((i as u64) << 32) ^ j as u64;
        let out = LocalComm::run(p, |mut c| {
            let me = c.rank();
            let send: Vec<u64> = (0..p).map(|j| val(me, j)).collect();
            let mut recv = vec![0u64; p];
            c.all_to_all_counts(&send, &mut recv).unwrap();
            recv
        });
        for (j, r) in out.into_iter().enumerate() {
            let want: Vec<u64> = (0..p).map(|i| val(i, j)).collect();
            prop_assert_eq!(r.unwrap(), want);
        }
    }
}

#[test]
fn disagreeing_counts_fail_on_every_rank_and_the_group_survives() {
    let m = vec![vec![2, 3, 0], vec![1, 0, 4], vec![5, 5, 5]];
    let out = LocalComm::run(3, |mut c| {
        let me = c.rank();
        let (send, sc, mut rc) = args(&m, me);
        if me == 1 {
            rc[0] += 1; // rank 1 expects 4 bytes from rank 0, which sends 3
        }
        let mut recv = vec![0u8; rc.iter().sum()];
        let bad = c.all_to_all_v(&send, &sc, &mut recv, &rc);
        // The same call with consistent counts works afterwards.
        let (send, sc, rc) = args(&m, me);
        let mut recv = vec![0u8; rc.iter().sum()];
        c.all_to_all_v(&send, &sc, &mut recv, &rc).unwrap();
        (bad, recv == reference(&m, me))
    });
    for (r, o) in out.into_iter().enumerate() {
        let (bad, good) = o.unwrap();
        let want = CommError::LengthMismatch {
            local: 4,
            remote: 3,
        };
        assert_eq!(bad, Err(want), "rank {r}");
        assert!(good, "rank {r}");
    }
}

#[test]
fn counts_that_do_not_fit_are_bad_argument_here_and_mismatch_elsewhere() {
    let out = LocalComm::run(3, |mut c| {
        let me = c.rank();
        let m = vec![vec![1; 3]; 3];
        let (send, mut sc, rc) = args(&m, me);
        if me == 2 {
            sc.pop(); // two counts on three ranks
        }
        let mut recv = vec![0u8; 3];
        let v = c.all_to_all_v(&send, &sc, &mut recv, &rc);
        let short = if me == 0 { 2 } else { 3 };
        let k = c.all_to_all_counts(&vec![0; short], &mut [0; 3]);
        (v, k)
    });
    for (r, o) in out.into_iter().enumerate() {
        let (v, k) = o.unwrap();
        if r == 2 {
            assert_eq!(v, Err(CommError::BadArgument(V_COUNTS)));
        } else {
            assert!(matches!(v, Err(CommError::LengthMismatch { .. })), "{v:?}");
        }
        if r == 0 {
            assert_eq!(k, Err(CommError::BadArgument(comm_traits::COUNTS_LEN)));
        } else {
            assert!(matches!(k, Err(CommError::LengthMismatch { .. })), "{k:?}");
        }
    }
}

#[test]
fn a_dropped_peer_is_peer_lost_not_a_hang() {
    let out = LocalComm::run(3, |mut c| {
        if c.rank() == 1 {
            return Ok(()); // leaves before the exchange: its drop poisons the group
        }
        let m = vec![vec![1; 3]; 3];
        let (send, sc, rc) = args(&m, c.rank());
        let mut recv = vec![0u8; 3];
        c.all_to_all_v(&send, &sc, &mut recv, &rc)
    });
    let errs: Vec<_> = out.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(errs[1], Ok(()));
    for r in [0, 2] {
        assert_eq!(errs[r], Err(CommError::PeerLost { rank: Some(1) }));
    }
}
