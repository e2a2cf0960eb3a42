//! `cargo xtask data` (filled in by its issue).

pub(crate) fn run(_args: &[String]) -> Result<(), String> {
    Err("`data` is not implemented yet".into())
}
