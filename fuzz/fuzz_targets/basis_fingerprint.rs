//! `basis_core` state export → import between two BASIS optimizers of chosen settings: accepted exactly when the settings agree.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| basis_core::fuzzing::fingerprint_pair(data));
