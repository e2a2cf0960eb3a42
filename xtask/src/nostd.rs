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
//! 3. (Folded into 4.) Every optional feature of a `no_std` crate, alone,
//!    without `std`: elsewhere `serde` is only compiled next to crates that
//!    turn on `serde/std`, which hides a derive that needs `std` or `alloc`
//!    the crate does not ask for. The 32-bit and wasm builds below do exactly
//!    these builds on targets without `std`; a separate round for
//!    `x86_64-unknown-none` proved nothing more and cost ≈ 2 minutes of CI.
//! 4. The 32-bit and wasm targets users embed the crates in:
//!    every `no_std` crate (without and with each optional feature) and the
//!    facade (default features, and `serde`) are built for each of
//!    [`EMBEDDED_TARGETS`] (32-bit pointers: a `usize`-sized assumption or a
//!    64-bit-only dependency impl fails here, not in a user's build). The
//!    targets are installed with `rustup target add` when missing; a machine
//!    that cannot fetch them fails the check rather than skipping it.
//! 5. Same results there: `crates/basis-core/tests/portable/digest.rs` (CRCs
//!    over d-choice saved state, over BASIS blobs, and over the other
//!    optimizers' blobs, after fixed workloads,
//!    pinned by that crate's `tests/portable.rs` on the host) is built into a
//!    wasm32 module and run under Node.js (installed from Debian's `nodejs`
//!    when missing); all three digests must equal the pinned ones, and a
//!    fourth, of onebit-codec and onebit-adam (`xtask/portable/
//!    onebit_digest.rs`), must equal the same code's on the host built with
//!    `num-traits/std`. wasm32
//!    has 32-bit pointers, so a saved layout or placement that hangs on
//!    pointer width fails here, and no C library: a BASIS result that
//!    depends on the platform's `exp`/`exp2`/`log2`/`powf` fails too
//!    (basis-core calls the `libm` crate on every target, see its
//!    `src/math.rs`).

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

/// 32-bit targets without an OS the crates must build for: an ARM Cortex-M4F
/// microcontroller and WebAssembly.
pub(crate) const EMBEDDED_TARGETS: &[&str] = &["thumbv7em-none-eabihf", "wasm32-unknown-unknown"];

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

    // Proof 4: the 32-bit and wasm targets.
    for target in EMBEDDED_TARGETS {
        if !target_available(target) {
            return Err(format!(
                "target {target} is not installed and `rustup target add {target}` failed: \
                 cannot show the no_std crates build for it"
            ));
        }
        let built = embedded_builds(target, &target_dir)?;
        eprintln!("nostd: {built} builds for {target} passed");
    }

    // Proof 5: the same digest on wasm32 as pinned on the host.
    let (bucketers, basis, others, onebit) = wasm_digest(&target_dir)?;
    eprintln!(
        "nostd: wasm32 digests equal the host's pinned values: d-choice state \
         {bucketers:#010x}, BASIS {basis:#010x}, other optimizers {others:#010x}; \
         1-bit crates {onebit:#010x} equal to the host's std build"
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

/// Every `no_std` crate with no features and with each optional feature
/// alone, the facade with its defaults and with `serde`, built for `target`.
/// Returns the number of builds.
fn embedded_builds(target: &str, target_dir: &Path) -> Result<usize, String> {
    let mut builds: Vec<Vec<&str>> = Vec::new();
    for krate in NO_STD_CRATES {
        builds.push(vec!["-p", krate.package, "--no-default-features"]);
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
    builds.push(vec!["-p", "basisopt"]);
    builds.push(vec!["-p", "basisopt", "--features", "serde"]);
    for args in &builds {
        util::run(
            cargo()
                .args(["build", "--quiet", "--lib", "--target", target])
                .args(args)
                .env("CARGO_TARGET_DIR", target_dir),
        )?;
    }
    Ok(builds.len())
}

/// Builds the portable digest (see proof 5) for `wasm32-unknown-unknown`,
/// runs it under Node.js and checks the three digests against the pinned values
/// and the 1-bit crates' digest against the host's std build; returns them.
fn wasm_digest(target_dir: &Path) -> Result<(u32, u32, u32, u32), String> {
    const WASM: &str = "wasm32-unknown-unknown";
    let root = root();
    let dir = root.join("target").join("portable-digest");
    fs::create_dir_all(dir.join("src")).map_err(|e| e.to_string())?;
    let crates = root.join("crates");
    let manifest = format!(
        r#"[package]
name = "portable-digest"
version = "0.0.0"
edition = "2024"
publish = false

[workspace]

[lib]
crate-type = ["cdylib", "rlib"]

[dependencies]
balanced-hash = {{ package = "basisopt-balanced-hash", path = {:?} }}
basis-core = {{ package = "basisopt-core", path = {:?}, default-features = false }}
onebit-codec = {{ package = "basisopt-onebit-codec", path = {:?}, default-features = false }}
onebit-adam = {{ package = "basisopt-onebit-adam", path = {:?}, default-features = false }}

# The host build (the 1-bit digest's reference) with `num-traits/std` on, as
# in a user's std program: float functions from the C library where
# num-traits offers them.
[target.'cfg(not(target_family = "wasm"))'.dependencies]
num-traits = {{ version = "0.2", default-features = false, features = ["std"] }}

[profile.release]
panic = "abort"
"#,
        crates.join("balanced-hash"),
        crates.join("basis-core"),
        crates.join("onebit-codec"),
        crates.join("onebit-adam"),
    );
    let lib = format!(
        r#"//! The portable digests as a wasm module: `part(i)` computed here, `pinned(i)` on the host.
extern crate alloc;

#[path = {:?}]
mod portable;

#[path = {:?}]
mod onebit;

/// The 1-bit crates' digest (compared with the host's build, not pinned).
#[unsafe(no_mangle)]
pub extern "C" fn onebit() -> u32 {{
    onebit::digest()
}}

/// Digest `i` (0: d-choice state, 1: BASIS, 2: the other optimizers)
/// computed on this target.
#[unsafe(no_mangle)]
pub extern "C" fn part(i: u32) -> u32 {{
    portable::digests()[(i % 3) as usize]
}}

/// Digest `i` as pinned on the host.
#[unsafe(no_mangle)]
pub extern "C" fn pinned(i: u32) -> u32 {{
    [portable::BUCKETER_DIGEST, portable::BASIS_DIGEST_HOST, portable::OTHERS_DIGEST]
        [(i % 3) as usize]
}}
"#,
        crates.join("basis-core/tests/portable/digest.rs"),
        root.join("xtask/portable/onebit_digest.rs"),
    );
    let main = "//! The 1-bit digest on the host, printed.\n\
                fn main() {\n    println!(\"{}\", portable_digest::onebit());\n}\n";
    let write = |p: &Path, s: &str| fs::write(p, s).map_err(|e| format!("{}: {e}", p.display()));
    write(&dir.join("Cargo.toml"), &manifest)?;
    write(&dir.join("src").join("lib.rs"), &lib)?;
    write(&dir.join("src").join("main.rs"), main)?;
    let lock = root.join("Cargo.lock");
    if lock.exists() {
        fs::copy(&lock, dir.join("Cargo.lock")).map_err(|e| e.to_string())?;
    }
    util::run(
        cargo()
            .args([
                "build",
                "--quiet",
                "--release",
                "--lib",
                "--target",
                WASM,
                "--manifest-path",
            ])
            .arg(dir.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", target_dir),
    )?;
    // The host's 1-bit digest: the same source with std.
    let host = cargo()
        .args([
            "run",
            "--quiet",
            "--release",
            "--bin",
            "portable-digest",
            "--manifest-path",
        ])
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target_dir)
        .output()
        .map_err(|e| format!("cargo run (host 1-bit digest): {e}"))?;
    if !host.status.success() {
        return Err(format!(
            "the host 1-bit digest failed:\n{}",
            String::from_utf8_lossy(&host.stderr)
        ));
    }
    let onebit_host: u32 = String::from_utf8_lossy(&host.stdout)
        .trim()
        .parse()
        .map_err(|e| format!("host 1-bit digest output: {e}"))?;
    let module = target_dir
        .join(WASM)
        .join("release")
        .join("portable_digest.wasm");
    if !util::have("node") {
        util::ensure_apt(&["nodejs"])?;
    }
    let script = format!(
        "const m = new WebAssembly.Module(require('fs').readFileSync({:?})); \
         const e = new WebAssembly.Instance(m, {{}}).exports; \
         console.log([0, 1, 2].map(i => (e.part(i) >>> 0) + ' ' + (e.pinned(i) >>> 0)).join(' ') \
         + ' ' + (e.onebit() >>> 0));",
        module
    );
    let out = Command::new("node")
        .args(["-e", &script])
        .output()
        .map_err(|e| format!("node: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "the wasm32 digest module failed under node:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let numbers: Vec<u32> = stdout
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    match numbers[..] {
        [got, pinned, basis, basis_host, others, others_host, onebit]
            if got == pinned
                && basis == basis_host
                && others == others_host
                && onebit == onebit_host
                && onebit != 0 =>
        {
            Ok((got, basis, others, onebit))
        }
        [got, pinned, ..] if got != pinned => Err(format!(
            "wasm32 computes d-choice state digest {got:#010x}, the host pinned {pinned:#010x}: \
             the saved layout or the placement differs between targets"
        )),
        [_, _, basis, basis_host, ..] if basis != basis_host => Err(format!(
            "wasm32 computes BASIS digest {basis:#010x}, the host pinned {basis_host:#010x}: \
             a BASIS result or the blob layout differs between targets (a float function \
             that is not the `libm` crate's on every target?)"
        )),
        [_, _, _, _, others, others_host, _] if others != others_host => Err(format!(
            "wasm32 computes the other optimizers' digest {others:#010x}, the host pinned \
             {others_host:#010x}: a result or a blob layout differs between targets"
        )),
        [.., onebit] => Err(format!(
            "wasm32 computes the 1-bit crates' digest {onebit:#010x}, the host (with std) \
             {onebit_host:#010x}: onebit-codec or onebit-adam differs between targets \
             (0: a call failed)"
        )),
        _ => Err(format!(
            "unexpected output from the wasm32 digest: {stdout:?}"
        )),
    }
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

/// Whether [`CROSS_TARGET`] is installed (installing it if it can).
pub(crate) fn cross_target_available() -> bool {
    target_available(CROSS_TARGET)
}

/// Whether `target`'s standard library is installed, after trying
/// `rustup target add` (with a time limit) if it is not.
pub(crate) fn target_available(target: &str) -> bool {
    let installed = |s: &str| s.lines().any(|l| l.trim() == target);
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
        Command::new("rustup").args(["target", "add", target]),
        Duration::from_secs(120),
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
