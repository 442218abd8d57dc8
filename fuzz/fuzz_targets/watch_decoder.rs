#![no_main]
//! Fuzz target `watch_decoder`: see [`informer_fuzz::watch_decoder`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| informer_fuzz::watch_decoder(data));
