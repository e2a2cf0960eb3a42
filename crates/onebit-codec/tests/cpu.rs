//! The crate's `no_std` CPU detection (`cpuid` + `xgetbv`) agrees with std's
//! `is_x86_feature_detected!` on this machine, feature by feature.

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[test]
fn no_std_detection_agrees_with_std() {
    use onebit_codec::cpu;
    assert_eq!(cpu::has_avx(), std::is_x86_feature_detected!("avx"));
    assert_eq!(cpu::has_avx2(), std::is_x86_feature_detected!("avx2"));
    // std reports FMA independently of AVX state; ours requires usable AVX.
    assert_eq!(
        cpu::has_fma(),
        std::is_x86_feature_detected!("fma") && std::is_x86_feature_detected!("avx")
    );
    assert_eq!(cpu::has_avx512f(), std::is_x86_feature_detected!("avx512f"));
}
