//! `basis_shard::decode_checkpoint` on arbitrary bytes: an error or a snapshot, never a panic.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = basis_shard::decode_checkpoint(data);
});
