//! libsvm / svmlight: `label index:value index:value ... [# comment]`.
//!
//! The label is `1`/`+1` (positive) or `0`/`-1` (negative); a float label
//! counts as positive when `> 0`. Indices are non-negative integers (any
//! base, any order); values are finite floats. Every index is one feature
//! (one table row), weighted by its value. There is no time, so the split is
//! a seeded shuffle. `qid:` tokens are not supported (malformed).

use super::{
    DataError, Format, LineOutcome, LoadOptions, LoadReport, RawData, is_blank, load_lines,
    push_example,
};
use crate::hashing::feature_key_u64;
use std::path::Path;

/// Load a libsvm file.
pub fn load(
    path: &Path,
    opts: &LoadOptions,
    report: &mut LoadReport,
) -> Result<RawData, DataError> {
    let mut raw = RawData::new(vec!["features".into()], false);
    let mut feats = Vec::new();
    load_lines(path, Format::Libsvm, opts, report, |n, line| {
        let line = strip_comment(line);
        if is_blank(line) {
            return Ok(LineOutcome::Blank);
        }
        let label = parse(line, &mut feats);
        Ok(push_example(&mut raw, &feats, n, line, label))
    })?;
    Ok(raw)
}

/// The line without its `# comment`.
pub(crate) fn strip_comment(line: &[u8]) -> &[u8] {
    match line.iter().position(|&b| b == b'#') {
        Some(p) => &line[..p],
        None => line,
    }
}

/// Parse one line (comment stripped); the label, or why the line is malformed.
pub(crate) fn parse(line: &[u8], feats: &mut Vec<(u64, f32)>) -> Result<f32, String> {
    feats.clear();
    let text = core::str::from_utf8(line).map_err(|_| "not UTF-8".to_string())?;
    let mut tokens = text.split_ascii_whitespace();
    let label_tok = tokens.next().ok_or("empty line")?;
    let label: f32 = label_tok
        .parse()
        .ok()
        .filter(|l: &f32| l.is_finite())
        .ok_or_else(|| format!("label `{label_tok}` is not a number"))?;
    for tok in tokens {
        let (i, v) = tok
            .split_once(':')
            .ok_or_else(|| format!("feature `{tok}` is not index:value"))?;
        let index: u64 = i
            .parse()
            .map_err(|_| format!("index `{i}` is not a non-negative integer"))?;
        let value: f32 = v
            .parse()
            .ok()
            .filter(|x: &f32| x.is_finite())
            .ok_or_else(|| format!("value `{v}` is not a finite number"))?;
        feats.push((feature_key_u64(0, index), value));
    }
    Ok(f32::from(u8::from(label > 0.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_features() {
        let mut f = Vec::new();
        assert_eq!(parse(b"+1 3:0.5 10:1", &mut f), Ok(1.0));
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].1, 0.5);
        assert_eq!(parse(b"-1 1:2", &mut f), Ok(0.0));
        assert_eq!(parse(b"0", &mut f), Ok(0.0));
        assert!(f.is_empty());
        assert!(parse(b"x 1:2", &mut f).is_err());
        assert!(parse(b"1 1-2", &mut f).is_err());
        assert!(parse(b"1 a:2", &mut f).is_err());
        assert!(parse(b"1 1:nan", &mut f).is_err());
    }
}
