//! Options that would do nothing are errors: a key that the chosen mode
//! never reads (`rule=hypergradient` with `rowscaled` was once accepted and
//! silently ignored) is refused with the reason, so a typo in an experiment
//! cannot pass for a result.

use crate::spec::{Mode, OptSpec, SpecError};

/// Keys read only by the learned-scalar modes (`shared`, `signed`, `own`).
const SCALAR_KEYS: &[&str] = &["rule", "scalar-lr"];
/// Keys read only by `rowscaled`.
const ROW_SCALED_KEYS: &[&str] = &["accumulate", "beta", "profile", "lead", "eps"];

/// Refuses the keys of `given` that `spec` (fully parsed) never reads.
pub(crate) fn inert_keys(spec: &OptSpec, given: &[&str]) -> Result<(), SpecError> {
    let inert = |k: &str, why: &str| SpecError(format!("`{k}` does nothing here: {why}"));
    for &k in given {
        if spec.mode == Mode::RowScaled && SCALAR_KEYS.contains(&k) {
            return Err(inert(k, "mode=rowscaled has no learned row scalar"));
        }
        if spec.mode != Mode::RowScaled && ROW_SCALED_KEYS.contains(&k) {
            return Err(inert(k, "only mode=rowscaled reads it"));
        }
        let frozen = spec.mode != Mode::RowScaled && spec.scalar_lr == Some(0.0);
        if frozen && (k == "rule" || k == "storage") {
            return Err(inert(k, "scalar-lr=0 freezes (and stores no) row scalars"));
        }
        if k == "beta" && spec.accumulate == Some(crate::spec::AccumulateKind::Sum) {
            return Err(inert(k, "accumulate=sum has no β"));
        }
    }
    if spec.mode == Mode::RowScaled && spec.profile == Some(0.0) && spec.lead.is_some() {
        return Err(inert("lead", "profile=0 has no profile groups"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::spec::OptSpec;

    #[test]
    fn keys_the_mode_ignores_are_refused_and_read_keys_pass() {
        for bad in [
            "basis:rule=hypergradient",
            "basis:mode=rowscaled,scalar-lr=0.1",
            "basis:scalar-lr=0.1,mode=rowscaled",
            "basis:mode=own,accumulate=ema",
            "basis:mode=shared,profile=0.5",
            "basis:lead=1,mode=own",
            "countsketch:eps=inside",
            "basis:mode=own,scalar-lr=0,rule=hypergradient",
            "basis:mode=own,scalar-lr=0,storage=u8",
            "basis:profile=0,lead=1",
            "basis:accumulate=sum,beta=0.9",
        ] {
            let e = bad.parse::<OptSpec>().unwrap_err();
            assert!(e.0.contains("does nothing"), "{bad}: {e}");
        }
        for good in [
            "basis:mode=own,rule=hypergradient,scalar-lr=1000",
            "basis:accumulate=ema,beta=0.9",
            "basis:accumulate=decay,beta=0.999",
            "basis:beta=0.9,accumulate=decay",
            "basis:profile=0.5,lead=1,eps=inside",
            "basis:mode=own,scalar-lr=0",
            "countsketch:rule=hypergradient",
        ] {
            assert!(good.parse::<OptSpec>().is_ok(), "{good}");
        }
    }
}
