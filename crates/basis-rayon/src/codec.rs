//! The 1-bit codec's passes on rayon, bit-identical to `onebit-codec`.
//!
//! Packing and decoding are element-wise, so any split gives the same bits.
//! The fused compressor is element-wise except for its scales: a scale is a
//! sum in a fixed sequential order (8 interleaved f64 lanes, see
//! `onebit_codec::scale`), and splitting that sum across threads would change
//! its rounding. So chunks (one scale each) run in parallel, but *within* a
//! chunk the sum stays one sequential pass; with a single whole-tensor scale
//! (the default) that pass is the serial part of the step. Everything else
//! (input checks, `p = x + e`, packing, the new error) runs in parallel
//! blocks with the serial arithmetic, element by element.

use onebit_codec::{
    CodecError, Compressed, Compressor, CompressorConfig, ErrorFeedback, ScaleKind,
    full_step_chunk, pack_signs_into, packed_len, unpack_signs,
};
use rayon::prelude::*;

use crate::Error;

/// Elements per parallel block: a multiple of 64 (whole sign words) small
/// enough to balance, large enough to amortize a task.
const BLOCK: usize = 1 << 14;

/// [`pack_signs_into`] on the current rayon pool: the same bytes.
///
/// # Errors
/// [`Error::Codec`] (`BufferSize`) when `out.len() != ceil(x.len() / 8)`.
pub fn par_pack_signs_into(x: &[f32], out: &mut [u8]) -> Result<(), Error> {
    CodecError::check_packed(x.len(), out.len())?;
    x.par_chunks(BLOCK)
        .zip(out.par_chunks_mut(BLOCK / 8))
        .try_for_each(|(x, o)| pack_signs_into(x, o))?;
    Ok(())
}

/// [`unpack_signs`] on the current rayon pool: `out[i] = ±scale`.
///
/// # Errors
/// [`Error::Codec`] (`BufferSize`) when `bits.len() != ceil(out.len() / 8)`.
pub fn par_unpack_signs(bits: &[u8], scale: f32, out: &mut [f32]) -> Result<(), Error> {
    CodecError::check_packed(out.len(), bits.len())?;
    out.par_chunks_mut(BLOCK)
        .zip(bits.par_chunks(BLOCK / 8))
        .try_for_each(|(o, b)| unpack_signs(b, scale, o))?;
    Ok(())
}

/// `Compressed::decode_into` on the current rayon pool:
/// `out[i] = ±scales[i / chunk]`.
///
/// # Errors
/// [`Error::Codec`] (`LengthMismatch`) when `out.len() != c.len()`.
pub fn par_decode_into(c: &Compressed, out: &mut [f32]) -> Result<(), Error> {
    decode_with(c, out, |o, s| *o = s)
}

/// `Compressed::decode_add` on the current rayon pool:
/// `acc[i] += ±scales[i / chunk]` (the same f32 addition per element).
///
/// # Errors
/// [`Error::Codec`] (`LengthMismatch`) when `acc.len() != c.len()`.
pub fn par_decode_add(c: &Compressed, acc: &mut [f32]) -> Result<(), Error> {
    decode_with(c, acc, |o, s| *o += s)
}

fn decode_with(
    c: &Compressed,
    out: &mut [f32],
    f: impl Fn(&mut f32, f32) + Sync,
) -> Result<(), Error> {
    if out.len() != c.len() {
        return Err(CodecError::LengthMismatch {
            expected: c.len(),
            found: out.len(),
        }
        .into());
    }
    let (bits, scales, chunk) = (c.bits(), c.scales(), c.chunk_len());
    out.par_chunks_mut(BLOCK)
        .enumerate()
        .for_each(|(b, block)| {
            for_each_piece(b * BLOCK, block.len(), chunk, |c, s, e| {
                let scale = scales[c];
                for (i, o) in (s..e).zip(&mut block[s - b * BLOCK..e - b * BLOCK]) {
                    let one = (bits[i / 8] << (i % 8)) & 0x80 != 0;
                    f(o, if one { scale } else { -scale });
                }
            });
        });
    Ok(())
}

/// Calls `f(chunk, start, end)` for each piece of `start..start+len` that lies
/// in one chunk of length `chunk`.
#[inline]
fn for_each_piece(start: usize, len: usize, chunk: usize, mut f: impl FnMut(usize, usize, usize)) {
    let end = start + len;
    let mut s = start;
    while s < end {
        let c = s / chunk;
        let e = end.min((c + 1) * chunk);
        f(c, s, e);
        s = e;
    }
}

/// `α·σ(p)`: `+α` when `!(p < 0)`, else `−α` (the codec's sign rule).
#[inline(always)]
fn sign_scale(p: f32, alpha: f32) -> f32 {
    if p < 0.0 { -alpha } else { alpha }
}

/// `|x|`'s bit pattern, for exact maxima over f32 magnitudes.
#[inline(always)]
fn abs_bits(x: f32) -> u32 {
    x.to_bits() & 0x7fff_ffff
}

/// The error-feedback compressor of `onebit-codec` with its passes on the
/// current rayon pool. Same state, same options, same errors, and the same
/// bits (signs, scales, error buffer) as [`Compressor`] fed the same inputs,
/// for every thread count.
///
/// ```
/// use basis_rayon::ParCompressor;
/// use onebit_codec::Compressor;
///
/// let x: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin()).collect();
/// let (mut serial, mut par) = (Compressor::new(1000), ParCompressor::new(1000));
/// let (mut a, mut b) = (vec![0u8; 125], vec![0u8; 125]);
/// for _ in 0..3 {
///     let alpha = serial.compress_into(&x, &mut a)?;
///     assert_eq!(par.compress_into(&x, &mut b)?.to_bits(), alpha.to_bits());
///     assert_eq!(a, b);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct ParCompressor {
    n: usize,
    config: CompressorConfig,
    /// Elements per scale (≥ 1).
    chunk: usize,
    /// `Full`: `p` of the last step, `e = p − α·σ(p)` pending with `alphas`;
    /// `Decayed`: `e` itself (its `alphas` stay 0). As in `Compressor`.
    buf: Vec<f32>,
    alphas: Vec<f32>,
    /// An upper bound on `max |e_i|`, to skip the per-element overflow check.
    bound: f32,
    /// `Decayed` only: `p = x + e` of the current step.
    scratch: Vec<f32>,
}

impl ParCompressor {
    /// The reference compressor for `n` elements (Full feedback, RMS, one scale, `e = 0`).
    pub fn new(n: usize) -> Self {
        Self::build(n, CompressorConfig::default())
    }

    /// A compressor with the given options.
    ///
    /// # Errors
    /// [`Error::Codec`] (`InvalidBeta`) as `Compressor::with_config`.
    pub fn with_config(n: usize, config: CompressorConfig) -> Result<Self, Error> {
        // The serial constructor owns the rules for valid options.
        Compressor::with_config(0, config)?;
        Ok(Self::build(n, config))
    }

    /// Takes over a serial compressor's options and error buffer; the next
    /// steps continue exactly as `c`'s would.
    pub fn from_compressor(c: &mut Compressor) -> Self {
        let mut par = Self::build(c.len(), c.config());
        par.buf.copy_from_slice(c.materialize_error());
        par.bound = f32::from_bits(par.buf.par_iter().map(|&e| abs_bits(e)).max().unwrap_or(0));
        par
    }

    /// A serial compressor in this one's state.
    ///
    /// # Errors
    /// None in practice (the options and buffer were valid); the codec's
    /// errors are passed through.
    pub fn to_compressor(&self) -> Result<Compressor, Error> {
        let mut c = Compressor::with_config(self.n, self.config)?;
        let mut e = vec![0.0; self.n];
        self.error_into(&mut e)?;
        c.set_error(&e)?;
        Ok(c)
    }

    fn build(n: usize, config: CompressorConfig) -> Self {
        let chunk = config.chunk.map_or(n.max(1), core::num::NonZeroUsize::get);
        let decayed = matches!(config.feedback, ErrorFeedback::Decayed { .. });
        Self {
            n,
            config,
            chunk,
            buf: vec![0.0; n],
            alphas: vec![0.0; n.div_ceil(chunk)],
            bound: 0.0,
            scratch: if decayed { vec![0.0; n] } else { Vec::new() },
        }
    }

    /// Elements per tensor.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Number of scales per step, `ceil(n / chunk)`.
    pub fn chunks(&self) -> usize {
        self.alphas.len()
    }

    /// One step with a single scale; see `Compressor::compress_into`.
    ///
    /// # Errors
    /// As `Compressor::compress_into` (wrapped in [`Error::Codec`]); nothing changes then.
    pub fn compress_into(&mut self, x: &[f32], signs_out: &mut [u8]) -> Result<f32, Error> {
        let k = self.chunks();
        if k > 1 {
            return Err(CodecError::LengthMismatch {
                expected: k,
                found: 1,
            }
            .into());
        }
        let mut scale = [if self.config.scale == ScaleKind::Unit {
            1.0
        } else {
            0.0
        }];
        self.compress_chunks_into(x, signs_out, &mut scale[..k])?;
        Ok(scale[0])
    }

    /// One step with per-chunk scales; see `Compressor::compress_chunks_into`.
    ///
    /// # Errors
    /// As `Compressor::compress_chunks_into` (wrapped in [`Error::Codec`]);
    /// nothing changes then.
    pub fn compress_chunks_into(
        &mut self,
        x: &[f32],
        signs_out: &mut [u8],
        scales_out: &mut [f32],
    ) -> Result<(), Error> {
        self.validate(x, signs_out, scales_out)?;
        match self.config.feedback {
            ErrorFeedback::Full => self.step_full(x, signs_out, scales_out),
            ErrorFeedback::Decayed { beta } => self.step_decayed(beta, x, signs_out, scales_out),
        }
        Ok(())
    }

    /// One step returning an owned payload.
    ///
    /// # Errors
    /// As [`compress_chunks_into`](Self::compress_chunks_into).
    pub fn compress(&mut self, x: &[f32]) -> Result<Compressed, Error> {
        let mut bits = vec![0u8; packed_len(self.n)];
        let mut scales = vec![0.0f32; self.chunks()];
        self.compress_chunks_into(x, &mut bits, &mut scales)?;
        Ok(Compressed::new(
            self.n,
            self.chunk,
            self.config.scale,
            scales,
            bits,
        )?)
    }

    /// Copies the error buffer `e` into `out`.
    ///
    /// # Errors
    /// [`Error::Codec`] (`LengthMismatch`) when `out.len() != n`.
    pub fn error_into(&self, out: &mut [f32]) -> Result<(), Error> {
        CodecError::check_len(self.n, out.len())?;
        let (buf, alphas, chunk) = (&self.buf, &self.alphas, self.chunk);
        out.par_chunks_mut(BLOCK).enumerate().for_each(|(b, o)| {
            for_each_piece(b * BLOCK, o.len(), chunk, |c, s, e| {
                let a = alphas[c];
                for (o, &p) in o[s - b * BLOCK..e - b * BLOCK].iter_mut().zip(&buf[s..e]) {
                    *o = p - sign_scale(p, a);
                }
            });
        });
        Ok(())
    }

    /// Replaces the error buffer (restore from a checkpoint).
    ///
    /// # Errors
    /// [`Error::Codec`]: `LengthMismatch` when `e.len() != n`, `NonFinite`
    /// for a NaN/±∞; nothing changes then.
    pub fn set_error(&mut self, e: &[f32]) -> Result<(), Error> {
        CodecError::check_len(self.n, e.len())?;
        let (first_bad, max) = scan(e);
        if let Some(index) = first_bad {
            return Err(CodecError::NonFinite { index }.into());
        }
        self.buf.copy_from_slice(e);
        self.alphas.fill(0.0);
        self.bound = f32::from_bits(max);
        Ok(())
    }

    /// Sets the error buffer to zero (as `Compressor::reset_error`).
    pub fn reset_error(&mut self) {
        self.buf.fill(0.0);
        self.alphas.fill(0.0);
        self.bound = 0.0;
    }

    /// The serial compressor's checks, in its order, with the passes parallel.
    fn validate(&self, x: &[f32], signs_out: &[u8], scales_out: &[f32]) -> Result<(), Error> {
        CodecError::check_len(self.n, x.len())?;
        CodecError::check_packed(self.n, signs_out.len())?;
        CodecError::check_len(self.chunks(), scales_out.len())?;
        let (first_bad, max_x) = scan(x);
        if let Some(index) = first_bad {
            return Err(CodecError::NonFinite { index }.into());
        }
        // Below f32::MAX (with margin) no `x + e` can overflow; else check each.
        let headroom = f64::from(f32::MAX) * (1.0 - 1.0 / 1_048_576.0);
        if f64::from(f32::from_bits(max_x)) + f64::from(self.bound) >= headroom {
            let (buf, alphas, chunk) = (&self.buf, &self.alphas, self.chunk);
            let overflow = (0..self.n).into_par_iter().find_first(|&i| {
                let p = buf[i];
                !(x[i] + (p - sign_scale(p, alphas[i / chunk]))).is_finite()
            });
            if let Some(index) = overflow {
                return Err(CodecError::NonFinite { index }.into());
            }
        }
        Ok(())
    }

    /// `Full`: `buf ← x + (buf − α·σ(buf))` and pack its signs (parallel
    /// blocks), then one scale per chunk (chunks in parallel, each a
    /// sequential sum).
    fn step_full(&mut self, x: &[f32], signs_out: &mut [u8], scales_out: &mut [f32]) {
        let chunk = self.chunk;
        let max_bits = if scales_out.len() > 1 && chunk.is_multiple_of(64) {
            self.full_by_chunk(x, signs_out, scales_out)
        } else {
            self.full_by_block(x, signs_out, scales_out)
        };
        self.alphas.copy_from_slice(scales_out);
        let max_alpha = scales_out.iter().fold(0.0f32, |m, &a| m.max(a));
        self.bound = f32::from_bits(max_bits).max(max_alpha);
    }

    /// Whole chunks per task (chunk a multiple of 64, so each chunk owns whole
    /// sign words): each chunk is the serial compressor's fused pass
    /// (`onebit_codec::full_step_chunk`), then its largest `|p|` while it is
    /// in cache. Returns the largest `|p|` bit pattern.
    fn full_by_chunk(&mut self, x: &[f32], signs_out: &mut [u8], scales_out: &mut [f32]) -> u32 {
        let (kind, chunk) = (self.config.scale, self.chunk);
        self.buf
            .par_chunks_mut(chunk)
            .zip(x.par_chunks(chunk))
            .zip(signs_out.par_chunks_mut(chunk / 8))
            .zip(scales_out.par_iter_mut())
            .zip(self.alphas.par_iter())
            .with_min_len(BLOCK.div_ceil(chunk))
            .map(|((((buf, x), signs), scale), &a)| {
                // Lengths match by construction (chunk / 8 bytes per chunk).
                *scale = full_step_chunk(kind, a, x, buf, signs).unwrap_or(f32::NAN);
                max_abs_bits(buf)
            })
            .max()
            .unwrap_or(0)
    }

    /// Blocks per task for the element-wise work, then one scale per chunk
    /// (chunks in parallel, each one sequential sum — with a single scale, a
    /// serial pass). Returns the largest `|p|` bit pattern.
    fn full_by_block(&mut self, x: &[f32], signs_out: &mut [u8], scales_out: &mut [f32]) -> u32 {
        let (alphas, chunk) = (&self.alphas, self.chunk);
        let max_bits = self
            .buf
            .par_chunks_mut(BLOCK)
            .zip(x.par_chunks(BLOCK))
            .zip(signs_out.par_chunks_mut(BLOCK / 8))
            .enumerate()
            .map(|(b, ((buf, x), signs))| {
                for_each_piece(b * BLOCK, buf.len(), chunk, |c, s, e| {
                    let r = s - b * BLOCK..e - b * BLOCK;
                    update_full(&mut buf[r.clone()], &x[r], alphas[c]);
                });
                // Lengths match by construction (BLOCK / 8 bytes per block).
                let _ = pack_signs_into(buf, signs);
                max_abs_bits(buf)
            })
            .max()
            .unwrap_or(0);
        chunk_scales(self.config.scale, &self.buf, chunk, scales_out);
        max_bits
    }

    /// `Decayed`: `p = x + e` and its signs (parallel), the scales, then
    /// `e ← β·e + (1 − β)·(p − α·σ(p))` (parallel).
    fn step_decayed(&mut self, beta: f32, x: &[f32], signs_out: &mut [u8], scales_out: &mut [f32]) {
        let p = &mut self.scratch;
        p.par_chunks_mut(BLOCK)
            .zip(x.par_chunks(BLOCK))
            .zip(self.buf.par_chunks(BLOCK))
            .zip(signs_out.par_chunks_mut(BLOCK / 8))
            .for_each(|(((p, x), e), signs)| {
                for ((p, &xi), &e) in p.iter_mut().zip(x).zip(e) {
                    *p = xi + e;
                }
                let _ = pack_signs_into(p, signs);
            });
        chunk_scales(self.config.scale, p, self.chunk, scales_out);
        let keep = 1.0 - beta;
        let (p, scales, chunk) = (&self.scratch, &*scales_out, self.chunk);
        let max_bits = self
            .buf
            .par_chunks_mut(BLOCK)
            .enumerate()
            .map(|(b, e)| {
                let mut m = 0u32;
                for_each_piece(b * BLOCK, e.len(), chunk, |c, s, end| {
                    let a = scales[c];
                    for (e, &p) in e[s - b * BLOCK..end - b * BLOCK].iter_mut().zip(&p[s..end]) {
                        *e = beta * *e + keep * (p - sign_scale(p, a));
                        m = m.max(abs_bits(*e));
                    }
                });
                m
            })
            .max()
            .unwrap_or(0);
        self.bound = f32::from_bits(max_bits);
    }
}

/// `buf ← x + (buf − α·σ(buf))`: the pending error plus the new input, the
/// serial compressor's exact f32 operations.
#[inline(always)]
fn update_full(buf: &mut [f32], x: &[f32], alpha: f32) {
    for (q, &xi) in buf.iter_mut().zip(x) {
        *q = xi + (*q - sign_scale(*q, alpha));
    }
}

/// The largest `|v|` bit pattern in `x` (exact, order-free).
#[inline(always)]
fn max_abs_bits(x: &[f32]) -> u32 {
    x.iter().fold(0u32, |m, &v| m.max(abs_bits(v)))
}

/// `scales[c] = kind.of(chunk c of p)`: chunks in parallel, each one
/// sequential sum in the codec's documented order.
fn chunk_scales(kind: ScaleKind, p: &[f32], chunk: usize, scales: &mut [f32]) {
    scales
        .par_iter_mut()
        .zip(p.par_chunks(chunk))
        .for_each(|(s, piece)| *s = kind.of(piece));
}

/// First non-finite index and the largest `|x|` bit pattern among the finite
/// elements, in one parallel pass.
fn scan(x: &[f32]) -> (Option<usize>, u32) {
    x.par_chunks(BLOCK)
        .enumerate()
        .map(|(b, block)| {
            let max = block.iter().fold(0u32, |m, &v| m.max(abs_bits(v)));
            let bad = if max >= 0x7f80_0000 {
                block
                    .iter()
                    .position(|v| !v.is_finite())
                    .map(|i| b * BLOCK + i)
            } else {
                None
            };
            (bad, max)
        })
        .reduce(
            || (None, 0),
            |(b1, m1), (b2, m2)| {
                let bad = match (b1, b2) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                (bad, m1.max(m2))
            },
        )
}
