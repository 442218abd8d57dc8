#![no_main]
//! Fuzz target `selector`: see [`informer_fuzz::selector`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| informer_fuzz::selector(data));
