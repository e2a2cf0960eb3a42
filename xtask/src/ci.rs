//! `cargo xtask ci` (the whole suite), `test` and `bench`.
//!
//! CI order: install what a fresh machine lacks, then the cheap checks first
//! (fmt, clippy), then tests, docs, `no_std`, loom, MPI and fuzzing, each
//! timed so the total stays well under the 90-minute budget.

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
    step("test", &mut || test(&[]))?;
    step("doc", &mut || {
        util::run(
            cargo()
                .args(["doc", "--workspace", "--no-deps"])
                .env("RUSTDOCFLAGS", "-D warnings"),
        )
    })?;
    step("nostd", &mut || crate::nostd::run(&[]))?;
    step("loom", &mut crate::loom::ci)?;
    step("mpi", &mut crate::mpi::ci)?;
    step("fuzz", &mut crate::fuzz::ci)?;
    eprintln!("\nci timings:");
    for (name, secs) in &timings {
        eprintln!("  {name:<8} {secs:>7.1}s");
    }
    eprintln!("  total    {:>7.1}s", total.elapsed().as_secs_f64());
    Ok(())
}

/// Install what a fresh machine lacks (idempotent).
fn install() -> Result<(), String> {
    ensure_apt(APT_PACKAGES)?;
    crate::fuzz::install()
}

/// `cargo test --workspace` (every crate, doc tests included), extra args passed on.
pub(crate) fn test(args: &[String]) -> Result<(), String> {
    util::run(cargo().args(["test", "--workspace"]).args(args))
}

/// `cargo xtask bench [crate] [filter…]`: criterion benches, one crate or all.
pub(crate) fn bench(args: &[String]) -> Result<(), String> {
    let mut cmd = cargo();
    cmd.arg("bench");
    match args.split_first() {
        Some((krate, rest)) if !krate.starts_with('-') => {
            cmd.args(["-p", krate, "--"]).args(rest);
        }
        _ => {
            cmd.arg("--workspace").arg("--").args(args);
        }
    }
    util::run(&mut cmd)
}
