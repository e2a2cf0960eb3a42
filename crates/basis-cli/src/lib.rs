//! The `basis` command as a library: the subcommands behind the binary, and
//! the real-data line parsers ([`lines`]) public so they can be fuzzed and
//! reused. Everything else is internal to the crate.
#![doc = include_str!("../README.md")]
// `deny`, not `forbid`: `deep::gemm` wraps the one `unsafe` call (sgemm).
#![deny(unsafe_code)]

extern crate alloc;

mod checkpoint;
mod cli;
mod compare;
mod deep;
mod dense_opt;
mod dense_telemetry;
mod eager;
mod inspect;
mod metrics;
mod model;
mod optim;
mod parallel;
mod pixel_font;
mod plot;
mod run;
mod shard;
mod spec;
mod train;
mod tune;
mod validate;

// The data layer lives in `basis-data`; these aliases keep the CLI's
// `crate::data::…`, `crate::hashing::…`, `crate::rng::…` paths.
use basis_data as data;
use basis_data::{hashing, progress, rng};

pub use data::lines;

use clap::Parser;
use std::process::ExitCode;

/// Whether the command asks for `--dense-overlap on` (MPI then builds its
/// communicator on a communication thread).
#[cfg(feature = "mpi")]
fn model_overlaps(cli: &cli::Cli) -> bool {
    let m = match &cli.command {
        cli::Command::Train(a) => &a.model,
        cli::Command::Compare(a) => &a.model,
        cli::Command::Inspect(_) => return false,
    };
    m.dense_overlap == dense_opt::DenseOverlap::On
}

/// Run the `basis` command with the process's arguments: parse them, run the
/// subcommand, print any error to stderr.
///
/// Returns the process exit code: success, or failure after an error (bad
/// arguments exit through clap with its own code).
pub fn run() -> ExitCode {
    let cli = cli::Cli::parse();
    #[cfg(feature = "mpi")]
    if let Err(e) = parallel::mpi::init(model_overlaps(&cli)) {
        eprintln!("error: MPI: {e}");
        return ExitCode::FAILURE;
    }
    let progress = !cli.quiet && parallel::is_output_rank();
    let model = match &cli.command {
        cli::Command::Train(a) => Some(&a.model),
        cli::Command::Compare(a) => Some(&a.model),
        cli::Command::Inspect(_) => None,
    };
    if let Some(m) = model
        && let Err(e) = deep::par::init_pool(m.threads, m.workers)
    {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    let result = match &cli.command {
        cli::Command::Train(a) => compare::train_one(a, progress),
        cli::Command::Compare(a) => compare::compare(a, progress),
        cli::Command::Inspect(a) => inspect::run(a, progress),
    };
    #[cfg(feature = "mpi")]
    parallel::mpi::finish();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
