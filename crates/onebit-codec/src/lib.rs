//! onebit-codec (under construction).
#![no_std]
#![forbid(unsafe_code)]
