//! `basis_data::lines::text_document` on an arbitrary document: never panics; features are finite and positive.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| if let Ok(f) = basis_data::lines::text_document(data, data.first().is_some_and(|b| b & 1 == 1)) { assert!(!f.is_empty() && f.iter().all(|x| x.1.is_finite() && x.1 > 0.0)) });
