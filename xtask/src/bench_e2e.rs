//! `cargo xtask bench --e2e [--lines N] [--models fm,deepfm] [--threads 1,2]
//! [--rounds R] [--mlp W,..,1] [--no-peer]`: the whole training job against a PyTorch
//! implementation of the same models on the same file, in the same run
//! (issue 28 item 6). Opt-in, never in CI: it installs torch (~3 GB) into
//! `target/peers/venv` as `bench --peers` does. `--no-peer` runs our side
//! alone (no venv; the file is generated with the `python3` on `PATH`,
//! which needs numpy): for the thread-count comparison.
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
//!
//! A second table compares our own runs at each thread count with the
//! first count of the same round (paired ratios of the train + eval time,
//! their min–max, the process's CPU seconds from `/proc/self/stat`'s
//! waited-for-children counters, Linux only) and checks that every run
//! trained the same model (`model_crc32`): `--threads` must not change a bit.

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
    /// The process's user + system CPU seconds (NaN when unknown).
    cpu: f64,
    /// The trained model's checksum (ours only; 0 for torch).
    crc: u64,
}

struct Opts {
    lines: u64,
    models: Vec<String>,
    threads: Vec<usize>,
    rounds: usize,
    mlp: String,
    /// Skip the PyTorch side.
    no_peer: bool,
}

fn parse_args(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        lines: 500_000,
        models: vec!["fm".into(), "deepfm".into()],
        threads: vec![1, 2],
        rounds: 3,
        mlp: "512,256,1".into(),
        no_peer: false,
    };
    let usage = "bench --e2e [--lines N] [--models fm,deepfm] [--threads 1,2] [--rounds R] [--mlp W,..,1] [--no-peer]";
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |what: &str| {
            it.next()
                .cloned()
                .ok_or(format!("{what} needs a value ({usage})"))
        };
        match a.as_str() {
            "--e2e" => {}
            "--no-peer" => o.no_peer = true,
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
    let python = if o.no_peer {
        std::path::PathBuf::from("python3")
    } else {
        crate::peers::ensure_venv(&root.join("target/peers/venv"))?
    };
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
    let mut mine: BTreeMap<String, Vec<Vec<Run>>> = BTreeMap::new();
    for round in 0..o.rounds {
        println!("round {}/{}: load {}", round + 1, o.rounds, loadavg());
        for model in &o.models {
            // Thread counts in turn, reversed every other round, so no count
            // always runs first (the machine's load drifts).
            let mut order: Vec<usize> = (0..o.threads.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            let mut this_round = vec![None; o.threads.len()];
            for i in order {
                let t = o.threads[i];
                let ours = || ours(&basis, &data, model, t, &o.mlp, &json);
                if o.no_peer {
                    let a = ours()?;
                    println!(
                        "  {model:6} threads {t}: ours {:.2} s ({:.2} s train+eval, {:.2} s CPU, AUC {:.4}, crc {:08x})",
                        a.process, a.train_eval, a.cpu, a.test_auc, a.crc
                    );
                    this_round[i] = Some(a);
                    continue;
                }
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
                this_round[i] = Some(a);
            }
            let runs = this_round.into_iter().flatten().collect();
            mine.entry(model.clone()).or_default().push(runs);
        }
    }
    println!("load after: {}\n", loadavg());
    if !results.is_empty() {
        print!("{}", table(&results, o.lines as f64, train_examples));
    }
    print!("\n{}", threads_table(&mine, &o.threads, train_examples));
    Ok(())
}

/// Our runs per model: per thread count, medians over rounds, and the
/// ratio to the first count in the same round (paired; median and min–max);
/// `same bits` says whether every run of the model had one checksum.
fn threads_table(mine: &BTreeMap<String, Vec<Vec<Run>>>, threads: &[usize], train: f64) -> String {
    let mut s = format!(
        "| model | threads | train+eval s (median) | train ex/s | speed-up over {} thread(s), train+eval (paired median, min–max) | whole job, same | CPU s (median) | same bits |\n\
         |---|---:|---:|---:|---:|---:|---:|---|\n",
        threads.first().copied().unwrap_or(1)
    );
    for (model, rounds) in mine {
        let crcs: Vec<u64> = rounds.iter().flatten().map(|r| r.crc).collect();
        let same = crcs.windows(2).all(|w| w[0] == w[1]);
        for (i, t) in threads.iter().enumerate() {
            let col: Vec<(Run, Run)> = rounds
                .iter()
                .filter(|r| r.len() == threads.len())
                .map(|r| (r[0], r[i]))
                .collect();
            let med =
                |f: &dyn Fn(&(Run, Run)) -> f64| median(&col.iter().map(f).collect::<Vec<_>>());
            let ratios: Vec<f64> = col
                .iter()
                .map(|(a, b)| a.train_eval / b.train_eval)
                .collect();
            let (lo, hi) = ratios
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
                    (lo.min(x), hi.max(x))
                });
            s += &format!(
                "| {model} | {t} | {:.3} | {:.0} | {:.2}× ({lo:.2}–{hi:.2}) | {:.2}× | {:.2} | {} |\n",
                med(&|r| r.1.train_eval),
                train / med(&|r| r.1.train_eval),
                median(&ratios),
                med(&|r| r.0.process / r.1.process),
                med(&|r| r.1.cpu),
                if same { "yes" } else { "NO" }
            );
        }
    }
    s
}

/// User + system CPU seconds of the children this process has waited for
/// (`/proc/self/stat` fields 16 and 17, in clock ticks of 1/100 s: the
/// Linux default `USER_HZ`); NaN where there is no such file.
fn children_cpu() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    // The command name (field 2) is parenthesised and may hold spaces.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return f64::NAN;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3, so field n is `f[n - 3]`.
    match (
        f.get(13).and_then(|x| x.parse::<f64>().ok()),
        f.get(14).and_then(|x| x.parse::<f64>().ok()),
    ) {
        (Some(u), Some(s)) => (u + s) / 100.0,
        _ => f64::NAN,
    }
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
    let (start, cpu0) = (Instant::now(), children_cpu());
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
    let cpu = children_cpu() - cpu0;
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
        cpu,
        crc: field("\"model_crc32\"")? as u64,
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
        cpu: f64::NAN,
        crc: 0,
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
            "--no-peer",
        ]))
        .unwrap();
        assert!(o.no_peer);
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
            cpu: 1.0,
            crc: 7,
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
        // Ours by thread count: per round [1 thread, 2 threads]; train+eval
        // ratios 2/1, 3/1.5, 4/1 -> median 2, min 2, max 4.
        let mine = BTreeMap::from([(
            "fm".to_owned(),
            vec![
                vec![run(3.0, 2.0), run(2.0, 1.0)],
                vec![run(3.0, 3.0), run(2.0, 1.5)],
                vec![run(3.0, 4.0), run(1.0, 1.0)],
            ],
        )]);
        let t = threads_table(&mine, &[1, 2], 80.0);
        assert!(
            t.contains("| fm | 1 | 3.000 | 27 | 1.00× (1.00–1.00) | 1.00× | 1.00 | yes |"),
            "{t}"
        );
        assert!(
            t.contains("| fm | 2 | 1.000 | 80 | 2.00× (2.00–4.00) | 1.50× | 1.00 | yes |"),
            "{t}"
        );
        let mut other = mine.clone();
        other.get_mut("fm").unwrap()[1][1].crc = 8;
        assert!(threads_table(&other, &[1, 2], 80.0).contains("| NO |"));
        let t = table(&m, 100.0, 80.0);
        assert!(
            t.contains("| fm | 1 | 100 | 25 | 3.00× | 80 | 40 | 1.00× | 0.7000 / 0.7000 | 3 |"),
            "{t}"
        );
    }
}
