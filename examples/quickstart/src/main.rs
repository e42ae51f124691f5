//! Quickstart: `cargo run -p quickstart` (work in progress).

fn main() {}
