//! `basis_core::SlotIndex` against a slow model on arbitrary insert/remove/get sequences.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| basis_core::fuzzing::slot_index(data));
