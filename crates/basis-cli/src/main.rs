//! The `basis` command (under construction).
fn main() {}
