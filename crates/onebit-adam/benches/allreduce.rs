//! Bench placeholder (under construction).
fn main() {}
