//! The `basis` binary: a thin entry point into [`basis_cli::run`].

fn main() -> std::process::ExitCode {
    basis_cli::run()
}
