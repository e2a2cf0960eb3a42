//! Checkpoint files of a training run, stored with `basis_std::checkpoint`
//! (atomic temp-file → fsync → rename → directory fsync, CRC-32 header).
//!
//! One file holds everything a resumed run needs to continue bit for bit:
//! the epoch reached, the data-order RNG state, the model table and dense
//! parameters, the dense optimizer's exported state (`onebit-adam`'s
//! versioned, checksummed record), the sparse optimizer's exported state
//! (itself versioned and checksummed by `basis-core`; with BASIS it includes
//! the d-choice bucket choices), the metric history, and a fingerprint of the
//! run's configuration so a checkpoint of another run is refused.
//!
//! Each field of [`Checkpoint`] is one named section of the container (see
//! `basis_std::checkpoint` for the file layout), in the order of the struct;
//! numbers and `f32` vectors are little-endian. After the run's state come
//! the metric history and the run's options as `option=value` lines (so a
//! refused resume names the option that differs; files without that last
//! section still load). A rank of a row-sharded run (`--shard rows`) writes
//! one such file of its own: its table's `basis_shard::TableSnapshot`
//! sections (`shard.*`: rows at their width, ids, optimizer state,
//! admission and eviction state); its `table` and `optimizer` are empty.
//! Rank files of older versions (f32 rows in `table`, a `shard_ids`
//! section) are refused ([`CheckpointError::OldShardFormat`]), and so are
//! single-process files of the CLI's own dense Adam (`dense_m`/`dense_v`
//! sections, no `dense_opt`: [`CheckpointError::OldDenseAdam`]), whose
//! moments `onebit-adam`'s Adam would continue in other bits.

use basis_shard::{ShardError, TableSnapshot};
use basis_std::checkpoint as file;
use core::fmt;
use std::path::{Path, PathBuf};

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
    /// The dense optimizer's exported state (`onebit_adam::OneBitAdam::
    /// export_state` and its siblings: moments, error-feedback buffers,
    /// step and stage).
    pub(crate) dense_opt: Vec<u8>,
    /// The sparse optimizer's exported state.
    pub(crate) optimizer: Vec<u8>,
    /// Metric history so far (JSON).
    pub(crate) history: String,
    /// The options the fingerprint was made of, one `option=value` per line
    /// (empty in files written before this section existed), so a refused
    /// resume can name the option that differs.
    pub(crate) options: String,
    /// A row-sharded rank's table: rows (at their width in the file), ids,
    /// optimizer (`None` otherwise; the run's `table` and `optimizer` are
    /// then empty).
    pub(crate) shard: Option<TableSnapshot>,
}

/// Why a checkpoint could not be written or read.
#[derive(Debug)]
pub(crate) enum CheckpointError {
    /// The file could not be written or read, or is truncated, corrupted, of
    /// another format version or not a checkpoint (the error names the file).
    File(file::CheckpointError),
    /// The file is a valid container but a section of the run is missing or
    /// has the wrong size (written by other software).
    Section {
        /// The file.
        path: PathBuf,
        /// The section.
        name: &'static str,
    },
    /// The table sections of a sharded rank's file are malformed.
    Table {
        /// The file.
        path: PathBuf,
        /// What `basis_shard::TableSnapshot::from_checkpoint` found.
        source: ShardError,
    },
    /// A sharded rank's file of a version before the table snapshot
    /// (f32 rows in `table`): start afresh, or finish with that version.
    OldShardFormat(PathBuf),
    /// A single-process file of a version whose dense parameters were
    /// stepped by the CLI's own Adam (`dense_m`/`dense_v`): `onebit-adam`'s
    /// Adam rounds differently, so the run cannot go on in its bits.
    OldDenseAdam(PathBuf),
    /// A checkpoint of a different run configuration.
    Mismatch {
        /// The file.
        path: PathBuf,
        /// The first option that differs: `(option, in the file, in this
        /// run)`, when the file records its options.
        differs: Option<(String, String, String)>,
    },
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(e) => match e.format_error() {
                Some(reason) => write!(
                    f,
                    "checkpoint {} is truncated or corrupted: {reason}",
                    e.path().display()
                ),
                None => write!(f, "{e}"),
            },
            Self::Section { path, name } => write!(
                f,
                "checkpoint {} is corrupted: section `{name}` is missing or malformed",
                path.display()
            ),
            Self::Table { path, source } => {
                write!(f, "checkpoint {} is corrupted: {source}", path.display())
            }
            Self::OldShardFormat(path) => write!(
                f,
                "checkpoint {} is a sharded rank's file of an older basis (f32 rows, no shard.meta): resume it with that version or start afresh",
                path.display()
            ),
            Self::OldDenseAdam(path) => write!(
                f,
                "checkpoint {} is of an older basis whose single process stepped the dense parameters with its own Adam (dense_m/dense_v, no dense_opt); this version steps them with onebit-adam's, which would not continue that run bit for bit: resume it with that version or start afresh",
                path.display()
            ),
            Self::Mismatch {
                path,
                differs: Some((option, theirs, ours)),
            } => {
                let shown = |v: &str| if v.is_empty() { "unset" } else { v }.to_string();
                let (theirs, ours) = (shown(theirs), shown(ours));
                write!(
                    f,
                    "checkpoint {} belongs to a run with other data or options: it has {option} {theirs}, this run {option} {ours} (resume with the same options, or use another --checkpoint DIR)",
                    path.display()
                )
            }
            Self::Mismatch {
                path,
                differs: None,
            } => write!(
                f,
                "checkpoint {} belongs to a run with other data or options",
                path.display()
            ),
        }
    }
}

impl core::error::Error for CheckpointError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::File(e) => Some(e),
            Self::Table { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<file::CheckpointError> for CheckpointError {
    fn from(e: file::CheckpointError) -> Self {
        Self::File(e)
    }
}

/// Section names, in file order.
const RUN: &str = "run";
const TABLE: &str = "table";
const DENSE: &str = "dense";
/// The dense optimizer's record.
const DENSE_OPT: &str = "dense_opt";
/// The CLI's own dense Adam's first moment, in older single-process files
/// (refused).
const OLD_DENSE_M: &str = "dense_m";
const OPTIMIZER: &str = "optimizer";
const HISTORY: &str = "history";
/// Written after the history; optional when reading (older files lack it).
const OPTIONS: &str = "options";
/// The slot → id list of older sharded rank files (refused).
const OLD_SHARD_IDS: &str = "shard_ids";

/// Size of the `run` section: fingerprint, epoch, RNG state, non-finite
/// count, and 4 bytes written as 0 (the old dense Adam's step count, kept
/// so that older rank files still load).
const RUN_LEN: usize = 8 + 4 + 8 + 8 + 4;

fn f32s_to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes_to_f32s(b: &[u8]) -> Option<Vec<f32>> {
    if !b.len().is_multiple_of(4) {
        return None;
    }
    Some(
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// The container holding `c`.
fn to_file(c: &Checkpoint) -> file::Checkpoint {
    let mut run = Vec::with_capacity(RUN_LEN);
    run.extend_from_slice(&c.fingerprint.to_le_bytes());
    run.extend_from_slice(&c.epoch.to_le_bytes());
    run.extend_from_slice(&c.rng_state.to_le_bytes());
    run.extend_from_slice(&c.nonfinite.to_le_bytes());
    run.extend_from_slice(&0u32.to_le_bytes());
    let mut out = file::Checkpoint::new();
    let sections: [(&str, Vec<u8>); 7] = [
        (RUN, run),
        (TABLE, f32s_to_bytes(&c.table)),
        (DENSE, f32s_to_bytes(&c.dense)),
        (DENSE_OPT, c.dense_opt.clone()),
        (OPTIMIZER, c.optimizer.clone()),
        (HISTORY, c.history.clone().into_bytes()),
        (OPTIONS, c.options.clone().into_bytes()),
    ];
    for (name, data) in sections {
        // Names are short constants: `insert` only fails on names over 64 KiB.
        let _ = out.insert(name, data);
    }
    if let Some(table) = &c.shard {
        // Our names are not `shard.*`, so the table's cannot clash.
        let _ = table.insert_into(&mut out);
    }
    out
}

/// The run stored in `f`; `path` is for error messages.
fn from_file(f: &file::Checkpoint, path: &Path) -> Result<Checkpoint, CheckpointError> {
    let section = |name: &'static str| {
        f.get(name).ok_or_else(|| CheckpointError::Section {
            path: path.to_path_buf(),
            name,
        })
    };
    let malformed = |name| CheckpointError::Section {
        path: path.to_path_buf(),
        name,
    };
    let f32s = |name| bytes_to_f32s(section(name)?).ok_or_else(|| malformed(name));
    let run = section(RUN)?;
    if run.len() != RUN_LEN {
        return Err(malformed(RUN));
    }
    let (fingerprint, rest) = run.split_at(8);
    let (epoch, rest) = rest.split_at(4);
    let (rng_state, rest) = rest.split_at(8);
    let (nonfinite, _) = rest.split_at(8);
    let u64_of = |b: &[u8]| {
        b.try_into()
            .map(u64::from_le_bytes)
            .map_err(|_| malformed(RUN))
    };
    let u32_of = |b: &[u8]| {
        b.try_into()
            .map(u32::from_le_bytes)
            .map_err(|_| malformed(RUN))
    };
    if f.get(OLD_SHARD_IDS).is_some() {
        return Err(CheckpointError::OldShardFormat(path.to_path_buf()));
    }
    if f.get(DENSE_OPT).is_none() && f.get(OLD_DENSE_M).is_some() {
        return Err(CheckpointError::OldDenseAdam(path.to_path_buf()));
    }
    Ok(Checkpoint {
        fingerprint: u64_of(fingerprint)?,
        epoch: u32_of(epoch)?,
        rng_state: u64_of(rng_state)?,
        nonfinite: u64_of(nonfinite)?,
        table: f32s(TABLE)?,
        dense: f32s(DENSE)?,
        dense_opt: section(DENSE_OPT)?.to_vec(),
        optimizer: section(OPTIMIZER)?.to_vec(),
        history: String::from_utf8(section(HISTORY)?.to_vec()).map_err(|_| malformed(HISTORY))?,
        options: match f.get(OPTIONS) {
            Some(b) => String::from_utf8(b.to_vec()).map_err(|_| malformed(OPTIONS))?,
            None => String::new(),
        },
        shard: if f.names().any(|n| n.starts_with("shard.")) {
            Some(
                TableSnapshot::from_checkpoint(f).map_err(|source| CheckpointError::Table {
                    path: path.to_path_buf(),
                    source,
                })?,
            )
        } else {
            None
        },
    })
}

/// Write `c` to `path` atomically (see `basis_std::checkpoint::save`),
/// creating its directory first.
pub(crate) fn save(path: &Path, c: &Checkpoint) -> Result<(), CheckpointError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| {
            CheckpointError::File(file::CheckpointError::Io {
                path: dir.to_path_buf(),
                op: file::IoOp::Create,
                source,
            })
        })?;
    }
    Ok(file::save(path, &to_file(c))?)
}

/// Read the checkpoint at `path`, checking it belongs to `fingerprint`;
/// `options` (`option=value` lines, what the fingerprint hashes) names the
/// first option that differs in the error.
pub(crate) fn load(
    path: &Path,
    fingerprint: u64,
    options: &str,
) -> Result<Checkpoint, CheckpointError> {
    let c = from_file(&file::load(path)?, path)?;
    if c.fingerprint != fingerprint {
        return Err(CheckpointError::Mismatch {
            path: path.to_path_buf(),
            differs: first_difference(&c.options, options),
        });
    }
    Ok(c)
}

/// The first `option=value` line of `ours` whose value differs in `theirs`,
/// else the first option only one side lists (its value on the other side
/// empty: options listed only when set, such as `--admit-prob`); `None`
/// when `theirs` has no such list, or no line differs.
fn first_difference(theirs: &str, ours: &str) -> Option<(String, String, String)> {
    if theirs.is_empty() {
        return None;
    }
    let pairs = |text: &str| -> Vec<(String, String)> {
        text.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let (theirs, ours) = (pairs(theirs), pairs(ours));
    let value = |list: &[(String, String)], k: &str| {
        list.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    let changed = ours.iter().find_map(|(k, v)| {
        let t = value(&theirs, k)?;
        (t != *v).then(|| (k.clone(), t, v.clone()))
    });
    changed
        .or_else(|| {
            ours.iter()
                .find(|(k, _)| value(&theirs, k).is_none())
                .map(|(k, v)| (k.clone(), String::new(), v.clone()))
        })
        .or_else(|| {
            theirs
                .iter()
                .find(|(k, _)| value(&ours, k).is_none())
                .map(|(k, v)| (k.clone(), v.clone(), String::new()))
        })
}

/// Delete the temp files an interrupted save (e.g. a SIGKILLed run) left in
/// the checkpoint directory `dir`, with
/// `basis_std::checkpoint::CheckpointDir::remove_stale_temp_files` (temp
/// files are named `.NAME.tmp-PID-N`; checkpoints are never touched).
/// Returns how many were removed; a directory that does not exist yet has
/// none and is not created. Call it before the run writes: a temp file of a
/// concurrent writer in the same directory would be deleted too (one run
/// per directory at a time).
///
/// # Errors
/// [`CheckpointError::File`] if the directory cannot be listed or a stale
/// file cannot be removed.
pub(crate) fn remove_stale_temp_files(dir: &Path) -> Result<usize, CheckpointError> {
    if !dir.is_dir() {
        return Ok(0);
    }
    Ok(file::CheckpointDir::open(dir, 1)?.removed_on_open())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encode a checkpoint (the bytes [`save`] writes).
    fn encode(c: &Checkpoint) -> Vec<u8> {
        to_file(c).encode()
    }

    /// Decode a checkpoint; `path` is for error messages.
    fn decode(bytes: &[u8], path: &Path) -> Result<Checkpoint, CheckpointError> {
        let f = file::Checkpoint::decode(bytes).map_err(|reason| {
            CheckpointError::File(file::CheckpointError::Corrupt {
                path: path.to_path_buf(),
                reason,
            })
        })?;
        from_file(&f, path)
    }

    fn sample() -> Checkpoint {
        Checkpoint {
            fingerprint: 42,
            epoch: 2,
            rng_state: 7,
            nonfinite: 1,
            table: vec![1.0, -2.5, 3.25],
            dense: vec![0.5],
            dense_opt: vec![4, 5],
            optimizer: vec![1, 2, 3],
            history: "[]".into(),
            options: "--batch=8\n--dim=4".into(),
            shard: None,
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
    fn shard_sections_round_trip_and_are_checked() {
        let mut c = sample();
        c.shard = Some(TableSnapshot {
            ranks: 1,
            dim: 2,
            ids: vec![9, u64::MAX, 0],
            rows: vec![1.0, -2.5, 0.0, 3.0, 0.5, -1.0],
            precision: basis_shard::RowPrecision::Bf16,
            optimizer: vec![7, 8],
            opt_rows: 3,
            ..TableSnapshot::default()
        });
        let bytes = encode(&c);
        let p = Path::new("x");
        assert_eq!(decode(&bytes, p).unwrap(), c);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            assert!(decode(&bad, p).is_err(), "flip at {i} undetected");
        }
        // The rows are in the file at bf16's 2 bytes, not as f32.
        assert_eq!(to_file(&c).get("shard.rows").map(<[u8]>::len), Some(12));
        // A table without the dense optimizer state: refused, naming it.
        let mut f = to_file(&c);
        f.remove(DENSE_OPT);
        assert!(matches!(
            from_file(&f, p),
            Err(CheckpointError::Section {
                name: DENSE_OPT,
                ..
            })
        ));
        // Malformed table sections: refused with the table's reason.
        let mut f = to_file(&c);
        let _ = f.insert("shard.ids", vec![1u8; 16]);
        let e = from_file(&f, p).unwrap_err();
        assert!(matches!(e, CheckpointError::Table { .. }), "{e}");
        assert!(e.to_string().contains("shard.ids"), "{e}");
        // A rank file of the f32-table format before the snapshot.
        let mut f = to_file(&sample());
        let _ = f.insert(OLD_SHARD_IDS, vec![0u8; 8]);
        let e = from_file(&f, p).unwrap_err();
        assert!(matches!(e, CheckpointError::OldShardFormat(_)), "{e}");
    }

    /// A single-process file as the versions with the CLI's own dense Adam
    /// wrote it (its moments in `dense_m`/`dense_v`, its step in `run`, no
    /// `dense_opt`): refused with a message saying why, not approximated;
    /// a new file without `dense_opt` is a missing section.
    #[test]
    fn a_file_of_the_old_dense_adam_is_refused() {
        let c = sample();
        let mut run = Vec::new();
        for part in [
            &42u64.to_le_bytes()[..],
            &2u32.to_le_bytes(),
            &7u64.to_le_bytes(),
        ] {
            run.extend_from_slice(part);
        }
        run.extend_from_slice(&1u64.to_le_bytes());
        run.extend_from_slice(&9u32.to_le_bytes());
        let mut old = file::Checkpoint::new();
        let sections: [(&str, Vec<u8>); 8] = [
            (RUN, run),
            (TABLE, f32s_to_bytes(&c.table)),
            (DENSE, f32s_to_bytes(&c.dense)),
            ("dense_m", f32s_to_bytes(&[0.1])),
            ("dense_v", f32s_to_bytes(&[0.2])),
            (OPTIMIZER, c.optimizer.clone()),
            (HISTORY, c.history.clone().into_bytes()),
            (OPTIONS, c.options.clone().into_bytes()),
        ];
        for (name, data) in sections {
            old.insert(name, data).unwrap();
        }
        let p = Path::new("old.ckpt");
        let e = decode(&old.encode(), p).unwrap_err();
        assert!(matches!(e, CheckpointError::OldDenseAdam(_)), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("old.ckpt") && msg.contains("start afresh"),
            "{msg}"
        );
        // Without the old sections either: the missing section is named.
        let mut f = to_file(&c);
        f.remove(DENSE_OPT);
        let e = from_file(&f, p).unwrap_err();
        assert!(
            matches!(
                e,
                CheckpointError::Section {
                    name: DENSE_OPT,
                    ..
                }
            ),
            "{e}"
        );
        // The new layout keeps the old `run` length: a file that differs
        // from the old one only by `dense_opt` for `dense_m`/`dense_v` loads.
        old.remove("dense_m");
        old.remove("dense_v");
        old.insert(DENSE_OPT, c.dense_opt.clone()).unwrap();
        assert_eq!(decode(&old.encode(), p).unwrap(), c);
    }

    #[test]
    fn save_load_and_mismatch() {
        let dir = std::env::temp_dir().join(format!("basis-ckpt-test-{}", std::process::id()));
        let path = dir.join("run.ckpt");
        save(&path, &sample()).unwrap();
        assert_eq!(load(&path, 42, "").unwrap(), sample());
        let e = load(&path, 43, "--batch=8\n--dim=5").unwrap_err();
        assert!(
            matches!(&e, CheckpointError::Mismatch { differs: Some((o, t, u)), .. }
                if o == "--dim" && t == "4" && u == "5"),
            "{e}"
        );
        // A truncated file is refused with an error naming it.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let e = load(&path, 42, "").unwrap_err();
        assert!(matches!(e, CheckpointError::File(_)));
        let msg = e.to_string();
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(msg.contains("truncated or corrupted"), "{msg}");
        // A valid container without the run's sections is refused too.
        file::save(&path, &file::Checkpoint::new()).unwrap();
        let e = load(&path, 42, "").unwrap_err();
        assert!(
            matches!(e, CheckpointError::Section { name: RUN, .. }),
            "{e}"
        );
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "a temp file is left"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn stale_temp_files_are_counted_and_removed() {
        let dir = std::env::temp_dir().join(format!("basis-ckpt-stale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // A directory that does not exist yet: nothing to do, not created.
        assert_eq!(remove_stale_temp_files(&dir).unwrap(), 0);
        assert!(!dir.exists());
        let path = dir.join("run.ckpt");
        save(&path, &sample()).unwrap();
        let real = std::fs::read(&path).unwrap();
        // Named as `basis_std::checkpoint::stage` names its temp files.
        let stale = [".run.ckpt.tmp-4242-0", ".run.ckpt.tmp-4242-1"];
        for name in stale {
            std::fs::write(dir.join(name), b"half a checkpoint").unwrap();
        }
        std::fs::write(dir.join("notes.txt"), b"kept").unwrap();
        assert_eq!(remove_stale_temp_files(&dir).unwrap(), 2);
        for name in stale {
            assert!(!dir.join(name).exists(), "{name} left");
        }
        assert_eq!(std::fs::read(&path).unwrap(), real);
        assert!(dir.join("notes.txt").exists());
        assert_eq!(remove_stale_temp_files(&dir).unwrap(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
