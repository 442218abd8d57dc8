#![no_main]
//! Fuzz target `list_decoder`: see [`informer_fuzz::list_decoder`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| informer_fuzz::list_decoder(data));
