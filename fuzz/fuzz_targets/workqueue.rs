#![no_main]
//! Fuzz target `workqueue`: see [`informer_fuzz::workqueue`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| informer_fuzz::workqueue(data));
