#![no_main]
//! Fuzz target `snapshot_decode`: see [`informer_fuzz::snapshot_decode`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| informer_fuzz::snapshot_decode(data));
