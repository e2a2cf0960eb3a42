//! Checkpoint files of a training run: atomic write-then-rename, CRC-32 checked.
//!
//! One file holds everything a resumed run needs to continue bit for bit:
//! the epoch reached, the data-order RNG state, the model table and dense
//! parameters with their Adam state, the sparse optimizer's exported state
//! (itself versioned and checksummed by `basis-core`), the metric history,
//! and a fingerprint of the run's configuration so a checkpoint of another
//! run is refused. Kept in this one module so it can move to
//! `basis-std::checkpoint` without touching the trainer.
//!
//! Layout (little-endian): `b"BASISCKP"`, `u32` version, then the fields in
//! the order of [`Checkpoint`] (vectors as `u64` length + items), then the
//! CRC-32 of every preceding byte.

use core::fmt;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"BASISCKP";
const VERSION: u32 = 1;

/// The saved state of a run after `epoch` epochs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Checkpoint {
    /// Fingerprint of the run configuration (data, optimizer, model options).
    pub(crate) fingerprint: u64,
    /// Epochs completed.
    pub(crate) epoch: u32,
    /// Data-order RNG state.
    pub(crate) rng_state: u64,
    /// Non-finite rows skipped so far.
    pub(crate) nonfinite: u64,
    /// Model table.
    pub(crate) table: Vec<f32>,
    /// Dense parameters.
    pub(crate) dense: Vec<f32>,
    /// Dense Adam first moment.
    pub(crate) dense_m: Vec<f32>,
    /// Dense Adam second moment.
    pub(crate) dense_v: Vec<f32>,
    /// Dense Adam step count.
    pub(crate) dense_t: u32,
    /// The sparse optimizer's exported state.
    pub(crate) optimizer: Vec<u8>,
    /// Metric history so far (JSON).
    pub(crate) history: String,
}

/// Why a checkpoint could not be written or read.
#[derive(Debug)]
pub(crate) enum CheckpointError {
    /// File-system error.
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        error: std::io::Error,
    },
    /// Not a checkpoint file, or one written by another version.
    Foreign(PathBuf),
    /// Truncated or corrupted (checksum mismatch).
    Corrupt(PathBuf),
    /// A checkpoint of a different run configuration.
    Mismatch(PathBuf),
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, error } => write!(f, "checkpoint {}: {error}", path.display()),
            Self::Foreign(p) => write!(
                f,
                "{} is not a basis checkpoint (version {VERSION})",
                p.display()
            ),
            Self::Corrupt(p) => write!(
                f,
                "checkpoint {} is truncated or corrupted (checksum)",
                p.display()
            ),
            Self::Mismatch(p) => write!(
                f,
                "checkpoint {} belongs to a run with other data or options",
                p.display()
            ),
        }
    }
}

impl core::error::Error for CheckpointError {}

fn put_f32s(out: &mut Vec<u8>, v: &[f32]) {
    out.extend_from_slice(&(v.len() as u64).to_le_bytes());
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

fn put_bytes(out: &mut Vec<u8>, v: &[u8]) {
    out.extend_from_slice(&(v.len() as u64).to_le_bytes());
    out.extend_from_slice(v);
}

/// Encode a checkpoint.
pub(crate) fn encode(c: &Checkpoint) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(64 + 4 * (c.table.len() + c.dense.len() * 3) + c.optimizer.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&c.fingerprint.to_le_bytes());
    out.extend_from_slice(&c.epoch.to_le_bytes());
    out.extend_from_slice(&c.rng_state.to_le_bytes());
    out.extend_from_slice(&c.nonfinite.to_le_bytes());
    put_f32s(&mut out, &c.table);
    put_f32s(&mut out, &c.dense);
    put_f32s(&mut out, &c.dense_m);
    put_f32s(&mut out, &c.dense_v);
    out.extend_from_slice(&c.dense_t.to_le_bytes());
    put_bytes(&mut out, &c.optimizer);
    put_bytes(&mut out, c.history.as_bytes());
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// A bounds-checked reader; `None` = truncated.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.buf.len() {
            return None;
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Some(a)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.u64()?).ok()?;
        self.take(n)
    }
    fn f32s(&mut self) -> Option<Vec<f32>> {
        let n = usize::try_from(self.u64()?).ok()?;
        let raw = self.take(n.checked_mul(4)?)?;
        Some(
            raw.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        )
    }
}

/// Decode a checkpoint; `path` is for error messages.
pub(crate) fn decode(bytes: &[u8], path: &Path) -> Result<Checkpoint, CheckpointError> {
    if bytes.len() < 12 || &bytes[..8] != MAGIC {
        return Err(CheckpointError::Foreign(path.to_path_buf()));
    }
    if bytes[8..12] != VERSION.to_le_bytes() {
        return Err(CheckpointError::Foreign(path.to_path_buf()));
    }
    let corrupt = || CheckpointError::Corrupt(path.to_path_buf());
    let (body, crc) = bytes.split_at(bytes.len().checked_sub(4).ok_or_else(corrupt)?);
    if crc32fast::hash(body).to_le_bytes() != crc {
        return Err(corrupt());
    }
    let mut r = Reader { buf: &body[12..] };
    let c = (|| {
        Some(Checkpoint {
            fingerprint: r.u64()?,
            epoch: r.u32()?,
            rng_state: r.u64()?,
            nonfinite: r.u64()?,
            table: r.f32s()?,
            dense: r.f32s()?,
            dense_m: r.f32s()?,
            dense_v: r.f32s()?,
            dense_t: r.u32()?,
            optimizer: r.bytes()?.to_vec(),
            history: String::from_utf8(r.bytes()?.to_vec()).ok()?,
        })
    })()
    .ok_or_else(corrupt)?;
    if !r.buf.is_empty() {
        return Err(corrupt());
    }
    Ok(c)
}

/// Write `c` to `path` atomically: a temporary file in the same directory,
/// flushed to disk, then renamed over `path`.
pub(crate) fn save(path: &Path, c: &Checkpoint) -> Result<(), CheckpointError> {
    use std::io::Write;
    let io = |error| CheckpointError::Io {
        path: path.to_path_buf(),
        error,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let tmp = path.with_extension("ckpt.tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(&encode(c)).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io)
}

/// Read the checkpoint at `path`, checking it belongs to `fingerprint`.
pub(crate) fn load(path: &Path, fingerprint: u64) -> Result<Checkpoint, CheckpointError> {
    let bytes = std::fs::read(path).map_err(|error| CheckpointError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    let c = decode(&bytes, path)?;
    if c.fingerprint != fingerprint {
        return Err(CheckpointError::Mismatch(path.to_path_buf()));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Checkpoint {
        Checkpoint {
            fingerprint: 42,
            epoch: 2,
            rng_state: 7,
            nonfinite: 1,
            table: vec![1.0, -2.5, 3.25],
            dense: vec![0.5],
            dense_m: vec![0.1],
            dense_v: vec![0.2],
            dense_t: 9,
            optimizer: vec![1, 2, 3],
            history: "[]".into(),
        }
    }

    #[test]
    fn round_trip_and_every_byte_flip_is_caught() {
        let c = sample();
        let bytes = encode(&c);
        let p = Path::new("x");
        assert_eq!(decode(&bytes, p).unwrap(), c);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(decode(&bad, p).is_err(), "flip at {i} undetected");
        }
        for n in 0..bytes.len() {
            assert!(
                decode(&bytes[..n], p).is_err(),
                "truncation to {n} undetected"
            );
        }
    }

    #[test]
    fn save_load_and_mismatch() {
        let dir = std::env::temp_dir().join(format!("basis-ckpt-test-{}", std::process::id()));
        let path = dir.join("run.ckpt");
        save(&path, &sample()).unwrap();
        assert_eq!(load(&path, 42).unwrap(), sample());
        assert!(matches!(load(&path, 43), Err(CheckpointError::Mismatch(_))));
        assert!(!path.with_extension("ckpt.tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
