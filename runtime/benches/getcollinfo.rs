//! getCollInfo benchmarks (being written).
fn main() {}
