//! A folder-per-label text corpus: `ROOT/<label>/<file>`, one document per file.
//!
//! The positive label is the folder named by `--positive`; without it, the
//! folder `spam`; without that, of exactly two folders the one named like a
//! positive label (`1`, `pos`, `positive`, `true`, `yes`). Anything else is
//! an error naming the folders (see [`positive_folder`]); the chosen folder
//! is part of the data set's name, so every run says it. Other folders are
//! negative. A document's features are
//! its distinct lower-cased tokens (runs of ASCII letters and digits, 2 to 30
//! bytes long; the first [`MAX_TOKENS`] tokens only) and the bigrams of
//! consecutive tokens, each hashed in its own field; each feature has value
//! `1/sqrt(#features)` so long and short documents have comparable norms. A
//! document without a token is malformed (reported with line 0). Files are
//! read in sorted order and split by a seeded shuffle. With `--body-only`
//! everything up to the first empty line (an e-mail's header block) is
//! skipped; a file without an empty line is used whole.

use super::{DataError, Format, LoadOptions, LoadReport, RawData};
use crate::hashing::feature_key;
use std::path::{Path, PathBuf};

/// Tokens read per document (long e-mails carry attachments of noise).
pub const MAX_TOKENS: usize = 1000;

fn not_format(path: &Path, reason: impl Into<String>) -> DataError {
    DataError::NotFormat {
        path: path.to_path_buf(),
        format: Format::Text,
        line: 0,
        reason: reason.into(),
    }
}

fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>, DataError> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|error| DataError::Io {
            path: dir.to_path_buf(),
            error,
        })?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    v.sort();
    Ok(v)
}

/// Tokens of a document: lower-cased ASCII alphanumeric runs of 2..=30 bytes.
pub fn tokens(bytes: &[u8]) -> Vec<&[u8]> {
    bytes
        .split(|b| !b.is_ascii_alphanumeric())
        .filter(|t| (2..=30).contains(&t.len()))
        .take(MAX_TOKENS)
        .collect()
}

/// The part of a message after its header block (the first empty line),
/// or the whole message when it has no empty line.
pub fn body(bytes: &[u8]) -> &[u8] {
    let lf = bytes.windows(2).position(|w| w == b"\n\n").map(|p| p + 2);
    let crlf = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => &bytes[a.min(b)..],
        (Some(a), None) | (None, Some(a)) => &bytes[a..],
        (None, None) => bytes,
    }
}

/// The features of one document (see the module docs) into `feats`, or
/// why the document is malformed (it has no token).
pub(crate) fn document_features(
    bytes: &[u8],
    body_only: bool,
    feats: &mut Vec<(u64, f32)>,
) -> Result<(), &'static str> {
    feats.clear();
    let text = if body_only { body(bytes) } else { bytes };
    let lower: Vec<u8> = text.iter().map(u8::to_ascii_lowercase).collect();
    let toks = tokens(&lower);
    if toks.is_empty() {
        return Err("document has no tokens");
    }
    let mut keys: Vec<u64> = toks.iter().map(|t| feature_key(0, t)).collect();
    let mut pair = Vec::new();
    for w in toks.windows(2) {
        pair.clear();
        pair.extend_from_slice(w[0]);
        pair.push(b' ');
        pair.extend_from_slice(w[1]);
        keys.push(feature_key(1, &pair));
    }
    keys.sort_unstable();
    keys.dedup();
    let value = 1.0 / (keys.len() as f32).sqrt();
    feats.extend(keys.iter().map(|&k| (k, value)));
    Ok(())
}

/// Folder names that mean "positive" when `--positive` is not given and
/// there is no `spam` folder (lower-case; compared case-insensitively).
pub const POSITIVE_NAMES: &[&str] = &["spam", "1", "pos", "positive", "true", "yes"];

/// The index of the positive label folder among `names` (sorted): the one
/// named `wanted`; without it, `spam`; without that, with two folders, the
/// one of [`POSITIVE_NAMES`] when exactly one is. Anything else cannot be
/// decided, and guessing would silently invert the labels.
pub fn positive_folder(names: &[String], wanted: Option<&str>) -> Result<usize, String> {
    let list = || {
        names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(w) = wanted {
        return names
            .iter()
            .position(|n| n == w)
            .ok_or_else(|| format!("no label folder named `{w}` (folders: {})", list()));
    }
    if let Some(i) = names.iter().position(|n| n == "spam") {
        return Ok(i);
    }
    let known: Vec<usize> = (0..names.len())
        .filter(|&i| POSITIVE_NAMES.contains(&names[i].to_ascii_lowercase().as_str()))
        .collect();
    match known[..] {
        [i] if names.len() == 2 => Ok(i),
        _ => Err(format!(
            "cannot tell which label folder is positive among {}: name it with --positive NAME",
            list()
        )),
    }
}

/// Load the corpus under `root`; also returns the name of the positive
/// label folder.
pub fn load(
    root: &Path,
    opts: &LoadOptions,
    report: &mut LoadReport,
) -> Result<(RawData, String), DataError> {
    if !root.is_dir() {
        return Err(not_format(root, "not a directory of label folders"));
    }
    let labels: Vec<PathBuf> = sorted_entries(root)?
        .into_iter()
        .filter(|p| p.is_dir())
        .collect();
    if labels.len() < 2 {
        return Err(not_format(
            root,
            format!("needs at least 2 label folders, found {}", labels.len()),
        ));
    }
    let name = |p: &PathBuf| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let names: Vec<String> = labels.iter().map(name).collect();
    let positive =
        positive_folder(&names, opts.positive.as_deref()).map_err(|why| not_format(root, why))?;
    let mut files = Vec::new();
    for (i, dir) in labels.iter().enumerate() {
        for f in sorted_entries(dir)? {
            if f.is_file() {
                files.push((f, i == positive));
            }
        }
    }
    let bar = crate::progress::count(files.len() as u64, "reading documents", opts.progress);
    let mut raw = RawData::new(vec!["token".into(), "bigram".into()], false);
    let mut parsed = 0;
    let mut feats: Vec<(u64, f32)> = Vec::new();
    for (n, (file, pos)) in files.iter().enumerate() {
        bar.inc(1);
        report.lines += 1;
        let bytes = std::fs::read(file).map_err(|error| DataError::Io {
            path: file.clone(),
            error,
        })?;
        if let Err(why) = document_features(&bytes, opts.body_only, &mut feats) {
            report.malformed(file, 0, why, opts.strict)?;
            continue;
        }
        raw.push(&feats, f32::from(u8::from(*pos)), n as i64);
        parsed += 1;
    }
    bar.finish_and_clear();
    if parsed == 0 {
        return Err(not_format(root, "no document with tokens"));
    }
    Ok((raw, names[positive].clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_skips_the_header_block() {
        assert_eq!(
            body(b"From: a\nSubject: b\n\nhello\n\nworld"),
            b"hello\n\nworld"
        );
        assert_eq!(body(b"A: b\r\n\r\nx"), b"x");
        assert_eq!(body(b"no blank line"), b"no blank line");
    }

    #[test]
    fn the_positive_folder_is_named_or_decided_or_an_error() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(positive_folder(&names(&["0", "1"]), None), Ok(1));
        assert_eq!(positive_folder(&names(&["ham", "spam"]), None), Ok(1));
        assert_eq!(positive_folder(&names(&["neg", "pos"]), None), Ok(1));
        assert_eq!(positive_folder(&names(&["0", "1"]), Some("0")), Ok(0));
        assert!(positive_folder(&names(&["a", "b"]), None).is_err());
        assert!(positive_folder(&names(&["0", "1", "2"]), None).is_err());
        assert!(positive_folder(&names(&["a", "b"]), Some("c")).is_err());
    }

    #[test]
    fn tokenizer_splits_on_non_alphanumerics_and_drops_short_tokens() {
        let t = tokens(b"hello, world! a b2 x_y 123");
        assert_eq!(t, vec![&b"hello"[..], b"world", b"b2", b"123"]);
    }
}
