//! `cargo xtask bench --e2e [--lines N] [--models fm,deepfm] [--threads 1,2]
//! [--rounds R] [--mlp W,..,1]`: the whole training job against a PyTorch
//! implementation of the same models on the same file, in the same run
//! (issue 28 item 6). Opt-in, never in CI: it installs torch (~3 GB) into
//! `target/peers/venv` as `bench --peers` does.
//!
//! `xtask/peers_e2e.py gen` writes one Criteo-format TSV (`--lines`, default
//! 500 000) under `target/bench-e2e/`; every round then runs, per model and
//! thread count, `basis train --format criteo --data FILE --model M --opt
//! adam --epochs 1 --threads T --json` and `peers_e2e.py train` (stock
//! PyTorch: `SparseAdam` on the rows, fused `Adam` on the tower, same batch,
//! split, vocabulary and model; its docstring lists what "same" means),
//! alternating which side goes first. Two rates per side:
//!
//! - **whole job**: lines / process wall time (parse, vocabulary, training,
//!   evaluation: what a user waits for);
//! - **train + eval**: training examples / the time after loading (ours: the
//!   JSON's `wall_secs`; torch: its `wall_secs − load_secs`), so parsing in
//!   Python does not decide the comparison.
//!
//! Medians over rounds of the per-round ratios; the 1-minute load average
//! is printed with every round. The test AUCs should agree to noise (each
//! side draws its own initial values and batch order).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::stats::{loadavg, median, number_after};
use crate::util::{self, root};

/// One side's figures from one run.
#[derive(Clone, Copy)]
struct Run {
    /// Process wall seconds.
    process: f64,
    /// Seconds of training and evaluation (after loading).
    train_eval: f64,
    test_auc: f64,
}

struct Opts {
    lines: u64,
    models: Vec<String>,
    threads: Vec<usize>,
    rounds: usize,
    mlp: String,
}

fn parse_args(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        lines: 500_000,
        models: vec!["fm".into(), "deepfm".into()],
        threads: vec![1, 2],
        rounds: 3,
        mlp: "512,256,1".into(),
    };
    let usage =
        "bench --e2e [--lines N] [--models fm,deepfm] [--threads 1,2] [--rounds R] [--mlp W,..,1]";
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |what: &str| {
            it.next()
                .cloned()
                .ok_or(format!("{what} needs a value ({usage})"))
        };
        match a.as_str() {
            "--e2e" => {}
            "--lines" => {
                o.lines = value("--lines")?
                    .parse()
                    .ok()
                    .filter(|&n| n >= 100)
                    .ok_or("--lines needs a number >= 100")?;
            }
            "--rounds" => {
                o.rounds = value("--rounds")?
                    .parse()
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or("--rounds needs a positive number")?;
            }
            "--models" => {
                let list = value("--models")?;
                o.models = list.split(',').map(str::to_owned).collect();
                if o.models.iter().any(|m| m != "fm" && m != "deepfm") {
                    return Err(format!("--models {list}: each one of fm, deepfm"));
                }
            }
            "--threads" => {
                o.threads = value("--threads")?
                    .split(',')
                    .map(|t| t.parse().ok().filter(|&t| t >= 1))
                    .collect::<Option<_>>()
                    .ok_or("--threads needs positive numbers, e.g. 1,2")?;
            }
            "--mlp" => {
                let m = value("--mlp")?;
                let ws: Option<Vec<u32>> = m
                    .split(',')
                    .map(|w| w.parse().ok().filter(|&w| w >= 1))
                    .collect();
                if ws.as_ref().and_then(|w| w.last()) != Some(&1) {
                    return Err(format!("--mlp {m}: positive widths ending in 1"));
                }
                o.mlp = m;
            }
            other => return Err(format!("unknown argument `{other}` ({usage})")),
        }
    }
    Ok(o)
}

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let o = parse_args(args)?;
    let root = root();
    util::run(util::cargo().args(["build", "--release", "-p", "basisopt-cli"]))?;
    let python = crate::peers::ensure_venv(&root.join("target/peers/venv"))?;
    let script = root.join("xtask/peers_e2e.py");
    let dir = root.join("target/bench-e2e");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let data = dir.join(format!("criteo-{}.tsv", o.lines));
    if !data.exists() {
        let tmp = dir.join("criteo.tsv.part");
        util::run(
            Command::new(&python)
                .arg(&script)
                .args([
                    "gen",
                    "--lines",
                    &o.lines.to_string(),
                    "--seed",
                    "1",
                    "--out",
                ])
                .arg(&tmp),
        )?;
        std::fs::rename(&tmp, &data).map_err(|e| e.to_string())?;
    }
    let basis = root.join("target/release/basis");
    let json = dir.join("run.json");
    let train_examples = o.lines as f64 * 0.8;
    let mut results: BTreeMap<(String, usize), Vec<(Run, Run)>> = BTreeMap::new();
    for round in 0..o.rounds {
        println!("round {}/{}: load {}", round + 1, o.rounds, loadavg());
        for model in &o.models {
            for &t in &o.threads {
                let ours = || ours(&basis, &data, model, t, &o.mlp, &json);
                let torch = || torch(&python, &script, &data, model, t, &o.mlp);
                // Alternate the order so neither side always runs on a
                // cache or page cache the other warmed.
                let (a, b) = if round % 2 == 0 {
                    let a = ours()?;
                    (a, torch()?)
                } else {
                    let b = torch()?;
                    (ours()?, b)
                };
                println!(
                    "  {model:6} threads {t}: ours {:.2} s ({:.2} s train+eval, AUC {:.4}), torch {:.2} s ({:.2} s, AUC {:.4})",
                    a.process, a.train_eval, a.test_auc, b.process, b.train_eval, b.test_auc
                );
                results.entry((model.clone(), t)).or_default().push((a, b));
            }
        }
    }
    println!("load after: {}\n", loadavg());
    print!("{}", table(&results, o.lines as f64, train_examples));
    Ok(())
}

/// `basis train` on the file; the process is timed from outside.
fn ours(
    basis: &Path,
    data: &Path,
    model: &str,
    threads: usize,
    mlp: &str,
    json: &Path,
) -> Result<Run, String> {
    let start = Instant::now();
    let out = Command::new(basis)
        .args(["-q", "train", "--format", "criteo", "--data"])
        .arg(data)
        .args([
            "--model", model, "--mlp", mlp, "--opt", "adam", "--epochs", "1",
        ])
        .args(["--threads", &threads.to_string(), "--json"])
        .arg(json)
        .output()
        .map_err(|e| format!("{}: {e}", basis.display()))?;
    let process = start.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(format!(
            "basis {model} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = std::fs::read_to_string(json).map_err(|e| e.to_string())?;
    let field =
        |key: &str| number_after(&text, key).ok_or(format!("no `{key}` in {}", json.display()));
    Ok(Run {
        process,
        train_eval: field("\"wall_secs\"")?,
        test_auc: field("\"test_auc\"")?,
    })
}

/// `peers_e2e.py train` on the file; it prints one JSON line.
fn torch(
    python: &Path,
    script: &Path,
    data: &Path,
    model: &str,
    threads: usize,
    mlp: &str,
) -> Result<Run, String> {
    let start = Instant::now();
    let out = Command::new(python)
        .arg(script)
        .args(["train", "--data"])
        .arg(data)
        .args([
            "--model",
            model,
            "--mlp",
            mlp,
            "--threads",
            &threads.to_string(),
        ])
        // One BLAS/OpenMP pool of `threads`, as `torch.set_num_threads` asks.
        .env("OMP_NUM_THREADS", threads.to_string())
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    let process = start.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(format!(
            "torch {model} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    parse_torch(&String::from_utf8_lossy(&out.stdout), process)
}

fn parse_torch(text: &str, process: f64) -> Result<Run, String> {
    let field = |key: &str| {
        number_after(text, key).ok_or(format!("no `{key}` in the torch output: {text}"))
    };
    Ok(Run {
        process,
        train_eval: field("\"wall_secs\"")? - field("\"load_secs\"")?,
        test_auc: field("\"test_auc\"")?,
    })
}

/// The markdown table: per (model, threads) medians and median ratios.
fn table(results: &BTreeMap<(String, usize), Vec<(Run, Run)>>, lines: f64, train: f64) -> String {
    let mut s = String::from(
        "| model | threads | ours, whole job ex/s | torch, whole job ex/s | ours / torch (whole job) \
         | ours, train+eval ex/s | torch, train+eval ex/s | ours / torch (train+eval) | test AUC ours / torch | rounds |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---|---:|\n",
    );
    for ((model, t), runs) in results {
        let med = |f: &dyn Fn(&(Run, Run)) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        s += &format!(
            "| {model} | {t} | {:.0} | {:.0} | {:.2}× | {:.0} | {:.0} | {:.2}× | {:.4} / {:.4} | {} |\n",
            lines / med(&|r| r.0.process),
            lines / med(&|r| r.1.process),
            med(&|r| r.1.process / r.0.process),
            train / med(&|r| r.0.train_eval),
            train / med(&|r| r.1.train_eval),
            med(&|r| r.1.train_eval / r.0.train_eval),
            med(&|r| r.0.test_auc),
            med(&|r| r.1.test_auc),
            runs.len()
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn arguments_are_checked() {
        let o = parse_args(&args(&[
            "--e2e",
            "--lines",
            "1000",
            "--threads",
            "1,2,3",
            "--rounds",
            "5",
        ]))
        .unwrap();
        assert_eq!(
            (o.lines, o.threads.clone(), o.rounds),
            (1000, vec![1, 2, 3], 5)
        );
        assert_eq!(o.models, ["fm", "deepfm"]);
        for bad in [
            &["--lines", "5"][..],
            &["--models", "dlrm"],
            &["--threads", "0"],
            &["--rounds", "0"],
            &["--mlp", "64,32"],
            &["--mlp"],
            &["--fast"],
        ] {
            assert!(parse_args(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn reads_the_torch_line_and_tables_median_ratios() {
        let r = parse_torch(r#"{"peer": "torch 2", "load_secs": 1.5, "train_secs": 3.0, "wall_secs": 4.0, "valid_auc": 0.7, "test_auc": 0.75}"#, 4.5).unwrap();
        assert_eq!((r.process, r.train_eval, r.test_auc), (4.5, 2.5, 0.75));
        assert!(parse_torch("Traceback ...", 1.0).is_err());
        let run = |p, t| Run {
            process: p,
            train_eval: t,
            test_auc: 0.7,
        };
        let mut m = BTreeMap::new();
        // Ratios torch/ours per round: whole 2, 4, 3 -> median 3; train 1, 1, 5 -> 1.
        m.insert(
            ("fm".to_owned(), 1),
            vec![
                (run(1.0, 1.0), run(2.0, 1.0)),
                (run(1.0, 2.0), run(4.0, 2.0)),
                (run(2.0, 1.0), run(6.0, 5.0)),
            ],
        );
        let t = table(&m, 100.0, 80.0);
        assert!(
            t.contains("| fm | 1 | 100 | 25 | 3.00× | 80 | 40 | 1.00× | 0.7000 / 0.7000 | 3 |"),
            "{t}"
        );
    }
}
