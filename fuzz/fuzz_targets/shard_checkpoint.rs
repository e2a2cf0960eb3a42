//! `basis_shard::decode_checkpoint` on arbitrary bytes, then a restore of
//! what decodes into a matching table: an error or a table, never a panic.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| basis_shard::fuzzing::shard_checkpoint(data));
