//! Sharded training on `LocalComm`: against the single-process trainer
//! (test AUC), bit-identical repeats, all-to-one skew, ranks that disagree
//! on an option, and a rank that dies mid-step.

use super::*;
use crate::cli::{Cli, Command, TrainArgs};
use crate::eager::Eager;
use basis_std::local::LocalComm;
use clap::Parser;
use core::time::Duration;
use std::sync::mpsc;

fn args(extra: &[&str]) -> TrainArgs {
    let mut argv = vec!["basis", "train"];
    for (k, v) in [("--synthetic-examples", "100000"), ("--epochs", "1")] {
        if !extra.contains(&k) {
            argv.extend([k, v]);
        }
    }
    argv.extend_from_slice(extra);
    match Cli::try_parse_from(argv).unwrap().command {
        Command::Train(a) => a,
        _ => unreachable!("a train command"),
    }
}

fn load(a: &TrainArgs) -> Dataset {
    crate::data::load(&a.data.options(false)).unwrap()
}

fn run_of(a: &TrainArgs) -> Run<'_> {
    Run {
        spec: &a.opt,
        model: &a.model,
        checkpoint: None,
        resume: false,
        progress: false,
    }
}

/// `args` of a sharded run on `p` ranks, over 20 000 examples unless
/// `extra` sets another size.
fn sharded(p: usize, extra: &[&str]) -> TrainArgs {
    let p = p.to_string();
    let mut argv = vec!["--workers", p.as_str(), "--shard", "rows"];
    if !extra.contains(&"--synthetic-examples") {
        argv.extend(["--synthetic-examples", "20000"]);
    }
    argv.extend_from_slice(extra);
    args(&argv)
}

/// Test AUC of `a` on `ds` (single-process or sharded, by its options).
fn test_auc(ds: &Dataset, a: &TrainArgs) -> (f64, RunResult) {
    let r = crate::train::train(ds, &run_of(a)).unwrap();
    (r.final_metrics.test_auc, r)
}

/// A sharded run reaches the single process's test AUC within `tol` at
/// every `P` in `ps` (60 000 synthetic examples, 2 epochs): the sharded
/// minus the single-process AUC, averaged over `--seed` 1..=`seeds`.
fn auc_within(tol: f64, opt: &str, extra: &[&str], ps: &[usize]) {
    mean_auc_within(tol, opt, extra, ps, 1);
}

/// [`auc_within`] with the gap averaged over `seeds` seeds.
fn mean_auc_within(tol: f64, opt: &str, extra: &[&str], ps: &[usize], seeds: u64) {
    let mut gaps = vec![0.0f64; ps.len()];
    for seed in 1..=seeds {
        let seed = seed.to_string();
        let data = [
            "--synthetic-examples",
            "60000",
            "--epochs",
            "2",
            "--opt",
            opt,
            "--seed",
            &seed,
        ];
        let extra = [&data[..], extra].concat();
        let single = args(&extra);
        let ds = load(&single);
        let (x, one) = test_auc(&ds, &single);
        assert!(x > 0.6, "{opt} single process learned nothing: {x}");
        for (gap, &p) in gaps.iter_mut().zip(ps) {
            let sa = sharded(p, &extra);
            let (y, r) = test_auc(&ds, &sa);
            *gap += (y - x) / seeds as f64;
            assert_eq!(r.dense_params, one.dense_params);
            let s = r.sharded.as_ref().unwrap();
            assert_eq!(s.ranks.iter().map(|k| k.rows).sum::<u64>(), ds.rows as u64);
            if opt == "basis" {
                assert!(s.state_bytes_per_row <= 1.5, "{}", s.state_bytes_per_row);
            }
            // The ratio is of the rows the job holds and all ranks' state:
            // Adam's state is Adam's (it was rank 0's state over every row).
            let entry = crate::compare::entry(&sa.opt, Vec::new(), vec![r.clone()]);
            if opt == "adam" {
                assert!(
                    (r.compression_vs_adam - 1.0).abs() < 0.01,
                    "{}",
                    r.compression_vs_adam
                );
                assert!((entry.growing_per_row - 8.0 * r.row_dim as f64).abs() < 0.5);
            }
            if opt == "basis" {
                assert!(r.compression_vs_adam > 8.0 * r.row_dim as f64 / 1.5);
                assert!(entry.growing_per_row <= 1.5, "{}", entry.growing_per_row);
            }
        }
    }
    for (gap, p) in gaps.iter().zip(ps) {
        assert!(
            gap.abs() < tol,
            "{opt} P={p}: sharded − single {gap} over {seeds} seed(s)"
        );
    }
}

#[test]
fn sharded_basis_reaches_the_single_process_auc() {
    // The goal: within 0.001.
    auc_within(1e-3, "basis", &[], &[1, 2, 3]);
}

#[test]
fn sharded_adam_reaches_the_single_process_auc() {
    auc_within(1e-3, "adam", &[], &[3]);
}

/// Every evaluated metric of every epoch and the epoch train loss, as
/// bits: equal iff the runs scored the same logits (a model that differs in
/// one float moves the log-losses) and summed the same losses (the ranks
/// add each step's loss in f64 in rank order, `comm_traits::
/// sum_f64_in_rank_order`, so one rank's sum is the single process's).
fn curve_bits(r: &RunResult) -> Vec<[u64; 5]> {
    r.curve
        .iter()
        .map(|p| {
            [
                p.train_loss,
                p.valid_auc,
                p.valid_loss,
                p.test_auc,
                p.test_loss,
            ]
            .map(f64::to_bits)
        })
        .collect()
}

fn same_curve(a: &RunResult, b: &RunResult, what: &str) {
    assert_eq!(curve_bits(a), curve_bits(b), "{what}");
}

/// The three strategies at one rank are one run, bit for bit, for the FM,
/// DeepFM and DLRM, with exact Adam rows and one-choice BASIS: the single
/// process, the replicated strategy on one rank (`parallel::rank_main`:
/// the same model CRC) and `--workers 1 --shard rows` (its own checksum:
/// every metric of every epoch equal). All step the dense parameters with
/// `onebit-adam`'s f32 Adam (`--dense-opt adam` on the ranks; the single
/// process's `run::single_dense_optimizer`), the rows with the same
/// sparse optimizer, over the same gradients.
#[test]
fn single_process_replicated_and_sharded_at_one_rank_are_one_run() {
    let dlrm = [
        "--model",
        "dlrm",
        "--format",
        "criteo-synth",
        "--bottom-mlp",
        "8",
        "--mlp",
        "16,1",
    ];
    let models: [&[&str]; 3] = [&[], &["--model", "deepfm", "--mlp", "16,8,1"], &dlrm];
    for model in models {
        for opt in ["adam", "basis"] {
            let common = [
                "--synthetic-examples",
                "6000",
                "--epochs",
                "2",
                "--batch",
                "256",
                "--l2",
                "0.01",
                "--opt",
                opt,
                "--dense-opt",
                "adam",
            ];
            let extra = [&common[..], model].concat();
            let single = args(&extra);
            let ds = load(&single);
            let what = format!("{model:?} --opt {opt}");
            let (x, one) = test_auc(&ds, &single);
            assert!(x > 0.55, "{what}: learned nothing ({x})");
            let replicated = crate::run::on_local_ranks(1, |c| {
                crate::parallel::rank_main(&ds, &run_of(&single), &mut Eager::new(c), false)
            });
            let replicated = replicated.into_iter().next().unwrap().unwrap().unwrap();
            assert_eq!(
                replicated.model_crc32, one.model_crc32,
                "{what}: replicated"
            );
            same_curve(&replicated, &one, &format!("{what}: replicated"));
            let (_, sharded) = test_auc(&ds, &sharded(1, &extra));
            same_curve(&sharded, &one, &format!("{what}: sharded"));
            assert_eq!(sharded.dense_params, one.dense_params);
        }
    }
}

#[test]
fn repeated_runs_are_bit_identical_and_every_rank_agrees() {
    let a = sharded(3, &[]);
    let ds = load(&a);
    let owner = owner_of(&ds, &run_of(&a), 3).unwrap();
    let runs: Vec<Vec<RunResult>> = (0..2)
        .map(|_| {
            LocalComm::run(3, |mut c| {
                rank_main(&ds, &run_of(&a), &mut Eager::new(&mut c), &owner).unwrap()
            })
            .into_iter()
            .map(|r| r.unwrap())
            .collect()
        })
        .collect();
    let crcs: Vec<u32> = runs.iter().flatten().map(|r| r.model_crc32).collect();
    assert!(crcs.iter().all(|&c| c == crcs[0]), "{crcs:?}");
    let aucs: Vec<u64> = runs
        .iter()
        .flatten()
        .map(|r| r.final_metrics.test_auc.to_bits())
        .collect();
    assert!(aucs.iter().all(|&x| x == aucs[0]));
}

/// Max |a − b| over two equally long vectors.
fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Max |x|.
fn max_abs(a: &[f32]) -> f32 {
    a.iter().map(|x| x.abs()).fold(0.0, f32::max)
}

/// The "same model" at the level of one step: the sharded step on
/// `P = 1..4` ranks computes the single-process step's update, so only the
/// float summation order differs. One batch (700 examples in a scrambled
/// order), `--l2 0.5` (a row several shares touch gets `l2·θ` once, as in
/// the single process), FM and DeepFM, SGD (update = `lr·g`, so the rows
/// show the gradient) and Adam on the rows, f32 Adam on the dense part.
/// Compared: the shares' dense gradients summed over the ranks against the
/// single process's, every row the step touched, and the dense parameters.
/// One-choice BASIS too: the ranks hold the single process's buckets,
/// partitioned (`OwnerRule::buckets`), so a bucket's moments see the same
/// rows' gradients as in the single process.
#[test]
fn one_sharded_step_is_the_single_process_step() {
    let models: [&[&str]; 2] = [&[], &["--model", "deepfm", "--mlp", "16,8,1"]];
    for model in models {
        for (opt, ranks) in [("sgd", 4), ("adam", 4), ("basis", 4)] {
            let common = [
                "--synthetic-examples",
                "4000",
                "--opt",
                opt,
                "--l2",
                "0.5",
                "--batch",
                "700",
                "--dense-opt",
                "adam",
            ];
            let a = args(&[&common[..], model].concat());
            let ds = load(&a);
            let m = &a.model;
            let n = ds.train.len();
            let batch: Vec<usize> = (0..m.batch).map(|i| (i * 7919) % n).collect();
            // The single-process step (what `train::train` does per batch).
            let mut fm = crate::run::build_model(&ds, m).unwrap();
            let d = fm.dim();
            let start = fm.table.clone();
            let mut g = Grads::new(&fm, ds.rows);
            g.compute(&fm, &ds.train, &batch, m.l2).unwrap();
            let mut sparse = optim::build(&a.opt, ds.rows, d, m.seed).unwrap();
            sparse.step(&g.ids, &g.rows, &mut fm.table, d).unwrap();
            let mut dense = crate::run::single_dense_optimizer(m, fm.dense.len()).unwrap();
            let one = &mut comm_traits::SingleRank::default();
            dense.step(one, &mut fm.dense, &g.dense, 1.0).unwrap();
            let mut touched: Vec<u64> = g.ids.clone();
            touched.sort_unstable();
            let step = |i: usize| -> Vec<f32> {
                (0..d)
                    .map(|j| fm.table[i * d + j] - start[i * d + j])
                    .collect()
            };
            let moved: Vec<f32> = touched.iter().flat_map(|&i| step(i as usize)).collect();
            let what = format!("{model:?} --opt {opt}");
            for p in 1..=ranks {
                let run = run_of(&a);
                let owner = owner_of(&ds, &run, p).unwrap();
                let out = LocalComm::run(p, |mut c| {
                    let mut me = Rank::new(&ds, &run, c.rank(), &owner).unwrap();
                    let mut dense_opt =
                        crate::run::dense_optimizer(m, me.model.dense.len(), None, n).unwrap();
                    let mut grads = Grads::new(&me.model, 0);
                    let sh = Source::Memory(&ds.train).share(&share(&batch, c.rank(), p));
                    me.train_step(
                        &mut Eager::new(&mut c),
                        &sh,
                        StepAt {
                            batch_len: batch.len(),
                            epoch: 1,
                            step: 1,
                        },
                        &mut dense_opt,
                        &mut grads,
                    )
                    .unwrap();
                    let snap = me.table.snapshot();
                    (grads.dense, snap.ids, snap.rows, me.model.dense.clone())
                });
                let out: Vec<_> = out.into_iter().map(Result::unwrap).collect();
                // Dense gradient: the shares sum to the batch's.
                let mut sum = vec![0.0f32; g.dense.len()];
                for (share_grad, ..) in &out {
                    for (s, x) in sum.iter_mut().zip(share_grad) {
                        *s += x;
                    }
                }
                let err = max_diff(&sum, &g.dense);
                assert!(
                    err <= 1e-5 * max_abs(&g.dense),
                    "{what} P={p}: dense gradient off by {err} (max {})",
                    max_abs(&g.dense)
                );
                // Rows: the shards hold exactly the touched rows, moved by
                // the single process's step.
                let mut rows: Vec<(u64, &[f32])> = out
                    .iter()
                    .flat_map(|(_, ids, rows, _)| ids.iter().copied().zip(rows.chunks_exact(d)))
                    .collect();
                rows.sort_unstable_by_key(|r| r.0);
                let ids: Vec<u64> = rows.iter().map(|r| r.0).collect();
                assert_eq!(ids, touched, "{what} P={p}: rows held");
                let sharded_moved: Vec<f32> = rows
                    .iter()
                    .flat_map(|&(id, r)| {
                        let s = &start[id as usize * d..(id as usize + 1) * d];
                        r.iter().zip(s).map(|(x, y)| x - y)
                    })
                    .collect();
                let err = max_diff(&sharded_moved, &moved);
                // SGD moves a row by `lr·g`: relative to the largest step.
                // Adam-type first steps are `lr·g/(|g|+ε)`, which turns a
                // last-bit difference of a `|g| ≈ ε` row into ~1e-4·lr.
                let tol = if opt == "sgd" {
                    1e-4 * max_abs(&moved)
                } else {
                    1e-3 * a.opt.lr()
                };
                assert!(
                    err <= tol,
                    "{what} P={p}: rows' step off by {err} (max {})",
                    max_abs(&moved)
                );
                // Dense parameters after one f32 Adam step, on every rank:
                // on one rank the same bits (the same gradient and Adam).
                for (r, (.., dense_after)) in out.iter().enumerate() {
                    if p == 1 {
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(dense_after), bits(&fm.dense), "{what} P=1");
                    }
                    let err = max_diff(dense_after, &fm.dense);
                    assert!(
                        err <= 1e-3 * m.dense_lr,
                        "{what} P={p} rank {r}: dense off by {err}"
                    );
                }
            }
        }
    }
}

/// Distinct ids of every rank's share of every batch of `a`'s run on `p`
/// ranks, summed: the ids the owners serve, counted one by one (the
/// trainer's data order: one shuffle per epoch from stream `0x0DE5`).
fn requested_ids(ds: &Dataset, a: &TrainArgs, p: usize) -> u64 {
    let n = ds.train.len();
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = Rng::derive(a.model.seed, 0x0DE5);
    let mut total = 0u64;
    for _ in 0..a.model.epochs {
        for (i, o) in order.iter_mut().enumerate() {
            *o = i;
        }
        rng.shuffle(&mut order);
        for batch in order.chunks(a.model.batch) {
            for r in 0..p {
                let ids: std::collections::HashSet<u32> = batch
                    .iter()
                    .skip(r)
                    .step_by(p)
                    .flat_map(|&e| ds.train.features(e).0.iter().copied())
                    .collect();
                total += ids.len() as u64;
            }
        }
    }
    total
}

#[test]
fn all_ids_on_one_rank_is_reported_as_skew_not_a_crash() {
    let a = sharded(3, &[]);
    let ds = load(&a);
    let all_to_0 = OwnerRule::custom(3, 0, |_| 0).unwrap();
    let r = train_local(&ds, &run_of(&a), 3, &all_to_0).unwrap();
    let s = r.sharded.clone().unwrap();
    assert_eq!(s.ranks[0].rows, ds.rows as u64);
    assert_eq!(s.ranks[1].rows + s.ranks[2].rows, 0);
    assert!((s.row_skew - 3.0).abs() < 1e-9);
    assert!(r.final_metrics.test_auc > 0.6);
    // Rank 0 served every id every rank asked for.
    let requested = requested_ids(&ds, &a, 3);
    assert_eq!(s.ranks[0].ids_served, requested);
    assert_eq!(s.ranks[1].ids_served + s.ranks[2].ids_served, 0);
    assert!((s.served_skew - 3.0).abs() < 1e-9);
    // The user sees it: one warning line in `basis train`'s text output,
    // and the per-rank counts in the JSON.
    let w = s.skew_warning().unwrap();
    assert!(
        w.starts_with("warning:")
            && w.contains("row skew 3.00")
            && w.contains("rank 0 owns 100.0 %"),
        "{w}"
    );
    let text = crate::compare::train_text(&ds, &crate::compare::entry(&a.opt, Vec::new(), vec![r]));
    assert_eq!(text.lines().filter(|l| *l == w).count(), 1, "{text}");
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["ranks"][0]["ids_served"].as_u64(), Some(requested));
    // The default owner (BASIS: by bucket) spreads the same requests
    // evenly: no warning.
    let owner = owner_of(&ds, &run_of(&a), 3).unwrap();
    let even = train_local(&ds, &run_of(&a), 3, &owner).unwrap();
    let e = even.sharded.clone().unwrap();
    assert_eq!(e.ranks.iter().map(|k| k.ids_served).sum::<u64>(), requested);
    assert!(e.row_skew < 1.1 && e.served_skew < 1.1, "{e:?}");
    assert_eq!(e.skew_warning(), None);
    let text =
        crate::compare::train_text(&ds, &crate::compare::entry(&a.opt, Vec::new(), vec![even]));
    assert!(!text.contains("warning"), "{text}");
}

#[test]
fn ranks_that_disagree_on_an_option_all_fail_naming_it() {
    let a = sharded(2, &["--batch", "256"]);
    let b = sharded(2, &["--batch", "128"]);
    let ds = load(&a);
    let owner = OwnerRule::hashed(2, 1).unwrap();
    let out = LocalComm::run(2, |mut c| {
        let mine = if c.rank() == 0 { &a } else { &b };
        rank_main(&ds, &run_of(mine), &mut Eager::new(&mut c), &owner).map(|_| ())
    });
    for r in out {
        let e = r.unwrap().unwrap_err();
        assert!(
            e.contains("--batch") && e.contains("256") && e.contains("128"),
            "{e}"
        );
    }
}

#[test]
fn a_rank_that_dies_mid_step_fails_every_rank_without_a_hang() {
    let a = sharded(3, &[]);
    let ds = load(&a);
    let owner = owner_of(&ds, &run_of(&a), 3).unwrap();
    // Calls 1.. are inside steps; 7 is the second step's row return.
    for die_at in [2u64, 7, 12] {
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|s| {
            let ds = &ds;
            let a = &a;
            let owner = &owner;
            s.spawn(move || {
                let out: Vec<Result<(), String>> = LocalComm::run(3, |c| {
                    let die = (c.rank() == 1).then_some(die_at);
                    let mut c = basis_std::fault::ExitsAt::new(c, die);
                    rank_main(ds, &run_of(a), &mut Eager::new(&mut c), owner).map(|_| ())
                })
                .into_iter()
                .map(|r| r.unwrap_or_else(|_| Err("panic".into())))
                .collect();
                let _ = tx.send(out);
            });
            let out = rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("hang with a rank dying at call {die_at}"));
            for (r, o) in out.iter().enumerate() {
                let e = o.as_ref().unwrap_err();
                assert!(e.contains("rank 1"), "rank {r}: {e}");
            }
        });
    }
}

/// Every rank's result of `a` over `LocalComm` with `--checkpoint base`
/// (`resume` to continue from it), every rank leaving at `stop_at`.
fn with_checkpoint(
    ds: &Dataset,
    a: &TrainArgs,
    base: &std::path::Path,
    resume: bool,
    stop_at: Option<u64>,
) -> Vec<Result<RunResult, String>> {
    let run = Run {
        checkpoint: Some(base.to_path_buf()),
        resume,
        ..run_of(a)
    };
    let p = a.model.workers;
    let owner = owner_of(ds, &run, p).unwrap();
    let fault = stop_at.map(|step| fault::Fault {
        rank: None,
        step,
        exit: false,
    });
    LocalComm::run(p, |mut c| {
        rank_main_with(ds, &run, &mut Eager::new(&mut c), &owner, fault)
    })
    .into_iter()
    .map(|r| r.unwrap_or_else(|_| Err("panic".into())))
    .collect()
}

/// A fresh temp directory for one test's checkpoints.
fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("basis-shard-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every rank failed, each message containing every one of `parts`.
fn all_fail_with(out: &[Result<RunResult, String>], parts: &[&str]) {
    for (r, o) in out.iter().enumerate() {
        let e = o.as_ref().map(|_| ()).unwrap_err();
        for part in parts {
            assert!(e.contains(part), "rank {r}: `{part}` not in: {e}");
        }
    }
}

/// A run of `a` uninterrupted (under `dir/whole`), then the same run stopped
/// three steps into epoch 2 (its epoch-1 rank files written under `base`)
/// and resumed from them: (uninterrupted, the rank files, their bytes at
/// the stop). The resumed ranks must equal the uninterrupted ones bit for
/// bit (model CRC and test AUC), which this checks, naming `label`.
fn stop_and_resume(
    ds: &Dataset,
    a: &TrainArgs,
    dir: &std::path::Path,
    base: &std::path::Path,
    label: &str,
) -> (Vec<RunResult>, Vec<std::path::PathBuf>, Vec<Vec<u8>>) {
    let whole: Vec<RunResult> = with_checkpoint(ds, a, &dir.join("whole"), false, None)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let batches = ds.train.len().div_ceil(a.model.batch) as u64;
    let stopped = with_checkpoint(ds, a, base, false, Some(batches + 3));
    all_fail_with(&stopped, &["leaving at step"]);
    let files: Vec<_> = (0..whole.len())
        .map(|r| basis_shard::rank_path(base, r))
        .collect();
    let saved: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    let resumed: Vec<RunResult> = with_checkpoint(ds, a, base, true, None)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    for (w, r) in whole.iter().zip(&resumed) {
        assert_eq!(w.model_crc32, r.model_crc32, "{label}");
        assert_eq!(
            w.final_metrics.test_auc.to_bits(),
            r.final_metrics.test_auc.to_bits(),
            "{label}"
        );
    }
    (whole, files, saved)
}

#[test]
fn resume_is_bit_identical_and_bad_files_fail_every_rank() {
    // The default dense optimizer (0/1 Adam, with BASIS rows) and 1-bit
    // Adam (with Adam rows), whose warm-up ends in epoch 1: both
    // checkpoints carry error-feedback buffers and the stage.
    for (opt, dense) in [("basis", "zero-one-adam"), ("adam", "onebit-adam")] {
        let on = |p: usize, extra: &[&'static str]| {
            let mut v = vec!["--epochs", "2", "--opt", opt];
            if dense != "zero-one-adam" {
                v.extend(["--dense-opt", dense]);
            }
            v.extend(extra);
            sharded(p, &v)
        };
        let a = on(3, &[]);
        let ds = load(&a);
        let dir = temp_dir(opt);
        let base = dir.join("run.ckpt");
        // Interrupted in the second epoch, after epoch 1's files were written.
        let (_, files, saved) = stop_and_resume(&ds, &a, &dir, &base, opt);
        let restore = || {
            for (f, b) in files.iter().zip(&saved) {
                std::fs::write(f, b).unwrap();
            }
        };
        // One corrupted file, one missing file, another rank's file.
        restore();
        let mut bad = saved[1].clone();
        let mid = bad.len() / 2;
        bad[mid] ^= 0x40;
        std::fs::write(&files[1], bad).unwrap();
        let out = with_checkpoint(&ds, &a, &base, true, None);
        all_fail_with(&out, &["resume failed on rank 1", "corrupted"]);
        restore();
        std::fs::remove_file(&files[2]).unwrap();
        let out = with_checkpoint(&ds, &a, &base, true, None);
        all_fail_with(&out, &["resume failed on rank 2", "rank2"]);
        restore();
        std::fs::copy(&files[0], &files[1]).unwrap();
        let out = with_checkpoint(&ds, &a, &base, true, None);
        all_fail_with(
            &out,
            &["resume failed on rank 1", "it has rank 0, this run rank 1"],
        );
        // Another warm-up or dense rate: the refusal names both values as
        // they are written on the command line, not their fingerprint bits.
        restore();
        let auto = on(3, &["--dense-warmup", "auto"]);
        let out = with_checkpoint(&ds, &auto, &base, true, None);
        all_fail_with(
            &out,
            &["it has --dense-warmup share, this run --dense-warmup auto"],
        );
        let f32_warmup = on(3, &["--dense-warmup-reduce", "f32"]);
        let out = with_checkpoint(&ds, &f32_warmup, &base, true, None);
        all_fail_with(
            &out,
            &["it has --dense-warmup-reduce bf16, this run --dense-warmup-reduce f32"],
        );
        let lr = on(3, &["--dense-lr", "0.002"]);
        let out = with_checkpoint(&ds, &lr, &base, true, None);
        all_fail_with(&out, &["it has --dense-lr 0.01, this run --dense-lr 0.002"]);
        // Written with P = 3, resumed with P = 2: the rows would move, but
        // the per-rank error feedback (and 0/1 Adam's parameters) cannot.
        restore();
        let two = on(2, &[]);
        let out = with_checkpoint(&ds, &two, &base, true, None);
        let why = if dense == "onebit-adam" {
            "1-bit Adam's error-feedback buffers are per rank"
        } else {
            "0/1 Adam's state is per rank"
        };
        all_fail_with(
            &out,
            &[
                "resume failed on rank 0",
                "resharding the 3 ranks' checkpoints",
                why,
            ],
        );
        // Files of different epochs (a run stopped between two ranks'
        // saves): the uninterrupted run's epoch-2 file for rank 2.
        restore();
        std::fs::copy(basis_shard::rank_path(&dir.join("whole"), 2), &files[2]).unwrap();
        let out = with_checkpoint(&ds, &a, &base, true, None);
        all_fail_with(
            &out,
            &["different epochs", "rank 0 has epoch 1, rank 2 has epoch 2"],
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A sharded run whose loss turns non-finite stops on every rank with the
/// single process's message (epoch, step, optimizer) before any optimizer
/// sees the gradients. Before: the dense optimizer's "non-finite value at
/// index 0", after the sparse step had skipped the rows.
#[test]
fn a_diverging_sharded_run_stops_every_rank_naming_epoch_and_step() {
    for extra in [
        &["--opt", "sgd:lr=1e30"][..],
        &["--opt", "sgd:lr=1e30", "--dense-opt", "adam"],
        &["--opt", "sgd:lr=1e30", "--model", "deepfm", "--mlp", "8,1"],
    ] {
        let a = sharded(3, extra);
        let ds = load(&a);
        let run = run_of(&a);
        let owner = owner_of(&ds, &run, 3).unwrap();
        let out: Vec<Result<RunResult, String>> = LocalComm::run(3, |mut c| {
            rank_main_with(&ds, &run, &mut Eager::new(&mut c), &owner, None)
        })
        .into_iter()
        .map(|r| r.unwrap_or_else(|_| Err("panic".into())))
        .collect();
        all_fail_with(
            &out,
            &["training diverged", "epoch 1, step ", "`sgd:lr=1e30`"],
        );
    }
}

/// A new row starts as the single-process model's row of that id, so a
/// sharded run and the single process start from the same model.
#[test]
fn rows_start_as_the_single_process_model_does() {
    let fm = crate::model::Fm::new(50, 4, 0.1, 3).unwrap();
    for id in [49u64, 0, 17] {
        let mut row = vec![9.0f32; 5];
        init_row(&mut row, 0.1, 3, id);
        assert_eq!(row, &fm.table[id as usize * 5..(id as usize + 1) * 5]);
    }
}

/// Every optimizer the CLI builds (d-choice BASIS, whose checkpoint blob
/// carries its choices, and the row-scaled mode included) steps through the
/// sharded table as it steps a table by id: the reference is the same
/// optimizer with its own sparse id index, over a `BTreeMap` table.
#[test]
fn the_cli_optimizers_step_through_the_table_as_by_id() {
    use alloc::collections::BTreeMap;
    use basis_core::{RowAccess, RowIndex, SparseOptimizer};
    struct ById(BTreeMap<u64, Vec<f32>>);
    impl RowAccess for ById {
        fn dim(&self) -> usize {
            5
        }
        fn row_mut(&mut self, id: u64) -> Option<&mut [f32]> {
            self.0.get_mut(&id).map(Vec::as_mut_slice)
        }
    }
    let dim = 5;
    for spec in [
        "adam",
        "adagrad",
        "sgd",
        "basis",
        "basis:mode=rowscaled",
        "basis:storage=u8,choices=2",
    ] {
        let spec: crate::spec::OptSpec = spec.parse().unwrap();
        let owner = optim::owner_rule(&spec, 100, 1, 3).unwrap();
        let opt = optim::build_shard(&spec, 100, (0, &owner), dim, 3).unwrap();
        let init = RowInit::from_fn(|id, row| init_row(row, 0.1, 9, id));
        let config = TableConfig::new(dim, owner, 0).with_init(init.clone());
        let mut table = ShardedTable::new(config, opt).unwrap();
        let mut reference = optim::build_indexed(&spec, 100, RowIndex::Sparse, dim, 3).unwrap();
        let mut by_id = ById(BTreeMap::new());
        let mut comm = LocalComm::group(1).pop().unwrap();
        let mut rng = Rng::new(5);
        for step in 0..40 {
            let ids: Vec<u64> = (0..12)
                .map(|_| crate::rng::mix64(rng.below(30 + step) as u64) >> 3)
                .collect();
            let batch = table.lookup(&mut comm, &ids).unwrap();
            let grads: Vec<f32> = (0..batch.rows.len())
                .map(|_| rng.normal() as f32 * 0.1)
                .collect();
            for &id in &batch.ids {
                by_id.0.entry(id).or_insert_with(|| {
                    let mut r = vec![0.0; dim];
                    init.fill(id, &mut r);
                    r
                });
            }
            table.apply(&mut comm, &batch, &grads).unwrap();
            SparseOptimizer::step(&mut reference, &batch.ids, &grads, &mut by_id).unwrap();
        }
        assert_eq!(table.len(), by_id.0.len());
        for (id, row) in table.sorted_rows() {
            assert_eq!(row, by_id.0[&id].as_slice(), "{} row {id}", spec.label);
        }
        // The checkpoint blob (d-choice: with its choices) restores.
        let snap = table.snapshot();
        let owner = optim::owner_rule(&spec, 100, 1, 3).unwrap();
        let opt = optim::build_shard(&spec, 100, (0, &owner), dim, 3).unwrap();
        let mut back = ShardedTable::new(TableConfig::new(dim, owner, 0), opt).unwrap();
        back.restore_snapshot(snap.clone()).unwrap();
        assert_eq!(back.snapshot(), snap, "{}", spec.label);
    }
}

/// Checkpoints of a `P = 2` run resume on `P' = 3` ranks: the rows move to
/// their new owners with their state (one-choice BASIS: with its buckets),
/// and the run ends with the rows and (to float summation order) the test
/// AUC of an uninterrupted 3-rank run. A missing old file fails every rank.
#[test]
fn a_two_rank_checkpoint_resumes_on_three_ranks() {
    for opt in ["basis", "adam"] {
        let extra = ["--epochs", "2", "--opt", opt, "--dense-opt", "adam"];
        let (two, three) = (sharded(2, &extra), sharded(3, &extra));
        let ds = load(&two);
        let dir = temp_dir(&format!("reshard-{opt}"));
        let base = dir.join("run.ckpt");
        let whole = with_checkpoint(&ds, &three, &dir.join("whole"), false, None);
        let whole = whole[0].as_ref().unwrap();
        let whole_two = with_checkpoint(&ds, &two, &dir.join("whole2"), false, None);
        let epoch_one = &whole_two[0].as_ref().unwrap().curve[0];
        let batches = ds.train.len().div_ceil(two.model.batch) as u64;
        let stopped = with_checkpoint(&ds, &two, &base, false, Some(batches + 3));
        all_fail_with(&stopped, &["leaving at step"]);
        let resumed = with_checkpoint(&ds, &three, &base, true, None);
        for r in &resumed {
            let r = r.as_ref().unwrap();
            let (s, w) = (r.sharded.as_ref().unwrap(), whole.sharded.as_ref().unwrap());
            assert_eq!(s.ranks.len(), 3, "{opt}");
            assert_eq!(s.rows, w.rows, "{opt}");
            assert_eq!(
                r.curve.len(),
                2,
                "{opt}: epoch 1 from the file, epoch 2 trained"
            );
            // Epoch 1 is the 2-rank run's (read from its files, not retrained).
            let e = &r.curve[0];
            assert_eq!(e.test_auc.to_bits(), epoch_one.test_auc.to_bits(), "{opt}");
            assert_eq!(
                e.train_loss.to_bits(),
                epoch_one.train_loss.to_bits(),
                "{opt}"
            );
            let (a, b) = (r.final_metrics.test_auc, whole.final_metrics.test_auc);
            assert!(
                (a - b).abs() < 1e-3,
                "{opt}: resumed {a}, uninterrupted {b}"
            );
        }
        // The resumed run writes 3-rank files; a 2-rank file missing fails
        // every rank, naming it.
        let stopped = with_checkpoint(&ds, &two, &base, false, Some(batches + 3));
        all_fail_with(&stopped, &["leaving at step"]);
        std::fs::remove_file(basis_shard::rank_path(&base, 1)).unwrap();
        let out = with_checkpoint(&ds, &three, &base, true, None);
        all_fail_with(&out, &["resume failed on rank 0", "rank1"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// `--admit-min-count` and `--evict-capacity` reach the table: gradients
/// of ids not admitted yet are dropped, rows are evicted, the job holds at
/// most the capacity (plus the rows created since the last sweep) and
/// reports both counts; `--checkpoint` with them resumes bit for bit.
#[test]
fn admission_and_eviction_flags_reach_the_table_and_are_reported() {
    let plain = sharded(2, &[]);
    let ds = load(&plain);
    let (_, all) = test_auc(&ds, &plain);
    let all = all.sharded.unwrap();
    assert_eq!((all.rows_evicted, all.grads_dropped), (0, 0));
    let a = sharded(2, &["--admit-min-count", "2", "--evict-capacity", "150"]);
    let r = crate::train::train(&ds, &run_of(&a)).unwrap();
    let s = r.sharded.as_ref().unwrap();
    assert!(s.grads_dropped > 0, "{s:?}");
    assert!(s.rows_evicted > 0, "{s:?}");
    assert_eq!(
        s.rows_evicted,
        s.ranks.iter().map(|k| k.rows_evicted).sum::<u64>()
    );
    assert!(s.rows < all.rows, "{} of {}", s.rows, all.rows);
    // The last sweep left at most 150 rows; one step adds at most a
    // batch's ids.
    let per_step = (a.model.batch * ds.fields.len()) as u64;
    for k in &s.ranks {
        assert!(k.rows <= 150 + per_step, "rank {}: {} rows", k.rank, k.rows);
    }
    let json = serde_json::to_string(s).unwrap();
    assert!(json.contains("\"rows_evicted\"") && json.contains("\"grads_dropped\""));
    let p = sharded(2, &["--admit-prob", "0.5", "--evict-ttl", "3"]);
    let s = crate::train::train(&ds, &run_of(&p))
        .unwrap()
        .sharded
        .unwrap();
    assert!(s.grads_dropped > 0 && s.rows_evicted > 0, "{s:?}");
    // The rank files carry the admission counters and last-seen steps (the
    // table's snapshot): such a run resumes bit for bit.
    let a = sharded(
        2,
        &[
            "--admit-min-count",
            "2",
            "--evict-ttl",
            "3",
            "--epochs",
            "2",
        ],
    );
    let dir = temp_dir("admit-checkpoint");
    let whole = with_checkpoint(&ds, &a, &dir.join("whole"), false, None);
    let base = dir.join("run.ckpt");
    let batches = ds.train.len().div_ceil(a.model.batch) as u64;
    let stopped = with_checkpoint(&ds, &a, &base, false, Some(batches + 3));
    all_fail_with(&stopped, &["leaving at step"]);
    let resumed = with_checkpoint(&ds, &a, &base, true, None);
    for (w, r) in whole.iter().zip(&resumed) {
        let (w, r) = (w.as_ref().unwrap(), r.as_ref().unwrap());
        assert_eq!(w.model_crc32, r.model_crc32);
        assert!(r.sharded.as_ref().unwrap().rows_evicted > 0);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--row-precision bf16` rank files hold the rows at 2 bytes a value (the
/// table's snapshot), so they are smaller than the f32 run's by half its
/// row bytes; a bf16 run resumes bit for bit and reshards from 2 to 3 ranks.
#[test]
fn bf16_rank_files_are_half_the_row_bytes_and_resume_and_reshard() {
    let extra = ["--epochs", "2", "--dense-opt", "adam"];
    let bf16 = [&extra[..], &["--row-precision", "bf16"]].concat();
    let (f32_run, two, three) = (sharded(2, &extra), sharded(2, &bf16), sharded(3, &bf16));
    let ds = load(&two);
    let dir = temp_dir("bf16-ckpt");
    let (wide, narrow) = (dir.join("f32"), dir.join("bf16"));
    let whole_f32 = with_checkpoint(&ds, &f32_run, &wide, false, None);
    let whole = with_checkpoint(&ds, &two, &narrow, false, None);
    let d = two.model.dim + 1;
    for r in 0..2 {
        let rows = whole[0].as_ref().unwrap().sharded.as_ref().unwrap().ranks[r].rows;
        let wide_rows = whole_f32[0]
            .as_ref()
            .unwrap()
            .sharded
            .as_ref()
            .unwrap()
            .ranks[r]
            .rows;
        assert_eq!(rows, wide_rows);
        let file = |b: &std::path::Path| basis_std::checkpoint::load(&basis_shard::rank_path(b, r));
        let (w, n) = (file(&wide).unwrap(), file(&narrow).unwrap());
        assert_eq!(
            w.get("shard.rows").unwrap().len() as u64,
            rows * d as u64 * 4
        );
        assert_eq!(
            n.get("shard.rows").unwrap().len() as u64,
            rows * d as u64 * 2
        );
        // The rest (ids, state, dense part, history) is the same up to the
        // history's digits.
        let saved = w.encoded_len() as i64 - n.encoded_len() as i64;
        let half = (rows * d as u64 * 2) as i64;
        assert!(
            (saved - half).abs() < 64,
            "saved {saved} bytes, half the rows {half}"
        );
        // No row values outside the snapshot, at any width.
        let own: usize = n
            .names()
            .filter(|s| !s.starts_with("shard."))
            .map(|s| n.get(s).unwrap().len())
            .sum();
        assert!(
            (own as u64) < rows * d as u64,
            "{own} bytes of the CLI's own sections"
        );
    }
    let base = dir.join("run.ckpt");
    let batches = ds.train.len().div_ceil(two.model.batch) as u64;
    let stopped = with_checkpoint(&ds, &two, &base, false, Some(batches + 3));
    all_fail_with(&stopped, &["leaving at step"]);
    let saved: Vec<Vec<u8>> = (0..2)
        .map(|r| std::fs::read(basis_shard::rank_path(&base, r)).unwrap())
        .collect();
    let resumed = with_checkpoint(&ds, &two, &base, true, None);
    for (w, r) in whole.iter().zip(&resumed) {
        assert_eq!(
            w.as_ref().unwrap().model_crc32,
            r.as_ref().unwrap().model_crc32
        );
    }
    for (r, b) in saved.iter().enumerate() {
        std::fs::write(basis_shard::rank_path(&base, r), b).unwrap();
    }
    let whole_three = with_checkpoint(&ds, &three, &dir.join("three"), false, None);
    let whole_three = whole_three[0].as_ref().unwrap();
    for r in &with_checkpoint(&ds, &three, &base, true, None) {
        let r = r.as_ref().unwrap();
        let (s, w) = (
            r.sharded.as_ref().unwrap(),
            whole_three.sharded.as_ref().unwrap(),
        );
        assert_eq!((s.ranks.len(), s.rows), (3, w.rows));
        assert_eq!(s.row_precision, "bf16");
        let (a, b) = (r.final_metrics.test_auc, whole_three.final_metrics.test_auc);
        assert!((a - b).abs() < 1e-3, "resharded {a}, uninterrupted {b}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The admission and eviction flags need `--shard rows`.
#[test]
fn admission_and_eviction_flags_need_shard_rows() {
    for flag in [
        ["--admit-min-count", "2"],
        ["--admit-prob", "0.5"],
        ["--evict-ttl", "10"],
        ["--evict-capacity", "100"],
    ] {
        let argv = ["basis", "train", "--workers", "2", flag[0], flag[1]];
        let e = Cli::try_parse_from(argv).unwrap_err().to_string();
        assert!(e.contains("--shard"), "{flag:?}: {e}");
    }
    for bad in [
        ["--admit-min-count", "1"],
        ["--admit-prob", "0"],
        ["--evict-ttl", "0"],
    ] {
        let argv = ["basis", "train", "--shard", "rows", bad[0], bad[1]];
        assert!(Cli::try_parse_from(argv).is_err(), "{bad:?}");
    }
    let both = [
        "basis",
        "train",
        "--shard",
        "rows",
        "--admit-min-count",
        "2",
        "--admit-prob",
        "0.5",
    ];
    assert!(Cli::try_parse_from(both).is_err());
}

/// `--row-precision bf16`: rows at 2 bytes per value in the report, runs
/// that repeat bit for bit, a model other than the f32 run's, and the
/// f32 run's test AUC within 0.01 on this small run.
#[test]
fn bf16_rows_halve_the_row_bytes_and_repeat_bit_for_bit() {
    let f32_args = sharded(2, &["--opt", "basis"]);
    let ds = load(&f32_args);
    let (x, wide) = test_auc(&ds, &f32_args);
    let bf16_args = sharded(2, &["--opt", "basis", "--row-precision", "bf16"]);
    let (y, narrow) = test_auc(&ds, &bf16_args);
    let (_, again) = test_auc(&ds, &bf16_args);
    assert_eq!(narrow.model_crc32, again.model_crc32);
    assert_ne!(narrow.model_crc32, wide.model_crc32);
    assert!((x - y).abs() < 0.01, "f32 {x}, bf16 {y}");
    let (w, n) = (wide.sharded.unwrap(), narrow.sharded.unwrap());
    assert_eq!((w.row_precision, n.row_precision), ("f32", "bf16"));
    assert_eq!(w.rows, n.rows);
    let d = (wide.row_dim) as f64;
    assert!(w.row_bytes_per_row >= 4.0 * d, "{}", w.row_bytes_per_row);
    assert!(
        n.row_bytes_per_row >= 2.0 * d && n.row_bytes_per_row <= 2.0 * d * 1.2,
        "{}",
        n.row_bytes_per_row
    );
}

/// 0/1 Adam and 1-bit LAMB on the DeepFM tower: a run checkpointed in
/// epoch 1 (0/1 Adam past its freeze at step 39 of 158, inside a local
/// interval; LAMB past its warm-up) and resumed ends bit-identical to the
/// uninterrupted run; resuming with another `--dense-opt`, 0/1 Adam with
/// another `--dense-warmup-reduce`, or on another group size is refused on
/// every rank, naming why.
#[test]
fn resume_with_zero_one_adam_and_onebit_lamb_is_bit_identical() {
    for dopt in ["zero-one-adam", "onebit-lamb"] {
        let extra = |d: &'static str| {
            [
                "--epochs",
                "2",
                "--model",
                "deepfm",
                "--mlp",
                "16,1",
                "--dense-warmup",
                "0.25",
                "--dense-opt",
                d,
            ]
        };
        let a = sharded(2, &extra(dopt));
        let ds = load(&a);
        let dir = temp_dir(dopt);
        let base = dir.join("run.ckpt");
        let (whole, files, saved) = stop_and_resume(&ds, &a, &dir, &base, dopt);
        let batches = ds.train.len().div_ceil(a.model.batch) as u64;
        assert_eq!(whole[0].dense_freeze_step, Some(2 * batches / 4), "{dopt}");
        // Another dense optimizer: the fingerprint names the option.
        let other = sharded(2, &extra("onebit-adam"));
        let out = with_checkpoint(&ds, &other, &base, true, None);
        all_fail_with(&out, &["resume failed on rank 0", "--dense-opt"]);
        // 0/1 Adam's variance steps reduce by `--dense-warmup-reduce`
        // (bf16 here, the default): an f32 resume is refused, naming it.
        if dopt == "zero-one-adam" {
            let mut argv = extra(dopt).to_vec();
            argv.extend(["--dense-warmup-reduce", "f32"]);
            let out = with_checkpoint(&ds, &sharded(2, &argv), &base, true, None);
            all_fail_with(
                &out,
                &["it has --dense-warmup-reduce bf16, this run --dense-warmup-reduce f32"],
            );
        }
        // Another group size: the per-rank state cannot move.
        for (f, b) in files.iter().zip(&saved) {
            std::fs::write(f, b).unwrap();
        }
        let three = sharded(3, &extra(dopt));
        let out = with_checkpoint(&ds, &three, &base, true, None);
        all_fail_with(
            &out,
            &[
                "resume failed on rank 0",
                "resharding the 2 ranks' checkpoints",
                "cannot move to another group size exactly",
            ],
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// `--row-index` picks the table's id index, which changes no result and
/// no checkpoint: runs under `fast` and `compact` end bit-identical, and a
/// run stopped under one resumes under the other bit for bit.
#[test]
fn row_index_changes_no_result_and_resumes_across_kinds() {
    let fast = sharded(
        2,
        &["--epochs", "2", "--opt", "basis", "--row-index", "fast"],
    );
    let compact = sharded(
        2,
        &["--epochs", "2", "--opt", "basis", "--row-index", "compact"],
    );
    assert_eq!(fast.model.row_index, Some(basis_shard::IndexKind::Fast));
    assert_eq!(
        compact.model.row_index,
        Some(basis_shard::IndexKind::Compact)
    );
    let ds = load(&fast);
    let dir = temp_dir("row-index");
    let whole = |a: &TrainArgs, name: &str| -> Vec<RunResult> {
        with_checkpoint(&ds, a, &dir.join(name), false, None)
            .into_iter()
            .map(Result::unwrap)
            .collect()
    };
    let (wf, wc) = (whole(&fast, "fast"), whole(&compact, "compact"));
    for (f, c) in wf.iter().zip(&wc) {
        assert_eq!(f.model_crc32, c.model_crc32);
        // The flag reaches the table: the compact index is the smaller.
        let bytes = |r: &RunResult| r.sharded.as_ref().unwrap().index_bytes_per_row;
        assert!(bytes(c) < bytes(f) / 2.0, "{} vs {}", bytes(c), bytes(f));
    }
    let base = dir.join("run.ckpt");
    let batches = ds.train.len().div_ceil(fast.model.batch) as u64;
    for (from, to) in [(&fast, &compact), (&compact, &fast)] {
        let stopped = with_checkpoint(&ds, from, &base, false, Some(batches + 3));
        all_fail_with(&stopped, &["leaving at step"]);
        let resumed = with_checkpoint(&ds, to, &base, true, None);
        for (w, r) in wf.iter().zip(&resumed) {
            let r = r.as_ref().unwrap();
            assert_eq!(w.model_crc32, r.model_crc32);
            assert_eq!(
                w.final_metrics.test_auc.to_bits(),
                r.final_metrics.test_auc.to_bits()
            );
        }
    }
}
