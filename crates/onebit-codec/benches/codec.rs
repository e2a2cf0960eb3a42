//! Codec benchmarks (placeholder).
fn main() {}
