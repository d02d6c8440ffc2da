//! The filter core's only `unsafe`: two hints to the memory system that change no values.
//!
//! - [`prefetch`] asks the CPU to start loading a block's cache line, so a batch of lookups
//!   overlaps its memory misses instead of paying them one after another.
//! - [`advise_huge_pages`] asks Linux to back a large bit array with 2 MiB pages, so lookups
//!   in a filter far bigger than the TLB's reach stop paying a page walk on top of each miss.
//!
//! Both are hints: they read and write no memory, and the filter answers the same without them.

/// Starts loading the cache line at `ptr` into all cache levels. A no-op off x86_64.
#[inline(always)]
pub(crate) fn prefetch<T>(item: &T) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    // SAFETY: PREFETCHT0 never faults and does not access memory architecturally; the pointer
    // comes from a live reference anyway. SSE is part of the x86_64 baseline.
    unsafe {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((item as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = item;
}

/// Advises the kernel to use transparent huge pages for the 2 MiB-aligned part of `region`.
/// Call before the memory is first touched. Returns whether the advice was taken.
#[cfg(all(feature = "std", target_os = "linux"))]
pub(crate) fn advise_huge_pages(region: *const u8, len: usize) -> bool {
    const HUGE: usize = 2 * 1024 * 1024;
    let start = (region as usize).next_multiple_of(HUGE);
    let end = (region as usize + len) / HUGE * HUGE;
    if end <= start {
        return false;
    }
    #[allow(unsafe_code)]
    // SAFETY: madvise(MADV_HUGEPAGE) on whole pages inside one allocation we own changes only
    // how the kernel backs them, never their contents or validity.
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    rc == 0
}
