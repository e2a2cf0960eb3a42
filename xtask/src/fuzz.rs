//! `cargo xtask fuzz <target>|--all [--seconds N]`: run cargo-fuzz targets.
//!
//! `fuzz/` is its own cargo-fuzz crate; its targets are the `[[bin]]` entries of
//! `fuzz/Cargo.toml`. libFuzzer needs nightly flags, so the runs set
//! `RUSTC_BOOTSTRAP=1` (works with the stable toolchain).

use std::path::PathBuf;

use crate::util;

/// Seconds per target when `--seconds` is not given.
const DEFAULT_SECONDS: u64 = 60;
/// Seconds per target in `cargo xtask ci` (16 targets: kept short so the
/// whole suite stays under 45 minutes on 2 cores).
const CI_SECONDS: u64 = 15;

/// `fuzz <target>|--all [--seconds N]`.
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let usage = || {
        format!(
            "usage: cargo xtask fuzz <target>|--all [--seconds N]; targets: {}",
            targets().unwrap_or_default().join(", ")
        )
    };
    let mut seconds = DEFAULT_SECONDS;
    let mut chosen: Option<String> = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--seconds" => {
                let v = it.next().ok_or_else(usage)?;
                seconds = v
                    .parse()
                    .map_err(|_| format!("--seconds wants a whole number, got `{v}`"))?;
            }
            "-h" | "--help" => {
                eprintln!("{}", usage());
                return Ok(());
            }
            other if chosen.is_none() => chosen = Some(other.to_string()),
            other => return Err(format!("unexpected argument `{other}`\n{}", usage())),
        }
    }
    let all = targets()?;
    let selected = match chosen.as_deref() {
        None => return Err(usage()),
        Some("--all") => all,
        Some(t) if all.iter().any(|a| a == t) => vec![t.to_string()],
        Some(t) => return Err(format!("unknown fuzz target `{t}`\n{}", usage())),
    };
    install()?;
    for t in &selected {
        fuzz_one(t, seconds)?;
    }
    Ok(())
}

/// The part of `cargo xtask ci` that belongs to `fuzz`: every target briefly.
pub(crate) fn ci() -> Result<(), String> {
    for t in targets()? {
        fuzz_one(&t, CI_SECONDS)?;
    }
    Ok(())
}

/// Install cargo-fuzz when missing (part of `ci`'s install step).
pub(crate) fn install() -> Result<(), String> {
    util::ensure_cargo_tool("cargo-fuzz", "cargo-fuzz")
}

fn fuzz_dir() -> PathBuf {
    util::root().join("fuzz")
}

/// The `[[bin]]` target names listed in `fuzz/Cargo.toml`, in file order.
fn targets() -> Result<Vec<String>, String> {
    let manifest = fuzz_dir().join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .map_err(|e| format!("cannot read {}: {e}", manifest.display()))?;
    Ok(bin_names(&text))
}

/// `name = "…"` of each `[[bin]]` table (a tiny parser: enough for our manifest).
fn bin_names(manifest: &str) -> Vec<String> {
    let mut in_bin = false;
    let mut names = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin
            && let Some(value) = line.strip_prefix("name").map(str::trim_start)
            && let Some(value) = value.strip_prefix('=')
        {
            names.push(value.trim().trim_matches('"').to_string());
        }
    }
    names
}

/// `cargo fuzz run <target> -- -max_total_time=<seconds>` in `fuzz/`.
///
/// libFuzzer reports every corpus change; its output goes to
/// `target/fuzz-logs/<target>.log` and only the closing statistics (or, on a
/// crash, the last lines of the log) are printed.
fn fuzz_one(target: &str, seconds: u64) -> Result<(), String> {
    let logs = util::root().join("target").join("fuzz-logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let log_path = logs.join(format!("{target}.log"));
    let log =
        std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let log_err = log.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = util::cargo();
    cmd.current_dir(fuzz_dir())
        .env("RUSTC_BOOTSTRAP", "1")
        .args(["fuzz", "run", target, "--"])
        .arg(format!("-max_total_time={seconds}"))
        .stdout(log)
        .stderr(log_err);
    let result = util::run(&mut cmd);
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let shown: Vec<&str> = if result.is_ok() {
        lines
            .iter()
            .copied()
            .filter(|l| l.starts_with("Done ") || l.contains("stat::number_of_executed_units"))
            .collect()
    } else {
        lines
            .iter()
            .copied()
            .skip(lines.len().saturating_sub(60))
            .collect()
    };
    eprintln!(
        "  fuzz {target}: {} (log: {})",
        shown.join(" | "),
        log_path.display()
    );
    result
}

#[cfg(test)]
mod tests {
    use super::bin_names;

    #[test]
    fn bin_names_reads_only_bin_tables() {
        let manifest = "[package]\nname = \"basis-fuzz\"\n\n[[bin]]\nname = \"a\"\npath = \"x\"\n\n[dependencies]\nname = \"no\"\n[[bin]]\nname=\"b\"\n";
        assert_eq!(bin_names(manifest), ["a", "b"]);
    }
}
