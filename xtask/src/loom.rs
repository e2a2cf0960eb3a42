//! `cargo xtask loom [--preemptions N] [filter]`: the loom models of
//! `basis-rayon`'s Hogwild tables.
//!
//! Runs `cargo test -p basisopt-rayon --release --lib <filter>` with
//! `RUSTFLAGS="--cfg loom"` (which swaps `loom::sync` in through the crate's
//! `sync` module) and `LOOM_MAX_PREEMPTIONS` bounded (default 3), in its own
//! target dir (`target/loom`) so the cfg change never rebuilds the main one.
//! The models and what they prove: `docs/CONCURRENCY.md`.

use crate::util::{self, cargo, root};

/// Preemption bound used by CI: every model finishes in seconds at 3.
const CI_PREEMPTIONS: u32 = 3;

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut preemptions = CI_PREEMPTIONS;
    let mut filter = String::from("loom");
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--preemptions" => {
                let n = rest.next().ok_or("--preemptions needs a number")?;
                preemptions = n.parse().map_err(|_| format!("bad --preemptions `{n}`"))?;
            }
            other if other.starts_with('-') => return Err(format!("unknown option `{other}`")),
            other => filter = other.to_owned(),
        }
    }
    models(preemptions, &filter)
}

/// The part of `cargo xtask ci` that belongs to `loom`.
pub(crate) fn ci() -> Result<(), String> {
    models(CI_PREEMPTIONS, "loom")
}

fn models(preemptions: u32, filter: &str) -> Result<(), String> {
    let rustflags = match std::env::var("RUSTFLAGS") {
        Ok(flags) if !flags.trim().is_empty() => format!("{flags} --cfg loom"),
        _ => "--cfg loom".to_owned(),
    };
    util::run(
        cargo()
            .args(["test", "-p", "basisopt-rayon", "--release", "--lib", filter])
            .env("RUSTFLAGS", rustflags)
            .env("LOOM_MAX_PREEMPTIONS", preemptions.to_string())
            .env("CARGO_TARGET_DIR", root().join("target").join("loom")),
    )
}
