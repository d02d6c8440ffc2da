//! Spare segment buffers, by size, for the next segment of that size.
//!
//! wasm memory never shrinks, and its allocator reuses a freed block only for what fits in it:
//! a segment buffer freed while small allocations (JSON, headers, journal chunks) come and go
//! is split among them, and the next segment grows memory instead. Keeping the buffers of
//! evicted or replaced copies here, and taking the next segment's buffer from here, makes a
//! generation switch (every segment replaced by one of the same size) reuse memory instead.
//! What the pool keeps counts against the isolate's budget like held copies do, and is given
//! back to the allocator first when room is needed.

use std::collections::HashMap;

/// Spare buffers, keyed by their exact capacity.
#[derive(Debug, Default)]
pub struct BufferPool {
    spare: HashMap<usize, Vec<Vec<u8>>>,
    bytes: usize,
    reused: u64,
    allocated: u64,
}

impl BufferPool {
    /// An empty buffer with room for exactly `len` bytes: a spare one of that size if any.
    pub fn take(&mut self, len: usize) -> Vec<u8> {
        if let Some(buffer) = self.spare.get_mut(&len).and_then(Vec::pop) {
            self.bytes -= len;
            self.reused += 1;
            return buffer;
        }
        self.allocated += 1;
        Vec::with_capacity(len)
    }

    /// Whether a spare buffer of exactly `len` bytes is kept.
    pub fn has(&self, len: usize) -> bool {
        self.spare.get(&len).is_some_and(|b| !b.is_empty())
    }

    /// Keeps `buffer` (emptied) for the next segment of its size.
    pub fn give(&mut self, mut buffer: Vec<u8>) {
        let len = buffer.capacity();
        if len == 0 {
            return;
        }
        buffer.clear();
        self.bytes += len;
        self.spare.entry(len).or_default().push(buffer);
    }

    /// Frees spare buffers until the pool keeps at most `max_bytes`, sizes other than
    /// `keep_len` first (the size about to be needed is the one worth keeping).
    pub fn shrink_to(&mut self, max_bytes: usize, keep_len: usize) {
        let mut sizes: Vec<usize> = self.spare.keys().copied().collect();
        // Other sizes first, then the kept one; larger sizes first among the others.
        sizes.sort_by_key(|len| (*len == keep_len, std::cmp::Reverse(*len)));
        for len in sizes {
            while self.bytes > max_bytes {
                match self.spare.get_mut(&len).and_then(Vec::pop) {
                    Some(buffer) => {
                        self.bytes -= buffer.capacity();
                        drop(buffer);
                    }
                    None => break,
                }
            }
        }
        self.spare.retain(|_, buffers| !buffers.is_empty());
    }

    /// Bytes kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Buffers kept.
    pub fn len(&self) -> usize {
        self.spare.values().map(Vec::len).sum()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Buffers handed out from the spares, and newly allocated, since the isolate started.
    pub fn reuse_counts(&self) -> (u64, u64) {
        (self.reused, self.allocated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_given_back_is_the_next_one_of_its_size() {
        let mut pool = BufferPool::default();
        let mut a = pool.take(1024);
        a.extend_from_slice(&[7; 1024]);
        let ptr = a.as_ptr();
        pool.give(a);
        assert_eq!((pool.bytes(), pool.len()), (1024, 1));
        assert!(pool.take(2048).capacity() >= 2048, "another size is allocated");
        let b = pool.take(1024);
        assert_eq!((b.as_ptr(), b.len(), b.capacity()), (ptr, 0, 1024), "reused, emptied");
        assert!(pool.is_empty());
        assert_eq!(pool.reuse_counts(), (1, 2));
    }

    #[test]
    fn shrinking_frees_other_sizes_first() {
        let mut pool = BufferPool::default();
        for len in [100, 100, 300, 50] {
            pool.give(Vec::with_capacity(len));
        }
        assert_eq!(pool.bytes(), 550);
        pool.shrink_to(250, 100);
        assert_eq!((pool.bytes(), pool.len()), (250, 3), "the 300 went");
        pool.shrink_to(100, 100);
        assert_eq!((pool.bytes(), pool.len()), (100, 1), "then the 50, then a 100");
        pool.shrink_to(0, 100);
        assert!(pool.is_empty());
    }
}
