//! `cargo xtask fuzz` (filled in by its issue).

pub(crate) fn run(_args: &[String]) -> Result<(), String> {
    Err("`fuzz` is not implemented yet".into())
}

/// The part of `cargo xtask ci` that belongs to `fuzz`.
pub(crate) fn ci() -> Result<(), String> {
    Ok(())
}

/// Install cargo-fuzz when missing (part of `ci`'s install step).
pub(crate) fn install() -> Result<(), String> {
    Ok(())
}
