//! The single-process training loop (mini-batch FM training with one sparse
//! optimizer, per-epoch evaluation, checkpoints) and [`train`], which picks
//! the loop of a run: this one, the replicated one (`parallel.rs`) or the
//! sharded one (`shard/`). What they share is in `crate::run`.

use crate::checkpoint::{self, Checkpoint};
use crate::data::Dataset;
use crate::model::{DenseAdam, Grads};
use crate::optim;
use crate::rng::Rng;
use crate::run::{EpochPoint, Run, RunResult, build_model, evaluate, finish};
use std::path::Path;
use std::time::Instant;

/// Everything that determines a run except the epoch count, as
/// `option=value` lines (what a refused `--resume` names), and its
/// fingerprint. The fingerprint hashes the values joined by `|` in this
/// order, as before the lines were stored, so older checkpoints still match.
fn fingerprint(ds: &Dataset, run: &Run<'_>) -> (u64, String) {
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
    let text: Vec<&str> = pairs.iter().map(|(_, v)| v.as_str()).collect();
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
    let mut fm = build_model(ds, m)?;
    let d = fm.dim();
    let mut opt = optim::build(run.spec, ds.rows, d, m.seed)?;
    let mut dense_opt = DenseAdam::new(fm.dense.len(), m.dense_lr);
    let mut rng = Rng::derive(m.seed, 0x0DE5);
    let mut curve: Vec<EpochPoint> = Vec::new();
    let mut nonfinite = 0u64;
    let mut epoch0 = 0;
    let (fp, options) = fingerprint(ds, run);
    if let (true, Some(path)) = (run.resume, &run.checkpoint) {
        let c = checkpoint::load(path, fp, &options).map_err(|e| e.to_string())?;
        if c.table.len() != fm.table.len() || c.dense.len() != fm.dense.len() {
            let e = checkpoint::CheckpointError::Mismatch {
                path: path.clone(),
                differs: None,
            };
            return Err(e.to_string());
        }
        fm.table = c.table;
        fm.dense = c.dense;
        dense_opt.m = c.dense_m;
        dense_opt.v = c.dense_v;
        dense_opt.t = c.dense_t;
        opt.import_state(&c.optimizer)
            .map_err(|e| format!("checkpoint {}: optimizer state: {e}", path.display()))?;
        rng = Rng::new(c.rng_state);
        nonfinite = c.nonfinite;
        curve = serde_json::from_str(&c.history).map_err(|e| format!("checkpoint history: {e}"))?;
        epoch0 = c.epoch;
    }
    let n = ds.train.len();
    let mut grads = Grads::new(&fm, ds.rows);
    let mut order: Vec<usize> = (0..n).collect();
    let batches = n.div_ceil(m.batch);
    for epoch in epoch0..m.epochs {
        let bar = crate::progress::count(
            batches as u64,
            &format!("{} epoch {}/{}", run.spec.label, epoch + 1, m.epochs),
            run.progress,
        );
        for (i, o) in order.iter_mut().enumerate() {
            *o = i;
        }
        rng.shuffle(&mut order);
        let mut loss_sum = 0.0;
        for (step, batch) in order.chunks(m.batch).enumerate() {
            grads.compute(&fm, &ds.train, batch, m.l2)?;
            loss_sum += grads.loss;
            crate::validate::finite_loss(grads.loss, epoch + 1, step + 1, &run.spec.label)?;
            let rep = opt.step(&grads.ids, &grads.rows, &mut fm.table, d)?;
            nonfinite += rep.rows_skipped_nonfinite as u64;
            if grads.dense.iter().all(|g| g.is_finite()) {
                dense_opt.step(&mut fm.dense, &grads.dense);
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
        curve.push(evaluate(&fm, ds, epoch + 1, loss_sum / n as f64));
        if let Some(path) = &run.checkpoint {
            let c = Checkpoint {
                fingerprint: fp,
                epoch: epoch + 1,
                rng_state: rng.state(),
                nonfinite,
                table: fm.table.clone(),
                dense: fm.dense.clone(),
                dense_m: dense_opt.m.clone(),
                dense_v: dense_opt.v.clone(),
                dense_t: dense_opt.t,
                optimizer: opt.export_state(),
                history: serde_json::to_string(&curve).map_err(|e| e.to_string())?,
                options: options.clone(),
                shard: None,
            };
            checkpoint::save(path, &c).map_err(|e| e.to_string())?;
        }
    }
    let final_metrics = curve
        .last()
        .cloned()
        .unwrap_or_else(|| evaluate(&fm, ds, 0, f64::NAN));
    Ok(finish(
        ds,
        run,
        &fm,
        &opt,
        curve,
        final_metrics,
        nonfinite,
        start,
        None,
    ))
}
