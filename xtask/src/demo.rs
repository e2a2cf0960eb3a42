//! `cargo xtask demo`: the README's main job — `basis compare` on the embedded
//! synthetic data set (release build), extra arguments passed on.

use crate::util::{self, cargo};

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    util::run(
        cargo()
            .args(["run", "--release", "-p", "basisopt-cli", "--", "compare"])
            .args(args),
    )
}
