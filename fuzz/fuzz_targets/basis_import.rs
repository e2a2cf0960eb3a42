//! `SparseOptimizer::import_state` of `basis_core` on arbitrary bytes: an error changes nothing; an accepted blob re-exports to the same bytes.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| basis_core::fuzzing::import_bytes(data));
