//! Distributed faults on `LocalComm`: a rank that exits in the middle of a
//! compressed all-reduce or of a 1-bit Adam run, or that stalls, makes every
//! other rank return an error — never hang.
//!
//! Each group runs under a watchdog thread: if the ranks have not all
//! returned within [`WATCHDOG`], the test fails with "hang" instead of
//! blocking CI forever.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failing test, not a user-facing crash"
)]

use core::time::Duration;
use std::sync::mpsc;
use std::time::Instant;

use basis::adam::{AllReduceState, Config, OneBitAdam, OneBitError, compressed_allreduce};
use basis::comm::{CommError, Communicator};
use basis_std::fault::ExitsAt;
use basis_std::local::LocalComm;

/// Far above any legitimate run of these tiny workloads.
const WATCHDOG: Duration = Duration::from_secs(20);

/// Run `work` on `p` ranks, rank `p − 1` exiting at its `die_at`-th
/// collective; return each rank's result and the number of collective calls
/// each rank made, or fail the test if the group does not finish in time.
fn run_group<T: Send + 'static>(
    p: usize,
    die_at: Option<u64>,
    timeout: Option<Duration>,
    work: fn(&mut ExitsAt<LocalComm>) -> T,
) -> Vec<(T, u64)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let comms = match timeout {
            Some(t) => LocalComm::group_with_timeout(p, t),
            None => LocalComm::group(p),
        };
        let handles: Vec<_> = comms
            .into_iter()
            .map(|c| {
                let die = if c.rank() == p - 1 { die_at } else { None };
                std::thread::spawn(move || {
                    let mut c = ExitsAt::new(c, die);
                    let out = work(&mut c);
                    (out, c.calls())
                })
            })
            .collect();
        let out: Vec<(T, u64)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let _ = tx.send(out);
    });
    rx.recv_timeout(WATCHDOG)
        .unwrap_or_else(|_| panic!("hang: p={p} die_at={die_at:?} did not finish in {WATCHDOG:?}"))
}

const ROUNDS: usize = 3;

/// Three compressed all-reduces of an awkward length.
fn three_allreduces(c: &mut ExitsAt<LocalComm>) -> Result<(), OneBitError> {
    let mut state = AllReduceState::new();
    for round in 0..ROUNDS {
        let mut buf: Vec<f32> = (0..37)
            .map(|i| ((i * 7 + c.rank() * 3 + round) % 11) as f32 - 5.0)
            .collect();
        compressed_allreduce(c, &mut buf, &mut state)?;
    }
    Ok(())
}

fn is_lost_peer(e: &OneBitError) -> bool {
    matches!(
        e,
        OneBitError::Comm(CommError::PeerLost { .. } | CommError::Timeout)
    )
}

#[test]
fn a_rank_exiting_at_any_collective_of_compressed_allreduce_fails_every_other_rank() {
    for p in [2usize, 3, 4] {
        let healthy = run_group(p, None, None, three_allreduces);
        assert!(healthy.iter().all(|(r, _)| r.is_ok()), "p={p}: {healthy:?}");
        let total_calls = healthy[0].1;
        assert!(total_calls >= 3 * ROUNDS as u64, "{total_calls}");
        // Exit before each collective of the run: the header exchange, the
        // all-to-all of signs, the scale and server gathers, of every round.
        for die_at in 0..total_calls {
            let out = run_group(p, Some(die_at), None, three_allreduces);
            for (rank, (result, calls)) in out.iter().enumerate().take(p - 1) {
                let err = result
                    .as_ref()
                    .expect_err("a survivor finished without its peer");
                assert!(
                    is_lost_peer(err),
                    "p={p} die_at={die_at} rank {rank}: {err:?}"
                );
                assert!(!err.to_string().is_empty(), "errors explain themselves");
                // The survivor stopped at the collective its peer never joined.
                assert_eq!(*calls, die_at + 1, "p={p} die_at={die_at} rank {rank}");
            }
        }
    }
}

/// Train a tiny least-squares model with 1-bit Adam (freeze after 3 steps).
fn train(c: &mut ExitsAt<LocalComm>) -> Result<Vec<f32>, OneBitError> {
    const N: usize = 50;
    let config = Config::default().with_lr(1e-2).with_freeze_step(3);
    let mut opt = OneBitAdam::new(N, config)?;
    let mut x = vec![0.0f32; N];
    for step in 0..12 {
        let grad: Vec<f32> = x
            .iter()
            .enumerate()
            .map(|(i, xi)| xi - ((i + c.rank() + step) % 5) as f32)
            .collect();
        opt.step_with_grad(c, &mut x, &grad)?;
    }
    Ok(x)
}

#[test]
fn a_rank_exiting_mid_training_fails_the_others_in_both_stages() {
    let p = 3;
    let healthy = run_group(p, None, None, train);
    assert!(healthy.iter().all(|(r, _)| r.is_ok()), "{healthy:?}");
    let total = healthy[0].1;
    // Every rank ends with the same parameters when nobody dies.
    let first = healthy[0].0.as_ref().unwrap();
    assert!(healthy.iter().all(|(r, _)| r.as_ref().unwrap() == first));
    // Warm-up (full precision) and 1-bit stage, early and late.
    for die_at in [0, 1, total / 4, total / 2, total - 2, total - 1] {
        let out = run_group(p, Some(die_at), None, train);
        for (rank, (result, _)) in out.iter().enumerate().take(p - 1) {
            let err = result
                .as_ref()
                .expect_err("a survivor finished without its peer");
            assert!(is_lost_peer(err), "die_at={die_at} rank {rank}: {err:?}");
        }
    }
}

/// Rank `p − 1` stalls (alive, computing, not calling) for 3 s before its
/// first collective; the others have a 200 ms collective timeout.
fn stall_then_barrier(c: &mut ExitsAt<LocalComm>) -> (Result<(), CommError>, Duration) {
    let start = Instant::now();
    if c.rank() == c.size() - 1 {
        std::thread::sleep(Duration::from_secs(3));
    }
    let r = c.barrier();
    (r, start.elapsed())
}

#[test]
fn a_stalled_rank_times_the_others_out_and_learns_it_was_dropped() {
    let p = 3;
    let out = run_group(
        p,
        None,
        Some(Duration::from_millis(200)),
        stall_then_barrier,
    );
    let mut timeouts = 0;
    for (rank, ((result, waited), _)) in out.iter().enumerate() {
        if rank == p - 1 {
            // It comes back to a dead group and is told so.
            assert!(
                matches!(result, Err(CommError::PeerLost { .. })),
                "{result:?}"
            );
            continue;
        }
        match result {
            Err(CommError::Timeout) => timeouts += 1,
            Err(CommError::PeerLost { .. }) => {}
            other => panic!("rank {rank}: {other:?}"),
        }
        // Well before the stalled rank wakes up (3 s): no one waited for it.
        assert!(
            *waited < Duration::from_millis(2500),
            "rank {rank} waited {waited:?}"
        );
    }
    assert!(timeouts >= 1, "the first rank to give up reports Timeout");
}
