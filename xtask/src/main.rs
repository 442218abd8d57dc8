//! Project automation. `cargo xtask help` lists the commands.
fn main() {}
