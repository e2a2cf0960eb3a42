//! `cargo xtask ci` (the whole suite), `test` and `bench`.
//!
//! CI order: install what a fresh machine lacks, then the cheap checks first
//! (fmt, clippy), then tests, docs, `no_std`, loom, MPI and fuzzing, each
//! timed so the total stays well under the 90-minute budget (the project
//! keeps it under 45). The published packages' tests run once, inside
//! `publish` (from the unpacked `.crate` files); `test` covers the rest.

use crate::test_count;
use crate::util::{self, cargo, ensure_apt};
use std::time::Instant;

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
    step("test", &mut test_unpublished)?;
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
    let (passed, failed) = test_count::totals();
    println!("ci: {passed} passed, {failed} failed");
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
    cmd.args(["test", "--workspace"]).args(args);
    test_count::run(&mut cmd)
}

/// The CI's test step: the workspace's crates that are not published (the
/// CLI, the workspace-level tests, xtask). The published packages' tests run
/// once, in `publish-check`, from the unpacked `.crate` files, with the full
/// property-test counts: running them here too compiled and ran the same
/// sources twice (≈ 6 of the CI's 45 minutes).
fn test_unpublished() -> Result<(), String> {
    let mut args: Vec<String> = Vec::new();
    for (_, package) in crate::publish::PACKAGES {
        args.extend(["--exclude".to_string(), (*package).to_string()]);
    }
    test(&args)
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
