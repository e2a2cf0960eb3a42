//! The tower's products split over the threads of the current rayon pool
//! (`--threads`), with results that do not depend on the thread count.
//!
//! A product `C = A·B` is split by **rows of `C`** only (rows of `A`): the
//! inner dimension `k` is never cut, so every element of `C` is computed by
//! the same k-ordered accumulation whatever the split, and no partial sums
//! are ever added across threads. `matrixmultiply` computes an element from
//! its row of `A` and column of `B` alone (its blocking of `k` is fixed and
//! does not depend on `m` or `n`; edge tiles run the same kernel), so a split
//! product equals the whole product bit for bit —
//! `gemm::tests::a_product_split_by_rows_equals_the_whole_bit_for_bit`
//! checks it on this CPU's kernel, and the models' tests check whole
//! forward/backward passes at 1, 2 and 3 threads.
//!
//! Which split, then, is a matter of speed: one block per thread (a block
//! repacks the whole `B`, so fewer blocks pack less), in multiples of 8 rows
//! (the kernels' tile height), and no split at all for products too small
//! to pay for waking a thread.

#[cfg(test)]
use super::gemm::{Mat, matmul};
use core::ops::Range;
use rayon::prelude::*;

/// Products below this many multiply-adds run on the calling thread: about
/// 30 µs of work, several times the cost of handing a task to another thread.
const MIN_PARALLEL_MACS: usize = 1 << 20;

/// Row blocks are multiples of this (the micro-kernel's tile height).
const ROW_ALIGN: usize = 8;

/// Threads of the pool this call runs in (1: everything stays on the caller).
pub(crate) fn threads() -> usize {
    rayon::current_num_threads().max(1)
}

/// The row blocks of an `m`-row product over `threads` threads: `m` split
/// into at most `threads` ranges of whole multiples of [`ROW_ALIGN`] (the
/// last takes the rest). `macs` is the product's multiply-add count.
fn row_blocks(m: usize, macs: usize, threads: usize) -> usize {
    if threads <= 1 || macs < MIN_PARALLEL_MACS {
        return 1;
    }
    threads.min(m.div_ceil(ROW_ALIGN)).max(1)
}

/// Rows per block for `blocks` blocks over `m` rows (a multiple of
/// [`ROW_ALIGN`], at least one).
fn block_rows(m: usize, blocks: usize) -> usize {
    m.div_ceil(blocks).div_ceil(ROW_ALIGN).max(1) * ROW_ALIGN
}

/// Split the `m × n` row-major output `c` of a product of `macs`
/// multiply-adds into blocks of rows and run `f(rows, block)` on each, on
/// the pool's threads; `f` computes its block (typically a [`super::gemm::Mat::row_range`]
/// product with its own prologue and epilogue while the block is in cache).
/// Blocks are whole rows, so a product never has its inner dimension cut
/// and the result does not depend on the thread count (see the module doc).
pub(crate) fn row_blocks_mut(
    c: &mut [f32],
    m: usize,
    n: usize,
    macs: usize,
    f: impl Fn(Range<usize>, &mut [f32]) + Sync,
) {
    assert_eq!(c.len(), m * n, "C length");
    let blocks = row_blocks(m, macs, threads());
    if blocks <= 1 || n == 0 {
        f(0..m, c);
        return;
    }
    let rows = block_rows(m, blocks);
    c.par_chunks_mut(rows * n).enumerate().for_each(|(i, cb)| {
        f(i * rows..i * rows + cb.len() / n, cb);
    });
}

/// `c = a · b` (`accumulate`: `c += a · b`) over the pool's threads, by
/// blocks of rows ([`row_blocks_mut`]); same contract as [`matmul`].
#[cfg(test)]
pub(crate) fn matmul_par(a: Mat<'_>, b: Mat<'_>, c: &mut [f32], accumulate: bool) {
    let macs = a.rows.saturating_mul(a.cols).saturating_mul(b.cols);
    row_blocks_mut(c, a.rows, b.cols, macs, |r, cb| {
        matmul(a.row_range(r), b, cb, accumulate);
    });
}

/// Size the process's thread pool for `--threads` (`None`: the machine's
/// cores divided by `workers`, the ranks sharing it, at least 1); returns the
/// count. Every rank of the process shares the pool. Call once, before any
/// step; a second call in one process keeps the first pool and fails
/// unless it asked for the same count.
///
/// Fails with a message naming `--threads` when the pool cannot be built.
pub(crate) fn init_pool(requested: Option<usize>, workers: usize) -> Result<usize, String> {
    let n = requested.unwrap_or_else(|| {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        (cores / workers.max(1)).max(1)
    });
    match rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()
    {
        Ok(()) => Ok(n),
        Err(_) if rayon::current_num_threads() == n => Ok(n),
        Err(e) => Err(format!("--threads {n}: {e}")),
    }
}

/// Run `a` and `b`, on two threads when the pool has them.
pub(crate) fn join(a: impl FnOnce() + Send, b: impl FnOnce() + Send) {
    if threads() <= 1 {
        a();
        b();
    } else {
        rayon::join(a, b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_the_rows_in_aligned_ranges() {
        for m in [1, 7, 8, 9, 64, 255, 256, 1000] {
            for t in 1..=5 {
                let blocks = row_blocks(m, usize::MAX, t);
                assert!((1..=t).contains(&blocks), "{m} rows {t} threads");
                let rows = block_rows(m, blocks);
                assert_eq!(rows % ROW_ALIGN, 0);
                assert!(m.div_ceil(rows) <= blocks, "{m} rows {t} threads");
            }
        }
        assert_eq!(row_blocks(4096, MIN_PARALLEL_MACS - 1, 8), 1);
        assert_eq!(row_blocks(4096, MIN_PARALLEL_MACS, 1), 1);
    }

    /// A random batch: 192 examples over 5 fields of 300 rows (k = 16), one
    /// or two features per field, 4 dense features each.
    fn random_batch(rng: &mut crate::rng::Rng) -> (Vec<f32>, crate::deep::LocalBatch) {
        let (n_rows, k) = (300, 16);
        let mut b = crate::deep::LocalBatch::default();
        b.clear();
        b.dense_width = 4;
        for id in 0..n_rows {
            b.push_row(id);
        }
        let rows = (0..n_rows as usize * (k + 1))
            .map(|_| 0.3 * rng.normal() as f32)
            .collect();
        for _ in 0..192 {
            for f in 0..5u8 {
                for _ in 0..=rng.below(2) {
                    b.push_feature(rng.below(300) as u32, rng.uniform() as f32 + 0.5, f);
                }
            }
            let dense: Vec<f32> = (0..4).map(|_| rng.normal() as f32).collect();
            b.end_example_with_dense(rng.below(2) as f32, &dense);
        }
        (rows, b)
    }

    #[test]
    fn deepfm_and_dlrm_steps_are_the_same_bits_at_1_2_and_3_threads() {
        use crate::deep::{DeepFm, DeepGrads, Dlrm, Tower, Workspace};
        let mut rng = crate::rng::Rng::new(17);
        let (rows, batch) = random_batch(&mut rng);
        // Towers whose products are large enough to be split.
        let towers = [
            Tower::DeepFm(DeepFm::new(16, 5, &[128, 64, 1]).unwrap()),
            Tower::Dlrm(Dlrm::new(16, 5, 4, &[32], &[256, 64, 1]).unwrap()),
        ];
        for tower in &towers {
            let dense = tower.init_dense(3).unwrap();
            let run = |t: usize| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(t)
                    .build()
                    .unwrap();
                pool.install(|| {
                    let (mut ws, mut g) = (Workspace::default(), DeepGrads::default());
                    tower
                        .forward_backward(&dense, &rows, &batch, 0.01, &mut ws, &mut g)
                        .unwrap();
                    let z = tower.forward(&dense, &rows, &batch, &mut ws).unwrap();
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    (bits(&g.rows), bits(&g.dense), g.loss.to_bits(), bits(z))
                })
            };
            let one = run(1);
            // The check can fail: the gradients are not trivially zero.
            assert!(one.1.iter().filter(|&&b| b != 0).count() > one.1.len() / 2);
            for t in [2, 3] {
                let other = run(t);
                assert!(one == other, "{tower:?}: {t} threads differ from 1");
            }
        }
    }

    #[test]
    fn a_product_over_threads_is_the_same_bits_as_on_one() {
        let mut rng = crate::rng::Rng::new(3);
        let (m, k, n) = (200, 330, 40); // 2.6 M multiply-adds: split
        let ad: Vec<f32> = (0..m * k).map(|_| rng.normal() as f32).collect();
        let bd: Vec<f32> = (0..k * n).map(|_| rng.normal() as f32).collect();
        let (a, b) = (Mat::new(&ad, m, k), Mat::new(&bd, n, k).t());
        let mut whole = vec![0.0; m * n];
        matmul(a, b, &mut whole, false);
        for t in [1, 2, 3, 4] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build()
                .unwrap();
            let mut c = vec![f32::NAN; m * n];
            pool.install(|| {
                assert_eq!(threads(), t);
                matmul_par(a, b, &mut c, false);
            });
            assert!(
                c.iter()
                    .zip(&whole)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "{t} threads"
            );
        }
    }
}
