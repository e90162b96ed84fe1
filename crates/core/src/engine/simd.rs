//! Which compiled copy of a vectorised loop this CPU runs: engines compile their hot loops
//! three times (portable, AVX2 and AVX-512, each with FMA available) and pick one copy at run
//! time, so one build runs at each CPU's width. The copies do the same operations in the same
//! order (no copy fuses a multiply and an add the others round twice), so they give the same
//! bits.

use std::sync::OnceLock;

/// The widest copy the CPU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SimdLevel {
    /// The baseline of the target (SSE2 on x86-64).
    Portable,
    /// AVX2 and FMA.
    Avx2,
    /// AVX-512F and FMA.
    Avx512,
}

/// This CPU's [`SimdLevel`], detected once.
pub(crate) fn simd_level() -> SimdLevel {
    static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let fma = std::arch::is_x86_feature_detected!("fma");
            if fma && std::arch::is_x86_feature_detected!("avx512f") {
                return SimdLevel::Avx512;
            }
            if fma && std::arch::is_x86_feature_detected!("avx2") {
                return SimdLevel::Avx2;
            }
        }
        SimdLevel::Portable
    })
}

/// Asks the cache for the line that holds the start of `at` (a hint; nothing where the target
/// has none).
#[inline(always)]
pub(crate) fn prefetch<T: ?Sized>(at: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: SSE is part of every x86_64 target, and a prefetch is a hint that reads
        // nothing into the program and cannot fault, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((at as *const T).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}
