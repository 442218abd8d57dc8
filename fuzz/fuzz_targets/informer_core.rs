#![no_main]
//! Fuzz target `informer_core`: see [`informer_fuzz::informer_core`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| informer_fuzz::informer_core(data));
