//! A folder-per-label text corpus: `ROOT/<label>/<file>`, one document per file.
//!
//! The positive label is the folder named by `--positive` (default `spam`;
//! when no folder has that name and there are exactly two folders, the second
//! in sorted order). Other folders are negative. A document's features are
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
pub(crate) const MAX_TOKENS: usize = 1000;

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
pub(crate) fn tokens(bytes: &[u8]) -> Vec<&[u8]> {
    bytes
        .split(|b| !b.is_ascii_alphanumeric())
        .filter(|t| (2..=30).contains(&t.len()))
        .take(MAX_TOKENS)
        .collect()
}

/// The part of a message after its header block (the first empty line),
/// or the whole message when it has no empty line.
pub(crate) fn body(bytes: &[u8]) -> &[u8] {
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
pub(super) fn document_features(
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

/// Load the corpus under `root`.
pub(crate) fn load(
    root: &Path,
    opts: &LoadOptions,
    report: &mut LoadReport,
) -> Result<RawData, DataError> {
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
    let wanted = opts.positive.clone().unwrap_or_else(|| "spam".into());
    let positive = match labels.iter().position(|p| name(p) == wanted) {
        Some(i) => i,
        None if opts.positive.is_none() && labels.len() == 2 => 1,
        None => {
            return Err(not_format(
                root,
                format!("no label folder named `{wanted}` (use --positive NAME)"),
            ));
        }
    };
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
    Ok(raw)
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
    fn tokenizer_splits_on_non_alphanumerics_and_drops_short_tokens() {
        let t = tokens(b"hello, world! a b2 x_y 123");
        assert_eq!(t, vec![&b"hello"[..], b"world", b"b2", b"123"]);
    }
}
