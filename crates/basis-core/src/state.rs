//! Versioned, checksummed state blobs.
//!
//! Layout (little-endian): magic `b"BSIS"`, version `u16`, optimizer kind
//! `u8`, reserved `u8` (0), payload length `u64`, payload, CRC-32 (IEEE) of
//! everything before it. A CRC-32 detects every error burst of ≤ 32 bits, so
//! every single-byte corruption is caught; a corrupted length field is caught
//! by the length check or the CRC. Readers never allocate more than the blob
//! could hold and never panic.

use alloc::vec::Vec;

use crate::error::StateError;

/// Magic bytes of every exported state.
pub const MAGIC: [u8; 4] = *b"BSIS";
/// Current format version. Version 2 (BASIS only) records the whole
/// configuration the state depends on; version 3 (BASIS only) adds the
/// bucketer's own state (a d-choice bucketer's remembered choices and loads).
/// The other optimizers' payloads are the same in every version, so they
/// still read version 1; BASIS reads version 2 where that is exact (a
/// bucketer without state of its own).
pub const VERSION: u16 = 3;
/// The oldest version any optimizer reads.
const OLDEST: u16 = 1;
const HEADER: usize = 4 + 2 + 1 + 1 + 8;
const TRAILER: usize = 4;

pub(crate) use crate::kind;

/// Appends little-endian values.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub(crate) fn u8(&mut self, x: u8) {
        self.buf.push(x);
    }
    pub(crate) fn u16(&mut self, x: u16) {
        self.buf.extend_from_slice(&x.to_le_bytes());
    }
    pub(crate) fn u32(&mut self, x: u32) {
        self.buf.extend_from_slice(&x.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, x: u64) {
        self.buf.extend_from_slice(&x.to_le_bytes());
    }
    pub(crate) fn f32(&mut self, x: f32) {
        self.u32(x.to_bits());
    }
    pub(crate) fn f32s(&mut self, xs: &[f32]) {
        self.buf.reserve(xs.len() * 4);
        xs.iter().for_each(|&x| self.f32(x));
    }
    /// A `u64` byte length, then what `fill` appends.
    pub(crate) fn section(&mut self, fill: impl FnOnce(&mut Vec<u8>)) {
        let at = self.buf.len();
        self.u64(0);
        fill(&mut self.buf);
        let len = (self.buf.len() - at - 8) as u64;
        self.buf[at..at + 8].copy_from_slice(&len.to_le_bytes());
    }

    /// Wraps the payload with header and checksum.
    pub(crate) fn finish(self, kind: u8) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.buf.len() + TRAILER);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.push(kind);
        out.push(0);
        out.extend_from_slice(&(self.buf.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.buf);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }
}

/// Reads little-endian values; every shortfall is [`StateError::Malformed`].
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    version: u16,
}

impl<'a> Reader<'a> {
    /// Checks header, length and CRC of `blob`, returns a reader over its payload.
    pub(crate) fn open(blob: &'a [u8], expected_kind: u8) -> Result<Self, StateError> {
        // Magic, then length, then CRC: a cut blob fails its CRC too, but
        // "truncated: n of m bytes" says what happened.
        let seen = blob.len().min(MAGIC.len());
        if blob[..seen] != MAGIC[..seen] {
            return Err(StateError::BadMagic);
        }
        let needed = match blob.get(8..HEADER) {
            Some(len) => u64::from_le_bytes(len.try_into().map_err(|_| StateError::Malformed)?)
                .saturating_add((HEADER + TRAILER) as u64),
            None => (HEADER + TRAILER) as u64,
        };
        if (blob.len() as u64) < needed {
            return Err(StateError::Truncated {
                needed,
                found: blob.len() as u64,
            });
        }
        let (body, tail) = blob.split_at(blob.len() - TRAILER);
        let mut crc_bytes = [0u8; 4];
        crc_bytes.copy_from_slice(tail);
        if crc32fast::hash(body) != u32::from_le_bytes(crc_bytes) {
            // A wrong version or length with a matching CRC cannot happen by
            // accident; report the checksum first.
            return Err(StateError::Checksum);
        }
        let version = u16::from_le_bytes([blob[4], blob[5]]);
        if !(OLDEST..=VERSION).contains(&version) {
            return Err(StateError::UnsupportedVersion { found: version });
        }
        if blob[6] != expected_kind {
            return Err(StateError::WrongKind {
                expected: expected_kind,
                found: blob[6],
            });
        }
        if blob[7] != 0 {
            return Err(StateError::Malformed);
        }
        let mut len = [0u8; 8];
        len.copy_from_slice(&blob[8..16]);
        let len = u64::from_le_bytes(len);
        if len != (body.len() - HEADER) as u64 {
            // Shorter was refused above; longer with a valid CRC is not ours.
            return Err(StateError::Malformed);
        }
        Ok(Self {
            buf: &body[HEADER..],
            version,
        })
    }

    /// The blob's format version (`OLDEST..=VERSION`).
    pub(crate) fn version(&self) -> u16 {
        self.version
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], StateError> {
        if self.buf.len() < n {
            return Err(StateError::Malformed);
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, StateError> {
        Ok(self.take(1)?[0])
    }
    /// A section written by [`Writer::section`]: its `u64` length, then that
    /// many bytes.
    pub(crate) fn section(&mut self) -> Result<&'a [u8], StateError> {
        let len = usize::try_from(self.u64()?).map_err(|_| StateError::Malformed)?;
        self.take(len)
    }
    pub(crate) fn u16(&mut self) -> Result<u16, StateError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, StateError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, StateError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    pub(crate) fn f32(&mut self) -> Result<f32, StateError> {
        let x = f32::from_bits(self.u32()?);
        if x.is_finite() {
            Ok(x)
        } else {
            Err(StateError::Malformed)
        }
    }
    /// `n` finite f32 values (the length is checked before allocating).
    pub(crate) fn f32s(&mut self, n: usize) -> Result<Vec<f32>, StateError> {
        self.ensure(n, 4)?;
        (0..n).map(|_| self.f32()).collect()
    }
    /// Fails unless `n` items of `size` bytes remain.
    pub(crate) fn ensure(&self, n: usize, size: usize) -> Result<(), StateError> {
        match n.checked_mul(size) {
            Some(b) if b <= self.buf.len() => Ok(()),
            _ => Err(StateError::Malformed),
        }
    }
    /// Fails unless every byte was read.
    pub(crate) fn end(self) -> Result<(), StateError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(StateError::Malformed)
        }
    }
}
