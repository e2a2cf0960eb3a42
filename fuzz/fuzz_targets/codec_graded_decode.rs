//! `onebit_codec::graded::decode` on arbitrary bytes: typed errors, no panic, output unchanged on error.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| onebit_codec::fuzzing::graded_decode(data));
