//! `basis_data::lines::recbole_inter` on an arbitrary file (header + lines): never panics; every record has a 0/1 label.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| if let Ok(v) = basis_data::lines::recbole_inter(data) { assert!(v.iter().all(|r| r.label == 0.0 || r.label == 1.0)) });
