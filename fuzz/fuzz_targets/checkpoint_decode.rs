//! `basis_std::checkpoint::Checkpoint::decode` on arbitrary bytes: a typed error or a checkpoint that re-encodes to the same bytes.
#![no_main]
use basis_std::checkpoint::Checkpoint;
libfuzzer_sys::fuzz_target!(|data: &[u8]| if let Ok(c) = Checkpoint::decode(data) {
    assert_eq!(c.encode(), data)
});
