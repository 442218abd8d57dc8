//! The `pipeline` benchmark on mimalloc: `cargo xtask bench core` runs both.

// The counting global allocator needs `unsafe impl GlobalAlloc`; the core itself forbids unsafe.
#![allow(unsafe_code)]

include!("common/pipeline_body.rs");

const ALLOCATOR: &str = "mimalloc";

#[global_allocator]
static GLOBAL: Counting<mimalloc::MiMalloc> = Counting(mimalloc::MiMalloc);
