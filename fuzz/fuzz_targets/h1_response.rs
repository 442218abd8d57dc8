#![no_main]
//! Fuzz target `h1_response`: see [`informer_fuzz::h1_response`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| informer_fuzz::h1_response(data));
