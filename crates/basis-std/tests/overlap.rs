//! `Overlapped` (non-blocking collectives on a communication thread) over
//! `LocalComm`: several requests in flight complete bit-identical to the
//! blocking calls, in any wait order, with the same byte statistics; size
//! errors, a lost peer and a foreign request are typed errors.

use basis_std::local::LocalComm;
use basis_std::overlap::{Overlapped, SpawnError};
use comm_traits::nonblocking::FOREIGN_REQUEST;
use comm_traits::{CommError, CommStats, Communicator, Completed, NonBlocking, Request};

/// SplitMix64, so every rank can rebuild every input.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Floats over many magnitudes (with signed zeros), so the summation order
/// shows in the bits.
fn floats(seed: u64, rank: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let u = mix(seed ^ ((rank as u64) << 40) ^ i as u64);
            let m = match u % 13 {
                0 => -0.0,
                _ => ((u >> 8) % 2_000_000) as f32 / 1e6 - 1.0,
            };
            m * 2f32.powi(((u >> 40) % 30) as i32 - 15)
        })
        .collect()
}

fn bytes(seed: u64, rank: usize, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| mix(seed.rotate_left(9) ^ ((rank as u64) << 36) ^ i as u64) as u8)
        .collect()
}

/// One rank's result of the mixed sequence of collectives.
#[derive(Debug, PartialEq)]
enum Out {
    Bytes(Vec<u8>),
    /// Bits of the all-reduced floats (so -0.0 ≠ 0.0 and NaNs compare).
    Bits(Vec<u32>),
}

/// The sequence: `(kind, length)`, kind 0 all-gather, 1 all-to-all (chunk
/// = length), 2 all-reduce. Lengths include 0 and 1.
const PLAN: [(u8, usize); 7] = [(0, 5), (2, 37), (1, 3), (0, 0), (2, 1), (1, 0), (2, 130)];

/// The inputs of operation `k` on `rank` of `p`.
fn input(k: usize, rank: usize, p: usize) -> (u8, Vec<u8>, Vec<f32>, usize) {
    let (kind, len) = PLAN[k];
    let seed = 1000 + k as u64;
    match kind {
        0 => (kind, bytes(seed, rank, len), Vec::new(), len * p),
        1 => (kind, bytes(seed, rank, len * p), Vec::new(), len * p),
        _ => (kind, Vec::new(), floats(seed, rank, len), len),
    }
}

/// The reference: the same sequence with `LocalComm`'s blocking calls.
fn blocking(mut comm: LocalComm) -> (Vec<Out>, CommStats) {
    let (me, p) = (comm.rank(), comm.size());
    let mut outs = Vec::new();
    for (k, &(_, len)) in PLAN.iter().enumerate() {
        let (kind, send, mut buf, recv_len) = input(k, me, p);
        let mut recv = vec![0u8; recv_len];
        match kind {
            0 => comm.all_gather(&send, &mut recv).expect("all_gather"),
            1 => comm.all_to_all(&send, len, &mut recv).expect("all_to_all"),
            _ => comm.all_reduce_sum(&mut buf).expect("all_reduce_sum"),
        }
        outs.push(if kind == 2 {
            Out::Bits(buf.iter().map(|x| x.to_bits()).collect())
        } else {
            Out::Bytes(recv)
        });
    }
    (outs, comm.stats())
}

/// The same sequence, all started before any wait, waited in the order
/// `order(rank)` (a permutation of the plan's indices).
fn overlapped(comm: LocalComm, order: &[usize]) -> (Vec<Out>, CommStats) {
    let mut comm = Overlapped::spawn(move || Ok::<_, ()>(comm)).expect("spawn");
    let (me, p) = (comm.rank(), comm.size());
    let mut reqs: Vec<Option<Request>> = (0..PLAN.len())
        .map(|k| {
            let (kind, send, buf, recv_len) = input(k, me, p);
            // Garbage in the receive buffer: it must be overwritten.
            let recv = vec![0xA5u8; recv_len];
            Some(match kind {
                0 => comm.start_all_gather(send, recv),
                1 => comm.start_all_to_all(send, PLAN[k].1, recv),
                _ => comm.start_all_reduce_sum(buf),
            })
            .map(|r| r.expect("start"))
        })
        .collect();
    let mut outs: Vec<Option<Out>> = (0..PLAN.len()).map(|_| None).collect();
    for &k in order {
        let req = reqs[k].take().expect("each request waited once");
        outs[k] = Some(match comm.wait(req).expect("wait") {
            Completed::Bytes { send, recv } => {
                assert_eq!(send, input(k, me, p).1, "send buffer handed back intact");
                Out::Bytes(recv)
            }
            Completed::Floats(v) => Out::Bits(v.iter().map(|x| x.to_bits()).collect()),
            other => panic!("unexpected completion {other:?}"),
        });
    }
    let outs = outs.into_iter().map(|o| o.expect("waited")).collect();
    (outs, comm.stats())
}

/// Rank `me`'s wait order: forward, reversed, or rotated by the rank.
fn order(me: usize) -> Vec<usize> {
    let n = PLAN.len();
    match me % 3 {
        0 => (0..n).collect(),
        1 => (0..n).rev().collect(),
        _ => (0..n).map(|i| (i + me + 2) % n).collect(),
    }
}

#[test]
fn requests_in_flight_equal_blocking_bit_for_bit_in_any_wait_order() {
    for p in [2, 3, 4] {
        let want: Vec<_> = LocalComm::run(p, blocking)
            .into_iter()
            .map(|r| r.expect("no panic"))
            .collect();
        let got: Vec<_> = LocalComm::run(p, |c| {
            let me = c.rank();
            overlapped(c, &order(me))
        })
        .into_iter()
        .map(|r| r.expect("no panic"))
        .collect();
        for (me, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.0, w.0, "P = {p}, rank {me}: results differ");
            assert_eq!(g.1, w.1, "P = {p}, rank {me}: statistics differ");
            assert_eq!(g.1.calls, PLAN.len() as u64);
        }
        // The reference is not trivial: rank 0 gathered every rank's bytes.
        let Out::Bytes(first) = &want[0].0[0] else {
            panic!("plan starts with an all-gather")
        };
        assert_eq!(first[5..10], bytes(1000, 1, 5)[..]);
    }
}

#[test]
fn blocking_calls_through_the_thread_keep_their_place_among_requests() {
    let outs = LocalComm::run(3, |c| {
        let mut comm = Overlapped::spawn(move || Ok::<_, ()>(c)).expect("spawn");
        let me = comm.rank() as u8;
        let a = comm.start_all_gather(vec![me], vec![0; 3])?;
        // Blocking calls queue behind `a` on every rank.
        let mut x = [f32::from(me)];
        comm.all_reduce_sum(&mut x)?;
        let mut counts = [0u64; 3];
        comm.all_to_all_counts(&[u64::from(me); 3], &mut counts)?;
        let mut v = vec![0u8; 3];
        comm.all_to_all_v(&[me; 3], &[1, 1, 1], &mut v, &[1, 1, 1])?;
        comm.barrier()?;
        assert!(comm.test(&a)?, "a finished before the later blocking calls");
        let gathered = comm.wait(a)?.into_recv();
        Ok::<_, CommError>((gathered, x, counts, v))
    });
    for out in outs {
        let (gathered, x, counts, v) = out.expect("no panic").expect("collectives");
        assert_eq!(gathered, Some(vec![0, 1, 2]));
        assert_eq!(x, [3.0]);
        assert_eq!(counts, [0, 1, 2]);
        assert_eq!(v, [0, 1, 2]);
    }
}

#[test]
fn wrong_sizes_are_refused_on_every_rank_and_the_group_stays_usable() {
    let outs = LocalComm::run(3, |c| {
        let mut comm = Overlapped::spawn(move || Ok::<_, ()>(c)).expect("spawn");
        let me = comm.rank();
        // Rank 1's receive buffer is one byte short.
        let recv_len = if me == 1 { 5 } else { 6 };
        let bad = comm.start_all_gather(vec![1, 2], vec![0; recv_len])?;
        // Rank 2's all-to-all send is not size()·chunk bytes.
        let send_len = if me == 2 { 7 } else { 6 };
        let bad2 = comm.start_all_to_all(vec![0; send_len], 2, vec![0; 6])?;
        let good = comm.start_all_reduce_sum(vec![1.0; 4])?;
        Ok::<_, CommError>((
            me,
            comm.wait(bad).err(),
            comm.wait(bad2).err(),
            comm.wait(good)?.into_floats(),
        ))
    });
    for out in outs {
        let (me, e1, e2, sum) = out.expect("no panic").expect("good collective");
        match e1 {
            Some(CommError::BadArgument(_)) => assert_eq!(me, 1),
            Some(CommError::LengthMismatch { .. }) => assert_ne!(me, 1),
            other => panic!("rank {me}: all_gather gave {other:?}"),
        }
        match e2 {
            Some(CommError::BadArgument(_)) => assert_eq!(me, 2),
            Some(CommError::LengthMismatch { .. }) => assert_ne!(me, 2),
            other => panic!("rank {me}: all_to_all gave {other:?}"),
        }
        assert_eq!(sum, Some(vec![3.0; 4]), "rank {me}");
    }
}

#[test]
fn a_peer_lost_while_requests_are_in_flight_is_peer_lost() {
    let outs = LocalComm::run(3, |c| {
        let mut comm = Overlapped::spawn(move || Ok::<_, ()>(c)).expect("spawn");
        if comm.rank() == 2 {
            // Leaves without taking part: its communicator is dropped.
            return Ok(None);
        }
        let a = comm.start_all_gather(vec![1], vec![0; 3])?;
        let b = comm.start_all_reduce_sum(vec![1.0])?;
        Ok::<_, CommError>(Some((comm.wait(b).err(), comm.wait(a).err())))
    });
    for (me, out) in outs.into_iter().enumerate().take(2) {
        let (eb, ea) = out.expect("no panic").expect("started").expect("rank 0/1");
        for e in [ea, eb] {
            assert!(
                matches!(e, Some(CommError::PeerLost { rank: Some(2) })),
                "rank {me}: {e:?}"
            );
        }
    }
}

#[test]
fn a_request_of_another_communicator_is_refused() {
    let mut a = Overlapped::spawn(|| Ok::<_, ()>(comm_traits::SingleRank::default())).expect("a");
    let mut b = Overlapped::spawn(|| Ok::<_, ()>(comm_traits::SingleRank::default())).expect("b");
    let ra = a.start_all_gather(vec![7], vec![0]).expect("start");
    let rb = b.start_all_gather(vec![8], vec![0]).expect("start");
    assert_eq!(b.test(&ra), Err(CommError::BadArgument(FOREIGN_REQUEST)));
    assert_eq!(
        b.wait(ra).err(),
        Some(CommError::BadArgument(FOREIGN_REQUEST))
    );
    // The refusal lost nothing: b's own request is intact, and a's result
    // (whose request was consumed by the refused wait) does not block a.
    assert_eq!(b.wait(rb).expect("wait").into_recv(), Some(vec![8]));
    let r2 = a.start_all_gather(vec![9], vec![0]).expect("start");
    assert_eq!(a.wait(r2).expect("wait").into_recv(), Some(vec![9]));
    assert_eq!(a.stats().calls, 2);
}

#[test]
fn a_failing_constructor_is_reported() {
    let e = Overlapped::spawn(|| Err::<comm_traits::SingleRank, _>("no MPI here"));
    assert_eq!(e.err(), Some(SpawnError::Make("no MPI here")));
    let e = Overlapped::spawn(|| -> Result<comm_traits::SingleRank, ()> {
        panic!("constructor panics")
    });
    assert_eq!(e.err(), Some(SpawnError::Thread));
}
