//! The compressor's step in pieces run by an [`Executor`] (several threads),
//! with the serial step's bits, errors and "nothing changes on error".
//!
//! `Full`: the new `p = x + (old − α·σ(old))` goes into the spare buffer as
//! the serial step's does, each piece checking its values and packing its
//! signs; only a clean step swaps the buffers. When chunks start on sign
//! words (`chunk % 64 == 0`) and there are several, whole chunks are the
//! pieces and each sums its own scale in the pass (the serial word kernel);
//! otherwise the pieces are blocks and the scales follow, one sequential sum
//! per chunk (chunks in parallel; a single scale is a serial pass).
//! `Decayed`: `p = x + e` into the spare buffer with its signs, the scales,
//! then `e ← β·e + (1 − β)·(p − α·σ(p))` in pieces.

use alloc::vec;
use alloc::vec::Vec;

use super::{Compressor, ErrorFeedback, update_full_into};
use crate::CodecError;
use crate::exec::{Executor, PIECE, for_each_part};
use crate::pack::{pack_words, packed_len};
use crate::scale::{Accumulator, ScaleKind, Words, any_non_finite, sign_scale};
use crate::vector::{Input, fused_words_into, vector_words};
use crate::wire::Compressed;

impl Compressor {
    /// [`Compressor::compress_into`] with the step's passes run by `exec`:
    /// the same signs, scale, error buffer and errors.
    ///
    /// # Errors
    /// As [`Compressor::compress_into`]; nothing changes then.
    pub fn compress_into_with<E: Executor + ?Sized>(
        &mut self,
        exec: &E,
        x: &[f32],
        signs_out: &mut [u8],
    ) -> Result<f32, CodecError> {
        let k = self.chunks();
        if k > 1 {
            return Err(CodecError::LengthMismatch {
                expected: k,
                found: 1,
            });
        }
        let mut scale = [Accumulator::new(self.config.scale).finish()];
        self.compress_chunks_into_with(exec, x, signs_out, &mut scale[..k])?;
        Ok(scale[0])
    }

    /// [`Compressor::compress`] with the step's passes run by `exec`.
    ///
    /// # Errors
    /// As [`Compressor::compress_chunks_into`].
    pub fn compress_with<E: Executor + ?Sized>(
        &mut self,
        exec: &E,
        x: &[f32],
    ) -> Result<Compressed, CodecError> {
        let mut bits = vec![0u8; packed_len(self.n)];
        let mut scales = vec![0.0f32; self.chunks()];
        self.compress_chunks_into_with(exec, x, &mut bits, &mut scales)?;
        Ok(Compressed::from_parts_unchecked(
            self.n,
            self.chunk,
            self.config.scale,
            scales,
            bits,
        ))
    }

    /// [`Compressor::compress_chunks_into`] with the step's passes run by
    /// `exec` (see [`crate::exec`]): the same signs, scales, error buffer
    /// and errors, for any executor.
    ///
    /// # Errors
    /// As [`Compressor::compress_chunks_into`]; nothing changes then.
    pub fn compress_chunks_into_with<E: Executor + ?Sized>(
        &mut self,
        exec: &E,
        x: &[f32],
        signs_out: &mut [u8],
        scales_out: &mut [f32],
    ) -> Result<(), CodecError> {
        CodecError::check_len(self.n, x.len())?;
        CodecError::check_packed(self.n, signs_out.len())?;
        CodecError::check_len(self.chunks(), scales_out.len())?;
        let mut spare = core::mem::take(&mut self.spare);
        // Every element is written before it is read: no need to zero it.
        spare.resize(self.n, 0.0);
        // Outputs are written only after a clean pass, as in the serial step.
        let (mut signs, mut scales) = (
            core::mem::take(&mut self.spare_signs),
            core::mem::take(&mut self.spare_scales),
        );
        signs.resize(signs_out.len(), 0);
        scales.resize(scales_out.len(), 0.0);
        let clean = match self.config.feedback {
            ErrorFeedback::Full => {
                let clean = self.split_full(exec, x, &mut spare, &mut signs, &mut scales);
                if clean {
                    core::mem::swap(&mut self.buf, &mut spare);
                    self.alphas.copy_from_slice(&scales);
                }
                clean
            }
            ErrorFeedback::Decayed { beta } => {
                self.split_decayed(exec, beta, x, &mut spare, &mut signs, &mut scales)
            }
        };
        self.spare = spare;
        if clean {
            signs_out.copy_from_slice(&signs);
            scales_out.copy_from_slice(&scales);
        }
        (self.spare_signs, self.spare_scales) = (signs, scales);
        if clean {
            Ok(())
        } else {
            Err(CodecError::NonFinite {
                index: self.first_bad(x),
            })
        }
    }

    /// [`Compressor::error_into`] in pieces run by `exec`: the same bits.
    ///
    /// # Errors
    /// [`CodecError::LengthMismatch`] when `out.len() != n`.
    pub fn error_into_with<E: Executor + ?Sized>(
        &self,
        exec: &E,
        out: &mut [f32],
    ) -> Result<(), CodecError> {
        CodecError::check_len(self.n, out.len())?;
        let (buf, alphas, chunk) = (&self.buf, &self.alphas, self.chunk);
        let pieces: Vec<_> = out.chunks_mut(PIECE).enumerate().collect();
        exec.for_each(pieces, |(b, o)| {
            let at = b * PIECE;
            for_each_part(at, o.len(), chunk, |c, s, e| {
                for (o, &p) in o[s - at..e - at].iter_mut().zip(&buf[s..e]) {
                    *o = p - sign_scale(p, alphas[c]);
                }
            });
        });
        Ok(())
    }

    /// A `Full` step into `new`; `true` when every new value is finite.
    fn split_full<E: Executor + ?Sized>(
        &self,
        exec: &E,
        x: &[f32],
        new: &mut [f32],
        signs: &mut [u8],
        scales: &mut [f32],
    ) -> bool {
        let (kind, chunk, old, alphas) = (self.config.scale, self.chunk, &*self.buf, &*self.alphas);
        // One flag per piece (there are at most `ceil(n / PIECE)`).
        let mut ok = vec![true; self.n.div_ceil(PIECE)];
        if scales.len() > 1 && chunk.is_multiple_of(64) {
            // Whole chunks per piece (at least a piece's worth of elements).
            let per = PIECE.div_ceil(chunk);
            let span = per * chunk;
            let pieces: Vec<_> = x
                .chunks(span)
                .zip(old.chunks(span))
                .zip(new.chunks_mut(span))
                .zip(signs.chunks_mut(span / 8))
                .zip(scales.chunks_mut(per).zip(alphas.chunks(per)))
                .zip(ok.iter_mut())
                .collect();
            exec.for_each(
                pieces,
                |(((((x, old), new), signs), (scales, alphas)), ok)| {
                    let chunks = x
                        .chunks(chunk)
                        .zip(old.chunks(chunk))
                        .zip(new.chunks_mut(chunk))
                        .zip(signs.chunks_mut(chunk / 8));
                    for ((((x, old), new), signs), (s, &a)) in
                        chunks.zip(scales.iter_mut().zip(alphas))
                    {
                        match full_chunk_into(kind, a, x, old, new, signs) {
                            Some(scale) => *s = scale,
                            None => *ok = false,
                        }
                    }
                },
            );
        } else {
            let pieces: Vec<_> = x
                .chunks(PIECE)
                .zip(old.chunks(PIECE))
                .zip(new.chunks_mut(PIECE))
                .zip(signs.chunks_mut(PIECE / 8))
                .enumerate()
                .zip(ok.iter_mut())
                .collect();
            exec.for_each(pieces, |((b, (((x, old), new), signs)), ok)| {
                let at = b * PIECE;
                for_each_part(at, x.len(), chunk, |c, s, e| {
                    let r = s - at..e - at;
                    update_full_into(&x[r.clone()], &old[r.clone()], &mut new[r], alphas[c]);
                });
                *ok = !any_non_finite(new);
                pack_words(new, signs);
            });
            if ok.iter().all(|&ok| ok) {
                chunk_scales(exec, kind, new, chunk, scales);
            }
        }
        ok.iter().all(|&ok| ok)
    }

    /// A `Decayed` step: `p = x + e` into `p` with its signs (checked before
    /// `e` changes), the scales, then the new `e`. `true` when clean.
    fn split_decayed<E: Executor + ?Sized>(
        &mut self,
        exec: &E,
        beta: f32,
        x: &[f32],
        p: &mut [f32],
        signs: &mut [u8],
        scales: &mut [f32],
    ) -> bool {
        let mut ok = vec![true; self.n.div_ceil(PIECE)];
        let pieces: Vec<_> = p
            .chunks_mut(PIECE)
            .zip(x.chunks(PIECE))
            .zip(self.buf.chunks(PIECE))
            .zip(signs.chunks_mut(PIECE / 8))
            .zip(ok.iter_mut())
            .collect();
        exec.for_each(pieces, |((((p, x), e), signs), ok)| {
            for ((p, &xi), &e) in p.iter_mut().zip(x).zip(e) {
                *p = xi + e;
            }
            *ok = !any_non_finite(p);
            pack_words(p, signs);
        });
        if !ok.iter().all(|&ok| ok) {
            return false;
        }
        let (kind, chunk) = (self.config.scale, self.chunk);
        chunk_scales(exec, kind, p, chunk, scales);
        let (p, scales, keep) = (&*p, &*scales, 1.0 - beta);
        let pieces: Vec<_> = self.buf.chunks_mut(PIECE).enumerate().collect();
        exec.for_each(pieces, |(b, e)| {
            let at = b * PIECE;
            for_each_part(at, e.len(), chunk, |c, s, end| {
                let a = scales[c];
                for (e, &p) in e[s - at..end - at].iter_mut().zip(&p[s..end]) {
                    *e = beta * *e + keep * (p - sign_scale(p, a));
                }
            });
        });
        true
    }
}

/// `scales[c] = kind.of(chunk c of p)`: one sequential sum per chunk in the
/// documented order, chunks in pieces of about [`PIECE`] elements.
fn chunk_scales<E: Executor + ?Sized>(
    exec: &E,
    kind: ScaleKind,
    p: &[f32],
    chunk: usize,
    scales: &mut [f32],
) {
    let per = PIECE.div_ceil(chunk).max(1);
    let pieces: Vec<_> = scales
        .chunks_mut(per)
        .zip(p.chunks(per.saturating_mul(chunk)))
        .collect();
    exec.for_each(pieces, |(scales, p)| {
        for (s, p) in scales.iter_mut().zip(p.chunks(chunk)) {
            *s = kind.of(p);
        }
    });
}

/// One chunk of the `Full` step into `new` (the chunk starts on a sign
/// word; `signs` its `packed_len(x.len())` bytes), as the serial word path
/// does it: the vector kernel or the word loop over its whole words, then
/// the last partial word; any scale kind. `None` when a new value is NaN/±∞.
fn full_chunk_into(
    kind: ScaleKind,
    alpha: f32,
    x: &[f32],
    old: &[f32],
    new: &mut [f32],
    signs: &mut [u8],
) -> Option<f32> {
    let whole = x.len() / 64 * 64;
    let mut acc = Accumulator::new(kind);
    let words = vector_words(
        &mut acc,
        Input::Plain(&x[..whole]),
        &old[..whole],
        &mut new[..whole],
        alpha,
        &mut signs[..whole / 8],
        false,
    )
    .or_else(|| {
        let w = Words {
            x: &x[..whole],
            old: &old[..whole],
            new: &mut new[..whole],
            alpha,
            signs: &mut signs[..whole / 8],
        };
        fused_words_into(&mut acc, w, false)
    });
    // `None`: a kind that is not a sum; the plain path takes the whole chunk.
    let from = match words {
        Some(true) => whole,
        Some(false) => return None,
        None => 0,
    };
    update_full_into(&x[from..], &old[from..], &mut new[from..], alpha);
    if any_non_finite(&new[from..]) {
        return None;
    }
    acc.feed(&new[from..]);
    pack_words(&new[from..], &mut signs[from / 8..]);
    Some(acc.finish())
}
