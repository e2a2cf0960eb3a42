//! The library's defaults are the measured configuration its documentation
//! names (docs/BASIS.md, `BasisConfig`'s "Defaults" section): every field of
//! `BasisConfig::default()` and of each per-mode builder, the bucket count
//! rule, and `Basis::for_rows`.

use basis_core::{
    Accumulate, Basis, BasisConfig, Bucketer, ConfigError, ConfigOption, Direction,
    LEARNED_SCALAR_ROWS_PER_BUCKET, NonFinitePolicy, ROW_SCALED_ROWS_PER_BUCKET, RowCounter,
    RowIndex, RowScaleConfig, ScalarLrSchedule, ScalarRule, ScalarStorage, TablePrecision,
};

/// Every field of `BasisConfig::default()`, as its docs name it.
#[test]
fn default_is_the_documented_measured_configuration() {
    let c = BasisConfig::default();
    assert_eq!(c.dim, 16);
    assert_eq!(c.lr, 0.003);
    assert_eq!((c.beta1, c.beta2, c.eps), (0.9, 0.999, 1e-8));
    assert_eq!(c.weight_decay, 0.0);
    assert!(c.bias_correction);
    assert_eq!(c.direction, Direction::RowScaled);
    assert_eq!(c.scalar_lr, 0.01);
    assert_eq!(c.scalar_clip, (0.1, 10.0));
    assert_eq!(c.scalar_rule, ScalarRule::Normalized);
    assert_eq!(c.scalar_lr_schedule, ScalarLrSchedule::Constant);
    assert_eq!(c.scalar_storage, ScalarStorage::LogU8);
    assert_eq!(c.table_precision, TablePrecision::F32);
    assert_eq!(c.bf16_eps_floor, 1e-6);
    assert_eq!(c.nonfinite, NonFinitePolicy::Skip);
    assert_eq!(c.grad_clip, None);
    // The EMA (β 0.99) annealed past 100 updates of a row (since 2026-12-06),
    // its count in a 3-bit log-scale counter over the exact one's range
    // (since session 16; `Log3` before, which stops at 4 096 updates).
    assert_eq!(
        c.row_scale.accumulate,
        Accumulate::EmaAnnealed {
            beta: 0.99,
            power: 1.0
        }
    );
    assert_eq!(Accumulate::DEFAULT, c.row_scale.accumulate);
    assert_eq!(
        (
            Accumulate::DEFAULT_BETA,
            Accumulate::DEFAULT_EMA_ANNEAL_POWER
        ),
        (0.99, 1.0)
    );
    assert_eq!(c.row_scale.counter, RowCounter::Log3Wide);
    assert_eq!(RowCounter::default(), RowCounter::Log3Wide);
    assert_eq!(c.row_scale.log2_range, (-48.0, 24.0));
    assert_eq!(c.row_scale.profile.power, 1.0);
    assert_eq!(c.row_scale.profile.lead, 0);
    assert!(!c.row_scale.profile.eps_inside);
    assert_eq!(c.row_index, RowIndex::Sparse);
    assert_eq!(c.seed, 0x5EED_BA51_5000_0001);
    assert_eq!(c.validate(), Ok(()));
    assert_eq!(c.rows_per_bucket(), 1000);
    assert_eq!(ROW_SCALED_ROWS_PER_BUCKET, 1000);
}

/// `row_scaled(d)` is `Default` at dimension `d`; the learned-scalar
/// builders differ from it exactly in direction and scalar storage.
#[test]
fn builders_start_from_their_modes_default() {
    let r = BasisConfig::row_scaled(17).build().unwrap();
    assert_eq!(r, BasisConfig::default().with_dim(17));
    assert_eq!(
        r,
        BasisConfig::defaults_for(Direction::RowScaled).with_dim(17)
    );
    for (built, direction) in [
        (BasisConfig::shared(17).build(), Direction::Shared),
        (BasisConfig::signed(17).build(), Direction::Signed),
        (
            BasisConfig::own_gradient(17).build(),
            Direction::OwnGradient,
        ),
    ] {
        let c = built.unwrap();
        assert_eq!(c, BasisConfig::defaults_for(direction).with_dim(17));
        let expected = BasisConfig::default()
            .with_dim(17)
            .with_direction(direction)
            .with_scalar_storage(ScalarStorage::F32);
        assert_eq!(c, expected);
        assert_eq!(c.rows_per_bucket(), LEARNED_SCALAR_ROWS_PER_BUCKET);
    }
}

/// The FM's `lead` is one builder call; a power-0 profile has no group to set.
#[test]
fn lead_is_set_from_the_model() {
    let fm = BasisConfig::row_scaled(17).lead(1).build().unwrap();
    assert_eq!(fm.row_scale.profile.lead, 1);
    assert_eq!(
        fm,
        BasisConfig::default().with_dim(17).with_row_scale(
            BasisConfig::default()
                .row_scale
                .with_profile(BasisConfig::default().row_scale.profile.with_lead(1))
        )
    );
    assert_eq!(
        BasisConfig::row_scaled(4).lead(5).build(),
        Err(ConfigError::Profile)
    );
    let off = BasisConfig::default().row_scale.profile.with_power(0.0);
    assert!(matches!(
        BasisConfig::row_scaled(4).profile(off).lead(1).build(),
        Err(ConfigError::Ignored {
            option: ConfigOption::ProfileLead,
            ..
        })
    ));
}

/// Frozen learned scalars store nothing: either default storage is accepted
/// as "unset", any other is refused.
#[test]
fn frozen_scalars_accept_either_default_storage() {
    for storage in [ScalarStorage::F32, ScalarStorage::LogU8] {
        let c = BasisConfig::shared(4)
            .scalar_lr(0.0)
            .scalar_storage(storage)
            .build();
        assert!(c.is_ok(), "{storage:?}");
    }
    assert!(matches!(
        BasisConfig::shared(4)
            .scalar_lr(0.0)
            .scalar_storage(ScalarStorage::Bf16)
            .build(),
        Err(ConfigError::Ignored {
            option: ConfigOption::ScalarStorage,
            ..
        })
    ));
}

/// `B = ⌈N / rows_per_bucket⌉`, at least 1, saturating at `u32::MAX`,
/// checked against the plain formula.
#[test]
fn buckets_for_matches_the_formula() {
    let rs = BasisConfig::default();
    let own = BasisConfig::own_gradient(4).build().unwrap();
    for n in [
        0u64,
        1,
        999,
        1000,
        1001,
        2625,
        100_000,
        10_000_000,
        123_456_789,
    ] {
        let want = |per: u64| ((n as f64 / per as f64).ceil() as u32).max(1);
        assert_eq!(rs.buckets_for(n), want(1000), "{n}");
        assert_eq!(own.buckets_for(n), want(100), "{n}");
    }
    assert_eq!(rs.buckets_for(u64::MAX), u32::MAX);
}

/// `Basis::for_rows` builds a one-choice bucketer of `buckets_for` buckets,
/// and its default state is under 1.5 bytes per row over a dense index
/// (1-byte `G_i`, a 3-bit row counter, the buckets).
#[test]
fn for_rows_sizes_the_bucketer_and_stays_near_a_byte_per_row() {
    let rows = 20_000u64;
    let dim = 17;
    let config = BasisConfig::row_scaled(dim)
        .lead(1)
        .row_index(RowIndex::Dense { rows })
        .build()
        .unwrap();
    let opt = Basis::for_rows(config, rows).unwrap();
    assert_eq!(opt.bucketer().buckets(), 20);
    let mem = opt.memory();
    // 1-byte G_i per row + 3 bits of counter (21 to an 8-byte word) + a
    // B × d f32 profile + step counts.
    assert_eq!(mem.row_counters, 20_000usize.div_ceil(21) * 8);
    let per_row = mem.total_bytes as f64 / rows as f64;
    assert!((1.38..1.5).contains(&per_row), "{per_row} B/row");
    // Same seed, same buckets: the bucketer is a function of the config.
    let again = Basis::for_rows(config, rows).unwrap();
    for id in 0..100u64 {
        assert_eq!(opt.bucketer().bucket(id), again.bucketer().bucket(id));
    }
}

/// `one_pass()` is `Default` with AdaGrad's sum in place of the annealed EMA
/// and η 0.01, as its docs name it; it keeps no row counter, so its state is
/// the default's less the counter's 3 bits per row.
#[test]
fn one_pass_is_the_default_with_the_sum() {
    let c = BasisConfig::one_pass();
    assert_eq!(c.row_scale.accumulate, Accumulate::Sum);
    assert_eq!(c.row_scale, RowScaleConfig::ONE_PASS);
    assert_eq!(c.lr, 0.01);
    let expected = BasisConfig::default()
        .with_lr(0.01)
        .with_row_scale(RowScaleConfig::DEFAULT.with_accumulate(Accumulate::Sum));
    assert_eq!(c, expected);
    assert_eq!(c.validate(), Ok(()));

    let rows = 20_000u64;
    let index = RowIndex::Dense { rows };
    let one_pass = Basis::for_rows(c.with_dim(17).with_row_index(index), rows).unwrap();
    let default = BasisConfig::default().with_dim(17).with_row_index(index);
    let default = Basis::for_rows(default, rows).unwrap();
    let (a, b) = (one_pass.memory(), default.memory());
    assert_eq!(a.row_counters, 0);
    assert_eq!(a.total_bytes + b.row_counters, b.total_bytes);
    let per_row = a.total_bytes as f64 / rows as f64;
    assert!((1.0..1.15).contains(&per_row), "{per_row} B/row");
}

/// The epoch rule: `RowScaled` over one pass (or none) is `one_pass()`,
/// over two or more passes `Default`; the learned-scalar modes keep their
/// mode's defaults whatever the epochs.
#[test]
fn the_epoch_rule_picks_one_pass_only_for_row_scaled_single_passes() {
    for epochs in [0, 1] {
        let c = BasisConfig::defaults_for_epochs(Direction::RowScaled, epochs);
        assert_eq!(c, BasisConfig::one_pass(), "{epochs} epochs");
    }
    for epochs in [2, 3, u32::MAX] {
        let c = BasisConfig::defaults_for_epochs(Direction::RowScaled, epochs);
        assert_eq!(c, BasisConfig::default(), "{epochs} epochs");
    }
    for d in [Direction::Shared, Direction::Signed, Direction::OwnGradient] {
        for epochs in [1, 3] {
            let c = BasisConfig::defaults_for_epochs(d, epochs);
            assert_eq!(c, BasisConfig::defaults_for(d), "{d:?}, {epochs} epochs");
        }
    }
}
