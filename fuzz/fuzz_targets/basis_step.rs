//! `basis_core::Basis::step` on arbitrary ids and gradient bits: no panic, and no NaN/Inf ever reaches a bucket.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| basis_core::fuzzing::step_bytes(data));
