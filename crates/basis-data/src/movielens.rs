//! MovieLens ratings: `u.data` style and RecBole atomic files.
//!
//! - `u.data` style: four whitespace-separated columns `user item rating
//!   timestamp` per line (MovieLens-100k's `u.data`).
//! - RecBole: an `.inter` file whose first line is a header of `name:type`
//!   columns with at least `user_id`, `item_id`, `rating` and `timestamp`.
//!   Sibling `<stem>.user` and `<stem>.item` files, when present, add their
//!   `token` columns as features (each element of a `token_seq` column is one
//!   feature; `float` columns are not used).
//!
//! `PATH` may be the file, or a directory holding one `.inter` file or a
//! `u.data`. The label is `rating >= 4`; the split is time-ordered.

use super::{
    DataError, Format, LineOutcome, LoadOptions, LoadReport, RawData, excerpt, is_blank, load_lines,
};
use crate::hashing::{KeyMap, feature_key};
use std::path::{Path, PathBuf};

/// Load MovieLens ratings from a file or directory.
pub fn load(
    path: &Path,
    opts: &LoadOptions,
    report: &mut LoadReport,
) -> Result<RawData, DataError> {
    let file = resolve(path)?;
    if file.extension().is_some_and(|e| e == "inter") {
        load_recbole(&file, opts, report)
    } else {
        load_udata(&file, opts, report)
    }
}

/// A directory becomes its `.inter` file or its `u.data`.
fn resolve(path: &Path) -> Result<PathBuf, DataError> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    let io = |error| DataError::Io {
        path: path.to_path_buf(),
        error,
    };
    let mut inter: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(io)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "inter"))
        .collect();
    inter.sort();
    if let Some(p) = inter.into_iter().next() {
        return Ok(p);
    }
    let udata = path.join("u.data");
    if udata.is_file() {
        return Ok(udata);
    }
    Err(DataError::NotFormat {
        path: path.to_path_buf(),
        format: Format::Movielens,
        line: 0,
        reason: "directory holds neither a .inter file nor u.data".into(),
    })
}

fn parse_rating(s: &str) -> Option<f32> {
    s.parse::<f32>().ok().filter(|r| r.is_finite())
}

fn parse_time(s: &str) -> Option<i64> {
    s.parse::<i64>().ok().or_else(|| {
        s.parse::<f64>()
            .ok()
            .filter(|t| t.is_finite())
            .map(|t| t as i64)
    })
}

/// A parsed `u.data` line: the user and item features, the label, the timestamp.
pub(crate) type Udata = ([(u64, f32); 2], f32, i64);

/// Parse one `u.data` line, or say why it is malformed.
pub(crate) fn parse_udata(line: &[u8]) -> Result<Udata, String> {
    let text = String::from_utf8_lossy(line);
    let cols: Vec<&str> = text.split_whitespace().collect();
    if cols.len() != 4 {
        return Err(format!(
            "expected 4 columns (user item rating timestamp), found {}: {}",
            cols.len(),
            excerpt(line)
        ));
    }
    let (rating, time) = rating_and_time(cols[2], cols[3])?;
    let feats = [
        (feature_key(0, cols[0].as_bytes()), 1.0),
        (feature_key(1, cols[1].as_bytes()), 1.0),
    ];
    Ok((feats, rating, time))
}

/// The label (`rating >= 4`) and the timestamp, or why either is not a number.
fn rating_and_time(rating: &str, time: &str) -> Result<(f32, i64), String> {
    match (parse_rating(rating), parse_time(time)) {
        (Some(r), Some(t)) => Ok((f32::from(u8::from(r >= 4.0)), t)),
        (None, _) => Err(format!("rating `{rating}` is not a number")),
        (_, None) => Err(format!("timestamp `{time}` is not a number")),
    }
}

fn load_udata(
    path: &Path,
    opts: &LoadOptions,
    report: &mut LoadReport,
) -> Result<RawData, DataError> {
    let mut raw = RawData::new(vec!["user".into(), "item".into()], true);
    load_lines(path, Format::Movielens, opts, report, |_, line| {
        if is_blank(line) {
            return Ok(LineOutcome::Blank);
        }
        Ok(match parse_udata(line) {
            Ok((feats, label, time)) => {
                raw.push(&feats, label, time);
                LineOutcome::Parsed
            }
            Err(why) => LineOutcome::Malformed(why),
        })
    })?;
    Ok(raw)
}

/// A parsed RecBole header: column names and types.
#[derive(Debug)]
pub(crate) struct Header {
    cols: Vec<(String, String)>,
}

impl Header {
    /// Parse a header line of tab-separated `name:type` columns.
    pub(crate) fn parse(line: &[u8]) -> Result<Self, String> {
        let text = String::from_utf8_lossy(line);
        let mut cols = Vec::new();
        for c in text.split('\t') {
            let Some((name, ty)) = c.trim().split_once(':') else {
                return Err(format!("header column `{c}` is not `name:type`"));
            };
            cols.push((name.to_string(), ty.to_string()));
        }
        Ok(Self { cols })
    }

    fn index(&self, name: &str) -> Result<usize, String> {
        self.cols
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| format!("header has no `{name}` column"))
    }
}

/// A header problem of `path` as a "not in the format" error (line 1).
fn bad_header(path: &Path, reason: String) -> DataError {
    DataError::NotFormat {
        path: path.to_path_buf(),
        format: Format::Movielens,
        line: 1,
        reason,
    }
}

/// Side features of users or items: id → feature keys.
type Side = KeyMap<Vec<u64>>;

/// The columns of a `.user` / `.item` file that are used.
#[derive(Debug)]
pub(crate) struct SideColumns {
    /// Columns a line must have.
    width: usize,
    /// The id column.
    id: usize,
    /// Feature columns: `(column, field index, is a token sequence)`.
    used: Vec<(usize, u32, bool)>,
}

impl SideColumns {
    /// The columns of `header` keyed by `id_col`; the names of the feature
    /// columns are appended to `fields`, the first one is field `field0`.
    pub(crate) fn new(
        header: &Header,
        id_col: &str,
        field0: u32,
        fields: &mut Vec<String>,
    ) -> Result<Self, String> {
        let id = header.index(id_col)?;
        let mut used = Vec::new();
        for (i, (name, ty)) in header.cols.iter().enumerate() {
            if i != id && (ty == "token" || ty == "token_seq") {
                used.push((i, field0 + used.len() as u32, ty == "token_seq"));
                fields.push(name.clone());
            }
        }
        Ok(Self {
            width: header.cols.len(),
            id,
            used,
        })
    }

    /// Parse one line: the id's key and its feature keys.
    pub(crate) fn parse(&self, line: &[u8]) -> Result<(u64, Vec<u64>), String> {
        let text = String::from_utf8_lossy(line);
        let cols: Vec<&str> = text.split('\t').collect();
        if cols.len() != self.width {
            return Err(format!(
                "expected {} tab-separated columns, found {}",
                self.width,
                cols.len()
            ));
        }
        let mut keys = Vec::new();
        for &(i, field, seq) in &self.used {
            let v = cols[i].trim();
            if seq {
                keys.extend(
                    v.split_whitespace()
                        .map(|t| feature_key(field, t.as_bytes())),
                );
            } else if !v.is_empty() {
                keys.push(feature_key(field, v.as_bytes()));
            }
        }
        Ok((feature_key(0, cols[self.id].trim().as_bytes()), keys))
    }
}

/// Read a `.user` / `.item` file: the id column and its token features.
/// `field0` is the field index of the first feature column.
fn load_side(
    path: &Path,
    id_col: &str,
    field0: u32,
    fields: &mut Vec<String>,
    opts: &LoadOptions,
    report: &mut LoadReport,
) -> Result<Side, DataError> {
    let mut side = Side::default();
    let mut columns: Option<SideColumns> = None;
    load_lines(path, Format::Movielens, opts, report, |_, line| {
        let Some(c) = columns.as_ref() else {
            let h = Header::parse(line).map_err(|r| bad_header(path, r))?;
            let c =
                SideColumns::new(&h, id_col, field0, fields).map_err(|r| bad_header(path, r))?;
            columns = Some(c);
            return Ok(LineOutcome::Header);
        };
        if is_blank(line) {
            return Ok(LineOutcome::Blank);
        }
        Ok(match c.parse(line) {
            Ok((id, keys)) => {
                side.insert(id, keys);
                LineOutcome::Parsed
            }
            Err(why) => LineOutcome::Malformed(why),
        })
    })?;
    Ok(side)
}

/// One parsed `.inter` line.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Interaction {
    /// The user's key (field 0; also the key of its side features).
    pub(crate) user: u64,
    /// The item's key in field 0 (the key of its side features).
    pub(crate) item_id: u64,
    /// The item's feature key (field 1).
    pub(crate) item: u64,
    /// `rating >= 4`.
    pub(crate) label: f32,
    /// The timestamp.
    pub(crate) time: i64,
}

/// The columns of an `.inter` file: the width and `user_id`, `item_id`,
/// `rating`, `timestamp`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InterColumns {
    width: usize,
    idx: [usize; 4],
}

impl InterColumns {
    /// The columns named in `header`, or which one is missing.
    pub(crate) fn new(header: &Header) -> Result<Self, String> {
        Ok(Self {
            width: header.cols.len(),
            idx: [
                header.index("user_id")?,
                header.index("item_id")?,
                header.index("rating")?,
                header.index("timestamp")?,
            ],
        })
    }

    /// Parse one line, or say why it is malformed.
    pub(crate) fn parse(&self, line: &[u8]) -> Result<Interaction, String> {
        let [u, i, r, t] = self.idx;
        let text = String::from_utf8_lossy(line);
        let cols: Vec<&str> = text.split('\t').map(str::trim).collect();
        if cols.len() != self.width {
            return Err(format!(
                "expected {} tab-separated columns, found {}: {}",
                self.width,
                cols.len(),
                excerpt(line)
            ));
        }
        let (label, time) = rating_and_time(cols[r], cols[t])?;
        Ok(Interaction {
            user: feature_key(0, cols[u].as_bytes()),
            item_id: feature_key(0, cols[i].as_bytes()),
            item: feature_key(1, cols[i].as_bytes()),
            label,
            time,
        })
    }
}

fn load_recbole(
    path: &Path,
    opts: &LoadOptions,
    report: &mut LoadReport,
) -> Result<RawData, DataError> {
    let mut fields = vec!["user_id".to_string(), "item_id".to_string()];
    let stem = path.with_extension("");
    let mut side = |ext: &str, id_col: &str, fields: &mut Vec<String>| {
        let side_path = stem.with_extension(ext);
        if !side_path.is_file() {
            return Ok(None);
        }
        let f0 = fields.len() as u32;
        load_side(&side_path, id_col, f0, fields, opts, report).map(Some)
    };
    let users = side("user", "user_id", &mut fields)?;
    let items = side("item", "item_id", &mut fields)?;
    let mut raw = RawData::new(fields, true);
    let mut columns: Option<InterColumns> = None;
    let mut feats: Vec<(u64, f32)> = Vec::new();
    load_lines(path, Format::Movielens, opts, report, |_, line| {
        let Some(c) = columns else {
            let h = Header::parse(line).map_err(|r| bad_header(path, r))?;
            columns = Some(InterColumns::new(&h).map_err(|r| bad_header(path, r))?);
            return Ok(LineOutcome::Header);
        };
        if is_blank(line) {
            return Ok(LineOutcome::Blank);
        }
        let x = match c.parse(line) {
            Ok(x) => x,
            Err(why) => return Ok(LineOutcome::Malformed(why)),
        };
        feats.clear();
        feats.push((x.user, 1.0));
        feats.push((x.item, 1.0));
        for side in [
            users.as_ref().and_then(|s| s.get(&x.user)),
            items.as_ref().and_then(|s| s.get(&x.item_id)),
        ]
        .into_iter()
        .flatten()
        {
            feats.extend(side.iter().map(|&k| (k, 1.0)));
        }
        raw.push(&feats, x.label, x.time);
        Ok(LineOutcome::Parsed)
    })?;
    Ok(raw)
}
