//! Loading the configuration: defaults, then a TOML file, then the `BLOOMGATE_*` environment
//! variables (each must name a setting or one of the command line's own), then flags, each overriding the one before (merged by
//! `figment`).

use super::{Config, ConfigError, ENV_PREFIX};
use figment::providers::{Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Deserializer, Serialize};
use std::path::Path;

/// The settings named by `BLOOMGATE_*` environment variables, typed by the setting: a number or
/// boolean setting's value is parsed as one, every other value is kept as the exact text.
/// (figment's own `Env` guesses a type from the text, so a secret of digits would become a
/// number and `0042…` would lose its zeros.)
struct EnvSettings(serde_json::Map<String, serde_json::Value>);

impl EnvSettings {
    fn read(env: impl IntoIterator<Item = (String, String)>) -> EnvSettings {
        let defaults = match serde_json::to_value(Config::default()) {
            Ok(serde_json::Value::Object(fields)) => fields,
            _ => unreachable!("Config serializes to a map"),
        };
        let mut settings = serde_json::Map::new();
        for (name, raw) in env {
            let Some(setting) = name.strip_prefix(ENV_PREFIX).map(str::to_ascii_lowercase) else { continue };
            let Some(default) = defaults.get(&setting) else { continue };
            let value = match default {
                serde_json::Value::Number(_) | serde_json::Value::Bool(_) => {
                    serde_json::from_str(raw.trim()).unwrap_or(serde_json::Value::String(raw))
                }
                _ => serde_json::Value::String(raw),
            };
            settings.insert(setting, value);
        }
        EnvSettings(settings)
    }
}

impl figment::Provider for EnvSettings {
    fn metadata(&self) -> figment::Metadata {
        figment::Metadata::named("BLOOMGATE_* environment variables")
    }

    fn data(&self) -> Result<figment::value::Map<figment::Profile, figment::value::Dict>, figment::Error> {
        Serialized::defaults(&self.0).data()
    }
}

/// A list from a TOML array, or from one comma-separated string (how an environment variable
/// or a flag spells it): `"a, b"` is `["a", "b"]`, `""` is empty.
pub(super) fn list_or_commas<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ListOrCommas {
        List(Vec<String>),
        Commas(String),
    }
    let items = match ListOrCommas::deserialize(d)? {
        ListOrCommas::List(items) => items,
        ListOrCommas::Commas(s) => s.split(',').map(str::to_owned).collect(),
    };
    Ok(items.into_iter().map(|i| i.trim().to_owned()).filter(|i| !i.is_empty()).collect())
}

impl Config {
    /// environment variables that name a setting, then `flags` (a map of the settings given on
    /// the command line; absent ones are left out). See [`Config::load_from`].
    pub fn load(file: Option<&Path>, flags: &impl Serialize) -> Result<Config, ConfigError> {
        Config::load_from(file, std::env::vars(), flags)
    }

    /// [`Config::load`] with the environment given. Unknown keys in the file are refused, and
    /// so are `BLOOMGATE_*` variables that name neither a setting nor one of the command line's
    /// own ([`super::BINARY_ENV`]): a misspelt name would otherwise leave its setting at the
    /// default without a word.
    pub fn load_from(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        flags: &impl Serialize,
    ) -> Result<Config, ConfigError> {
        let env: Vec<(String, String)> = env.into_iter().collect();
        super::env_names::refuse_unknown(env.iter().map(|(name, _)| name.as_str()))?;
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            // figment skips a missing file silently; a path the operator named must exist.
            std::fs::metadata(path).map_err(|cause| ConfigError::Read { path: path.into(), cause })?;
            figment = figment.merge(Toml::file_exact(path));
        }
        let config: Config = figment
            .merge(EnvSettings::read(env))
            .merge(Serialized::defaults(flags))
            .extract()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        Ok(config.normalized())
    }

    /// Reads a TOML file over the defaults (all fields optional), without the environment.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let no_flags = serde_json::Map::new();
        Config::load_from(Some(path), std::iter::empty(), &no_flags).map_err(|e| match e {
            ConfigError::Invalid(cause) => ConfigError::Parse { path: path.into(), cause },
            other => other,
        })
    }

    /// An empty `redis_url` (e.g. `BLOOMGATE_REDIS_URL=`) means unset, as leaving it out does.
    /// (An empty `edge_secret` stays an error: see `validate`.)
    fn normalized(mut self) -> Config {
        self.redis_url = self.redis_url.filter(|u| !u.trim().is_empty());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{LeaseTerms, ReadConsistency};
    use std::path::PathBuf;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn no_flags() -> serde_json::Value {
        serde_json::json!({})
    }

    /// A TOML file of `text` in a directory of its own.
    fn toml_file(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("bloomgate-config-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn the_file_then_the_environment_then_flags_each_override_the_one_before() {
        let file = toml_file("c.toml", "max_batch = 10\nmax_in_flight = 20\nmeta_cache_ms = 30\n");
        let vars = env(&[("BLOOMGATE_MAX_IN_FLIGHT", "21"), ("BLOOMGATE_META_CACHE_MS", "31")]);
        let flags = serde_json::json!({ "meta_cache_ms": 32 });
        let c = Config::load_from(Some(&file), vars, &flags).unwrap();
        assert_eq!((c.max_batch, c.max_in_flight, c.meta_cache_ms), (10, 21, 32));
        assert_eq!(c.redis_timeout_ms, 50, "a setting given nowhere keeps its default");
    }

    #[test]
    fn the_environment_alone_configures_every_kind_of_setting() {
        let vars = env(&[
            ("BLOOMGATE_WRITER_TOKENS", "aaaaaaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbbbbbb"),
            ("BLOOMGATE_OPS_TOKENS", "cccccccccccccccccccc"),
            ("BLOOMGATE_CASSANDRA_NODES", "10.0.0.1:9042"),
            ("BLOOMGATE_CASSANDRA_REPLICATION", "{'class': 'NetworkTopologyStrategy', 'dc1': 3}"),
            ("BLOOMGATE_LISTEN", "0.0.0.0:9000"),
            ("BLOOMGATE_JOURNAL_ENABLED", "false"),
            ("BLOOMGATE_AUTO_FP_FACTOR", "2.5"),
            ("BLOOMGATE_MAX_FILTER_BYTES", "1073741824"),
            // Secrets of digits stay the exact text: not a number, no zeros lost.
            ("BLOOMGATE_EDGE_SECRET", "00001111222233334444"),
            ("BLOOMGATE_REDIS_URL", ""),
            // Cassandra with the filter in process: allowed only when said to be the one origin.
            ("BLOOMGATE_SINGLE_ORIGIN", "true"),
            // The command line's own: not settings, not refused.
            ("BLOOMGATE_CONFIG", "/etc/bloomgate/origin.toml"),
            ("BG_TEST_REDIS", "127.0.0.1:6399"),
            ("OTHER", "x"),
        ]);
        let c = Config::load_from(None, vars, &no_flags()).unwrap();
        assert_eq!(c.writer_tokens, ["aaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbb"]);
        assert_eq!(c.ops_tokens, ["cccccccccccccccccccc"]);
        assert_eq!(c.cassandra_nodes, ["10.0.0.1:9042"]);
        assert_eq!(c.cassandra_replication, "{'class': 'NetworkTopologyStrategy', 'dc1': 3}");
        assert_eq!(c.listen.port(), 9000);
        assert!(!c.journal_enabled);
        assert_eq!(c.auto_fp_factor, 2.5);
        assert_eq!(c.max_filter_bytes, 1 << 30);
        assert_eq!(c.edge_secret.as_deref(), Some("00001111222233334444"));
        assert_eq!(c.redis_url, None, "an empty URL means the in-process filter");
        assert!(c.single_origin);
        assert_eq!(Config { edge_secret: None, ..c.clone() }.validate().ok(), Some(()));
    }

    #[test]
    fn bad_settings_name_the_setting_and_where_it_came_from() {
        let typo = toml_file("typo.toml", "max_batchh = 10\n");
        let err = Config::load_from(Some(&typo), env(&[]), &no_flags()).unwrap_err().to_string();
        assert!(err.contains("max_batchh") && err.contains("typo.toml"), "{err}");
        let missing = typo.with_file_name("missing.toml");
        let err = Config::load_from(Some(&missing), env(&[]), &no_flags()).unwrap_err().to_string();
        assert!(err.contains("missing.toml"), "{err}");
        let err = Config::load_from(None, env(&[("BLOOMGATE_REDIS_ULR", "redis://r/")]), &no_flags())
            .unwrap_err()
            .to_string();
        assert!(err.contains("did you mean BLOOMGATE_REDIS_URL?"), "a typo is refused, not skipped: {err}");
        let err =
            Config::load_from(None, env(&[("BLOOMGATE_MAX_BATCH", "many")]), &no_flags()).unwrap_err().to_string();
        assert!(err.contains("max_batch") && err.contains("BLOOMGATE_"), "{err}");
        let err =
            Config::load_from(None, env(&[]), &serde_json::json!({ "listen": "nowhere" })).unwrap_err().to_string();
        assert!(err.contains("listen"), "{err}");
    }

    #[test]
    fn read_leases_are_on_by_default_and_recorded_only_over_a_shared_store() {
        let vars = env(&[("BLOOMGATE_READ_CONSISTENCY", "barrier"), ("BLOOMGATE_READ_LEASE_MS", "20")]);
        let c = Config::load_from(None, vars, &no_flags()).unwrap();
        assert_eq!((c.read_consistency, c.read_lease_ms), (ReadConsistency::Barrier, 20));
        let err = Config::load_from(None, env(&[("BLOOMGATE_READ_CONSISTENCY", "token")]), &no_flags()).unwrap_err();
        assert!(err.to_string().contains("read_consistency"), "{err}");
        let shared = Config { redis_url: Some("redis://127.0.0.1:6379/".into()), ..Config::default() };
        let settings = shared.lease_settings();
        assert_eq!(settings.default_mode, ReadConsistency::Lease);
        assert_eq!(settings.terms, Some(LeaseTerms { lease_us: 10_000, drift_ppm: 1_000 }));
        assert_eq!(
            Config::default().lease_settings().terms,
            None,
            "an in-process filter store has no copies elsewhere"
        );
    }

    #[test]
    fn the_deployment_environment_file_names_only_settings_and_loads() {
        let file = include_str!("../../../deploy/origin.env.example");
        let names = Config::setting_names();
        let mut vars = Vec::new();
        for line in file.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let (name, value) = line.split_once('=').expect("NAME=value");
            let setting = name.strip_prefix(ENV_PREFIX).expect("BLOOMGATE_ prefix").to_ascii_lowercase();
            assert!(names.contains(&setting), "{name} is not a setting");
            vars.push((name.to_owned(), value.to_owned()));
        }
        let c = Config::load_from(None, vars, &no_flags()).unwrap();
        c.validate().unwrap();
        assert_eq!(c.cassandra_nodes.len(), 3);
    }
}
