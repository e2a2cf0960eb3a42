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
