//! Integration tests of `--model deepfm`: determinism, learning against the
//! FM, data-parallel dense optimizers, checkpoints, bad `--mlp`, `--threads`.
#![allow(clippy::unwrap_used)] // tests

use serde_json::Value;
use std::process::{Command, Output};

fn basis(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_basis"))
        .args(args)
        .output()
        .unwrap()
}

fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--json", "-"]);
    let out = basis(&all);
    assert!(
        out.status.success(),
        "basis {all:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The run record of a `compare --json` with one optimizer and one seed.
fn run(args: &[&str]) -> Value {
    json(args)["results"][0]["runs"][0].clone()
}

fn auc(r: &Value) -> f64 {
    r["final_metrics"]["test_auc"].as_f64().unwrap()
}

const SMALL: [&str; 12] = [
    "compare",
    "-q",
    "--synthetic-examples",
    "8000",
    "--epochs",
    "2",
    "--dim",
    "4",
    "--opt",
    "adam",
    "--dense-lr",
    "0.001",
];

fn deep<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v: Vec<&str> = SMALL.to_vec();
    v.extend(["--model", "deepfm", "--mlp", "32,16,1"]);
    v.extend(extra);
    v
}

#[test]
fn deepfm_is_deterministic_and_learns_like_the_fm() {
    let a = run(&deep(&[]));
    let b = run(&deep(&[]));
    assert_eq!(a["model_crc32"], b["model_crc32"]);
    assert_eq!(
        a["dense_params"],
        1 + 8 * 4 * 32 + 32 + 32 * 16 + 16 + 16 + 1
    );
    let other_seed = run(&deep(&["--seed", "2"]));
    assert_ne!(a["model_crc32"], other_seed["model_crc32"]);
    let fm = run(&SMALL);
    // The synthetic labels come from a planted FM: DeepFM must learn them
    // (well above chance) and come close to the FM itself.
    assert!(auc(&a) > 0.6, "deepfm {}", auc(&a));
    assert!(
        auc(&a) > auc(&fm) - 0.03,
        "deepfm {} fm {}",
        auc(&a),
        auc(&fm)
    );
}

#[test]
fn deepfm_trains_the_same_bits_on_one_and_three_threads() {
    // A tower whose products are split over the threads (`deep::par`).
    let with = |t: &'static str| {
        let mut v = SMALL.to_vec();
        v.extend(["--model", "deepfm", "--mlp", "256,64,1", "--threads", t]);
        run(&v)
    };
    let (one, three) = (with("1"), with("3"));
    assert_eq!(one["model_crc32"], three["model_crc32"]);
    assert_eq!(one["final_metrics"], three["final_metrics"]);
    let zero = basis(&deep(&["--threads", "0"]));
    assert!(!zero.status.success());
    assert!(String::from_utf8_lossy(&zero.stderr).contains("--threads"));
}

#[test]
fn fm_trains_the_same_bits_on_one_and_three_threads() {
    // `--opt adam`'s sparse step runs on the pool at 3 threads
    // (`basis_rayon::par_exact_adam_step_dense`): the same model as at 1.
    let with = |t: &'static str| {
        let mut v = SMALL.to_vec();
        v.extend(["--threads", t]);
        run(&v)
    };
    let (one, three) = (with("1"), with("3"));
    assert_eq!(one["model_crc32"], three["model_crc32"]);
    assert_eq!(one["final_metrics"], three["final_metrics"]);
}

#[test]
fn deepfm_beats_the_fm_on_criteo_synth() {
    // The hidden model has a ReLU teacher over 8 fields: beyond an FM.
    let args = |model| {
        vec![
            "compare",
            "-q",
            "--format",
            "criteo-synth",
            "--synthetic-examples",
            "100000",
            "--synthetic-ids",
            "1000000",
            "--epochs",
            "2",
            "--dim",
            "4",
            "--opt",
            "adam",
            "--dense-lr",
            "0.002",
            "--mlp",
            "64,32,1",
            "--model",
            model,
        ]
    };
    let fm = run(&args("fm"));
    let deepfm = run(&args("deepfm"));
    assert!(auc(&fm) > 0.7, "fm {}", auc(&fm));
    assert!(
        auc(&deepfm) > auc(&fm) + 0.01,
        "deepfm {} fm {}",
        auc(&deepfm),
        auc(&fm)
    );
}

/// `--dense-overlap on` (1-bit Adam's split step on communication
/// threads) trains the bits of `off` and sends the same bytes, in the
/// replicated and the sharded trainer, with one tower group and one group
/// per layer, across the freeze; per-layer groups are other bits once
/// compressed (one scale per layer).
#[test]
fn dense_overlap_on_trains_the_bits_of_off() {
    // DLRM: the top tower's groups begin inside the backward pass, the
    // bottom's at its end (after the row gradients).
    let dlrm = [
        "--model",
        "dlrm",
        "--format",
        "criteo-synth",
        "--synthetic-ids",
        "20000",
        "--bottom-mlp",
        "8",
        "--mlp",
        "32,16,1",
    ];
    for (model, shard) in [
        ("deepfm", false),
        ("deepfm", true),
        ("dlrm", false),
        ("dlrm", true),
    ] {
        let mut crcs = Vec::new();
        for groups in ["tower", "layer"] {
            let with = |overlap: &'static str| {
                let mut extra = vec![
                    "--workers",
                    "3",
                    "--dense-opt",
                    "onebit-adam",
                    "--dense-warmup",
                    "0.3",
                    "--dense-groups",
                    groups,
                    "--dense-overlap",
                    overlap,
                ];
                if shard {
                    extra.extend(["--shard", "rows"]);
                }
                let args = if model == "dlrm" {
                    let mut v: Vec<&str> = SMALL.to_vec();
                    v.extend(dlrm);
                    v.extend(extra);
                    v
                } else {
                    deep(&extra)
                };
                run(&args)
            };
            let (on, off) = (with("on"), with("off"));
            let what = format!("{model}, shard {shard}, groups {groups}");
            assert_eq!(on["model_crc32"], off["model_crc32"], "{what}");
            assert_eq!(on["final_metrics"], off["final_metrics"], "{what}");
            for bytes in ["comm_bytes", "comm_dense_bytes", "comm_sparse_bytes"] {
                assert_eq!(on[bytes], off[bytes], "{what}: {bytes}");
            }
            assert_eq!(on["dense_freeze_step"], off["dense_freeze_step"], "{what}");
            crcs.push(on["model_crc32"].clone());
        }
        assert_ne!(
            crcs[0], crcs[1],
            "{model}, shard {shard}: layer groups = tower group"
        );
    }
    // Per-layer groups are 1-bit Adam's: other optimizers refuse them.
    let e = basis(&deep(&[
        "--workers",
        "2",
        "--dense-opt",
        "zero-one-adam",
        "--dense-groups",
        "layer",
    ]));
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("--dense-groups layer"));
    // The default (0/1 Adam) and 1-bit LAMB have no split step: asking
    // them to overlap is refused, not run blocking in silence.
    for opt in [None, Some("onebit-lamb")] {
        let mut args = vec!["--workers", "2", "--dense-overlap", "on"];
        if let Some(o) = opt {
            args.extend(["--dense-opt", o]);
        }
        let e = basis(&deep(&args));
        let err = String::from_utf8_lossy(&e.stderr);
        assert!(!e.status.success(), "{opt:?}");
        let name = opt.unwrap_or("zero-one-adam");
        assert!(
            err.contains(&format!("--dense-overlap on: only --dense-opt adam and onebit-adam overlap their collectives, not {name}")),
            "{err}"
        );
    }
}

#[test]
fn workers_train_the_tower_with_adam_or_one_bit_adam() {
    let adam = run(&deep(&["--workers", "2", "--dense-opt", "adam"]));
    let onebit = run(&deep(&["--workers", "2", "--dense-opt", "onebit-adam"]));
    let one = run(&deep(&[]));
    for r in [&adam, &onebit] {
        let (t, s, d) = (
            r["comm_bytes"].as_u64().unwrap(),
            r["comm_sparse_bytes"].as_u64().unwrap(),
            r["comm_dense_bytes"].as_u64().unwrap(),
        );
        assert!(s > 0 && d > 0 && s + d <= t, "{t} {s} {d}");
        assert!(
            (auc(r) - auc(&one)).abs() < 0.02,
            "{} vs {}",
            auc(r),
            auc(&one)
        );
    }
    // 1-bit after a 20 % warm-up: well under half of the f32 all-reduce bytes.
    let (da, d1) = (
        adam["comm_dense_bytes"].as_u64().unwrap(),
        onebit["comm_dense_bytes"].as_u64().unwrap(),
    );
    assert!(2 * d1 < da, "1-bit {d1} vs f32 {da}");
    assert_eq!(adam["comm_sparse_bytes"], onebit["comm_sparse_bytes"]);
}

#[test]
fn deepfm_resume_equals_an_uninterrupted_run() {
    let dir = std::env::temp_dir().join(format!("basis-deep-ckpt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.display().to_string();
    let full = run(&deep(&[]));
    let mut first = deep(&["--checkpoint", &d]);
    first[5] = "1"; // --epochs 1
    run(&first);
    let resumed = run(&deep(&["--checkpoint", &d, "--resume"]));
    assert_eq!(full["model_crc32"], resumed["model_crc32"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_mlp_widths_are_errors_naming_the_option() {
    for mlp in ["32,2", "0,1", "100000000000,1"] {
        let out = basis(
            &deep(&[])
                .into_iter()
                .map(|a| if a == "32,16,1" { mlp } else { a })
                .collect::<Vec<_>>(),
        );
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "--mlp {mlp}: {e}");
        assert!(e.contains("--mlp"), "--mlp {mlp}: {e}");
    }
    let out = basis(&[
        "train",
        "-q",
        "--format",
        "criteo-synth",
        "--synthetic-ids",
        "5",
    ]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(e.contains("--synthetic-ids 5"), "{e}");
}
