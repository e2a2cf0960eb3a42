//! The one error type of the crate: bad input data and malformed wire payloads.

use core::fmt;

/// Everything that can go wrong in this crate. Every fallible public function
/// returns `Result<_, CodecError>` and never panics on user data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CodecError {
    /// Input element `index` is NaN or ±∞, or adding the error buffer to it
    /// overflows to ±∞. Reported before the error buffer, scales or outputs change.
    NonFinite {
        /// Index of the first offending element.
        index: usize,
    },
    /// A slice has the wrong number of elements (input, error buffer, scales).
    LengthMismatch {
        /// Elements required.
        expected: usize,
        /// Elements given.
        found: usize,
    },
    /// An output byte buffer has the wrong size (packed signs need `ceil(n / 8)`
    /// bytes, an encoded payload `encoded_len` bytes).
    BufferSize {
        /// Bytes required.
        expected: usize,
        /// Bytes given.
        found: usize,
    },
    /// `Decayed { beta }` with `beta` outside `[0, 1]` or not finite.
    InvalidBeta,
    /// A chunk size of zero (wire header or constructor).
    ZeroChunk,
    /// Wire payload: fewer bytes than the header announces.
    Truncated {
        /// Bytes the header (or the fixed header itself) requires.
        needed: usize,
        /// Bytes present.
        found: usize,
    },
    /// Wire payload: more bytes than the header announces.
    TrailingBytes {
        /// Bytes the header announces.
        expected: usize,
        /// Bytes present.
        found: usize,
    },
    /// Wire payload: the first four bytes are not `b"OBC1"`.
    BadMagic,
    /// Wire payload: a format version this build does not read.
    UnsupportedVersion(u8),
    /// Wire payload: an unknown scale-kind byte.
    UnknownScaleKind(u8),
    /// Wire payload: the reserved header bytes are not zero.
    ReservedNotZero,
    /// Wire payload: the element count or the sizes derived from it do not fit
    /// in `usize` on this platform.
    TooLarge,
    /// Wire payload or [`Compressed::new`](crate::Compressed::new): scale of
    /// chunk `chunk` is NaN, ±∞, negative (sign bit set), or not `1.0` for
    /// [`ScaleKind::Unit`](crate::ScaleKind::Unit).
    InvalidScale {
        /// Index of the chunk whose scale is invalid.
        chunk: usize,
    },
    /// Wire payload: padding bits after the last element are not zero.
    NonZeroPadding,
    /// Wire payload (version 2): the CRC-32C of the bytes before the trailer
    /// differs from the one stored in it; the payload was corrupted.
    ChecksumMismatch {
        /// The checksum in the trailer.
        stored: u32,
        /// The checksum of the bytes received.
        computed: u32,
    },
}

impl CodecError {
    /// `Ok` when `found == expected`, else [`CodecError::LengthMismatch`]:
    /// the length check every entry point makes.
    ///
    /// # Errors
    /// [`CodecError::LengthMismatch`] when the lengths differ.
    pub fn check_len(expected: usize, found: usize) -> Result<(), Self> {
        if expected == found {
            Ok(())
        } else {
            Err(Self::LengthMismatch { expected, found })
        }
    }

    /// `Ok` when `bytes` is the packed size of `n` signs
    /// ([`packed_len`](crate::packed_len)`(n)`), else
    /// [`CodecError::BufferSize`].
    ///
    /// # Errors
    /// [`CodecError::BufferSize`] when the sizes differ.
    pub fn check_packed(n: usize, bytes: usize) -> Result<(), Self> {
        // `packed_len(n)`, written out: `error` imports nothing from the
        // modules that return it (no import cycle).
        let expected = n.div_ceil(8);
        if bytes == expected {
            Ok(())
        } else {
            Err(Self::BufferSize {
                expected,
                found: bytes,
            })
        }
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NonFinite { index } => {
                write!(
                    f,
                    "element {index} is not finite (or overflows with the error buffer)"
                )
            }
            Self::LengthMismatch { expected, found } => {
                write!(f, "expected {expected} elements, found {found}")
            }
            Self::BufferSize { expected, found } => {
                write!(f, "output buffer must be {expected} bytes, found {found}")
            }
            Self::InvalidBeta => f.write_str("decay beta must be finite and in [0, 1]"),
            Self::ZeroChunk => f.write_str("chunk size must be at least 1"),
            Self::Truncated { needed, found } => {
                write!(f, "payload truncated: needs {needed} bytes, found {found}")
            }
            Self::TrailingBytes { expected, found } => {
                write!(
                    f,
                    "payload has trailing bytes: expected {expected}, found {found}"
                )
            }
            Self::BadMagic => f.write_str("payload does not start with the magic b\"OBC1\""),
            Self::UnsupportedVersion(v) => write!(f, "unsupported wire format version {v}"),
            Self::UnknownScaleKind(k) => write!(f, "unknown scale kind {k}"),
            Self::ReservedNotZero => f.write_str("reserved header bytes are not zero"),
            Self::TooLarge => f.write_str("element count does not fit this platform"),
            Self::InvalidScale { chunk } => write!(f, "scale of chunk {chunk} is invalid"),
            Self::NonZeroPadding => f.write_str("padding bits after the last element are not zero"),
            Self::ChecksumMismatch { stored, computed } => write!(
                f,
                "payload checksum mismatch (corrupted): stored CRC-32C {stored:08x}, computed {computed:08x}"
            ),
        }
    }
}

impl core::error::Error for CodecError {}
