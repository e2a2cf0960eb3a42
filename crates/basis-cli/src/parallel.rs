//! Data-parallel training over several ranks (`--workers P`).

use crate::data::Dataset;
use crate::train::{Run, RunResult};

/// Train with `run.model.workers` ranks.
pub(crate) fn train(_ds: &Dataset, run: &Run<'_>) -> Result<RunResult, String> {
    Err(format!("--workers {} is not available in this build", run.model.workers))
}
