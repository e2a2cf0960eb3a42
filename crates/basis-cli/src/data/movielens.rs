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
    DataError, Format, LoadOptions, LoadReport, RawData, excerpt, for_each_line, is_blank,
};
use crate::hashing::{KeyMap, feature_key};
use std::path::{Path, PathBuf};

/// Load MovieLens ratings from a file or directory.
pub(crate) fn load(
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

fn load_udata(
    path: &Path,
    opts: &LoadOptions,
    report: &mut LoadReport,
) -> Result<RawData, DataError> {
    let mut raw = RawData::new(vec!["user".into(), "item".into()], true);
    let (mut parsed, mut bad) = (0, 0);
    let first_bad = report.malformed.len();
    let lines = for_each_line(path, opts.progress, |n, line| {
        if is_blank(line) {
            report.blank += 1;
            return Ok(());
        }
        let text = String::from_utf8_lossy(line);
        let cols: Vec<&str> = text.split_whitespace().collect();
        let why = if cols.len() != 4 {
            Some(format!(
                "expected 4 columns (user item rating timestamp), found {}: {}",
                cols.len(),
                excerpt(line)
            ))
        } else {
            match (parse_rating(cols[2]), parse_time(cols[3])) {
                (Some(r), Some(t)) => {
                    let feats = [
                        (feature_key(0, cols[0].as_bytes()), 1.0),
                        (feature_key(1, cols[1].as_bytes()), 1.0),
                    ];
                    raw.push(&feats, f32::from(u8::from(r >= 4.0)), t);
                    parsed += 1;
                    None
                }
                (None, _) => Some(format!("rating `{}` is not a number", cols[2])),
                (_, None) => Some(format!("timestamp `{}` is not a number", cols[3])),
            }
        };
        if let Some(why) = why {
            bad += 1;
            report.malformed(path, n, why, opts.strict)?;
        }
        Ok(())
    })?;
    report.lines += lines;
    LoadReport::check_format(
        path,
        Format::Movielens,
        parsed,
        bad,
        report.malformed.get(first_bad),
    )?;
    Ok(raw)
}

/// A parsed RecBole header: column names and types.
struct Header {
    cols: Vec<(String, String)>,
}

impl Header {
    fn parse(path: &Path, line: &[u8]) -> Result<Self, DataError> {
        let text = String::from_utf8_lossy(line);
        let mut cols = Vec::new();
        for c in text.split('\t') {
            let Some((name, ty)) = c.trim().split_once(':') else {
                return Err(DataError::NotFormat {
                    path: path.to_path_buf(),
                    format: Format::Movielens,
                    line: 1,
                    reason: format!("header column `{c}` is not `name:type`"),
                });
            };
            cols.push((name.to_string(), ty.to_string()));
        }
        Ok(Self { cols })
    }

    fn index(&self, path: &Path, name: &str) -> Result<usize, DataError> {
        self.cols
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| DataError::NotFormat {
                path: path.to_path_buf(),
                format: Format::Movielens,
                line: 1,
                reason: format!("header has no `{name}` column"),
            })
    }
}

/// Side features of users or items: id → feature keys.
type Side = KeyMap<Vec<u64>>;

/// A side file's header, its id column, and the feature columns used:
/// `(column, field index, is a token sequence)`.
type SideHeader = (Header, usize, Vec<(usize, u32, bool)>);

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
    let mut header: Option<SideHeader> = None;
    let (mut parsed, mut bad) = (0, 0);
    let first_bad = report.malformed.len();
    let lines = for_each_line(path, opts.progress, |n, line| {
        if header.is_none() {
            let h = Header::parse(path, line)?;
            let id = h.index(path, id_col)?;
            let mut used = Vec::new();
            for (i, (name, ty)) in h.cols.iter().enumerate() {
                if i != id && (ty == "token" || ty == "token_seq") {
                    used.push((i, field0 + used.len() as u32, ty == "token_seq"));
                    fields.push(name.clone());
                }
            }
            header = Some((h, id, used));
            return Ok(());
        }
        if is_blank(line) {
            report.blank += 1;
            return Ok(());
        }
        let Some((h, id, used)) = header.as_ref() else {
            return Ok(());
        };
        let text = String::from_utf8_lossy(line);
        let cols: Vec<&str> = text.split('\t').collect();
        if cols.len() != h.cols.len() {
            bad += 1;
            let why = format!(
                "expected {} tab-separated columns, found {}",
                h.cols.len(),
                cols.len()
            );
            return report.malformed(path, n, why, opts.strict);
        }
        let mut keys = Vec::new();
        for &(i, field, seq) in used {
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
        side.insert(feature_key(0, cols[*id].trim().as_bytes()), keys);
        parsed += 1;
        Ok(())
    })?;
    report.lines += lines;
    LoadReport::check_format(
        path,
        Format::Movielens,
        parsed,
        bad,
        report.malformed.get(first_bad),
    )?;
    Ok(side)
}

fn load_recbole(
    path: &Path,
    opts: &LoadOptions,
    report: &mut LoadReport,
) -> Result<RawData, DataError> {
    let mut fields = vec!["user_id".to_string(), "item_id".to_string()];
    let stem = path.with_extension("");
    let user_path = stem.with_extension("user");
    let item_path = stem.with_extension("item");
    let users = if user_path.is_file() {
        let f0 = fields.len() as u32;
        Some(load_side(
            &user_path,
            "user_id",
            f0,
            &mut fields,
            opts,
            report,
        )?)
    } else {
        None
    };
    let items = if item_path.is_file() {
        let f0 = fields.len() as u32;
        Some(load_side(
            &item_path,
            "item_id",
            f0,
            &mut fields,
            opts,
            report,
        )?)
    } else {
        None
    };
    let mut raw = RawData::new(fields, true);
    let mut cols_idx: Option<(usize, [usize; 4])> = None;
    let (mut parsed, mut bad) = (0, 0);
    let first_bad = report.malformed.len();
    let mut feats: Vec<(u64, f32)> = Vec::new();
    let lines = for_each_line(path, opts.progress, |n, line| {
        let Some((width, [u, i, r, t])) = cols_idx else {
            let h = Header::parse(path, line)?;
            let idx = [
                h.index(path, "user_id")?,
                h.index(path, "item_id")?,
                h.index(path, "rating")?,
                h.index(path, "timestamp")?,
            ];
            cols_idx = Some((h.cols.len(), idx));
            return Ok(());
        };
        if is_blank(line) {
            report.blank += 1;
            return Ok(());
        }
        let text = String::from_utf8_lossy(line);
        let cols: Vec<&str> = text.split('\t').map(str::trim).collect();
        let why = if cols.len() != width {
            Some(format!(
                "expected {width} tab-separated columns, found {}: {}",
                cols.len(),
                excerpt(line)
            ))
        } else {
            match (parse_rating(cols[r]), parse_time(cols[t])) {
                (Some(rating), Some(time)) => {
                    let uk = feature_key(0, cols[u].as_bytes());
                    let ik = feature_key(0, cols[i].as_bytes());
                    feats.clear();
                    feats.push((uk, 1.0));
                    feats.push((feature_key(1, cols[i].as_bytes()), 1.0));
                    for side in [
                        users.as_ref().and_then(|s| s.get(&uk)),
                        items.as_ref().and_then(|s| s.get(&ik)),
                    ]
                    .into_iter()
                    .flatten()
                    {
                        feats.extend(side.iter().map(|&k| (k, 1.0)));
                    }
                    raw.push(&feats, f32::from(u8::from(rating >= 4.0)), time);
                    parsed += 1;
                    None
                }
                (None, _) => Some(format!("rating `{}` is not a number", cols[r])),
                (_, None) => Some(format!("timestamp `{}` is not a number", cols[t])),
            }
        };
        if let Some(why) = why {
            bad += 1;
            report.malformed(path, n, why, opts.strict)?;
        }
        Ok(())
    })?;
    report.lines += lines;
    LoadReport::check_format(
        path,
        Format::Movielens,
        parsed,
        bad,
        report.malformed.get(first_bad),
    )?;
    Ok(raw)
}
