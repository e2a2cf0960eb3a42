//! The cross-target digests (`tests/portable/digest.rs`) on the host: d-choice
//! saved state, BASIS blobs and the other optimizers' blobs after fixed
//! workloads must keep their pinned CRCs. `cargo xtask nostd` runs the same code built for wasm32 (32-bit
//! pointers, no C library) under Node.js and requires the same two digests,
//! so a saved layout, a placement or a BASIS result that depends on the
//! target fails there.

extern crate alloc;

#[path = "portable/digest.rs"]
mod portable;

#[test]
fn digests_of_d_choice_state_and_optimizer_blobs_are_pinned() {
    let [bucketers, basis, others] = portable::digests();
    assert_eq!(
        bucketers,
        portable::BUCKETER_DIGEST,
        "the saved d-choice layout or placement changed (if on purpose, re-pin and say why)"
    );
    assert_eq!(
        basis,
        portable::BASIS_DIGEST_HOST,
        "a BASIS result or the blob layout changed (if on purpose, re-pin and say why)"
    );
    assert_eq!(
        others,
        portable::OTHERS_DIGEST,
        "another optimizer's result or blob layout changed (if on purpose, re-pin and say why)"
    );
}
