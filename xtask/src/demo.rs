//! `cargo xtask demo` (filled in by its issue).

pub(crate) fn run(_args: &[String]) -> Result<(), String> {
    Err("`demo` is not implemented yet".into())
}
