//! The size limits a filter's params must meet before anything about them is stored: a create,
//! a rebuild and an automatic resize all check here, with the params they will really build.

use bloomgate_filter::Params;

/// Most segments a filter may have: each is two Redis keys, a script call when its generation
/// is created, and a version in every manifest an edge reads. Larger filters take larger
/// segments (`segment_bytes`).
pub const MAX_SEGMENTS: u32 = 1 << 18;

/// Why params are too large.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// More bytes of bits than `max_filter_bytes`.
    #[error("the filter would need {bytes} bytes of bits; at most {max} are allowed (max_filter_bytes)")]
    Bytes {
        /// Bytes the params need.
        bytes: u64,
        /// The limit.
        max: u64,
    },
    /// More segments than [`MAX_SEGMENTS`].
    #[error("the filter would have {count} segments; at most {max} are allowed: choose a larger segment_bytes")]
    Segments {
        /// Segments the params have.
        count: u32,
        /// The limit.
        max: u32,
    },
}

/// Refuses params over either limit.
pub fn check_size(params: &Params, max_bytes: u64) -> Result<(), SizeError> {
    let bytes = params.total_bytes();
    if bytes > max_bytes {
        return Err(SizeError::Bytes { bytes, max: max_bytes });
    }
    if params.segment_count > MAX_SEGMENTS {
        return Err(SizeError::Segments { count: params.segment_count, max: MAX_SEGMENTS });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloomgate_filter::SizingOptions;

    #[test]
    fn both_limits_are_checked_with_the_real_segment_size() {
        let at = |capacity: u64, segment_bytes: u64| {
            Params::for_capacity_with(capacity, 0.01, SizingOptions { seed: 1, segment_bytes }).unwrap()
        };
        assert!(check_size(&at(1_000_000, 65_536), 4 << 30).is_ok());
        assert!(matches!(check_size(&at(1_000_000, 65_536), 1 << 20), Err(SizeError::Bytes { .. })));
        // The same keys in 64-byte segments: small in bytes, far too many keys in Redis.
        assert!(matches!(check_size(&at(20_000_000, 64), 4 << 30), Err(SizeError::Segments { .. })));
    }
}
