//! The isolate's report on itself (`GET /_bloomgate/isolate`): wasm memory, what is held
//! against the budget, counts and CPU; the log line when wasm memory passes a threshold, and
//! the one when a Cache API entry of a new kind is refused.
//!
//! wasm linear memory only grows (pages of 64 KiB) and a Worker isolate is stopped past 128 MB
//! in all, so its size is the figure to watch: a line is logged (a warning, whatever
//! `LOG_REQUESTS` says) the first time it passes each multiple of [`GROWTH_LOG_STEP`], which
//! can happen only a few times in an isolate's life. Refused entries are counted each time
//! and logged once per kind ([`RefusalLog`]): whoever plants them decides how many there are.

use crate::cache_entry::EntryRefused;
use crate::store::Holdings;
use bloomgate_client::api::HeldBytes;
use core::mem::{discriminant, Discriminant};
use subtle::ConstantTimeEq;

/// wasm memory is logged each time it passes a multiple of this.
pub const GROWTH_LOG_STEP: usize = 8 * 1024 * 1024;

/// Bytes of the module's linear memory now (0 off wasm32, where there is none to report).
pub fn wasm_bytes() -> usize {
    #[cfg(target_arch = "wasm32")]
    {
        core::arch::wasm32::memory_size::<0>() * 65_536
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        0
    }
}

/// Which thresholds have been logged.
#[derive(Debug)]
pub struct GrowthLog {
    next_at: usize,
}

impl Default for GrowthLog {
    fn default() -> Self {
        GrowthLog { next_at: GROWTH_LOG_STEP }
    }
}

impl GrowthLog {
    /// The threshold `wasm_bytes` has passed since the last call, if any (log it).
    pub fn passed(&mut self, wasm_bytes: usize) -> Option<usize> {
        if wasm_bytes < self.next_at {
            return None;
        }
        let passed = wasm_bytes / GROWTH_LOG_STEP * GROWTH_LOG_STEP;
        self.next_at = passed + GROWTH_LOG_STEP;
        Some(passed)
    }
}

/// Which kinds of refused Cache API entries have been logged ([`EntryRefused`]'s variants,
/// whatever their fields): only the first of each kind is, the others are counted.
#[derive(Debug, Default)]
pub struct RefusalLog {
    logged: Vec<Discriminant<EntryRefused>>,
}

impl RefusalLog {
    /// Whether `why` is the isolate's first refusal of its kind (log it).
    pub fn first(&mut self, why: &EntryRefused) -> bool {
        let kind = discriminant(why);
        let first = !self.logged.contains(&kind);
        if first {
            self.logged.push(kind);
        }
        first
    }
}

/// What is held, as the report says it: the store's holdings, the manifests among them (the
/// bytes it reserves, over `manifests` kept).
pub fn held_bytes(h: &Holdings, manifests: usize) -> HeldBytes {
    let n = |v: usize| v as u64;
    HeldBytes {
        total: n(h.total_bytes()),
        segments: n(h.copy_bytes),
        segment_count: n(h.copies),
        spare_buffers: n(h.spare_bytes),
        spare_count: n(h.spares),
        journal_tails: n(h.tail_bytes),
        tail_hashes: n(h.tail_hashes),
        manifests: n(h.reserved_bytes),
        manifest_count: n(manifests),
    }
}

/// Whether `sent` is the edge secret, compared as the origin compares it: in time that does
/// not depend on where the two differ (`subtle` keeps the optimiser from turning the comparison
/// into one that stops at the first difference, which a hand-written fold does not guarantee).
/// A length that differs is refused at once, as there: the secret's length is not secret.
pub fn secret_matches(sent: &str, secret: &str) -> bool {
    bool::from(sent.as_bytes().ct_eq(secret.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    #[test]
    fn each_threshold_is_logged_once() {
        let mut log = GrowthLog::default();
        assert_eq!(log.passed(3 * MIB), None);
        assert_eq!(log.passed(8 * MIB), Some(8 * MIB));
        assert_eq!(log.passed(9 * MIB), None);
        assert_eq!(log.passed(27 * MIB), Some(24 * MIB), "a jump past several logs the highest");
        assert_eq!(log.passed(31 * MIB), None);
        assert_eq!(log.passed(32 * MIB), Some(32 * MIB));
    }

    #[test]
    fn each_kind_of_refused_entry_is_logged_once() {
        let mut log = RefusalLog::default();
        assert!(log.first(&EntryRefused::BadMac));
        assert!(!log.first(&EntryRefused::BadMac));
        assert!(log.first(&EntryRefused::UnknownFormat(2)));
        assert!(!log.first(&EntryRefused::UnknownFormat(3)), "one kind, whatever the version");
        assert!(log.first(&EntryRefused::NoEntryHeader));
    }

    #[test]
    fn held_bytes_add_up_and_secrets_compare_whole() {
        let h = Holdings {
            copy_bytes: 10,
            copies: 1,
            spare_bytes: 5,
            spares: 1,
            tail_bytes: 2,
            reserved_bytes: 3,
            ..Holdings::default()
        };
        let held = held_bytes(&h, 1);
        assert_eq!(held.total, 20);
        assert_eq!((held.segments, held.spare_buffers, held.journal_tails, held.manifests), (10, 5, 2, 3));
        assert!(secret_matches("s3cret", "s3cret"));
        assert!(!secret_matches("s3cre", "s3cret") && !secret_matches("s3creT", "s3cret") && !secret_matches("", "x"));
    }
}
