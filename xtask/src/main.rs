//! `cargo xtask <command>`: project automation (matklad's xtask pattern).
//!
//! Commands:
//! - `ci`     the whole test suite (installs what a fresh machine lacks first)
//! - `test`   `cargo test --workspace`
//! - `publish-check` package every publishable crate, build and test the
//!   packages outside the workspace, and a `no_std` user crate against them
//! - `nostd`  prove the `no_std` crates build with no `std` in their tree
//! - `bench`  run the criterion benches (`cargo xtask bench [crate] [filter]`);
//!   `bench --peers [--rounds R] [--ab OLD,NEW]`: interleaved same-run comparisons with
//!   PyTorch and numpy (opt-in: installs torch into `target/peers/venv`);
//!   `bench --tower [--rounds R] [--old BIN] [--threads 1,2]`: interleaved
//!   FM/DeepFM/DLRM training throughput per `--threads` count, against an old binary;
//!   `bench --e2e [--lines N] [--threads 1,2] [--rounds R]`: the whole FM/DeepFM job
//!   against a PyTorch implementation on the same Criteo file (opt-in, like `--peers`)
//! - `loom`   loom models of the concurrent tables
//! - `fuzz`   cargo-fuzz targets (`fuzz <target>|--all --seconds N`)
//! - `mpi`    the MPI integration program under mpirun (`--bench [--net 1gbit]`)
//! - `data`   `data fetch movielens|spam`
//! - `demo`   the README's main job
//! - `quality` the production-like quality benchmark (`--preset short|headline|ablation`;
//!   opt-in, never in CI: long runs, resumable)

// xtask is a std-only host tool: `core`/`alloc` paths buy it nothing.
#![allow(clippy::std_instead_of_core, clippy::std_instead_of_alloc)]

mod bench_e2e;
mod bench_tower;
mod ci;
mod data;
mod demo;
mod fuzz;
mod loom;
mod mpi;
mod nostd;
mod peers;
mod publish;
mod quality;
mod quality_plot;
mod stats;
mod test_count;
mod util;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        eprintln!(
            "usage: cargo xtask <ci|test|publish-check|nostd|bench|loom|fuzz|mpi|data|demo|quality> [args]"
        );
        return ExitCode::from(2);
    };
    let result = match cmd.as_str() {
        "ci" => ci::run(rest),
        "test" => ci::test(rest),
        "nostd" => nostd::run(rest),
        "publish-check" => publish::run(rest),
        "bench" if rest.iter().any(|a| a == "--peers") => peers::run(rest),
        "bench" if rest.iter().any(|a| a == "--tower") => bench_tower::run(rest),
        "bench" if rest.iter().any(|a| a == "--e2e") => bench_e2e::run(rest),
        "bench" => ci::bench(rest),
        "loom" => loom::run(rest),
        "fuzz" => fuzz::run(rest),
        "mpi" => mpi::run(rest),
        "data" => data::run(rest),
        "demo" => demo::run(rest),
        "quality" => quality::run(rest),
        other => Err(format!("unknown xtask command `{other}`")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask {cmd}: error: {e}");
            ExitCode::FAILURE
        }
    }
}
