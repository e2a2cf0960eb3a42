//! The value checks the optimizer configurations share (`validate` of
//! AdaGrad, Adam, FTRL, SGD): each returns its [`ConfigError`] when the value
//! is out of range, so a `validate` reads as one line per field, in the order
//! its docs promise for "the first error found".

use crate::error::ConfigError;

/// A row dimension of at least 1.
pub(crate) fn dim(dim: usize) -> Result<(), ConfigError> {
    if dim == 0 {
        return Err(ConfigError::ZeroDim);
    }
    Ok(())
}

/// `x` finite and > 0, else `err`.
pub(crate) fn positive(x: f32, err: ConfigError) -> Result<(), ConfigError> {
    if x.is_finite() && x > 0.0 {
        Ok(())
    } else {
        Err(err)
    }
}

/// `x` finite and ≥ 0, else `err`.
pub(crate) fn non_negative(x: f32, err: ConfigError) -> Result<(), ConfigError> {
    if x.is_finite() && x >= 0.0 {
        Ok(())
    } else {
        Err(err)
    }
}

/// Both moment decays in `[0, 1)`.
pub(crate) fn betas(beta1: f32, beta2: f32) -> Result<(), ConfigError> {
    if (0.0..1.0).contains(&beta1) && (0.0..1.0).contains(&beta2) {
        Ok(())
    } else {
        Err(ConfigError::Beta)
    }
}

/// No clip, or a finite clip > 0.
pub(crate) fn grad_clip(clip: Option<f32>) -> Result<(), ConfigError> {
    clip.map_or(Ok(()), |c| positive(c, ConfigError::GradClip))
}
