//! `onebit_adam::OneBitAdam::import_state` on arbitrary bytes: an error leaves the optimizer unchanged; an accepted record re-exports to the same bytes.
#![no_main]
use onebit_adam::{Config, OneBitAdam};
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut opt = OneBitAdam::new(
        3,
        Config::default()
.with_freeze_step(1),
    )
    .unwrap();
    let before = opt.export_state();
    let after = if opt.import_state(data).is_ok() {
        data.to_vec()
    } else {
        before
    };
    assert_eq!(opt.export_state(), after);
});
