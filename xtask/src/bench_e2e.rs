//! `cargo xtask bench e2e`: not built yet.

/// Entry point.
pub fn main(_args: &[&str]) -> super::Result {
    Err("bench e2e: not built yet".into())
}
