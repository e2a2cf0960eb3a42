//! `--plot out.png`: loss and AUC curves per optimizer (plotters, bitmap backend).

use crate::compare::Entry;
use std::path::Path;

/// Draw the curves of `entries` into `path`.
pub(crate) fn draw(_path: &Path, _entries: &[Entry]) -> Result<(), String> {
    Err("plotting not built yet".into())
}
