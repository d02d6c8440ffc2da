//! What local copies and the edge's feed read: whole segments, every segment's version, and
//! the insert journal (a Redis stream) after a position, with what tells whether the position
//! is still covered.

use super::keys::{clock_steps_key, journal_key, parse_stream_id, parse_version, segment_keys};
use super::RedisFilterStore;
use crate::store::{
    CopySource, EdgeFeedStore, FilterUnavailable, Generation, JournalPage, JournalRead, SealedRead, SegmentBits,
    StoreResult,
};
use async_trait::async_trait;
use bloomgate_filter::journal::decode_hashes;
use bloomgate_filter::sealed_chunk::SteppedBack;
use bloomgate_filter::JournalPosition;
use std::time::Duration;

#[async_trait]
impl CopySource for RedisFilterStore {
    async fn segment(&self, filter: &str, meta: Generation, index: u32) -> StoreResult<SegmentBits> {
        let (bits, ver) = segment_keys(filter, meta.generation, index);
        let script = &self.scripts.read_segment;
        let (version, payload): (Option<String>, Option<Vec<u8>>) = self
            .run(self.write_timeout, Some(meta.incarnation), {
                let mut invocation = script.key(&bits);
                invocation.key(&ver);
                invocation
            })
            .await?;
        match (parse_version(version), payload) {
            (Some(version), Some(payload)) if payload.len() as u64 == meta.params.segment_bytes() => {
                Ok(SegmentBits { version, payload })
            }
            _ => Err(FilterUnavailable::SegmentMissing(index)),
        }
    }

    async fn journal_head(&self, filter: &str, meta: Generation) -> StoreResult<JournalPosition> {
        let filter = filter.to_owned();
        self.head_of(&filter, meta).await.map(|(head, _)| head)
    }

    async fn catch_up_journal(&self, filter: &str, meta: Generation, page: JournalPage) -> StoreResult<JournalRead> {
        // The copy's position was read from this journal (never re-created, in this same
        // incarnation), so "nothing after my position" means caught up: the script asks that
        // first, guarded like every read of bits (a plain read could not refuse another
        // process or history), then reads what is newer.
        self.read_journal_within(self.timeout, filter, meta, page, true).await
    }
}

#[async_trait]
impl EdgeFeedStore for RedisFilterStore {
    async fn segment_versions(&self, filter: &str, meta: Generation) -> StoreResult<Vec<u64>> {
        let ver = |index| segment_keys(filter, meta.generation, index).1;
        // One guarded read each (on a cluster each version is in its own slot), all at once.
        let reads = (0..meta.params.segment_count).map(|index| {
            self.run(self.write_timeout, Some(meta.incarnation), self.scripts.read_version.key(ver(index)))
        });
        let versions: Vec<Option<String>> = futures::future::try_join_all(reads).await?;
        versions
            .into_iter()
            .enumerate()
            .map(|(i, v)| parse_version(v).ok_or(FilterUnavailable::SegmentMissing(i as u32)))
            .collect()
    }

    async fn read_journal(&self, filter: &str, meta: Generation, page: JournalPage) -> StoreResult<JournalRead> {
        self.read_journal_within(self.write_timeout, filter, meta, page, false).await
    }

    async fn read_sealed_chunk(
        &self,
        filter: &str,
        meta: Generation,
        start_ms: u64,
        end_ms: u64,
        with_entries: bool,
    ) -> StoreResult<SealedRead> {
        let (journal, steps) = (journal_key(filter, meta.generation), clock_steps_key(filter, meta.generation));
        let script = &self.scripts.read_sealed_chunk;
        let reply: Vec<redis::Value> = self
            .run(self.write_timeout, Some(meta.incarnation), {
                let mut invocation = script.key(&journal);
                invocation.key(&steps).arg(start_ms).arg(end_ms).arg(u8::from(with_entries));
                invocation
            })
            .await?;
        parse_sealed_read(&reply)
    }
}

/// Interprets `scripts/read_sealed_chunk.lua`'s reply.
fn parse_sealed_read(reply: &[redis::Value]) -> StoreResult<SealedRead> {
    let bad = |what: &str| FilterUnavailable::Error(format!("unexpected sealed chunk reply: {what}"));
    let [redis::Value::Int(1), time, last, max_deleted, from, to, entries, redis::Value::Int(whole)] = reply else {
        return match reply {
            [redis::Value::Int(0) | redis::Value::Int(2)] => Err(FilterUnavailable::SegmentMissing(0)),
            _ => Err(bad("shape")),
        };
    };
    let id_ms = |value: &redis::Value, what: &str| -> StoreResult<u64> {
        let id: String = redis::from_redis_value_ref(value).map_err(|_| bad(what))?;
        parse_stream_id(&id).map(|(ms, _)| ms).ok_or_else(|| bad(what))
    };
    let number = |value: &redis::Value| -> Option<u64> {
        let text: String = redis::from_redis_value_ref(value).ok()?;
        text.parse().ok()
    };
    let stepped_back = match (number(from), number(to)) {
        (Some(from_ms), Some(to_ms)) => Some(SteppedBack { from_ms, to_ms }),
        _ => None,
    };
    let entries: Vec<StreamEntry> = redis::from_redis_value_ref(entries).map_err(|_| bad("entries"))?;
    let mut hashes = Vec::new();
    for (_, fields) in entries {
        for (field, value) in fields {
            if field == "h" {
                hashes.extend(decode_hashes(&value).ok_or_else(|| bad("entry length"))?);
            }
        }
    }
    Ok(SealedRead {
        redis_now_ms: time_us(time).ok_or_else(|| bad("time"))? / 1000,
        last_id_ms: id_ms(last, "last id")?,
        max_deleted_ms: id_ms(max_deleted, "max deleted id")?,
        whole_from_start: *whole > 0,
        stepped_back,
        hashes,
    })
}

/// A stream entry as XRANGE returns it: its id and its field/value pairs.
type StreamEntry = (String, Vec<(String, Vec<u8>)>);

/// Interprets `scripts/read_journal.lua`'s reply for a caller at `after` (see `JournalRead`).
fn parse_journal_read(reply: &[redis::Value], after: JournalPosition, max: u32) -> StoreResult<JournalRead> {
    let bad = |what: &str| FilterUnavailable::Error(format!("unexpected journal reply: {what}"));
    let [redis::Value::Int(1), max_deleted, added, _last, entries, time] = reply else {
        return match reply {
            [redis::Value::Int(0)] => Err(FilterUnavailable::SegmentMissing(0)),
            [redis::Value::Int(2), time] => match JournalRead::caught_up(after) {
                JournalRead::Entries { to, entries, head, .. } => {
                    Ok(JournalRead::Entries { to, entries, head, store_time_us: time_us(time) })
                }
                reset => Ok(reset),
            },
            _ => Err(bad("shape")),
        };
    };
    let max_deleted: String = redis::from_redis_value_ref(max_deleted).map_err(|_| bad("max-deleted-entry-id"))?;
    let added: u64 = redis::from_redis_value_ref(added).map_err(|_| bad("entries-added"))?;
    let deleted = parse_stream_id(&max_deleted).ok_or_else(|| bad("max-deleted-entry-id"))?;
    // An entry after the caller's position was trimmed: what it holds cannot be brought up to
    // date entry by entry.
    if deleted > (after.id_ms, after.id_seq) || after.added > added {
        return Ok(JournalRead::Reset);
    }
    let entries: Vec<StreamEntry> = redis::from_redis_value_ref(entries).map_err(|_| bad("entries"))?;
    let count = entries.len() as u64;
    // Without a COUNT cut, the entries after the position are exactly the ones added since: a
    // position that is not this journal's would not add up.
    if (count < u64::from(max) && after.added + count != added) || after.added + count > added {
        return Ok(JournalRead::Reset);
    }
    let mut to = after;
    let mut out = Vec::with_capacity(entries.len());
    for (id, fields) in entries {
        let (id_ms, id_seq) = parse_stream_id(&id).ok_or_else(|| bad("entry id"))?;
        to = JournalPosition { added: to.added + 1, id_ms, id_seq };
        let mut hashes = Vec::new();
        for (field, value) in fields {
            if field == "h" {
                hashes.extend(decode_hashes(&value).ok_or_else(|| bad("entry length"))?);
            }
        }
        out.push(hashes);
    }
    Ok(JournalRead::Entries { to, entries: out, head: added, store_time_us: time_us(time) })
}

/// Redis's `TIME` reply ({seconds, microseconds}) in µs since the Unix epoch.
fn time_us(time: &redis::Value) -> Option<u64> {
    let (secs, micros): (u64, u64) = redis::from_redis_value_ref(time).ok()?;
    Some(secs * 1_000_000 + micros)
}

impl RedisFilterStore {
    /// The journal entries `page` asks for, under `timeout`; `own_position`: the page's
    /// position was read from this journal (see `scripts/read_journal.lua`).
    pub(super) async fn read_journal_within(
        &self,
        timeout: Duration,
        filter: &str,
        meta: Generation,
        page: JournalPage,
        own_position: bool,
    ) -> StoreResult<JournalRead> {
        let JournalPage { after, max_entries } = page;
        let key = journal_key(filter, meta.generation);
        let script = &self.scripts.read_journal;
        let after_id = after.stream_id();
        let reply: Vec<redis::Value> = self
            .run(timeout, Some(meta.incarnation), {
                let mut invocation = script.key(&key);
                invocation.arg(after_id).arg(max_entries).arg(u8::from(own_position));
                invocation
            })
            .await?;
        parse_journal_read(&reply, after, max_entries)
    }

    /// The journal's head and length.
    pub(super) async fn head_of(&self, filter: &str, meta: Generation) -> StoreResult<(JournalPosition, u64)> {
        let key = journal_key(filter, meta.generation);
        let script = &self.scripts.journal_head;
        let reply: Vec<redis::Value> = self.run(self.write_timeout, Some(meta.incarnation), script.key(&key)).await?;
        let bad = || FilterUnavailable::Error("unexpected XINFO STREAM reply".into());
        match reply.as_slice() {
            [redis::Value::Int(1), added, last, length] => {
                let added: u64 = redis::from_redis_value_ref(added).map_err(|_| bad())?;
                let last: String = redis::from_redis_value_ref(last).map_err(|_| bad())?;
                let length: u64 = redis::from_redis_value_ref(length).map_err(|_| bad())?;
                let (id_ms, id_seq) = parse_stream_id(&last).ok_or_else(bad)?;
                Ok((JournalPosition { added, id_ms, id_seq }, length))
            }
            _ => Err(FilterUnavailable::SegmentMissing(0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloomgate_filter::journal::HASH_BYTES;

    #[test]
    fn journal_replies_cover_the_position_or_say_reset() {
        use redis::Value::{Array, BulkString, Int};
        let s = |t: &str| BulkString(t.as_bytes().to_vec());
        let entry = |id: &str, hashes: &[u8]| Array(vec![s(id), Array(vec![s("h"), BulkString(hashes.to_vec())])]);
        let after = JournalPosition { added: 5, id_ms: 100, id_seq: 0 };
        let h = [7u8; HASH_BYTES];
        let time = || Array(vec![s("1765000000"), s("250")]);
        let reply =
            [Int(1), s("90-0"), Int(7), s("102-0"), Array(vec![entry("101-0", &h), entry("102-0", &[])]), time()];
        let JournalRead::Entries { to, entries, head, store_time_us } = parse_journal_read(&reply, after, 100).unwrap()
        else {
            panic!()
        };
        assert_eq!(store_time_us, Some(1_765_000_000_000_250), "Redis's clock as it read");
        assert_eq!(to, JournalPosition { added: 7, id_ms: 102, id_seq: 0 });
        assert_eq!(entries.iter().map(Vec::len).collect::<Vec<_>>(), [1, 0]);
        assert_eq!(head, 7, "read to the head");
        // A COUNT cut: short of the head, and it says so.
        let cut = [Int(1), s("90-0"), Int(9), s("104-0"), Array(vec![entry("101-0", &h), entry("102-0", &[])]), time()];
        let JournalRead::Entries { to, head, .. } = parse_journal_read(&cut, after, 2).unwrap() else { panic!() };
        assert_eq!((to.added, head), (7, 9));
        // Trimmed past the position: the entries in between are gone.
        let trimmed = [Int(1), s("100-1"), Int(7), s("102-0"), Array(vec![]), time()];
        assert_eq!(parse_journal_read(&trimmed, after, 100).unwrap(), JournalRead::Reset);
        // A position that does not add up with this journal (7 added, 5 + 1 seen).
        let short = [Int(1), s("0-0"), Int(7), s("102-0"), Array(vec![entry("102-0", &[])]), time()];
        assert_eq!(parse_journal_read(&short, after, 100).unwrap(), JournalRead::Reset);
        assert!(matches!(parse_journal_read(&[Int(0)], after, 100), Err(FilterUnavailable::SegmentMissing(0))));
        let caught_up = JournalRead::Entries {
            to: after,
            entries: Vec::new(),
            head: 5,
            store_time_us: Some(1_765_000_000_000_250),
        };
        assert_eq!(
            parse_journal_read(&[Int(2), time()], after, 100).unwrap(),
            caught_up,
            "nothing after the caller's position"
        );
    }
}
