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

/// Slow reference of [`crate::graded::encode_residual`]: one element at a
/// time, bits placed by index arithmetic, bfloat16 rounding decided by
/// comparing the two neighbouring bfloat16 values in exact `f64`
/// arithmetic. Returns `(frame, residual)` for input `p`, or `None` when
/// the fast path must refuse it (non-finite input or level).
pub fn graded_encode(
    grade: crate::graded::Grade,
    p: &[f32],
) -> Option<(alloc::vec::Vec<u8>, alloc::vec::Vec<f32>)> {
    use crate::graded::Grade;
    use alloc::vec;
    if p.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let n = p.len();
    let mut frame = vec![0u8; grade.frame_len(n)];
    let mut residual = p.to_vec();
    match grade {
        Grade::TwoBit => {
            let mut ss = 0.0f64;
            for &x in p {
                ss += f64::from(x) * f64::from(x);
            }
            let s0 = if n == 0 {
                0.0
            } else {
                num_traits::Float::sqrt(ss / n as f64) / 2.0
            };
            let mut codes = vec![(false, false); n];
            let (mut pc, mut cc) = (0.0f64, 0.0f64);
            for (i, &x) in p.iter().enumerate() {
                let big = f64::from(x).abs() > 2.0 * s0;
                codes[i] = (x < 0.0, big);
                let mag = if big { 3.0 } else { 1.0 };
                pc += f64::from(x).abs() * mag;
                cc += mag * mag;
            }
            let s = if cc > 0.0 { (pc / cc) as f32 } else { 0.0 };
            if !(3.0 * s).is_finite() {
                return None;
            }
            for (i, &(neg, big)) in codes.iter().enumerate() {
                let shift = 6 - 2 * (i % 4);
                frame[i / 4] |= (u8::from(neg) * 2 + u8::from(big)) << shift;
                let level: f32 = match (neg, big) {
                    (false, false) => 1.0,
                    (false, true) => 3.0,
                    (true, false) => -1.0,
                    (true, true) => -3.0,
                };
                residual[i] = p[i] - level * s;
            }
            let at = n.div_ceil(4);
            frame[at..].copy_from_slice(&s.to_le_bytes());
        }
        Grade::Bf16 => {
            for (i, &x) in p.iter().enumerate() {
                let down = (x.to_bits() >> 16) as u16;
                let lo = f32::from_bits(u32::from(down) << 16);
                let hi_bits = down.wrapping_add(1);
                let hi = f32::from_bits(u32::from(hi_bits) << 16);
                // `lo` truncates toward 0; `hi` is one bf16 step further out.
                let (dl, dh) = (
                    (f64::from(x) - f64::from(lo)).abs(),
                    (f64::from(hi) - f64::from(x)).abs(),
                );
                let mut h = if dl < dh || (dl == dh && down.is_multiple_of(2)) {
                    down
                } else {
                    hi_bits
                };
                if !f32::from_bits(u32::from(h) << 16).is_finite() {
                    h = (down & 0x8000) | 0x7f7f;
                }
                frame[2 * i..2 * i + 2].copy_from_slice(&h.to_le_bytes());
                residual[i] = x - f32::from_bits(u32::from(h) << 16);
            }
        }
    }
    Some((frame, residual))
}
