//! `basis_data::lines::movielens_udata` on one arbitrary line: never panics; a parsed record has a 0/1 label and finite values.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| if let Ok(r) = basis_data::lines::movielens_udata(data) { assert!((r.label == 0.0 || r.label == 1.0) && r.features.iter().all(|f| f.1.is_finite())) });
