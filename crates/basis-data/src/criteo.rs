//! Criteo display-advertising TSV: `label \t I1..I13 \t C1..C26` (40 columns).
//!
//! The label is `0` or `1`; integer columns are empty or an integer (a
//! count, possibly negative); categorical columns are empty or a token
//! (hexadecimal hashes in the real data). Empty means missing and adds no
//! feature. Integers become categorical features by the usual log-binning of
//! the Criteo winners: `v ≤ 2 → v`, else `⌊ln(v)²⌋`. The file order is the
//! time order (the real files are time-ordered), so the split keeps it.

use super::{
    DataError, Format, LineOutcome, LoadOptions, LoadReport, RawData, is_blank, load_lines,
    push_example,
};
use crate::hashing::{feature_key, feature_key_u64};
use std::path::Path;

/// Integer columns.
const INTS: usize = 13;
/// Categorical columns.
const CATS: usize = 26;

/// The log-bin of an integer feature.
pub(crate) fn int_bin(v: i64) -> i64 {
    if v <= 2 {
        v
    } else {
        let l = (v as f64).ln();
        (l * l).floor() as i64
    }
}

/// Load a Criteo TSV file.
pub fn load(
    path: &Path,
    opts: &LoadOptions,
    report: &mut LoadReport,
) -> Result<RawData, DataError> {
    let fields = (1..=INTS)
        .map(|i| format!("I{i}"))
        .chain((1..=CATS).map(|c| format!("C{c}")))
        .collect();
    let mut raw = RawData::new(fields, true);
    let mut feats: Vec<(u64, f32)> = Vec::with_capacity(INTS + CATS);
    load_lines(path, Format::Criteo, opts, report, |n, line| {
        if is_blank(line) {
            return Ok(LineOutcome::Blank);
        }
        let label = parse(line, &mut feats);
        Ok(push_example(&mut raw, &feats, n, line, label))
    })?;
    Ok(raw)
}

/// Parse one line into features; the label, or why the line is malformed.
pub(crate) fn parse(line: &[u8], feats: &mut Vec<(u64, f32)>) -> Result<f32, String> {
    feats.clear();
    // The columns in a fixed array, not a `Vec` per line: the allocation and
    // free were ~4 % of a whole FM job, all of it on the one loading thread.
    let mut cols: [&[u8]; 1 + INTS + CATS] = [&[]; 1 + INTS + CATS];
    let mut found = 0;
    for c in line.split(|&b| b == b'\t') {
        if let Some(slot) = cols.get_mut(found) {
            *slot = c;
        }
        found += 1;
    }
    if found != 1 + INTS + CATS {
        return Err(format!("expected 40 tab-separated columns, found {found}"));
    }
    let label = match cols[0] {
        b"0" => 0.0,
        b"1" => 1.0,
        other => {
            return Err(format!("label `{}` is not 0 or 1", super::escaped(other)));
        }
    };
    for (i, c) in cols[1..=INTS].iter().enumerate() {
        if c.is_empty() {
            continue;
        }
        let v: i64 = core::str::from_utf8(c)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("I{} `{}` is not an integer", i + 1, super::escaped(c)))?;
        feats.push((feature_key_u64(i as u32, int_bin(v) as u64), 1.0));
    }
    for (j, c) in cols[1 + INTS..].iter().enumerate() {
        if !c.is_empty() {
            feats.push((feature_key((INTS + j) as u32, c), 1.0));
        }
    }
    Ok(label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_bins() {
        assert_eq!(int_bin(-1), -1);
        assert_eq!(int_bin(2), 2);
        assert_eq!(int_bin(3), 1); // ln 3 = 1.0986, squared 1.2
        assert_eq!(int_bin(100), 21); // ln 100 = 4.605, squared 21.2
    }

    #[test]
    fn parse_rejects_bad_lines() {
        let mut f = Vec::new();
        let good = format!("1{}{}", "\t5".repeat(13), "\tab12".repeat(26));
        assert_eq!(parse(good.as_bytes(), &mut f), Ok(1.0));
        assert_eq!(f.len(), 39);
        let missing = format!("0{}{}", "\t".repeat(13), "\t".repeat(26));
        assert_eq!(parse(missing.as_bytes(), &mut f), Ok(0.0));
        assert!(f.is_empty());
        assert!(parse(b"1\t2\t3", &mut f).is_err());
        // One column too many or too few is named with its count.
        let long = format!("{good}\tx");
        assert_eq!(
            parse(long.as_bytes(), &mut f).unwrap_err(),
            "expected 40 tab-separated columns, found 41"
        );
        let short = &good[..good.rfind('\t').unwrap()];
        assert_eq!(
            parse(short.as_bytes(), &mut f).unwrap_err(),
            "expected 40 tab-separated columns, found 39"
        );
        let bad_label = format!("2{}{}", "\t5".repeat(13), "\tab".repeat(26));
        assert!(parse(bad_label.as_bytes(), &mut f).is_err());
        let bad_int = format!("1\tx{}{}", "\t5".repeat(12), "\tab".repeat(26));
        assert!(
            parse(bad_int.as_bytes(), &mut f)
                .unwrap_err()
                .contains("I1")
        );
    }
}
