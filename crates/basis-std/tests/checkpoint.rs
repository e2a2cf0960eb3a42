//! Checkpoint files: format round trips, every corruption detected and named,
//! interrupted writes leave the previous checkpoint readable, rotation.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a panic is a failing test, not a user-facing crash"
)]

use std::fs;
use std::path::{Path, PathBuf};

use basis_std::checkpoint::{
    self, Checkpoint, CheckpointDir, CheckpointError, FORMAT_VERSION, FormatError, HEADER_LEN,
    MAGIC,
};
use proptest::prelude::*;

/// A fresh, empty directory under the system temp dir, unique per test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join("basis-std-checkpoint-tests")
        .join(format!("{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn sample() -> Checkpoint {
    let mut c = Checkpoint::new();
    c.insert("model", vec![1, 2, 3, 4, 5]).unwrap();
    c.insert("optimizer", b"adam-state".to_vec()).unwrap();
    c.insert("step", 42u64.to_le_bytes()).unwrap();
    c.insert("", Vec::new()).unwrap();
    c
}

fn temp_files(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains(".tmp-"))
        .collect()
}

/// Build a file image with a valid header and CRC around any payload.
fn frame(version: u32, count: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let mut h = crc32fast::Hasher::new();
    h.update(&out);
    h.update(payload);
    out.extend_from_slice(&h.finalize().to_le_bytes());
    out.extend_from_slice(payload);
    out
}

#[test]
fn sections_round_trip_through_a_file() {
    let dir = scratch("roundtrip");
    let path = dir.join("run.ckpt");
    let c = sample();
    checkpoint::save(&path, &c).unwrap();
    let back = checkpoint::load(&path).unwrap();
    assert_eq!(back, c);
    assert_eq!(back.get("model"), Some(&[1, 2, 3, 4, 5][..]));
    assert_eq!(back.get("step"), Some(&42u64.to_le_bytes()[..]));
    assert_eq!(back.get("missing"), None);
    assert_eq!(
        back.names().collect::<Vec<_>>(),
        ["model", "optimizer", "step", ""]
    );
    assert_eq!(fs::metadata(&path).unwrap().len() as usize, c.encoded_len());
    assert!(temp_files(&dir).is_empty(), "{:?}", temp_files(&dir));
}

#[test]
fn the_encoding_matches_the_documented_layout() {
    let mut c = Checkpoint::new();
    c.insert("ab", vec![7, 8, 9]).unwrap();
    let mut payload = Vec::new();
    payload.extend_from_slice(&2u16.to_le_bytes());
    payload.extend_from_slice(b"ab");
    payload.extend_from_slice(&3u64.to_le_bytes());
    payload.extend_from_slice(&[7, 8, 9]);
    assert_eq!(c.encode(), frame(FORMAT_VERSION, 1, &payload));
}

#[test]
fn insert_replaces_and_remove_takes() {
    let mut c = sample();
    c.insert("model", vec![9]).unwrap();
    assert_eq!(c.len(), 4);
    assert_eq!(c.get("model"), Some(&[9][..]));
    assert_eq!(c.remove("model"), Some(vec![9]));
    assert_eq!(c.remove("model"), None);
    assert_eq!(c.len(), 3);
    let long = "x".repeat(65_536);
    assert_eq!(
        c.insert(&long, vec![]),
        Err(FormatError::SectionNameTooLong { len: 65_536 })
    );
    assert!(c.insert(&long[..65_535], vec![]).is_ok());
}

#[test]
fn every_single_byte_change_is_detected_and_names_the_file() {
    let dir = scratch("flips");
    let path = dir.join("small.ckpt");
    let good = sample().encode();
    for pos in 0..good.len() {
        for mask in [0x01u8, 0x80, 0xff, 0x5a] {
            let mut bad = good.clone();
            bad[pos] ^= mask;
            fs::write(&path, &bad).unwrap();
            let err = checkpoint::load(&path).unwrap_err();
            assert_eq!(err.path(), path, "byte {pos} mask {mask:#x}");
            assert!(err.to_string().contains(path.to_str().unwrap()));
            let reason = err.format_error().unwrap().clone();
            let ok = match pos {
                0..8 => reason == FormatError::BadMagic,
                8..12 => matches!(reason, FormatError::UnsupportedVersion { .. }),
                16..24 => matches!(
                    reason,
                    FormatError::Truncated { .. } | FormatError::TrailingBytes { .. }
                ),
                _ => matches!(reason, FormatError::ChecksumMismatch { .. }),
            };
            assert!(ok, "byte {pos} mask {mask:#x}: {reason:?}");
        }
    }
}

#[test]
fn every_truncation_is_reported_as_truncated() {
    let dir = scratch("truncate");
    let path = dir.join("cut.ckpt");
    let good = sample().encode();
    for len in 0..good.len() {
        fs::write(&path, &good[..len]).unwrap();
        match checkpoint::load(&path) {
            Err(CheckpointError::Corrupt {
                path: p,
                reason: FormatError::Truncated { expected, actual },
            }) => {
                assert_eq!(p, path);
                assert_eq!(actual, len as u64);
                assert!(expected > actual);
            }
            other => panic!("length {len}: {other:?}"),
        }
    }
    // The message says what happened, with both lengths and the file.
    let cut = good.len() - 3;
    fs::write(&path, &good[..cut]).unwrap();
    assert_eq!(
        checkpoint::load(&path).unwrap_err().to_string(),
        format!(
            "checkpoint {}: truncated: {cut} bytes present, {} expected",
            path.display(),
            good.len()
        )
    );
}

#[test]
fn appended_bytes_are_rejected() {
    let mut bytes = sample().encode();
    let n = bytes.len() as u64;
    bytes.push(0);
    assert_eq!(
        Checkpoint::decode(&bytes),
        Err(FormatError::TrailingBytes {
            expected: n,
            actual: n + 1
        })
    );
}

#[test]
fn another_format_version_is_a_typed_error_even_with_a_valid_checksum() {
    let dir = scratch("version");
    let path = dir.join("future.ckpt");
    fs::write(&path, frame(FORMAT_VERSION + 1, 0, &[])).unwrap();
    let err = checkpoint::load(&path).unwrap_err();
    assert!(matches!(
        err,
        CheckpointError::Corrupt {
            reason: FormatError::UnsupportedVersion {
                found: 2,
                supported: 1
            },
            ..
        }
    ));
    assert!(err.to_string().contains("future.ckpt"), "{err}");
    assert!(err.to_string().contains("version 2"), "{err}");
}

#[test]
fn a_file_of_another_kind_is_bad_magic() {
    let dir = scratch("magic");
    let path = dir.join("notes.json");
    fs::write(&path, br#"{"step": 3}"#).unwrap();
    let err = checkpoint::load(&path).unwrap_err();
    assert_eq!(err.format_error(), Some(&FormatError::BadMagic));
    assert_eq!(err.path(), path);
}

#[test]
fn a_missing_file_is_an_io_error_naming_it() {
    let dir = scratch("missing");
    let path = dir.join("nope.ckpt");
    let err = checkpoint::load(&path).unwrap_err();
    match &err {
        CheckpointError::Io {
            path: p, source, ..
        } => {
            assert_eq!(p, &path);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("nope.ckpt"));
}

#[test]
fn checksum_valid_but_inconsistent_sections_are_malformed() {
    // Count says 1, no bytes follow.
    assert!(matches!(
        Checkpoint::decode(&frame(1, 1, &[])),
        Err(FormatError::Malformed { offset: 28, .. })
    ));
    // Count says 0, but a section follows.
    let one = {
        let mut c = Checkpoint::new();
        c.insert("a", vec![1]).unwrap();
        c.encode()
    };
    assert!(matches!(
        Checkpoint::decode(&frame(1, 0, &one[HEADER_LEN..])),
        Err(FormatError::Malformed { .. })
    ));
    // Duplicate names.
    let mut dup = one[HEADER_LEN..].to_vec();
    dup.extend_from_slice(&one[HEADER_LEN..]);
    assert!(matches!(
        Checkpoint::decode(&frame(1, 2, &dup)),
        Err(FormatError::Malformed {
            what: "duplicate section name",
            ..
        })
    ));
    // A data length beyond the end (must not allocate it).
    let mut huge = Vec::new();
    huge.extend_from_slice(&0u16.to_le_bytes());
    huge.extend_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        Checkpoint::decode(&frame(1, 1, &huge)),
        Err(FormatError::Malformed { .. })
    ));
    // A section count of u32::MAX must not reserve memory for it.
    assert!(matches!(
        Checkpoint::decode(&frame(1, u32::MAX, &[])),
        Err(FormatError::Malformed { .. })
    ));
    // A name that is not UTF-8.
    let mut bad_name = Vec::new();
    bad_name.extend_from_slice(&1u16.to_le_bytes());
    bad_name.push(0xff);
    bad_name.extend_from_slice(&0u64.to_le_bytes());
    assert!(matches!(
        Checkpoint::decode(&frame(1, 1, &bad_name)),
        Err(FormatError::Malformed {
            what: "section name is not UTF-8",
            ..
        })
    ));
}

#[test]
fn a_write_interrupted_before_the_rename_leaves_the_old_file() {
    let dir = scratch("interrupt");
    let path = dir.join("run.ckpt");
    let old = sample();
    checkpoint::save(&path, &old).unwrap();

    // Crash after the temp file is fully written and synced, before rename.
    let mut new = sample();
    new.insert("model", vec![0; 1000]).unwrap();
    let staged = checkpoint::stage(&path, &new.encode()).unwrap();
    let temp = staged.temp_path().to_path_buf();
    assert!(temp.starts_with(&dir));
    core::mem::forget(staged); // the process "dies": no cleanup runs
    assert!(temp.exists());
    assert_eq!(checkpoint::load(&path).unwrap(), old);

    // Crash halfway through writing the temp file.
    let partial = dir.join(".run.ckpt.tmp-99999-7");
    fs::write(&partial, &new.encode()[..100]).unwrap();
    assert_eq!(checkpoint::load(&path).unwrap(), old);

    // An abandoned (dropped) staged write cleans up after itself.
    let staged = checkpoint::stage(&path, &new.encode()).unwrap();
    let temp2 = staged.temp_path().to_path_buf();
    drop(staged);
    assert!(!temp2.exists());
    assert_eq!(checkpoint::load(&path).unwrap(), old);

    // The next real write replaces the target; temp files stay ignored.
    checkpoint::save(&path, &new).unwrap();
    assert_eq!(checkpoint::load(&path).unwrap(), new);
    assert_eq!(temp_files(&dir).len(), 2);
}

#[test]
fn a_failed_write_reports_the_temp_file_and_keeps_the_target() {
    let dir = scratch("failwrite");
    let missing_dir = dir.join("no-such-dir").join("run.ckpt");
    let err = checkpoint::save(&missing_dir, &sample()).unwrap_err();
    match &err {
        CheckpointError::Io { path, .. } => {
            assert!(path.starts_with(dir.join("no-such-dir")), "{path:?}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        checkpoint::save(Path::new("/"), &sample()),
        Err(CheckpointError::InvalidPath { .. })
    ));
    // Renaming onto a directory fails: the directory (the "target") stays.
    let target = dir.join("occupied");
    fs::create_dir(&target).unwrap();
    fs::write(target.join("inside"), b"x").unwrap();
    let err = checkpoint::save(&target, &sample()).unwrap_err();
    assert!(matches!(
        err,
        CheckpointError::Io {
            op: checkpoint::IoOp::Rename,
            ..
        }
    ));
    assert_eq!(err.path(), target);
    assert!(target.join("inside").exists());
    assert!(temp_files(&dir).is_empty(), "{:?}", temp_files(&dir));
}

fn numbered(step: u64) -> Checkpoint {
    let mut c = Checkpoint::new();
    c.insert("step", step.to_le_bytes()).unwrap();
    c.insert("data", vec![step as u8; 10 + step as usize])
        .unwrap();
    c
}

#[test]
fn the_directory_keeps_the_newest_k_and_cleans_temp_files() {
    let dir = scratch("rotate");
    fs::write(
        dir.join(".ckpt-00000000000000000009.basis.tmp-1-1"),
        b"junk",
    )
    .unwrap();
    fs::write(dir.join("unrelated.txt"), b"keep me").unwrap();
    let ckpts = CheckpointDir::open(&dir, 3).unwrap();
    assert!(temp_files(&dir).is_empty());
    assert_eq!(ckpts.removed_on_open(), 1);
    assert!(ckpts.load_latest().unwrap().is_none());
    for step in 1..=6 {
        ckpts.save(step, &numbered(step)).unwrap();
    }
    assert_eq!(ckpts.steps().unwrap(), [4, 5, 6]);
    let latest = ckpts.load_latest().unwrap().unwrap();
    assert_eq!(latest.step, 6);
    assert_eq!(latest.checkpoint, numbered(6));
    assert!(latest.skipped.is_empty());
    assert!(dir.join("unrelated.txt").exists());

    // Resuming from step 4 abandons 5 and 6.
    ckpts.save(4, &numbered(4)).unwrap();
    assert_eq!(ckpts.steps().unwrap(), [4]);
    ckpts.save(5, &numbered(5)).unwrap();
    assert_eq!(ckpts.steps().unwrap(), [4, 5]);
}

#[test]
fn a_corrupt_newest_checkpoint_falls_back_to_the_previous_one() {
    let dir = scratch("fallback");
    let ckpts = CheckpointDir::open(&dir, 2).unwrap();
    ckpts.save(10, &numbered(10)).unwrap();
    let newest = ckpts.save(20, &numbered(20)).unwrap();
    let mut bytes = fs::read(&newest).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    fs::write(&newest, &bytes).unwrap();

    let latest = ckpts.load_latest().unwrap().unwrap();
    assert_eq!(latest.step, 10);
    assert_eq!(latest.checkpoint, numbered(10));
    assert_eq!(latest.skipped.len(), 1);
    assert_eq!(latest.skipped[0].path(), newest);

    // Nothing valid left: the error of the newest file, not a silent restart.
    fs::write(ckpts.path_for(10), b"BASISCKP").unwrap();
    let err = ckpts.load_latest().unwrap_err();
    assert_eq!(err.path(), newest);
}

proptest! {
    #[test]
    fn any_sections_round_trip(
        sections in proptest::collection::vec(
            ("[a-z/._-]{0,12}", proptest::collection::vec(any::<u8>(), 0..64)),
            0..6,
        )
    ) {
        let mut c = Checkpoint::new();
        for (name, data) in &sections {
            c.insert(name, data.clone()).unwrap();
        }
        let bytes = c.encode();
        prop_assert_eq!(bytes.len(), c.encoded_len());
        prop_assert_eq!(Checkpoint::decode(&bytes).unwrap(), c);
    }

    #[test]
    fn arbitrary_bytes_never_decode_by_accident(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        prop_assert!(Checkpoint::decode(&bytes).is_err());
    }

    #[test]
    fn checksum_valid_garbage_is_rejected_or_reencodes_identically(
        count in 0u32..5,
        payload in proptest::collection::vec(any::<u8>(), 0..128),
    ) {
        let file = frame(FORMAT_VERSION, count, &payload);
        match Checkpoint::decode(&file) {
            Ok(c) => prop_assert_eq!(c.encode(), file),
            Err(e) => prop_assert!(matches!(e, FormatError::Malformed { .. }), "{e:?}"),
        }
    }
}
