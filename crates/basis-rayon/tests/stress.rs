//! Std-thread stress test: 8 threads × 100k updates onto 4 hot buckets.
//! Gradients are small integers, so every partial sum is exact in f32 and the
//! totals must equal the integer reference exactly — a lost update shows.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers too: a panic is a failing test"
)]

use basis_rayon::{AtomicMomentTable, MomentTable, StripedMomentTable};

const THREADS: usize = 8;
const UPDATES: usize = 100_000;
const HOT: usize = 4;
const DIM: usize = 3;

/// Gradient element `j` of update `k` on thread `thread`: an integer in -3..=3.
fn grad(thread: usize, k: usize, j: usize) -> i64 {
    ((thread * 31 + k * 7 + j * 3) % 7) as i64 - 3
}

fn bucket(thread: usize, k: usize) -> usize {
    (thread + k) % HOT
}

fn stress(table: &(impl MomentTable + ?Sized)) {
    std::thread::scope(|s| {
        for thread in 0..THREADS {
            s.spawn(move || {
                let mut g = [0.0f32; DIM];
                for k in 0..UPDATES {
                    for (j, g) in g.iter_mut().enumerate() {
                        *g = grad(thread, k, j) as f32;
                    }
                    table.accumulate(bucket(thread, k), &g).unwrap();
                }
            });
        }
    });

    let mut want_m = [[0i64; DIM]; HOT];
    let mut want_v = [[0i64; DIM]; HOT];
    let mut want_t = [0u64; HOT];
    for thread in 0..THREADS {
        for k in 0..UPDATES {
            let b = bucket(thread, k);
            want_t[b] += 1;
            for j in 0..DIM {
                let g = grad(thread, k, j);
                want_m[b][j] += g;
                want_v[b][j] += g * g;
            }
        }
    }
    // Exactness needs every partial sum below 2^24.
    assert!(want_v.iter().flatten().all(|&v| v < 1 << 24));

    for b in 0..HOT {
        let (mut m, mut v) = ([0.0f32; DIM], [0.0f32; DIM]);
        let t = table.snapshot(b, &mut m, &mut v).unwrap();
        assert_eq!(t, want_t[b], "bucket {b}: step count");
        assert_eq!(m, want_m[b].map(|x| x as f32), "bucket {b}: M");
        assert_eq!(v, want_v[b].map(|x| x as f32), "bucket {b}: V");
    }
}

#[test]
fn atomic_table_loses_no_update_under_8_threads() {
    stress(&AtomicMomentTable::new(HOT, DIM).unwrap());
}

#[test]
fn striped_table_loses_no_update_under_8_threads() {
    // Two stripes for four buckets: threads also contend on shared locks.
    stress(&StripedMomentTable::with_stripes(HOT, DIM, 2).unwrap());
}

/// Threads that own disjoint buckets (each bucket's updates come from one
/// thread, in order) must leave exactly what a single thread leaves — Adam
/// mode included, directions included — on both tables.
#[test]
fn disjoint_buckets_under_4_threads_match_one_thread_bitwise() {
    use basis_rayon::MomentParams;
    const BUCKETS: usize = 64;
    const THREADS: usize = 4;
    const STEPS: usize = 2_000;
    let params = MomentParams::default();
    let grad = |b: usize, k: usize, j: usize| ((b * 7 + k * 13 + j * 5) % 17) as f32 * 0.25 - 2.0;
    // Thread `w` runs the updates of buckets `b ≡ w (mod THREADS)`; returns a
    // checksum of the directions it saw, per bucket.
    let run = |table: &(dyn MomentTable + Sync), w: usize| -> Vec<(usize, u64)> {
        let mut sums = Vec::new();
        let (mut g, mut dir) = ([0.0f32; DIM], [0.0f32; DIM]);
        for b in (w..BUCKETS).step_by(THREADS) {
            let mut sum = 0u64;
            for k in 0..STEPS / BUCKETS * THREADS {
                for (j, g) in g.iter_mut().enumerate() {
                    *g = grad(b, k, j);
                }
                table.adam_update(b, &g, &params, &mut dir).unwrap();
                sum = dir
                    .iter()
                    .fold(sum, |s, d| s.rotate_left(5) ^ u64::from(d.to_bits()));
            }
            sums.push((b, sum));
        }
        sums
    };
    let tables: [(Box<dyn MomentTable + Sync>, Box<dyn MomentTable + Sync>); 2] = [
        (
            Box::new(AtomicMomentTable::new(BUCKETS, DIM).unwrap()),
            Box::new(AtomicMomentTable::new(BUCKETS, DIM).unwrap()),
        ),
        (
            Box::new(StripedMomentTable::with_stripes(BUCKETS, DIM, 3).unwrap()),
            Box::new(StripedMomentTable::with_stripes(BUCKETS, DIM, 3).unwrap()),
        ),
    ];
    for (serial, shared) in &tables {
        let mut want: Vec<(usize, u64)> =
            (0..THREADS).flat_map(|w| run(serial.as_ref(), w)).collect();
        let mut got: Vec<(usize, u64)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|w| s.spawn(move || run(shared.as_ref(), w)))
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want, "directions differ");
        for b in 0..BUCKETS {
            let (mut m1, mut v1, mut m2, mut v2) =
                ([0.0f32; DIM], [0.0f32; DIM], [0.0f32; DIM], [0.0f32; DIM]);
            let t1 = serial.snapshot(b, &mut m1, &mut v1).unwrap();
            let t2 = shared.snapshot(b, &mut m2, &mut v2).unwrap();
            assert_eq!(t1, t2);
            assert_eq!(
                (m1.map(f32::to_bits), v1.map(f32::to_bits)),
                (m2.map(f32::to_bits), v2.map(f32::to_bits))
            );
        }
    }
}
