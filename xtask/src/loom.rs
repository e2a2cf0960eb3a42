//! `cargo xtask loom` (filled in by its issue).

pub(crate) fn run(_args: &[String]) -> Result<(), String> {
    Err("`loom` is not implemented yet".into())
}

/// The part of `cargo xtask ci` that belongs to `loom`.
pub(crate) fn ci() -> Result<(), String> {
    Ok(())
}
