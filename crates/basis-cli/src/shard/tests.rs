//! Sharded training on `LocalComm`: against the single-process trainer
//! (test AUC), bit-identical repeats, all-to-one skew, ranks that disagree
//! on an option, and a rank that dies mid-step.

use super::*;
use crate::cli::{Cli, Command, TrainArgs};
use clap::Parser;
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

#[test]
fn sharded_reaches_the_single_process_auc() {
    // The CLI's default synthetic set (200 000 examples), two epochs.
    for opt in ["basis", "adam"] {
        let single = args(&[
            "--opt",
            opt,
            "--synthetic-examples",
            "200000",
            "--epochs",
            "2",
        ]);
        let ds = load(&single);
        let one = crate::train::train(&ds, &run_of(&single)).unwrap();
        for p in ["1", "3"] {
            let a = args(&[
                "--opt",
                opt,
                "--synthetic-examples",
                "200000",
                "--epochs",
                "2",
                "--workers",
                p,
                "--shard",
                "rows",
            ]);
            let r = crate::train::train(&ds, &run_of(&a)).unwrap();
            let (x, y) = (one.final_metrics.test_auc, r.final_metrics.test_auc);
            assert!((x - y).abs() < 1e-3, "{opt} P={p}: single {x}, sharded {y}");
            assert!(y > 0.6, "{opt} P={p} learned nothing: {y}");
            let s = r.sharded.as_ref().unwrap();
            assert_eq!(s.ranks.iter().map(|k| k.rows).sum::<u64>(), ds.rows as u64);
            if opt == "basis" {
                assert!(s.state_bytes_per_row <= 1.5, "{}", s.state_bytes_per_row);
            }
        }
    }
}

#[test]
fn sharded_deepfm_reaches_the_single_process_auc() {
    let deep = [
        "--model",
        "deepfm",
        "--mlp",
        "64,32,1",
        "--opt",
        "adam",
        "--dense-opt",
        "adam",
    ];
    let big = ["--synthetic-examples", "200000", "--epochs", "2"];
    let single = args(&[&deep[..], &big[..]].concat());
    let ds = load(&single);
    let one = crate::train::train(&ds, &run_of(&single)).unwrap();
    let a = args(
        &[
            &deep[..],
            &big[..],
            &["--workers", "2", "--shard", "rows"][..],
        ]
        .concat(),
    );
    let r = crate::train::train(&ds, &run_of(&a)).unwrap();
    let (x, y) = (one.final_metrics.test_auc, r.final_metrics.test_auc);
    assert!((x - y).abs() < 1e-3, "single {x}, sharded {y}");
    assert_eq!(r.dense_params, one.dense_params);
    assert!(r.dense_params > 1000, "a real tower: {}", r.dense_params);
}

#[test]
fn repeated_runs_are_bit_identical_and_every_rank_agrees() {
    let a = args(&[
        "--workers",
        "3",
        "--shard",
        "rows",
        "--synthetic-examples",
        "20000",
    ]);
    let ds = load(&a);
    let owner = route::hashed_owner(3, a.model.seed).unwrap();
    let runs: Vec<Vec<RunResult>> = (0..2)
        .map(|_| {
            LocalComm::run(3, |mut c| {
                rank_main(&ds, &run_of(&a), &mut c, &owner).unwrap()
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

#[test]
fn all_ids_on_one_rank_is_reported_as_skew_not_a_crash() {
    let a = args(&[
        "--workers",
        "3",
        "--shard",
        "rows",
        "--synthetic-examples",
        "20000",
    ]);
    let ds = load(&a);
    let r = train_local(&ds, &run_of(&a), 3, &|_| 0).unwrap();
    let s = r.sharded.unwrap();
    assert_eq!(s.ranks[0].rows, ds.rows as u64);
    assert_eq!(s.ranks[1].rows + s.ranks[2].rows, 0);
    assert!((s.row_skew - 3.0).abs() < 1e-9);
    assert!(r.final_metrics.test_auc > 0.6);
}

#[test]
fn ranks_that_disagree_on_an_option_all_fail_naming_it() {
    let a = args(&["--workers", "2", "--shard", "rows", "--batch", "256"]);
    let b = args(&["--workers", "2", "--shard", "rows", "--batch", "128"]);
    let ds = load(&a);
    let owner = route::hashed_owner(2, 1).unwrap();
    let out = LocalComm::run(2, |mut c| {
        let mine = if c.rank() == 0 { &a } else { &b };
        rank_main(&ds, &run_of(mine), &mut c, &owner).map(|_| ())
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
    let a = args(&[
        "--workers",
        "3",
        "--shard",
        "rows",
        "--synthetic-examples",
        "20000",
    ]);
    let ds = load(&a);
    let owner = route::hashed_owner(3, 1).unwrap();
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
                    rank_main(ds, &run_of(a), &mut c, owner).map(|_| ())
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
