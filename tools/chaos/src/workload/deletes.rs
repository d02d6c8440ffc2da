//! The delete streams: keys written to be deleted, deleted two seconds later or as soon as their
//! write was acknowledged, read back, and a share of them written again; and the delete burst
//! a fault step asks for.
//!
//! The deletes right after a write are the hard case of a delete's promise (DESIGN.md invariant
//! 12): the delete goes through another origin than the write, so it is ordered against a write
//! stamped by another process's clock, a few milliseconds before its own reading, well inside
//! the clocks' margin; and it is read back at once through a third origin (and the edge), so a
//! delete that removed nothing is seen to have removed nothing.

use super::streams::paced;
use super::Workload;
use crate::history::{Target, Why};
use crate::keys::KeyId;
use futures::StreamExt;
use rand::Rng;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Workload {
    /// The delete streams, `rate` deletes a second in all: a share (`delete_after_write_share`)
    /// of keys deleted as soon as their write is acknowledged (see
    /// [`delete_after_write`](Self::delete_after_write)); the others written once a second in a
    /// batch, enough for a second of their deletes, each deleted two seconds after its
    /// acknowledgement (see [`delete_and_readd`](Self::delete_and_readd)).
    pub(super) fn delete_streams(self: &Arc<Self>, streams: &mut tokio::task::JoinSet<()>, rate: f64) {
        let prompt = rate * self.settings.delete_after_write_share.clamp(0.0, 1.0);
        let later = rate - prompt;
        if prompt > 0.0 {
            let w = self.clone();
            streams.spawn(paced(
                self.clone(),
                move |_| prompt,
                move || w.spawn(Target::Origin(0), Workload::delete_after_write),
            ));
        }
        if later <= 0.0 {
            return;
        }
        let w = self.clone();
        streams.spawn(paced(
            self.clone(),
            move |_| 1.0,
            move || {
                let n = later.ceil() as usize;
                w.spawn(Target::Origin(0), move |w| w.write_deletables(n));
            },
        ));
        let w = self.clone();
        streams.spawn(paced(
            self.clone(),
            move |_| later,
            move || {
                let now = w.rec.now();
                let due = w.with(|s| match s.to_delete.front() {
                    Some((_, at)) if now.saturating_sub(*at) >= 2_000_000 => s.to_delete.pop_front().map(|(k, _)| k),
                    _ => None,
                });
                if let Some(key) = due {
                    w.spawn(Target::Origin(0), move |w| w.delete_and_readd(key));
                }
            },
        ));
    }

    /// Writes a key of its own through a random origin; as soon as that is acknowledged, deletes
    /// it through another; as soon as the delete is acknowledged, reads it through a third
    /// origin and through the edge, which must both answer "not seen". A share of these keys
    /// (`readd_share`) is then written again at once through a random origin and read back
    /// through another: a write sent after the delete's acknowledgement must not be hidden by it.
    async fn delete_after_write(self: Arc<Self>) {
        let key = KeyId::deletable(self.next_deletable.fetch_add(1, Ordering::Relaxed));
        let writer = self.random_origin();
        if !self.write(writer, key, Why::DeleteAfterWrite).await {
            return;
        }
        let deleter = self.other_origin(writer);
        if !self.delete(deleter, key, Why::DeleteAfterWrite).await {
            return;
        }
        if self.endpoints.edge.is_some() {
            self.spawn(Target::Edge, move |w| async move { w.lookup(Target::Edge, key, Why::DeleteAfterWrite).await });
        }
        self.lookup(self.third_origin(writer, deleter), key, Why::DeleteAfterWrite).await;
        let share = self.settings.readd_share;
        if self.with(|s| s.rng.random_bool(share)) && !self.stopped.load(Ordering::SeqCst) {
            self.write_and_read_back(key, Why::Readd, Why::Readd).await;
        }
    }

    /// Deletes `key`; once that is acknowledged, a share of the deleted keys (`readd_share`) is
    /// written again a second later through a random origin, read back through another at once
    /// and at the edge S later, and joins the keys random lookups ask for: a key deleted and
    /// written again must be "seen" like any other.
    async fn delete_and_readd(self: Arc<Self>, key: KeyId) {
        if !self.delete(self.random_origin(), key, Why::Delete).await {
            return;
        }
        let share = self.settings.readd_share;
        if !self.with(|s| s.rng.random_bool(share)) {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        if !self.stopped.load(Ordering::SeqCst) {
            self.write_and_read_back(key, Why::Readd, Why::Readd).await;
        }
    }

    async fn write_deletables(self: Arc<Self>, n: usize) {
        let first = self.next_deletable.fetch_add(n as u32, Ordering::Relaxed);
        let keys: Vec<KeyId> = (first..first + n as u32).map(KeyId::deletable).collect();
        if self.write_batch(self.random_origin(), keys.clone(), Why::Delete).await {
            let at = self.rec.now();
            self.with(|s| s.to_delete.extend(keys.into_iter().map(|k| (k, at))));
        }
    }

    /// Writes at least `n` keys of their own (in batches of 500), then deletes them all at once,
    /// 16 at a time through random origins: past the stale-delete share, the origins must
    /// rebuild on their own. Returns the deletes acknowledged.
    pub async fn delete_burst(&self, n: usize, limit: Duration) -> usize {
        let started = Instant::now();
        let mut written = Vec::new();
        while written.len() < n && started.elapsed() < limit {
            let first = self.next_deletable.fetch_add(500, Ordering::Relaxed);
            let keys: Vec<KeyId> = (first..first + 500).map(KeyId::deletable).collect();
            if self.write_batch(self.random_origin(), keys.clone(), Why::Delete).await {
                written.extend(keys);
            } else {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        let deletes: Vec<_> =
            written.into_iter().map(|key| self.delete(self.random_origin(), key, Why::Delete)).collect();
        futures::stream::iter(deletes).buffer_unordered(16).filter(|acked| std::future::ready(*acked)).count().await
    }
}
