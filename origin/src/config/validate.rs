//! The checks a configuration must pass before anything connects: what would otherwise fail
//! later, and obscurely, is refused at start-up with the setting's name.

use super::{Config, ConfigError};

/// The largest skew margin accepted: a minute (a delete waits twice the margin).
const MAX_DELETE_SKEW_MARGIN_MS: u64 = 60_000;

impl Config {
    /// Checks the values that would otherwise fail later, and obscurely.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("max_connections", self.max_connections as u64),
            ("header_read_timeout_ms", self.header_read_timeout_ms),
            ("max_filter_bytes", self.max_filter_bytes),
            ("rebuild_lease_ms", self.rebuild_lease_ms),
            ("rebuild_memory_bytes", self.rebuild_memory_bytes),
            ("journal_max_entries", self.journal_max_entries),
            ("journal_max_age_ms", self.journal_max_age_ms),
            ("max_batch", self.max_batch as u64),
            ("request_timeout_ms", self.request_timeout_ms),
            ("redis_timeout_ms", self.redis_timeout_ms),
            ("redis_write_timeout_ms", self.redis_write_timeout_ms),
            ("cassandra_timeout_ms", self.cassandra_timeout_ms),
            ("read_lease_ms", self.read_lease_ms),
            ("read_lease_tail_ms", self.read_lease_tail_ms),
            ("recovery_max_rebuilds", self.recovery_max_rebuilds as u64),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Invalid(format!("{name} must be greater than 0")));
        }
        self.validate_lease()?;
        self.validate_stores()?;
        if self.write_recovery_wait_ms >= self.request_timeout_ms {
            return Err(ConfigError::Invalid(format!(
                "write_recovery_wait_ms {} must be below request_timeout_ms {}: a write waiting for a rebuild would time out instead of being refused with Retry-After",
                self.write_recovery_wait_ms, self.request_timeout_ms
            )));
        }
        self.consistency()?;
        if self.delete_skew_margin_ms > MAX_DELETE_SKEW_MARGIN_MS {
            return Err(ConfigError::Invalid(format!(
                "delete_skew_margin_ms {} is over a minute: keep the origins' clocks synchronised (NTP) and the margin just above their largest difference",
                self.delete_skew_margin_ms
            )));
        }
        if 2 * self.delete_skew_margin_ms >= self.request_timeout_ms {
            return Err(ConfigError::Invalid(format!(
                "delete_skew_margin_ms {} is too large for request_timeout_ms {}: a delete waits twice the margin before it is acknowledged, so every delete would time out; raise request_timeout_ms or lower the margin",
                self.delete_skew_margin_ms, self.request_timeout_ms
            )));
        }
        if self.writer_tokens.iter().any(|t| t.len() < 16) {
            return Err(ConfigError::Invalid("writer tokens must be at least 16 characters".into()));
        }
        if self.ops_tokens.iter().any(|t| t.len() < 16) {
            return Err(ConfigError::Invalid("ops tokens must be at least 16 characters".into()));
        }
        if self.ops_tokens.iter().any(|t| self.writer_tokens.contains(t)) {
            return Err(ConfigError::Invalid(
                "a token is in both writer_tokens and ops_tokens: an ops token must not write; use distinct tokens"
                    .into(),
            ));
        }
        if self.edge_secret.as_ref().is_some_and(|s| s.len() < 16) {
            return Err(ConfigError::Invalid(
                "edge_secret must be at least 16 characters (leave it unset to turn the edge endpoints off)".into(),
            ));
        }
        Ok(())
    }

    /// The read lease's settings must let leases hold and every origin honour them.
    fn validate_lease(&self) -> Result<(), ConfigError> {
        let max_ms = crate::lease::MAX_LEASE.as_millis() as u64;
        if self.read_lease_ms > max_ms {
            return Err(ConfigError::Invalid(format!(
                "read_lease_ms {} is over {max_ms}: writes would wait over a second",
                self.read_lease_ms
            )));
        }
        if self.read_lease_tail_ms >= self.read_lease_ms {
            return Err(ConfigError::Invalid(format!(
                "read_lease_tail_ms {} must be less than read_lease_ms {}: a lease would lapse before the next read renews it",
                self.read_lease_tail_ms, self.read_lease_ms
            )));
        }
        if self.clock_drift_ppm > crate::lease::MAX_DRIFT_PPM {
            return Err(ConfigError::Invalid(format!(
                "clock_drift_ppm {} is over {} (10 %)",
                self.clock_drift_ppm,
                crate::lease::MAX_DRIFT_PPM
            )));
        }
        Ok(())
    }

    /// The Cassandra consistency level named in the config.
    pub fn consistency(&self) -> Result<scylla::statement::Consistency, ConfigError> {
        use scylla::statement::Consistency::*;
        Ok(match self.cassandra_consistency.to_ascii_lowercase().as_str() {
            "one" => One,
            "local_one" => LocalOne,
            "quorum" => Quorum,
            "local_quorum" => LocalQuorum,
            "each_quorum" => EachQuorum,
            "all" => All,
            other => {
                return Err(ConfigError::Invalid(format!(
                "cassandra_consistency {other:?} is not one of one, local_one, quorum, local_quorum, each_quorum, all"
            )))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_field() {
        let c = Config { max_connections: 0, ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("max_connections"));
        let c = Config { cassandra_consistency: "most".into(), ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("most"));
        let c = Config { writer_tokens: vec!["short".into()], ..Config::default() };
        assert!(c.validate().is_err());
        let c = Config { ops_tokens: vec!["short".into()], ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("ops tokens"));
        let both = "0123456789abcdef".to_string();
        let c = Config { writer_tokens: vec![both.clone()], ops_tokens: vec![both], ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("both"), "an ops token that writes is no ops token");
        let c = Config { edge_secret: Some(String::new()), ..Config::default() };
        assert!(
            c.validate().unwrap_err().to_string().contains("edge_secret"),
            "an empty secret would open the edge endpoints"
        );
        let c = Config { delete_skew_margin_ms: 60_001, request_timeout_ms: 600_000, ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("delete_skew_margin_ms"));
        let c = Config { delete_skew_margin_ms: 2_500, ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("twice the margin"), "deletes would all time out");
        let c = Config { max_filter_bytes: 0, ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("max_filter_bytes"));
        let c = Config { read_lease_ms: 1_001, ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("read_lease_ms"));
        let c = Config { read_lease_tail_ms: 10, ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("read_lease_tail_ms"), "h must be under L");
        let c = Config { clock_drift_ppm: 200_000, ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("clock_drift_ppm"));
        assert!(Config::default().validate().is_ok());
    }
}
