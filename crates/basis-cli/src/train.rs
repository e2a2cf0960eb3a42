//! [`train`], which picks the step strategy of a run for the one training
//! loop (`crate::run::train_loop`): this file's single process (mini-batch
//! FM training with one sparse optimizer and f32 Adam on the dense
//! parameters, one checkpoint file), the replicated ranks (`parallel.rs`)
//! or the row-sharded ranks (`shard/`).

use crate::checkpoint::{self, Checkpoint};
use crate::data::Dataset;
use crate::model::{DenseAdam, Fm, Grads};
use crate::optim::{self, Optimizer};
use crate::rng::Rng;
use crate::run::{
    At, EpochPoint, Progress, Run, RunResult, Step, Strategy, Timing, build_model, evaluate,
    finish, train_loop,
};
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
    let fm = build_model(ds, m)?;
    let d = fm.dim();
    let (fingerprint, options) = fingerprint(ds, run);
    let single = Single {
        ds,
        run,
        opt: optim::build(run.spec, ds.rows, d, m.seed)?,
        dense_opt: DenseAdam::new(fm.dense.len(), m.dense_lr),
        grads: Grads::new(&fm, ds.rows),
        fm,
        fingerprint,
        options,
    };
    train_loop(run, single, start)?.ok_or_else(|| "no result".into())
}

/// The single-process strategy: the whole table, its sparse optimizer and
/// f32 Adam on the dense parameters in this process.
struct Single<'a> {
    ds: &'a Dataset,
    run: &'a Run<'a>,
    fm: Fm,
    opt: Optimizer,
    dense_opt: DenseAdam,
    /// Reused across steps.
    grads: Grads,
    /// The checkpoint's [`fingerprint`] and its option lines.
    fingerprint: u64,
    options: String,
}

impl Strategy for Single<'_> {
    fn examples(&self) -> usize {
        self.ds.train.len()
    }

    fn bar(&self) -> (String, bool) {
        (String::new(), true)
    }

    fn restore(&mut self, path: &Path) -> Result<Progress, String> {
        let c =
            checkpoint::load(path, self.fingerprint, &self.options).map_err(|e| e.to_string())?;
        let fm = &mut self.fm;
        if c.table.len() != fm.table.len() || c.dense.len() != fm.dense.len() {
            let e = checkpoint::CheckpointError::Mismatch {
                path: path.to_path_buf(),
                differs: None,
            };
            return Err(e.to_string());
        }
        fm.table = c.table;
        fm.dense = c.dense;
        self.dense_opt.m = c.dense_m;
        self.dense_opt.v = c.dense_v;
        self.dense_opt.t = c.dense_t;
        self.opt
            .import_state(&c.optimizer)
            .map_err(|e| format!("checkpoint {}: optimizer state: {e}", path.display()))?;
        Ok(Progress {
            epoch: c.epoch,
            rng: Rng::new(c.rng_state),
            nonfinite: c.nonfinite,
            curve: serde_json::from_str(&c.history)
                .map_err(|e| format!("checkpoint history: {e}"))?,
        })
    }

    fn step(&mut self, batch: &[usize], at: At) -> Result<Step, String> {
        let (m, fm, grads) = (self.run.model, &mut self.fm, &mut self.grads);
        grads.compute(fm, &self.ds.train, batch, m.l2)?;
        crate::validate::finite_loss(grads.loss, at.epoch, at.step, &self.run.spec.label)?;
        let d = fm.dim();
        let rep = self.opt.step(&grads.ids, &grads.rows, &mut fm.table, d)?;
        if grads.dense.iter().all(|g| g.is_finite()) {
            self.dense_opt.step(&mut fm.dense, &grads.dense);
        }
        Ok(Step {
            loss: grads.loss,
            nonfinite: rep.rows_skipped_nonfinite as u64,
        })
    }

    fn evaluate(&mut self, epoch: u32, train_loss: f64) -> Result<Option<EpochPoint>, String> {
        Ok(Some(evaluate(&self.fm, self.ds, epoch, train_loss)))
    }

    fn save(&mut self, path: &Path, progress: &Progress) -> Result<(), String> {
        let c = Checkpoint {
            fingerprint: self.fingerprint,
            epoch: progress.epoch,
            rng_state: progress.rng.state(),
            nonfinite: progress.nonfinite,
            table: self.fm.table.clone(),
            dense: self.fm.dense.clone(),
            dense_m: self.dense_opt.m.clone(),
            dense_v: self.dense_opt.v.clone(),
            dense_t: self.dense_opt.t,
            optimizer: self.opt.export_state(),
            history: serde_json::to_string(&progress.curve).map_err(|e| e.to_string())?,
            options: self.options.clone(),
            shard: None,
        };
        checkpoint::save(path, &c).map_err(|e| e.to_string())
    }

    fn finish(self, progress: Progress, timing: Timing) -> Result<Option<RunResult>, String> {
        let Progress {
            curve, nonfinite, ..
        } = progress;
        let final_metrics = curve
            .last()
            .cloned()
            .unwrap_or_else(|| evaluate(&self.fm, self.ds, 0, f64::NAN));
        let (fm, opt) = (&self.fm, &self.opt);
        let out = finish(
            self.ds,
            self.run,
            fm,
            opt,
            curve,
            final_metrics,
            nonfinite,
            timing.start,
            None,
        );
        Ok(Some(out))
    }
}
