//! Fused vs two-pass compressor, sign rule, payload size and encode → decode identity.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| onebit_codec::fuzzing::roundtrip(data));
