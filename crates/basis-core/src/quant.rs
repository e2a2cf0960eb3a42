//! Counter-based random bits and the compact number formats: bf16 and the
//! 1-byte logarithmic code, both with unbiased stochastic rounding.
//!
//! Randomness is a pure function of `(seed, step, key)` (a SplitMix64
//! finalizer), never of the order in which rows or buckets are processed, so a
//! parallel step draws exactly the same bits as a sequential one.

use half::bf16;
use num_traits::Float;

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
#[derive(Debug, Clone, PartialEq)]
pub struct LogCode {
    table: [f32; 256],
    lo: f32,
    hi: f32,
}

impl LogCode {
    /// Codes spanning `2^lo ..= 2^hi`, with code 0 decoding to `zero_value`.
    pub fn new(lo: f32, hi: f32, zero_value: f32) -> Self {
        let mut table = [0.0f32; 256];
        table[0] = zero_value;
        let step = (f64::from(hi) - f64::from(lo)) / 254.0;
        for (c, slot) in table.iter_mut().enumerate().skip(1) {
            let e = f64::from(lo) + (c - 1) as f64 * step;
            *slot = Float::exp2(e) as f32;
        }
        Self { table, lo, hi }
    }

    /// Codes spanning exactly `min ..= max` (`0 < min < max`): the end codes
    /// decode to `min` and `max` bit for bit (a clip range's bounds), the
    /// codes between are log-spaced.
    pub fn with_bounds(min: f32, max: f32, zero_value: f32) -> Self {
        let lo = Float::log2(f64::from(min));
        let hi = Float::log2(f64::from(max));
        let mut code = Self::new(lo as f32, hi as f32, zero_value);
        let step = (hi - lo) / 254.0;
        for c in 1..256usize {
            code.table[c] = Float::exp2(lo + (c - 1) as f64 * step) as f32;
        }
        code.table[1] = min;
        code.table[255] = max;
        code
    }

    /// The log₂ range `(lo, hi)`.
    pub fn range(&self) -> (f32, f32) {
        (self.lo, self.hi)
    }

    /// The value of `code`.
    pub fn decode(&self, code: u8) -> f32 {
        self.table[usize::from(code)]
    }

    /// The smallest and largest non-zero values.
    pub fn bounds(&self) -> (f32, f32) {
        (self.table[1], self.table[255])
    }

    /// Encodes `x ≥ 0` with stochastic rounding between the two neighbouring
    /// codes, unbiased in value (`E[decode] = x`) inside the range; below the
    /// smallest code it rounds between 0 and the smallest (when code 0 decodes
    /// to 0; otherwise to the smallest), above the largest it saturates.
    pub fn encode(&self, x: f32, bits: u64) -> u8 {
        let (min, max) = self.bounds();
        if x.is_nan() || x <= 0.0 {
            return if self.table[0] == 0.0 { 0 } else { 1 };
        }
        if x >= max {
            return 255;
        }
        if self.table[0] == x {
            return 0;
        }
        let u = unit_f32(bits);
        if x < min {
            if self.table[0] == 0.0 {
                return if u < x / min { 1 } else { 0 };
            }
            return 1;
        }
        // Largest code c in 1..=254 with table[c] <= x.
        let c = self.table[1..256].partition_point(|&v| v <= x); // in 1..=254
        let lo_v = self.table[c];
        let hi_v = self.table[c + 1];
        let p = (x - lo_v) / (hi_v - lo_v);
        if u < p { (c + 1) as u8 } else { c as u8 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
