//! Allocating a filter's blocks, and which pages the kernel is asked to back them with.

use crate::block::{Block, BLOCK_BYTES};
use crate::filter::AllocError;
use alloc::vec::Vec;

/// Bit arrays at least this large get transparent huge pages by default (Linux, `std`).
/// With 4 KiB pages a second-level TLB of 2048 entries reaches 8 MiB, so in an array twice that
/// most lookups pay a page walk on top of their cache miss; 2 MiB pages remove most of it. Below
/// this the advice buys little, and the array is touched whole at creation either way, so the
/// advice never costs memory.
pub const HUGE_PAGES_FROM_BYTES: u64 = 16 << 20;

/// Which pages to ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pages {
    /// No advice: whatever the kernel gives by default (4 KiB pages under THP `madvise`).
    Ordinary,
    /// Advise huge pages whatever the size.
    Huge,
    /// Advise huge pages from [`HUGE_PAGES_FROM_BYTES`] on: the default.
    BySize,
}

impl Pages {
    /// Whether an array of `bytes` should be advised to use huge pages.
    pub(crate) fn advise_huge(self, bytes: u64) -> bool {
        match self {
            Pages::Ordinary => false,
            Pages::Huge => true,
            Pages::BySize => bytes >= HUGE_PAGES_FROM_BYTES,
        }
    }
}

/// `count` empty blocks on `pages`, or an error when the memory cannot be had. The advice is
/// given before the first write, since the kernel picks the page size when a page is first
/// touched; elsewhere than Linux with `std` it is skipped.
pub(crate) fn try_blocks(count: u64, pages: Pages) -> Result<Vec<Block>, AllocError> {
    let bytes = count.saturating_mul(BLOCK_BYTES as u64);
    let error = AllocError { bytes };
    let count = usize::try_from(count).map_err(|_| error)?;
    let mut blocks: Vec<Block> = Vec::new();
    blocks.try_reserve_exact(count).map_err(|_| error)?;
    let advise = pages.advise_huge(bytes);
    #[cfg(all(feature = "std", target_os = "linux"))]
    if advise {
        crate::memory::advise_huge_pages(blocks.as_ptr().cast(), count * BLOCK_BYTES);
    }
    #[cfg(not(all(feature = "std", target_os = "linux")))]
    let _ = advise;
    blocks.resize_with(count, Block::default);
    Ok(blocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_advises_huge_pages_only_for_large_arrays() {
        assert!(!Pages::BySize.advise_huge(HUGE_PAGES_FROM_BYTES - 1));
        assert!(Pages::BySize.advise_huge(HUGE_PAGES_FROM_BYTES));
        assert!(Pages::Huge.advise_huge(64));
        assert!(!Pages::Ordinary.advise_huge(u64::MAX));
    }

    #[test]
    fn blocks_start_empty_on_any_pages() {
        for pages in [Pages::Ordinary, Pages::Huge, Pages::BySize] {
            let blocks = try_blocks(3, pages).unwrap();
            assert_eq!(blocks.len(), 3);
            assert!(blocks.iter().all(|b| b.count_ones() == 0));
        }
    }
}
