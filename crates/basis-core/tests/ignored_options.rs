//! An option the configuration never reads is a typed error naming it
//! ([`ConfigError::Ignored`]), and the per-mode builders offer exactly the
//! options their mode reads: everything a builder can set passes `validate`.

use basis_core::{
    Accumulate, BasisConfig, ConfigError, ConfigOption, Direction, NonFinitePolicy, Profile,
    RowIndex, ScalarLrSchedule, ScalarRule, ScalarStorage, TablePrecision,
};

const LEARNED: [Direction; 3] = [Direction::Shared, Direction::Signed, Direction::OwnGradient];

/// An edit of a configuration and the option it sets.
type Case = (fn(&mut BasisConfig), ConfigOption);

fn with(direction: Direction, edit: impl FnOnce(&mut BasisConfig)) -> BasisConfig {
    let mut c = BasisConfig::default().with_direction(direction);
    edit(&mut c);
    c
}

fn ignored(c: &BasisConfig) -> Option<ConfigOption> {
    match c.validate() {
        Err(ConfigError::Ignored { option, direction }) => {
            assert_eq!(direction, c.direction);
            Some(option)
        }
        Ok(()) => None,
        Err(other) => panic!("unexpected {other:?}"),
    }
}

#[test]
fn row_scaled_refuses_the_scalar_and_moment_options() {
    use ConfigOption as O;
    let rs = Direction::RowScaled;
    let cases: [Case; 7] = [
        (|c| c.scalar_lr = 0.5, O::ScalarLr),
        (|c| c.scalar_clip = (0.5, 2.0), O::ScalarClip),
        (|c| c.scalar_rule = ScalarRule::Hypergradient, O::ScalarRule),
        (
            |c| c.scalar_lr_schedule = ScalarLrSchedule::InverseFrequency { power: 0.5 },
            O::ScalarLrSchedule,
        ),
        (|c| c.beta1 = 0.5, O::Beta1),
        (|c| c.beta2 = 0.9, O::Beta2),
        (|c| c.bias_correction = false, O::BiasCorrection),
    ];
    for (edit, option) in cases {
        let c = with(rs, edit);
        assert_eq!(ignored(&c), Some(option), "{c:?}");
        // The same option is read by a learned-scalar mode.
        assert_eq!(ignored(&with(Direction::Shared, edit)), None);
    }
    // `scalar_lr = 0` says what RowScaled does: accepted.
    assert_eq!(ignored(&with(rs, |c| c.scalar_lr = 0.0)), None);
    // A profile of power 0 has no `lead` group; power 0 alone is fine.
    let flat = |lead| Profile::default().with_power(0.0).with_lead(lead);
    assert_eq!(
        ignored(&with(rs, |c| c.row_scale.profile = flat(1))),
        Some(O::ProfileLead)
    );
    assert_eq!(ignored(&with(rs, |c| c.row_scale.profile = flat(0))), None);
}

#[test]
fn learned_modes_refuse_the_row_scale_options() {
    use ConfigOption as O;
    let cases: [Case; 3] = [
        (
            |c| c.row_scale.accumulate = Accumulate::Ema { beta: 0.9 },
            O::Accumulate,
        ),
        (|c| c.row_scale.log2_range = (-20.0, 20.0), O::Log2Range),
        (|c| c.row_scale.profile.lead = 1, O::Profile),
    ];
    for direction in LEARNED {
        for (edit, option) in cases {
            assert_eq!(ignored(&with(direction, edit)), Some(option));
            assert_eq!(ignored(&with(Direction::RowScaled, edit)), None);
        }
    }
}

#[test]
fn a_frozen_scalar_refuses_its_options() {
    use ConfigOption as O;
    let cases: [Case; 4] = [
        (|c| c.scalar_clip = (0.5, 2.0), O::ScalarClip),
        (|c| c.scalar_rule = ScalarRule::Hypergradient, O::ScalarRule),
        (
            |c| c.scalar_lr_schedule = ScalarLrSchedule::InverseFrequency { power: 1.0 },
            O::ScalarLrSchedule,
        ),
        (
            // Neither default (1 byte, or f32 for the learned modes).
            |c| c.scalar_storage = ScalarStorage::Bf16,
            O::ScalarStorage,
        ),
    ];
    for direction in LEARNED {
        assert_eq!(ignored(&with(direction, |c| c.scalar_lr = 0.0)), None);
        for (edit, option) in cases {
            let frozen = with(direction, |c| {
                c.scalar_lr = 0.0;
                edit(c);
            });
            assert_eq!(ignored(&frozen), Some(option));
            assert_eq!(ignored(&with(direction, edit)), None);
        }
    }
    // OwnGradient keeps a bucket M only as a learning scalar's reference.
    let own = |lr| {
        with(Direction::OwnGradient, |c| {
            c.scalar_lr = lr;
            c.beta1 = 0.5;
        })
    };
    assert_eq!(ignored(&own(0.0)), Some(O::Beta1));
    assert_eq!(ignored(&own(0.1)), None);
    let shared = with(Direction::Shared, |c| {
        c.scalar_lr = 0.0;
        c.beta1 = 0.5;
    });
    assert_eq!(ignored(&shared), None);
}

#[test]
fn the_error_names_the_option_and_range_errors_come_first() {
    let c = with(Direction::RowScaled, |c| {
        c.scalar_rule = ScalarRule::Hypergradient
    });
    let msg = c.validate().unwrap_err().to_string();
    assert!(
        msg.contains("`scalar_rule`") && msg.contains("RowScaled"),
        "{msg}"
    );
    let c = with(Direction::Signed, |c| c.row_scale.profile.lead = 2);
    let msg = c.validate().unwrap_err().to_string();
    assert!(msg.contains("`row_scale.profile`"), "{msg}");
    // An out-of-range value is reported as such even where it is ignored.
    let c = with(Direction::RowScaled, |c| c.scalar_clip = (2.0, 3.0));
    assert_eq!(c.validate(), Err(ConfigError::ScalarClip));
    for o in [ConfigOption::ScalarLr, ConfigOption::ProfileLead] {
        assert!(!o.name().is_empty());
    }
}

/// Every option each builder offers, set away from its default: the
/// builders and `validate` agree (a builder never yields an `Ignored`).
#[test]
fn everything_a_builder_sets_is_read() {
    let profile = Profile::default()
        .with_power(0.5)
        .with_lead(1)
        .with_eps_inside(true);
    let row_scaled = BasisConfig::row_scaled(4)
        .lr(0.2)
        .eps(1e-6)
        .weight_decay(0.01)
        .scalar_storage(ScalarStorage::Bf16)
        .table_precision(TablePrecision::Bf16)
        .bf16_eps_floor(1e-5)
        .nonfinite(NonFinitePolicy::Error)
        .grad_clip(Some(3.0))
        .row_index(RowIndex::Dense { rows: 10 })
        .seed(7)
        .accumulate(Accumulate::Ema { beta: 0.9 })
        .log2_range(-30.0, 10.0)
        .profile(profile)
        .build()
        .unwrap();
    assert_eq!(row_scaled.row_scale.profile, profile);
    assert_eq!(row_scaled.direction, Direction::RowScaled);
    for (direction, builder) in [
        (Direction::Shared, BasisConfig::shared(4)),
        (Direction::Signed, BasisConfig::signed(4)),
        (Direction::OwnGradient, BasisConfig::own_gradient(4)),
    ] {
        let c = builder
            .lr(0.2)
            .betas(0.5, 0.9)
            .bias_correction(false)
            .eps(1e-6)
            .weight_decay(0.01)
            .scalar_storage(ScalarStorage::LogU8)
            .scalar_lr(0.3)
            .scalar_clip(0.5, 4.0)
            .scalar_rule(ScalarRule::Hypergradient)
            .scalar_lr_schedule(ScalarLrSchedule::InverseFrequency { power: 0.5 })
            .grad_clip(Some(3.0))
            .build()
            .unwrap();
        assert_eq!(
            (c.direction, c.beta1, c.scalar_clip),
            (direction, 0.5, (0.5, 4.0))
        );
        // What a type cannot rule out, `build` refuses: a frozen scalar's rule.
        let frozen = BasisConfig::shared(4)
            .scalar_lr(0.0)
            .scalar_rule(ScalarRule::Hypergradient)
            .build();
        assert_eq!(
            frozen,
            Err(ConfigError::Ignored {
                option: ConfigOption::ScalarRule,
                direction: Direction::Shared
            })
        );
    }
}

/// `bf16_eps_floor` only raises ε of bf16 tables: set with f32 tables it is
/// refused in every direction, and read (not refused) with bf16 tables.
#[test]
fn bf16_eps_floor_needs_bf16_tables() {
    for direction in LEARNED.into_iter().chain([Direction::RowScaled]) {
        let c = with(direction, |c| c.bf16_eps_floor = 1e-5);
        assert_eq!(c.table_precision, TablePrecision::F32);
        assert_eq!(ignored(&c), Some(ConfigOption::Bf16EpsFloor));
        let msg = c.validate().unwrap_err().to_string();
        assert!(msg.contains("bf16_eps_floor"), "{msg}");
        let c = c.with_table_precision(TablePrecision::Bf16);
        assert_eq!(ignored(&c), None);
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.effective_eps(), 1e-5);
    }
    // The default floor with f32 tables is the unset value, not an error.
    assert_eq!(BasisConfig::default().validate(), Ok(()));
}
