//! The 1-bit codec's passes on rayon: `onebit-codec`'s own pieces
//! ([`onebit_codec::exec`]) run by [`Rayon`], so the bits are the serial
//! codec's by construction.
//!
//! Packing and decoding are element-wise, so any split gives the same bits.
//! The compressor is element-wise except for its scales: a scale is a sum in
//! a fixed sequential order (8 interleaved f64 lanes, see
//! `onebit_codec::scale`), and splitting that sum across threads would change
//! its rounding. So chunks (one scale each) run in parallel, but *within* a
//! chunk the sum stays one sequential pass; with a single whole-tensor scale
//! (the default) that pass is the serial part of the step.

use onebit_codec::exec::{self, Executor};
use onebit_codec::{Compressed, Compressor, CompressorConfig};
use rayon::prelude::*;

use crate::{Error, Rayon};

/// The codec's pieces on the current rayon pool.
impl Executor for Rayon {
    fn for_each<T, F>(&self, items: Vec<T>, f: F)
    where
        T: Send,
        F: Fn(T) + Sync + Send,
    {
        items.into_par_iter().for_each(f);
    }
}

/// [`onebit_codec::pack_signs_into`] on the current rayon pool: the same bytes.
///
/// # Errors
/// [`Error::Codec`] (`BufferSize`) when `out.len() != ceil(x.len() / 8)`.
pub fn par_pack_signs_into(x: &[f32], out: &mut [u8]) -> Result<(), Error> {
    Ok(exec::pack_signs_into_with(&Rayon, x, out)?)
}

/// [`onebit_codec::unpack_signs`] on the current rayon pool: `out[i] = ±scale`.
///
/// # Errors
/// [`Error::Codec`] (`BufferSize`) when `bits.len() != ceil(out.len() / 8)`.
pub fn par_unpack_signs(bits: &[u8], scale: f32, out: &mut [f32]) -> Result<(), Error> {
    Ok(exec::unpack_signs_with(&Rayon, bits, scale, out)?)
}

/// `Compressed::decode_into` on the current rayon pool:
/// `out[i] = ±scales[i / chunk]`.
///
/// # Errors
/// [`Error::Codec`] (`LengthMismatch`) when `out.len() != c.len()`.
pub fn par_decode_into(c: &Compressed, out: &mut [f32]) -> Result<(), Error> {
    Ok(c.decode_into_with(&Rayon, out)?)
}

/// `Compressed::decode_add` on the current rayon pool:
/// `acc[i] += ±scales[i / chunk]` (the same f32 addition per element).
///
/// # Errors
/// [`Error::Codec`] (`LengthMismatch`) when `acc.len() != c.len()`.
pub fn par_decode_add(c: &Compressed, acc: &mut [f32]) -> Result<(), Error> {
    Ok(c.decode_add_with(&Rayon, acc)?)
}

/// A [`Compressor`] whose steps run on the current rayon pool
/// (`Compressor::*_with(&Rayon, ..)`). Same state, same options, same errors,
/// and the same bits (signs, scales, error buffer) as the serial compressor
/// fed the same inputs, for every thread count. The rest of the API
/// (options, chunk count, error norm) is the compressor's:
/// [`as_compressor`](Self::as_compressor).
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
pub struct ParCompressor(Compressor);

impl ParCompressor {
    /// The reference compressor for `n` elements (Full feedback, RMS, one scale, `e = 0`).
    pub fn new(n: usize) -> Self {
        Self(Compressor::new(n))
    }

    /// A compressor with the given options.
    ///
    /// # Errors
    /// [`Error::Codec`] (`InvalidBeta`) as `Compressor::with_config`.
    pub fn with_config(n: usize, config: CompressorConfig) -> Result<Self, Error> {
        Ok(Self(Compressor::with_config(n, config)?))
    }

    /// Takes over a serial compressor's options and error buffer; the next
    /// steps continue exactly as `c`'s would.
    pub fn from_compressor(c: &mut Compressor) -> Self {
        Self(c.clone())
    }

    /// A serial compressor in this one's state.
    ///
    /// # Errors
    /// None: kept so callers written for a fallible conversion still build.
    pub fn to_compressor(&self) -> Result<Compressor, Error> {
        Ok(self.0.clone())
    }

    /// The serial compressor this one steps (its options and state).
    pub fn as_compressor(&self) -> &Compressor {
        &self.0
    }

    /// Elements per tensor.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Number of scales per step, `ceil(n / chunk)`.
    pub fn chunks(&self) -> usize {
        self.0.chunks()
    }

    /// One step with a single scale; see `Compressor::compress_into`.
    ///
    /// # Errors
    /// As `Compressor::compress_into` (wrapped in [`Error::Codec`]); nothing changes then.
    pub fn compress_into(&mut self, x: &[f32], signs_out: &mut [u8]) -> Result<f32, Error> {
        Ok(self.0.compress_into_with(&Rayon, x, signs_out)?)
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
        let c = &mut self.0;
        Ok(c.compress_chunks_into_with(&Rayon, x, signs_out, scales_out)?)
    }

    /// One step returning an owned payload.
    ///
    /// # Errors
    /// As [`compress_chunks_into`](Self::compress_chunks_into).
    pub fn compress(&mut self, x: &[f32]) -> Result<Compressed, Error> {
        Ok(self.0.compress_with(&Rayon, x)?)
    }

    /// Copies the error buffer `e` into `out`.
    ///
    /// # Errors
    /// [`Error::Codec`] (`LengthMismatch`) when `out.len() != n`.
    pub fn error_into(&self, out: &mut [f32]) -> Result<(), Error> {
        Ok(self.0.error_into_with(&Rayon, out)?)
    }

    /// Replaces the error buffer (restore from a checkpoint).
    ///
    /// # Errors
    /// [`Error::Codec`]: `LengthMismatch` when `e.len() != n`, `NonFinite`
    /// for a NaN/±∞; nothing changes then.
    pub fn set_error(&mut self, e: &[f32]) -> Result<(), Error> {
        Ok(self.0.set_error(e)?)
    }

    /// Sets the error buffer to zero (as `Compressor::reset_error`).
    pub fn reset_error(&mut self) {
        self.0.reset_error();
    }
}
