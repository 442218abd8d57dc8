//! `cargo xtask demo`: not built yet.

/// Entry point.
pub fn main(_args: &[&str]) -> super::Result {
    Err("demo: not built yet".into())
}
