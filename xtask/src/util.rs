//! Small helpers shared by the xtask commands: running commands, paths, installs.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// `RUSTDOCFLAGS` of every documentation build (CI's doc step and
/// `publish-check`'s build of the packaged crates): warnings are errors, and
/// broken intra-doc links are named explicitly (they would render as plain
/// `[Text]`) so a lint-level change cannot drop them.
pub(crate) const DOC_FLAGS: &str = "-D warnings -D rustdoc::broken_intra_doc_links --cfg docsrs";

/// The workspace root (parent of `xtask/`).
pub(crate) fn root() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    dir.parent().map(PathBuf::from).unwrap_or(dir)
}

/// `$CARGO` (the cargo that runs us), or `cargo`.
pub(crate) fn cargo() -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root());
    cmd
}

/// Run `cmd` to completion; an error names the command and its exit status.
pub(crate) fn run(cmd: &mut Command) -> Result<(), String> {
    eprintln!("$ {}", describe(cmd));
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start {}: {e}", describe(cmd)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed: {status}", describe(cmd)))
    }
}

/// Run `cmd`, killing it after `limit`; `Ok(true)` on success, `Ok(false)` on
/// failure or timeout.
pub(crate) fn run_with_timeout(cmd: &mut Command, limit: Duration) -> Result<bool, String> {
    eprintln!("$ {}   (timeout {}s)", describe(cmd), limit.as_secs());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", describe(cmd)))?;
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(status.success());
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("  timed out after {}s", limit.as_secs());
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether `program` is on the PATH.
pub(crate) fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program} >/dev/null 2>&1")])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Install Debian packages that are missing (idempotent: does nothing when
/// every package is already installed). Needs root and apt-get.
pub(crate) fn ensure_apt(packages: &[&str]) -> Result<(), String> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| {
            !Command::new("dpkg-query")
                .args(["-W", "-f=${Status}", p])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
                .unwrap_or(false)
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !have("apt-get") {
        return Err(format!(
            "missing packages {missing:?} and no apt-get to install them"
        ));
    }
    let sudo: &[&str] = if is_root() { &[] } else { &["sudo"] };
    let apt = |args: &[&str]| {
        let mut all: Vec<&str> = sudo.to_vec();
        all.push("apt-get");
        all.extend_from_slice(args);
        let mut cmd = Command::new(all[0]);
        cmd.args(&all[1..]).env("DEBIAN_FRONTEND", "noninteractive");
        run(&mut cmd)
    };
    apt(&["update", "-qq"])?;
    let mut install = vec!["install", "-y", "-qq", "--no-install-recommends"];
    install.extend_from_slice(&missing);
    apt(&install)
}

/// Whether we run as root (uid 0).
pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Install a cargo subcommand from crates.io when it is missing.
pub(crate) fn ensure_cargo_tool(binary: &str, krate: &str) -> Result<(), String> {
    if have(binary) {
        return Ok(());
    }
    run(cargo().args(["install", "--locked", krate]))
}

pub(crate) fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}
