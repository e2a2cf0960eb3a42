//! The one matrix product of the dense tower, `C (+)= op(A) · op(B)` in f32,
//! through `matrixmultiply::sgemm` behind a safe, bounds-checked wrapper.
//!
//! Why `matrixmultiply`: measured against `gemm` 0.17 on the tower's shapes
//! (batch 256, widths 416/512/256, all four transpose cases) it was faster
//! on this machine (59–94 vs 48–77 GFLOP/s single-threaded,
//! `docs/BENCHMARKS.md`), and it is one small crate. It is built without its
//! `threading` feature, so every product runs on the calling thread with
//! fixed blocking: results do not depend on thread counts. (They can depend
//! on the CPU: the crate picks an FMA or SSE kernel at run time.)
//!
//! This module holds the crate's only `unsafe` block; [`reference`] is the
//! plain triple loop the tests compare it with.

// The wrapper exists to check everything `sgemm` trusts its caller with.
#![allow(unsafe_code)]

/// A logical `rows × cols` matrix over a row-major slice: when `trans` is
/// set, the slice holds the `cols × rows` matrix and is read transposed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mat<'a> {
    pub(crate) data: &'a [f32],
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) trans: bool,
}

impl<'a> Mat<'a> {
    /// `data` as a row-major `rows × cols` matrix.
    pub(crate) fn new(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            trans: false,
        }
    }

    /// The transpose (no copy).
    pub(crate) fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            trans: !self.trans,
            ..self
        }
    }

    /// (row stride, column stride) of the logical matrix in `data`.
    fn strides(&self) -> (isize, isize) {
        if self.trans {
            (1, self.rows as isize)
        } else {
            (self.cols as isize, 1)
        }
    }

    #[cfg(test)]
    fn at(&self, i: usize, j: usize) -> f32 {
        let (rs, cs) = self.strides();
        self.data[i * rs as usize + j * cs as usize]
    }
}

/// `c = a · b` (`accumulate`: `c += a · b`), `c` row-major `a.rows × b.cols`.
///
/// Panics when the shapes do not fit (`a.cols != b.rows`, a slice of the
/// wrong length): callers build the shapes from the model, never from input.
pub(crate) fn matmul(a: Mat<'_>, b: Mat<'_>, c: &mut [f32], accumulate: bool) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(b.rows, k, "inner dimensions");
    assert_eq!(a.data.len(), m * k, "A length");
    assert_eq!(b.data.len(), k * n, "B length");
    assert_eq!(c.len(), m * n, "C length");
    assert!(
        m.max(n).max(k) <= isize::MAX as usize / 2,
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
    let (rsa, csa) = a.strides();
    let (rsb, csb) = b.strides();
    let beta = if accumulate { 1.0 } else { 0.0 };
    // SAFETY: the asserts above prove every index sgemm forms is in bounds:
    // A is read at i·rsa + p·csa for i < m, p < k, which is < m·k = a.data.len()
    // for both layouts (row-major: i·k + p; transposed: i + p·m); likewise B
    // with k × n; C is written at i·n + j < m·n = c.len(). `c` is a unique
    // borrow, so it cannot alias `a` or `b`. With beta = 0 sgemm does not read C.
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

    #[test]
    fn matches_the_triple_loop_in_every_transpose_case() {
        let mut rng = Rng::new(5);
        for &(m, k, n) in &[(1, 1, 1), (7, 13, 5), (33, 64, 17), (3, 0, 4), (64, 9, 1)] {
            for ta in [false, true] {
                for tb in [false, true] {
                    let ad = random(m * k, &mut rng);
                    let bd = random(k * n, &mut rng);
                    let a = if ta {
                        Mat::new(&ad, k, m).t()
                    } else {
                        Mat::new(&ad, m, k)
                    };
                    let b = if tb {
                        Mat::new(&bd, n, k).t()
                    } else {
                        Mat::new(&bd, k, n)
                    };
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
    fn beta_zero_ignores_garbage_in_c() {
        let a = [1.0, 2.0];
        let b = [3.0, 4.0];
        let mut c = [f32::NAN];
        matmul(Mat::new(&a, 1, 2), Mat::new(&b, 2, 1), &mut c, false);
        assert_eq!(c, [11.0]);
    }
}
