//! Benchmark placeholder, replaced by the predictor benchmark below.
fn main() {}
