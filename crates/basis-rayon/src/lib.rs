//! basis-rayon (under construction).
