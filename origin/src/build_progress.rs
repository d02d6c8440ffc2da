//! How far a rebuild has come. The origin running it publishes this to the filter store every
//! second; any origin's stats read it back, so an operator sees the build from wherever they
//! ask. Advisory only: nothing decides on it.

use serde::{Deserialize, Serialize};

/// What a rebuild is doing: as published, in stats, in the status page's samples and as the
/// `phase` label of `bloomgate_rebuild_phase`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BuildPhase {
    /// The new generation is named and takes every add; waiting out writes that started
    /// before it was (see `rebuild`).
    Settling,
    /// Reading every key from the database into the new bits.
    Scanning,
    /// Merging the built segments into the filter store.
    Uploading,
}

impl BuildPhase {
    /// Every phase, in order.
    pub const ALL: [BuildPhase; 3] = [BuildPhase::Settling, BuildPhase::Scanning, BuildPhase::Uploading];

    /// Its name (as serialized).
    pub fn as_str(self) -> &'static str {
        match self {
            BuildPhase::Settling => "settling",
            BuildPhase::Scanning => "scanning",
            BuildPhase::Uploading => "uploading",
        }
    }
}

impl prometheus_client::encoding::EncodeLabelValue for BuildPhase {
    fn encode(&self, encoder: &mut prometheus_client::encoding::LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

/// A snapshot of a rebuild, as published.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BuildProgress {
    /// The generation being built.
    pub generation: u64,
    /// What it is doing.
    pub phase: BuildPhase,
    /// Keys read so far.
    pub keys_scanned: u64,
    /// Keys the scan should find (the active generation's estimate), if known.
    pub keys_expected: Option<u64>,
    /// When the current phase's clock started, ms since the Unix epoch: the settle's start
    /// while settling, the scan's start from then on (the rate counts scan time only).
    pub started_ms: u64,
    /// When this snapshot was taken, ms since the Unix epoch.
    pub updated_ms: u64,
}

impl BuildProgress {
    /// Keys per second since `started_ms`.
    pub fn keys_per_sec(&self) -> f64 {
        let secs = self.updated_ms.saturating_sub(self.started_ms) as f64 / 1000.0;
        if secs > 0.0 {
            self.keys_scanned as f64 / secs
        } else {
            0.0
        }
    }

    /// Seconds the scan still needs at its rate so far: None without an expected count or a
    /// rate; 0 once the expected count is reached (the estimate may be short of the truth).
    pub fn eta_secs(&self) -> Option<f64> {
        let expected = self.keys_expected?;
        let rate = self.keys_per_sec();
        if self.phase == BuildPhase::Uploading || self.keys_scanned >= expected {
            return Some(0.0);
        }
        (rate > 0.0).then(|| (expected - self.keys_scanned) as f64 / rate)
    }

    /// The stats view: the snapshot plus its rate and ETA.
    pub fn to_api(&self) -> bloomgate_client::api::RebuildProgress {
        bloomgate_client::api::RebuildProgress {
            generation: self.generation,
            phase: self.phase.as_str().to_owned(),
            keys_scanned: self.keys_scanned,
            keys_expected: self.keys_expected,
            keys_per_sec: self.keys_per_sec().round(),
            eta_secs: self.eta_secs().map(f64::ceil),
            started_ms: self.started_ms,
            updated_ms: self.updated_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(keys_scanned: u64, keys_expected: Option<u64>, secs: u64) -> BuildProgress {
        BuildProgress {
            generation: 7,
            phase: BuildPhase::Scanning,
            keys_scanned,
            keys_expected,
            started_ms: 1_000,
            updated_ms: 1_000 + secs * 1000,
        }
    }

    #[test]
    fn rate_and_eta_follow_the_scan() {
        let p = at(50_000, Some(200_000), 5);
        assert_eq!(p.keys_per_sec(), 10_000.0);
        assert_eq!(p.eta_secs(), Some(15.0));
        assert_eq!(p.to_api().eta_secs, Some(15.0));
    }

    #[test]
    fn no_eta_without_an_expected_count_or_a_rate() {
        assert_eq!(at(50_000, None, 5).eta_secs(), None);
        assert_eq!(at(0, Some(10), 0).eta_secs(), None);
        assert_eq!(at(0, Some(10), 0).keys_per_sec(), 0.0);
    }

    #[test]
    fn past_the_estimate_or_uploading_there_is_nothing_left_to_scan() {
        assert_eq!(at(300, Some(200), 1).eta_secs(), Some(0.0));
        let uploading = BuildProgress { phase: BuildPhase::Uploading, ..at(10, Some(200), 1) };
        assert_eq!(uploading.eta_secs(), Some(0.0));
    }

    #[test]
    fn the_wire_form_round_trips() {
        let p = at(5, Some(9), 1);
        let json = serde_json::to_string(&p).unwrap();
        assert!(json.contains("\"phase\":\"scanning\""));
        assert_eq!(serde_json::from_str::<BuildProgress>(&json).unwrap(), p);
    }
}
