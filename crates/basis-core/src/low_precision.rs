//! [`LowPrecisionRows`]: embedding rows stored as bf16 or f16 (half the
//! bytes of f32), updated through f32 scratch and written back with
//! **stochastic rounding** (FBGEMM's scheme: random low bits are added before
//! the truncation, so `E[stored] = updated value` and small updates are not
//! lost to round-to-nearest).
//!
//! The randomness is a pure function of `(seed, id, step, element)`
//! (counter-based, as everywhere in this crate): results do not depend on
//! the order rows are touched in, nor on threads.
//!
//! # How an optimizer writes the rows
//! Optimizers write rows through [`RowAccess`], which hands out `&mut [f32]`.
//! [`LowPrecisionRows::begin_step`] returns a [`StepRows`] guard implementing
//! [`RowAccess`]: the first `row_mut(id)` of the step decodes the row into
//! f32 scratch, later calls return the same scratch, and dropping the guard
//! rounds every touched row once and stores it (then the step counter
//! advances). The optimizer's step runs unchanged. A row read but not
//! changed is stored back bit for bit (rounding a representable value is
//! exact), so an optimizer's "check every row first" pass changes nothing.
//!
//! # How the shard table uses this
//! A shard holds its rows in a `LowPrecisionRows` (ids → slots through its
//! [`SlotIndex`]), answers `lookup` with [`LowPrecisionRows::read`] (decoded
//! f32) and runs the owner step on `begin_step()`.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::mem::size_of;

use half::{bf16, f16};

use crate::quant::{bf16_stochastic, mix64, random_bits};
use crate::slot_index::{IndexError, SlotIndex};
use crate::table::RowAccess;

/// A compact element format of [`LowPrecisionRows`]: bf16 or f16.
pub trait RowFormat: Copy + core::fmt::Debug {
    /// The value as f32 (exact).
    fn to_f32(self) -> f32;
    /// `x` rounded to nearest (initial values).
    fn nearest(x: f32) -> Self;
    /// `x` rounded stochastically with the random `bits`: one of the two
    /// neighbours of `x`, unbiased (`E = x`) for finite `x` inside the
    /// format's finite range (see the implementations for the edges).
    fn stochastic(x: f32, bits: u64) -> Self;
}

impl RowFormat for bf16 {
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn nearest(x: f32) -> Self {
        bf16::from_f32(x)
    }
    /// [`bf16_stochastic`]: 16 random bits added below the kept mantissa.
    fn stochastic(x: f32, bits: u64) -> Self {
        bf16_stochastic(x, bits)
    }
}

impl RowFormat for f16 {
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn nearest(x: f32) -> Self {
        f16::from_f32(x)
    }
    /// Normal range (`|x| ≥ 2^-14`): 13 random bits added below f16's 10
    /// mantissa bits, then truncation (exactly unbiased). Subnormal range:
    /// rounds on the `2^-24` grid with a 53-bit uniform (unbiased to
    /// `2^-53` of a grid step). Beyond `±65504` it saturates (biased, by
    /// design: no infinities in a row).
    fn stochastic(x: f32, bits: u64) -> Self {
        const MAX: f32 = 65504.0;
        if !x.is_finite() {
            return f16::from_f32(x);
        }
        let a = x.abs();
        if a >= MAX {
            return f16::from_f32(MAX.copysign(x));
        }
        if a >= f32::from_bits(0x3880_0000) {
            // 2^-14: f16's smallest normal.
            let r = f32::from_bits((x.to_bits() + (bits & 0x1FFF) as u32) & !0x1FFF);
            return f16::from_f32(if r.abs() > MAX { MAX.copysign(x) } else { r });
        }
        let q = f64::from(a) * f64::from(1u32 << 24);
        let floor = libm_floor(q);
        let u = (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        let m = if u < q - floor { floor + 1.0 } else { floor };
        f16::from_f32(((m / f64::from(1u32 << 24)) as f32).copysign(x))
    }
}

/// `floor` of a non-negative f64 below 2^53 without std.
fn libm_floor(q: f64) -> f64 {
    (q as u64) as f64
}

/// Rows of `dim` values in format `T`, by `u64` id, stored compactly and updated with stochastic rounding.
///
/// ```
/// use basis_core::{LowPrecisionRows, RowAccess, Sgd, SparseOptimizer};
/// use basis_core::half::bf16;
///
/// let mut rows = LowPrecisionRows::<bf16>::new(2, 7)?;
/// rows.try_push(42, &[1.0, -1.0])?;
/// let mut sgd = Sgd::new(2, 0.5)?;
/// {
///     let mut step = rows.begin_step();
///     sgd.step(&[42], &[0.25, 0.25], &mut step)?;
/// } // dropped: rows rounded back to bf16
/// let mut out = [0.0f32; 2];
/// assert!(rows.read(42, &mut out));
/// assert_eq!(out, [0.875, -1.125]); // representable: exact
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct LowPrecisionRows<T: RowFormat> {
    dim: usize,
    seed: u64,
    step: u64,
    index: SlotIndex,
    data: Vec<T>,
}

impl<T: RowFormat> LowPrecisionRows<T> {
    /// An empty table of rows of `dim` values; `seed` keys the rounding.
    ///
    /// # Errors
    /// [`TableError::ZeroDim`](crate::TableError::ZeroDim) for `dim == 0`.
    pub fn new(dim: usize, seed: u64) -> Result<Self, crate::TableError> {
        if dim == 0 {
            return Err(crate::TableError::ZeroDim);
        }
        Ok(Self {
            dim,
            seed,
            step: 0,
            index: SlotIndex::new(),
            data: Vec::new(),
        })
    }

    /// Values per row.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether there is no row.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Steps committed so far (the rounding's counter).
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// Adds row `id` with `values` (rounded to nearest), or overwrites it.
    /// Returns its slot.
    ///
    /// # Errors
    /// [`IndexError::RowLength`] when `values` is not `dim` long,
    /// [`IndexError::OutOfMemory`], or the index's other errors; nothing
    /// changes.
    pub fn try_push(&mut self, id: u64, values: &[f32]) -> Result<u32, IndexError> {
        if values.len() != self.dim {
            return Err(IndexError::RowLength {
                expected: self.dim,
                got: values.len(),
            });
        }
        if !self.index.contains_key(id) {
            self.data
                .try_reserve(self.dim)
                .map_err(|_| IndexError::OutOfMemory {
                    bytes: (self.dim * size_of::<T>()) as u64,
                })?;
        }
        let (slot, created) = self.index.try_insert(id)?;
        let encoded = values.iter().map(|&x| T::nearest(x));
        if created {
            self.data.extend(encoded);
        } else {
            let start = slot as usize * self.dim;
            for (d, v) in self.data[start..start + self.dim].iter_mut().zip(encoded) {
                *d = v;
            }
        }
        Ok(slot)
    }

    /// Decodes row `id` into `out` (`dim` values); `false` if absent or
    /// `out` has the wrong length.
    pub fn read(&self, id: u64, out: &mut [f32]) -> bool {
        match self.index.get(id) {
            Some(slot) if out.len() == self.dim => {
                let start = slot as usize * self.dim;
                for (o, v) in out.iter_mut().zip(&self.data[start..start + self.dim]) {
                    *o = v.to_f32();
                }
                true
            }
            _ => false,
        }
    }

    /// The stored elements of row `id`.
    pub fn raw(&self, id: u64) -> Option<&[T]> {
        let start = self.index.get(id)? as usize * self.dim;
        Some(&self.data[start..start + self.dim])
    }

    /// Exact heap bytes: the rows' capacity plus the index's
    /// [`memory_bytes`](SlotIndex::memory_bytes).
    pub fn memory_bytes(&self) -> usize {
        self.data.capacity() * size_of::<T>() + self.index.memory_bytes()
    }

    /// A [`RowAccess`] over these rows for one optimizer step; dropping it
    /// rounds the touched rows back and advances the step counter.
    pub fn begin_step(&mut self) -> StepRows<'_, T> {
        StepRows {
            rows: self,
            pending: BTreeMap::new(),
            scratch: Vec::new(),
        }
    }

    /// Random bits of element `j` of row `id` at the current step.
    fn bits(&self, id: u64, j: usize) -> u64 {
        rounding_bits(self.seed, self.step, id, j as u64)
    }
}

/// The random bits [`LowPrecisionRows`] rounds element `element` of row
/// `id` with at step `step` under `seed`: a pure function of the four, so a
/// table that keeps rows elsewhere (the sharded table keeps them by slot)
/// rounds exactly as [`LowPrecisionRows`] does, in any order, on any rank.
pub fn rounding_bits(seed: u64, step: u64, id: u64, element: u64) -> u64 {
    random_bits(seed ^ mix64(step), id, element)
}

/// One step's f32 view of a [`LowPrecisionRows`] (see
/// [`LowPrecisionRows::begin_step`]).
#[derive(Debug)]
pub struct StepRows<'a, T: RowFormat> {
    rows: &'a mut LowPrecisionRows<T>,
    /// Touched id → (slot, offset of its scratch row).
    pending: BTreeMap<u64, (u32, usize)>,
    scratch: Vec<f32>,
}

impl<T: RowFormat> RowAccess for StepRows<'_, T> {
    fn dim(&self) -> usize {
        self.rows.dim
    }

    fn row_mut(&mut self, id: u64) -> Option<&mut [f32]> {
        let dim = self.rows.dim;
        let at = match self.pending.get(&id) {
            Some(&(_, at)) => at,
            None => {
                let slot = self.rows.index.get(id)?;
                let at = self.scratch.len();
                let start = slot as usize * dim;
                self.scratch.extend(
                    self.rows.data[start..start + dim]
                        .iter()
                        .map(|v| v.to_f32()),
                );
                self.pending.insert(id, (slot, at));
                at
            }
        };
        Some(&mut self.scratch[at..at + dim])
    }
}

impl<T: RowFormat> Drop for StepRows<'_, T> {
    fn drop(&mut self) {
        let dim = self.rows.dim;
        for (&id, &(slot, at)) in &self.pending {
            let start = slot as usize * dim;
            for j in 0..dim {
                let bits = self.rows.bits(id, j);
                self.rows.data[start + j] = T::stochastic(self.scratch[at + j], bits);
            }
        }
        self.rows.step += 1;
    }
}
