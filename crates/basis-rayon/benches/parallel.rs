//! Criterion benches of the parallel kernels and Hogwild tables (filled in below).

fn main() {}
