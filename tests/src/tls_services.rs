//! The TLS services `scripts/services start --tls` runs (a Redis with `--tls-port`, a TLS
//! Redis Cluster, a Cassandra with client encryption and PasswordAuthenticator), as described
//! by the `settings.env` it writes: addresses, users, password files, CA and client
//! certificates, and an unrelated CA for the negative tests.

use std::collections::HashMap;
use std::path::PathBuf;

/// What `settings.env` says, by name (`BG_TLS_CA_FILE`, ...).
pub struct TlsServices {
    settings: HashMap<String, String>,
}

impl TlsServices {
    /// Reads `$BG_STATE_DIR/tls/settings.env` (else `<repo>/.state/tls/settings.env`), and
    /// checks that the TLS Redis and Cassandra accept connections; panics with the command that
    /// starts them otherwise.
    pub async fn require() -> TlsServices {
        let state = std::env::var_os("BG_STATE_DIR").map_or_else(|| crate::repo_root().join(".state"), PathBuf::from);
        let path = state.join("tls/settings.env");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("{}: {e}: start the TLS services with `scripts/services start --tls`", path.display())
        });
        let settings = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let services = TlsServices { settings };
        crate::require("the TLS Redis (scripts/services start --tls)", services.get("BG_TLS_REDIS_ADDR")).await;
        crate::require("the TLS Cassandra (scripts/services start --tls)", services.get("BG_TLS_CASSANDRA_ADDR")).await;
        services
    }

    /// A setting of `settings.env`; panics naming it if absent.
    pub fn get(&self, name: &str) -> &str {
        self.settings.get(name).map(String::as_str).unwrap_or_else(|| panic!("settings.env has no {name}"))
    }

    /// A file named by a setting.
    pub fn path(&self, name: &str) -> PathBuf {
        PathBuf::from(self.get(name))
    }

    /// The TLS Redis Cluster's nodes as `rediss://host:port` (no credentials in the URL).
    pub fn cluster_urls(&self) -> Vec<String> {
        self.get("BG_TLS_REDIS_CLUSTER_ADDRS").split(',').map(|a| format!("rediss://{a}")).collect()
    }
}
