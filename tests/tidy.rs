//! Tidy checks over the whole repository (run as a test, matklad style):
//! every Rust source file opens with a `//!` doc comment, no `dbg!`, no
//! `todo!`/`unimplemented!` left in non-test code, no should-panic tests,
//! and no import cycle among a crate's top-level modules.

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

/// Crates with an import cycle left for their owners (as of this check's
/// introduction): `basis-core` `config ↔ error`, `basis-cli` `spec ↔
/// spec_check`, `onebit-adam` `dense ↔ optimizer`. Each must still have a cycle (the test fails once one is gone, so
/// the list only shrinks).
const KNOWN_CYCLES: &[&str] = &["basis-core", "basis-cli", "onebit-adam"];

/// No crate's top-level modules import each other in a loop (`crate::`
/// paths in library code, through crate-root re-exports too): each crate's
/// modules stay layered, so any one can be read, tested and moved with
/// only what is below it.
#[test]
fn no_import_cycle_among_a_crates_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut srcs = vec![("basis".to_string(), root.join("src"))];
    for entry in fs::read_dir(root.join("crates")).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        srcs.push((name, entry.path().join("src")));
    }
    srcs.push(("xtask".to_string(), root.join("xtask").join("src")));
    let (mut cycles, mut gone) = (Vec::new(), Vec::new());
    let mut checked = 0;
    for (name, src) in srcs.iter().filter(|(_, s)| s.is_dir()) {
        checked += 1;
        let cycle = find_cycle(&module_graph(src));
        match (cycle, KNOWN_CYCLES.contains(&name.as_str())) {
            (Some(cycle), false) => cycles.push(format!("{name}: {}", cycle.join(" → "))),
            (None, true) => gone.push(name.clone()),
            _ => {}
        }
    }
    assert!(checked >= 10, "found only {checked} crates");
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
    assert!(
        gone.is_empty(),
        "no cycle left in {gone:?}: remove them from KNOWN_CYCLES"
    );
}
