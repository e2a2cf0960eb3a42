//! Integration tests: drive the built `basis` binary on small committed samples.
#![allow(clippy::unwrap_used)] // tests

mod common;

use common::Scratch;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn data(p: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(p)
        .display()
        .to_string()
}

fn basis(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_basis"))
        .args(args)
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = basis(args);
    assert!(
        out.status.success(),
        "basis {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn err(args: &[&str]) -> String {
    let out = basis(args);
    assert!(!out.status.success(), "basis {args:?} should fail");
    String::from_utf8(out.stderr).unwrap()
}

fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--json", "-"]);
    serde_json::from_str(&ok(&all)).unwrap()
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("basis-cli-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Rows of the generated RecBole `.inter` sample.
const RECBOLE_ROWS: u64 = 120;

/// A synthetic RecBole data set in a fresh directory: `sample.inter`
/// (`RECBOLE_ROWS` interactions of users 1..=15 with items 1..=25, ratings
/// 1..=5 and increasing timestamps, drawn from a fixed-seed xorshift) plus
/// copies of the committed side files `recbole/sample.{user,item}`.
fn recbole_sample() -> Scratch {
    let dir = Scratch::new("recbole");
    let mut text = String::from("user_id:token\titem_id:token\trating:float\ttimestamp:float\n");
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        1 + x % n
    };
    for i in 0..RECBOLE_ROWS {
        let (user, item, rating) = (next(15), next(25), next(5));
        let time = 880_000_000 + 37 * i;
        text.push_str(&format!("{user}\t{item}\t{rating}\t{time}\n"));
    }
    std::fs::write(dir.0.join("sample.inter"), text).unwrap();
    for side in ["sample.user", "sample.item"] {
        std::fs::copy(data(&format!("recbole/{side}")), dir.0.join(side)).unwrap();
    }
    dir
}

/// A small, fast synthetic setup shared by the tests.
const SMALL: &[&str] = &[
    "-q",
    "--synthetic-examples",
    "3000",
    "--epochs",
    "2",
    "--dim",
    "4",
];

fn train_on(format: &str, path: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "train",
        "-q",
        "--format",
        format,
        "--data",
        path,
        "--epochs",
        "1",
        "--dim",
        "4",
        "--test-frac",
        "0.3",
    ];
    args.extend_from_slice(extra);
    json(&args)
}

#[test]
fn compare_lists_every_optimizer_and_json_parses() {
    let mut args = vec!["compare"];
    args.extend_from_slice(SMALL);
    let table = ok(&args);
    for name in [
        "adam",
        "rowwise-adagrad",
        "sgd",
        "basis",
        "basis:mode=own",
        "basis:mode=shared",
        "countsketch",
    ] {
        assert!(
            table.contains(&format!("| {name} |")),
            "{name} missing from\n{table}"
        );
    }
    assert!(table.contains("BASIS telemetry"));
    let v = json(&args);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 7);
    let adam = &results[0];
    let basis = &results[3];
    assert_eq!(adam["optimizer"], "adam");
    let auc = adam["runs"][0]["final_metrics"]["test_auc"]
        .as_f64()
        .unwrap();
    assert!(auc > 0.5 && auc < 1.0, "{auc}");
    // The default BASIS (row-scaled, 1-byte scalars) holds >= 20x less state than Adam.
    let (a, b) = (
        adam["state_bytes"].as_f64().unwrap(),
        basis["state_bytes"].as_f64().unwrap(),
    );
    assert!(a / b >= 20.0, "adam {a} basis {b}");
    assert!(basis["runs"][0]["telemetry"]["buckets"].as_u64().unwrap() >= 1);
}

/// The baseline optimizers parse, train and report their exact state,
/// in one process and row-sharded over two ranks (each rank's state grows
/// with its rows through `grow_rows` and steps keyed by global ids).
#[test]
fn baselines_train_in_compare_single_and_sharded() {
    let names = [
        "pra",
        "rowstep-adam",
        "ftrl:beta=0.5,l1=0.0001",
        "adam8bit:block=2",
        "adam",
    ];
    for sharded in [false, true] {
        let mut args = vec!["compare"];
        args.extend_from_slice(SMALL);
        for n in names {
            args.extend(["--opt", n]);
        }
        if sharded {
            args.extend(["--workers", "2", "--shard", "rows"]);
        }
        let v = json(&args);
        let results = v["results"].as_array().unwrap();
        assert_eq!(results.len(), names.len());
        let mut bytes = Vec::new();
        for (r, n) in results.iter().zip(names) {
            assert_eq!(r["optimizer"], n);
            let auc = r["runs"][0]["final_metrics"]["test_auc"].as_f64().unwrap();
            assert!(auc > 0.5 && auc < 1.0, "{n} sharded={sharded}: {auc}");
            bytes.push(r["state_bytes"].as_f64().unwrap());
        }
        // dim 4 → rows of d = 5: Adam 8d = 40 B/row; PRA 4d+4 = 24; the
        // row counter adds 4; FTRL 8d; 8-bit 2d + 8·⌈d/2⌉ = 34 (+ 2 KiB maps).
        let (pra, rowstep, ftrl, q8, adam) = (bytes[0], bytes[1], bytes[2], bytes[3], bytes[4]);
        assert!(pra < adam && adam < rowstep && q8 < adam, "{bytes:?}");
        assert!((ftrl - adam).abs() <= 0.05 * adam, "{bytes:?}");
    }
    let e = err(&["compare", "-q", "--opt", "pra:block=2"]);
    assert!(e.contains("takes `lr`, `beta1`, not `block`"), "{e}");
    let e = err(&["compare", "-q", "--opt", "ftrl:beta=0"]);
    assert!(e.contains("beta must be > 0"), "{e}");
}

#[test]
fn plot_writes_a_valid_png() {
    let dir = tmp("plot");
    let png = dir.join("curves.png");
    let mut args = vec![
        "compare",
        "--opt",
        "adam",
        "--opt",
        "basis",
        "--plot",
        png.to_str().unwrap(),
    ];
    args.extend_from_slice(SMALL);
    ok(&args);
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&bytes[12..16], b"IHDR");
    let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!(width, 1200);
    assert!(height >= 480, "{height}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn movielens_udata_and_recbole_parse() {
    let v = train_on("movielens", &data("movielens/sample_udata.data"), &[]);
    assert_eq!(v["data"]["load"]["examples"], 120);
    assert_eq!(v["data"]["load"]["malformed_count"], 0);
    assert_eq!(v["data"]["split"], "time-ordered");
    let recbole = recbole_sample();
    let inter = recbole.0.join("sample.inter");
    let v = train_on("movielens", inter.to_str().unwrap(), &[]);
    assert_eq!(v["data"]["load"]["examples"], RECBOLE_ROWS);
    assert_eq!(v["data"]["load"]["malformed_count"], 0);
    let fields: Vec<&str> = v["data"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    for f in [
        "user_id",
        "item_id",
        "age",
        "occupation",
        "movie_title",
        "class",
    ] {
        assert!(fields.contains(&f), "{f} not in {fields:?}");
    }
    // A directory resolves to its .inter file.
    let v = train_on("movielens", recbole.0.to_str().unwrap(), &[]);
    assert_eq!(v["data"]["load"]["examples"], RECBOLE_ROWS);
}

#[test]
fn malformed_lines_are_counted_with_line_numbers_or_rejected_in_strict_mode() {
    let v = train_on("movielens", &data("movielens/u_malformed.data"), &[]);
    let load = &v["data"]["load"];
    assert_eq!(load["malformed_count"], 2);
    assert_eq!(load["examples"], 38);
    assert_eq!(load["malformed"][0]["line"], 3);
    assert!(
        load["malformed"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("rating `five`")
    );
    assert_eq!(load["malformed"][1]["line"], 7);
    // The human report names them too.
    let text = ok(&[
        "train",
        "-q",
        "--format",
        "movielens",
        "--data",
        &data("movielens/u_malformed.data"),
        "--epochs",
        "1",
        "--dim",
        "2",
        "--test-frac",
        "0.3",
    ]);
    assert!(text.contains("2 malformed lines skipped"), "{text}");
    assert!(text.contains("u_malformed.data:3:"), "{text}");
    let e = err(&[
        "train",
        "-q",
        "--strict",
        "--format",
        "movielens",
        "--data",
        &data("movielens/u_malformed.data"),
    ]);
    assert!(e.contains("u_malformed.data:3: malformed line"), "{e}");
}

#[test]
fn criteo_libsvm_and_text_parse() {
    let v = train_on("criteo", &data("criteo_sample.tsv"), &[]);
    assert_eq!(v["data"]["load"]["examples"], 100);
    assert_eq!(v["data"]["fields"].as_array().unwrap().len(), 39);
    let v = train_on("libsvm", &data("libsvm_sample.svm"), &[]);
    let load = &v["data"]["load"];
    assert_eq!(load["examples"], 100);
    assert_eq!(load["malformed_count"], 1);
    assert_eq!(load["malformed"][0]["line"], 31);
    assert_eq!(load["blank"], 2); // an empty line and a comment-only line
    let v = train_on("text", &data("text"), &[]);
    let load = &v["data"]["load"];
    assert_eq!(load["examples"], 40);
    assert_eq!(load["malformed_count"], 1); // ham/empty.txt has no token
    assert!(
        load["malformed"][0]["file"]
            .as_str()
            .unwrap()
            .ends_with("empty.txt")
    );
    assert_eq!(v["data"]["fields"], serde_json::json!(["token", "bigram"]));
}

#[test]
fn a_file_in_another_format_is_an_error() {
    let e = err(&[
        "train",
        "-q",
        "--format",
        "criteo",
        "--data",
        &data("libsvm_sample.svm"),
    ]);
    assert!(
        e.contains("is not a criteo file") && e.contains("line 1"),
        "{e}"
    );
    let e = err(&[
        "train",
        "-q",
        "--format",
        "movielens",
        "--data",
        &data("criteo_sample.tsv"),
    ]);
    assert!(e.contains("is not a movielens file"), "{e}");
    let e = err(&[
        "train",
        "-q",
        "--format",
        "libsvm",
        "--data",
        &data("criteo_sample.tsv"),
    ]);
    assert!(e.contains("is not a libsvm file"), "{e}");
    let e = err(&[
        "train",
        "-q",
        "--format",
        "text",
        "--data",
        &data("criteo_sample.tsv"),
    ]);
    assert!(e.contains("is not a text file"), "{e}");
    let e = err(&[
        "train",
        "-q",
        "--format",
        "libsvm",
        "--data",
        &data("no/such/file"),
    ]);
    assert!(e.contains("cannot read"), "{e}");
}

#[test]
fn bad_arguments_are_clear_errors() {
    let e = err(&["train", "--opt", "basis:mode=diagonal"]);
    assert!(
        e.contains("bad optimizer spec") && e.contains("mode `diagonal`"),
        "{e}"
    );
    let e = err(&["train", "--opt", "adam:ratio=10"]);
    assert!(e.contains("takes `lr`, `beta1`, not `ratio`"), "{e}");
    let e = err(&["train", "--opt", "sgd:beta1=0"]);
    assert!(e.contains("takes only `lr`"), "{e}");
    let e = err(&["train", "--resume"]);
    assert!(e.contains("--checkpoint"), "{e}");
    let e = err(&["train", "-q", "--data", &data("libsvm_sample.svm")]);
    assert!(e.contains("--data needs --format"), "{e}");
    let e = err(&["compare", "-q", "--tune-lr", "0,0.1"]);
    assert!(e.contains("--tune-lr"), "{e}");
}

#[test]
fn resumed_run_equals_uninterrupted_run_bit_for_bit() {
    for opt in ["basis", "adam", "basis:mode=shared,choices=2,storage=bf16"] {
        let dir = tmp(&format!("ckpt-{}", opt.len()));
        let d = dir.to_str().unwrap();
        let base = [
            "train",
            "-q",
            "--synthetic-examples",
            "3000",
            "--dim",
            "4",
            "--opt",
            opt,
        ];
        let full = json(&[&base[..], &["--epochs", "3"]].concat());
        // Two epochs, not one: plain `basis` on one pass is another
        // configuration (`BasisConfig::one_pass`), refused on resume below.
        json(&[&base[..], &["--epochs", "2", "--checkpoint", d]].concat());
        let resumed =
            json(&[&base[..], &["--epochs", "3", "--checkpoint", d, "--resume"]].concat());
        let (f, r) = (
            &full["results"][0]["runs"][0],
            &resumed["results"][0]["runs"][0],
        );
        assert_eq!(f["model_crc32"], r["model_crc32"], "{opt}");
        assert_eq!(f["curve"], r["curve"], "{opt}");
        // A corrupted checkpoint is refused.
        let file = dir.join("run.ckpt");
        let mut bytes = std::fs::read(&file).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 1;
        std::fs::write(&file, bytes).unwrap();
        let e = err(&[&base[..], &["--epochs", "4", "--checkpoint", d, "--resume"]].concat());
        assert!(e.contains("corrupted"), "{e}");
        // A checkpoint of another configuration is refused.
        json(&[&base[..], &["--epochs", "1", "--checkpoint", d]].concat());
        let e = err(&[
            "train",
            "-q",
            "--synthetic-examples",
            "3000",
            "--dim",
            "4",
            "--opt",
            "sgd",
            "--checkpoint",
            d,
            "--resume",
        ]);
        assert!(e.contains("other data or options"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn a_run_removes_stale_checkpoint_temp_files_and_keeps_checkpoints() {
    let dir = Scratch::new("stale");
    let d = dir.0.to_str().unwrap();
    let base = [
        "train",
        "-q",
        "--synthetic-examples",
        "2000",
        "--dim",
        "4",
        "--epochs",
        "1",
        "--checkpoint",
        d,
    ];
    let out = basis(&base);
    assert!(out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stderr.contains("stale"), "nothing to clean: {stderr}");
    let ckpt = dir.0.join("run.ckpt");
    let real = std::fs::read(&ckpt).unwrap();
    // What a SIGKILL during a save leaves: `basis_std::checkpoint::stage`
    // names its temp file `.NAME.tmp-PID-N` next to the target.
    let stale = dir
        .0
        .join(format!(".run.ckpt.tmp-{}-3", std::process::id()));
    std::fs::write(&stale, &real[..real.len() / 2]).unwrap();
    // Resuming at the epoch reached writes nothing, so the checkpoint must
    // stay byte-identical.
    let out = basis(&[&base[..], &["--resume"]].concat());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("removed 1 stale checkpoint temp file(s)"),
        "{stderr}"
    );
    assert!(!stale.exists(), "stale temp file left");
    assert_eq!(std::fs::read(&ckpt).unwrap(), real);
    let names: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["run.ckpt"]);
}

#[test]
fn inspect_compares_one_and_two_choices() {
    let v = json(&[
        "inspect",
        "-q",
        "--synthetic-examples",
        "5000",
        "--ratio",
        "20",
    ]);
    let s = v["strategies"].as_array().unwrap();
    assert_eq!(s.len(), 2);
    let one = s[0]["rows"]["max"].as_u64().unwrap();
    let two = s[1]["rows"]["max"].as_u64().unwrap();
    assert!(two <= one, "two-choice max {two} > one-choice max {one}");
    assert_eq!(s[0]["bucket_map_bytes"], 0);
    let text = ok(&[
        "inspect",
        "-q",
        "--synthetic-examples",
        "5000",
        "--ratio",
        "20",
    ]);
    assert!(text.contains("| 1 |") && text.contains("| 2 |"), "{text}");
}

#[test]
fn workers_report_bytes_sent_and_learn_like_one_worker() {
    let base = [
        "compare",
        "-q",
        "--synthetic-examples",
        "6000",
        "--epochs",
        "2",
        "--dim",
        "4",
        "--opt",
        "basis",
    ];
    let one = json(&base);
    let two = json(&[&base[..], &["--workers", "2"]].concat());
    let r1 = &one["results"][0]["runs"][0];
    let r2 = &two["results"][0]["runs"][0];
    assert!(r1["comm_bytes"].is_null());
    assert!(r2["comm_bytes"].as_u64().unwrap() > 0);
    let (a1, a2) = (
        r1["final_metrics"]["test_auc"].as_f64().unwrap(),
        r2["final_metrics"]["test_auc"].as_f64().unwrap(),
    );
    assert!((a1 - a2).abs() < 0.02, "1 worker {a1}, 2 workers {a2}");
    let table = ok(&[&base[..], &["--workers", "2"]].concat());
    assert!(table.contains("bytes sent/rank"), "{table}");
    let e = err(&[&base[..], &["--workers", "2", "--checkpoint", "/tmp/x"]].concat());
    assert!(e.contains("not supported"), "{e}");
}

/// `mpirun -n 2 basis ... --workers 2` (feature `mpi`) equals two in-process ranks.
#[cfg(feature = "mpi")]
#[test]
fn mpi_ranks_match_local_ranks() {
    let args = [
        "compare",
        "-q",
        "--synthetic-examples",
        "4000",
        "--epochs",
        "2",
        "--dim",
        "4",
        "--opt",
        "basis",
        "--workers",
        "2",
        "--json",
        "-",
    ];
    let local: Value = serde_json::from_str(&ok(&args)).unwrap();
    let out = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            "2",
            env!("CARGO_BIN_EXE_basis"),
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Only rank 0 prints.
    let mpi: Value = serde_json::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let (l, m) = (
        &local["results"][0]["runs"][0],
        &mpi["results"][0]["runs"][0],
    );
    assert_eq!(l["model_crc32"], m["model_crc32"]);
    assert_eq!(l["comm_bytes"], m["comm_bytes"]);
}

/// A rate that diverges is scored as the worst of a learning-rate search
/// (`null` in the JSON's `lr_search`), not the end of the comparison.
#[test]
fn a_diverging_rate_in_a_search_is_scored_not_fatal() {
    let out = ok(&[
        "compare",
        "-q",
        "--synthetic-examples",
        "3000",
        "--epochs",
        "1",
        "--opt",
        "sgd",
        "--tune-lr",
        "1e30,1",
        "--json",
        "-",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let r = &v["results"][0];
    assert_eq!(r["lr"].as_f64(), Some(1.0));
    assert!(r["lr_search"][0][1].is_null(), "{}", r["lr_search"]);
    assert!(r["lr_search"][1][1].as_f64().unwrap() > 0.5);
}
