//! The keys a chaos run uses, named by (class, number) and spelled as 64 hex digits derived
//! from the run's seed: the checker reasons about small ids, the report shows the real keys.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Which set a key belongs to. The sets never overlap: a key's hex is a hash of its class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyClass {
    /// Written once by the workload, never deleted: every "seen" rule applies.
    Written,
    /// Never written by anyone: must never be answered "seen".
    Absent,
    /// Written, then deleted: only there to exercise deletes and the stale-delete rebuild,
    /// left out of the "seen" and durability checks.
    Deletable,
}

/// A key of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KeyId {
    /// Its set.
    pub class: KeyClass,
    /// Its number within the set.
    pub n: u32,
}

impl KeyId {
    /// Key `n` of the written set.
    pub fn written(n: u32) -> KeyId {
        KeyId { class: KeyClass::Written, n }
    }

    /// Key `n` of the never-written set.
    pub fn absent(n: u32) -> KeyId {
        KeyId { class: KeyClass::Absent, n }
    }

    /// Key `n` of the deleted set.
    pub fn deletable(n: u32) -> KeyId {
        KeyId { class: KeyClass::Deletable, n }
    }
}

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let class = match self.class {
            KeyClass::Written => "written",
            KeyClass::Absent => "absent",
            KeyClass::Deletable => "deletable",
        };
        write!(f, "{class}#{}", self.n)
    }
}

/// Spells key ids as SHA-256-shaped keys (the default `hex:64` format), from a seed.
#[derive(Clone, Copy, Debug)]
pub struct KeySpace {
    seed: u64,
}

impl KeySpace {
    /// The key space of one seed.
    pub fn new(seed: u64) -> KeySpace {
        KeySpace { seed }
    }

    /// The key's 32 bytes, as Cassandra stores them.
    pub fn bytes(&self, id: KeyId) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(b"bloomgate-chaos");
        h.update(self.seed.to_le_bytes());
        h.update([id.class as u8]);
        h.update(id.n.to_le_bytes());
        h.finalize().into()
    }

    /// The key as the API takes it: 64 lowercase hex digits.
    pub fn hex(&self, id: KeyId) -> String {
        self.bytes(id).iter().map(|b| format!("{b:02x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_64_hex_digits_reproducible_and_distinct_across_classes() {
        let space = KeySpace::new(7);
        let key = space.hex(KeyId::written(1));
        assert_eq!(key.len(), 64);
        assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(key, KeySpace::new(7).hex(KeyId::written(1)));
        assert_ne!(key, KeySpace::new(8).hex(KeyId::written(1)));
        assert_ne!(key, space.hex(KeyId::absent(1)));
        assert_ne!(key, space.hex(KeyId::deletable(1)));
    }
}
