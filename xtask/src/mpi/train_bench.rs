//! `cargo xtask mpi --train-bench [--net 1gbit|10gbit|unlimited] [--np 2,4]
//! [--batch B] [--examples N | --steps S] [--warmup auto|share|F[,...]] [--rounds N] [--seeds 1,2,3]
//! [--model deepfm|dlrm] [--compressed onebit-adam|zero-one-adam|onebit-lamb[,...]]`: end-to-end
//! sharded training over TCP in the shaped network namespace of `--bench` (issue 13 item 7).
//!
//! The job: `basis train --shard rows` with DeepFM (tower `1024,512,256,1`
//! over 39 fields × k = 16: 1 296 385 dense parameters), streamed
//! criteo-synth data, global batch 1024 (`--batch`), 200 steps (`--steps`, or
//! `--examples` = steps × batch), one epoch, BASIS on the sparse
//! rows. For every P it runs `--dense-opt adam` (f32 all-reduce every step)
//! and the compressed optimizer (`--compressed`, below) with the same data, steps and seed, reads
//! each run's `--json` and prints one markdown table per P: wall and
//! training seconds, ms per step, test AUC and its difference, per-rank
//! bytes sent per step (sparse all-to-all and dense all-reduce), per-rank
//! peak RSS and the end-to-end speed-up. `--warmup auto|share|F` passes `--dense-warmup`
//! (1-bit Adam's f32 warm-up: the `auto` rule, the share rule — the CLI's default, which is
//! `onebit-adam`'s `FreezePolicy::default()` — or a fraction; without `--warmup` the CLI's default)
//! to the 1-bit runs; a list (`--warmup auto,share`) makes one 1-bit run per
//! entry after each f32 run, all compared with that f32 run (one pair of tables
//! per entry), so the warm-ups share the f32 runs instead of repeating them. `--model dlrm` runs DLRM instead (top tower `--mlp` and bottom
//! tower at the CLI's defaults, 541 585 dense parameters at `--dim 16`), same data.
//! `--compressed` names the compressed tower optimizers (`--dense-opt`;
//! default `zero-one-adam`, the CLI's default since session 23): a list makes one compressed run per optimizer
//! and `--warmup` entry after each f32 run, so 1-bit Adam and 0/1 Adam are
//! compared on the same f32 runs in the same rounds.
//!
//! `--rounds N` (default: one per seed) runs N interleaved rounds, each an
//! f32 run then a 1-bit run, round `r` with seed `seeds[r % seeds.len()]`
//! (`--seeds`, default `1`), and adds a table of the rounds and their median
//! speed-up with its min–max (a single pair on a shared machine is one
//! sample of its load; the house rule is a median of ≥ 5 rounds), and one
//! of the seeds: freeze step, validation and test AUC of both optimizers
//! (deterministic per seed, so taken from the seed's first round).
//! Opt-in only, never part of CI.

use super::{Rate, parse_rate, require_mpirun, target_dir, with_netns};
use crate::stats::median;
use crate::util::{self, cargo};
use std::path::Path;

/// DeepFM tower widths (1.30 M parameters with 39 fields × k = 16).
const MLP: &str = "1024,512,256,1";
/// Default global batch (each of P ranks takes 1024 / P examples per step).
const BATCH: usize = 1024;
/// Default training steps (examples = steps × batch).
const STEPS: usize = 200;

/// Parsed command line.
#[derive(Debug, PartialEq)]
struct Opts {
    /// `None`: the namespace's loopback is not shaped.
    rate: Option<String>,
    ranks: Vec<usize>,
    batch: usize,
    examples: usize,
    /// `--steps`: examples = steps × batch (0: not given).
    steps: usize,
    /// `--dense-warmup` of the 1-bit Adam runs, one 1-bit run per entry
    /// in every round (empty: one run at the CLI's default).
    warmups: Vec<String>,
    /// Interleaved (f32, 1-bit) rounds per rank count. Default: one per seed.
    rounds: usize,
    /// `--seed` of the runs, round `r` taking `seeds[r % seeds.len()]`.
    /// Default `[1]`.
    seeds: Vec<u64>,
    /// `--model`: `deepfm` (default) or `dlrm`.
    model: String,
    /// `--dense-opt` of the compressed runs (default `[zero-one-adam]`).
    compressed: Vec<String>,
}

/// The tower optimizers `--compressed` takes, with their table names.
const COMPRESSED: [(&str, &str); 3] = [
    ("onebit-adam", "1-bit Adam"),
    ("zero-one-adam", "0/1 Adam"),
    ("onebit-lamb", "1-bit LAMB"),
];

/// The table name of the compressed optimizer `opt`.
fn display_name(opt: &str) -> &'static str {
    COMPRESSED
        .iter()
        .find(|(k, _)| *k == opt)
        .map_or("compressed", |(_, n)| n)
}

fn parse_args(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        rate: Some("1gbit".into()),
        ranks: vec![2, 4],
        batch: BATCH,
        examples: 0,
        steps: 0,
        warmups: Vec::new(),
        rounds: 0,
        seeds: vec![1],
        model: "deepfm".into(),
        compressed: vec!["zero-one-adam".into()],
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |what: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs {what}"))
        };
        match a.as_str() {
            "--net" => {
                let r = value("a rate (1gbit, 10gbit, unlimited)")?;
                if r == "unlimited" {
                    o.rate = None;
                } else {
                    parse_rate(&r)?;
                    o.rate = Some(r);
                }
            }
            "--np" => {
                o.ranks = value("rank counts, e.g. 2,4")?
                    .split(',')
                    .map(|s| match s.trim().parse::<usize>() {
                        Ok(n) if n >= 2 => Ok(n),
                        _ => Err(format!("--np: `{s}` is not a rank count >= 2")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--examples" => {
                let n = value("a number")?;
                o.examples = match n.parse::<usize>() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(format!("--examples: `{n}` is not a positive number")),
                };
            }
            "--steps" => {
                let n = value("a number")?;
                o.steps = match n.parse::<usize>() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(format!("--steps: `{n}` is not a positive number")),
                };
            }
            "--batch" => {
                let n = value("a number")?;
                o.batch = match n.parse::<usize>() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(format!("--batch: `{n}` is not a positive number")),
                };
            }
            "--warmup" => {
                o.warmups = value("`auto`, `share` or a fraction in [0, 1), or a list")?
                    .split(',')
                    .map(|w| {
                        let w = w.trim();
                        match w.parse::<f64>() {
                            _ if w == "auto" || w == "share" => Ok(w.to_string()),
                            Ok(f) if (0.0..1.0).contains(&f) => Ok(w.to_string()),
                            _ => Err(format!(
                                "--warmup: `{w}` is neither `auto`, `share` nor a fraction in [0, 1)"
                            )),
                        }
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--model" => {
                let m = value("`deepfm` or `dlrm`")?;
                if m != "deepfm" && m != "dlrm" {
                    return Err(format!("--model: `{m}` is neither `deepfm` nor `dlrm`"));
                }
                o.model = m;
            }
            "--compressed" => {
                o.compressed = value("tower optimizers, e.g. onebit-adam,zero-one-adam")?
                    .split(',')
                    .map(|c| {
                        let c = c.trim();
                        if COMPRESSED.iter().any(|(k, _)| *k == c) {
                            Ok(c.to_string())
                        } else {
                            Err(format!(
                                "--compressed: `{c}` is none of onebit-adam, zero-one-adam, onebit-lamb"
                            ))
                        }
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--rounds" => {
                let n = value("a number")?;
                o.rounds = match n.parse::<usize>() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(format!("--rounds: `{n}` is not a positive number")),
                };
            }
            "--seeds" => {
                o.seeds = value("seeds, e.g. 1,2,3")?
                    .split(',')
                    .map(|s| {
                        s.trim()
                            .parse::<u64>()
                            .map_err(|_| format!("--seeds: `{s}` is not a seed"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            other => {
                return Err(format!(
                    "unknown argument `{other}` (usage: mpi --train-bench [--net 1gbit|10gbit|unlimited] [--np 2,4] [--batch B] [--examples N | --steps S] [--warmup auto|share|F[,...]] [--rounds N] [--seeds 1,2,3] [--model deepfm|dlrm] [--compressed onebit-adam|zero-one-adam|onebit-lamb[,...]])"
                ));
            }
        }
    }
    match (o.examples, o.steps) {
        (0, 0) => o.examples = STEPS * o.batch,
        (0, s) => o.examples = s * o.batch,
        (_, 0) => {}
        _ => return Err("--steps and --examples both size the job: give one".into()),
    }
    if o.rounds == 0 {
        o.rounds = o.seeds.len();
    }
    if o.rounds < o.seeds.len() {
        return Err(format!(
            "--rounds {} is fewer than the {} seeds: every seed needs a round",
            o.rounds,
            o.seeds.len()
        ));
    }
    Ok(o)
}

pub(super) fn run(args: &[String]) -> Result<(), String> {
    let o = parse_args(args)?;
    require_mpirun()?;
    let rate: Option<Rate> = o.rate.as_deref().map(parse_rate).transpose()?;
    util::run(cargo().args([
        "build",
        "--release",
        "-p",
        "basisopt-cli",
        "--features",
        "mpi",
    ]))?;
    let exe = target_dir().join("release/basis");
    let dir = target_dir().join("train-bench");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let steps = o.examples.div_ceil(o.batch);
    let label = o.rate.as_deref().unwrap_or("unlimited");
    // The compressed runs of a round: one per optimizer and `--warmup`
    // entry (`None`: the CLI's default, no `--dense-warmup`).
    let warmups: Vec<Option<&str>> = if o.warmups.is_empty() {
        vec![None]
    } else {
        o.warmups.iter().map(|w| Some(w.as_str())).collect()
    };
    let variants: Vec<(&str, Option<&str>)> = o
        .compressed
        .iter()
        .flat_map(|c| warmups.iter().map(move |&w| (c.as_str(), w)))
        .collect();
    with_netns(rate.as_ref(), |mpirun_in_ns| {
        for &np in &o.ranks {
            let mut rounds: Vec<Vec<Round>> = vec![Vec::new(); variants.len()];
            for r in 0..o.rounds {
                let seed = o.seeds[r % o.seeds.len()];
                let job = |opt: &str, warmup: Option<&str>, name: &str| {
                    let json = dir.join(format!("np{np}-{name}-r{r}.json"));
                    let mut cmd = mpirun_in_ns(np);
                    cmd.arg(&exe)
                        .args(job_args(&o.model, np, opt, o.batch, o.examples, seed))
                        .arg(&json);
                    if let Some(w) = warmup {
                        cmd.args(["--dense-warmup", w]);
                    }
                    util::run(&mut cmd)?;
                    read_run(&json)
                };
                let f32 = job("adam", None, "adam")?;
                for (i, &(c, w)) in variants.iter().enumerate() {
                    let onebit = job(c, w, &format!("{c}-w{i}"))?;
                    rounds[i].push(Round {
                        seed,
                        f32: f32.clone(),
                        onebit,
                    });
                }
            }
            for (&(c, w), rounds) in variants.iter().zip(&rounds) {
                let name = display_name(c);
                if variants.len() > 1 {
                    println!(
                        "\n#### {name} with --dense-warmup {}",
                        w.unwrap_or("(the CLI's default)")
                    );
                }
                println!(
                    "{}",
                    table(
                        label,
                        np,
                        o.batch,
                        steps,
                        name,
                        &rounds[0].f32,
                        &rounds[0].onebit
                    )
                );
                println!("{}", rounds_table(steps, rounds));
            }
        }
        Ok(())
    })
}

/// The `basis` arguments of one run of `model` (`--json PATH` follows).
fn job_args(
    model: &str,
    np: usize,
    dense_opt: &str,
    batch: usize,
    examples: usize,
    seed: u64,
) -> Vec<String> {
    let s = |x: &str| x.to_string();
    // DLRM keeps the CLI's towers (top `512,256,1`, bottom `64`): the
    // workload of `docs/ONEBIT_ADAM.md`, "DLRM under 1-bit Adam".
    let mlp = if model == "dlrm" {
        Vec::new()
    } else {
        vec![s("--mlp"), s(MLP)]
    };
    let head = vec![
        s("-q"),
        s("train"),
        s("--format"),
        s("criteo-synth"),
        s("--stream"),
        s("--synthetic-examples"),
        examples.to_string(),
        s("--model"),
        s(model),
    ];
    let tail = vec![
        s("--dim"),
        s("16"),
        s("--batch"),
        batch.to_string(),
        s("--epochs"),
        s("1"),
        s("--opt"),
        s("basis"),
        s("--seed"),
        seed.to_string(),
        s("--shard"),
        s("rows"),
        s("--workers"),
        np.to_string(),
        s("--dense-opt"),
        s(dense_opt),
        s("--json"),
    ];
    [head, mlp, tail].concat()
}

/// The figures of one run's `--json` the table needs.
#[derive(Debug, Clone, PartialEq)]
struct RunFigures {
    wall_secs: f64,
    train_secs: f64,
    test_auc: f64,
    valid_auc: f64,
    /// The last full-precision step of a 1-bit run (`None`: f32 Adam).
    freeze_step: Option<f64>,
    dense_params: f64,
    /// Per rank, in rank order.
    sparse: Vec<f64>,
    dense: Vec<f64>,
    peak_rss: Vec<f64>,
}

fn read_run(path: &Path) -> Result<RunFigures, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_run(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Every number that follows `"key":` in `text`, in order (objects and
/// strings under the same key are skipped).
fn numbers(text: &str, key: &str) -> Vec<f64> {
    let pat = format!("\"{key}\":");
    text.match_indices(&pat)
        .filter_map(|(at, _)| {
            let rest = text[at + pat.len()..].trim_start();
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || "+-.eE".contains(c)))
                .unwrap_or(rest.len());
            rest[..end].parse::<f64>().ok()
        })
        .collect()
}

/// The first number after `"key":`, or an error naming the key.
fn first(text: &str, key: &str) -> Result<f64, String> {
    numbers(text, key)
        .first()
        .copied()
        .ok_or_else(|| format!("no `{key}`"))
}

fn parse_run(text: &str) -> Result<RunFigures, String> {
    // The run's object starts at `final_metrics` (a summary with the same
    // key names precedes it), which precedes the per-epoch `curve`.
    let fm = text
        .find("\"final_metrics\":")
        .ok_or("no `final_metrics`")?;
    let run = &text[fm..];
    let ranks = run.find("\"ranks\":").ok_or("no `sharded.ranks`")?;
    let per_rank = &run[ranks..];
    let r = RunFigures {
        wall_secs: first(run, "wall_secs")?,
        train_secs: first(run, "train_secs")?,
        test_auc: first(run, "test_auc")?,
        valid_auc: first(run, "valid_auc")?,
        freeze_step: numbers(run, "dense_freeze_step").first().copied(),
        dense_params: first(run, "dense_params")?,
        sparse: numbers(per_rank, "bytes_sent_sparse"),
        dense: numbers(per_rank, "bytes_sent_dense"),
        peak_rss: numbers(per_rank, "peak_rss_bytes"),
    };
    if r.sparse.is_empty() || r.sparse.len() != r.dense.len() || r.dense.len() != r.peak_rss.len() {
        return Err("per-rank figures missing or of unequal counts".into());
    }
    Ok(r)
}

/// `lo–hi` of `xs` scaled by `1/div`, with `digits` decimals.
fn range(xs: &[f64], div: f64, digits: usize) -> String {
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min) / div;
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max) / div;
    if (hi - lo).abs() < 0.5 * 10f64.powi(-(digits as i32)) {
        format!("{lo:.digits$}")
    } else {
        format!("{lo:.digits$}–{hi:.digits$}")
    }
}

/// The markdown table of one P: f32 Adam (`a`) against the compressed
/// optimizer `name` (`b`).
fn table(
    label: &str,
    np: usize,
    batch: usize,
    steps: usize,
    name: &str,
    a: &RunFigures,
    b: &RunFigures,
) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let st = steps as f64;
    let mut out = format!(
        "\n### tcp-{label}, {np} ranks, DeepFM tower {} dense parameters, {steps} steps of {batch}\n\n",
        a.dense_params
    );
    out.push_str(
        "| dense opt | wall s | train s | ms/step | test AUC | ΔAUC | sparse MiB/step/rank | dense MiB/step/rank | peak RSS/rank MiB | speed-up (wall) | speed-up (train) |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (name, r) in [("Adam, f32 all-reduce", a), (name, b)] {
        out.push_str(&format!(
            "| {name} | {:.1} | {:.1} | {:.1} | {:.5} | {:+.5} | {} | {} | {} | {:.2}× | {:.2}× |\n",
            r.wall_secs,
            r.train_secs,
            1000.0 * r.train_secs / st,
            r.test_auc,
            r.test_auc - a.test_auc,
            range(&r.sparse, st * MIB, 3),
            range(&r.dense, st * MIB, 3),
            range(&r.peak_rss, MIB, 0),
            a.wall_secs / r.wall_secs,
            a.train_secs / r.train_secs,
        ));
    }
    out
}

/// One interleaved round: the f32 run, then the 1-bit run, same seed.
#[derive(Debug, Clone, PartialEq)]
struct Round {
    seed: u64,
    f32: RunFigures,
    onebit: RunFigures,
}

/// The rounds (one row each, then the median and min–max of the
/// speed-ups and step times) and the seeds (each seed's first round: its
/// AUCs are deterministic, so every round of a seed has the same).
fn rounds_table(steps: usize, rounds: &[Round]) -> String {
    let st = steps as f64;
    let ms = |r: &RunFigures| 1000.0 * r.train_secs / st;
    let mut out = String::from(
        "\n| round | seed | f32 ms/step | compressed ms/step | f32 wall s | compressed wall s | speed-up (wall) | speed-up (train) |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let (mut wall, mut train, mut ms_a, mut ms_b) = (vec![], vec![], vec![], vec![]);
    for (i, r) in rounds.iter().enumerate() {
        let (w, t) = (
            r.f32.wall_secs / r.onebit.wall_secs,
            r.f32.train_secs / r.onebit.train_secs,
        );
        out.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {w:.2}× | {t:.2}× |\n",
            i + 1,
            r.seed,
            ms(&r.f32),
            ms(&r.onebit),
            r.f32.wall_secs,
            r.onebit.wall_secs,
        ));
        wall.push(w);
        train.push(t);
        ms_a.push(ms(&r.f32));
        ms_b.push(ms(&r.onebit));
    }
    let spread = |xs: &[f64], unit: &str, digits: usize| {
        format!(
            "**{:.digits$}{unit}** ({}{unit})",
            median(xs),
            range(xs, 1.0, digits)
        )
    };
    out.push_str(&format!(
        "| median (min–max) of {} | | {} | {} | | | {} | {} |\n",
        rounds.len(),
        spread(&ms_a, "", 1),
        spread(&ms_b, "", 1),
        spread(&wall, "×", 2),
        spread(&train, "×", 2),
    ));
    out.push_str(
        "\n| seed | compressed freeze step | valid AUC f32 / compressed | test AUC f32 / compressed | test ΔAUC |\n\
         |---:|---:|---:|---:|---:|\n",
    );
    let mut seen = Vec::new();
    let mut deltas = Vec::new();
    for r in rounds.iter().filter(|r| {
        let new = !seen.contains(&r.seed);
        seen.push(r.seed);
        new
    }) {
        let d = r.onebit.test_auc - r.f32.test_auc;
        deltas.push(d);
        out.push_str(&format!(
            "| {} | {} | {:.5} / {:.5} | {:.5} / {:.5} | {d:+.5} |\n",
            r.seed,
            r.onebit
                .freeze_step
                .map_or_else(|| "—".to_string(), |t| format!("{t:.0}")),
            r.f32.valid_auc,
            r.onebit.valid_auc,
            r.f32.test_auc,
            r.onebit.test_auc,
        ));
    }
    let mean = deltas.iter().sum::<f64>() / deltas.len() as f64;
    out.push_str(&format!(
        "| mean of {} | | | | {mean:+.5} |\n",
        deltas.len()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments() {
        let d = parse_args(&[]).unwrap();
        assert_eq!(d.rate.as_deref(), Some("1gbit"));
        assert_eq!(d.ranks, vec![2, 4]);
        assert_eq!((d.batch, d.examples), (BATCH, STEPS * BATCH));
        assert!(d.warmups.is_empty());
        assert_eq!((d.rounds, d.seeds.clone()), (1, vec![1]));
        let w = parse_args(&args(&["--warmup", "0.05"])).unwrap();
        assert_eq!(w.warmups, ["0.05"]);
        let w = parse_args(&args(&["--warmup", "auto"])).unwrap();
        assert_eq!(w.warmups, ["auto"]);
        assert!(parse_args(&args(&["--warmup", "1.5"])).is_err());
        assert!(parse_args(&args(&["--warmup", "Auto"])).is_err());
        let w = parse_args(&args(&["--warmup", "share"])).unwrap();
        assert_eq!(w.warmups, ["share"]);
        // A list: one 1-bit run per entry, in order; every entry checked.
        let w = parse_args(&args(&["--warmup", "auto, share,0.1"])).unwrap();
        assert_eq!(w.warmups, ["auto", "share", "0.1"]);
        assert!(parse_args(&args(&["--warmup", "auto,1.5"])).is_err());
        assert!(parse_args(&args(&["--warmup", "auto,"])).is_err());
        assert_eq!(d.model, "deepfm");
        let m = parse_args(&args(&["--model", "dlrm"])).unwrap();
        assert_eq!(m.model, "dlrm");
        assert!(parse_args(&args(&["--model", "fm"])).is_err());
        let r = parse_args(&args(&["--rounds", "5", "--seeds", "1, 2,3"])).unwrap();
        assert_eq!((r.rounds, r.seeds), (5, vec![1, 2, 3]));
        // `--steps` sizes the job at the batch given; it and `--examples`
        // exclude each other.
        let s = parse_args(&args(&["--steps", "600", "--batch", "512"])).unwrap();
        assert_eq!((s.examples, s.batch), (600 * 512, 512));
        assert!(parse_args(&args(&["--steps", "0"])).is_err());
        assert!(parse_args(&args(&["--steps", "6", "--examples", "60"])).is_err());
        // Without --rounds, one round per seed.
        let r = parse_args(&args(&["--seeds", "4,5"])).unwrap();
        assert_eq!((r.rounds, r.seeds), (2, vec![4, 5]));
        let b = parse_args(&args(&["--batch", "256"])).unwrap();
        assert_eq!((b.batch, b.examples), (256, STEPS * 256));
        let o = parse_args(&args(&[
            "--net",
            "unlimited",
            "--np",
            "4",
            "--examples",
            "4096",
        ]))
        .unwrap();
        assert_eq!(
            o,
            Opts {
                rate: None,
                ranks: vec![4],
                batch: BATCH,
                examples: 4096,
                steps: 0,
                warmups: Vec::new(),
                rounds: 1,
                seeds: vec![1],
                model: "deepfm".into(),
                compressed: vec!["zero-one-adam".into()],
            }
        );
        let c = parse_args(&args(&["--compressed", "onebit-adam, zero-one-adam"])).unwrap();
        assert_eq!(c.compressed, ["onebit-adam", "zero-one-adam"]);
        assert_eq!(display_name("zero-one-adam"), "0/1 Adam");
        for bad in [
            &["--net"][..],
            &["--net", "fast"],
            &["--np", "1"],
            &["--np", "2,x"],
            &["--examples", "0"],
            &["--batch", "-1"],
            &["--rounds", "0"],
            &["--rounds"],
            &["--seeds", "1,x"],
            &["--seeds", ""],
            &["--rounds", "2", "--seeds", "1,2,3"],
            &["--compressed", "adam"],
            &["--compressed", "zero-one-adam,"],
            &["--bench"],
        ] {
            assert!(parse_args(&args(bad)).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn job_args_name_the_model_and_only_deepfm_sets_the_tower() {
        let d = job_args("deepfm", 4, "adam", 1024, 204_800, 2);
        let l = job_args("dlrm", 4, "adam", 1024, 204_800, 2);
        let at = |v: &[String], k: &str| v.iter().position(|a| a == k).map(|i| v[i + 1].clone());
        assert_eq!(at(&d, "--model").as_deref(), Some("deepfm"));
        assert_eq!(at(&d, "--mlp").as_deref(), Some(MLP));
        assert_eq!(at(&l, "--model").as_deref(), Some("dlrm"));
        assert_eq!(at(&l, "--mlp"), None);
        for v in [&d, &l] {
            assert_eq!(at(v, "--seed").as_deref(), Some("2"));
            assert_eq!(at(v, "--workers").as_deref(), Some("4"));
            assert_eq!(v.last().map(String::as_str), Some("--json"));
        }
    }

    /// The shape `basis train --json` writes (fields trimmed).
    const JSON: &str = r#"{"summary":{"wall_secs":{"mean":1.0},"test_auc":{"mean":0.2}},
      "runs":[{"optimizer":"basis","final_metrics":{"epoch":1,"valid_auc":0.74,"test_auc":0.75,"test_loss":0.5},
      "curve":[{"epoch":1,"test_auc":0.1}],"wall_secs":12.5,"dense_params":1296385,"dense_freeze_step":50,
      "sharded":{"ranks":[{"rank":0,"bytes_sent_sparse":1048576,"bytes_sent_dense":2e6,"peak_rss_bytes":104857600},
      {"rank":1,"bytes_sent_sparse":2097152,"bytes_sent_dense":3e6,"peak_rss_bytes":209715200}],
      "train_secs":10.0}}]}"#;

    #[test]
    fn parses_the_json_of_a_run() {
        let r = parse_run(JSON).unwrap();
        assert_eq!(r.wall_secs, 12.5);
        assert_eq!(r.train_secs, 10.0);
        assert_eq!(r.test_auc, 0.75, "final, not the curve's");
        assert_eq!((r.valid_auc, r.freeze_step), (0.74, Some(50.0)));
        let f32 = parse_run(&JSON.replace("\"dense_freeze_step\":50,", "")).unwrap();
        assert_eq!(f32.freeze_step, None);
        assert_eq!(r.sparse, vec![1048576.0, 2097152.0]);
        assert_eq!(r.dense, vec![2e6, 3e6]);
        assert_eq!(r.peak_rss, vec![104857600.0, 209715200.0]);
        assert!(parse_run(&JSON.replace("\"ranks\"", "\"x\"")).is_err());
        assert!(parse_run(&JSON.replace("12.5", "\"a\"")).is_err());
        assert!(parse_run(&JSON.replace(",\"peak_rss_bytes\":209715200", "")).is_err());
    }

    #[test]
    fn table_rows() {
        let a = parse_run(JSON).unwrap();
        let mut b = a.clone();
        b.wall_secs = 2.5;
        b.train_secs = 2.0;
        b.test_auc = 0.7495;
        let t = table("1gbit", 2, 1024, 10, "1-bit Adam", &a, &b);
        let rows: Vec<&str> = t.lines().filter(|l| l.starts_with("| ")).collect();
        assert_eq!(rows.len(), 3, "{t}");
        // 1 MiB and 2 MiB over 10 steps; RSS 100–200 MiB.
        assert!(rows[1].contains("| 0.100–0.200 |"), "{}", rows[1]);
        assert!(rows[1].contains("| 100–200 |"), "{}", rows[1]);
        assert!(rows[1].contains("| 1.00× | 1.00× |"), "{}", rows[1]);
        assert!(
            rows[2].contains("| 200.0 | 0.74950 | -0.00050 |"),
            "{}",
            rows[2]
        );
        assert!(rows[2].contains("| 5.00× | 5.00× |"), "{}", rows[2]);
    }

    #[test]
    fn rounds_table_reports_the_median_and_one_row_per_seed() {
        let a = parse_run(JSON).unwrap(); // wall 12.5, train 10
        let round = |seed, wall: f64, auc| {
            let mut b = a.clone();
            b.wall_secs = wall;
            b.train_secs = wall - 2.5;
            b.test_auc = auc;
            let mut f = a.clone();
            f.freeze_step = None;
            Round {
                seed,
                f32: f,
                onebit: b,
            }
        };
        // Wall speed-ups 2.5×, 5×, 1.25×: median 2.5× over 1.25–5.
        let rounds = [
            round(1, 5.0, 0.7495),
            round(2, 2.5, 0.7510),
            round(1, 10.0, 0.7495),
        ];
        let t = rounds_table(10, &rounds);
        let rows: Vec<&str> = t.lines().filter(|l| l.starts_with("| ")).collect();
        // Header, 3 rounds, median; header, 2 seeds, mean.
        assert_eq!(rows.len(), 1 + 3 + 1 + 1 + 2 + 1, "{t}");
        assert!(
            rows[1].starts_with("| 1 | 1 | 1000.0 | 250.0 |"),
            "{}",
            rows[1]
        );
        assert!(rows[1].ends_with("| 2.50× | 4.00× |"), "{}", rows[1]);
        assert!(
            rows[4].contains("| **2.50×** (1.25–5.00×) |"),
            "{}",
            rows[4]
        );
        assert!(
            rows[4].contains("| **1000.0** (1000.0) | **250.0** (0.0–750.0) |"),
            "{}",
            rows[4]
        );
        // Seeds 1 and 2 once each (seed 1's second round is not repeated).
        assert!(
            rows[6].contains("| 1 | 50 | 0.74000 / 0.74000 | 0.75000 / 0.74950 | -0.00050 |"),
            "{}",
            rows[6]
        );
        assert!(rows[7].starts_with("| 2 | 50 |"), "{}", rows[7]);
        assert!(
            rows[8].contains("| mean of 2 | | | | +0.00025 |"),
            "{}",
            rows[8]
        );
    }
}
