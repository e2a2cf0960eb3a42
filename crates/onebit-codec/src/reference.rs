//! Plain two-pass reference compressor (DeepSpeed's sequence of passes).
//!
//! `x + e → p` in place, scale, pack, error update: one pass each. It computes
//! the same `f32` operations in the same order as [`crate::Compressor`], so
//! both give identical bits; tests compare them and the bench uses this as the
//! two-pass baseline.

use crate::scale::sign_scale;
use crate::{CodecError, ErrorFeedback, ScaleKind, pack_signs_into};

/// One step on an explicit error buffer `e`: `p = x + e`, per-chunk scales to
/// `scales_out`, signs of `p` to `signs_out`, then `e ← p − α·σ(p)` (`Full`) or
/// `e ← β·e + (1 − β)·(p − α·σ(p))` (`Decayed`).
///
/// `chunk = None` is one scale for the whole tensor.
///
/// # Errors
/// [`CodecError::LengthMismatch`] / [`CodecError::BufferSize`] for wrong
/// lengths, [`CodecError::NonFinite`] when `x` or `x + e` is not finite
/// (nothing changes then).
pub fn compress_step(
    x: &[f32],
    e: &mut [f32],
    feedback: ErrorFeedback,
    kind: ScaleKind,
    chunk: Option<usize>,
    signs_out: &mut [u8],
    scales_out: &mut [f32],
) -> Result<(), CodecError> {
    let n = x.len();
    if e.len() != n {
        return Err(CodecError::LengthMismatch {
            expected: n,
            found: e.len(),
        });
    }
    let chunk = chunk.unwrap_or(n.max(1));
    if chunk == 0 {
        return Err(CodecError::ZeroChunk);
    }
    let k = n.div_ceil(chunk);
    if scales_out.len() != k {
        return Err(CodecError::LengthMismatch {
            expected: k,
            found: scales_out.len(),
        });
    }
    if signs_out.len() != crate::packed_len(n) {
        return Err(CodecError::BufferSize {
            expected: crate::packed_len(n),
            found: signs_out.len(),
        });
    }
    // Branch-free check first (vectorises), locate only on failure.
    let finite = |(&a, &b): (&f32, &f32)| (a + b).is_finite();
    if !x
        .iter()
        .zip(e.iter())
        .fold(true, |ok, pair| ok & finite(pair))
    {
        let index = x
            .iter()
            .zip(e.iter())
            .position(|pair| !finite(pair))
            .unwrap_or(0);
        return Err(CodecError::NonFinite { index });
    }
    let (beta, keep) = match feedback {
        ErrorFeedback::Full => (None, 1.0),
        ErrorFeedback::Decayed { beta } => (Some(beta), 1.0 - beta),
    };
    if let Some(beta) = beta {
        // Decayed needs the old e: form p in a scratch copy.
        let p: alloc::vec::Vec<f32> = x.iter().zip(e.iter()).map(|(&x, &e)| x + e).collect();
        for (s, c) in scales_out.iter_mut().zip(p.chunks(chunk)) {
            *s = kind.of(c);
        }
        pack_signs_into(&p, signs_out)?;
        for ((ec, pc), &a) in e
            .chunks_mut(chunk)
            .zip(p.chunks(chunk))
            .zip(scales_out.iter())
        {
            for (e, &p) in ec.iter_mut().zip(pc) {
                *e = beta * *e + keep * (p - sign_scale(p, a));
            }
        }
        return Ok(());
    }
    // Pass 1: p = x + e, in place. Pass 2: scales. Pass 3: signs.
    // Pass 4: e ← p − α·σ(p).
    e.iter_mut().zip(x).for_each(|(e, &x)| *e += x);
    for (s, c) in scales_out.iter_mut().zip(e.chunks(chunk)) {
        *s = kind.of(c);
    }
    pack_signs_into(e, signs_out)?;
    for (ec, &a) in e.chunks_mut(chunk).zip(scales_out.iter()) {
        for v in ec {
            *v -= sign_scale(*v, a);
        }
    }
    Ok(())
}
