//! The codec's passes cut into independent pieces, for a caller that runs
//! them on several threads (`basis-rayon` drives them on a rayon pool).
//!
//! An [`Executor`] runs a list of pieces; each piece owns disjoint slices of
//! the outputs and does exactly the serial arithmetic on its elements, so
//! any executor (serial, parallel, any thread count, any order) gives the
//! bits of the serial call. Element-wise passes (packing, decoding, the
//! error-feedback update) split anywhere on a sign word; a scale is an `f64`
//! sum in a fixed sequential order ([`crate::scale`]), so it is never split:
//! chunks go to pieces whole, and a single whole-tensor scale is one
//! sequential pass after the parallel ones. The compressor's entry points
//! are [`Compressor::compress_chunks_into_with`](crate::Compressor::compress_chunks_into_with)
//! and its siblings.
//!
//! ```
//! use onebit_codec::exec::{Sequential, pack_signs_into_with};
//! use onebit_codec::{pack_signs_into, packed_len};
//!
//! let x: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin()).collect();
//! let (mut a, mut b) = (vec![0u8; packed_len(1000)], vec![0u8; packed_len(1000)]);
//! pack_signs_into(&x, &mut a)?;
//! pack_signs_into_with(&Sequential, &x, &mut b)?;
//! assert_eq!(a, b);
//! # Ok::<(), onebit_codec::CodecError>(())
//! ```

use alloc::vec::Vec;

use crate::pack::pack_words;
use crate::wire::Compressed;
use crate::{CodecError, unpack_signs};

/// Elements per piece of an element-wise pass: whole sign words (a multiple
/// of 64), small enough to balance over a few threads, large enough (64 KiB
/// of `f32`) to amortise handing a piece to a thread.
pub(crate) const PIECE: usize = 1 << 14;

/// Runs the pieces of a pass: every item exactly once, in any order, on any
/// thread. The pieces own disjoint outputs, so the result does not depend
/// on how they are run.
pub trait Executor {
    /// Calls `f` once on every item, in any order, on any thread.
    fn for_each<T, F>(&self, items: Vec<T>, f: F)
    where
        T: Send,
        F: Fn(T) + Sync + Send;
}

/// Every piece in order on the calling thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sequential;

impl Executor for Sequential {
    fn for_each<T, F>(&self, items: Vec<T>, f: F)
    where
        T: Send,
        F: Fn(T) + Sync + Send,
    {
        items.into_iter().for_each(f);
    }
}

/// Calls `f(chunk, start, end)` for each part of `start..start + len` that
/// lies in one chunk of `chunk` elements (`chunk ≥ 1`).
#[inline]
pub(crate) fn for_each_part(
    start: usize,
    len: usize,
    chunk: usize,
    mut f: impl FnMut(usize, usize, usize),
) {
    let end = start + len;
    let mut s = start;
    while s < end {
        let c = s / chunk;
        let e = end.min((c + 1) * chunk);
        f(c, s, e);
        s = e;
    }
}

/// [`pack_signs_into`](crate::pack_signs_into) in pieces run by `exec`: the
/// same bytes.
///
/// # Errors
/// [`CodecError::BufferSize`] when `out.len() != ceil(x.len() / 8)`; `out`
/// is then left unchanged.
pub fn pack_signs_into_with<E: Executor + ?Sized>(
    exec: &E,
    x: &[f32],
    out: &mut [u8],
) -> Result<(), CodecError> {
    CodecError::check_packed(x.len(), out.len())?;
    let pieces: Vec<_> = x.chunks(PIECE).zip(out.chunks_mut(PIECE / 8)).collect();
    exec.for_each(pieces, |(x, o)| pack_words(x, o));
    Ok(())
}

/// [`unpack_signs`] in pieces run by `exec`: `out[i] = ±scale`, the same bits.
///
/// # Errors
/// [`CodecError::BufferSize`] when `bits.len() != ceil(out.len() / 8)`.
pub fn unpack_signs_with<E: Executor + ?Sized>(
    exec: &E,
    bits: &[u8],
    scale: f32,
    out: &mut [f32],
) -> Result<(), CodecError> {
    CodecError::check_packed(out.len(), bits.len())?;
    let pieces: Vec<_> = out.chunks_mut(PIECE).zip(bits.chunks(PIECE / 8)).collect();
    // Lengths match by construction (PIECE / 8 bytes per piece).
    exec.for_each(pieces, |(o, b)| {
        let _ = unpack_signs(b, scale, o);
    });
    Ok(())
}

impl Compressed {
    /// [`Compressed::decode_into`] in pieces run by `exec`:
    /// `out[i] = ±scales[i / chunk]`, the same bits.
    ///
    /// # Errors
    /// [`CodecError::LengthMismatch`] when `out.len() != n`.
    pub fn decode_into_with<E: Executor + ?Sized>(
        &self,
        exec: &E,
        out: &mut [f32],
    ) -> Result<(), CodecError> {
        self.apply_with(exec, out, |o, s| *o = s)
    }

    /// [`Compressed::decode_add`] in pieces run by `exec`:
    /// `acc[i] += ±scales[i / chunk]` (the same `f32` addition per element).
    ///
    /// # Errors
    /// [`CodecError::LengthMismatch`] when `acc.len() != n`.
    pub fn decode_add_with<E: Executor + ?Sized>(
        &self,
        exec: &E,
        acc: &mut [f32],
    ) -> Result<(), CodecError> {
        self.apply_with(exec, acc, |o, s| *o += s)
    }

    fn apply_with<E: Executor + ?Sized>(
        &self,
        exec: &E,
        out: &mut [f32],
        f: impl Fn(&mut f32, f32) + Copy + Sync + Send,
    ) -> Result<(), CodecError> {
        CodecError::check_len(self.len(), out.len())?;
        let pieces: Vec<_> = out.chunks_mut(PIECE).enumerate().collect();
        exec.for_each(pieces, |(p, o)| self.apply_range(p * PIECE, o, f));
        Ok(())
    }
}
