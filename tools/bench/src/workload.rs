//! The seeded workload: present keys (hex SHA-256 of a seeded counter), and per-connection
//! streams of lookups where a fixed share are misses (fresh keys, never repeated in a run) and
//! the rest are hits drawn Zipf-like from the present set.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};
use std::fmt::Write;
use std::sync::Arc;

/// Hex SHA-256 of `seed`, a domain label and two counters: reproducible, independent keys.
fn sha256_hex(seed: u64, domain: &str, a: u64, b: u64) -> String {
    let mut h = Sha256::new();
    h.update(seed.to_le_bytes());
    h.update(domain.as_bytes());
    h.update([0]);
    h.update(a.to_le_bytes());
    h.update(b.to_le_bytes());
    let digest = h.finalize();
    let mut out = String::with_capacity(64);
    for byte in digest {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// The `n` present keys of a seed: key `i` is SHA-256(seed, "present", i).
pub fn present_keys(seed: u64, n: usize) -> Vec<String> {
    (0..n as u64).map(|i| sha256_hex(seed, "present", i, 0)).collect()
}

/// Key `n` written by connection `conn` in the run labelled `run`: SHA-256(seed, "written"
/// and the label, conn, n). Never a present key or a miss (other domains); the same label gives
/// the same keys, so the two sides of an A/B write the same keys into their own filters.
pub fn written_key(seed: u64, run: &str, conn: u64, n: u64) -> String {
    sha256_hex(seed, &format!("written {run}"), conn, n)
}

/// Zipf(s) over ranks `0..n` by inverse CDF (a table of `n` f64: 8 MB at 10⁶ keys, built
/// once per run). Rank `r` maps to present key `r`; the keys are hashes, so hot keys land in
/// random segments and blocks.
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// The distribution over `n ≥ 1` ranks with exponent `s` (0 = uniform).
    pub fn new(n: usize, s: f64) -> Zipf {
        let n = n.max(1);
        let mut cdf = Vec::with_capacity(n);
        let mut total = 0.0;
        for rank in 1..=n {
            total += 1.0 / (rank as f64).powf(s);
            cdf.push(total);
        }
        for c in &mut cdf {
            *c /= total;
        }
        Zipf { cdf }
    }

    /// A rank in `0..n`.
    pub fn sample(&self, rng: &mut impl Rng) -> usize {
        let u: f64 = rng.random();
        self.cdf.partition_point(|c| *c < u).min(self.cdf.len() - 1)
    }
}

/// What every connection of a run shares.
pub struct Workload {
    /// Seed of the present keys and of every stream.
    pub seed: u64,
    /// Present keys (already stored through the origin).
    pub present: Arc<Vec<String>>,
    /// Share of lookups for keys never stored, in [0, 1].
    pub miss_share: f64,
    /// Hit popularity.
    pub zipf: Arc<Zipf>,
}

impl Workload {
    /// A workload over `present` with Zipf exponent `zipf_s`.
    pub fn new(seed: u64, present: Arc<Vec<String>>, miss_share: f64, zipf_s: f64) -> Workload {
        let zipf = Arc::new(Zipf::new(present.len(), zipf_s));
        Workload { seed, present, miss_share, zipf }
    }

    /// The stream of connection `conn` in the run labelled `run`: each (run, conn) pair gets
    /// its own RNG and its own miss keys, so misses never repeat within or across runs.
    pub fn stream(&self, run: &str, conn: usize) -> KeyStream {
        let run_id = sha256_hex(self.seed, run, 0, 0);
        let run_hash = u64::from_str_radix(&run_id[..16], 16).unwrap_or(0);
        KeyStream {
            rng: StdRng::seed_from_u64(run_hash ^ (conn as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            seed: self.seed,
            run_hash,
            conn: conn as u64,
            next_miss: 0,
            present: self.present.clone(),
            zipf: self.zipf.clone(),
            miss_share: if self.present.is_empty() { 1.0 } else { self.miss_share },
        }
    }
}

/// One connection's lookups.
pub struct KeyStream {
    rng: StdRng,
    seed: u64,
    run_hash: u64,
    conn: u64,
    next_miss: u64,
    present: Arc<Vec<String>>,
    zipf: Arc<Zipf>,
    miss_share: f64,
}

impl KeyStream {
    /// The next key and whether it is present.
    pub fn next_key(&mut self) -> (String, bool) {
        if self.rng.random::<f64>() < self.miss_share {
            self.next_miss += 1;
            // The run's hash and the connection in the counters: distinct from every present
            // key (a different domain) and from every other miss.
            let key = sha256_hex(self.seed ^ self.run_hash, "miss", self.conn, self.next_miss);
            (key, false)
        } else {
            let rank = self.zipf.sample(&mut self.rng);
            (self.present[rank].clone(), true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn keys_are_sha256_hex_and_reproducible() {
        let a = present_keys(7, 3);
        assert_eq!(a, present_keys(7, 3));
        assert_ne!(a, present_keys(8, 3));
        assert!(a.iter().all(|k| k.len() == 64 && k.bytes().all(|b| b.is_ascii_hexdigit())));
    }

    #[test]
    fn misses_never_repeat_and_the_share_holds() {
        let present = Arc::new(present_keys(1, 1000));
        let w = Workload::new(1, present.clone(), 0.8, 0.99);
        let known: HashSet<&String> = present.iter().collect();
        let mut misses = HashSet::new();
        let mut n_miss = 0;
        for (run, conn) in [("a", 0), ("a", 1), ("b", 0)] {
            let mut s = w.stream(run, conn);
            for _ in 0..5000 {
                let (key, hit) = s.next_key();
                assert_eq!(hit, known.contains(&key));
                if !hit {
                    n_miss += 1;
                    assert!(misses.insert(key), "a miss key repeated");
                }
            }
        }
        let share = n_miss as f64 / 15000.0;
        assert!((share - 0.8).abs() < 0.02, "miss share {share}");
    }

    #[test]
    fn written_keys_are_fresh() {
        let present: HashSet<String> = present_keys(1, 1000).into_iter().collect();
        let a: HashSet<String> = (0..2).flat_map(|c| (0..500).map(move |n| written_key(1, "r1", c, n))).collect();
        assert_eq!(a.len(), 1000);
        assert!(a.iter().all(|k| !present.contains(k)));
        assert_eq!(written_key(1, "r1", 0, 3), written_key(1, "r1", 0, 3));
        assert!(!a.contains(&written_key(1, "r2", 0, 3)));
    }

    #[test]
    fn zipf_favours_low_ranks() {
        let z = Zipf::new(1000, 1.0);
        let mut rng = StdRng::seed_from_u64(3);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[z.sample(&mut rng)] += 1;
        }
        // P(rank 0) = 1 / H(1000) ≈ 0.134.
        let p0 = counts[0] as f64 / 100_000.0;
        assert!((p0 - 0.134).abs() < 0.01, "p0 {p0}");
        assert!(counts[0] > counts[9] && counts[9] > counts[999]);
    }
}
