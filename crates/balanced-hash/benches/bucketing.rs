//! Placeholder bench (replaced below).
fn main() {}
