//! Tidy checks over the whole repository (run as a test, matklad style):
//! every Rust source file opens with a `//!` doc comment, no `dbg!`, no
//! `todo!`/`unimplemented!` left in non-test code, no should-panic tests, and
//! one MSRV: every mention in the Markdown files is the workspace's
//! `rust-version`.

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

/// The repository: this package is its `tests/` directory.
fn repo_root() -> &'static Path {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here)
}

fn files() -> Vec<PathBuf> {
    let root = repo_root();
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

/// Every `*.md` of the repository (not build outputs, fetched data or fuzz corpora).
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !(name.starts_with("target")
                || name.starts_with('.')
                || name == "data"
                || name == "corpus"
                || name == "artifacts")
            {
                markdown_files(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// The Rust versions (`1.NN`, as whole tokens) in `text`.
fn rust_versions(text: &str) -> Vec<&str> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(at) = text[i..].find("1.").map(|k| i + k) {
        let end = at
            + 2
            + b[at + 2..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .count();
        let before_ok = at == 0 || !(b[at - 1].is_ascii_digit() || b[at - 1] == b'.');
        // A sentence may end right after it; `1.9.0` is another crate's version.
        let dotted = b.get(end) == Some(&b'.') && b.get(end + 1).is_some_and(u8::is_ascii_digit);
        let after_ok = end == b.len() || !(b[end].is_ascii_digit() || dotted);
        if end > at + 2 && before_ok && after_ok {
            out.push(&text[at..end]);
        }
        i = at + 2;
    }
    out
}

/// The MSRV is written in one place (`[workspace.package] rust-version`);
/// every Markdown line that says `MSRV` with a version (or a `MSRV` heading
/// and the first paragraph under it) must say that version. Another
/// project's minimum Rust is written without the word "MSRV".
#[test]
fn every_msrv_mention_is_the_workspace_rust_version() {
    let root = repo_root();
    let manifest = fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    let msrv = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no `rust-version = \"..\"` in Cargo.toml"));
    assert_eq!(rust_versions(msrv), [msrv], "odd rust-version {msrv}");
    let mut files = Vec::new();
    markdown_files(root, &mut files);
    let (mut seen, mut wrong) = (0, Vec::new());
    for p in files {
        let text = fs::read_to_string(&p).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if !line.contains("MSRV") {
                continue;
            }
            let mut said = rust_versions(line);
            if line.starts_with('#') {
                // A heading: its version is in the first paragraph below it.
                let para = lines[i + 1..]
                    .iter()
                    .skip_while(|l| l.trim().is_empty())
                    .take_while(|l| !l.trim().is_empty())
                    .copied()
                    .collect::<Vec<_>>()
                    .join(" ");
                said = rust_versions(&para).into_iter().take(1).collect();
                seen += said.len();
                wrong.extend(
                    said.iter()
                        .filter(|v| **v != msrv)
                        .map(|v| format!("{}:{}: heading, then {v}", p.display(), i + 1)),
                );
                continue;
            }
            seen += said.len();
            wrong.extend(
                said.iter()
                    .filter(|v| **v != msrv)
                    .map(|v| format!("{}:{}: {v} in {:?}", p.display(), i + 1, line.trim())),
            );
        }
    }
    // README.md, src/README.md and two crate READMEs state it today.
    assert!(seen >= 4, "found only {seen} MSRV mentions");
    assert!(
        wrong.is_empty(),
        "MSRV mentions other than rust-version {msrv}:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn rust_versions_are_whole_tokens() {
    assert_eq!(
        rust_versions("MSRV 1.89; crc 3.1.2, 11.5 s, v1.10 and 1.9.0"),
        ["1.89", "1.10"]
    );
    assert_eq!(rust_versions("MSRV: Rust 1.85. Licence"), ["1.85"]);
    assert_eq!(rust_versions("Rust **1.85**."), ["1.85"]);
}

/// `tests/Cargo.toml` lists its test binaries (`autotests = false`, so the
/// facade package does not pick them up): every `tests/*.rs` must be listed,
/// or it would silently never run.
#[test]
fn every_workspace_test_file_is_a_declared_test_target() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = fs::read_to_string(here.join("Cargo.toml")).unwrap_or_default();
    let declared: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("path = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .collect();
    let mut missing = Vec::new();
    for entry in fs::read_dir(here).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".rs") && !declared.contains(&name.as_str()) {
            missing.push(name);
        }
    }
    assert!(declared.len() >= 7, "found only {declared:?}");
    assert!(
        missing.is_empty(),
        "tests/*.rs without a [[test]] in tests/Cargo.toml: {missing:?}"
    );
}

/// A user adds a package, not a directory: every package's README (its
/// crates.io page and crate docs) is titled by the package name, and a
/// published one opens with its `[dependencies]` line (the short name as
/// the key, `package = "basisopt-…"`) and a `use` line of its library.
#[test]
fn every_readme_is_titled_by_its_package_and_opens_with_its_dependency_line() {
    let root = repo_root();
    let mut manifests = vec![(root.join("Cargo.toml"), root.join("src/README.md"))];
    for entry in fs::read_dir(root.join("crates"))
        .into_iter()
        .flatten()
        .flatten()
    {
        manifests.push((
            entry.path().join("Cargo.toml"),
            entry.path().join("README.md"),
        ));
    }
    let mut wrong = Vec::new();
    for (manifest, readme) in &manifests {
        let toml = fs::read_to_string(manifest).unwrap_or_default();
        let Some(name) = toml
            .lines()
            .skip_while(|l| l.trim() != "[package]")
            .find_map(|l| l.strip_prefix("name = \""))
            .and_then(|n| n.strip_suffix('"'))
        else {
            continue;
        };
        let text = fs::read_to_string(readme).unwrap_or_default();
        let title = text.lines().next().unwrap_or("");
        if !(title == format!("# {name}") || title.starts_with(&format!("# {name} "))) {
            wrong.push(format!(
                "{}: title {title:?}, package {name}",
                readme.display()
            ));
        }
        if toml.contains("publish = false") {
            continue;
        }
        let head: String = text.lines().take(12).collect::<Vec<_>>().join("\n");
        let lib = toml
            .lines()
            .skip_while(|l| l.trim() != "[lib]")
            .find_map(|l| l.strip_prefix("name = \""))
            .and_then(|n| n.strip_suffix('"'))
            .map(str::to_owned)
            .unwrap_or_else(|| {
                // Cargo's default library name: the directory's, with `_`.
                let dir = manifest.parent().and_then(Path::file_name);
                dir.map_or(String::new(), |d| d.to_string_lossy().replace('-', "_"))
            });
        for want in [
            "```toml\n[dependencies]".to_owned(),
            format!("package = \"{name}\", version = \"0.1\""),
            format!("use {lib}::"),
        ] {
            if !head.contains(&want) {
                wrong.push(format!(
                    "{}: no {want:?} in its first lines",
                    readme.display()
                ));
            }
        }
    }
    assert!(manifests.len() >= 10, "found {manifests:?}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
