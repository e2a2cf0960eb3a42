//! Tidy checks over the whole repository (run as a test, matklad style):
//! every Rust source file opens with a `//!` doc comment, no `dbg!`, no
//! `todo!`/`unimplemented!` left in non-test code, and no should-panic tests.

use std::fs;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            // Build outputs and fetched data are not ours to tidy.
            if name.starts_with("target")
                || name.starts_with('.')
                || name == "data"
                || name == "corpus"
                || name == "artifacts"
            {
                continue;
            }
            rust_files(&path, out);
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

fn files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for sub in [
        "src", "tests", "crates", "xtask", "fuzz", "benches", "examples",
    ] {
        rust_files(&root.join(sub), &mut out);
    }
    assert!(out.len() > 10, "tidy found too few files: {out:?}");
    out
}

#[test]
fn every_file_opens_with_a_module_doc() {
    let missing: Vec<_> = files()
        .into_iter()
        .filter(|p| {
            let text = fs::read_to_string(p).unwrap_or_default();
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            !(first.starts_with("//!") || first.starts_with("#![doc = include_str!"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "files without a leading `//!` doc: {missing:#?}"
    );
}

#[test]
fn no_debug_leftovers() {
    let needles = [
        concat!("dbg", "!("),
        concat!("todo", "!("),
        concat!("unimplemented", "!("),
        concat!("#[should", "_panic"),
    ];
    let mut hits = Vec::new();
    for p in files() {
        let text = fs::read_to_string(&p).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            for n in needles {
                if line.contains(n) {
                    hits.push(format!("{}:{}: {}", p.display(), i + 1, line.trim()));
                }
            }
        }
    }
    assert!(hits.is_empty(), "leftovers:\n{}", hits.join("\n"));
}
