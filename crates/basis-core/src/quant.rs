//! Counter-based random bits and the compact number formats: bf16 and the
//! 1-byte logarithmic code, both with unbiased stochastic rounding.
//!
//! Randomness is a pure function of `(seed, step, key)` (a SplitMix64
//! finalizer), never of the order in which rows or buckets are processed, so a
//! parallel step draws exactly the same bits as a sequential one.

use half::bf16;

/// SplitMix64's finalizer: a bijective 64-bit mixer.
pub(crate) const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// 64 random bits for `(seed, a, b)`.
pub(crate) const fn random_bits(seed: u64, a: u64, b: u64) -> u64 {
    mix64(mix64(seed ^ mix64(a.wrapping_add(0x9E37_79B9_7F4A_7C15))) ^ b)
}

/// A uniform `f32` in `[0, 1)` from the top 24 bits.
pub(crate) fn unit_f32(bits: u64) -> f32 {
    (bits >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
}

/// `x` to bf16 with stochastic rounding (unbiased: `E[decode] = x` for finite
/// `x` away from the largest finite value); `bits` supplies the randomness.
pub fn bf16_stochastic(x: f32, bits: u64) -> bf16 {
    if !x.is_finite() {
        return bf16::from_f32(x);
    }
    let raw = x.to_bits();
    let noise = (bits & 0xFFFF) as u32;
    let rounded = raw.wrapping_add(noise) >> 16;
    let candidate = bf16::from_bits(rounded as u16);
    if candidate.is_finite() {
        candidate
    } else {
        // Rounding up overflowed to infinity: truncate instead.
        bf16::from_bits((raw >> 16) as u16)
    }
}

/// A 1-byte logarithmic code: code 0 is a fixed `zero_value` (the store's
/// initial value), codes `1..=255` are `2^(lo + (c−1)·(hi−lo)/254)`.
///
/// The 256-entry decode table (1 KiB) is a constant of the code, not of the
/// optimizer: the codes of the default configurations (BASIS's `RowScaled`
/// range and its scalar clip range) point at `static` tables built at compile
/// time, so an instance costs a few bytes; only a non-default range owns a
/// table ([`owned_bytes`](Self::owned_bytes)).
#[derive(Debug, Clone)]
pub struct LogCode {
    table: Table,
    lo: f32,
    hi: f32,
}

/// A decode table: shared (`static`) or owned by one code.
#[derive(Debug, Clone)]
enum Table {
    Static(&'static [f32; 256]),
    Owned(alloc::boxed::Box<[f32; 256]>),
}

impl PartialEq for LogCode {
    fn eq(&self, other: &Self) -> bool {
        self.table() == other.table() && self.lo == other.lo && self.hi == other.hi
    }
}

/// `2^e` for `e` in the normal f64 range, in `const` context (libm's `exp2`
/// is not `const`): `2^⌊e⌋` from the exponent bits times a Taylor series of
/// `exp(f·ln 2)`, `f ∈ [0, 1)`, good to a few f64 ulps — far below the f32
/// rounding the tables apply (a test checks the tables bit for bit against
/// libm's).
const fn const_exp2(e: f64) -> f64 {
    let mut n = e as i64;
    if (n as f64) > e {
        n -= 1;
    }
    let x = (e - n as f64) * core::f64::consts::LN_2;
    let (mut term, mut sum, mut k) = (1.0f64, 1.0f64, 1.0f64);
    while k < 30.0 {
        term = term * x / k;
        sum += term;
        k += 1.0;
    }
    sum * f64::from_bits(((n + 1023) as u64) << 52)
}

/// The table of [`LogCode::new`]`(lo, hi, zero)` with `lo`/`hi` as the f64
/// the runtime path computes; `ends` replaces codes 1 and 255 (`with_bounds`).
const fn const_table(lo: f64, hi: f64, zero: f32, ends: Option<(f32, f32)>) -> [f32; 256] {
    let mut t = [0.0f32; 256];
    t[0] = zero;
    let step = (hi - lo) / 254.0;
    let mut c = 1;
    while c < 256 {
        t[c] = const_exp2(lo + (c - 1) as f64 * step) as f32;
        c += 1;
    }
    if let Some((min, max)) = ends {
        t[1] = min;
        t[255] = max;
    }
    t
}

/// `RowScaleConfig::default().log2_range` with code 0 = 0 (`G_i` starts at 0).
const ROW_SCALE_RANGE: (f32, f32, f32) = (-48.0, 24.0, 0.0);
static ROW_SCALE_TABLE: [f32; 256] = const_table(-48.0, 24.0, 0.0, None);
/// `BasisConfig::default().scalar_clip` with code 0 = 1 (`s_i` starts at 1).
const SCALAR_CLIP_RANGE: (f32, f32, f32) = (0.1, 10.0, 1.0);
/// `log2(f64::from(0.1f32))`, `log2(10.0)`: the f64s `with_bounds` computes.
const SCALAR_CLIP_LOG2: (f64, f64) = (-3.321_928_073_389_531, core::f64::consts::LOG2_10);
static SCALAR_CLIP_TABLE: [f32; 256] = const_table(
    SCALAR_CLIP_LOG2.0,
    SCALAR_CLIP_LOG2.1,
    1.0,
    Some((0.1, 10.0)),
);

impl LogCode {
    /// Codes spanning `2^lo ..= 2^hi`, with code 0 decoding to `zero_value`.
    pub fn new(lo: f32, hi: f32, zero_value: f32) -> Self {
        if (lo, hi, zero_value) == ROW_SCALE_RANGE {
            return Self {
                table: Table::Static(&ROW_SCALE_TABLE),
                lo,
                hi,
            };
        }
        Self {
            table: Table::Owned(alloc::boxed::Box::new(Self::computed(
                f64::from(lo),
                f64::from(hi),
                zero_value,
            ))),
            lo,
            hi,
        }
    }

    /// The table computed at run time (libm's `exp2`).
    fn computed(lo: f64, hi: f64, zero_value: f32) -> [f32; 256] {
        let mut table = [0.0f32; 256];
        table[0] = zero_value;
        let step = (hi - lo) / 254.0;
        for (c, slot) in table.iter_mut().enumerate().skip(1) {
            *slot = crate::math::exp2_f64(lo + (c - 1) as f64 * step) as f32;
        }
        table
    }

    /// Codes spanning exactly `min ..= max` (`0 < min < max`): the end codes
    /// decode to `min` and `max` bit for bit (a clip range's bounds), the
    /// codes between are log-spaced.
    pub fn with_bounds(min: f32, max: f32, zero_value: f32) -> Self {
        let lo = crate::math::log2_f64(f64::from(min));
        let hi = crate::math::log2_f64(f64::from(max));
        if (min, max, zero_value) == SCALAR_CLIP_RANGE {
            return Self {
                table: Table::Static(&SCALAR_CLIP_TABLE),
                lo: lo as f32,
                hi: hi as f32,
            };
        }
        let mut table = Self::computed(lo, hi, zero_value);
        table[1] = min;
        table[255] = max;
        Self {
            table: Table::Owned(alloc::boxed::Box::new(table)),
            lo: lo as f32,
            hi: hi as f32,
        }
    }

    fn table(&self) -> &[f32; 256] {
        match &self.table {
            Table::Static(t) => t,
            Table::Owned(t) => t,
        }
    }

    /// Heap bytes this code owns: 0 when its table is a shared `static`,
    /// the table's 1 KiB otherwise.
    pub fn owned_bytes(&self) -> usize {
        match self.table {
            Table::Static(_) => 0,
            Table::Owned(_) => size_of::<[f32; 256]>(),
        }
    }

    /// The log₂ range `(lo, hi)`.
    pub fn range(&self) -> (f32, f32) {
        (self.lo, self.hi)
    }

    /// The value of `code`.
    pub fn decode(&self, code: u8) -> f32 {
        self.table()[usize::from(code)]
    }

    /// The smallest and largest non-zero values.
    pub fn bounds(&self) -> (f32, f32) {
        (self.table()[1], self.table()[255])
    }

    /// Encodes `x ≥ 0` with stochastic rounding between the two neighbouring
    /// codes, unbiased in value (`E[decode] = x`) inside the range; below the
    /// smallest code it rounds between 0 and the smallest (when code 0 decodes
    /// to 0; otherwise to the smallest), above the largest it saturates.
    pub fn encode(&self, x: f32, bits: u64) -> u8 {
        let table = self.table();
        let (min, max) = self.bounds();
        if x.is_nan() || x <= 0.0 {
            return if table[0] == 0.0 { 0 } else { 1 };
        }
        if x >= max {
            return 255;
        }
        if table[0] == x {
            return 0;
        }
        let u = unit_f32(bits);
        if x < min {
            if table[0] == 0.0 {
                return if u < x / min { 1 } else { 0 };
            }
            return 1;
        }
        // Largest code c in 1..=254 with table[c] <= x.
        let c = table[1..256].partition_point(|&v| v <= x); // in 1..=254
        let lo_v = table[c];
        let hi_v = table[c + 1];
        let p = (x - lo_v) / (hi_v - lo_v);
        if u < p { (c + 1) as u8 } else { c as u8 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_tables_equal_the_libm_tables_bit_for_bit() {
        let lo = crate::math::log2_f64(f64::from(0.1f32));
        let hi = crate::math::log2_f64(10.0f64);
        assert_eq!((lo, hi), SCALAR_CLIP_LOG2);
        let mut clip = LogCode::computed(lo, hi, 1.0);
        (clip[1], clip[255]) = (0.1, 10.0);
        let row = LogCode::computed(-48.0, 24.0, 0.0);
        for (stat, libm) in [(&SCALAR_CLIP_TABLE, &clip), (&ROW_SCALE_TABLE, &row)] {
            let bits = |t: &[f32; 256]| t.map(f32::to_bits);
            assert_eq!(bits(stat), bits(libm));
        }
        // The default codes share the statics; another range owns its table.
        assert_eq!(LogCode::new(-48.0, 24.0, 0.0).owned_bytes(), 0);
        assert_eq!(LogCode::with_bounds(0.1, 10.0, 1.0).owned_bytes(), 0);
        let other = LogCode::new(-40.0, 24.0, 0.0);
        assert_eq!(other.owned_bytes(), 1024);
        assert_eq!(other.table(), &LogCode::computed(-40.0, 24.0, 0.0));
    }

    #[test]
    fn bf16_stochastic_rounds_to_a_neighbour_and_is_unbiased() {
        let x = 1.0f32 + 3.0 / 1024.0;
        let lo = bf16::from_bits((x.to_bits() >> 16) as u16).to_f32();
        let hi = bf16::from_bits(((x.to_bits() >> 16) + 1) as u16).to_f32();
        let n = 20_000u64;
        let mut sum = 0.0f64;
        for i in 0..n {
            let y = bf16_stochastic(x, random_bits(7, i, 0)).to_f32();
            assert!(y == lo || y == hi);
            sum += f64::from(y);
        }
        let mean = sum / n as f64;
        let gap = f64::from(hi - lo);
        // 5 standard errors of a two-point distribution.
        assert!((mean - f64::from(x)).abs() < 5.0 * gap * 0.5 / (n as f64).sqrt());
    }

    #[test]
    fn log_code_is_monotone_and_unbiased() {
        let code = LogCode::new(-3.0, 3.0, 1.0);
        for c in 2..=255u8 {
            assert!(code.decode(c) > code.decode(c - 1));
        }
        assert_eq!(code.encode(1.0, 0), 0);
        let x = 1.7f32;
        let n = 20_000u64;
        let mut sum = 0.0f64;
        for i in 0..n {
            sum += f64::from(code.decode(code.encode(x, random_bits(3, i, 1))));
        }
        let mean = sum / n as f64;
        assert!((mean - 1.7).abs() < 0.005, "mean {mean}");
    }
}
