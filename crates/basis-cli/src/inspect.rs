//! `basis inspect`: bucket-load statistics of a data set under 1..=d hash choices.

use crate::cli::InspectArgs;
use crate::compare::{describe, write_text};
use balanced_hash::{Bucketer, DChoice, LoadStats, OneChoice};
use core::fmt::Write as _;
use serde::Serialize;

/// Loads under one strategy.
#[derive(Debug, Serialize)]
struct Strategy {
    choices: u8,
    /// Distinct rows per bucket.
    rows: Stats,
    /// Training occurrences per bucket (frequency-weighted load).
    occurrences: Stats,
    /// Expected maximum distinct-row load from the balls-into-bins formulas.
    expected_max_rows: f64,
    /// Bytes the bucketer remembers.
    bucket_map_bytes: usize,
}

#[derive(Debug, Serialize)]
struct Stats {
    max: u64,
    mean: f64,
    min: u64,
    max_over_mean: f64,
    empty_buckets: u64,
    chi_square: f64,
}

impl Stats {
    fn of(loads: &[u64]) -> Result<Self, String> {
        let s = LoadStats::from_loads(loads).map_err(|e| e.to_string())?;
        Ok(Self {
            max: s.max,
            mean: s.mean,
            min: s.min,
            max_over_mean: s.max_over_mean,
            empty_buckets: s.empty_buckets,
            chi_square: s.chi_square,
        })
    }
}

#[derive(Debug, Serialize)]
struct Report {
    data: crate::compare::DataInfo,
    buckets: u32,
    rows_per_bucket: f64,
    strategies: Vec<Strategy>,
}

/// Loads of every row (assigned in row order, hottest rows first is not assumed).
fn loads<B: Bucketer>(b: &mut B, counts: &[u32]) -> (Vec<u64>, Vec<u64>) {
    let n = b.buckets() as usize;
    let (mut rows, mut occ) = (vec![0u64; n], vec![0u64; n]);
    for (row, &c) in counts.iter().enumerate() {
        let k = b.assign(row as u64) as usize;
        rows[k] += 1;
        occ[k] += u64::from(c);
    }
    (rows, occ)
}

/// `basis inspect`.
pub(crate) fn run(args: &InspectArgs, progress: bool) -> Result<(), String> {
    if let Some(path) = args
        .json
        .as_deref()
        .filter(|p| *p != std::path::Path::new("-"))
    {
        crate::validate::writable_file("--json", path)?;
    }
    let ds = crate::data::load(&args.data.options(progress)).map_err(|e| e.to_string())?;
    if !(args.ratio.is_finite() && args.ratio >= 1.0) {
        return Err("--ratio must be >= 1".into());
    }
    if !(1..=4).contains(&args.choices) {
        return Err("--choices must be 1 to 4".into());
    }
    let b = args
        .buckets
        .unwrap_or_else(|| ((ds.rows as f64 / args.ratio).ceil() as u32).max(1));
    if b == 0 {
        return Err("--buckets must be >= 1".into());
    }
    let n = ds.rows as f64;
    let alpha = n / f64::from(b);
    let ln_b = f64::from(b).ln().max(1e-9);
    let mut strategies = Vec::new();
    for d in 1..=args.choices {
        let seed = 0xB0C4_E75E;
        let (rows, occ, mem) = if d == 1 {
            let mut h = OneChoice::new(b, seed).map_err(|e| e.to_string())?;
            let (r, o) = loads(&mut h, &ds.row_counts);
            (r, o, h.memory_bytes())
        } else {
            let mut h = DChoice::dense(ds.rows as u64, b, d, seed).map_err(|e| e.to_string())?;
            let (r, o) = loads(&mut h, &ds.row_counts);
            (r, o, h.memory_bytes())
        };
        let expected = if d == 1 {
            alpha + (2.0 * alpha * ln_b).sqrt()
        } else {
            alpha + ln_b.ln().max(0.0) / f64::from(d).ln()
        };
        strategies.push(Strategy {
            choices: d,
            rows: Stats::of(&rows)?,
            occurrences: Stats::of(&occ)?,
            expected_max_rows: expected,
            bucket_map_bytes: mem,
        });
    }
    let report = Report {
        data: crate::compare::DataInfo::of(&ds),
        buckets: b,
        rows_per_bucket: alpha,
        strategies,
    };
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        write_text(path, &text)?;
        if path.as_os_str() == "-" {
            return Ok(());
        }
    }
    let mut s = describe(&ds);
    let _ = writeln!(s, "buckets B = {b}, rows per bucket N/B = {alpha:.2}\n");
    s.push_str(
        "| choices | rows/bucket max | mean | max/mean | expected max | empty | chi² (B−1 = ",
    );
    let _ = write!(s, "{}", b.saturating_sub(1));
    s.push_str(") | occurrences/bucket max/mean | remembered bytes |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for st in &report.strategies {
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {:.3} | {:.1} | {} | {:.1} | {:.3} | {} |",
            st.choices,
            st.rows.max,
            st.rows.mean,
            st.rows.max_over_mean,
            st.expected_max_rows,
            st.rows.empty_buckets,
            st.rows.chi_square,
            st.occurrences.max_over_mean,
            st.bucket_map_bytes
        );
    }
    print!("{s}");
    Ok(())
}
