//! `cargo xtask cluster up|down`: not built yet.

/// Entry point of `cargo xtask cluster`.
pub fn main(_args: &[&str]) -> super::Result {
    Err("cluster: not implemented yet".into())
}
