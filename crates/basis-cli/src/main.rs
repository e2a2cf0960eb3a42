//! The `basis` command: train, compare and inspect sparse-embedding optimizers.
#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

mod checkpoint;
mod cli;
mod compare;
mod data;
mod hashing;
mod inspect;
mod metrics;
mod model;
mod optim;
mod parallel;
mod plot;
mod progress;
mod rng;
mod spec;
mod train;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    #[cfg(feature = "mpi")]
    if let Err(e) = parallel::mpi::init() {
        eprintln!("error: MPI: {e}");
        return ExitCode::FAILURE;
    }
    let progress = !cli.quiet && parallel::is_output_rank();
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
