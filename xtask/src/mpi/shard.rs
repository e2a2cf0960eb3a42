//! The sharded-training determinism check of `cargo xtask mpi`: a
//! row-sharded `basis train` under `mpirun -np N` must give the bits
//! (`model_crc32`) of the same run over `LocalComm` threads, for N = 2, 3, 4,
//! with the FM, with DeepFM (a tower trained by 1-bit Adam), and with the FM
//! over the streamed Criteo-like generator (`--format criteo-synth --stream`).
//! Then `--dense-overlap on` (1-bit Adam's split step, MPI on a
//! communication thread) under `mpirun` must give the bits of
//! `--dense-overlap off` over `LocalComm`, sharded and replicated, with one
//! tower group and with a group per layer.

use super::{CHECK_RANKS, Transport, mpirun, outer, target_dir};
use crate::util::{self, cargo};
use core::time::Duration;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Wall-clock limit of one sharded `mpirun` (the run takes a few seconds).
const LIMIT: Duration = Duration::from_secs(120);

/// The models checked: the FM, DeepFM with a small tower (the default 0/1
/// Adam; 1-bit Adam is [`OVERLAP_MODEL`]'s), the FM over the
/// streamed source (each rank generates its share of every batch itself),
/// and the FM with bf16 rows (stochastic rounding keyed by id and step).
const MODELS: [&[&str]; 4] = [
    &["--model", "fm"],
    &["--model", "deepfm", "--mlp", "32,1", "--dense-lr", "0.001"],
    &["--model", "fm", "--format", "criteo-synth", "--stream"],
    &["--model", "fm", "--row-precision", "bf16"],
];

/// A small run: 20 000 synthetic examples, one epoch.
pub(super) const ARGS: [&str; 10] = [
    "-q",
    "train",
    "--shard",
    "rows",
    "--synthetic-examples",
    "20000",
    "--epochs",
    "1",
    "--opt",
    "basis",
];

/// The overlap check's model: DeepFM, two hidden layers (three groups with
/// `--dense-groups layer`), 1-bit Adam (the one optimizer that overlaps)
/// with a warm-up that ends mid-run so both stages run.
const OVERLAP_MODEL: [&str; 10] = [
    "--model",
    "deepfm",
    "--mlp",
    "32,16,1",
    "--dense-lr",
    "0.001",
    "--dense-opt",
    "onebit-adam",
    "--dense-warmup",
    "0.3",
];

/// Build `basis` with the `mpi` feature (the `test` profile) and return its path.
pub(super) fn build() -> Result<PathBuf, String> {
    util::run(cargo().args([
        "build",
        "-p",
        "basisopt-cli",
        "--features",
        "mpi",
        "--profile",
        "test",
    ]))?;
    Ok(target_dir().join("debug/basis"))
}

/// Compare MPI with `LocalComm` for every model on every rank count, with
/// the run files in `dir`.
pub(super) fn check(exe: &Path, dir: &Path) -> Result<(), String> {
    MODELS.iter().try_for_each(|model| {
        CHECK_RANKS
            .iter()
            .try_for_each(|&np| compare(exe, dir, np, model))
    })
}

/// `--dense-overlap on` under `mpirun` against `off` over `LocalComm`, for
/// every rank count, sharded and replicated, both `--dense-groups`.
pub(super) fn check_overlap(exe: &Path, dir: &Path) -> Result<(), String> {
    for &np in &CHECK_RANKS {
        let replicated = args_replicated();
        for groups in ["tower", "layer"] {
            for args in [&ARGS[..], &replicated[..]] {
                let mut model = OVERLAP_MODEL.to_vec();
                model.extend(["--dense-groups", groups]);
                let runs = Runs {
                    args,
                    model: &model,
                    local: &["--dense-overlap", "off"],
                    mpi: &["--dense-overlap", "on"],
                };
                compare_runs(exe, dir, np, &runs)?;
            }
        }
    }
    Ok(())
}

/// [`ARGS`] without `--shard rows`: the replicated trainer.
fn args_replicated() -> Vec<&'static str> {
    let shard = ARGS
        .iter()
        .position(|&a| a == "--shard")
        .unwrap_or(ARGS.len());
    ARGS.iter()
        .enumerate()
        .filter(|&(i, _)| i != shard && i != shard + 1)
        .map(|(_, &a)| a)
        .collect()
}

/// One comparison: the common arguments, the model's, and what only the
/// `LocalComm` run and only the `mpirun` run add.
struct Runs<'a> {
    args: &'a [&'a str],
    model: &'a [&'a str],
    local: &'a [&'a str],
    mpi: &'a [&'a str],
}

fn compare(exe: &Path, dir: &Path, np: usize, model: &[&str]) -> Result<(), String> {
    let runs = Runs {
        args: &ARGS,
        model,
        local: &[],
        mpi: &[],
    };
    compare_runs(exe, dir, np, &runs)
}

fn compare_runs(exe: &Path, dir: &Path, np: usize, runs: &Runs<'_>) -> Result<(), String> {
    let Runs {
        args,
        model,
        local: local_extra,
        mpi: mpi_extra,
    } = *runs;
    let t = Instant::now();
    let workers = np.to_string();
    let local_json = dir.join(format!("local-{np}.json"));
    let mut local = Command::new(exe);
    local
        .args(args)
        .args(model)
        .args(local_extra)
        .args(["--workers", &workers, "--json"])
        .arg(&local_json);
    if !util::run_with_timeout(&mut local, LIMIT)? {
        return Err(format!("sharded LocalComm run on {np} ranks failed"));
    }
    let mpi_json = dir.join(format!("mpi-{np}.json"));
    let mut cmd = mpirun(np, Transport::ShmPortable, Some(LIMIT));
    cmd.arg(exe)
        .args(args)
        .args(model)
        .args(mpi_extra)
        .args(["--workers", &workers, "--json"])
        .arg(&mpi_json);
    if !util::run_with_timeout(&mut cmd, outer(LIMIT))? {
        return Err(format!("sharded mpirun on {np} ranks failed or timed out"));
    }
    let (a, b) = (crc(&local_json)?, crc(&mpi_json)?);
    if a != b {
        return Err(format!(
            "run {args:?} {model:?} on {np} ranks: mpirun {mpi_extra:?} model_crc32 {b}, LocalComm {local_extra:?} {a}"
        ));
    }
    let kind = if args.contains(&"--shard") {
        "sharded"
    } else {
        "replicated"
    };
    eprintln!(
        "  {kind} train {} {} on {np} ranks: mpirun {} = LocalComm {} (model crc32 {a}, {:.1}s)",
        model.join(" "),
        args.join(" "),
        mpi_extra.join(" "),
        local_extra.join(" "),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The `model_crc32` of the first run in a `--json` file.
pub(super) fn crc(path: &Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let key = "\"model_crc32\":";
    let at = text
        .find(key)
        .ok_or_else(|| format!("{}: no model_crc32", path.display()))?;
    let digits: String = text[at + key.len()..]
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .map_err(|_| format!("{}: bad model_crc32", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replicated_run_is_the_sharded_one_without_shard_rows() {
        assert_eq!(
            args_replicated(),
            [
                "-q",
                "train",
                "--synthetic-examples",
                "20000",
                "--epochs",
                "1",
                "--opt",
                "basis"
            ]
        );
    }
}
