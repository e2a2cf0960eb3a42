//! Criteo display-advertising TSV: `label \t I1..I13 \t C1..C26` (40 columns).
//!
//! The label is `0` or `1`; integer columns are empty or an integer (a
//! count, possibly negative); categorical columns are empty or a token
//! (hexadecimal hashes in the real data). Empty means missing and adds no
//! feature. Integers become categorical features by the usual log-binning of
//! the Criteo winners: `v ≤ 2 → v`, else `⌊ln(v)²⌋`. The file order is the
//! time order (the real files are time-ordered), so the split keeps it.

use super::{
    DataError, Format, LoadOptions, LoadReport, RawData, excerpt, for_each_line, is_blank,
};
use crate::hashing::{feature_key, feature_key_u64};
use rayon::prelude::*;
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

/// Lines read before a block is parsed: a few MB of text, so the block's
/// parse is long enough to split over the pool and its buffers stay small.
const BLOCK_LINES: usize = 16_384;

/// Lines per parallel task of a block's parse.
const LINES_PER_TASK: usize = 1024;

/// Load a Criteo TSV file.
///
/// Lines are read in blocks of 16 384 (`BLOCK_LINES`); a block is parsed (split,
/// integer log-bins, feature hashes) over the current rayon pool's threads
/// (`--threads`) in tasks of 1024 (`LINES_PER_TASK`) lines, then its examples are
/// appended in line order on this thread. Every line goes through the same
/// `parse` and is appended in file order, so the data, the report and the
/// first error (`--strict`) are those of a line-by-line read at any thread
/// count (`tests::a_blocked_load_is_the_line_by_line_load_at_1_2_and_3_threads`).
pub fn load(
    path: &Path,
    opts: &LoadOptions,
    report: &mut LoadReport,
) -> Result<RawData, DataError> {
    load_blocked(path, opts, report, BLOCK_LINES, LINES_PER_TASK)
}

/// The column names: `I1..I13`, `C1..C26`.
fn field_names() -> Vec<String> {
    (1..=INTS)
        .map(|i| format!("I{i}"))
        .chain((1..=CATS).map(|c| format!("C{c}")))
        .collect()
}

/// One line's parse, kept until its block is appended in order.
enum Line {
    /// Blank: skipped, counted.
    Blank,
    /// An example: its label and the end of its features in the task's list.
    Example(f32, usize),
    /// Malformed: why.
    Bad(String),
}

/// One task's share of a block: the parsed lines and their features back
/// to back (reused from block to block).
#[derive(Default)]
struct Task {
    lines: Vec<Line>,
    feats: Vec<(u64, f32)>,
    /// One line's features ([`parse`]'s buffer).
    line_feats: Vec<(u64, f32)>,
}

/// [`load`] with the block and task sizes as arguments (small ones in tests).
fn load_blocked(
    path: &Path,
    opts: &LoadOptions,
    report: &mut LoadReport,
    block_lines: usize,
    lines_per_task: usize,
) -> Result<RawData, DataError> {
    let mut raw = RawData::new(field_names(), true);
    // The block: its bytes, and each line's number and byte range.
    let mut bytes: Vec<u8> = Vec::new();
    let mut lines: Vec<(usize, usize, usize)> = Vec::with_capacity(block_lines);
    let mut tasks: Vec<Task> = Vec::new();
    let (mut parsed, mut bad) = (0, 0);
    let first_bad = report.malformed.len();
    let mut flush = |bytes: &mut Vec<u8>,
                     lines: &mut Vec<(usize, usize, usize)>,
                     report: &mut LoadReport|
     -> Result<(), DataError> {
        let n_tasks = lines.len().div_ceil(lines_per_task);
        if tasks.len() < n_tasks {
            tasks.resize_with(n_tasks, Task::default);
        }
        let text = bytes.as_slice();
        lines
            .par_chunks(lines_per_task)
            .zip(tasks.par_iter_mut())
            .for_each(|(ls, task)| {
                task.lines.clear();
                task.feats.clear();
                for &(_, a, b) in ls {
                    let line = &text[a..b];
                    task.lines.push(if is_blank(line) {
                        Line::Blank
                    } else {
                        match parse(line, &mut task.line_feats) {
                            Ok(label) => {
                                task.feats.extend_from_slice(&task.line_feats);
                                Line::Example(label, task.feats.len())
                            }
                            Err(why) => Line::Bad(why),
                        }
                    });
                }
            });
        // Appended in line order: the line-by-line read's data and report.
        for (ls, task) in lines.chunks(lines_per_task).zip(&mut tasks) {
            let mut from = 0;
            for (&(n, a, b), line) in ls.iter().zip(task.lines.drain(..)) {
                match line {
                    Line::Blank => report.blank += 1,
                    Line::Example(label, end) => {
                        raw.push(&task.feats[from..end], label, n as i64);
                        from = end;
                        parsed += 1;
                    }
                    Line::Bad(why) => {
                        bad += 1;
                        let why = format!("{why}: {}", excerpt(&text[a..b]));
                        report.malformed(path, n, why, opts.strict)?;
                    }
                }
            }
        }
        bytes.clear();
        lines.clear();
        Ok(())
    };
    let n_lines = for_each_line(path, opts.progress, |n, line| {
        let a = bytes.len();
        bytes.extend_from_slice(line);
        lines.push((n, a, bytes.len()));
        if lines.len() == block_lines {
            flush(&mut bytes, &mut lines, report)?;
        }
        Ok(())
    })?;
    flush(&mut bytes, &mut lines, report)?;
    report.lines += n_lines;
    LoadReport::check_format(
        path,
        Format::Criteo,
        parsed,
        bad,
        report.malformed.get(first_bad),
    )?;
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
    use crate::{LineOutcome, load_lines, push_example};

    /// The obviously-correct reference: line by line, on this thread.
    fn load_line_by_line(
        path: &Path,
        opts: &LoadOptions,
        report: &mut LoadReport,
    ) -> Result<RawData, DataError> {
        let mut raw = RawData::new(field_names(), true);
        let mut feats = Vec::new();
        load_lines(path, Format::Criteo, opts, report, |n, line| {
            if is_blank(line) {
                return Ok(LineOutcome::Blank);
            }
            let label = parse(line, &mut feats);
            Ok(push_example(&mut raw, &feats, n, line, label))
        })?;
        Ok(raw)
    }

    fn options(strict: bool) -> LoadOptions {
        LoadOptions {
            format: Format::Criteo,
            path: None,
            strict,
            valid_frac: 0.1,
            test_frac: 0.1,
            split_seed: 0,
            synthetic: Default::default(),
            criteo_synth: Default::default(),
            positive: None,
            body_only: false,
            progress: false,
        }
    }

    /// 1000 lines: examples with missing, negative and large counts and
    /// random tokens, blank lines, and malformed lines of several kinds.
    fn file(seed: u64) -> std::path::PathBuf {
        let mut x = seed;
        let mut next = move |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        let mut text = String::new();
        for _ in 0..1000 {
            match next(40) {
                0 => text.push_str("  \r\n"),
                1 => text.push_str("1\t2\t3\n"),
                2 => text.push_str(&format!("7{}{}\n", "\t1".repeat(13), "\ta".repeat(26))),
                3 => text.push_str(&format!("1\tx{}{}\n", "\t5".repeat(12), "\tb".repeat(26))),
                _ => {
                    text.push_str(if next(2) == 0 { "0" } else { "1" });
                    for _ in 0..INTS {
                        match next(4) {
                            0 => text.push('\t'),
                            1 => text.push_str(&format!("\t-{}", next(3))),
                            _ => text.push_str(&format!("\t{}", next(5000))),
                        }
                    }
                    for _ in 0..CATS {
                        match next(5) {
                            0 => text.push('\t'),
                            _ => text.push_str(&format!("\t{:x}", next(300))),
                        }
                    }
                    text.push('\n');
                }
            }
        }
        let path = std::env::temp_dir().join(format!("basis-criteo-blocks-{seed}.tsv"));
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_blocked_load_is_the_line_by_line_load_at_1_2_and_3_threads() {
        for seed in [1, 2] {
            let path = file(seed);
            for strict in [false, true] {
                let opts = options(strict);
                let mut want_report = LoadReport::default();
                let want = load_line_by_line(&path, &opts, &mut want_report);
                let want = format!("{want:?} {want_report:?}");
                if !strict {
                    // The check can fail: examples and malformed lines exist.
                    assert!(want.contains("malformed_count: "), "{want:.200}");
                    assert!(!want.contains("malformed_count: 0,"));
                    assert!(want.len() > 100_000);
                }
                for threads in [1, 2, 3] {
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .build()
                        .unwrap();
                    for (block, task) in [(BLOCK_LINES, LINES_PER_TASK), (37, 5), (1, 1)] {
                        let mut report = LoadReport::default();
                        let got =
                            pool.install(|| load_blocked(&path, &opts, &mut report, block, task));
                        let got = format!("{got:?} {report:?}");
                        assert!(
                            got == want,
                            "seed {seed} strict {strict} threads {threads} block {block}/{task}"
                        );
                    }
                }
            }
            std::fs::remove_file(&path).unwrap();
        }
    }

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
