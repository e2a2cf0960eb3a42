//! basis-core (under construction).
#![no_std]
#![forbid(unsafe_code)]
