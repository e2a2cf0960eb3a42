//! The real-data parsers one record at a time, public so they can be fuzzed
//! and reused: the very functions `basis` runs on every line it loads.
//!
//! Each function takes raw bytes (one line without its line ending, or a
//! whole small file where the format needs its header) and returns the
//! parsed [`Record`]s or a [`LineError`] saying why the input is malformed.
//! None of them panics, whatever the bytes. Feature keys are the CLI's
//! hashed `(field, token)` keys; see `docs/DATA.md` for each format.
//!
//! ```
//! use basis_data::lines;
//! let r = lines::libsvm(b"+1 3:0.5 10:1 # comment").unwrap();
//! assert_eq!((r.label, r.features.len()), (1.0, 2));
//! let e = lines::libsvm(b"1 3:nan").unwrap_err();
//! assert!(e.reason().contains("not a finite number"));
//! ```

use super::movielens::{Header, InterColumns, SideColumns};
use super::{criteo, is_blank, libsvm, movielens, text};
use core::fmt;

/// One parsed example.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// `(feature key, value)` pairs.
    pub features: Vec<(u64, f32)>,
    /// The label, `0.0` or `1.0`.
    pub label: f32,
    /// The timestamp, for formats that have one.
    pub time: Option<i64>,
}

/// Why an input is malformed (the same reason `basis` reports for the line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// 1-based line within the input for the multi-line parsers; 0 otherwise.
    line: usize,
    reason: String,
}

impl LineError {
    fn new(reason: impl Into<String>) -> Self {
        Self {
            line: 0,
            reason: reason.into(),
        }
    }

    fn at(line: usize) -> impl Fn(String) -> Self {
        move |reason| Self { line, reason }
    }

    /// What is wrong.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The 1-based line of a multi-line input ([`recbole_inter`],
    /// [`recbole_side`]); 0 for the single-line parsers.
    pub fn line(&self) -> usize {
        self.line
    }
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "line {}: {}", self.line, self.reason)
        } else {
            f.write_str(&self.reason)
        }
    }
}

impl core::error::Error for LineError {}

/// Parse one Criteo TSV line (label, 13 integer and 26 categorical columns).
///
/// # Errors
/// When the line does not have 40 tab-separated columns, the label is not
/// `0`/`1`, or an integer column is not an integer.
pub fn criteo(line: &[u8]) -> Result<Record, LineError> {
    let mut features = Vec::new();
    let label = criteo::parse(line, &mut features).map_err(LineError::new)?;
    Ok(Record {
        features,
        label,
        time: None,
    })
}

/// Parse one libsvm line (`label index:value ... [# comment]`).
///
/// # Errors
/// When the line is blank (after its comment), the label is not a number, a
/// feature is not `index:value`, an index is not a non-negative integer or a
/// value is not finite, or the line is not UTF-8.
pub fn libsvm(line: &[u8]) -> Result<Record, LineError> {
    let line = libsvm::strip_comment(line);
    if is_blank(line) {
        return Err(LineError::new("blank line"));
    }
    let mut features = Vec::new();
    let label = libsvm::parse(line, &mut features).map_err(LineError::new)?;
    Ok(Record {
        features,
        label,
        time: None,
    })
}

/// Parse one MovieLens `u.data` line (`user item rating timestamp`); the
/// label is `rating >= 4`.
///
/// # Errors
/// When the line does not have 4 whitespace-separated columns, or the
/// rating or the timestamp is not a number.
pub fn movielens_udata(line: &[u8]) -> Result<Record, LineError> {
    let (features, label, time) = movielens::parse_udata(line).map_err(LineError::new)?;
    Ok(Record {
        features: features.to_vec(),
        label,
        time: Some(time),
    })
}

/// Split `bytes` into lines (`\n` or `\r\n`), numbered from 1.
fn numbered_lines(bytes: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    bytes
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .enumerate()
        .map(|(i, l)| (i + 1, l))
}

/// Parse a RecBole `.inter` file: a `name:type` header with `user_id`,
/// `item_id`, `rating` and `timestamp`, then one interaction a line (blank
/// lines skipped). Side features (`.user` / `.item`) are not joined.
///
/// # Errors
/// On a bad header, or on the first malformed line (numbered in the error).
pub fn recbole_inter(bytes: &[u8]) -> Result<Vec<Record>, LineError> {
    let mut lines = numbered_lines(bytes);
    let (_, header) = lines.next().unwrap_or((1, b""));
    let columns = Header::parse(header)
        .and_then(|h| InterColumns::new(&h))
        .map_err(LineError::at(1))?;
    let mut out = Vec::new();
    for (n, line) in lines.filter(|(_, l)| !is_blank(l)) {
        let x = columns.parse(line).map_err(LineError::at(n))?;
        out.push(Record {
            features: vec![(x.user, 1.0), (x.item, 1.0)],
            label: x.label,
            time: Some(x.time),
        });
    }
    Ok(out)
}

/// Parse a RecBole `.user` / `.item` file keyed by the column `id_col`: the
/// id key and the `token` / `token_seq` feature keys of each line.
///
/// # Errors
/// On a bad header (or no `id_col` column), or on the first line with the
/// wrong number of columns (numbered in the error).
pub fn recbole_side(bytes: &[u8], id_col: &str) -> Result<Vec<(u64, Vec<u64>)>, LineError> {
    let mut lines = numbered_lines(bytes);
    let (_, header) = lines.next().unwrap_or((1, b""));
    let columns = Header::parse(header)
        .and_then(|h| SideColumns::new(&h, id_col, 2, &mut Vec::new()))
        .map_err(LineError::at(1))?;
    lines
        .filter(|(_, l)| !is_blank(l))
        .map(|(n, line)| columns.parse(line).map_err(LineError::at(n)))
        .collect()
}

/// The features of one text document (hashed tokens and bigrams, see the
/// text format); with `body_only` the e-mail header block is skipped.
///
/// # Errors
/// When the document has no token.
pub fn text_document(bytes: &[u8], body_only: bool) -> Result<Vec<(u64, f32)>, LineError> {
    let mut feats = Vec::new();
    text::document_features(bytes, body_only, &mut feats).map_err(LineError::new)?;
    Ok(feats)
}
