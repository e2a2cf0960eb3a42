//! `cargo xtask ci` (the whole suite), `test` and `bench`.
//!
//! CI order: install what a fresh machine lacks, then the cheap checks first
//! (fmt, clippy), then tests, docs, `no_std`, loom, MPI and fuzzing, each
//! timed so the total stays well under the 90-minute budget.

use crate::util::{self, cargo, ensure_apt};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Tests counted by `test()`, for `ci`'s closing line.
static TESTS_PASSED: AtomicU64 = AtomicU64::new(0);
static TESTS_FAILED: AtomicU64 = AtomicU64::new(0);

/// Debian packages the suite needs: Open MPI and the clang that `mpi-sys`'s
/// bindgen uses.
pub(crate) const APT_PACKAGES: &[&str] =
    &["libopenmpi-dev", "openmpi-bin", "clang", "libclang-dev"];

pub(crate) fn run(_args: &[String]) -> Result<(), String> {
    let total = Instant::now();
    let mut timings: Vec<(&str, f64)> = Vec::new();
    let mut step = |name: &'static str, f: &mut dyn FnMut() -> Result<(), String>| {
        eprintln!("\n==> {name}");
        let t = Instant::now();
        let r = f();
        timings.push((name, t.elapsed().as_secs_f64()));
        r.map_err(|e| format!("{name}: {e}"))
    };
    step("install", &mut || install())?;
    step("fmt", &mut || {
        util::run(cargo().args(["fmt", "--all", "--", "--check"]))
    })?;
    step("clippy", &mut || {
        util::run(cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))
    })?;
    // Optional features (serde derives, std, mpi) are off in the other
    // steps but `nostd` (which builds each `serde` alone, without `std`); a
    // derive that does not compile once landed unseen.
    step("features", &mut || {
        util::run(cargo().args(["check", "--workspace", "--all-features", "--all-targets"]))
    })?;
    step("test", &mut || test(&[]))?;
    step("doc", &mut || {
        util::run(
            cargo()
                .args(["doc", "--workspace", "--no-deps"])
                // Broken intra-doc links would render as plain `[Text]`;
                // named explicitly so a lint-level change cannot drop them.
                .env("RUSTDOCFLAGS", crate::util::DOC_FLAGS),
        )
    })?;
    step("nostd", &mut || crate::nostd::run(&[]))?;
    step("publish", &mut || crate::publish::run(&[]))?;
    step("loom", &mut crate::loom::ci)?;
    step("mpi", &mut crate::mpi::ci)?;
    step("fuzz", &mut crate::fuzz::ci)?;
    eprintln!("\nci timings:");
    for (name, secs) in &timings {
        eprintln!("  {name:<8} {secs:>7.1}s");
    }
    eprintln!("  total    {:>7.1}s", total.elapsed().as_secs_f64());
    println!(
        "ci: {} passed, {} failed",
        TESTS_PASSED.load(Ordering::Relaxed),
        TESTS_FAILED.load(Ordering::Relaxed)
    );
    Ok(())
}

/// Install what a fresh machine lacks (idempotent).
fn install() -> Result<(), String> {
    ensure_apt(APT_PACKAGES)?;
    crate::fuzz::install()
}

/// `cargo test --workspace` (every crate, doc tests included), extra args
/// passed on. Prints a closing `N passed, N failed` line summed over every
/// test binary.
pub(crate) fn test(args: &[String]) -> Result<(), String> {
    let mut cmd = cargo();
    cmd.args(["test", "--workspace"])
        .args(args)
        .stdout(Stdio::piped());
    eprintln!("$ cargo test --workspace {}", args.join(" "));
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start cargo test: {e}"))?;
    let (mut passed, mut failed) = (0u64, 0u64);
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            println!("{line}");
            if let Some((p, f)) = parse_test_result(&line) {
                passed += p;
                failed += f;
            }
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    println!("tests: {passed} passed, {failed} failed");
    TESTS_PASSED.fetch_add(passed, Ordering::Relaxed);
    TESTS_FAILED.fetch_add(failed, Ordering::Relaxed);
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo test failed: {status}"))
    }
}

/// `(passed, failed)` of a libtest `test result: ok. 3 passed; 0 failed; …` line.
fn parse_test_result(line: &str) -> Option<(u64, u64)> {
    let rest = line.trim().strip_prefix("test result: ")?;
    let count = |word: &str| {
        rest.split(';').find_map(|part| {
            part.trim()
                .strip_suffix(word)?
                .trim()
                .rsplit(' ')
                .next()?
                .parse()
                .ok()
        })
    };
    Some((count(" passed")?, count(" failed")?))
}

/// `cargo xtask bench [crate] [filter…]`: criterion benches, one crate or all.
pub(crate) fn bench(args: &[String]) -> Result<(), String> {
    let mut cmd = cargo();
    cmd.arg("bench");
    match args.split_first() {
        Some((krate, rest)) if !krate.starts_with('-') => {
            // A directory name (`basis-core`) means its package (`basisopt-core`).
            let dir = format!("crates/{krate}");
            let package = crate::publish::PACKAGES
                .iter()
                .find(|(d, _)| *d == dir)
                .map_or(krate.as_str(), |(_, p)| p);
            cmd.args(["-p", package, "--"]).args(rest);
        }
        _ => {
            cmd.arg("--workspace").arg("--").args(args);
        }
    }
    util::run(&mut cmd)
}

#[cfg(test)]
mod tests {
    use super::parse_test_result;

    #[test]
    fn reads_libtest_summaries() {
        let ok = "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.30s";
        assert_eq!(parse_test_result(ok), Some((12, 0)));
        let bad = "test result: FAILED. 2 passed; 3 failed; 0 ignored; 0 measured; 0 filtered out";
        assert_eq!(parse_test_result(bad), Some((2, 3)));
        assert_eq!(parse_test_result("running 3 tests"), None);
    }
}
