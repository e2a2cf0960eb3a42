//! Saved-state errors a user can act on: a cut record is reported as
//! truncated with the lengths (not as a checksum mismatch), for every cut
//! of records holding each kind of error buffer.

#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use basis_std::local::LocalComm;
use onebit_adam::{
    AutoFreeze, Config, FreezePolicy, GroupSpec, OneBitAdam, ScaleKind, StateError, Variant,
};

const D: usize = 37;

/// Records of two ranks after `steps` steps (freeze at 2), for `config`:
/// group 0 one-bit (its error buffers saved once compression ran), group 1
/// full precision (no error buffer).
fn records(config: Config, steps: usize) -> Vec<(Vec<u8>, OneBitAdam)> {
    let groups = [GroupSpec::one_bit(D - 5), GroupSpec::full_precision(5)];
    LocalComm::run(2, |mut comm| {
        let mut opt = OneBitAdam::with_groups(&groups, config).unwrap();
        let mut params = vec![0.5f32; D];
        for s in 0..steps {
            let grad: Vec<f32> = (0..D)
                .map(|i| ((i * 7 + s * 3) % 11) as f32 * 0.1 - 0.5)
                .collect();
            opt.step_with_grad(&mut comm, &mut params, &grad).unwrap();
        }
        (opt.export_state(), opt)
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

/// Every cut of `blob` is `Truncated { needed, found: cut }`: `needed` is
/// more than the cut and at most the record, grows with the cut, and is
/// the record's exact length once the cut is past the last length field
/// (in the tail arrays m, v, mask, grad_sum, CRC). One more byte is
/// `TrailingBytes`. The optimizer is unchanged throughout.
fn cuts_are_reported_as_truncated(blob: &[u8], opt: &mut OneBitAdam, kind: u8) {
    // Group 0's error-buffer kind: after the 48-byte header, its length,
    // policy and variance-update count (17 bytes).
    assert_eq!(blob[65], kind, "the record holds the kind under test");
    let full = blob.len() as u64;
    let tail = (12 * D + D.div_ceil(8) + 4) as u64;
    let mut last = 0;
    for cut in 0..blob.len() {
        let Err(StateError::Truncated { needed, found }) = opt.import_state(&blob[..cut]) else {
            panic!("cut at {cut}: {:?}", opt.import_state(&blob[..cut]));
        };
        assert_eq!(found, cut as u64);
        assert!(
            needed > found && needed <= full,
            "cut {cut}: needed {needed}"
        );
        assert!(needed >= last, "cut {cut}: needed {needed} < {last}");
        if found >= full - tail {
            assert_eq!(needed, full, "cut {cut}");
        }
        last = needed;
    }
    let mut longer = blob.to_vec();
    longer.push(0);
    assert_eq!(opt.import_state(&longer), Err(StateError::TrailingBytes));
    assert_eq!(opt.export_state(), blob);
    opt.import_state(blob).unwrap();
}

#[test]
fn every_cut_of_every_record_kind_is_truncated_with_lengths() {
    let base = Config::default().with_lr(0.01).with_freeze_step(2);
    // Warm-up only: no error buffers (kind 0).
    for (blob, mut opt) in records(base, 1) {
        cuts_are_reported_as_truncated(&blob, &mut opt, 0);
    }
    // Compressed all-reduce ran: worker and server errors (kind 1).
    for (blob, mut opt) in records(base, 5) {
        cuts_are_reported_as_truncated(&blob, &mut opt, 1);
    }
    // The decayed-gradient variant: one seed error buffer (kind 2).
    let seed = base.with_variant(Variant::DecayedGradient {
        beta: 0.9,
        scale: ScaleKind::Rms,
    });
    for (blob, mut opt) in records(seed, 5) {
        cuts_are_reported_as_truncated(&blob, &mut opt, 2);
    }
    // The automatic freeze mid-warm-up: the record carries its snapshot of
    // v̂ (a length-announced float array before the tail).
    let auto = Config::default()
        .with_lr(0.01)
        .with_freeze(FreezePolicy::Auto(
            AutoFreeze::default()
                .with_window(1)
                .with_threshold(1e-9)
                .with_min_step(1)
                .with_max_step(100),
        ));
    for (blob, mut opt) in records(auto, 3) {
        assert_eq!(opt.frozen_at(), None);
        assert_eq!(opt.memory().freeze_snapshot, 4 * (D - 5));
        cuts_are_reported_as_truncated(&blob, &mut opt, 0);
    }
}

#[test]
fn state_error_messages_explain_themselves() {
    let (blob, mut opt) = records(Config::default().with_freeze_step(2), 5).remove(0);
    let cut = blob.len() - 10;
    assert_eq!(
        opt.import_state(&blob[..cut]).unwrap_err().to_string(),
        format!(
            "state record is truncated: {cut} bytes present, {} needed",
            blob.len()
        )
    );
    assert_eq!(
        opt.import_state(b"1B").unwrap_err().to_string(),
        "state record is truncated: 2 bytes present, 28 needed"
    );
    assert_eq!(
        opt.import_state(b"BSIS, a basis-core blob")
            .unwrap_err()
            .to_string(),
        "not a 1-bit Adam state record"
    );
    let mut flipped = blob.clone();
    flipped[30] ^= 1; // the step counter: same length, wrong CRC
    assert!(
        opt.import_state(&flipped)
            .unwrap_err()
            .to_string()
            .starts_with("state checksum mismatch")
    );
}

/// A state with no per-rank part (full precision, or 1-bit still in its
/// warm-up) unbinds and continues on three ranks exactly as the 2-rank
/// run it came from would (the moments are the same on every rank); once
/// compression has run, unbinding is refused and the state unchanged.
#[test]
fn unbind_moves_a_warm_up_state_to_another_group_size_and_refuses_error_feedback() {
    let config = Config::default().with_freeze(FreezePolicy::Fixed(4));
    let groups = [GroupSpec::one_bit(D - 5), GroupSpec::full_precision(5)];
    let grad = |s: usize| -> Vec<f32> {
        (0..D)
            .map(|i| ((i * 7 + s * 3) % 11) as f32 * 0.1 - 0.5)
            .collect()
    };
    // Two warm-up steps on two ranks, then one more on 2 and on 3 ranks.
    let run = |ranks: usize, record: Option<(Vec<u8>, Vec<f32>)>| {
        LocalComm::run(ranks, |mut comm| {
            let mut opt = OneBitAdam::with_groups(&groups, config).unwrap();
            let mut params = vec![0.5f32; D];
            let steps = match &record {
                Some((blob, p)) => {
                    opt.import_state(blob).unwrap();
                    opt.unbind().unwrap();
                    params.clone_from(p);
                    2..3
                }
                None => 0..3,
            };
            for s in steps {
                opt.step_with_grad(&mut comm, &mut params, &grad(s))
                    .unwrap();
            }
            params
        })
        .into_iter()
        .map(|r| r.unwrap())
        .collect::<Vec<_>>()
    };
    let at_two: Vec<(Vec<u8>, Vec<f32>)> = LocalComm::run(2, |mut comm| {
        let mut opt = OneBitAdam::with_groups(&groups, config).unwrap();
        let mut params = vec![0.5f32; D];
        for s in 0..2 {
            opt.step_with_grad(&mut comm, &mut params, &grad(s))
                .unwrap();
        }
        (opt.export_state(), params)
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect();
    // Without unbinding, 3 ranks refuse the 2-rank state.
    let refused = LocalComm::run(3, |mut comm| {
        let mut opt = OneBitAdam::with_groups(&groups, config).unwrap();
        opt.import_state(&at_two[0].0).unwrap();
        let mut params = at_two[0].1.clone();
        opt.step_with_grad(&mut comm, &mut params, &grad(2))
            .is_err()
    });
    assert!(refused.into_iter().all(|r| r.unwrap()));
    let whole = run(2, None);
    let moved = run(3, Some(at_two[0].clone()));
    for p in &moved {
        assert_eq!(p, &whole[0]);
    }
    // After compression (step 5 and on) the error buffers are per rank.
    let (blob, mut opt) = records(config, 6).swap_remove(0);
    let before = opt.export_state();
    assert_eq!(blob, before);
    assert!(opt.unbind().is_err());
    assert_eq!(opt.export_state(), before);
}
