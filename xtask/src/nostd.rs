//! `cargo xtask nostd`: prove every `no_std` crate builds with no `std` in its
//! dependency tree.
//!
//! Two proofs:
//! 1. If the `x86_64-unknown-none` target is installed (or `rustup target add`
//!    can fetch it), the check crate below is cross-built for it: that target
//!    has no `std` at all.
//! 2. Always: a tiny freestanding `#![no_std] #![no_main]` host binary that
//!    depends on every `no_std` crate (and the facade with its default
//!    features) is built and linked with `panic = "abort"`, its own panic
//!    handler and allocator. If any crate in the tree links `std`, rustc
//!    rejects the binary (`std`'s panic handler duplicates ours).
//!
//! The proof is shown to bite every time: the same binary with a deliberately
//! leaking dependency (a crate with `extern crate std`) must fail to build.
//!
//! 3. Every optional feature of a `no_std` crate, alone: each crate is built
//!    with `--no-default-features --features serde`, and the facade with
//!    `--features serde` (for `x86_64-unknown-none` when available, else
//!    checked on the host). Elsewhere `serde` is only compiled next to crates
//!    that turn on `serde/std`, which hides a derive that needs `std` or
//!    `alloc` the crate does not ask for.

use crate::util::{self, cargo, root, run_with_timeout};
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A crate that promises `no_std`.
struct NoStdCrate {
    /// Directory under `crates/`.
    dir: &'static str,
    /// Package name.
    package: &'static str,
    /// Library name.
    lib: &'static str,
    /// Optional features that must build without `std` too.
    features: &'static [&'static str],
}

/// Every crate that promises `no_std`.
const NO_STD_CRATES: &[NoStdCrate] = &[
    NoStdCrate {
        dir: "balanced-hash",
        package: "basisopt-balanced-hash",
        lib: "balanced_hash",
        features: &[],
    },
    NoStdCrate {
        dir: "basis-core",
        package: "basisopt-core",
        lib: "basis_core",
        features: &["serde"],
    },
    NoStdCrate {
        dir: "onebit-codec",
        package: "basisopt-onebit-codec",
        lib: "onebit_codec",
        features: &["serde"],
    },
    NoStdCrate {
        dir: "comm-traits",
        package: "basisopt-comm-traits",
        lib: "comm_traits",
        features: &["serde"],
    },
    NoStdCrate {
        dir: "onebit-adam",
        package: "basisopt-onebit-adam",
        lib: "onebit_adam",
        features: &["serde"],
    },
];

pub(crate) const CROSS_TARGET: &str = "x86_64-unknown-none";

/// The host triple (this tool only runs on x86_64 Linux in CI).
const HOST_TARGET: &str = env!("XTASK_HOST");

pub(crate) fn run(_args: &[String]) -> Result<(), String> {
    let dir = root().join("target").join("nostd-check");
    write_check_crate(&dir)?;
    let target_dir = root().join("target").join("nostd-target");

    // Proof 1: a target without std, when we can have it.
    let cross = cross_target_available();
    if cross {
        util::run(check_build(&dir, &target_dir).args(["--target", CROSS_TARGET]))?;
        eprintln!("nostd: cross-build for {CROSS_TARGET} passed");
    } else {
        eprintln!(
            "nostd: target {CROSS_TARGET} unavailable (offline?); using the freestanding host link"
        );
    }

    // Proof 3: each optional feature alone, without `std`.
    let built = feature_builds(cross, &target_dir)?;
    eprintln!(
        "nostd: {built} optional-feature builds (serde without std) passed ({})",
        if cross { CROSS_TARGET } else { "host check" }
    );

    // Proof 2: freestanding host binary, linked. The explicit `--target`
    // keeps RUSTFLAGS off build scripts and proc-macros (they are normal
    // host programs and crash without start files).
    util::run(&mut freestanding_build(&dir, &target_dir))?;
    eprintln!(
        "nostd: freestanding #![no_std] #![no_main] binary linked against {} crates",
        NO_STD_CRATES.len()
    );

    // The proof must bite: a leaking dependency has to fail the same build.
    let out = freestanding_build(&dir, &target_dir)
        .args(["--features", "leak"])
        .output()
        .map_err(|e| e.to_string())?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        return Err(
            "self-test: a crate with `extern crate std` built as no_std; the check does not bite"
                .into(),
        );
    }
    if !stderr.contains("duplicate lang item") {
        return Err(format!(
            "self-test failed for an unexpected reason:\n{stderr}"
        ));
    }
    eprintln!("nostd: self-test ok (a dependency that links std is rejected: duplicate lang item)");
    Ok(())
}

/// `cargo build -p <crate> --no-default-features --features <f>` for every
/// optional feature of every `no_std` crate, then the facade's `serde` on
/// top of its (`no_std`) defaults; for [`CROSS_TARGET`] when `cross`, else a
/// host `cargo check` (the same code, without the proof that no `std` is
/// reachable). Returns the number of builds.
fn feature_builds(cross: bool, target_dir: &Path) -> Result<usize, String> {
    let mut builds: Vec<Vec<&str>> = Vec::new();
    for krate in NO_STD_CRATES {
        for feature in krate.features {
            builds.push(vec![
                "-p",
                krate.package,
                "--no-default-features",
                "--features",
                feature,
            ]);
        }
    }
    builds.push(vec!["-p", "basisopt", "--features", "serde"]);
    for args in &builds {
        let mut cmd = cargo();
        cmd.arg(if cross { "build" } else { "check" })
            .arg("--quiet")
            .args(args)
            .env("CARGO_TARGET_DIR", target_dir);
        if cross {
            cmd.args(["--target", CROSS_TARGET]);
        }
        util::run(&mut cmd)?;
    }
    Ok(builds.len())
}

fn check_build(dir: &Path, target_dir: &Path) -> Command {
    let mut cmd = cargo();
    cmd.current_dir(dir)
        .args(["build", "--quiet", "--release", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target_dir);
    cmd
}

/// The freestanding link for the host triple, without start files.
fn freestanding_build(dir: &Path, target_dir: &Path) -> Command {
    let mut cmd = check_build(dir, target_dir);
    cmd.env("RUSTFLAGS", "-C link-arg=-nostartfiles")
        .args(["--target", HOST_TARGET]);
    cmd
}

pub(crate) fn cross_target_available() -> bool {
    let installed = |s: &str| s.lines().any(|l| l.trim() == CROSS_TARGET);
    let list = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output();
    if let Ok(out) = &list {
        if installed(&String::from_utf8_lossy(&out.stdout)) {
            return true;
        }
    } else {
        return false;
    }
    // Try to install it, briefly: machines without internet say no quickly.
    let added = run_with_timeout(
        Command::new("rustup").args(["target", "add", CROSS_TARGET]),
        Duration::from_secs(60),
    );
    matches!(added, Ok(true))
}

fn write_check_crate(dir: &Path) -> Result<(), String> {
    let root = root();
    let src = dir.join("src");
    let leaky = dir.join("leaky");
    fs::create_dir_all(&src).map_err(|e| e.to_string())?;
    fs::create_dir_all(leaky.join("src")).map_err(|e| e.to_string())?;
    let mut deps = String::new();
    let mut externs = String::new();
    for NoStdCrate {
        dir,
        package: pkg,
        lib,
        ..
    } in NO_STD_CRATES
    {
        let path = root.join("crates").join(dir);
        deps.push_str(&format!(
            "{dir} = {{ package = \"{pkg}\", path = {:?}, default-features = false }}\n",
            path
        ));
        externs.push_str(&format!("extern crate {lib};\n"));
    }
    deps.push_str(&format!(
        "basis = {{ package = \"basisopt\", path = {:?} }}\n",
        root
    ));
    externs.push_str("extern crate basis;\n");
    let manifest = format!(
        r#"[package]
name = "nostd-check"
version = "0.0.0"
edition = "2024"
publish = false

[workspace]

[features]
# Deliberately pull in a crate that links std (the self-test).
leak = ["dep:leaky"]

[dependencies]
{deps}leaky = {{ path = "leaky", optional = true }}

[profile.release]
panic = "abort"
"#
    );
    let main = format!(
        r#"//! Freestanding binary: links only if nothing in the tree needs std.
#![no_std]
#![no_main]
#![allow(unused_extern_crates)]

extern crate alloc;
{externs}#[cfg(feature = "leak")]
extern crate leaky;

use core::alloc::{{GlobalAlloc, Layout}};

/// Never called at run time; it only has to link.
struct NoAlloc;

// SAFETY: returning null is a valid "allocation failed" answer.
unsafe impl GlobalAlloc for NoAlloc {{
    unsafe fn alloc(&self, _layout: Layout) -> *mut u8 {{
        core::ptr::null_mut()
    }}
    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {{}}
}}

#[global_allocator]
static ALLOC: NoAlloc = NoAlloc;

#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {{
    loop {{}}
}}

/// The prebuilt `alloc` was compiled with unwinding tables that name this
/// symbol; with `panic = "abort"` it is never called.
#[unsafe(no_mangle)]
pub extern "C" fn rust_eh_personality() {{}}

#[unsafe(no_mangle)]
pub extern "C" fn _start() -> ! {{
    let bytes = comm_traits::CommStats::allreduce_f32_bytes(2, 8);
    core::hint::black_box(bytes);
    loop {{}}
}}
"#
    );
    let leaky_manifest =
        "[package]\nname = \"leaky\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n";
    let leaky_lib = "//! Links std on purpose.\n#![no_std]\nextern crate std;\npub fn f() -> usize { std::vec::Vec::<u8>::new().len() }\n";
    let write = |p: &Path, s: &str| fs::write(p, s).map_err(|e| format!("{}: {e}", p.display()));
    write(&dir.join("Cargo.toml"), &manifest)?;
    write(&src.join("main.rs"), &main)?;
    write(&leaky.join("Cargo.toml"), leaky_manifest)?;
    write(&leaky.join("src").join("lib.rs"), leaky_lib)?;
    // Same dependency versions as the workspace.
    let lock = root.join("Cargo.lock");
    if lock.exists() {
        fs::copy(&lock, dir.join("Cargo.lock")).map_err(|e| e.to_string())?;
    }
    Ok(())
}
