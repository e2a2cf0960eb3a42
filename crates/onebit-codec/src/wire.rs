//! Wire format: a self-describing payload of packed signs and scales.
//!
//! ```text
//! offset  size  field
//! 0       4     magic b"OBC1"
//! 4       1     version (2; 1 is still read)
//! 5       1     scale kind (0 RMS, 1 mean-abs, 2 max-abs, 3 unit)
//! 6       2     reserved, zero
//! 8       8     element count n (u64 LE)
//! 16      8     chunk size c ≥ 1 (u64 LE)
//! 24      4·k   scales, k = ceil(n / c), f32 LE, finite, sign bit clear
//! 24+4k   ⌈n/8⌉ packed signs (numpy.packbits layout), padding bits zero
//! end−4   4     v2 only: CRC-32C (Castagnoli) of every byte before it, u32 LE
//! ```
//! Total: `24 + 4·ceil(n / c) + ceil(n / 8)` bytes, plus 4 in version 2.
//!
//! Why a checksum: every bit pattern of a sign and almost every one of a
//! scale is valid, so a flipped bit in version 1 decodes to a wrong tensor
//! without an error. CRC-32C detects every error burst of up to 32 bits.

use alloc::vec;
use alloc::vec::Vec;

use bitvec::order::Msb0;
use bitvec::slice::BitSlice;

use crate::pack::{for_each_sign, packed_len};
use crate::{CodecError, ScaleKind};

/// The four magic bytes that open every payload.
pub const MAGIC: [u8; 4] = *b"OBC1";
/// The wire format version this build writes (it reads 1 and 2).
pub const VERSION: u8 = 2;
/// The first version, without a checksum; still decoded.
pub const VERSION_1: u8 = 1;
/// Bytes of the fixed header (before the scales).
pub const HEADER_LEN: usize = 24;
/// Bytes of the version-2 trailer (the CRC-32C).
pub const CHECKSUM_LEN: usize = 4;

/// CRC-32C (Castagnoli, the iSCSI polynomial) of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    // Slice-by-16 tables (16 KiB, built at compile time): measured at about
    // 1.5 % of compress + encode at 64 MiB when v2 was introduced.
    const CRC32C: crc::Crc<u32, crc::Table<16>> =
        crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);
    CRC32C.checksum(bytes)
}

/// A compressed tensor: `n` signs, one scale per `chunk` elements.
/// Decodes to `x̂[i] = ±scales[i / chunk]`.
///
/// # Example
///
/// ```
/// use onebit_codec::{Compressor, decode};
///
/// let mut c = Compressor::new(6);
/// let packet = c.compress(&[0.5, -1.0, 2.0, -0.5, 1.0, -2.0])?;
/// let bytes = packet.encode(); // header, scales, sign bits, CRC-32C
/// let back = decode(&bytes)?;
/// assert_eq!(back, packet);
/// // A flipped bit is caught by the checksum.
/// let mut bad = bytes.clone();
/// bad[bytes.len() / 2] ^= 1;
/// assert!(decode(&bad).is_err());
/// # Ok::<(), onebit_codec::CodecError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Compressed {
    len: usize,
    chunk: usize,
    kind: ScaleKind,
    scales: Vec<f32>,
    bits: Vec<u8>,
}

/// Exact encoded size (current version) of `n` elements in chunks of
/// `chunk`: `24 + 4·ceil(n / chunk) + ceil(n / 8) + 4`; `None` when
/// `chunk == 0` or the size overflows `usize`.
pub fn encoded_len(n: usize, chunk: usize) -> Option<usize> {
    encoded_len_v1(n, chunk)?.checked_add(CHECKSUM_LEN)
}

/// The size of a version-1 payload (no checksum).
fn encoded_len_v1(n: usize, chunk: usize) -> Option<usize> {
    if chunk == 0 {
        return None;
    }
    n.div_ceil(chunk)
        .checked_mul(4)?
        .checked_add(HEADER_LEN)?
        .checked_add(packed_len(n))
}

impl Compressed {
    /// Assemble a payload from its parts, validating them.
    ///
    /// # Errors
    /// [`CodecError::ZeroChunk`] for `chunk == 0`; [`CodecError::LengthMismatch`]
    /// when `scales.len() != ceil(len / chunk)`; [`CodecError::BufferSize`] when
    /// `bits.len() != ceil(len / 8)`; [`CodecError::InvalidScale`] for a scale
    /// that is not finite, has its sign bit set, or is not `1.0` for
    /// [`ScaleKind::Unit`]; [`CodecError::NonZeroPadding`];
    /// [`CodecError::TooLarge`] when the encoded size overflows `usize`.
    pub fn new(
        len: usize,
        chunk: usize,
        kind: ScaleKind,
        scales: Vec<f32>,
        bits: Vec<u8>,
    ) -> Result<Self, CodecError> {
        if chunk == 0 {
            return Err(CodecError::ZeroChunk);
        }
        encoded_len(len, chunk).ok_or(CodecError::TooLarge)?;
        let k = len.div_ceil(chunk);
        if scales.len() != k {
            return Err(CodecError::LengthMismatch {
                expected: k,
                found: scales.len(),
            });
        }
        if bits.len() != packed_len(len) {
            return Err(CodecError::BufferSize {
                expected: packed_len(len),
                found: bits.len(),
            });
        }
        check_scales(kind, &scales)?;
        check_padding(len, &bits)?;
        Ok(Self::from_parts_unchecked(len, chunk, kind, scales, bits))
    }

    /// Assemble parts the compressor produced (valid by construction).
    pub(crate) fn from_parts_unchecked(
        len: usize,
        chunk: usize,
        kind: ScaleKind,
        scales: Vec<f32>,
        bits: Vec<u8>,
    ) -> Self {
        Self {
            len,
            chunk,
            kind,
            scales,
            bits,
        }
    }

    /// Number of elements `n`.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements per scale.
    pub fn chunk_len(&self) -> usize {
        self.chunk
    }

    /// How the scales were computed.
    pub fn scale_kind(&self) -> ScaleKind {
        self.kind
    }

    /// One scale per chunk.
    pub fn scales(&self) -> &[f32] {
        &self.scales
    }

    /// The packed signs, `ceil(n / 8)` bytes (`numpy.packbits` layout).
    pub fn bits(&self) -> &[u8] {
        &self.bits
    }

    /// The signs as a bit slice of exactly `n` bits (1 = non-negative).
    pub fn signs(&self) -> &BitSlice<u8, Msb0> {
        &BitSlice::from_slice(&self.bits)[..self.len]
    }

    /// Exact size of [`Self::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + 4 * self.scales.len() + self.bits.len() + CHECKSUM_LEN
    }

    /// Serialise to the wire format (version [`VERSION`]).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.encoded_len()];
        self.write(&mut out);
        out
    }

    /// Serialise into `out` (exactly [`Self::encoded_len`] bytes).
    ///
    /// # Errors
    /// [`CodecError::BufferSize`] when `out` has the wrong length.
    pub fn encode_into(&self, out: &mut [u8]) -> Result<(), CodecError> {
        if out.len() != self.encoded_len() {
            return Err(CodecError::BufferSize {
                expected: self.encoded_len(),
                found: out.len(),
            });
        }
        self.write(out);
        Ok(())
    }

    fn write(&self, out: &mut [u8]) {
        let (header, rest) = out.split_at_mut(HEADER_LEN);
        header[..4].copy_from_slice(&MAGIC);
        header[4] = VERSION;
        header[5] = self.kind.to_byte();
        header[6..8].fill(0);
        header[8..16].copy_from_slice(&(self.len as u64).to_le_bytes());
        header[16..24].copy_from_slice(&(self.chunk as u64).to_le_bytes());
        let (scales, bits) = rest.split_at_mut(4 * self.scales.len());
        // `bits` ends with the checksum's four bytes, written last.
        for (o, s) in scales.chunks_exact_mut(4).zip(&self.scales) {
            o.copy_from_slice(&s.to_le_bytes());
        }
        bits[..self.bits.len()].copy_from_slice(&self.bits);
        let (body, crc) = out.split_at_mut(out.len() - CHECKSUM_LEN);
        crc.copy_from_slice(&crc32c(body).to_le_bytes());
    }

    /// Decode into `out[i] = ±scales[i / chunk]`.
    ///
    /// # Errors
    /// [`CodecError::LengthMismatch`] when `out.len() != n`.
    pub fn decode_into(&self, out: &mut [f32]) -> Result<(), CodecError> {
        self.apply(out, |o, s| *o = s)
    }

    /// Add the decoded tensor: `acc[i] += ±scales[i / chunk]`.
    ///
    /// # Errors
    /// [`CodecError::LengthMismatch`] when `acc.len() != n`.
    pub fn decode_add(&self, acc: &mut [f32]) -> Result<(), CodecError> {
        self.apply(acc, |o, s| *o += s)
    }

    /// The decoded tensor as a new vector.
    pub fn to_f32(&self) -> Vec<f32> {
        let mut out = vec![0.0; self.len];
        let _ = self.apply(&mut out, |o, s| *o = s);
        out
    }

    fn apply(&self, out: &mut [f32], f: impl Fn(&mut f32, f32) + Copy) -> Result<(), CodecError> {
        if out.len() != self.len {
            return Err(CodecError::LengthMismatch {
                expected: self.len,
                found: out.len(),
            });
        }
        self.apply_range(0, out, f);
        Ok(())
    }

    /// `f(out[i], ±scales[(start + i) / chunk])` with the signs of elements
    /// `start..start + out.len()` (in range: the caller checked), chunk by
    /// chunk; a range that starts on a byte gives the bits of the whole
    /// decode (the parallel decoders in [`crate::exec`] cut at bytes).
    pub(crate) fn apply_range(
        &self,
        start: usize,
        out: &mut [f32],
        f: impl Fn(&mut f32, f32) + Copy,
    ) {
        let signs = self.signs();
        let end = start + out.len();
        let mut s = start;
        while s < end {
            let c = s / self.chunk;
            let e = end.min((c + 1).saturating_mul(self.chunk));
            let (o, scale) = (&mut out[s - start..e - start], self.scales[c]);
            // Elements before the next byte boundary one by one, then bytes.
            let head = ((8 - s % 8) % 8).min(o.len());
            let (first, rest) = o.split_at_mut(head);
            for (i, v) in first.iter_mut().enumerate() {
                f(v, if signs[s + i] { scale } else { -scale });
            }
            let byte = (s + head) / 8;
            for_each_sign(&self.bits[byte.min(self.bits.len())..], scale, rest, f);
            s = e;
        }
    }
}

/// Parse and validate a payload. Allocates only after the announced sizes have
/// been checked against `bytes.len()`, so never more than the input justifies.
///
/// # Errors
/// [`CodecError::Truncated`] (shorter than the header or than announced),
/// [`CodecError::TrailingBytes`], [`CodecError::BadMagic`],
/// [`CodecError::UnsupportedVersion`], [`CodecError::UnknownScaleKind`],
/// [`CodecError::ReservedNotZero`], [`CodecError::ZeroChunk`],
/// [`CodecError::TooLarge`], [`CodecError::ChecksumMismatch`] (version 2),
/// [`CodecError::InvalidScale`], [`CodecError::NonZeroPadding`].
pub fn decode(bytes: &[u8]) -> Result<Compressed, CodecError> {
    let Some((header, rest)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        return Err(CodecError::Truncated {
            needed: HEADER_LEN,
            found: bytes.len(),
        });
    };
    if header[..4] != MAGIC {
        return Err(CodecError::BadMagic);
    }
    let version = header[4];
    if version != VERSION && version != VERSION_1 {
        return Err(CodecError::UnsupportedVersion(version));
    }
    let kind = ScaleKind::from_byte(header[5]).ok_or(CodecError::UnknownScaleKind(header[5]))?;
    if header[6..8] != [0, 0] {
        return Err(CodecError::ReservedNotZero);
    }
    let field = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&header[at..at + 8]);
        usize::try_from(u64::from_le_bytes(b)).map_err(|_| CodecError::TooLarge)
    };
    let len = field(8)?;
    let chunk = field(16)?;
    if chunk == 0 {
        return Err(CodecError::ZeroChunk);
    }
    let total = if version == VERSION_1 {
        encoded_len_v1(len, chunk)
    } else {
        encoded_len(len, chunk)
    };
    let total = total.ok_or(CodecError::TooLarge)?;
    if bytes.len() < total {
        return Err(CodecError::Truncated {
            needed: total,
            found: bytes.len(),
        });
    }
    if bytes.len() > total {
        return Err(CodecError::TrailingBytes {
            expected: total,
            found: bytes.len(),
        });
    }
    let rest = if version == VERSION_1 {
        rest
    } else {
        let (body, crc) = bytes.split_at(total - CHECKSUM_LEN);
        let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
        let computed = crc32c(body);
        if stored != computed {
            return Err(CodecError::ChecksumMismatch { stored, computed });
        }
        &rest[..rest.len() - CHECKSUM_LEN]
    };
    let (scale_bytes, bits) = rest.split_at(4 * len.div_ceil(chunk));
    let scales: Vec<f32> = scale_bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    check_scales(kind, &scales)?;
    check_padding(len, bits)?;
    Ok(Compressed::from_parts_unchecked(
        len,
        chunk,
        kind,
        scales,
        bits.to_vec(),
    ))
}

fn check_scales(kind: ScaleKind, scales: &[f32]) -> Result<(), CodecError> {
    let bad = |s: f32| match kind {
        ScaleKind::Unit => s.to_bits() != 1.0f32.to_bits(),
        _ => !s.is_finite() || s.is_sign_negative(),
    };
    match scales.iter().position(|&s| bad(s)) {
        Some(chunk) => Err(CodecError::InvalidScale { chunk }),
        None => Ok(()),
    }
}

fn check_padding(len: usize, bits: &[u8]) -> Result<(), CodecError> {
    let used = len % 8;
    match bits.last() {
        Some(&last) if used != 0 && last & (0xff >> used) != 0 => Err(CodecError::NonZeroPadding),
        _ => Ok(()),
    }
}
