//! `basis train` and `basis compare`: run optimizers, print the tables, write JSON and plots.

use crate::cli::{CompareArgs, ModelArgs, OutputArgs, TrainArgs};
use crate::data::{Dataset, LoadReport};
use crate::run::{Run, RunResult};
use crate::spec::{DEFAULT_COMPARE, OptSpec};
use crate::train::train;
use crate::tune::{Progress, Search, TuneLr, TuneOn};
use core::fmt::Write as _;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What the JSON says about the data set.
#[derive(Debug, Serialize)]
pub(crate) struct DataInfo {
    name: String,
    fields: Vec<String>,
    rows: usize,
    train: usize,
    valid: usize,
    test: usize,
    train_positive_rate: f64,
    split: String,
    load: LoadReport,
}

impl DataInfo {
    pub(crate) fn of(ds: &Dataset) -> Self {
        let [train, valid, test] = ds.split_lens();
        Self {
            name: ds.name.clone(),
            fields: ds.fields.clone(),
            rows: ds.rows,
            train,
            valid,
            test,
            train_positive_rate: ds.train_positive_rate(),
            split: ds.split.clone(),
            load: ds.report.clone(),
        }
    }
}

/// Mean and sample standard deviation.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Stat {
    mean: f64,
    std: f64,
}

impl Stat {
    fn of(xs: impl Iterator<Item = f64>) -> Self {
        let v: Vec<f64> = xs.collect();
        let n = v.len().max(1) as f64;
        let mean = v.iter().sum::<f64>() / n;
        let std = if v.len() > 1 {
            (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        } else {
            0.0
        };
        Self { mean, std }
    }
}

/// One optimizer's row of the comparison.
#[derive(Debug, Serialize)]
pub(crate) struct Entry {
    /// Spec as given.
    pub(crate) optimizer: String,
    /// Learning rate used for the reported runs.
    pub(crate) lr: f32,
    /// `(lr, validation AUC)` of each tried learning rate (empty without
    /// `--tune-lr`); the AUC is the mean over the seeds under `--tune-on mean`.
    pub(crate) lr_search: Vec<(f32, f64)>,
    /// What `lr_search` scored: `first` (the first seed) or `mean` (over the
    /// seeds); absent without `--tune-lr`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) lr_search_on: Option<&'static str>,
    /// The chosen rate is the smallest or largest tried.
    pub(crate) lr_at_edge: bool,
    test_auc: Stat,
    test_logloss: Stat,
    valid_auc: Stat,
    wall_secs: Stat,
    state_bytes: usize,
    fixed_bytes: usize,
    /// Bytes that grow with the rows, per row (`bytes_per_row` minus the fixed part).
    pub(crate) growing_per_row: f64,
    bytes_per_row: f64,
    compression_vs_adam: f64,
    /// One record per seed.
    pub(crate) runs: Vec<RunResult>,
}

/// The JSON document of `compare` / `train`.
#[derive(Debug, Serialize)]
struct Output<'a> {
    command: &'a str,
    data: DataInfo,
    epochs: u32,
    batch: usize,
    embedding_dim: usize,
    workers: usize,
    results: &'a [Entry],
}

/// The rows `run.memory` describes: the whole table in one process; in a
/// sharded run `memory` is rank 0's optimizer, so rank 0's rows.
fn memory_rows(run: &RunResult) -> usize {
    run.sharded
        .as_ref()
        .and_then(|s| s.ranks.first())
        .map_or(run.rows, |r| usize::try_from(r.rows).unwrap_or(usize::MAX))
}

pub(crate) fn entry(spec: &OptSpec, lr_search: Vec<(f32, f64)>, runs: Vec<RunResult>) -> Entry {
    let first = &runs[0];
    Entry {
        optimizer: spec.label.clone(),
        lr: spec.lr(),
        lr_search,
        lr_search_on: None,
        lr_at_edge: false,
        test_auc: Stat::of(runs.iter().map(|r| r.final_metrics.test_auc)),
        test_logloss: Stat::of(runs.iter().map(|r| r.final_metrics.test_loss)),
        valid_auc: Stat::of(runs.iter().map(|r| r.final_metrics.valid_auc)),
        wall_secs: Stat::of(runs.iter().map(|r| r.wall_secs)),
        state_bytes: first.memory.total,
        fixed_bytes: first.memory.fixed,
        growing_per_row: first.memory.growing as f64 / memory_rows(first).max(1) as f64,
        bytes_per_row: first.bytes_per_row,
        compression_vs_adam: first.compression_vs_adam,
        runs,
    }
}

/// Human-readable bytes (binary prefixes).
pub(crate) fn human_bytes(b: usize) -> String {
    let b = b as f64;
    if b >= 1024.0 * 1024.0 {
        format!("{:.2} MiB", b / 1024.0 / 1024.0)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{b} B")
    }
}

fn pm(s: Stat, digits: usize, seeds: usize) -> String {
    if seeds > 1 {
        format!("{:.digits$} ± {:.digits$}", s.mean, s.std)
    } else {
        format!("{:.digits$}", s.mean)
    }
}

fn sparkline(h: &[u64]) -> String {
    const BARS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = h.iter().copied().max().unwrap_or(0).max(1);
    h.iter()
        .map(|&c| {
            if c == 0 {
                '·'
            } else {
                BARS[(1 + (c * 7) / max) as usize]
            }
        })
        .collect()
}

/// The comparison table (Markdown) plus the BASIS telemetry table.
pub(crate) fn table(entries: &[Entry], seeds: usize) -> String {
    let comm = entries
        .iter()
        .any(|e| e.runs.iter().any(|r| r.comm_bytes.is_some()));
    let mut s = String::new();
    let _ = write!(
        s,
        "| optimizer | lr | test AUC | test log-loss | state bytes | fixed | per-row B/row | bytes/row | vs Adam | wall s |"
    );
    if comm {
        s.push_str(" bytes sent/rank | of which dense |");
    }
    s.push_str("\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    if comm {
        s.push_str("---:|---:|");
    }
    s.push('\n');
    for e in entries {
        let vs = if e.compression_vs_adam.is_finite() {
            format!("{:.1}×", e.compression_vs_adam)
        } else {
            "∞".into()
        };
        let _ = write!(
            s,
            "| {} | {}{} | {} | {} | {} | {} | {:.2} | {:.2} | {} | {:.1} |",
            e.optimizer,
            e.lr,
            if e.lr_at_edge { " (edge)" } else { "" },
            pm(e.test_auc, 4, seeds),
            pm(e.test_logloss, 4, seeds),
            human_bytes(e.state_bytes),
            human_bytes(e.fixed_bytes),
            e.growing_per_row,
            e.bytes_per_row,
            vs,
            e.wall_secs.mean
        );
        if comm {
            let c = e.runs.first().and_then(|r| r.comm_bytes).unwrap_or(0);
            let dense = e.runs.first().and_then(|r| r.comm_dense_bytes).unwrap_or(0);
            let _ = write!(
                s,
                " {} | {} |",
                human_bytes(c as usize),
                human_bytes(dense as usize)
            );
        }
        s.push('\n');
    }
    let basis: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.runs.first().is_some_and(|r| r.telemetry.is_some()))
        .collect();
    if !basis.is_empty() {
        s.push_str("\nBASIS telemetry (last seed):\n\n");
        s.push_str("| optimizer | scalar mean | at min clip | at max clip | scalar histogram | buckets | load max / mean | empty buckets | non-finite rows |\n");
        s.push_str("|---|---:|---:|---:|---|---:|---:|---:|---:|\n");
        for e in basis {
            let Some(t) = e.runs.last().and_then(|r| r.telemetry.as_ref()) else {
                continue;
            };
            let _ = writeln!(
                s,
                "| {} | {:.3e} | {:.3} | {:.3} | `{}` | {} | {} / {:.1} | {} | {} |",
                e.optimizer,
                t.scalar_mean,
                t.fraction_at_min,
                t.fraction_at_max,
                sparkline(&t.scalar_histogram),
                t.buckets,
                t.bucket_load_max,
                t.bucket_load_mean,
                t.empty_buckets,
                t.nonfinite_rows
            );
        }
    }
    s
}

/// A one-paragraph description of the data.
pub(crate) fn describe(ds: &Dataset) -> String {
    let r = &ds.report;
    let [train, valid, test] = ds.split_lens();
    let mut s = format!(
        "data: {}\n  {} rows ({}), {} fields; train/valid/test = {train}/{valid}/{test} ({}), positive rate {:.3}\n",
        ds.name,
        ds.rows,
        if ds.stream.is_some() {
            "estimated distinct training ids"
        } else {
            "distinct training features"
        },
        ds.fields.len(),
        ds.split,
        ds.train_positive_rate()
    );
    if r.malformed_count > 0 || r.blank > 0 || r.unseen_features > 0 {
        let _ = writeln!(
            s,
            "  {} malformed lines skipped, {} blank lines, {} validation/test feature occurrences unseen in training",
            r.malformed_count, r.blank, r.unseen_features
        );
    }
    for m in r.malformed.iter().take(10) {
        let _ = writeln!(s, "  malformed: {}:{}: {}", m.file, m.line, m.reason);
    }
    if r.malformed_count > 10 {
        let _ = writeln!(
            s,
            "  ... and {} more (all listed in --json)",
            r.malformed_count - 10
        );
    }
    s
}

fn checkpoint_path(dir: &Option<PathBuf>, label: &str, lr: f32, seed: u64) -> Option<PathBuf> {
    dir.as_ref().map(|d| {
        let safe: String = label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        d.join(format!("{safe}-lr{lr}-seed{seed}.ckpt"))
    })
}

/// Run the comparison.
///
/// With tuning, each optimizer's [`Search`] picks its rate on the first
/// seed's validation AUC (`--tune-on first`) or on the mean over all seeds
/// (`mean`: every rate runs every seed). The tuning runs at the chosen rate
/// *are* those seeds' runs, so they are kept rather than repeated (unless
/// checkpoints are written: tuning runs write none, so the seed runs then
/// start afresh).
#[allow(clippy::too_many_arguments)] // the two commands share this one driver
fn run_all(
    ds: &Dataset,
    specs: &[OptSpec],
    model: &ModelArgs,
    seeds: u32,
    tune: Option<(&TuneLr, TuneOn)>,
    ckpt: &Option<PathBuf>,
    resume: bool,
    progress: bool,
) -> Result<Vec<Entry>, String> {
    let seeds = seeds.max(1) as usize;
    let per_rate = tune.map_or(0, |(_, on)| on.seeds_per_rate(seeds));
    let reuse = if ckpt.is_none() { per_rate } else { 0 };
    let mut searches: Vec<Option<Search>> = specs
        .iter()
        .map(|s| tune.map(|(t, _)| Search::new(t, s)))
        .collect();
    // Runs known per optimizer: its grid, then the seeds not covered by reuse.
    let known =
        |q: &Option<Search>| q.as_ref().map_or(0, Search::pending) * per_rate + seeds - reuse;
    let mut later: usize = searches.iter().map(known).sum();
    let mut bar = Progress::new(progress);
    let mut entries = Vec::new();
    for (spec, search) in specs.iter().zip(searches.iter_mut()) {
        later -= known(search);
        let mut kept = Vec::new();
        let spec = match (search.as_mut(), tune) {
            (Some(q), Some((_, on))) => {
                let tuned = crate::tune::tune(q, on, seeds, |t| {
                    let m = ModelArgs {
                        seed: model.seed + t.seed as u64,
                        ..model.clone()
                    };
                    bar.begin(
                        bar.done() + t.left + seeds - reuse + later,
                        &spec.label,
                        t.lr,
                        m.seed,
                        "tuning",
                    );
                    let r = train(
                        ds,
                        &Run {
                            spec: &spec.with_lr(t.lr),
                            model: &m,
                            checkpoint: None,
                            resume: false,
                            progress,
                        },
                    );
                    bar.end();
                    // A rate too large for the model diverges: that is a
                    // result of the search (the worst score), not the end of
                    // the comparison.
                    match r {
                        Err(e) if is_divergence(&e) => {
                            eprintln!(
                                "{}: lr {} (seed {}): {e}; scored as diverged",
                                spec.label, t.lr, m.seed
                            );
                            Ok(None)
                        }
                        r => r.map(|r| Some((r.final_metrics.valid_auc, r))),
                    }
                })?;
                let lr = tuned.lr.unwrap_or_else(|| spec.lr());
                if q.at_edge() {
                    eprintln!(
                        "warning: {}: the chosen lr {lr} is at the edge of the rates tried ({}); its optimum may lie outside",
                        spec.label,
                        rates(&q.tried)
                    );
                }
                if reuse > 0 {
                    kept = tuned.kept;
                }
                OptSpec {
                    label: spec.label.clone(),
                    ..spec.with_lr(lr)
                }
            }
            _ => spec.clone(),
        };
        let mut runs: Vec<RunResult> = kept;
        for k in runs.len()..seeds {
            let m = ModelArgs {
                seed: model.seed + k as u64,
                ..model.clone()
            };
            bar.begin(
                bar.done() + seeds - k + later,
                &spec.label,
                spec.lr(),
                m.seed,
                "seed",
            );
            runs.push(train(
                ds,
                &Run {
                    spec: &spec,
                    model: &m,
                    checkpoint: checkpoint_path(ckpt, &spec.label, spec.lr(), m.seed),
                    resume,
                    progress,
                },
            )?);
            bar.end();
        }
        let edge = search.as_ref().is_some_and(Search::at_edge);
        let tried = search.as_ref().map_or_else(Vec::new, |q| q.tried.clone());
        entries.push(Entry {
            lr_at_edge: edge,
            lr_search_on: tune.map(|(_, on)| on.name()),
            ..entry(&spec, tried, runs)
        });
    }
    Ok(entries)
}

/// Whether a training error is a divergence (`validate::finite_loss`'s
/// message), which a learning-rate search scores instead of stopping on.
fn is_divergence(e: &str) -> bool {
    e.starts_with("training diverged")
}

/// What the rate was chosen on, in words.
fn tuned_on(on: TuneOn) -> &'static str {
    match on {
        TuneOn::First => "first seed",
        TuneOn::Mean => "mean over the seeds",
    }
}

/// `lr: AUC, …` of a search.
fn rates(tried: &[(f32, f64)]) -> String {
    tried
        .iter()
        .map(|(lr, v)| format!("{lr}: {v:.4}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the table is not printed: JSON goes to stdout, or this is an MPI
/// rank other than 0.
fn table_suppressed(out: &OutputArgs) -> bool {
    !crate::parallel::is_output_rank() || out.json.as_deref() == Some(Path::new("-"))
}

/// Fail before any work when an output could not be written: the JSON file,
/// the plot, the checkpoint directory. (Checked again when written: this
/// only moves the typical failure — a typo, a missing or read-only
/// directory — before the training instead of after it.)
fn check_outputs(out: &OutputArgs, checkpoint: Option<&Path>) -> Result<(), String> {
    if !crate::parallel::is_output_rank() {
        return Ok(());
    }
    if let Some(path) = out.json.as_deref().filter(|p| *p != Path::new("-")) {
        crate::validate::writable_file("--json", path)?;
    }
    if let Some(path) = &out.plot {
        crate::validate::writable_file("--plot", path)?;
    }
    if let Some(dir) = checkpoint {
        crate::validate::writable_dir("--checkpoint", dir)?;
    }
    Ok(())
}

/// Write the plot and JSON (after the table was printed, so a failure here
/// loses no result).
fn write_outputs(
    command: &str,
    ds: &Dataset,
    model: &ModelArgs,
    out: &OutputArgs,
    entries: &[Entry],
) -> Result<(), String> {
    if !crate::parallel::is_output_rank() {
        return Ok(());
    }
    if let Some(path) = &out.plot {
        // The first seed's curve of every optimizer.
        let curves: Vec<crate::plot::Curve<'_>> = entries
            .iter()
            .map(|e| {
                let points = e.runs.first().map_or(&[][..], |r| &r.curve[..]);
                (e.optimizer.as_str(), points)
            })
            .collect();
        crate::plot::draw(path, &curves).map_err(|e| format!("--plot {}: {e}", path.display()))?;
    }
    let Some(path) = &out.json else {
        return Ok(());
    };
    let doc = Output {
        command,
        data: DataInfo::of(ds),
        epochs: model.epochs,
        batch: model.batch,
        embedding_dim: model.dim,
        workers: model.workers,
        results: entries,
    };
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    write_text(path, &text).map_err(|e| format!("--json: {e}"))
}

/// Write `text` to `path` (`-` = stdout).
pub(crate) fn write_text(path: &Path, text: &str) -> Result<(), String> {
    if path == Path::new("-") {
        println!("{text}");
        Ok(())
    } else {
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

/// `basis compare`.
pub(crate) fn compare(args: &CompareArgs, progress: bool) -> Result<(), String> {
    check_outputs(&args.out, args.checkpoint.as_deref())?;
    let ds = crate::data::load(&args.data.options(progress)).map_err(|e| e.to_string())?;
    let specs: Vec<OptSpec> = if args.opts.is_empty() {
        DEFAULT_COMPARE
            .iter()
            .map(|s| s.parse().map_err(|e: crate::spec::SpecError| e.to_string()))
            .collect::<Result<_, _>>()?
    } else {
        args.opts.clone()
    };
    // Unset BASIS keys resolve against the run's passes (`--epochs 1`: one pass).
    let specs: Vec<OptSpec> = specs
        .iter()
        .map(|s| s.for_epochs(args.model.epochs))
        .collect();
    let entries = run_all(
        &ds,
        &specs,
        &args.model,
        args.seeds,
        args.tune_lr.as_ref().map(|t| (t, args.tune_on)),
        &args.checkpoint,
        args.resume,
        progress,
    )?;
    if !table_suppressed(&args.out) {
        print!("{}", describe(&ds));
        let model = match args.model.model {
            crate::deep::ModelKind::Fm => "FM".to_string(),
            crate::deep::ModelKind::Deepfm => format!("DeepFM (tower {:?})", args.model.mlp),
            crate::deep::ModelKind::Dlrm => format!(
                "DLRM (bottom {:?}, top {:?})",
                args.model.bottom_mlp, args.model.mlp
            ),
        };
        println!(
            "model: {model}, k = {} (row dim {}), {} epochs, batch {}, {} seed(s){}\n",
            args.model.dim,
            args.model.dim + 1,
            args.model.epochs,
            args.model.batch,
            args.seeds.max(1),
            match &args.tune_lr {
                None => String::new(),
                Some(TuneLr::Auto) => format!(
                    ", lr tuned on validation AUC ({}) over per-optimizer grids (auto)",
                    tuned_on(args.tune_on)
                ),
                Some(TuneLr::List(l)) => format!(
                    ", lr tuned on validation AUC ({}) over {l:?}",
                    tuned_on(args.tune_on)
                ),
            }
        );
        print!("{}", table(&entries, args.seeds.max(1) as usize));
    }
    write_outputs("compare", &ds, &args.model, &args.out, &entries)
}

/// `basis train`.
pub(crate) fn train_one(args: &TrainArgs, progress: bool) -> Result<(), String> {
    check_outputs(&args.out, args.checkpoint.as_deref())?;
    let ds = crate::data::load(&args.data.options(progress)).map_err(|e| e.to_string())?;
    let ckpt = args.checkpoint.as_ref().map(|d| d.join("run.ckpt"));
    let spec = args.opt.for_epochs(args.model.epochs);
    let r = train(
        &ds,
        &Run {
            spec: &spec,
            model: &args.model,
            checkpoint: ckpt,
            resume: args.resume,
            progress,
        },
    )?;
    let entries = [entry(&spec, Vec::new(), vec![r])];
    if !table_suppressed(&args.out) {
        print!("{}", train_text(&ds, &entries[0]));
    } else if crate::parallel::is_output_rank() {
        // JSON on stdout: the warning still reaches the user.
        if let Some(w) = skew_warning(&entries[0]) {
            eprintln!("{w}");
        }
    }
    write_outputs("train", &ds, &args.model, &args.out, &entries)
}

/// A sharded run's skew warning (`GroupReport::skew_warning`), if any.
fn skew_warning(e: &Entry) -> Option<String> {
    e.runs.first()?.sharded.as_ref()?.skew_warning()
}

/// `basis train`'s text output for the single run of `e`: the data, the
/// per-epoch curve, the summary table, the model CRC, and a sharded run's
/// skew warning.
pub(crate) fn train_text(ds: &Dataset, e: &Entry) -> String {
    let mut s = describe(ds);
    s.push_str("| epoch | train loss | valid AUC | valid loss | test AUC | test loss |\n");
    s.push_str("|---:|---:|---:|---:|---:|---:|\n");
    for p in e.runs.iter().flat_map(|r| &r.curve) {
        let _ = writeln!(
            s,
            "| {} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} |",
            p.epoch, p.train_loss, p.valid_auc, p.valid_loss, p.test_auc, p.test_loss
        );
    }
    s.push('\n');
    s.push_str(&table(core::slice::from_ref(e), 1));
    if let Some(r) = e.runs.first() {
        let _ = writeln!(s, "model crc32: {:08x}", r.model_crc32);
        if let Some(t) = r.dense_freeze_step {
            // 1-bit Adam / LAMB: the last warm-up step (full precision
            // until then); 0/1 Adam: `var_freeze_step`, the last step that
            // may refresh `v` (on its thinning schedule). Both freeze `v`
            // there.
            let _ = writeln!(s, "dense optimizer: second moment frozen after step {t}");
        }
    }
    if let Some(sh) = e.runs.first().and_then(|r| r.sharded.as_ref()) {
        let _ = writeln!(
            s,
            "sharded table: {} rows ({} values); bytes per row: index {:.1}, rows {:.1}, optimizer state {:.1}",
            sh.rows,
            sh.row_precision,
            sh.index_bytes_per_row,
            sh.row_bytes_per_row,
            sh.state_bytes_per_row
        );
    }
    if let Some(w) = skew_warning(e) {
        let _ = writeln!(s, "{w}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The search recognises exactly the divergence error of a training run.
    #[test]
    fn divergence_is_told_apart_from_other_errors() {
        let e = crate::validate::finite_loss(f64::NAN, 1, 508, "adam").unwrap_err();
        assert!(is_divergence(&e), "{e}");
        assert!(!is_divergence("cannot write out.json: denied"));
        assert!(crate::validate::finite_loss(0.5, 1, 1, "adam").is_ok());
    }
}
