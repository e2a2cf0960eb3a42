//! [`train`], which picks the step strategy of a run for the one training
//! loop (`crate::run::train_loop`): one replica in this process (one sparse
//! optimizer, f32 Adam on the dense parameters, one checkpoint file; the
//! replicated strategy of `parallel.rs` without ranks), replicas on
//! `--workers P` ranks (`parallel.rs`) or the row-sharded ranks (`shard/`),
//! and the fingerprint of a single process's checkpoint.

use crate::checkpoint;
use crate::data::Dataset;
use crate::parallel::Replica;
use crate::run::{Run, RunResult, train_loop};
use std::path::Path;
use std::time::Instant;

/// Everything that determines a run except the epoch count, as
/// `option=value` lines (what a refused `--resume` names), and its
/// fingerprint. The fingerprint hashes the values joined by `|` in this
/// order, as before the lines were stored, so older checkpoints still match.
fn fingerprint(ds: &Dataset, run: &Run<'_>) -> (u64, String) {
    const PASSES: &str = "basis defaults";
    let m = run.model;
    let pairs: [(&str, String); 11] = [
        ("data", ds.name.clone()),
        ("table rows", ds.rows.to_string()),
        ("training examples", ds.train.len().to_string()),
        ("--opt", run.spec.label.clone()),
        ("learning rate", run.spec.lr().to_string()),
        ("--batch", m.batch.to_string()),
        ("--dim", m.dim.to_string()),
        ("--init-std", m.init_std.to_string()),
        ("--l2", m.l2.to_string()),
        ("--dense-lr", m.dense_lr.to_string()),
        ("--seed", m.seed.to_string()),
    ];
    let mut pairs: Vec<(&str, String)> = pairs.into();
    let mut hash_passes = false;
    // Where the passes choose the optimizer (plain `basis`: one pass is
    // `BasisConfig::one_pass`, more are `Default`), a one-pass checkpoint
    // is not resumed as a multi-epoch run. Named before the rate it sets,
    // so a refusal names it first; hashed only for one pass, so the
    // multi-epoch checkpoints from before keep their fingerprint.
    if run.spec.passes_choose_defaults() {
        let one_pass = run.spec.takes_one_pass_defaults();
        let value = if one_pass {
            "one pass, BasisConfig::one_pass() (to train it on for more epochs, name it: --opt basis:accumulate=sum,lr=0.01)"
        } else {
            "several epochs, BasisConfig::default()"
        };
        pairs.insert(3, (PASSES, value.into()));
        hash_passes = one_pass;
    }
    // FM runs keep their old fingerprint (existing checkpoints stay valid).
    match m.model {
        crate::deep::ModelKind::Fm => {}
        crate::deep::ModelKind::Deepfm => {
            pairs.push(("--model", "Deepfm".into()));
            pairs.push(("--mlp", format!("{:?}", m.mlp)));
        }
        kind => {
            pairs.push(("--model", format!("{kind:?}")));
            pairs.push(("--mlp", format!("{:?}", m.mlp)));
            pairs.push(("--bottom-mlp", format!("{:?}", m.bottom_mlp)));
        }
    }
    let text: Vec<&str> = pairs
        .iter()
        .filter(|&&(k, _)| k != PASSES || hash_passes)
        .map(|(_, v)| v.as_str())
        .collect();
    let lines: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    (
        balanced_hash::murmur3::x64_128(text.join("|").as_bytes(), 0)[0],
        lines.join("\n"),
    )
}

/// Train `run.spec` on `ds` for `run.model.epochs` epochs.
///
/// Fails with a message when the optimizer cannot be built, a step fails,
/// or a checkpoint cannot be written or does not match this run.
pub(crate) fn train(ds: &Dataset, run: &Run<'_>) -> Result<RunResult, String> {
    let m = run.model;
    if m.dim == 0 || m.batch == 0 {
        return Err("--dim and --batch must be >= 1".into());
    }
    if m.shard.is_some() {
        return crate::shard::train(ds, run);
    }
    if ds.stream.is_some() {
        return Err("--stream needs --shard rows (only the sharded trainer reads a stream)".into());
    }
    if m.workers > 1 {
        return crate::parallel::train(ds, run);
    }
    if let Some(path) = &run.checkpoint {
        // A run killed while saving leaves its temp file behind; clean up
        // before this run writes (or resumes) in the same directory.
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        let dir = dir.unwrap_or(Path::new("."));
        let removed = checkpoint::remove_stale_temp_files(dir).map_err(|e| e.to_string())?;
        if removed > 0 {
            eprintln!(
                "removed {removed} stale checkpoint temp file(s) from {} (left by an interrupted run)",
                dir.display()
            );
        }
    }
    let start = Instant::now();
    on_pool(|| train_loop(run, Replica::new(ds, run, fingerprint(ds, run))?, start))?
        .ok_or_else(|| "no result".into())
}

/// `f` on a thread of the rayon pool (`--threads`), when it has more than
/// one: each parallel pass of a step then starts on the thread that calls
/// it, the other threads stealing its tasks, instead of being handed from
/// outside the pool to the pool and back (a wake-up of this thread per
/// pass, thousands per epoch). The results are the same either way.
fn on_pool<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if rayon::current_num_threads() > 1 {
        // `scope` runs its closure on a pool thread and waits for it.
        rayon::scope(|_| f())
    } else {
        f()
    }
}
