//! In-process ranks: `LocalComm` (under construction).
