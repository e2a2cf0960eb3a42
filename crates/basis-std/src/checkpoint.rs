//! Crash-safe checkpoint files: a small checksummed container of named byte
//! sections, written atomically (temp file → fsync → rename → fsync dir).
//!
//! # File format (version 1, all integers little-endian)
//!
//! | offset | size | field                                                  |
//! |-------:|-----:|--------------------------------------------------------|
//! | 0      | 8    | magic `b"BASISCKP"`                                    |
//! | 8      | 4    | format version (`u32`, currently 1)                    |
//! | 12     | 4    | number of sections (`u32`)                             |
//! | 16     | 8    | payload length in bytes (`u64`, everything after 28)   |
//! | 24     | 4    | CRC-32 (IEEE, `crc32fast`) of bytes 0..24 + payload     |
//! | 28     | …    | payload: sections back to back                         |
//!
//! A section is `name_len: u16`, `name` (UTF-8, unique in the file),
//! `data_len: u64`, `data`. The payload is opaque to this module: optimizer
//! export blobs, model weights, RNG and data-order state, a step counter.
//!
//! The CRC covers every byte of the file except its own four, so any error
//! burst of at most 32 bits (in particular every single-byte change) is
//! detected; the length field also catches truncation and appended bytes
//! before the CRC is even computed.
//!
//! # Crash safety
//!
//! [`write_atomic`] writes a temp file `.NAME.tmp-PID-N` in the target's
//! directory, `fsync`s it, renames it over the target (atomic on POSIX file
//! systems) and `fsync`s the directory so the rename itself is durable. A
//! crash at any point leaves either the old file or the new one under the
//! target name, never a mix; at worst a stale temp file remains, which
//! readers never look at and [`CheckpointDir`] deletes.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

extern crate alloc;

/// The eight bytes every checkpoint file starts with.
pub const MAGIC: [u8; 8] = *b"BASISCKP";
/// The format version this module writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Size of the fixed header in bytes.
pub const HEADER_LEN: usize = 28;
/// Byte offset of the CRC field in the header.
const CRC_OFFSET: usize = 24;
/// Smallest possible section: empty name, empty data.
const MIN_SECTION_LEN: usize = 2 + 8;

/// Why a byte string is not a valid checkpoint (no file involved; see
/// [`CheckpointError::Corrupt`] for the file-naming wrapper).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatError {
    /// The bytes do not start with [`MAGIC`]: not a checkpoint file.
    BadMagic,
    /// The header names a format version this code cannot read.
    UnsupportedVersion {
        /// Version found in the header.
        found: u32,
        /// The version this code reads.
        supported: u32,
    },
    /// The bytes end before the header or the payload it announces.
    Truncated {
        /// Bytes the header (or the fixed header size) requires.
        expected: u64,
        /// Bytes present.
        actual: u64,
    },
    /// More bytes follow the payload the header announces.
    TrailingBytes {
        /// Bytes the header announces.
        expected: u64,
        /// Bytes present.
        actual: u64,
    },
    /// The CRC-32 stored in the header does not match the content.
    ChecksumMismatch {
        /// CRC stored in the header.
        stored: u32,
        /// CRC computed over the bytes read.
        computed: u32,
    },
    /// The checksum matched but the section list is inconsistent (only a
    /// file written by other software can get here).
    Malformed {
        /// Byte offset (from the start of the file) where parsing stopped.
        offset: u64,
        /// What was wrong.
        what: &'static str,
    },
    /// A section name is longer than 65 535 bytes (returned by
    /// [`Checkpoint::insert`]).
    SectionNameTooLong {
        /// Length of the rejected name in bytes.
        len: usize,
    },
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadMagic => f.write_str("not a checkpoint file (bad magic bytes)"),
            Self::UnsupportedVersion { found, supported } => write!(
                f,
                "unsupported checkpoint format version {found} (this build reads version {supported})"
            ),
            Self::Truncated { expected, actual } => {
                write!(f, "truncated: {actual} bytes present, {expected} expected")
            }
            Self::TrailingBytes { expected, actual } => write!(
                f,
                "{actual} bytes present but the header announces {expected}"
            ),
            Self::ChecksumMismatch { stored, computed } => write!(
                f,
                "checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): the file is corrupt"
            ),
            Self::Malformed { offset, what } => {
                write!(f, "malformed section list at byte {offset}: {what}")
            }
            Self::SectionNameTooLong { len } => {
                write!(f, "section name of {len} bytes exceeds 65535")
            }
        }
    }
}

impl core::error::Error for FormatError {}

/// The file operation that failed in [`CheckpointError::Io`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IoOp {
    /// Creating the directory or a temp file.
    Create,
    /// Writing bytes.
    Write,
    /// `fsync` of a file.
    Sync,
    /// Renaming the temp file over the target.
    Rename,
    /// `fsync` of the directory after the rename.
    SyncDir,
    /// Reading a file.
    Read,
    /// Listing a directory.
    ListDir,
    /// Deleting an old checkpoint or a stale temp file.
    Remove,
}

impl fmt::Display for IoOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Create => "create",
            Self::Write => "write",
            Self::Sync => "fsync",
            Self::Rename => "rename into place",
            Self::SyncDir => "fsync the directory of",
            Self::Read => "read",
            Self::ListDir => "list",
            Self::Remove => "remove",
        })
    }
}

/// A checkpoint could not be written or read; every variant names the file.
#[derive(Debug)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The operating system refused a file operation.
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// What was being done.
        op: IoOp,
        /// The OS error.
        source: io::Error,
    },
    /// The file exists but is not a valid checkpoint.
    Corrupt {
        /// The file read.
        path: PathBuf,
        /// Why it was rejected.
        reason: FormatError,
    },
    /// The path has no file name (e.g. `/` or `..`), so there is nothing to
    /// write to.
    InvalidPath {
        /// The rejected path.
        path: PathBuf,
    },
}

impl CheckpointError {
    /// The file or directory the error is about.
    pub fn path(&self) -> &Path {
        match self {
            Self::Io { path, .. } | Self::Corrupt { path, .. } | Self::InvalidPath { path } => path,
        }
    }

    /// The format problem, when the file was read but rejected.
    pub fn format_error(&self) -> Option<&FormatError> {
        match self {
            Self::Corrupt { reason, .. } => Some(reason),
            _ => None,
        }
    }

    fn io(path: &Path, op: IoOp, source: io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            op,
            source,
        }
    }
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, op, source } => {
                write!(f, "checkpoint {}: cannot {op}: {source}", path.display())
            }
            Self::Corrupt { path, reason } => {
                write!(f, "checkpoint {}: {reason}", path.display())
            }
            Self::InvalidPath { path } => {
                write!(f, "checkpoint path {} has no file name", path.display())
            }
        }
    }
}

impl core::error::Error for CheckpointError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            Self::Corrupt { reason, .. } => Some(reason),
            Self::InvalidPath { .. } => None,
        }
    }
}

/// An ordered set of named byte sections: what one checkpoint file holds.
///
/// Names are unique; [`insert`](Self::insert) replaces a section of the same
/// name in place. Encoding is deterministic: the same sections in the same
/// order give the same bytes.
///
/// # Example
///
/// Save two sections atomically into a directory that keeps the newest two
/// files, then load the latest back; a flipped byte is refused by the
/// checksum, never returned as data.
///
/// ```
/// use basis_std::checkpoint::{Checkpoint, CheckpointDir};
///
/// let root = std::env::temp_dir().join(format!("basis-doc-ckpt-{}", std::process::id()));
/// let dir = CheckpointDir::open(&root, 2)?;
/// let mut ckpt = Checkpoint::new();
/// ckpt.insert("rows", vec![1u8, 2, 3])?;
/// ckpt.insert("optimizer", b"state".to_vec())?;
/// for step in [10, 20, 30] {
///     dir.save(step, &ckpt)?;
/// }
/// assert_eq!(dir.steps()?, vec![20, 30]); // the oldest was pruned
/// let latest = dir.load_latest()?.expect("a checkpoint was saved");
/// assert_eq!((latest.step, latest.checkpoint.get("rows")), (30, Some(&[1u8, 2, 3][..])));
///
/// let mut bytes = ckpt.encode();
/// let middle = bytes.len() / 2;
/// bytes[middle] ^= 1;
/// assert!(Checkpoint::decode(&bytes).is_err());
/// # std::fs::remove_dir_all(&root)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Checkpoint {
    sections: Vec<(String, Vec<u8>)>,
}

impl fmt::Debug for Checkpoint {
    /// Names and sizes only: the data can be gigabytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.sections.iter().map(|(n, d)| (n, d.len())))
            .finish()
    }
}

impl Checkpoint {
    /// An empty checkpoint.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add (or replace) the section `name`.
    ///
    /// # Errors
    /// [`FormatError::SectionNameTooLong`] if `name` is over 65 535 bytes.
    pub fn insert(&mut self, name: &str, data: impl Into<Vec<u8>>) -> Result<(), FormatError> {
        if u16::try_from(name.len()).is_err() {
            return Err(FormatError::SectionNameTooLong { len: name.len() });
        }
        let data = data.into();
        match self.sections.iter_mut().find(|(n, _)| n == name) {
            Some((_, d)) => *d = data,
            None => self.sections.push((String::from(name), data)),
        }
        Ok(())
    }

    /// The data of section `name`, if present.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.sections
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d.as_slice())
    }

    /// Remove section `name` and return its data.
    pub fn remove(&mut self, name: &str) -> Option<Vec<u8>> {
        let i = self.sections.iter().position(|(n, _)| n == name)?;
        Some(self.sections.remove(i).1)
    }

    /// Section names in file order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.sections.iter().map(|(n, _)| n.as_str())
    }

    /// Number of sections.
    pub fn len(&self) -> usize {
        self.sections.len()
    }

    /// `true` when there are no sections.
    pub fn is_empty(&self) -> bool {
        self.sections.is_empty()
    }

    /// Size of [`encode`](Self::encode)'s output in bytes.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN
            + self
                .sections
                .iter()
                .map(|(n, d)| MIN_SECTION_LEN + n.len() + d.len())
                .sum::<usize>()
    }

    /// The complete file contents (header, CRC and sections).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        // Section count and lengths fit: `insert` bounds names, and a Vec
        // cannot hold more than isize::MAX bytes (< u64::MAX).
        out.extend_from_slice(&(self.sections.len() as u32).to_le_bytes());
        let payload_len = (self.encoded_len() - HEADER_LEN) as u64;
        out.extend_from_slice(&payload_len.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        for (name, data) in &self.sections {
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&(data.len() as u64).to_le_bytes());
            out.extend_from_slice(data);
        }
        let crc = checksum(&out);
        out[CRC_OFFSET..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parse file contents produced by [`encode`](Self::encode).
    ///
    /// Never panics and never allocates more than `bytes.len()` in total.
    ///
    /// # Errors
    /// [`FormatError::BadMagic`] if the bytes do not start like a checkpoint;
    /// [`FormatError::UnsupportedVersion`] for another format version;
    /// [`FormatError::Truncated`] / [`FormatError::TrailingBytes`] if the
    /// length disagrees with the header; [`FormatError::ChecksumMismatch`]
    /// for any corruption of the content; [`FormatError::Malformed`] if a
    /// checksum-valid file has an inconsistent section list.
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        let magic_seen = bytes.len().min(MAGIC.len());
        if bytes[..magic_seen] != MAGIC[..magic_seen] {
            return Err(FormatError::BadMagic);
        }
        if bytes.len() < HEADER_LEN {
            return Err(FormatError::Truncated {
                expected: HEADER_LEN as u64,
                actual: bytes.len() as u64,
            });
        }
        let mut header = Reader {
            bytes: &bytes[..HEADER_LEN],
            pos: MAGIC.len(),
        };
        let version = header.u32()?;
        if version != FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let count = header.u32()?;
        let payload_len = header.u64()?;
        let stored = header.u32()?;
        let actual = bytes.len() as u64;
        let expected = payload_len.saturating_add(HEADER_LEN as u64);
        if actual < expected {
            return Err(FormatError::Truncated { expected, actual });
        }
        if actual > expected {
            return Err(FormatError::TrailingBytes { expected, actual });
        }
        let computed = checksum(bytes);
        if stored != computed {
            return Err(FormatError::ChecksumMismatch { stored, computed });
        }
        parse_sections(bytes, count)
    }
}

/// CRC-32 of a whole file image, skipping the CRC field itself.
fn checksum(file: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&file[..CRC_OFFSET]);
    h.update(&file[HEADER_LEN..]);
    h.finalize()
}

fn parse_sections(bytes: &[u8], count: u32) -> Result<Checkpoint, FormatError> {
    let mut r = Reader {
        bytes,
        pos: HEADER_LEN,
    };
    // Bound the reservation by what the bytes can hold, not by the header.
    let room = (bytes.len() - HEADER_LEN) / MIN_SECTION_LEN;
    let mut sections: Vec<(String, Vec<u8>)> = Vec::with_capacity(room.min(count as usize));
    for _ in 0..count {
        let name_len = usize::from(r.u16()?);
        let name_at = r.pos;
        let name = core::str::from_utf8(r.take(name_len)?).map_err(|_| FormatError::Malformed {
            offset: name_at as u64,
            what: "section name is not UTF-8",
        })?;
        if sections.iter().any(|(n, _)| n == name) {
            return Err(FormatError::Malformed {
                offset: name_at as u64,
                what: "duplicate section name",
            });
        }
        let data_len = r.u64()?;
        let data_len = usize::try_from(data_len).map_err(|_| r.malformed("section too long"))?;
        let data = r.take(data_len)?;
        sections.push((String::from(name), data.to_vec()));
    }
    if r.pos != bytes.len() {
        return Err(r.malformed("bytes left after the last section"));
    }
    Ok(Checkpoint { sections })
}

/// Bounds-checked little-endian reader over a byte slice.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn malformed(&self, what: &'static str) -> FormatError {
        FormatError::Malformed {
            offset: self.pos as u64,
            what,
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| self.malformed("section runs past the end of the payload"))?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], FormatError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u16(&mut self) -> Result<u16, FormatError> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Result<u32, FormatError> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, FormatError> {
        self.array().map(u64::from_le_bytes)
    }
}

/// Distinguishes temp files of concurrent writes within one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Marker inside every temp file name (after a leading `.`).
const TEMP_MARKER: &str = ".tmp-";

/// The directory holding `path` (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A file written to its temp name but not yet renamed into place.
///
/// [`commit`](Self::commit) renames it over the target; dropping it without
/// committing deletes the temp file and leaves the target untouched. Created
/// by [`stage`]; [`write_atomic`] is `stage` + `commit`.
#[derive(Debug)]
pub struct StagedWrite {
    temp: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl StagedWrite {
    /// The temp file holding the new contents.
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// Rename the temp file over the target and `fsync` the directory.
    ///
    /// # Errors
    /// [`CheckpointError::Io`] naming the target if the rename or the
    /// directory sync fails (the temp file is then removed; the target holds
    /// its previous contents after a failed rename).
    pub fn commit(mut self) -> Result<(), CheckpointError> {
        fs::rename(&self.temp, &self.target)
            .map_err(|e| CheckpointError::io(&self.target, IoOp::Rename, e))?;
        self.committed = true;
        sync_dir(parent_dir(&self.target))
    }
}

impl Drop for StagedWrite {
    fn drop(&mut self) {
        if !self.committed {
            // Best effort: a leftover temp file is harmless (never read).
            let _ = fs::remove_file(&self.temp);
        }
    }
}

/// Write `bytes` to a fresh temp file next to `path` and `fsync` it; the
/// target is not touched until [`StagedWrite::commit`].
///
/// # Errors
/// [`CheckpointError::InvalidPath`] if `path` has no file name;
/// [`CheckpointError::Io`] naming the temp file if it cannot be created,
/// written or synced (it is removed again).
pub fn stage(path: &Path, bytes: &[u8]) -> Result<StagedWrite, CheckpointError> {
    let name = path
        .file_name()
        .ok_or_else(|| CheckpointError::InvalidPath {
            path: path.to_path_buf(),
        })?;
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!("{TEMP_MARKER}{}-{n}", std::process::id()));
    let temp = parent_dir(path).join(temp_name);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
        .map_err(|e| CheckpointError::io(&temp, IoOp::Create, e))?;
    let staged = StagedWrite {
        temp,
        target: path.to_path_buf(),
        committed: false,
    };
    file.write_all(bytes)
        .map_err(|e| CheckpointError::io(&staged.temp, IoOp::Write, e))?;
    file.sync_all()
        .map_err(|e| CheckpointError::io(&staged.temp, IoOp::Sync, e))?;
    Ok(staged)
}

/// Replace the file at `path` with `bytes` so that a crash at any moment
/// leaves either the old or the new contents there (see the module docs).
///
/// # Errors
/// As [`stage`] and [`StagedWrite::commit`]; on error the previous file at
/// `path` is intact.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    stage(path, bytes)?.commit()
}

/// `fsync` a directory so a rename inside it survives power loss. A no-op
/// where directories cannot be opened as files (non-Unix).
fn sync_dir(dir: &Path) -> Result<(), CheckpointError> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| CheckpointError::io(dir, IoOp::SyncDir, e))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Encode `checkpoint` and [`write_atomic`] it to `path`.
///
/// # Errors
/// As [`write_atomic`].
pub fn save(path: &Path, checkpoint: &Checkpoint) -> Result<(), CheckpointError> {
    write_atomic(path, &checkpoint.encode())
}

/// Read and verify the checkpoint at `path`.
///
/// # Errors
/// [`CheckpointError::Io`] if the file cannot be read;
/// [`CheckpointError::Corrupt`] (naming the file, with the [`FormatError`])
/// if it is truncated, corrupted, of another version or not a checkpoint.
pub fn load(path: &Path) -> Result<Checkpoint, CheckpointError> {
    let bytes = fs::read(path).map_err(|e| CheckpointError::io(path, IoOp::Read, e))?;
    Checkpoint::decode(&bytes).map_err(|reason| CheckpointError::Corrupt {
        path: path.to_path_buf(),
        reason,
    })
}

/// A directory of numbered checkpoints `ckpt-<step>.basis` that keeps the
/// newest `keep` and recovers from stale temp files and corrupt files.
///
/// One writer per directory: the directory describes one training run.
#[derive(Debug, Clone)]
pub struct CheckpointDir {
    dir: PathBuf,
    keep: usize,
    removed_on_open: usize,
}

/// The checkpoint [`CheckpointDir::load_latest`] found.
#[derive(Debug)]
pub struct Restored {
    /// Its step number.
    pub step: u64,
    /// Its file.
    pub path: PathBuf,
    /// Its contents.
    pub checkpoint: Checkpoint,
    /// Newer files that could not be read, newest first (empty normally).
    pub skipped: Vec<CheckpointError>,
}

const FILE_PREFIX: &str = "ckpt-";
const FILE_SUFFIX: &str = ".basis";

impl CheckpointDir {
    /// Open (creating it if needed) the directory `dir`, keeping at most
    /// `keep` checkpoints (`keep` 0 is treated as 1), and delete stale temp
    /// files left by an interrupted write.
    ///
    /// # Errors
    /// [`CheckpointError::Io`] if the directory cannot be created or listed,
    /// or a stale temp file cannot be removed.
    pub fn open(dir: impl Into<PathBuf>, keep: usize) -> Result<Self, CheckpointError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(|e| CheckpointError::io(&dir, IoOp::Create, e))?;
        let mut this = Self {
            dir,
            keep: keep.max(1),
            removed_on_open: 0,
        };
        this.removed_on_open = this.remove_stale_temp_files()?;
        Ok(this)
    }

    /// How many stale temp files (left by an interrupted save) [`open`](Self::open)
    /// removed.
    pub fn removed_on_open(&self) -> usize {
        self.removed_on_open
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file name used for `step`.
    pub fn path_for(&self, step: u64) -> PathBuf {
        self.dir
            .join(format!("{FILE_PREFIX}{step:020}{FILE_SUFFIX}"))
    }

    /// Steps of the checkpoint files present, ascending (by name only; the
    /// files are not read).
    ///
    /// # Errors
    /// [`CheckpointError::Io`] if the directory cannot be listed.
    pub fn steps(&self) -> Result<Vec<u64>, CheckpointError> {
        let mut steps: Vec<u64> = self
            .entries()?
            .iter()
            .filter_map(|name| {
                name.strip_prefix(FILE_PREFIX)?
                    .strip_suffix(FILE_SUFFIX)?
                    .parse()
                    .ok()
            })
            .collect();
        steps.sort_unstable();
        Ok(steps)
    }

    fn entries(&self) -> Result<Vec<String>, CheckpointError> {
        let list = |e| CheckpointError::io(&self.dir, IoOp::ListDir, e);
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(list)? {
            let entry = entry.map_err(list)?;
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    /// Save `checkpoint` as `step` atomically, then delete checkpoints beyond
    /// the newest `keep`, any checkpoint with a *higher* step (an abandoned
    /// future of this run, e.g. after resuming from an older file), and
    /// stale temp files.
    ///
    /// # Errors
    /// [`CheckpointError::Io`] if writing or cleaning up fails; when the
    /// write itself failed, every earlier checkpoint is intact.
    pub fn save(&self, step: u64, checkpoint: &Checkpoint) -> Result<PathBuf, CheckpointError> {
        let path = self.path_for(step);
        save(&path, checkpoint)?;
        let steps = self.steps()?;
        let older: Vec<u64> = steps.iter().copied().filter(|&s| s < step).collect();
        let drop_older = older.len().saturating_sub(self.keep - 1);
        let doomed = older[..drop_older]
            .iter()
            .chain(steps.iter().filter(|&&s| s > step));
        for &s in doomed {
            remove(&self.path_for(s))?;
        }
        self.remove_stale_temp_files()?;
        Ok(path)
    }

    /// The newest checkpoint that reads back valid; corrupt or unreadable
    /// newer files are listed in [`Restored::skipped`]. `Ok(None)` when the
    /// directory holds no checkpoint file at all.
    ///
    /// # Errors
    /// [`CheckpointError::Io`] if the directory cannot be listed; if files
    /// exist but none is valid, the error of the newest one.
    pub fn load_latest(&self) -> Result<Option<Restored>, CheckpointError> {
        let mut skipped = Vec::new();
        for step in self.steps()?.into_iter().rev() {
            let path = self.path_for(step);
            match load(&path) {
                Ok(checkpoint) => {
                    return Ok(Some(Restored {
                        step,
                        path,
                        checkpoint,
                        skipped,
                    }));
                }
                Err(e) => skipped.push(e),
            }
        }
        match skipped.into_iter().next() {
            Some(newest) => Err(newest),
            None => Ok(None),
        }
    }

    /// Delete temp files (`.NAME.tmp-…`) left by interrupted writes; returns
    /// how many were removed.
    ///
    /// # Errors
    /// [`CheckpointError::Io`] if the directory cannot be listed or a file
    /// cannot be removed.
    pub fn remove_stale_temp_files(&self) -> Result<usize, CheckpointError> {
        let mut removed = 0;
        for name in self.entries()? {
            if name.starts_with('.') && name.contains(TEMP_MARKER) {
                remove(&self.dir.join(name))?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// Remove a file; one that is already gone is fine.
fn remove(path: &Path) -> Result<(), CheckpointError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(CheckpointError::io(path, IoOp::Remove, e))
        }
        _ => Ok(()),
    }
}
