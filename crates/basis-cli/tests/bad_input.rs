//! Bad input, round two (issue 16): every number, path and size a user can
//! get wrong is refused before any work starts, with a message naming the
//! option; results are printed before files are written; a diverging run
//! stops with an error. One test per row of the table.
#![allow(clippy::unwrap_used)] // tests

mod common;

use common::Scratch;
use std::path::Path;
use std::process::{Command, Output};

fn basis(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_basis"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs `args`, expects failure with `code`; returns stderr.
fn fails(args: &[&str], code: i32) -> String {
    let out = basis(args);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(code), "basis {args:?}: {stderr}");
    stderr
}

/// Paths in a scratch directory, and an obstacle no one can write below.
trait ScratchExt {
    fn path(&self, p: &str) -> String;
    fn blocker(&self) -> String;
}

impl ScratchExt for Scratch {
    fn path(&self, p: &str) -> String {
        self.0.join(p).display().to_string()
    }

    /// A regular file: any path below it cannot be created, even by root
    /// (which ignores permission bits, so chmod cannot make a test path
    /// unwritable when the tests run as root).
    fn blocker(&self) -> String {
        let p = self.0.join("blocker");
        std::fs::write(&p, b"a file, not a directory").unwrap();
        p.display().to_string()
    }
}

/// A small, fast run.
const SMALL: [&str; 4] = ["--synthetic-examples", "2000", "--dim", "4"];

fn small(cmd: &str, extra: &[&str]) -> Vec<String> {
    let mut v = vec![cmd.to_string(), "-q".to_string()];
    v.extend(SMALL.iter().map(|s| s.to_string()));
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Row 1: `--dense-lr nan`, `--init-std nan`, `--init-std 1e30` trained to
/// NaN loss and exited 0. Now: a parse error (exit 2) naming the option.
#[test]
fn non_finite_or_out_of_range_numbers_are_refused_when_parsed() {
    for (option, value) in [
        ("--dense-lr", "nan"),
        ("--init-std", "nan"),
        ("--init-std", "1e30"),
        ("--dense-lr", "inf"),
        ("--tune-lr", "0.1,nan"),
    ] {
        let cmd = if option == "--tune-lr" {
            "compare"
        } else {
            "train"
        };
        let e = fails(&refs(&small(cmd, &[option, value])), 2);
        // A list is split first: the bad element is what is named.
        let shown = value.rsplit(',').next().unwrap();
        assert!(
            e.contains(option) && e.contains(shown),
            "{option} {value}: {e}"
        );
    }
}

/// Row 1, second half: a run whose loss turns non-finite stops with exit 1
/// and names the epoch, the step and the optimizer (SGD at lr 1e30 overflows
/// the logits in its first steps). Before: NaN in every row, exit 0.
#[test]
fn a_diverging_run_stops_naming_epoch_step_and_optimizer() {
    let e = fails(&refs(&small("train", &["--opt", "sgd:lr=1e30"])), 1);
    assert!(e.contains("training diverged"), "{e}");
    assert!(e.contains("epoch 1, step "), "{e}");
    assert!(e.contains("`sgd:lr=1e30`"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
}

/// Row 2: `--l2 -5`, `--l2 nan` were silently 0.
#[test]
fn a_negative_or_nan_l2_is_an_error() {
    for value in ["-5", "nan"] {
        let e = fails(&refs(&small("train", &["--l2", value])), 2);
        assert!(e.contains("--l2") && e.contains(value), "{e}");
        let e = fails(&refs(&small("train", &[&format!("--l2={value}")])), 2);
        assert!(e.contains("--l2") && e.contains(value), "{e}");
    }
}

/// Row 3: `--init-std -1`, `--epochs 0`, `--workers 0`, `--seeds 0` and a
/// spec key given twice were accepted or coerced.
#[test]
fn zero_counts_negative_std_and_repeated_spec_keys_are_errors() {
    for (cmd, option, value) in [
        ("train", "--init-std", "-1"),
        ("train", "--epochs", "0"),
        ("train", "--workers", "0"),
        ("compare", "--seeds", "0"),
        ("train", "--batch", "0"),
    ] {
        let e = fails(&refs(&small(cmd, &[option, value])), 2);
        assert!(e.contains(option) && e.contains(value), "{option}: {e}");
    }
    let e = fails(&refs(&small("train", &["--opt", "basis:lr=0.1,lr=0.2"])), 2);
    assert!(e.contains("`lr` is given twice"), "{e}");
}

/// Row 4: `compare --json` or `--plot` into an unwritable path trained
/// fully, then exited 1 without printing the table. Now the path is refused
/// before training, in well under a training run's time; and when a write
/// fails anyway (the path became unwritable during the run), the table was
/// printed first.
#[test]
fn unwritable_outputs_fail_before_training_and_the_table_comes_first() {
    let dir = Scratch::new("outputs");
    let blocker = dir.blocker();
    let bad = format!("{blocker}/out.json");
    for option in ["--json", "--plot"] {
        let start = std::time::Instant::now();
        let e = fails(
            &refs(&small("compare", &["--opt", "adam", option, &bad])),
            1,
        );
        assert!(e.contains(option) && e.contains(&bad), "{e}");
        assert!(start.elapsed().as_secs() < 30);
        assert!(!Path::new(&bad).exists());
    }
    // The probe leaves nothing behind.
    let good = dir.path("ok.json");
    let out = basis(&refs(&small(
        "compare",
        &["--opt", "adam", "--json", &good],
    )));
    assert!(out.status.success());
    assert!(Path::new(&good).exists());
    let names: Vec<_> = std::fs::read_dir(&dir.0).unwrap().collect();
    assert_eq!(names.len(), 2, "{names:?}");
    // A write that fails only after the run (`/dev/full` opens, then every
    // write is ENOSPC): the table is on stdout before the error.
    if Path::new("/dev/full").exists() {
        let out = basis(&refs(&small(
            "compare",
            &["--opt", "adam", "--json", "/dev/full"],
        )));
        let e = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{e}");
        assert!(e.contains("--json") && e.contains("/dev/full"), "{e}");
        let table = String::from_utf8(out.stdout).unwrap();
        assert!(
            table.contains("| optimizer |") && table.contains("| adam |"),
            "{table}"
        );
    }
    // `inspect --json` too.
    let e = fails(
        &[
            "inspect",
            "-q",
            "--synthetic-examples",
            "2000",
            "--json",
            &bad,
        ],
        1,
    );
    assert!(e.contains("--json") && e.contains(&bad), "{e}");
    // A JSON path that is a directory: refused before training too.
    let e = fails(
        &refs(&small("train", &["--json", &dir.0.display().to_string()])),
        1,
    );
    assert!(e.contains("--json") && e.contains("directory"), "{e}");
}

/// Row 5: `--checkpoint` into an unwritable directory failed only after
/// epoch 1.
#[test]
fn an_unwritable_checkpoint_directory_fails_before_training() {
    let dir = Scratch::new("ckpt");
    let bad = format!("{}/ckpt", dir.blocker());
    for cmd in ["train", "compare"] {
        let out = basis(&refs(&small(cmd, &["--opt", "adam", "--checkpoint", &bad])));
        let e = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{e}");
        assert!(e.contains("--checkpoint") && e.contains(&bad), "{e}");
        // Nothing was trained: no table on stdout.
        assert!(out.stdout.is_empty(), "{cmd} trained first");
    }
}

/// Row 6: `--dim 100000000` aborted with a backtrace (rc 134). Now one line
/// naming the option and the bytes needed, exit 1.
#[test]
fn a_huge_dim_is_a_one_line_error_with_the_bytes_needed() {
    let out = basis(&[
        "train",
        "-q",
        "--synthetic-examples",
        "2000",
        "--dim",
        "100000000",
    ]);
    let e = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.starts_with("error: --dim 100000000: "), "{e}");
    assert!(e.contains(" bytes "), "{e}");
}

/// Row 11: binary garbage given as text data: the "not UTF-8" error echoed
/// the raw bytes, control characters included, to the terminal.
#[test]
fn binary_garbage_is_echoed_escaped() {
    let dir = Scratch::new("garbage");
    let file = dir.path("garbage.svm");
    let mut bytes = b"\x1b]0;owned\x07\x1b[31m\xff\xfe\x00".to_vec();
    bytes.extend((0u8..=255).cycle().take(200));
    std::fs::write(&file, &bytes).unwrap();
    for format in ["libsvm", "criteo", "movielens"] {
        let e = fails(&["train", "-q", "--format", format, "--data", &file], 1);
        assert!(e.contains(&file), "{e}");
        let control = e.chars().filter(|&c| c.is_control() && c != '\n').count();
        assert_eq!(control, 0, "{format}: raw control characters in {e:?}");
        assert!(e.contains("\\u{1b}"), "{format}: {e}");
    }
    let e = fails(&["train", "-q", "--format", "libsvm", "--data", &file], 1);
    assert!(e.contains("not UTF-8") && e.contains("\\xff"), "{e}");
}

/// Row 12: `--format text` on folders `0` and `1` silently took `1` as
/// positive. Now the data line says which folder is positive, and two
/// folders without a recognisable positive name are an error.
#[test]
fn the_positive_text_folder_is_said_or_the_run_refused() {
    let dir = Scratch::new("text");
    for (label, word) in [("0", "cheap"), ("1", "meeting")] {
        let sub = dir.0.join(label);
        std::fs::create_dir_all(&sub).unwrap();
        for i in 0..30 {
            std::fs::write(
                sub.join(format!("{i}.txt")),
                format!("{word} word{i} and more{}", i % 7),
            )
            .unwrap();
        }
    }
    let root = dir.0.display().to_string();
    let out = basis(&[
        "train", "-q", "--format", "text", "--data", &root, "--epochs", "1",
    ]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("positive label folder `1`"), "{stdout}");
    std::fs::rename(dir.0.join("1"), dir.0.join("meetings")).unwrap();
    let e = fails(&["train", "-q", "--format", "text", "--data", &root], 1);
    assert!(
        e.contains("cannot tell which label folder is positive") && e.contains("--positive"),
        "{e}"
    );
    assert!(e.contains("`0`") && e.contains("`meetings`"), "{e}");
}

/// Row 13: `--resume` with other options said only "belongs to a run with
/// other data or options". Now it names the option and both values.
#[test]
fn a_refused_resume_names_the_option_that_differs() {
    let dir = Scratch::new("resume");
    let d = dir.0.display().to_string();
    let first = basis(&refs(&small(
        "train",
        &[
            "--opt",
            "adam",
            "--epochs",
            "1",
            "--batch",
            "128",
            "--checkpoint",
            &d,
        ],
    )));
    assert!(first.status.success());
    let e = fails(
        &refs(&small(
            "train",
            &[
                "--opt",
                "adam",
                "--epochs",
                "2",
                "--batch",
                "64",
                "--checkpoint",
                &d,
                "--resume",
            ],
        )),
        1,
    );
    assert!(e.contains("--batch 128") && e.contains("--batch 64"), "{e}");
}

/// Plain `basis` on one pass is `BasisConfig::one_pass()`, on more epochs
/// `Default`: a one-pass checkpoint resumed for more epochs would change
/// the optimizer under its state, so it is refused, naming why and the
/// spec that trains it on; that spec resumes.
#[test]
fn a_one_pass_basis_checkpoint_is_not_resumed_as_another_optimizer() {
    let dir = Scratch::new("one-pass");
    let d = dir.0.display().to_string();
    let run = |opt: &str, epochs: &str, resume: bool| {
        let mut extra = vec!["--opt", opt, "--epochs", epochs, "--checkpoint", &d];
        if resume {
            extra.push("--resume");
        }
        basis(&refs(&small("train", &extra)))
    };
    assert!(run("basis", "1", false).status.success());
    let refused = run("basis", "2", true);
    assert_eq!(refused.status.code(), Some(1));
    let e = String::from_utf8_lossy(&refused.stderr);
    assert!(
        e.contains("basis defaults one pass") && e.contains("basis:accumulate=sum,lr=0.01"),
        "{e}"
    );
    // Named, the one-pass configuration is the same on every run.
    let named = "basis:accumulate=sum,lr=0.01";
    assert!(run(named, "1", false).status.success());
    let resumed = run(named, "2", true);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
}
