//! Crash-safe checkpoint files (under construction).
