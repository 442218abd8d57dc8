#![no_main]
//! Fuzz target `kubeconfig`: see [`informer_fuzz::kubeconfig`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| informer_fuzz::kubeconfig(data));
