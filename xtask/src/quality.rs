//! `cargo xtask quality`: the production-like quality benchmark of issue 26
//! (opt-in, never in CI: its runs take minutes to hours).
//!
//! ```text
//! cargo xtask quality [--preset short|medium|headline|ablation] [--only SET,SET]
//!                     [--opts SPEC;SPEC] [--seeds N] [--tune-on mean|first]
//!                     [--tune-lr auto|LR,LR] [--out DIR] [--report]
//! ```
//!
//! For every data set of the preset and every optimizer, one
//! `basis -q compare … --opt SPEC --tune-lr auto --tune-on mean --seeds 3
//! --json CELL.json` (the rate tuned on the validation AUC averaged over the
//! 3 seeds, over the optimizer's own grid, refined around every local
//! maximum of that mean curve; mean ± sd of test AUC; bytes/row of optimizer
//! state). `--tune-on first` tunes on the first seed's validation AUC only
//! (cheaper: a third of the tuning runs), as cells did before 2026-12-04; on
//! MovieLens that choice turned on validation gaps of 0.0001. Each (set,
//! optimizer) cell is its own JSON file under
//! `--out` (default `target/quality/<preset>/`), written by renaming a
//! finished temp file, so a killed run loses only the cell it was in and a
//! re-run skips every cell already there and tuned the same way (delete a
//! file to redo it; a cell tuned on the other `--tune-on` is re-run). Sets
//! whose data is missing (`data/ml-100k`, `data/spam`: `cargo xtask data
//! fetch …`) are skipped with a note. At the end (or with `--report` alone)
//! it writes `tables-<preset>.md` (one Markdown table per set, a summary against
//! the goal) and `<set>.png`, test AUC against bytes/row (log) per set.
//!
//! Presets:
//! - `short` (iteration): the FM/DeepFM sets of docs/RESULTS.md with their
//!   protocol (3 epochs) and the one-pass `criteo-synth --stream` with DeepFM
//!   and DLRM default towers, sharded over 2 ranks, 5·10^4 examples.
//! - `medium`: only the two stream sets, at 10^6 examples (issue 26's grid
//!   between the short preset and the 10^7 headline: about 20× a short
//!   stream run each).
//! - `headline`: the same sets with the stream at 10^7 examples.
//! - `ablation`: issue 26 item 3's diagnosis on the short DeepFM set
//!   (docs/BASIS.md).
//!
//! `--tune-lr` (default `auto`) is passed to every cell; a list of rates
//! (`0.001,0.003`) bounds a cell's CPU on the long stream presets, where
//! `auto`'s 9–12 rates × 3 seeds do not fit a session. A cell's JSON keeps
//! its search, so the tables show which rates were tried.
//!
//! Wall time is not measured here (the runs share the machine); AUCs are
//! deterministic per seed.

use crate::quality_plot::{self, Point};
use crate::util::{self, root};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One data set (and model) of a preset.
struct Set {
    /// File-name-safe key (`--only`).
    key: &'static str,
    /// Heading in the tables.
    title: &'static str,
    /// `basis compare` arguments selecting data and model.
    args: Vec<&'static str>,
    /// A data folder (relative to the workspace) the set needs.
    needs: Option<&'static str>,
}

/// The optimizers every quality preset compares (issue 26 item 1).
const OPTIMIZERS: &[&str] = &[
    "adam",
    "rowwise-adagrad",
    "basis",
    "basis:mode=own",
    "pra",
    "rowstep-adam",
    "ftrl",
    "adam8bit",
    // The diagnosis's candidates (docs/BASIS.md): `own` at N/B 1000 with
    // 1-byte learned scalars, and with frozen scalars (bucket state only),
    "basis:mode=own,storage=u8,ratio=1000",
    "basis:mode=own,ratio=1000,scalar-lr=0",
    // and the smallest change to the default: `rowscaled` with an EMA of g².
    "basis:accumulate=ema",
];

/// The `medium` preset's optimizers: the bar's two references, the default
/// and the accumulations that decide it on the one-pass stream (issue 26).
const STREAM_OPTIMIZERS: &[&str] = &[
    "adam",
    "rowwise-adagrad",
    "basis",
    "basis:accumulate=sum",
    "basis:accumulate=ema,beta=0.999",
    // The count-annealed accumulation (a decayed sum whose memory grows
    // with the row's update count, 2 B/row more; docs/BASIS.md).
    "basis:accumulate=anneal",
    // The EMA below 100 updates of a row, annealed beyond (3.07 B/row;
    // docs/BASIS.md "The EMA annealed once a row is frequent").
    "basis:accumulate=ema-anneal",
];

/// The DeepFM diagnosis (issue 26 item 3): what separates Adam from BASIS.
const ABLATION: &[&str] = &[
    "adam",
    // momentum
    "adam:beta1=0",
    // per-coordinate vs row-wise second moment
    "pra",
    "pra:beta1=0",
    "rowwise-adagrad",
    // per-row bias correction, and momentum once it is there
    "rowstep-adam",
    "rowstep-adam:beta1=0",
    // BASIS: direction mode, scalar bytes, rows per bucket
    "basis",
    "basis:storage=f32",
    "basis:ratio=100",
    "basis:mode=own",
    "basis:mode=own,storage=u8",
    "basis:mode=own,ratio=1000",
    "basis:mode=own,storage=u8,ratio=1000",
    // is it the learned row scalar or the shared second moment?
    "basis:mode=own,ratio=1000,scalar-lr=0",
    "basis:mode=own,storage=u8,ratio=10000",
    // is it the never-forgetting AdaGrad sum? `rowscaled` with an EMA
    "basis:accumulate=ema",
    "basis:accumulate=ema,beta=0.999",
];

/// The one-pass stream sets with `examples` training examples.
fn stream_sets(examples: &'static str) -> Vec<Set> {
    let common = [
        "--format",
        "criteo-synth",
        "--stream",
        "--shard",
        "rows",
        "--workers",
        "2",
        "--epochs",
        "1",
        "--synthetic-examples",
        examples,
    ];
    let with = |model: &'static str| {
        let mut a = common.to_vec();
        a.extend(["--model", model]);
        a
    };
    vec![
        Set {
            key: "stream-deepfm",
            title: "DeepFM, criteo-synth stream, one pass, sharded P = 2",
            args: with("deepfm"),
            needs: None,
        },
        Set {
            key: "stream-dlrm",
            title: "DLRM, criteo-synth stream, one pass, sharded P = 2, f32 Adam on the dense part",
            // 1-bit Adam (the P > 1 default until session 23, now 0/1 Adam)
            // diverged on DLRM in 5 of 8 one-pass runs at --dense-lr
            // 0.001-0.005 (docs/CLI.md); this set
            // measures the sparse optimizers, so the towers take f32 Adam.
            args: {
                let mut a = with("dlrm");
                a.extend(["--dense-opt", "adam"]);
                a
            },
            needs: None,
        },
    ]
}

/// The DeepFM set of docs/RESULTS.md (100k synthetic examples, 64-32-1).
fn deepfm_synthetic() -> Set {
    Set {
        key: "deepfm-synthetic",
        title: "DeepFM, synthetic (100k examples, 64-32-1 tower, 3 epochs)",
        args: vec![
            "--model",
            "deepfm",
            "--mlp",
            "64,32,1",
            "--synthetic-examples",
            "100000",
            "--dense-lr",
            "0.001",
        ],
        needs: None,
    }
}

/// The FM sets of docs/RESULTS.md (3 epochs, the CLI's defaults).
fn fm_sets() -> Vec<Set> {
    vec![
        Set {
            key: "synthetic",
            title: "FM, synthetic (the embedded default data)",
            args: vec![],
            needs: None,
        },
        Set {
            key: "synthetic-hard",
            title: "FM, synthetic hard (noise 0.15, Zipf 1.3)",
            args: vec!["--synthetic-noise", "0.15", "--synthetic-zipf", "1.3"],
            needs: None,
        },
        Set {
            key: "movielens",
            title: "FM, MovieLens-100k",
            args: vec!["--format", "movielens", "--data", "data/ml-100k"],
            needs: Some("data/ml-100k"),
        },
        Set {
            key: "spam",
            title: "FM, SpamAssassin with headers",
            args: vec!["--format", "text", "--data", "data/spam"],
            needs: Some("data/spam"),
        },
        Set {
            key: "spam-body",
            title: "FM, SpamAssassin body only",
            args: vec!["--format", "text", "--data", "data/spam", "--body-only"],
            needs: Some("data/spam"),
        },
    ]
}

/// The sets and optimizers of `preset`.
fn preset(name: &str) -> Result<(Vec<Set>, Vec<String>), String> {
    let all = |v: &[&str]| v.iter().map(|s| (*s).to_string()).collect();
    match name {
        "short" | "headline" => {
            let n = if name == "short" { "50000" } else { "10000000" };
            // Cheapest first: a short run's first results come early.
            let mut sets = vec![deepfm_synthetic()];
            sets.extend(stream_sets(n));
            sets.extend(fm_sets());
            Ok((sets, all(OPTIMIZERS)))
        }
        "medium" => Ok((stream_sets("1000000"), all(STREAM_OPTIMIZERS))),
        "ablation" => Ok((vec![deepfm_synthetic()], all(ABLATION))),
        other => Err(format!(
            "unknown preset `{other}` (short, medium, headline, ablation)"
        )),
    }
}

/// Parsed command line.
struct Args {
    preset: String,
    only: Option<Vec<String>>,
    opts: Option<Vec<String>>,
    seeds: u32,
    /// `--tune-on` of every cell: `mean` (default) or `first`.
    tune_on: String,
    /// `--tune-lr` of every cell: `auto` (default) or a list of rates.
    tune_lr: String,
    out: Option<PathBuf>,
    report_only: bool,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        preset: "short".into(),
        only: None,
        opts: None,
        seeds: 3,
        tune_on: "mean".into(),
        tune_lr: "auto".into(),
        out: None,
        report_only: false,
    };
    let mut it = args.iter();
    while let Some(k) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{k} needs a value"))
        };
        match k.as_str() {
            "--preset" => a.preset = value()?,
            "--only" => a.only = Some(value()?.split(',').map(String::from).collect()),
            // `;` separates: specs contain commas.
            "--opts" => a.opts = Some(value()?.split(';').map(String::from).collect()),
            "--seeds" => {
                a.seeds = value()?
                    .parse()
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or("--seeds needs a count >= 1")?;
            }
            "--tune-on" => {
                a.tune_on = value()?;
                if !matches!(a.tune_on.as_str(), "mean" | "first") {
                    return Err(format!(
                        "--tune-on takes mean or first, not `{}`",
                        a.tune_on
                    ));
                }
            }
            "--tune-lr" => {
                a.tune_lr = value()?;
                let rate_list = a
                    .tune_lr
                    .split(',')
                    .all(|x| x.parse::<f64>().is_ok_and(|r| r.is_finite() && r > 0.0));
                if a.tune_lr != "auto" && !rate_list {
                    return Err(format!(
                        "--tune-lr takes auto or rates > 0 separated by commas, not `{}`",
                        a.tune_lr
                    ));
                }
            }
            "--out" => a.out = Some(PathBuf::from(value()?)),
            "--report" => a.report_only = true,
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    Ok(a)
}

/// A spec as a file name: letters, digits and `-`, the rest `_`.
fn safe(spec: &str) -> String {
    spec.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `cargo xtask quality …`.
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let a = parse(args)?;
    let (mut sets, mut opts) = preset(&a.preset)?;
    if let Some(only) = &a.only {
        if let Some(bad) = only.iter().find(|k| !sets.iter().any(|s| s.key == *k)) {
            return Err(format!("--only: no set `{bad}` in preset `{}`", a.preset));
        }
        sets.retain(|s| only.iter().any(|k| k == s.key));
    }
    if let Some(o) = a.opts.clone() {
        opts = o;
    }
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| root().join("target/quality").join(&a.preset));
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    if !a.report_only {
        util::run(util::cargo().args(["build", "--release", "-p", "basisopt-cli"]))?;
        let bin = root().join("target/release/basis");
        for set in &sets {
            if let Some(need) = set.needs.filter(|n| !root().join(n).exists()) {
                eprintln!(
                    "quality: skipping `{}`: {need} is missing (cargo xtask data fetch …)",
                    set.key
                );
                continue;
            }
            for opt in &opts {
                cell(&bin, &out, set, opt, a.seeds, (&a.tune_lr, &a.tune_on))?;
            }
        }
    }
    report(&out, &a.preset, &sets, &opts, a.seeds, &a.tune_on)
}

/// The `basis compare` argument list of one cell (without the binary).
/// `tune` is (`--tune-lr`, `--tune-on`).
fn cell_args(set: &Set, opt: &str, seeds: u32, tune: (&str, &str), json: &Path) -> Vec<String> {
    let (tune_lr, tune_on) = tune;
    let mut v: Vec<String> = ["-q", "compare"].iter().map(|s| (*s).into()).collect();
    v.extend(set.args.iter().map(|s| (*s).to_string()));
    v.extend([
        "--opt".into(),
        opt.into(),
        "--tune-lr".into(),
        tune_lr.into(),
        "--tune-on".into(),
        tune_on.into(),
        "--seeds".into(),
        seeds.to_string(),
        "--json".into(),
        json.display().to_string(),
    ]);
    v
}

/// Run one (set, optimizer) cell unless its JSON is there, tuned on `tune_on`.
fn cell(
    bin: &Path,
    out: &Path,
    set: &Set,
    opt: &str,
    seeds: u32,
    tune: (&str, &str),
) -> Result<(), String> {
    let tune_on = tune.1;
    let dir = out.join(set.key);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let done = dir.join(format!("{}.json", safe(opt)));
    if let Some(why) = redo(&done, tune_on) {
        if done.exists() {
            eprintln!("quality: {} · {opt}: re-run ({why})", set.key);
        }
    } else {
        return Ok(());
    }
    let tmp = dir.join(format!(".{}.json.tmp", safe(opt)));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    eprintln!("quality: {} · {opt} (load {})", set.key, load.join(" "));
    let table = dir.join(format!("{}.txt", safe(opt)));
    let stdout = std::fs::File::create(&table).map_err(|e| e.to_string())?;
    let status = Command::new(bin)
        .args(cell_args(set, opt, seeds, tune, &tmp))
        .current_dir(root())
        .stdout(Stdio::from(stdout))
        .status()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    if !status.success() {
        // One failed cell (e.g. every rate diverged) does not stop the rest.
        eprintln!(
            "quality: {} · {opt} failed ({status}); see {}",
            set.key,
            table.display()
        );
        return Ok(());
    }
    std::fs::rename(&tmp, &done).map_err(|e| format!("{}: {e}", done.display()))
}

/// Why the cell JSON `done` must be (re)made for `tune_on`, or `None` when
/// it is there and was tuned that way.
fn redo(done: &Path, tune_on: &str) -> Option<String> {
    if !done.exists() {
        return Some("missing".into());
    }
    match read_row(done) {
        Ok(r) if r.tuned_on == tune_on => None,
        Ok(r) => Some(format!("its cell was tuned on `{}`", r.tuned_on)),
        Err(e) => Some(e),
    }
}

/// One optimizer's result, read back from its cell JSON.
struct Row {
    opt: String,
    lr: f64,
    at_edge: bool,
    auc: (f64, f64),
    bytes_per_row: f64,
    search: Vec<(f64, Option<f64>)>,
    /// What `search` scored: `first` or `mean` (cells written before
    /// `--tune-on` existed say nothing: they were `first`).
    tuned_on: String,
    rows: u64,
}

fn read_row(path: &Path) -> Result<Row, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let r = &doc["results"][0];
    let num = |v: &Value| {
        v.as_f64()
            .ok_or_else(|| format!("{}: a number is missing", path.display()))
    };
    Ok(Row {
        opt: r["optimizer"].as_str().unwrap_or("?").to_string(),
        lr: num(&r["lr"])?,
        at_edge: r["lr_at_edge"].as_bool().unwrap_or(false),
        auc: (num(&r["test_auc"]["mean"])?, num(&r["test_auc"]["std"])?),
        bytes_per_row: num(&r["bytes_per_row"])?,
        search: r["lr_search"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|p| Some((p[0].as_f64()?, p[1].as_f64())))
                    .collect()
            })
            .unwrap_or_default(),
        tuned_on: r["lr_search_on"].as_str().unwrap_or("first").to_string(),
        rows: doc["data"]["rows"].as_u64().unwrap_or(0),
    })
}

/// Compact rate: `0.0003`, `5.5e-4`-style for refined points.
fn lr_text(lr: f64) -> String {
    let s = format!("{lr}");
    if s.len() <= 7 { s } else { format!("{lr:.2e}") }
}

/// What the rows' searches scored, for a column heading: `mean of N seeds`-style
/// words when all agree, `mixed` (each row's own) otherwise.
fn searched_on(rows: &[Row]) -> &'static str {
    let all = |w: &str| rows.iter().all(|r| r.tuned_on == w);
    if all("mean") {
        "mean over the seeds"
    } else if all("first") {
        "first seed"
    } else {
        "first seed or mean over the seeds: mixed cells"
    }
}

/// Write `tables.md` and the plots from the cells present.
fn report(
    out: &Path,
    preset: &str,
    sets: &[Set],
    opts: &[String],
    seeds: u32,
    tune_on: &str,
) -> Result<(), String> {
    let mut md = String::new();
    let mut summary = Vec::new();
    for set in sets {
        let rows: Vec<Row> = opts
            .iter()
            .map(|o| out.join(set.key).join(format!("{}.json", safe(o))))
            .filter(|p| p.exists())
            .map(|p| read_row(&p))
            .collect::<Result<_, _>>()?;
        if rows.is_empty() {
            continue;
        }
        let auc_of = |name: &str| rows.iter().find(|r| r.opt == name).map(|r| r.auc.0);
        let bar = match (auc_of("adam"), auc_of("rowwise-adagrad")) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let _ = writeln!(md, "### {} (`{}`)\n", set.title, set.key);
        let _ = writeln!(
            md,
            "```text\nbasis {} --opt SPEC --tune-lr auto|LIST --tune-on {tune_on} --seeds {seeds} --json {}/SPEC.json\n```\n",
            cell_args(set, "X", seeds, ("auto", tune_on), Path::new("-"))[..2 + set.args.len()]
                .join(" "),
            set.key
        );
        let _ = writeln!(md, "{} table rows (first seed's run).\n", rows[0].rows);
        let _ = writeln!(
            md,
            "| optimizer | lr | test AUC | Δ vs max(Adam, AdaGrad) | bytes/row | lr: validation AUC ({}) |",
            searched_on(&rows)
        );
        md.push_str("|---|---:|---:|---:|---:|---|\n");
        for r in &rows {
            let delta = bar.map_or("—".into(), |b| format!("{:+.4}", r.auc.0 - b));
            let search = r
                .search
                .iter()
                .map(|(lr, v)| match v {
                    Some(v) => format!("{}: {v:.4}", lr_text(*lr)),
                    None => format!("{}: diverged", lr_text(*lr)),
                })
                .collect::<Vec<_>>()
                .join(", ");
            let _ = writeln!(
                md,
                "| `{}` | {}{} | {:.4} ± {:.4} | {delta} | {:.2} | {search} |",
                r.opt,
                lr_text(r.lr),
                if r.at_edge { " (edge)" } else { "" },
                r.auc.0,
                r.auc.1,
                r.bytes_per_row
            );
        }
        md.push('\n');
        let png = out.join(format!("{}.png", set.key));
        let points: Vec<Point> = rows
            .iter()
            .map(|r| Point {
                label: r.opt.clone(),
                bytes_per_row: r.bytes_per_row,
                mean: r.auc.0,
                sd: r.auc.1,
            })
            .collect();
        quality_plot::draw(&png, set.key, &points)?;
        summary.push((set, bar, rows));
    }
    // One column per BASIS spec of the run: its Δ to the bar and bytes/row.
    let basis_specs: Vec<&String> = opts.iter().filter(|o| o.starts_with("basis")).collect();
    md.push_str(
        "### Summary: every BASIS configuration against max(Adam, row-wise AdaGrad) − 0.001\n\n",
    );
    md.push_str("Δ = test AUC − max(Adam, AdaGrad); ✓ when Δ ≥ −0.001; bytes/row in brackets.\n\n");
    md.push_str("| set | max(Adam, AdaGrad) |");
    for b in &basis_specs {
        let _ = write!(md, " `{b}` |");
    }
    md.push_str(" cheapest optimizer meeting the bar |\n|---|---:|");
    md.push_str(&"---:|".repeat(basis_specs.len()));
    md.push_str("---|\n");
    for (set, bar, rows) in &summary {
        let Some(bar) = bar else { continue };
        let _ = write!(md, "| `{}` | {bar:.4} |", set.key);
        for b in &basis_specs {
            match rows.iter().find(|r| &&r.opt == b) {
                Some(r) => {
                    let d = r.auc.0 - bar;
                    let mark = if d >= -0.001 { "✓" } else { "✗" };
                    let _ = write!(md, " {d:+.4} {mark} ({:.2}) |", r.bytes_per_row);
                }
                None => md.push_str(" — |"),
            }
        }
        let cheapest = rows
            .iter()
            .filter(|r| r.auc.0 >= bar - 0.001)
            .min_by(|a, b| a.bytes_per_row.total_cmp(&b.bytes_per_row));
        let _ = writeln!(
            md,
            " {} |",
            cheapest.map_or("—".into(), |c| format!(
                "`{}` ({:.2})",
                c.opt, c.bytes_per_row
            ))
        );
    }
    let path = out.join(format!("tables-{preset}.md"));
    std::fs::write(&path, md).map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!("quality: wrote {} and the plots", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_name_their_sets_and_specs_become_file_names() {
        let (sets, opts) = preset("short").unwrap();
        assert!(sets.iter().any(|s| s.key == "stream-dlrm"));
        assert_eq!(opts.len(), OPTIMIZERS.len());
        let (h, _) = preset("headline").unwrap();
        let stream = h.iter().find(|s| s.key == "stream-deepfm").unwrap();
        assert!(stream.args.contains(&"10000000"));
        assert!(preset("nope").is_err());
        let (m, mo) = preset("medium").unwrap();
        assert_eq!(
            m.iter().map(|s| s.key).collect::<Vec<_>>(),
            ["stream-deepfm", "stream-dlrm"]
        );
        assert!(m.iter().all(|s| s.args.contains(&"1000000")));
        assert!(mo.iter().any(|o| o == "basis:accumulate=sum"));
        assert!(mo.iter().any(|o| o == "basis:accumulate=anneal"));
        assert!(mo.iter().any(|o| o == "basis:accumulate=ema-anneal"));
        let list = ["--tune-lr".to_string(), "0.001,0.003".into()];
        assert_eq!(
            parse(&list).map(|a| a.tune_lr).ok().as_deref(),
            Some("0.001,0.003")
        );
        assert_eq!(parse(&[]).map(|a| a.tune_lr).ok().as_deref(), Some("auto"));
        for bad in ["0.001,x", "-1", "0", ""] {
            assert!(
                parse(&["--tune-lr".to_string(), bad.into()]).is_err(),
                "{bad}"
            );
        }
        let a = parse(&[]).map_err(|e| e.to_string()).unwrap();
        assert_eq!(a.tune_on, "mean", "the quality benchmark tunes on the mean");
        let first = ["--tune-on".to_string(), "first".into()];
        assert_eq!(
            parse(&first).map(|a| a.tune_on).ok().as_deref(),
            Some("first")
        );
        assert!(parse(&["--tune-on".to_string(), "median".into()]).is_err());
        assert_eq!(
            safe("basis:mode=own,ratio=1000"),
            "basis_mode_own_ratio_1000"
        );
        let args = cell_args(
            &deepfm_synthetic(),
            "adam",
            3,
            ("auto", "mean"),
            Path::new("x.json"),
        );
        assert_eq!(
            &args[args.len() - 10..],
            [
                "--opt",
                "adam",
                "--tune-lr",
                "auto",
                "--tune-on",
                "mean",
                "--seeds",
                "3",
                "--json",
                "x.json"
            ]
        );
    }

    #[test]
    fn a_cell_json_reads_back_with_diverged_rates() {
        let dir = std::env::temp_dir().join(format!("xtask-quality-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.json");
        std::fs::write(
            &p,
            r#"{"data":{"rows":42},"results":[{"optimizer":"adam","lr":0.001,"lr_at_edge":false,
            "test_auc":{"mean":0.7,"std":0.01},"bytes_per_row":136.0,
            "lr_search":[[0.001,0.69],[0.01,null]]}]}"#,
        )
        .unwrap();
        let r = read_row(&p).unwrap();
        assert_eq!((r.opt.as_str(), r.rows, r.auc), ("adam", 42, (0.7, 0.01)));
        assert_eq!(r.search, [(0.001, Some(0.69)), (0.01, None)]);
        assert_eq!(r.tuned_on, "first", "a cell from before --tune-on");
        assert!(redo(&p, "first").is_none());
        assert!(redo(&p, "mean").unwrap().contains("`first`"));
        let mean = std::fs::read_to_string(&p)
            .unwrap()
            .replace("\"lr\":0.001,", "\"lr\":0.001,\"lr_search_on\":\"mean\",");
        std::fs::write(&p, mean).unwrap();
        assert_eq!(read_row(&p).unwrap().tuned_on, "mean");
        assert!(redo(&p, "mean").is_none());
        assert!(redo(&p, "first").is_some());
        assert!(redo(&dir.join("none.json"), "mean").is_some());
        std::fs::write(&p, "{").unwrap();
        assert!(read_row(&p).is_err());
        assert!(redo(&p, "mean").is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
