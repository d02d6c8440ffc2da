//! What the edge's feed served: manifests, segments and journal chunks.

use super::{row, Row};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

label_enum!(
    /// What an edge fetched.
    EdgeKind {
        /// A manifest.
        Manifest => "manifest",
        /// A segment.
        Segment => "segment",
        /// A journal chunk.
        Journal => "journal",
        /// A page of a sealed journal chunk (the shared feed).
        SealedPage => "sealed_page",
        /// A segment at an epoch (the shared feed).
        EpochSegment => "epoch_segment",
        /// The filter's current document (the shared feed).
        FeedCurrent => "feed_current",
    }
);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EdgeLabels {
    kind: EdgeKind,
}

/// The edge feed's metrics.
pub struct EdgeFeedMetrics {
    served: Family<EdgeLabels, Counter>,
}

impl EdgeFeedMetrics {
    pub(super) fn new() -> EdgeFeedMetrics {
        let served = Family::default();
        for kind in EdgeKind::ALL {
            let _ = served.get_or_create(&EdgeLabels { kind: *kind });
        }
        EdgeFeedMetrics { served }
    }

    pub(super) fn rows(&self) -> Vec<Row> {
        vec![row("edge_requests", "Manifests, segments and journal chunks served to edges.", &self.served)]
    }

    /// Counts something served to an edge.
    pub fn served(&self, kind: EdgeKind) {
        self.served.get_or_create(&EdgeLabels { kind }).inc();
    }
}
