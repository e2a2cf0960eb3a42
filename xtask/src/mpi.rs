//! `cargo xtask mpi` (filled in by its issue).

pub(crate) fn run(_args: &[String]) -> Result<(), String> {
    Err("`mpi` is not implemented yet".into())
}

/// The part of `cargo xtask ci` that belongs to `mpi`.
pub(crate) fn ci() -> Result<(), String> {
    Ok(())
}
