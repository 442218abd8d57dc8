#![no_main]
//! Fuzz target `incluster`: see [`informer_fuzz::incluster`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| informer_fuzz::incluster(data));
