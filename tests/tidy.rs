//! Tidy checks over the whole repository (run as a test, matklad style):
//! every Rust source file opens with a `//!` doc comment, no `dbg!`, no
//! `todo!`/`unimplemented!` left in non-test code, no should-panic tests,
//! no import cycle among a crate's top-level modules, and one MSRV: every
//! mention in the Markdown files is the workspace's `rust-version`.

extern crate alloc;

use alloc::collections::{BTreeMap, BTreeSet};
use std::collections::HashMap;
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

/// Each module → the modules it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// `text` without comments and without `#[cfg(test)]` modules (test code may
/// reach anywhere; only the library's own structure is checked).
fn library_code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if trimmed == "#[cfg(test)]"
            && lines.peek().is_some_and(|next| {
                let next = next.trim_start();
                (next.starts_with("mod ") || next.contains(" mod ")) && next.contains('{')
            })
        {
            // Skip the module: count braces until they balance.
            let mut depth = 0i32;
            for l in lines.by_ref() {
                depth += l.matches('{').count() as i32 - l.matches('}').count() as i32;
                if depth <= 0 && l.contains('}') {
                    break;
                }
            }
            continue;
        }
        let code = line.split("//").next().unwrap_or("");
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The top-level modules a crate-relative path list names: for
/// `crate::{a::X, b}` → `[a, b]`, for `crate::a::X` → `[a]`.
fn crate_path_heads(code: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut heads = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        // `$crate::` (macros) and paths of other crates (`foo_crate::`) are not ours.
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut start, mut end) = (0i32, 0usize, group.len());
            let mut parts = Vec::new();
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        end = i;
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        parts.push(&group[start..i]);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            parts.push(&group[start..end]);
            heads.extend(parts.into_iter().map(ident).filter(|h| !h.is_empty()));
        } else {
            heads.push(ident(rest));
        }
    }
    heads
}

/// The crate-root re-exports of `lib.rs` (`pub use m::{A, B};`, `pub use
/// m::A;`): item name → the module it comes from.
fn root_reexports(lib: &str) -> HashMap<String, String> {
    let mut map = HashMap::new();
    let code = library_code(lib);
    for stmt in code.split(';') {
        let stmt = stmt.trim();
        let Some(path) = stmt.strip_prefix("pub use ") else {
            continue;
        };
        let path = path.trim().trim_start_matches("crate::");
        let Some((module, items)) = path.split_once("::") else {
            continue;
        };
        let items = items.trim().trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let name = item.split(" as ").last().unwrap_or("").trim();
            let name = name.rsplit("::").next().unwrap_or("").trim();
            if !name.is_empty() {
                map.insert(name.to_string(), module.trim().to_string());
            }
        }
    }
    map
}

/// Edges `module → module` of one crate's `src/` (top-level modules; files
/// in `src/m/` belong to `m`), from `crate::` paths in library code.
fn module_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let module_of = |p: &Path| -> Option<String> {
        let rel = p.strip_prefix(src).ok()?;
        let first = rel
            .components()
            .next()?
            .as_os_str()
            .to_string_lossy()
            .into_owned();
        let name = first.trim_end_matches(".rs").to_string();
        (name != "lib" && name != "main").then_some(name)
    };
    let modules: BTreeSet<String> = files.iter().filter_map(|p| module_of(p)).collect();
    let reexports = root_reexports(&fs::read_to_string(src.join("lib.rs")).unwrap_or_default());
    let mut graph: Graph = modules
        .iter()
        .map(|m| (m.clone(), Default::default()))
        .collect();
    for p in &files {
        let Some(from) = module_of(p) else { continue };
        // A `tests.rs` file is a module's `#[cfg(test)] mod tests;`: test
        // code, like the inline test modules `library_code` drops.
        if p.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let code = library_code(&fs::read_to_string(p).unwrap_or_default());
        for head in crate_path_heads(&code) {
            let to = if modules.contains(&head) {
                Some(head)
            } else {
                reexports.get(&head).cloned()
            };
            if let Some(to) = to.filter(|to| *to != from && modules.contains(to)) {
                graph.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    graph
}

/// One cycle of `graph`, as the modules along it, if there is any.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    // 0 = unvisited, 1 = on the current path, 2 = done.
    fn visit(
        node: &str,
        graph: &Graph,
        state: &mut HashMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next).copied().unwrap_or(0) {
                1 => {
                    let start = path.iter().position(|m| m == next).unwrap_or(0);
                    let mut cycle = path[start..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(next, graph, state, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = HashMap::new();
    for node in graph.keys() {
        if state.get(node).copied().unwrap_or(0) == 0
            && let Some(c) = visit(node, graph, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

/// The checker finds what it must: a planted cycle through a grouped
/// import and a crate-root re-export, and nothing in test modules.
#[test]
fn the_import_cycle_check_bites() {
    let dir = std::env::temp_dir().join(format!("tidy-cycle-{}", std::process::id()));
    let src = dir.join("src");
    fs::create_dir_all(src.join("c")).unwrap();
    let write = |name: &str, text: &str| fs::write(src.join(name), text).unwrap();
    write(
        "lib.rs",
        "//! x\nmod a;\nmod b;\nmod c;\npub use c::{Gamma, other::Delta};\n",
    );
    write("a.rs", "//! a\nuse crate::{b::Beta, Gamma};\n");
    write(
        "b.rs",
        "//! b\n#[cfg(test)]\nmod tests {\n    use crate::a::Alpha;\n}\n",
    );
    write(
        "c/mod.rs",
        "//! c\n// crate::a is only mentioned in a comment\n",
    );
    write(
        "c/other.rs",
        "//! c's child\nfn f() { crate::a::alpha(); }\n",
    );
    // A module's test file (`#[cfg(test)] mod tests;` in b.rs) is test code.
    fs::create_dir_all(src.join("b")).unwrap();
    write("b/tests.rs", "//! b's tests\nuse crate::a::Alpha;\n");
    let graph = module_graph(&src);
    assert_eq!(graph["a"].iter().collect::<Vec<_>>(), ["b", "c"]);
    assert!(
        graph["b"].is_empty(),
        "test modules are not library code: {graph:?}"
    );
    assert_eq!(graph["c"].iter().collect::<Vec<_>>(), ["a"]);
    assert_eq!(
        find_cycle(&graph),
        Some(vec!["a".into(), "c".into(), "a".into()])
    );
    let _ = fs::remove_dir_all(&dir);
}

/// No crate's top-level modules import each other in a loop (`crate::`
/// paths in library code, through crate-root re-exports too): each crate's
/// modules stay layered, so any one can be read, tested and moved with
/// only what is below it.
#[test]
fn no_import_cycle_among_a_crates_modules() {
    let root = repo_root();
    let mut srcs = vec![("basis".to_string(), root.join("src"))];
    for entry in fs::read_dir(root.join("crates")).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        srcs.push((name, entry.path().join("src")));
    }
    srcs.push(("xtask".to_string(), root.join("xtask").join("src")));
    // Every crate is cycle-free since 2026-12-03 (the list of crates with
    // known cycles — basis-core, basis-cli, onebit-adam — is gone).
    let mut cycles = Vec::new();
    let mut checked = 0;
    for (name, src) in srcs.iter().filter(|(_, s)| s.is_dir()) {
        checked += 1;
        if let Some(cycle) = find_cycle(&module_graph(src)) {
            cycles.push(format!("{name}: {}", cycle.join(" → ")));
        }
    }
    assert!(checked >= 10, "found only {checked} crates");
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
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
