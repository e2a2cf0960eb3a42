//! `onebit_codec::decode` of an encoded (version 2) payload with flipped bits: always an error.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| onebit_codec::fuzzing::corrupted_payload(data));
