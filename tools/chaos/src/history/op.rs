//! One operation of a chaos run's workload: what was called, on whom, why, and what came back.

use super::Micros;
use crate::keys::KeyId;
use serde::{Deserialize, Serialize};

/// Who an operation was sent to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// Origin number n (its own process and port).
    Origin(u8),
    /// The edge (`wrangler dev`).
    Edge,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Origin(i) => write!(f, "origin-{i}"),
            Target::Edge => f.write_str("edge"),
        }
    }
}

/// The API call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// `PUT /v1/filters/{f}/keys/{key}`: 201 = acknowledged.
    Write,
    /// `POST /v1/filters/{f}/keys`: 200 = all acknowledged.
    WriteBatch,
    /// `GET /v1/filters/{f}/keys/{key}`.
    Lookup,
    /// `POST /v1/filters/{f}/lookups`.
    LookupBatch,
    /// `DELETE /v1/filters/{f}/keys/{key}`.
    Delete,
}

impl OpKind {
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Write => "write",
            OpKind::WriteBatch => "write_batch",
            OpKind::Lookup => "lookup",
            OpKind::LookupBatch => "lookup_batch",
            OpKind::Delete => "delete",
        }
    }

    /// Whether the call stores keys.
    pub fn is_write(self) -> bool {
        matches!(self, OpKind::Write | OpKind::WriteBatch)
    }

    /// Whether the call asks about keys.
    pub fn is_lookup(self) -> bool {
        matches!(self, OpKind::Lookup | OpKind::LookupBatch)
    }
}

/// Why the workload sent an operation (for the report; the checker treats all alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// Keys written at the start, past the filter's small capacity (the automatic resize).
    Preload,
    /// The steady stream of writes.
    Write,
    /// A read through another origin right after a write was acknowledged (the race of a
    /// write via B and an immediate read via A).
    ReadAfterWrite,
    /// A read through the edge of a key acknowledged S seconds (plus a little) before.
    EdgeAfterFreshness,
    /// A random earlier-acknowledged or never-written key.
    Random,
    /// Extra random reads of a lookup burst.
    Burst,
    /// Keys written only to be deleted, and their deletes.
    Delete,
    /// A deleted key written again, and its reads.
    Readd,
    /// A key deleted as soon as its write was acknowledged, through another origin than the
    /// writer: the write, the delete, and the reads sent as soon as the delete was acknowledged.
    DeleteAfterWrite,
}

impl Why {
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Why::Preload => "preload",
            Why::Write => "write",
            Why::ReadAfterWrite => "read_after_write",
            Why::EdgeAfterFreshness => "edge_after_freshness",
            Why::Random => "random",
            Why::Burst => "burst",
            Why::Delete => "delete",
            Why::Readd => "readd",
            Why::DeleteAfterWrite => "delete_after_write",
        }
    }
}

/// Who answered a lookup: the API's one list of answerers.
pub use bloomgate_client::api::AnsweredBy;

/// One key's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// `"seen"`.
    pub seen: bool,
    /// Who answered (`x-bloomgate-answered-by`, or `answered_by` in a batch); None when the
    /// answer did not say.
    pub by: Option<AnsweredBy>,
}

impl Answer {
    /// Who answered, as the API writes it, or `unknown`.
    pub fn by_name(&self) -> &'static str {
        self.by.map_or("unknown", AnsweredBy::as_str)
    }
}

/// How an operation ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A write or delete succeeded (201 single write, 200 batch write or delete).
    Acked,
    /// A lookup answered, one answer per key in request order (200 `seen:true` or 404
    /// `seen:false` for a single key; 200 with results for a batch).
    Answers(Vec<Answer>),
    /// Any other HTTP answer.
    Status {
        /// HTTP status.
        code: u16,
        /// Whether it carried `Retry-After`.
        retry_after: bool,
        /// The start of the body, for the report.
        detail: String,
    },
    /// No HTTP answer at all (connection refused or reset, client timeout).
    Transport {
        /// The client's error.
        error: String,
    },
}

/// One operation of the workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// The call.
    pub kind: OpKind,
    /// Why it was sent.
    pub why: Why,
    /// Where it was sent.
    pub target: Target,
    /// Just before the request was sent.
    pub start: Micros,
    /// Just after the whole answer arrived.
    pub end: Micros,
    /// The keys, in request order.
    pub keys: Vec<KeyId>,
    /// How it ended.
    pub outcome: Outcome,
}
