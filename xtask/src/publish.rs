//! `cargo xtask publish-check`: prove the published packages work for a user
//! who gets them from crates.io, not from this workspace.
//!
//! 1. `cargo package` of every publishable package at once: what `cargo
//!    publish --dry-run` does short of the upload (cargo orders the packages
//!    by dependency, checks every manifest, and resolves each package's
//!    dependencies on the others through a local registry of the new
//!    `.crate` files), leaving the files in `target/package/`.
//! 2. Every `.crate` is unpacked into `target/publish-check/crates/`, a fresh
//!    workspace that knows nothing of this one: the packages' own manifests
//!    (as published) name each other as crates.io dependencies, and
//!    `[patch.crates-io]` resolves those to the unpacked directories.
//! 3. There every target of every package builds (benches are checked,
//!    examples built: a file the package forgot fails here) and its tests
//!    run, with the full property-test counts: this is the only place CI
//!    runs the published packages' tests (`cargo xtask ci`'s `test` step
//!    covers the unpublished crates).
//! 4. `xtask/external/nostd-user`, a `no_std` crate written the way a user
//!    would, depends on the packages by their published names; it is built
//!    for `x86_64-unknown-none` (no `std` there at all) and tested on the host.
//!
//! Fast on purpose: no separate verify build (step 3 is a superset of it),
//! and the workspace's target directory and profiles so external
//! dependencies are not compiled again.

use crate::util::{self, cargo, have, root};
use std::fs;
use std::path::Path;
use std::time::Instant;

/// Publishable packages: directory under the root (`.` is the facade) and
/// package name. The order is the publishing order: dependencies, dev ones
/// included, first (docs/ARCHITECTURE.md, "Publishing"; cargo checks it too).
pub(crate) const PACKAGES: &[(&str, &str)] = &[
    ("crates/balanced-hash", "basisopt-balanced-hash"),
    ("crates/comm-traits", "basisopt-comm-traits"),
    ("crates/onebit-codec", "basisopt-onebit-codec"),
    ("crates/basis-core", "basisopt-core"),
    ("crates/basis-std", "basisopt-std"),
    ("crates/onebit-adam", "basisopt-onebit-adam"),
    ("crates/basis-rayon", "basisopt-rayon"),
    ("crates/comm-mpi", "basisopt-comm-mpi"),
    ("crates/basis-shard", "basisopt-shard"),
    ("crates/basis-data", "basisopt-data"),
    (".", "basisopt"),
];

/// The package that needs Open MPI to build.
const MPI_PACKAGE: &str = "basisopt-comm-mpi";

pub(crate) fn run(_args: &[String]) -> Result<(), String> {
    let start = Instant::now();
    let root = root();
    let version = env!("CARGO_PKG_VERSION");
    let check = root.join("target").join("publish-check");
    if check.exists() {
        fs::remove_dir_all(&check).map_err(|e| format!("{}: {e}", check.display()))?;
    }
    let crates = check.join("crates");
    fs::create_dir_all(&crates).map_err(|e| e.to_string())?;

    // 1. Package. `--no-verify`: step 3 builds and tests every package from
    // its `.crate`, which is what verification would do, and more.
    let mut publish = cargo();
    publish.args(["package", "--no-verify", "--allow-dirty"]);
    for (_, pkg) in PACKAGES {
        publish.args(["-p", pkg]);
    }
    util::run(&mut publish)?;

    // 2. Unpack each `.crate` (a gzipped tar of one `name-version/` directory).
    let packaged = root.join("target").join("package");
    let mut patch = String::new();
    let mut members = Vec::new();
    for (_, pkg) in PACKAGES {
        let file = packaged.join(format!("{pkg}-{version}.crate"));
        util::run(
            // `--touch`: unpacked files get the current time, not the
            // archive's, so cargo's mtime fingerprints in the shared target
            // directory see a changed source as changed (with the archive's
            // times a warm re-run tested a stale build of a changed crate).
            std::process::Command::new("tar")
                .arg("xzf")
                .arg(&file)
                .arg("--touch")
                .arg("-C")
                .arg(&crates),
        )?;
        let dir = format!("crates/{pkg}-{version}");
        patch.push_str(&format!("{pkg} = {{ path = \"{dir}\" }}\n"));
        members.push(dir);
    }
    copy_dir(
        &root.join("xtask").join("external").join("nostd-user"),
        &check.join("nostd-user"),
    )?;
    members.push("nostd-user".into());
    write_workspace(&check, &members, &patch)?;

    // 3. Build every target, then run the tests, outside this workspace.
    let mpi = have("mpicc");
    if !mpi {
        eprintln!("publish-check: no Open MPI (mpicc): {MPI_PACKAGE} is packaged but not built");
    }
    let in_check = |args: &[&str]| {
        let mut cmd = cargo();
        cmd.current_dir(&check)
            .args(args)
            .arg("--workspace")
            .env("CARGO_TARGET_DIR", root.join("target"));
        if !mpi {
            cmd.args(["--exclude", MPI_PACKAGE]);
        }
        cmd
    };
    // Benches only need to compile (a file the package forgot fails the
    // check); building them optimized cost about a minute of CI for nothing.
    util::run(&mut in_check(&["check", "--benches"]))?;
    crate::test_count::run(&mut in_check(&["test"]))?;

    // 4. The user's `no_std` crate on a target without `std` (its host tests
    // ran in step 3).
    if crate::nostd::cross_target_available() {
        util::run(
            cargo()
                .current_dir(&check)
                .args(["build", "-p", "nostd-user", "--target"])
                .arg(crate::nostd::CROSS_TARGET)
                .env("CARGO_TARGET_DIR", root.join("target")),
        )?;
    } else {
        return Err(format!(
            "target {} unavailable: cannot show the packages build without std",
            crate::nostd::CROSS_TARGET
        ));
    }
    // 5. The MPI package's documentation without MPI: its `mpi` feature off,
    // nothing MPI is even in the dependency graph, and the docs.rs
    // flags build warning-free.
    mpi_free_docs(&check, &root.join("target"))?;
    eprintln!(
        "publish-check: {} packages packaged, unpacked, built and tested outside the workspace; \
         nostd-user built for {}; {MPI_PACKAGE} documented without MPI ({:.0}s)",
        PACKAGES.len(),
        crate::nostd::CROSS_TARGET,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `cargo doc` of the unpacked [`MPI_PACKAGE`] with `--no-default-features`
/// and docs.rs's flags, after checking that its dependency graph then holds
/// no MPI crate (`mpi`, `mpi-sys`, `build-probe-mpi`): a machine without MPI
/// can build these docs.
fn mpi_free_docs(check: &Path, target: &Path) -> Result<(), String> {
    let tree = cargo()
        .current_dir(check)
        .args(["tree", "-p", MPI_PACKAGE, "--no-default-features"])
        .args(["-e", "normal,build", "--prefix", "none", "--format", "{p}"])
        .output()
        .map_err(|e| format!("cargo tree: {e}"))?;
    if !tree.status.success() {
        return Err(format!(
            "cargo tree -p {MPI_PACKAGE}: {}",
            String::from_utf8_lossy(&tree.stderr)
        ));
    }
    let tree = String::from_utf8_lossy(&tree.stdout);
    if let Some(dep) = tree.lines().find(|l| {
        let name = l.split_whitespace().next().unwrap_or("");
        matches!(name, "mpi" | "mpi-sys" | "build-probe-mpi")
    }) {
        return Err(format!(
            "{MPI_PACKAGE} without its `mpi` feature still depends on {dep}"
        ));
    }
    util::run(
        cargo()
            .current_dir(check)
            .args([
                "doc",
                "--no-deps",
                "--no-default-features",
                "-p",
                MPI_PACKAGE,
            ])
            .env("CARGO_TARGET_DIR", target)
            .env("RUSTDOCFLAGS", util::DOC_FLAGS),
    )
}

/// The manifest of the unpacked workspace: the packages, the user crate,
/// crates.io names patched to the unpacked directories, and this
/// workspace's profiles (so the shared target directory is reused).
fn write_workspace(dir: &Path, members: &[String], patch: &str) -> Result<(), String> {
    let root_manifest = fs::read_to_string(root().join("Cargo.toml")).map_err(|e| e.to_string())?;
    // The profiles are the root manifest's last sections (from the first
    // `[profile.` on): copied whole, so the shared target directory's
    // artifacts match and nothing external is compiled again.
    let profiles = root_manifest
        .find("\n[profile.")
        .map(|at| &root_manifest[at + 1..])
        .ok_or("the root Cargo.toml has no [profile.*] sections to copy")?;
    let members = members
        .iter()
        .map(|m| format!("    \"{m}\",\n"))
        .collect::<String>();
    let manifest = format!(
        r#"# Generated by `cargo xtask publish-check`: the published packages as a user gets them.
[workspace]
resolver = "3"
members = [
{members}]

[patch.crates-io]
{patch}
{profiles}"#
    );
    fs::write(dir.join("Cargo.toml"), manifest).map_err(|e| e.to_string())?;
    // The workspace's lock file: the same external versions, no new downloads.
    fs::copy(root().join("Cargo.lock"), dir.join("Cargo.lock"))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    fs::create_dir_all(to).map_err(|e| e.to_string())?;
    for entry in fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))? {
        let entry = entry.map_err(|e| e.to_string())?;
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}
