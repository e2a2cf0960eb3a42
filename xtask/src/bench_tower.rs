//! `cargo xtask bench --tower [--rounds R] [--old BIN] [--threads 1,2]
//! [--examples N] [--models fm,deepfm,dlrm]`: interleaved end-to-end
//! training throughput of the FM, DeepFM and DLRM models (all three unless
//! `--models` names fewer) at each `--threads` count (issue 28 item 6), and,
//! with `--old`, the same runs of another `basis` binary (e.g. one built
//! from main) as a paired baseline.
//!
//! Every round runs each (model, threads, binary) once, in an order that
//! reverses every other round, so a burst of load from elsewhere hits all
//! sides alike; the table gives medians over rounds and the median of the
//! per-round ratios to the one-thread run of the same binary and to the old
//! binary. Each run is `basis compare -q --format criteo-synth
//! --synthetic-examples N --epochs 1 --dim 16 --opt basis --model M
//! [--threads T] --json FILE`; its `wall_secs` covers training and
//! evaluation, not data generation, and the examples/s are training
//! examples (80 % of N) over it. The model's CRC32 is compared across
//! thread counts and binaries: the tower's results are the same bits at any
//! thread count, and a change that keeps the arithmetic keeps them equal to
//! the old binary's too. The 1-minute load average is printed with every
//! round. Each binary is asked (`compare --help`) whether it knows
//! `--threads`; one that predates it is run without it (one thread) at
//! every count.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::stats::{loadavg, median, number_after};
use crate::util::{self, root};

const MODELS: [&str; 3] = ["fm", "deepfm", "dlrm"];

/// One measured run.
struct Run {
    wall: f64,
    crc: u64,
    auc: f64,
}

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut rounds = 5usize;
    let mut old: Option<PathBuf> = None;
    let mut threads = vec![1usize, 2];
    let mut examples = 100_000u64;
    let mut models: Vec<&str> = MODELS.to_vec();
    let mut it = args.iter();
    let number = |v: Option<&String>, what: &str| -> Result<u64, String> {
        v.and_then(|v| v.parse().ok())
            .filter(|&n| n >= 1)
            .ok_or_else(|| format!("{what} needs a positive number"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--tower" => {}
            "--rounds" => rounds = number(it.next(), "--rounds")? as usize,
            "--examples" => examples = number(it.next(), "--examples")?,
            "--old" => old = Some(it.next().ok_or("--old needs a binary")?.into()),
            "--threads" => {
                threads = it
                    .next()
                    .ok_or("--threads needs a list, e.g. 1,2")?
                    .split(',')
                    .map(|t| t.parse().ok().filter(|&t| t >= 1))
                    .collect::<Option<_>>()
                    .ok_or("--threads needs positive numbers, e.g. 1,2")?;
            }
            "--models" => {
                let list = it.next().ok_or("--models needs a list, e.g. fm,deepfm")?;
                models = list
                    .split(',')
                    .map(|m| MODELS.iter().copied().find(|&k| k == m))
                    .collect::<Option<_>>()
                    .ok_or(format!("--models {list}: each one of fm, deepfm, dlrm"))?;
            }
            other => {
                return Err(format!(
                    "unknown argument `{other}` (bench --tower [--rounds R] [--old BIN] \
                     [--threads 1,2] [--examples N] [--models fm,deepfm,dlrm])"
                ));
            }
        }
    }
    let root = root();
    util::run(util::cargo().args(["build", "--release", "-p", "basisopt-cli"]))?;
    // A copy, so a rebuild during the run cannot change the binary.
    let dir = root.join("target/bench-tower");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let new = dir.join("basis-new");
    std::fs::copy(root.join("target/release/basis"), &new).map_err(|e| e.to_string())?;
    let mut bins = vec![("new", new)];
    if let Some(o) = old {
        bins.push(("old", o));
    }
    // Asked of every binary, the new one included: an old binary that knows
    // `--threads` must get it, or its "1 thread" runs use all cores.
    let mut knows_threads = BTreeMap::new();
    for (name, bin) in &bins {
        knows_threads.insert(*name, knows_threads_flag(bin)?);
    }
    let mut jobs = Vec::new();
    for &model in &models {
        for &t in &threads {
            for (name, bin) in &bins {
                jobs.push((model, t, *name, bin.clone()));
            }
        }
    }
    let mut results: BTreeMap<(&str, usize, &str), Vec<Run>> = BTreeMap::new();
    let json = dir.join("run.json");
    for round in 0..rounds {
        println!("round {}/{rounds}: load {}", round + 1, loadavg());
        let order: Vec<_> = if round % 2 == 0 {
            jobs.iter().collect()
        } else {
            jobs.iter().rev().collect()
        };
        for (model, t, name, bin) in order {
            let r = one(bin, knows_threads[name], model, *t, examples, &json)?;
            println!(
                "  {model:6} {name} threads {t}: {:.3} s, crc {:08x}, test AUC {:.5}",
                r.wall, r.crc, r.auc
            );
            results.entry((model, *t, name)).or_default().push(r);
        }
    }
    println!("load after: {}", loadavg());
    report(&results, &threads, &bins, examples);
    Ok(())
}

/// Whether `bin compare --help` lists `--threads`.
fn knows_threads_flag(bin: &Path) -> Result<bool, String> {
    let out = Command::new(bin)
        .args(["compare", "--help"])
        .output()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(format!("{} compare --help failed", bin.display()));
    }
    Ok(help_lists_threads(&String::from_utf8_lossy(&out.stdout)))
}

/// `--threads` as an option of its own in a help text (not `--threads-x`).
fn help_lists_threads(help: &str) -> bool {
    help.match_indices("--threads").any(|(at, m)| {
        let next = help[at + m.len()..].chars().next();
        !matches!(next, Some(c) if c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

/// One `basis compare` run; `threads_flag`: the binary knows `--threads`.
fn one(
    bin: &Path,
    threads_flag: bool,
    model: &str,
    threads: usize,
    examples: u64,
    json: &Path,
) -> Result<Run, String> {
    let mut cmd = Command::new(bin);
    cmd.args([
        "compare",
        "-q",
        "--format",
        "criteo-synth",
        "--synthetic-examples",
    ])
    .arg(examples.to_string())
    .args([
        "--epochs", "1", "--dim", "16", "--opt", "basis", "--model", model,
    ]);
    if threads_flag {
        cmd.args(["--threads", &threads.to_string()]);
    }
    cmd.arg("--json").arg(json);
    let out = cmd
        .output()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} {model} failed: {}",
            bin.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = std::fs::read_to_string(json).map_err(|e| e.to_string())?;
    let field = |key: &str| number_after(&text, key).ok_or(format!("no `{key}` in the JSON"));
    Ok(Run {
        wall: field("\"wall_secs\"")?,
        crc: field("\"model_crc32\"")? as u64,
        auc: field("\"test_auc\"")?,
    })
}

fn report(
    results: &BTreeMap<(&str, usize, &str), Vec<Run>>,
    threads: &[usize],
    bins: &[(&str, PathBuf)],
    examples: u64,
) {
    let train = examples as f64 * 0.8;
    println!(
        "\n| model | binary | threads | wall s (median) | train ex/s | speed-up over its 1 thread (paired median) \
         | speed-up over old, same threads (paired median) | test AUC | same bits as new@1 |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---|");
    for model in MODELS {
        let Some(base) = results.get(&(model, threads[0], "new")) else {
            continue;
        };
        for &t in threads {
            for (name, _) in bins {
                let Some(rs) = results.get(&(model, t, name)) else {
                    continue;
                };
                let wall = median(&rs.iter().map(|r| r.wall).collect::<Vec<_>>());
                let own1 = results.get(&(model, threads[0], name));
                let ratio = |other: Option<&Vec<Run>>| {
                    other.map_or("—".to_owned(), |o| {
                        let r = median(
                            &o.iter()
                                .zip(rs)
                                .map(|(a, b)| a.wall / b.wall)
                                .collect::<Vec<_>>(),
                        );
                        format!("{r:.2}×")
                    })
                };
                let vs_old = if *name == "new" {
                    ratio(results.get(&(model, t, "old")))
                } else {
                    "—".to_owned()
                };
                let same = rs.iter().all(|r| r.crc == base[0].crc);
                println!(
                    "| {model} | {name} | {t} | {wall:.3} | {:.0} | {} | {vs_old} | {:.5} | {} |",
                    train / wall,
                    ratio(own1),
                    rs[0].auc,
                    if same { "yes" } else { "NO" }
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_threads_option_in_a_help_text() {
        assert!(help_lists_threads("  --threads <N>  worker threads"));
        assert!(help_lists_threads("      --threads\n"));
        assert!(!help_lists_threads("  --threads-per-rank <N>"));
        assert!(!help_lists_threads("  --workers <P>"));
    }
}
