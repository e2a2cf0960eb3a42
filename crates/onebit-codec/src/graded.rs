//! Graded codecs: weaker compression than 1 bit for the parameter groups
//! where 1 bit hurts (the layered configuration of 1-bit Adam deployments:
//! 2 bits for embedding-adjacent layers, 16 bits where more is needed).
//!
//! Each codec turns a buffer `p` into a *frame* and, in the same passes,
//! replaces `p` by the residual `p − Q(p)` — the error-feedback update
//! `e ← p − Q(p)` of Seide et al. (2014) / Tang et al. (2021), which the
//! caller runs with `p = x + e`.
//!
//! ## [`Grade::TwoBit`]: sign + magnitude bit, one scale per frame
//! Levels `s·{−3, −1, +1, +3}` (a uniform 4-level quantiser; for a Gaussian
//! buffer `s ≈ σ/2` is within 1 % of the Lloyd–Max MSE). The code of `p_i`
//! is `neg = p_i < 0`, `big = |p_i| > 2·s₀` with the trial scale
//! `s₀ = ‖p‖₂/(2√n)`; the scale sent is the **least-squares** fit for those
//! codes, `s = ⟨p, c⟩ / ⟨c, c⟩` (sums in `f64`, in index order), so
//! `‖p − s·c‖₂² = ‖p‖₂² − ⟨p,c⟩²/‖c‖₂² < ‖p‖₂²` for every `p ≠ 0`: the
//! residual never outgrows its input (a δ-compressor in the sense of
//! Karimireddy et al. 2019, which is what keeps error feedback bounded).
//! Frame bytes for `n` elements: `⌈n/4⌉` code bytes, then `s` (`f32` LE).
//! Element `4k + j` is in bits `7−2j` (neg) and `6−2j` (big) of byte `k`
//! (MSB first, like [`crate::pack_signs`]); padding bits are 0.
//!
//! ## [`Grade::Bf16`]: bfloat16, no scale
//! Round to nearest even on the top 16 bits of the `f32`; a value that would
//! round to ±∞ is clamped to the largest finite bfloat16 (`±3.3895e38`),
//! its excess kept as residual. `bf16` rather than `f16`: the same exponent
//! range as `f32`, so the small momenta of rarely active units (`10⁻⁹`) keep
//! 8 significant bits instead of flushing to zero, and no loss scale is
//! needed. Frame bytes: `2n`, element `i` as `u16` LE at `2i`.

use crate::CodecError;

/// A graded codec: how many bits an element costs on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Grade {
    /// 2 bits per element (sign + magnitude) and one `f32` scale per frame.
    TwoBit,
    /// 16 bits per element (bfloat16), no scale.
    Bf16,
}

impl Grade {
    /// Bytes of a frame of `n` elements: `⌈n/4⌉ + 4` (2-bit) or `2n` (bf16).
    pub const fn frame_len(self, n: usize) -> usize {
        match self {
            Self::TwoBit => n.div_ceil(4) + 4,
            Self::Bf16 => 2 * n,
        }
    }

    /// Bits per element on the wire, scales not counted (2 or 16).
    pub const fn bits(self) -> u32 {
        match self {
            Self::TwoBit => 2,
            Self::Bf16 => 16,
        }
    }
}

/// Encode `p` into `frame` and replace `p` by the residual `p − Q(p)`;
/// returns the scale sent (`s` for [`Grade::TwoBit`], `1.0` for bf16).
///
/// # Errors
/// [`CodecError::BufferSize`] when `frame` is not
/// [`Grade::frame_len`]`(p.len())` bytes; [`CodecError::NonFinite`] when an
/// element of `p` is NaN/±∞ or a 2-bit level would overflow `f32`. Nothing
/// changes then.
pub fn encode_residual(grade: Grade, p: &mut [f32], frame: &mut [u8]) -> Result<f32, CodecError> {
    let n = p.len();
    let expected = grade.frame_len(n);
    if frame.len() != expected {
        return Err(CodecError::BufferSize {
            expected,
            found: frame.len(),
        });
    }
    if let Some(index) = p.iter().position(|x| !x.is_finite()) {
        return Err(CodecError::NonFinite { index });
    }
    match grade {
        Grade::TwoBit => two_bit(p, frame),
        Grade::Bf16 => {
            for (x, out) in p.iter_mut().zip(frame.chunks_exact_mut(2)) {
                let h = to_bf16(*x);
                out.copy_from_slice(&h.to_le_bytes());
                *x -= from_bf16(h);
            }
            Ok(1.0)
        }
    }
}

/// The trial scale `‖p‖₂/(2√n)` (0 for an empty or zero buffer).
fn trial_scale(p: &[f32]) -> f64 {
    if p.is_empty() {
        return 0.0;
    }
    let ss: f64 = p.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    num_traits::Float::sqrt(ss / p.len() as f64) / 2.0
}

fn two_bit(p: &mut [f32], frame: &mut [u8]) -> Result<f32, CodecError> {
    let n = p.len();
    let threshold = 2.0 * trial_scale(p);
    let (codes, scale_bytes) = frame.split_at_mut(n.div_ceil(4));
    // Pass 2: codes, ⟨p, c⟩ and ⟨c, c⟩.
    let (mut pc, mut cc) = (0.0f64, 0.0f64);
    for (byte, xs) in codes.iter_mut().zip(p.chunks(4)) {
        let mut b = 0u8;
        for (j, &x) in xs.iter().enumerate() {
            let big = f64::from(x).abs() > threshold;
            let neg = x < 0.0;
            b |= (u8::from(neg) << 1 | u8::from(big)) << (6 - 2 * j);
            let mag = if big { 3.0 } else { 1.0 };
            pc += f64::from(x).abs() * mag;
            cc += mag * mag;
        }
        *byte = b;
    }
    let s = if cc > 0.0 { (pc / cc) as f32 } else { 0.0 };
    if !(3.0 * s).is_finite() {
        return Err(CodecError::NonFinite { index: 0 });
    }
    scale_bytes.copy_from_slice(&s.to_le_bytes());
    // Pass 3: the residual, from the codes just written.
    for (&byte, xs) in codes.iter().zip(p.chunks_mut(4)) {
        for (j, x) in xs.iter_mut().enumerate() {
            *x -= level(byte >> (6 - 2 * j)) * s;
        }
    }
    Ok(s)
}

/// The level `±1`/`±3` of a 2-bit code in the low two bits of `code`.
#[inline(always)]
fn level(code: u8) -> f32 {
    let mag = if code & 1 != 0 { 3.0 } else { 1.0 };
    if code & 2 != 0 { -mag } else { mag }
}

/// `f32` → bfloat16 bits, round to nearest even, overflow clamped to the
/// largest finite value (input finite).
pub const fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1));
    let h = (rounded >> 16) as u16;
    if h & 0x7f80 == 0x7f80 {
        // Rounded up into the ∞ exponent: the largest finite of that sign.
        ((bits >> 16) as u16 & 0x8000) | 0x7f7f
    } else {
        h
    }
}

/// bfloat16 bits → `f32` (exact).
pub const fn from_bf16(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// Decode a frame into `out`: `out[i] += Q_i` when `add`, else
/// `out[i] = Q_i` (`Q_i = level·s` for 2-bit, the bf16 value for bf16).
///
/// # Errors
/// [`CodecError::BufferSize`] when `frame` is not
/// [`Grade::frame_len`]`(out.len())` bytes; [`CodecError::InvalidScale`]
/// (chunk 0) for a 2-bit scale that is negative, NaN or ±∞;
/// [`CodecError::NonFinite`] for a bf16 NaN/±∞ element;
/// [`CodecError::NonZeroPadding`] for set 2-bit padding bits. `out` is
/// unchanged then.
pub fn decode(grade: Grade, frame: &[u8], out: &mut [f32], add: bool) -> Result<(), CodecError> {
    let n = out.len();
    let expected = grade.frame_len(n);
    if frame.len() != expected {
        return Err(CodecError::BufferSize {
            expected,
            found: frame.len(),
        });
    }
    match grade {
        Grade::TwoBit => {
            let (codes, sb) = frame.split_at(n.div_ceil(4));
            let s = f32::from_le_bytes([sb[0], sb[1], sb[2], sb[3]]);
            if !(s.is_finite() && s.is_sign_positive() && (3.0 * s).is_finite()) {
                return Err(CodecError::InvalidScale { chunk: 0 });
            }
            let tail = n % 4;
            if tail != 0 && codes[codes.len() - 1] & (0xff >> (2 * tail)) != 0 {
                return Err(CodecError::NonZeroPadding);
            }
            for (&byte, xs) in codes.iter().zip(out.chunks_mut(4)) {
                for (j, x) in xs.iter_mut().enumerate() {
                    let q = level(byte >> (6 - 2 * j)) * s;
                    *x = if add { *x + q } else { q };
                }
            }
        }
        Grade::Bf16 => {
            if let Some(index) = frame
                .chunks_exact(2)
                .position(|b| u16::from_le_bytes([b[0], b[1]]) & 0x7f80 == 0x7f80)
            {
                return Err(CodecError::NonFinite { index });
            }
            for (x, b) in out.iter_mut().zip(frame.chunks_exact(2)) {
                let q = from_bf16(u16::from_le_bytes([b[0], b[1]]));
                *x = if add { *x + q } else { q };
            }
        }
    }
    Ok(())
}
