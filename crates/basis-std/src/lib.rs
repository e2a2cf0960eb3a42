//! basis-std (under construction).
