//! The one matrix product of the dense tower, `C (+)= op(A) · op(B)` in f32,
//! through `matrixmultiply::sgemm` behind a safe, bounds-checked wrapper.
//!
//! Why `matrixmultiply`: measured against `gemm` 0.17 on the tower's shapes
//! (batch 256, widths 416/512/256, all four transpose cases) it was faster
//! on this machine (59–94 vs 48–77 GFLOP/s single-threaded,
//! `docs/BENCHMARKS.md`), and it is one small crate. It is built without its
//! `threading` feature, so every product runs on the calling thread with
//! fixed blocking; [`super::par`] splits a product into blocks of rows over
//! threads itself, which gives the same bits as the whole product (tested
//! below). (Results can depend on the CPU: the crate picks an FMA or SSE
//! kernel at run time.)
//!
//! This module holds the crate's only `unsafe` block; [`reference`] is the
//! plain triple loop the tests compare it with.

// The wrapper exists to check everything `sgemm` trusts its caller with.
#![allow(unsafe_code)]

/// A logical `rows × cols` matrix over a slice: element `(i, j)` is
/// `data[i·rs + j·cs]`. [`Mat::new`] reads a row-major slice, [`Mat::t`]
/// transposes without a copy, [`Mat::row_range`] takes a block of rows (so
/// a product can be split over threads).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mat<'a> {
    pub(crate) data: &'a [f32],
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    /// Row and column strides in `data`.
    rs: usize,
    cs: usize,
}

impl<'a> Mat<'a> {
    /// `data` as a row-major `rows × cols` matrix.
    pub(crate) fn new(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            rs: cols,
            cs: 1,
        }
    }

    /// The transpose (no copy).
    pub(crate) fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    /// Rows `r.start..r.end` (no copy). Panics when the range is not within
    /// the rows: callers split the model's own shapes.
    pub(crate) fn row_range(self, r: core::ops::Range<usize>) -> Self {
        assert!(r.start <= r.end && r.end <= self.rows, "row range");
        let at = (r.start * self.rs).min(self.data.len());
        Self {
            data: &self.data[at..],
            rows: r.end - r.start,
            ..self
        }
    }

    /// Whether every element lies in `data` (strides and sizes as given).
    fn in_bounds(&self) -> bool {
        if self.rows == 0 || self.cols == 0 {
            return true;
        }
        (self.rows - 1)
            .checked_mul(self.rs)
            .zip((self.cols - 1).checked_mul(self.cs))
            .and_then(|(a, b)| a.checked_add(b))
            .is_some_and(|last| last < self.data.len())
    }

    #[cfg(test)]
    fn at(&self, i: usize, j: usize) -> f32 {
        self.data[i * self.rs + j * self.cs]
    }
}

/// `c = a · b` (`accumulate`: `c += a · b`), `c` row-major `a.rows × b.cols`.
///
/// Panics when the shapes do not fit (`a.cols != b.rows`, a slice of the
/// wrong length): callers build the shapes from the model, never from input.
pub(crate) fn matmul(a: Mat<'_>, b: Mat<'_>, c: &mut [f32], accumulate: bool) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(b.rows, k, "inner dimensions");
    assert!(a.in_bounds(), "A out of its slice");
    assert!(b.in_bounds(), "B out of its slice");
    assert_eq!(c.len(), m * n, "C length");
    // Slices never exceed isize::MAX bytes, so in-bounds strides and sizes fit isize.
    let limit = isize::MAX as usize / 2;
    assert!(
        [m, n, k, a.rs, a.cs, b.rs, b.cs]
            .iter()
            .all(|&x| x <= limit),
        "dimension overflow"
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c.fill(0.0);
        }
        return;
    }
    let (rsa, csa) = (a.rs as isize, a.cs as isize);
    let (rsb, csb) = (b.rs as isize, b.cs as isize);
    let beta = if accumulate { 1.0 } else { 0.0 };
    // SAFETY: the asserts above prove every index sgemm forms is in bounds:
    // A is read at i·rsa + p·csa for i < m, p < k, at most
    // (m−1)·rsa + (k−1)·csa < a.data.len() (`in_bounds`, strides ≥ 0);
    // likewise B with k × n; C is written at i·n + j < m·n = c.len(). `c` is
    // a unique borrow, so it cannot alias `a` or `b`. With beta = 0 sgemm
    // does not read C.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.data.as_ptr(),
            rsa,
            csa,
            b.data.as_ptr(),
            rsb,
            csb,
            beta,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

/// The obviously correct triple loop (f64 accumulation) that [`matmul`] is
/// tested against.
#[cfg(test)]
pub(crate) fn reference(a: Mat<'_>, b: Mat<'_>, c: &mut [f32], accumulate: bool) {
    for i in 0..a.rows {
        for j in 0..b.cols {
            let s: f64 = (0..a.cols)
                .map(|p| f64::from(a.at(i, p)) * f64::from(b.at(p, j)))
                .sum();
            let cij = &mut c[i * b.cols + j];
            *cij = if accumulate {
                *cij + s as f32
            } else {
                s as f32
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn random(n: usize, rng: &mut Rng) -> Vec<f32> {
        (0..n).map(|_| rng.normal() as f32).collect()
    }

    /// A `rows×cols` view of `data`, stored transposed when asked (so the
    /// product sees the strided layout).
    fn view(data: &[f32], rows: usize, cols: usize, transposed: bool) -> Mat<'_> {
        if transposed {
            Mat::new(data, cols, rows).t()
        } else {
            Mat::new(data, rows, cols)
        }
    }

    #[test]
    fn matches_the_triple_loop_in_every_transpose_case() {
        let mut rng = Rng::new(5);
        for &(m, k, n) in &[(1, 1, 1), (7, 13, 5), (33, 64, 17), (3, 0, 4), (64, 9, 1)] {
            for ta in [false, true] {
                for tb in [false, true] {
                    let (ad, bd) = (random(m * k, &mut rng), random(k * n, &mut rng));
                    let (a, b) = (view(&ad, m, k, ta), view(&bd, k, n, tb));
                    for acc in [false, true] {
                        let init = random(m * n, &mut rng);
                        let (mut fast, mut slow) = (init.clone(), init);
                        matmul(a, b, &mut fast, acc);
                        reference(a, b, &mut slow, acc);
                        for (x, y) in fast.iter().zip(&slow) {
                            assert!(
                                (x - y).abs() <= 1e-4 * (1.0 + y.abs()),
                                "{m}x{k}x{n} {ta} {tb}: {x} vs {y}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_product_split_by_rows_equals_the_whole_bit_for_bit() {
        // What `par` relies on: rows of C computed in blocks (any block
        // edges, aligned or not, k over several of the kernel's k-blocks)
        // are the same bits as the one whole product.
        let mut rng = Rng::new(9);
        for &(m, k, n) in &[(72, 600, 40), (37, 300, 19), (130, 70, 1), (16, 1, 33)] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let (ad, bd) = (random(m * k, &mut rng), random(k * n, &mut rng));
                let (a, b) = (view(&ad, m, k, ta), view(&bd, k, n, tb));
                for acc in [false, true] {
                    let init = random(m * n, &mut rng);
                    let mut whole = init.clone();
                    matmul(a, b, &mut whole, acc);
                    for rows in [1, 5, 8, 24, m.div_ceil(2)] {
                        let mut split = init.clone();
                        for (i, cb) in split.chunks_mut(rows * n).enumerate() {
                            let r = i * rows..i * rows + cb.len() / n;
                            matmul(a.row_range(r), b, cb, acc);
                        }
                        let same = whole
                            .iter()
                            .zip(&split)
                            .all(|(x, y)| x.to_bits() == y.to_bits());
                        assert!(same, "{m}x{k}x{n} {ta} {tb} {acc}: blocks of {rows}");
                    }
                }
            }
        }
    }

    #[test]
    fn strides_out_of_the_slice_are_refused_before_sgemm() {
        let d = [1.0; 6];
        let a = Mat::new(&d, 2, 3).row_range(1..2);
        assert!(a.in_bounds() && a.data.len() == 3);
        let bad = Mat {
            rows: 3,
            ..Mat::new(&d, 2, 3)
        };
        assert!(!bad.in_bounds());
        assert!(Mat::new(&d, 2, 3).t().row_range(2..3).in_bounds());
    }

    #[test]
    fn beta_zero_ignores_garbage_in_c() {
        let a = [1.0, 2.0];
        let b = [3.0, 4.0];
        let mut c = [f32::NAN];
        matmul(Mat::new(&a, 1, 2), Mat::new(&b, 2, 1), &mut c, false);
        assert_eq!(c, [11.0]);
    }
}
