//! [`RowPrecision`] and the table's row storage at that width: f32, or
//! bf16 / f16 (half the bytes) updated through f32 and stored back with
//! **stochastic rounding** (FBGEMM trains FP16/BF16 embedding weights this
//! way: `E[stored] = updated value`, so updates much smaller than a
//! representable step still move a row on average).
//!
//! The rounding is `basis_core`'s [`LowPrecisionRows`] scheme, keyed by
//! `(seed, step, id, element)` through [`rounding_bits`] with the row's
//! **global id** (not its slot) and the table's training step: an owner
//! rounds a row exactly as a single process holding every row does, so a
//! sharded table stays bit-identical to one rank, and threads to MPI.
//!
//! [`LowPrecisionRows`]: basis_core::LowPrecisionRows

use alloc::vec::Vec;
use basis_core::half::{bf16, f16};
use basis_core::{RowAccess, RowFormat, rounding_bits};
use core::fmt;
use core::str::FromStr;

/// How a [`ShardedTable`](crate::ShardedTable) stores its row values.
///
/// [`F32`](Self::F32) is the default. With [`Bf16`](Self::Bf16) or
/// [`F16`](Self::F16) lookups still return f32 rows (widened exactly),
/// the optimizer still steps f32 values, and each stepped row is stored
/// back with stochastic rounding; new rows are their
/// [`RowInit`](crate::RowInit) value rounded to nearest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum RowPrecision {
    /// 4 bytes per value, stored as stepped (the default).
    #[default]
    F32,
    /// bfloat16: 2 bytes per value, f32's exponent range, 8 significant
    /// bits.
    Bf16,
    /// IEEE half: 2 bytes per value, 11 significant bits, finite range
    /// `±65504` (a value beyond it saturates).
    F16,
}

impl RowPrecision {
    /// Bytes per stored value.
    pub const fn bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::Bf16 | Self::F16 => 2,
        }
    }

    /// The name the CLI and reports use: `f32`, `bf16` or `f16`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
            Self::F16 => "f16",
        }
    }

    /// The checkpoint code (0 f32, 1 bf16, 2 f16; stable: also what a
    /// runtime can fingerprint its options with).
    pub const fn code(self) -> u64 {
        match self {
            Self::F32 => 0,
            Self::Bf16 => 1,
            Self::F16 => 2,
        }
    }

    /// The precision of checkpoint code `c`.
    pub(crate) const fn from_code(c: u64) -> Option<Self> {
        match c {
            0 => Some(Self::F32),
            1 => Some(Self::Bf16),
            2 => Some(Self::F16),
            _ => None,
        }
    }

    /// Whether `x` is stored exactly at this precision (a restored value
    /// must be: a row that cannot be restored exactly is refused).
    pub(crate) fn holds(self, x: f32) -> bool {
        let back = match self {
            Self::F32 => return true,
            Self::Bf16 => bf16::from_f32(x).to_f32(),
            Self::F16 => f16::from_f32(x).to_f32(),
        };
        back.to_bits() == x.to_bits()
    }
}

impl fmt::Display for RowPrecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `"f32"`, `"bf16"` or `"f16"` is not what was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsePrecisionError;

impl fmt::Display for ParsePrecisionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a row precision is f32, bf16 or f16")
    }
}

impl core::error::Error for ParsePrecisionError {}

impl FromStr for RowPrecision {
    type Err = ParsePrecisionError;

    /// `f32`, `bf16` or `f16`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f32" => Ok(Self::F32),
            "bf16" => Ok(Self::Bf16),
            "f16" => Ok(Self::F16),
            _ => Err(ParsePrecisionError),
        }
    }
}

/// The values, slot-major, at their stored width.
#[derive(Debug, Clone)]
enum Values {
    F32(Vec<f32>),
    Bf16(Vec<bf16>),
    F16(Vec<f16>),
}

/// Applies `$body` to the vector of whichever width `$v` holds, bound to
/// `$x` (one generic body instead of three copies).
macro_rules! each {
    ($v:expr, $x:ident => $body:expr) => {
        match $v {
            Values::F32($x) => $body,
            Values::Bf16($x) => $body,
            Values::F16($x) => $body,
        }
    };
}

/// An element type of [`Values`]: f32 stored as is, or a [`RowFormat`].
trait Elem: Copy {
    fn widen(self) -> f32;
    fn nearest(x: f32) -> Self;
    fn stochastic(x: f32, bits: u64) -> Self;
}

impl Elem for f32 {
    fn widen(self) -> f32 {
        self
    }
    fn nearest(x: f32) -> Self {
        x
    }
    fn stochastic(x: f32, _: u64) -> Self {
        x
    }
}

impl Elem for bf16 {
    fn widen(self) -> f32 {
        RowFormat::to_f32(self)
    }
    fn nearest(x: f32) -> Self {
        <Self as RowFormat>::nearest(x)
    }
    fn stochastic(x: f32, bits: u64) -> Self {
        <Self as RowFormat>::stochastic(x, bits)
    }
}

impl Elem for f16 {
    fn widen(self) -> f32 {
        RowFormat::to_f32(self)
    }
    fn nearest(x: f32) -> Self {
        <Self as RowFormat>::nearest(x)
    }
    fn stochastic(x: f32, bits: u64) -> Self {
        <Self as RowFormat>::stochastic(x, bits)
    }
}

/// The rows, slot-major, at the table's [`RowPrecision`]: what the
/// optimizer steps (by slot).
#[derive(Debug, Clone)]
pub(crate) struct Rows {
    dim: usize,
    /// Keys the stochastic rounding.
    seed: u64,
    values: Values,
    /// Narrow rows: a step's rows widened to f32, kept across steps (a
    /// fresh ~1 MB buffer each step would be a fresh `mmap` and its page
    /// faults); cleared, never shrunk. Empty for f32 rows.
    wide: Vec<f32>,
}

impl Rows {
    /// No rows of `dim` values at `precision`, rounding keyed by `seed`.
    pub(crate) fn new(dim: usize, precision: RowPrecision, seed: u64) -> Self {
        let values = match precision {
            RowPrecision::F32 => Values::F32(Vec::new()),
            RowPrecision::Bf16 => Values::Bf16(Vec::new()),
            RowPrecision::F16 => Values::F16(Vec::new()),
        };
        Self {
            dim,
            seed,
            values,
            wide: Vec::new(),
        }
    }

    /// Bytes of the step's kept buffer (capacity).
    pub(crate) fn scratch_bytes(&self) -> usize {
        self.wide.capacity() * 4
    }

    pub(crate) fn precision(&self) -> RowPrecision {
        match self.values {
            Values::F32(_) => RowPrecision::F32,
            Values::Bf16(_) => RowPrecision::Bf16,
            Values::F16(_) => RowPrecision::F16,
        }
    }

    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }

    /// Bytes allocated for values (capacity × width).
    pub(crate) fn bytes(&self) -> usize {
        each!(&self.values, v => v.capacity()) * self.precision().bytes()
    }

    /// Room for `values` more values, exactly.
    pub(crate) fn try_reserve_exact(&mut self, values: usize) -> Result<(), ()> {
        each!(&mut self.values, v => v.try_reserve_exact(values).map_err(|_| ()))
    }

    /// Room for `values` more values, growing by at least an eighth of
    /// the capacity, not by doubling: the rows are most of a rank's
    /// memory, and a doubled vector would hold up to 2× their bytes (large
    /// blocks grow in place by `mremap`, so no copy either).
    pub(crate) fn reserve_growth(&mut self, values: usize) -> Result<(), ()> {
        each!(&mut self.values, v => {
            if v.len() + values > v.capacity() {
                v.try_reserve_exact(values.max(v.capacity() / 8)).map_err(|_| ())
            } else {
                Ok(())
            }
        })
    }

    /// Appends a row, rounded to nearest (exact for a value the width
    /// holds). Capacity must have been reserved by the caller for
    /// fallible growth.
    pub(crate) fn push(&mut self, row: &[f32]) {
        fn go<T: Elem>(v: &mut Vec<T>, row: &[f32]) {
            v.extend(row.iter().map(|&x| T::nearest(x)));
        }
        each!(&mut self.values, v => go(v, row));
    }

    /// `row` as this precision stores it (rounded to nearest, widened): the
    /// value a new row holds, so an id without a row reads as it will once
    /// created.
    pub(crate) fn round_nearest(&self, row: &mut [f32]) {
        fn go<T: Elem>(row: &mut [f32]) {
            for x in row {
                *x = T::nearest(*x).widen();
            }
        }
        match self.values {
            Values::F32(_) => {}
            Values::Bf16(_) => go::<bf16>(row),
            Values::F16(_) => go::<f16>(row),
        }
    }

    /// Appends slot `slot`'s row, widened, to `out`.
    pub(crate) fn extend_row(&self, slot: u32, out: &mut Vec<f32>) {
        let s = slot as usize * self.dim;
        each!(&self.values, v => out.extend(v[s..s + self.dim].iter().map(|x| x.widen())));
    }

    /// A 64-bit hash of `id` and slot `slot`'s values widened to f32: a
    /// chain of bijections, so a change of the id or of any one value
    /// always changes it (the table checksum's per-row term).
    pub(crate) fn row_hash(&self, id: u64, slot: u32) -> u64 {
        let s = slot as usize * self.dim;
        let mut h = fmix64(id ^ 0x6a09_e667_f3bc_c909);
        each!(&self.values, v => {
            for x in &v[s..s + self.dim] {
                h = fmix64(h ^ u64::from(x.widen().to_bits()));
            }
        });
        h
    }

    /// Slot `slot`'s row, widened.
    pub(crate) fn row(&self, slot: u32) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.dim);
        self.extend_row(slot, &mut out);
        out
    }

    /// Every value, widened (slot-major).
    pub(crate) fn to_f32(&self) -> Vec<f32> {
        each!(&self.values, v => v.iter().map(|x| x.widen()).collect())
    }

    /// Replaces the values by `values` (widened values of this precision).
    ///
    /// # Errors
    /// `Err` when a value is not exactly representable at this precision
    /// (nothing changes).
    pub(crate) fn replace(&mut self, values: Vec<f32>) -> Result<(), ()> {
        let p = self.precision();
        if !values.iter().all(|&x| p.holds(x)) {
            return Err(());
        }
        self.values = match p {
            RowPrecision::F32 => Values::F32(values),
            RowPrecision::Bf16 => Values::Bf16(values.iter().map(|&x| bf16::from_f32(x)).collect()),
            RowPrecision::F16 => Values::F16(values.iter().map(|&x| f16::from_f32(x)).collect()),
        };
        Ok(())
    }

    /// Frees slot `e`: the last row moves into it.
    pub(crate) fn swap_remove(&mut self, e: usize) {
        let d = self.dim;
        each!(&mut self.values, v => {
            let last = v.len() / d - 1;
            if e != last {
                v.copy_within(last * d..(last + 1) * d, e * d);
            }
            v.truncate(last * d);
        });
    }

    /// Runs `step` (an optimizer step over `slots`, sorted and unique) on
    /// these rows. f32 rows are stepped in place; narrow rows are decoded
    /// into f32 scratch, stepped there, and stored back with stochastic
    /// rounding keyed by `(seed, step_no, keys[k], element)` — `keys[k]`
    /// the global id of `slots[k]`. A row the step leaves unchanged is
    /// stored back bit for bit (rounding a representable value is exact),
    /// so a refused step changes nothing here either.
    pub(crate) fn step<R>(
        &mut self,
        keys: &[u64],
        slots: &[u64],
        step_no: u64,
        step: impl FnOnce(&mut dyn RowAccess) -> R,
    ) -> R {
        let (dim, seed) = (self.dim, self.seed);
        match &mut self.values {
            Values::F32(v) => step(&mut InPlace { dim, values: v }),
            Values::Bf16(v) => {
                step_narrow(v, &mut self.wide, dim, seed, keys, slots, step_no, step)
            }
            Values::F16(v) => step_narrow(v, &mut self.wide, dim, seed, keys, slots, step_no, step),
        }
    }
}

/// [`Rows::step`] for a narrow width, the rows widened into `wide`.
#[allow(clippy::too_many_arguments)]
fn step_narrow<T: Elem, R>(
    v: &mut [T],
    wide: &mut Vec<f32>,
    dim: usize,
    seed: u64,
    keys: &[u64],
    slots: &[u64],
    step_no: u64,
    step: impl FnOnce(&mut dyn RowAccess) -> R,
) -> R {
    wide.clear();
    wide.reserve(slots.len() * dim);
    let mut scratch = Scratch {
        dim,
        slots,
        values: wide,
    };
    for &s in slots {
        let s = s as usize * dim;
        scratch
            .values
            .extend(v[s..s + dim].iter().map(|x| x.widen()));
    }
    let out = step(&mut scratch);
    for ((&s, &id), row) in slots.iter().zip(keys).zip(scratch.values.chunks_exact(dim)) {
        let s = s as usize * dim;
        for (j, (dst, &x)) in v[s..s + dim].iter_mut().zip(row).enumerate() {
            *dst = T::stochastic(x, rounding_bits(seed, step_no, id, j as u64));
        }
    }
    out
}

/// f32 rows stepped in place, by slot.
struct InPlace<'a> {
    dim: usize,
    values: &'a mut Vec<f32>,
}

impl RowAccess for InPlace<'_> {
    fn dim(&self) -> usize {
        self.dim
    }

    fn row_mut(&mut self, slot: u64) -> Option<&mut [f32]> {
        let s = usize::try_from(slot).ok()?.checked_mul(self.dim)?;
        self.values.get_mut(s..s.checked_add(self.dim)?)
    }
}

/// The decoded rows of one step's slots (sorted), by slot; a slot outside
/// the step has no row here.
struct Scratch<'a> {
    dim: usize,
    slots: &'a [u64],
    values: &'a mut Vec<f32>,
}

impl RowAccess for Scratch<'_> {
    fn dim(&self) -> usize {
        self.dim
    }

    fn row_mut(&mut self, slot: u64) -> Option<&mut [f32]> {
        let k = self.slots.binary_search(&slot).ok()?;
        self.values.get_mut(k * self.dim..(k + 1) * self.dim)
    }
}

/// MurmurHash3's 64-bit finalizer: a bijection of `u64` that mixes every
/// input bit into every output bit.
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}
