//! Error-feedback compressor: `p = x + e; α = scale(p); e ← p − α·σ(p)`, fused.
//!
//! # Exact semantics (`ErrorFeedback::Full`, the reference)
//! Per element, all in `f32`: `p = x + e`; per chunk `α = scale(p_chunk)`
//! ([`crate::scale`] order); `σ(p) = +1` if `!(p < 0)` else `−1`;
//! `e ← p − α·σ(p)`; the signs of `p` are the payload.
//!
//! # One pass over memory
//! After a step the buffer holds `p`, not `e`, plus the pending scales: `e` is
//! recomputed on the fly as `p − α·σ(p)` (the same `f32` operation, so the same
//! bits) when the next step reads the buffer. A `Full` step therefore reads `x`
//! and the buffer once and writes the new buffer once, instead of the
//! reference's two passes.
//!
//! # A NaN is an error before the error buffer changes, in that one pass
//! The step writes the new `p` into a second buffer (`spare`), checking each
//! value as it goes (`p` is finite iff `x` is and `x + e` did not overflow,
//! because `e` always is); only a clean pass swaps the two buffers. On a
//! NaN/±∞ the old buffer is untouched and a slow scan finds the first bad
//! index. Restoring in place is impossible: `fl(x + e) − x` does not give `e`
//! back, so any rollback needs the old values somewhere — here, the spare
//! buffer (`n` more `f32` of memory, no extra pass).

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::num::NonZeroUsize;

use crate::pack::{pack_words, packed_len};
use crate::scale::{Accumulator, ScaleKind, Words, any_non_finite, first_non_finite, sign_scale};
use crate::vector::{Input, fence, fused_words_into, vector_words, vector_words_in_place};
use crate::{CodecError, Compressed};

// The same step in pieces run by an `exec::Executor` (parallel adapters).
mod split;

/// How the quantisation error is carried to the next step.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ErrorFeedback {
    /// `e ← p − α·σ(p)` (DeepSpeed 1-bit Adam, EF-SignSGD): nothing is lost,
    /// `Σ_t x̂_t + e_T = Σ_t x_t`. The default.
    #[default]
    Full,
    /// The decayed rule `e ← β·e + (1 − β)·(p − α·σ(p))` (in `f32`,
    /// `e` the buffer before the step): a decayed buffer that forgets part of
    /// the error. `beta ∈ [0, 1]`; `beta = 0` is `Full`.
    Decayed {
        /// Decay of the old buffer (Adam's β₁ = 0.9 is a natural choice).
        beta: f32,
    },
}

/// Options of a [`Compressor`]; `Default` is the reference (Full, RMS, one scale).
/// `#[non_exhaustive]`: build it from [`Default`] with the `with_*` setters.
///
/// ```
/// use core::num::NonZeroUsize;
/// use onebit_codec::{CompressorConfig, ErrorFeedback};
///
/// let config = CompressorConfig::default()
///     .with_feedback(ErrorFeedback::Decayed { beta: 0.9 })
///     .with_chunk(NonZeroUsize::new(1024));
/// assert_eq!(config.chunk.map(NonZeroUsize::get), Some(1024));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct CompressorConfig {
    /// Error-feedback rule.
    pub feedback: ErrorFeedback,
    /// Scale of each chunk.
    pub scale: ScaleKind,
    /// One scale per `chunk` elements (the last chunk may be shorter); `None`
    /// is one scale for the whole tensor.
    pub chunk: Option<NonZeroUsize>,
}

with_setters!(CompressorConfig {
    with_feedback => feedback: ErrorFeedback,
    with_scale => scale: ScaleKind,
    with_chunk => chunk: Option<NonZeroUsize>,
});

/// Elements per cache block of the fused pass (multiple of 64: whole sign
/// words). 32 KiB of buffer: measured best of 1K..32K on the bench machine.
const BLOCK: usize = 8192;
/// Elements per block of the word path (a multiple of 64). 4 KiB: a blend's
/// staging buffer then takes one way of each L1 set, next to its four
/// streams, whose large allocations share their offsets within a page.
const STAGE: usize = 1024;

/// From this many elements (16 MiB per buffer; the input and both buffers
/// are then well beyond a 32 MiB L3) the word path writes the new buffer
/// with non-temporal stores; below, the buffers may stay cached between
/// steps and ordinary stores are better.
const STREAM_MIN: usize = 1 << 22;

/// Elements of the on-stack scratch used by the `Decayed` step and
/// `error_norm` (4 KiB: small enough for any stack).
const SCRATCH: usize = 1024;

/// A 1-bit compressor for tensors of `n` elements that owns the error buffer `e`.
///
/// The state is plain data: save it with [`Compressor::materialize_error`] and restore it
/// with [`Compressor::set_error`].
///
/// # Example
///
/// Error feedback: what one step's signs lose is carried into the next
/// step, so the decoded steps sum to the inputs' sum minus the (bounded)
/// error buffer, however coarse each single step is.
///
/// ```
/// use onebit_codec::{Compressor, packed_len, unpack_add};
///
/// let x = [0.5f32, -0.25, 1.0, -2.0, 0.125];
/// let mut c = Compressor::new(x.len());
/// let (mut decoded, mut bits) = ([0.0f32; 5], vec![0u8; packed_len(x.len())]);
/// let steps = 200;
/// for _ in 0..steps {
///     let scale = c.compress_into(&x, &mut bits)?;
///     unpack_add(&bits, scale, &mut decoded)?;
/// }
/// let e = c.materialize_error().to_vec();
/// for i in 0..x.len() {
///     // Σ decoded = steps·x − e, exactly up to rounding
///     let want = steps as f32 * x[i] - e[i];
///     assert!((decoded[i] - want).abs() < 1e-2, "{i}: {} vs {want}", decoded[i]);
///     assert!((decoded[i] / steps as f32 - x[i]).abs() < 0.05);
/// }
/// # Ok::<(), onebit_codec::CodecError>(())
/// ```
#[derive(Clone)]
pub struct Compressor {
    n: usize,
    config: CompressorConfig,
    /// Effective chunk length (≥ 1).
    chunk: usize,
    /// `Full`: `p` of the last step (`e = p − α·σ(p)` with `alphas`);
    /// `Decayed`: `e` itself (its `alphas` stay 0).
    buf: Vec<f32>,
    /// Pending scales of the last step, one per chunk; 0 means `buf` is `e`.
    alphas: Vec<f32>,
    /// Where a `Full` step writes the new `p` (swapped with `buf` when the
    /// step succeeds); not state, allocated on the first `Full` step.
    spare: Vec<f32>,
    /// The step's signs and scales, copied out only after a clean pass
    /// (1/32 of the input's bytes), so a failed step writes no output.
    spare_signs: Vec<u8>,
    spare_scales: Vec<f32>,
}

impl fmt::Debug for Compressor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compressor")
            .field("n", &self.n)
            .field("config", &self.config)
            .field("chunks", &self.alphas.len())
            .finish_non_exhaustive()
    }
}

impl Compressor {
    /// The reference compressor for `n` elements: `Full` error feedback, RMS
    /// scale, one scale for the whole tensor, `e = 0`.
    pub fn new(n: usize) -> Self {
        Self::build(n, CompressorConfig::default())
    }

    /// A compressor with the given options.
    ///
    /// # Errors
    /// [`CodecError::InvalidBeta`] when `Decayed { beta }` has `beta` outside
    /// `[0, 1]` or not finite.
    pub fn with_config(n: usize, config: CompressorConfig) -> Result<Self, CodecError> {
        if let ErrorFeedback::Decayed { beta } = config.feedback
            && !(0.0..=1.0).contains(&beta)
        {
            return Err(CodecError::InvalidBeta);
        }
        Ok(Self::build(n, config))
    }

    fn build(n: usize, config: CompressorConfig) -> Self {
        let chunk = config.chunk.map_or(n.max(1), NonZeroUsize::get);
        Self {
            n,
            config,
            chunk,
            buf: written_zeros(n),
            alphas: vec![0.0; n.div_ceil(chunk)],
            spare: Vec::new(),
            spare_signs: Vec::new(),
            spare_scales: Vec::new(),
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

    /// The options.
    pub fn config(&self) -> CompressorConfig {
        self.config
    }

    /// Chunk length (elements per scale; `max(n, 1)` without chunking).
    pub fn chunk_len(&self) -> usize {
        self.chunk
    }

    /// Number of scales per step: `ceil(n / chunk)` (0 when `n = 0`).
    pub fn chunks(&self) -> usize {
        self.alphas.len()
    }

    /// One compression step with a single scale (no chunking): writes the
    /// packed signs of `p = x + e` to `signs_out` and returns `α`.
    ///
    /// # Errors
    /// - [`CodecError::LengthMismatch`] when `x.len() != n`, or when the
    ///   compressor has more than one chunk (use [`Self::compress_chunks_into`]);
    /// - [`CodecError::BufferSize`] when `signs_out.len() != ceil(n / 8)`;
    /// - [`CodecError::NonFinite`] when `x` holds a NaN/±∞ or `x + e` overflows
    ///   (the first such index).
    ///
    /// On error nothing changes (error buffer, outputs).
    pub fn compress_into(&mut self, x: &[f32], signs_out: &mut [u8]) -> Result<f32, CodecError> {
        let k = self.chunks();
        if k > 1 {
            return Err(CodecError::LengthMismatch {
                expected: k,
                found: 1,
            });
        }
        let mut scale = [Accumulator::new(self.config.scale).finish()];
        self.compress_chunks_into(x, signs_out, &mut scale[..k])?;
        Ok(scale[0])
    }

    /// One compression step with per-chunk scales: packed signs of `p = x + e`
    /// to `signs_out` (`ceil(n / 8)` bytes), scale of chunk `c` to `scales_out[c]`.
    ///
    /// # Errors
    /// - [`CodecError::LengthMismatch`] when `x.len() != n` or
    ///   `scales_out.len() != self.chunks()`;
    /// - [`CodecError::BufferSize`] when `signs_out.len() != ceil(n / 8)`;
    /// - [`CodecError::NonFinite`] when `x` holds a NaN/±∞ or `x + e` overflows
    ///   (the first such index).
    ///
    /// On error nothing changes (error buffer, outputs).
    pub fn compress_chunks_into(
        &mut self,
        x: &[f32],
        signs_out: &mut [u8],
        scales_out: &mut [f32],
    ) -> Result<(), CodecError> {
        CodecError::check_len(self.n, x.len())?;
        self.compress_input(Input::Plain(x), signs_out, scales_out)
    }

    /// One single-scale step on `x = wa·a + wb·b` (element-wise, in `f32`,
    /// the same bits as forming `x` first and calling [`Self::compress_into`]),
    /// without materialising `x`: 1-bit Adam's local momentum
    /// `β₁·m + (1−β₁)·g` goes straight into the compressor, so the step reads
    /// `a`, `b` and the error buffer once and writes the new buffer once.
    ///
    /// # Errors
    /// As [`Self::compress_into`], for `a` and `b` in place of `x`.
    ///
    /// On error nothing changes (error buffer, outputs).
    pub fn compress_blend_into(
        &mut self,
        wa: f32,
        a: &[f32],
        wb: f32,
        b: &[f32],
        signs_out: &mut [u8],
    ) -> Result<f32, CodecError> {
        let k = self.chunks();
        if k > 1 {
            return Err(CodecError::LengthMismatch {
                expected: k,
                found: 1,
            });
        }
        CodecError::check_len(self.n, a.len())?;
        CodecError::check_len(self.n, b.len())?;
        let mut scale = [Accumulator::new(self.config.scale).finish()];
        self.compress_input(Input::Blend(wa, a, wb, b), signs_out, &mut scale[..k])?;
        Ok(scale[0])
    }

    /// The step on an input of length `n` (checked by the caller).
    fn compress_input(
        &mut self,
        x: Input<'_>,
        signs_out: &mut [u8],
        scales_out: &mut [f32],
    ) -> Result<(), CodecError> {
        CodecError::check_packed(self.n, signs_out.len())?;
        CodecError::check_len(self.chunks(), scales_out.len())?;
        if let Input::Blend(..) = x
            && !self.words_path()
        {
            // Only the word path stages a blend block by block; the
            // others take it materialised (same bits, one more pass).
            let plain = x.to_vec();
            return self.compress_input(Input::Plain(&plain), signs_out, scales_out);
        }
        let (mut signs, mut scales) = (
            core::mem::take(&mut self.spare_signs),
            core::mem::take(&mut self.spare_scales),
        );
        signs.resize(signs_out.len(), 0);
        scales.resize(scales_out.len(), 0.0);
        let clean = match (self.config.feedback, x) {
            (ErrorFeedback::Full, x) => self.step_full(x, &mut signs, &mut scales),
            (ErrorFeedback::Decayed { beta }, Input::Plain(x)) => {
                self.step_decayed(beta, x, &mut signs, &mut scales)
            }
            // Excluded above: a blend always takes the word path, which is `Full`.
            (ErrorFeedback::Decayed { .. }, Input::Blend(..)) => false,
        };
        if clean {
            signs_out.copy_from_slice(&signs);
            scales_out.copy_from_slice(&scales);
        }
        (self.spare_signs, self.spare_scales) = (signs, scales);
        if clean {
            Ok(())
        } else {
            let index = match x {
                Input::Plain(x) => self.first_bad(x),
                Input::Blend(..) => self.first_bad(&x.to_vec()),
            };
            Err(CodecError::NonFinite { index })
        }
    }

    /// Whether a `Full` step takes the word-at-a-time path (RMS or mean-abs
    /// scales on chunks that start on 64-element words).
    fn words_path(&self) -> bool {
        let word_aligned = self.chunks() <= 1 || self.chunk.is_multiple_of(64);
        self.config.feedback == ErrorFeedback::Full
            && word_aligned
            && matches!(self.config.scale, ScaleKind::Rms | ScaleKind::MeanAbs)
    }

    /// One compression step returning an owned [`Compressed`] payload.
    ///
    /// # Errors
    /// As [`Self::compress_chunks_into`].
    pub fn compress(&mut self, x: &[f32]) -> Result<Compressed, CodecError> {
        let mut bits = vec![0u8; packed_len(self.n)];
        let mut scales = vec![0.0f32; self.chunks()];
        self.compress_chunks_into(x, &mut bits, &mut scales)?;
        Ok(Compressed::from_parts_unchecked(
            self.n,
            self.chunk,
            self.config.scale,
            scales,
            bits,
        ))
    }

    /// The error buffer `e`, after writing the pending `p − α·σ(p)` into it
    /// (one pass; that is why it takes `&mut self`). [`Compressor::error_into`]
    /// copies `e` out without changing the compressor.
    ///
    /// ```
    /// use onebit_codec::Compressor;
    ///
    /// let mut c = Compressor::new(2);
    /// c.compress(&[3.0, -1.0])?; // RMS scale √5, signs + −
    /// let e = c.materialize_error();
    /// assert!((e[0] - (3.0 - 5f32.sqrt())).abs() < 1e-6);
    /// # Ok::<(), onebit_codec::CodecError>(())
    /// ```
    pub fn materialize_error(&mut self) -> &[f32] {
        if self.alphas.iter().any(|&a| a != 0.0) {
            let chunk = self.chunk;
            for (p, &a) in self.buf.chunks_mut(chunk).zip(&self.alphas) {
                for v in p {
                    *v -= sign_scale(*v, a);
                }
            }
            self.alphas.fill(0.0);
        }
        &self.buf
    }

    /// Copy the error buffer `e` into `out` without changing the compressor.
    ///
    /// # Errors
    /// [`CodecError::LengthMismatch`] when `out.len() != n`.
    pub fn error_into(&self, out: &mut [f32]) -> Result<(), CodecError> {
        CodecError::check_len(self.n, out.len())?;
        for ((o, p), &a) in out
            .chunks_mut(self.chunk)
            .zip(self.buf.chunks(self.chunk))
            .zip(&self.alphas)
        {
            for (o, &p) in o.iter_mut().zip(p) {
                *o = p - sign_scale(p, a);
            }
        }
        Ok(())
    }

    /// Replace the error buffer (restore from a checkpoint).
    ///
    /// # Errors
    /// [`CodecError::LengthMismatch`] when `e.len() != n`;
    /// [`CodecError::NonFinite`] when `e` holds a NaN/±∞. Nothing changes then.
    pub fn set_error(&mut self, e: &[f32]) -> Result<(), CodecError> {
        CodecError::check_len(self.n, e.len())?;
        if let Some(index) = first_non_finite(e) {
            return Err(CodecError::NonFinite { index });
        }
        self.buf.copy_from_slice(e);
        self.alphas.fill(0.0);
        Ok(())
    }

    /// Set the error buffer to zero (e.g. a periodic reset).
    pub fn reset_error(&mut self) {
        self.buf.fill(0.0);
        self.alphas.fill(0.0);
    }

    /// `‖e‖₂` (f64 sum of squares in the [`crate::scale`] order, then `sqrt`).
    pub fn error_norm(&self) -> f32 {
        let mut acc = Accumulator::new(ScaleKind::Rms);
        let mut tmp = [0.0f32; SCRATCH];
        for (p, &a) in self.buf.chunks(self.chunk).zip(&self.alphas) {
            for block in p.chunks(SCRATCH) {
                let t = &mut tmp[..block.len()];
                for (t, &p) in t.iter_mut().zip(block) {
                    *t = p - sign_scale(p, a);
                }
                acc.feed(t);
            }
        }
        // rms·√n = ‖e‖₂; recompute from the f64 sum to avoid a second rounding.
        num_traits::Float::sqrt(acc.sum_sq()) as f32
    }

    /// The first `i` whose `x_i + e_i` is NaN/±∞ (the slow path of a failed
    /// step; the buffer still holds the state before it).
    fn first_bad(&self, x: &[f32]) -> usize {
        for (c, ((xc, pc), &a)) in x
            .chunks(self.chunk)
            .zip(self.buf.chunks(self.chunk))
            .zip(&self.alphas)
            .enumerate()
        {
            for (i, (&xi, &p)) in xc.iter().zip(pc).enumerate() {
                if !(xi + (p - sign_scale(p, a))).is_finite() {
                    return c * self.chunk + i;
                }
            }
        }
        // Unreachable for a step that reported a non-finite value.
        0
    }

    /// Fused `Full` step (lengths checked): one pass over `x` and the buffer
    /// into `spare`; swaps them and returns `true` unless a new value is
    /// NaN/±∞ (then nothing has changed).
    fn step_full(&mut self, x: Input<'_>, signs_out: &mut [u8], scales_out: &mut [f32]) -> bool {
        let mut spare = core::mem::take(&mut self.spare);
        // Every element is written before it is read: no need to zero it.
        spare.resize(self.n, 0.0);
        let clean = match x {
            _ if self.words_path() => self.step_full_words(x, &mut spare, signs_out, scales_out),
            Input::Plain(x) => self.step_full_blocks(x, &mut spare, signs_out, scales_out),
            // `compress_input` materialises a blend off the word path.
            Input::Blend(..) => false,
        };
        if clean {
            core::mem::swap(&mut self.buf, &mut spare);
            self.alphas.copy_from_slice(scales_out);
        }
        self.spare = spare;
        clean
    }

    /// `Full` step in blocks of [`BLOCK`] (max-abs and unit scales, chunks
    /// that do not start on a 64-element word): update a block into `new`,
    /// check it, then sum and pack it while it is in cache.
    fn step_full_blocks(
        &self,
        x: &[f32],
        new: &mut [f32],
        signs_out: &mut [u8],
        scales_out: &mut [f32],
    ) -> bool {
        let mut walk = ChunkWalk::new(self.chunk, self.n, self.config.scale);
        for start in (0..self.n).step_by(BLOCK) {
            let end = (start + BLOCK).min(self.n);
            walk.run(
                start,
                end,
                |c, s, e, acc| {
                    update_full_into(&x[s..e], &self.buf[s..e], &mut new[s..e], self.alphas[c]);
                    acc.feed(&new[s..e]);
                },
                scales_out,
            );
            let block = &new[start..end];
            if any_non_finite(block) {
                return false;
            }
            pack_words(block, &mut signs_out[start / 8..packed_len(end)]);
        }
        true
    }

    /// `Full` step when every chunk starts on a 64-element word (one chunk, or
    /// `chunk % 64 == 0`) and the scale is a sum: word at a time into `new`
    /// (a blend input is formed in blocks of [`STAGE`] in an L1 staging
    /// buffer; a plain one is read in place, a chunk per call).
    fn step_full_words(
        &self,
        x: Input<'_>,
        new: &mut [f32],
        signs_out: &mut [u8],
        scales_out: &mut [f32],
    ) -> bool {
        let kind = self.config.scale;
        let stream = self.n >= STREAM_MIN;
        let mut stage = [0.0f32; STAGE];
        for (c, scale) in scales_out.iter_mut().enumerate() {
            let chunk_start = c * self.chunk;
            let chunk_end = (chunk_start + self.chunk).min(self.n);
            let alpha = self.alphas[c];
            let mut acc = Accumulator::new(kind);
            // The AVX2 kernel takes the chunk's whole words in one call,
            // reading a blend's inputs in place; the rest (the last partial
            // word, or everything without AVX2) goes on below.
            let words_end = chunk_start + (chunk_end - chunk_start) / 64 * 64;
            let mut from = chunk_start;
            match vector_words(
                &mut acc,
                x.slice(chunk_start, words_end),
                &self.buf[chunk_start..words_end],
                &mut new[chunk_start..words_end],
                alpha,
                &mut signs_out[chunk_start / 8..words_end / 8],
                stream,
            ) {
                Some(true) => from = words_end,
                Some(false) => {
                    fence(stream);
                    return false;
                }
                None => {}
            }
            // A plain input goes through in one call per chunk (per-block
            // calls measured slower); a blend is staged block by block.
            let block = match x {
                Input::Plain(_) => self.chunk,
                Input::Blend(..) => STAGE,
            };
            for start in (from..chunk_end).step_by(block) {
                let end = (start + block).min(chunk_end);
                let xs = x.block(start, end, &mut stage);
                let (old, nb) = (&self.buf[start..end], &mut new[start..end]);
                let signs = &mut signs_out[start / 8..packed_len(end)];
                // Only a chunk's last block has a partial word.
                let whole = xs.len() / 64 * 64;
                let words = fused_words_into(
                    &mut acc,
                    Words {
                        x: &xs[..whole],
                        old: &old[..whole],
                        new: &mut nb[..whole],
                        alpha,
                        signs: &mut signs[..whole / 8],
                    },
                    stream,
                );
                // Always `Some` here (a sum kind, lanes at a word, whole words).
                if words != Some(true) {
                    fence(stream);
                    return false;
                }
                update_full_into(&xs[whole..], &old[whole..], &mut nb[whole..], alpha);
                if any_non_finite(&nb[whole..]) {
                    fence(stream);
                    return false;
                }
                acc.feed(&nb[whole..]);
                pack_words(&nb[whole..], &mut signs[whole / 8..]);
            }
            *scale = acc.finish();
        }
        fence(stream);
        true
    }

    /// `Decayed` step (lengths checked): pass 1 forms `p` block-wise for the
    /// scales and signs and checks it, pass 2 updates `e` with the now-known
    /// scales. `e` needs this step's scale, hence two passes; a failed check
    /// in pass 1 returns `false` before `e` is touched.
    fn step_decayed(
        &mut self,
        beta: f32,
        x: &[f32],
        signs_out: &mut [u8],
        scales_out: &mut [f32],
    ) -> bool {
        let kind = self.config.scale;
        let mut walk = ChunkWalk::new(self.chunk, self.n, kind);
        let mut tmp = [0.0f32; SCRATCH];
        for start in (0..self.n).step_by(SCRATCH) {
            let end = (start + SCRATCH).min(self.n);
            for ((t, &xi), &e) in tmp
                .iter_mut()
                .zip(&x[start..end])
                .zip(&self.buf[start..end])
            {
                *t = xi + e;
            }
            if any_non_finite(&tmp[..end - start]) {
                return false;
            }
            walk.run(
                start,
                end,
                |_, s, e, acc| acc.feed(&tmp[s - start..e - start]),
                scales_out,
            );
            pack_words(
                &tmp[..end - start],
                &mut signs_out[start / 8..packed_len(end)],
            );
        }
        let keep = 1.0 - beta;
        for ((xc, ec), &a) in x
            .chunks(self.chunk)
            .zip(self.buf.chunks_mut(self.chunk))
            .zip(scales_out.iter())
        {
            for (e, &xi) in ec.iter_mut().zip(xc) {
                let p = xi + *e;
                *e = beta * *e + keep * (p - sign_scale(p, a));
            }
        }
        true
    }
}

/// One chunk of the fused `Full` step (lengths checked by the caller,
/// `signs` the chunk's `packed_len(x.len())` bytes): word-at-a-time
/// `buf ← x + (buf − α·σ(buf))`, its scale sum and sign words, then the last
/// partial word (< 64 elements). Returns the chunk's accumulator.
fn full_chunk(
    kind: ScaleKind,
    alpha: f32,
    x: &[f32],
    buf: &mut [f32],
    signs: &mut [u8],
) -> Accumulator {
    let whole = x.len() / 64 * 64;
    let mut acc = Accumulator::new(kind);
    // The AVX2 kernel, else the portable word loop, both for the sum kinds
    // only; the plain path gives the same bits otherwise. The kernel's
    // finiteness flag is not needed: the caller validated the input.
    let vector = vector_words_in_place(
        &mut acc,
        &x[..whole],
        &mut buf[..whole],
        alpha,
        &mut signs[..whole / 8],
    )
    .is_some();
    if !vector
        && !acc.fused_words(
            &x[..whole],
            &mut buf[..whole],
            alpha,
            &mut signs[..whole / 8],
        )
    {
        update_full(&x[..whole], &mut buf[..whole], alpha);
        acc.feed(&buf[..whole]);
        pack_words(&buf[..whole], &mut signs[..whole / 8]);
    }
    update_full(&x[whole..], &mut buf[whole..], alpha);
    acc.feed(&buf[whole..]);
    pack_words(&buf[whole..], &mut signs[whole / 8..]);
    acc
}

/// One chunk of the `Full` error-feedback step with exactly the serial
/// [`Compressor`]'s arithmetic, for adapters that run a tensor's chunks on
/// several threads (`basis-rayon`): `buf ← x + (buf − α·σ(buf))` (the error
/// carried in `buf` plus the new input), the new values' sign bits into
/// `signs`, and the chunk's scale, returned. A chunk that starts on a
/// 64-element boundary of the tensor gives the same bytes and scale as the
/// serial compressor's pass over it. Inputs are not checked for non-finite
/// values here (the compressor's validation does that first).
///
/// # Errors
/// [`CodecError::LengthMismatch`] when `buf` and `x` differ in length,
/// [`CodecError::BufferSize`] when `signs` is not `packed_len(x.len())`
/// bytes; nothing is written then.
pub fn full_step_chunk(
    kind: ScaleKind,
    alpha: f32,
    x: &[f32],
    buf: &mut [f32],
    signs: &mut [u8],
) -> Result<f32, CodecError> {
    CodecError::check_len(x.len(), buf.len())?;
    CodecError::check_packed(x.len(), signs.len())?;
    Ok(full_chunk(kind, alpha, x, buf, signs).finish())
}

/// `buf ← x + (buf − α·σ(buf))`: the pending error plus the new input.
#[inline(always)]
fn update_full(x: &[f32], buf: &mut [f32], alpha: f32) {
    for (q, &xi) in buf.iter_mut().zip(x) {
        *q = xi + (*q - sign_scale(*q, alpha));
    }
}

/// `new ← x + (old − α·σ(old))`: [`update_full`] into another buffer.
#[inline(always)]
fn update_full_into(x: &[f32], old: &[f32], new: &mut [f32], alpha: f32) {
    for ((q, &o), &xi) in new.iter_mut().zip(old).zip(x) {
        *q = xi + (o - sign_scale(o, alpha));
    }
}

/// Walks blocks in order, splitting them at chunk boundaries and finishing each
/// chunk's scale when its last element has been fed.
struct ChunkWalk {
    chunk: usize,
    n: usize,
    kind: ScaleKind,
    c: usize,
    chunk_end: usize,
    acc: Accumulator,
}

impl ChunkWalk {
    fn new(chunk: usize, n: usize, kind: ScaleKind) -> Self {
        Self {
            chunk,
            n,
            kind,
            c: 0,
            chunk_end: chunk.min(n),
            acc: Accumulator::new(kind),
        }
    }

    /// Call `f(chunk, start, end, acc)` for each piece of `start..end` that lies
    /// in one chunk; write each finished chunk's scale to `scales`.
    #[inline(always)]
    fn run(
        &mut self,
        start: usize,
        end: usize,
        mut f: impl FnMut(usize, usize, usize, &mut Accumulator),
        scales: &mut [f32],
    ) {
        let mut s = start;
        while s < end {
            let e = end.min(self.chunk_end);
            f(self.c, s, e, &mut self.acc);
            if e == self.chunk_end {
                scales[self.c] = self.acc.finish();
                self.c += 1;
                self.acc = Accumulator::new(self.kind);
                self.chunk_end = self.chunk_end.saturating_add(self.chunk).min(self.n);
            }
            s = e;
        }
    }
}

/// `n` zeros whose pages are really written. `vec![0.0; n]` may come from
/// `calloc`/`mmap` and map the shared zero page until first written; the
/// first step that writes this buffer is then the *second* step (after the
/// buffers swap), and it takes a page fault per 4 KiB — on a VM each one a
/// TLB shoot-down: 0.4 s per rank at 64 MiB, 8× the whole all-reduce
/// (onebit-adam's `allreduce` bench, 2026-12-02). Writing one float per
/// page (through `black_box`, so the store is not elided as a no-op)
/// commits the pages here, at construction.
fn written_zeros(n: usize) -> Vec<f32> {
    let mut v = vec![0.0f32; n];
    // 1024 floats = 4 KiB, the smallest page size.
    for x in v.iter_mut().step_by(1024) {
        *core::hint::black_box(x) = 0.0;
    }
    v
}
