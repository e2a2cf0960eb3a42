//! `onebit_codec::decode` on arbitrary bytes: typed errors, no panic, identity on success.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| onebit_codec::fuzzing::decode_bytes(data));
