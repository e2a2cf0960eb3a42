//! An injected rank exit for the fault checks (`cargo xtask mpi`): the
//! hidden environment variable `BASIS_FAULT_EXIT=R:N` (or `all:N`) makes
//! rank `R` (or every rank) leave at the start of global step `N`
//! (0-based, counted over epochs) with `std::process::exit(3)` — a process
//! dying mid-training, as a killed MPI rank does. Tests use the same hook
//! without exiting the process (`exit: false` returns an error instead).

/// Environment variable read by [`Fault::from_env`].
pub(crate) const ENV: &str = "BASIS_FAULT_EXIT";

/// Where a rank leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fault {
    /// The rank that leaves (`None`: every rank).
    pub(crate) rank: Option<usize>,
    /// The global step it leaves at.
    pub(crate) step: u64,
    /// Exit the process (else the rank returns an error).
    pub(crate) exit: bool,
}

impl Fault {
    /// The fault [`ENV`] asks for, if any.
    ///
    /// Fails on a value that is not `R:N` or `all:N`.
    pub(crate) fn from_env() -> Result<Option<Self>, String> {
        match std::env::var(ENV) {
            Err(_) => Ok(None),
            Ok(v) => Self::parse(&v).map(Some),
        }
    }

    fn parse(v: &str) -> Result<Self, String> {
        let bad = || format!("{ENV}={v}: expected RANK:STEP or all:STEP");
        let (r, s) = v.split_once(':').ok_or_else(bad)?;
        Ok(Self {
            rank: match r {
                "all" => None,
                r => Some(r.parse().map_err(|_| bad())?),
            },
            step: s.parse().map_err(|_| bad())?,
            exit: true,
        })
    }

    /// Leave here if this is the fault's rank and step.
    pub(crate) fn check(&self, rank: usize, step: u64) -> Result<(), String> {
        if self.step != step || self.rank.is_some_and(|r| r != rank) {
            return Ok(());
        }
        let what = format!("rank {rank}: {ENV}: leaving at step {step}");
        if self.exit {
            eprintln!("{what}");
            std::process::exit(3);
        }
        Err(what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_hits_only_its_rank_and_step() {
        let f = Fault::parse("1:7").unwrap();
        assert_eq!((f.rank, f.step), (Some(1), 7));
        assert_eq!(Fault::parse("all:0").unwrap().rank, None);
        for bad in ["", "1", "x:1", "1:-2", "1:2:3"] {
            assert!(Fault::parse(bad).is_err(), "{bad}");
        }
        let f = Fault { exit: false, ..f };
        assert!(f.check(1, 6).is_ok() && f.check(0, 7).is_ok());
        assert!(f.check(1, 7).unwrap_err().contains("rank 1"));
    }
}
