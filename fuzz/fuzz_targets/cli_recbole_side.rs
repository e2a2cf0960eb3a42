//! `basis_data::lines::recbole_side` on an arbitrary `.user` file (header + lines): never panics.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| { let _ = basis_data::lines::recbole_side(data, "user_id"); });
