//! `overlapped_allreduce` (buckets pipelined over non-blocking collectives)
//! against `compressed_allreduce` called once per bucket: buffers,
//! error-feedback states, scales and bytes bit-identical on `LocalComm`
//! (P = 2, 3, 4, several calls so the error feedback carries over), and the
//! error cases leave everything unchanged.

use basis_std::local::LocalComm;
use basis_std::overlap::Overlapped;
use comm_traits::Communicator;
use onebit_adam::testing::bits;
use onebit_adam::{
    AllReduceReport, AllReduceState, OneBitError, compressed_allreduce, overlapped_allreduce,
};

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Bucket `b` of call `call` on `rank`: gradients over several magnitudes.
fn grad(call: u64, b: usize, rank: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let u = mix((call << 48) ^ ((b as u64) << 40) ^ ((rank as u64) << 32) ^ i as u64);
            let m = ((u >> 8) % 2_000_000) as f32 / 1e6 - 1.0;
            m * 2f32.powi(((u >> 40) % 12) as i32 - 6)
        })
        .collect()
}

fn lengths(p: usize) -> Vec<usize> {
    vec![0, 1, 37, 8 * p, 1000, 4099]
}

const CALLS: u64 = 3;

/// Everything a call sequence leaves behind, as bits.
#[derive(Debug, PartialEq)]
struct Trace {
    buckets: Vec<Vec<u32>>,
    states: Vec<(u64, Vec<u32>, Vec<u32>)>,
    reports: Vec<(usize, usize, u32, u32, comm_traits::CommStats)>,
    stats: comm_traits::CommStats,
}

fn report_bits(r: &AllReduceReport) -> (usize, usize, u32, u32, comm_traits::CommStats) {
    (
        r.len,
        r.padded_len,
        r.worker_scale.to_bits(),
        r.server_scale.to_bits(),
        r.bytes,
    )
}

fn trace(
    bufs: &[Vec<f32>],
    states: &[AllReduceState],
    reports: Vec<(usize, usize, u32, u32, comm_traits::CommStats)>,
    stats: comm_traits::CommStats,
) -> Trace {
    Trace {
        buckets: bufs.iter().map(|b| bits(b)).collect(),
        states: states
            .iter()
            .map(|s| (s.calls(), bits(&s.worker_error()), bits(&s.server_error())))
            .collect(),
        reports,
        stats,
    }
}

fn blocking(mut comm: LocalComm) -> Trace {
    let (p, me) = (comm.size(), comm.rank());
    let lens = lengths(p);
    let mut states = vec![AllReduceState::new(); lens.len()];
    let mut reports = Vec::new();
    let mut bufs = Vec::new();
    for call in 0..CALLS {
        bufs = lens
            .iter()
            .enumerate()
            .map(|(b, &n)| grad(call, b, me, n))
            .collect();
        for (buf, state) in bufs.iter_mut().zip(&mut states) {
            let r = compressed_allreduce(&mut comm, buf, state).expect("blocking");
            reports.push(report_bits(&r));
        }
    }
    trace(&bufs, &states, reports, comm.stats())
}

fn overlapped(comm: LocalComm) -> Trace {
    let mut comm = Overlapped::spawn(move || Ok::<_, ()>(comm)).expect("spawn");
    let (p, me) = (comm.size(), comm.rank());
    let lens = lengths(p);
    let mut states = vec![AllReduceState::new(); lens.len()];
    let mut reports = Vec::new();
    let mut bufs: Vec<Vec<f32>> = Vec::new();
    for call in 0..CALLS {
        bufs = lens
            .iter()
            .enumerate()
            .map(|(b, &n)| grad(call, b, me, n))
            .collect();
        let mut views: Vec<&mut [f32]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        let rs = overlapped_allreduce(&mut comm, &mut views, &mut states).expect("overlapped");
        reports.extend(rs.iter().map(report_bits));
    }
    trace(&bufs, &states, reports, comm.stats())
}

#[test]
fn overlapped_buckets_equal_one_compressed_allreduce_per_bucket_bit_for_bit() {
    for p in [2, 3, 4] {
        let want: Vec<Trace> = LocalComm::run(p, blocking)
            .into_iter()
            .map(|r| r.expect("no panic"))
            .collect();
        let got: Vec<Trace> = LocalComm::run(p, overlapped)
            .into_iter()
            .map(|r| r.expect("no panic"))
            .collect();
        for (me, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "P = {p}, rank {me}");
        }
        // Not trivial: the reduction moved the values and left error behind.
        let w = &want[0];
        assert_ne!(w.buckets[5], bits(&grad(CALLS - 1, 5, 0, 4099)));
        assert!(w.states[5].1.iter().any(|&e| f32::from_bits(e) != 0.0));
        // Every rank ends with the same buckets.
        assert!(want.iter().all(|t| t.buckets == w.buckets));
    }
}

#[test]
fn a_bad_bucket_fails_on_every_rank_and_changes_nothing() {
    let outs = LocalComm::run(3, |comm| {
        let mut comm = Overlapped::spawn(move || Ok::<_, ()>(comm)).expect("spawn");
        let me = comm.rank();
        let mut a = vec![1.0f32; 50];
        let mut b = vec![2.0f32; 20];
        if me == 1 {
            b[7] = f32::NAN;
        }
        let (a0, b0) = (a.clone(), b.clone());
        let mut states = vec![AllReduceState::new(); 2];
        let r = overlapped_allreduce(&mut comm, &mut [&mut a[..], &mut b[..]], &mut states);
        let unchanged = bits(&a) == bits(&a0)
            && bits(&b) == bits(&b0)
            && states.iter().all(|s| s.calls() == 0 && s.shape().is_none());
        // One state for two buckets: refused before any communication.
        let wrong =
            overlapped_allreduce(&mut comm, &mut [&mut a[..], &mut b[..]], &mut states[..1]);
        (me, r.err(), unchanged, wrong.err())
    });
    for out in outs {
        let (me, err, unchanged, wrong) = out.expect("no panic");
        match err {
            Some(OneBitError::NonFinite { index: 7 }) => assert_eq!(me, 1),
            Some(OneBitError::RemoteInput { rank: 1 }) => assert_ne!(me, 1),
            other => panic!("rank {me}: {other:?}"),
        }
        assert!(unchanged, "rank {me}: buffers or states changed");
        assert!(
            matches!(wrong, Some(OneBitError::Config(_))),
            "rank {me}: {wrong:?}"
        );
    }
}
