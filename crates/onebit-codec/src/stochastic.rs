//! Unbiased stochastic 1-bit compression with a caller-supplied RNG.
//!
//! The RNG is anything that implements [`RandomU32`]: this crate's
//! [`SplitMix64`], or a closure over the caller's own generator, so no RNG
//! crate (and no version of one) is part of this API:
//!
//! ```
//! use onebit_codec::stochastic::{SplitMix64, compress};
//!
//! let x = [0.5f32, -1.0, 0.25, 1.0];
//! let mut rng = SplitMix64::new(7);
//! let payload = compress(&x, None, &mut rng)?;
//! assert_eq!(payload.scales(), &[1.0]);
//!
//! // Any generator through a closure (here a counter, for the example).
//! let mut state = 0u32;
//! let mut next = || {
//!     state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
//!     state
//! };
//! let again = compress(&x, None, &mut next)?;
//! assert_eq!(again.len(), 4);
//! # Ok::<(), onebit_codec::CodecError>(())
//! ```
//!
//! For a chunk with `s = max |x|` (> 0), element `x` gets bit 1 with probability
//! `P(x) ≈ (1 + x/s) / 2` and decodes to `±s`, so `E[x̂] = s·(2P − 1) = x`.
//! Exactly: `t = ceil((0.5 + x·(0.5/s)) · 2³²)` (in `f64`) and the bit is
//! `rng.next_u32() < t`, so `P = t / 2³²` ([`prob_one`]) and
//! `|E[x̂] − x| ≤ s·2⁻³¹` (the 2⁻³² probability grid, plus `f64` rounding).
//! The RNG is drawn once per element in index order; a chunk with `s = 0`
//! (all zeros) draws nothing and sends bit 1 (decodes to `+0`).

use alloc::vec;
use core::num::NonZeroUsize;

use crate::pack::packed_len;
use crate::scale::{first_non_finite, max_abs_finite};
use crate::{CodecError, Compressed, ScaleKind};

/// A source of uniform random `u32`s: all the stochastic compressor draws.
///
/// Implemented by [`SplitMix64`] and by every `FnMut() -> u32`, so a `rand`
/// generator of any version plugs in as `&mut || rng.next_u32()`.
pub trait RandomU32 {
    /// The next uniformly distributed `u32`.
    fn next_u32(&mut self) -> u32;
}

impl<F: FnMut() -> u32 + ?Sized> RandomU32 for F {
    fn next_u32(&mut self) -> u32 {
        self()
    }
}

/// 2³² as `f64`.
const TWO_32: f64 = 4_294_967_296.0;

/// The `u32` threshold of element `x` in a chunk with scale `s > 0`: bit 1 iff
/// `next_u32() < threshold`.
#[inline(always)]
fn threshold(x: f32, half_inv_s: f64) -> u64 {
    let q = 0.5 + f64::from(x) * half_inv_s;
    // q ∈ [0, 1] up to rounding; clamp so the cast is exact and in range.
    let t = num_traits::Float::ceil(q * TWO_32).clamp(0.0, TWO_32);
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "t ∈ [0, 2³²]"
    )]
    let t = t as u64;
    t
}

/// Exact probability that element `x` of a chunk with scale `s` is sent as
/// bit 1 (`+s`), as this implementation draws it: `threshold / 2³²`.
/// Returns 1 for `s = 0` (bit 1 without drawing).
pub fn prob_one(x: f32, s: f32) -> f64 {
    if s == 0.0 {
        return 1.0;
    }
    threshold(x, 0.5 / f64::from(s)) as f64 / TWO_32
}

/// Compress `x` stochastically: per chunk `s = max |x|` to `scales_out`, one
/// random bit per element to `signs_out` (`numpy.packbits` layout).
/// `chunk = None` is one scale for the whole tensor.
///
/// # Errors
/// [`CodecError::NonFinite`] for a NaN/±∞ in `x`; [`CodecError::BufferSize`]
/// when `signs_out.len() != ceil(n / 8)`; [`CodecError::LengthMismatch`] when
/// `scales_out.len() != ceil(n / chunk)`. Outputs are unchanged and no random
/// number is drawn then.
pub fn compress_into<R: RandomU32 + ?Sized>(
    x: &[f32],
    chunk: Option<NonZeroUsize>,
    rng: &mut R,
    signs_out: &mut [u8],
    scales_out: &mut [f32],
) -> Result<(), CodecError> {
    let n = x.len();
    let chunk = chunk.map_or(n.max(1), NonZeroUsize::get);
    CodecError::check_packed(n, signs_out.len())?;
    CodecError::check_len(n.div_ceil(chunk), scales_out.len())?;
    if let Some(index) = first_non_finite(x) {
        return Err(CodecError::NonFinite { index });
    }
    signs_out.fill(0);
    for (c, (xc, s_out)) in x.chunks(chunk).zip(scales_out.iter_mut()).enumerate() {
        let s = max_abs_finite(xc);
        *s_out = s;
        let start = c * chunk;
        let half_inv_s = 0.5 / f64::from(s);
        for (i, &v) in xc.iter().enumerate() {
            let one = s == 0.0 || u64::from(rng.next_u32()) < threshold(v, half_inv_s);
            let at = start + i;
            signs_out[at / 8] |= u8::from(one) << (7 - at % 8);
        }
    }
    Ok(())
}

/// [`compress_into`] returning an owned payload (scale kind
/// [`ScaleKind::MaxAbs`]).
///
/// # Errors
/// [`CodecError::NonFinite`] for a NaN/±∞ in `x`.
pub fn compress<R: RandomU32 + ?Sized>(
    x: &[f32],
    chunk: Option<NonZeroUsize>,
    rng: &mut R,
) -> Result<Compressed, CodecError> {
    let n = x.len();
    let c = chunk.map_or(n.max(1), NonZeroUsize::get);
    let mut bits = vec![0u8; packed_len(n)];
    let mut scales = vec![0.0f32; n.div_ceil(c)];
    compress_into(x, chunk, rng, &mut bits, &mut scales)?;
    Ok(Compressed::from_parts_unchecked(
        n,
        c,
        ScaleKind::MaxAbs,
        scales,
        bits,
    ))
}

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny seeded `no_std` generator for
/// callers without one. Not cryptographic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator started from `seed`.
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }
}

impl RandomU32 for SplitMix64 {
    /// The high 32 bits of [`SplitMix64::next_u64`].
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
}

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
