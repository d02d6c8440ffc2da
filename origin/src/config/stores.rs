//! What the origin connects to its stores with, as configured: which filter store, TLS files,
//! credentials (a password from the setting or from its file), and the checks of these
//! settings that would otherwise fail later, at connect time, or silently break the promise.

use super::{Config, ConfigError};
use std::path::{Path, PathBuf};

/// Where the filter lives, as the settings say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterHome {
    /// One Redis at `redis_url`.
    Redis,
    /// A Redis Cluster through `redis_cluster_nodes`.
    RedisCluster,
    /// In this process: nothing outside it sees the bits.
    InProcess,
}

/// The TLS files of one store's connection, as configured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles<'a> {
    /// CA certificates (PEM) trusted in place of the platform's roots.
    pub ca: Option<&'a Path>,
    /// Client certificate chain (PEM).
    pub client_cert: Option<&'a Path>,
    /// Its private key (PEM).
    pub client_key: Option<&'a Path>,
}

impl TlsFiles<'_> {
    fn any(&self) -> bool {
        self.ca.is_some() || self.client_cert.is_some() || self.client_key.is_some()
    }

    /// Each file with the name of the setting that names it.
    fn named(&self, prefix: &str) -> Vec<(String, &Path)> {
        [("ca_file", self.ca), ("client_cert_file", self.client_cert), ("client_key_file", self.client_key)]
            .into_iter()
            .filter_map(|(suffix, path)| Some((format!("{prefix}_tls_{suffix}"), path?)))
            .collect()
    }
}

impl Config {
    /// Where the filter lives.
    pub fn filter_home(&self) -> FilterHome {
        match (self.redis_cluster_nodes.is_empty(), self.redis_url.is_some()) {
            (false, _) => FilterHome::RedisCluster,
            (true, true) => FilterHome::Redis,
            (true, false) => FilterHome::InProcess,
        }
    }

    /// Whether the keys live in Cassandra (else in the embedded key file).
    pub fn database_is_shared(&self) -> bool {
        !self.cassandra_nodes.is_empty()
    }

    /// The Redis connection's TLS files.
    pub fn redis_tls(&self) -> TlsFiles<'_> {
        TlsFiles {
            ca: self.redis_tls_ca_file.as_deref(),
            client_cert: self.redis_tls_client_cert_file.as_deref(),
            client_key: self.redis_tls_client_key_file.as_deref(),
        }
    }

    /// The Cassandra connection's TLS files.
    pub fn cassandra_tls_files(&self) -> TlsFiles<'_> {
        TlsFiles {
            ca: self.cassandra_tls_ca_file.as_deref(),
            client_cert: self.cassandra_tls_client_cert_file.as_deref(),
            client_key: self.cassandra_tls_client_key_file.as_deref(),
        }
    }

    /// The Redis password: the setting's, or its file's first line.
    pub fn redis_password(&self) -> Result<Option<String>, ConfigError> {
        password("redis", self.redis_password.as_deref(), self.redis_password_file.as_deref())
    }

    /// The Cassandra password: the setting's, or its file's first line.
    pub fn cassandra_password(&self) -> Result<Option<String>, ConfigError> {
        password("cassandra", self.cassandra_password.as_deref(), self.cassandra_password_file.as_deref())
    }

    /// The checks of the stores' settings: what would break the promise, what contradicts
    /// itself, and files that cannot be read.
    pub(super) fn validate_stores(&self) -> Result<(), ConfigError> {
        self.validate_filter_home()?;
        self.validate_redis_connection()?;
        for (setting, path) in self.redis_tls().named("redis") {
            check_pem(&setting, path)?;
        }
        self.redis_password()?;
        self.validate_cassandra()
    }

    /// The checks of the Cassandra settings alone: what `bloomgate-origin schema apply`, which
    /// connects to nothing else, needs of them (and `validate` checks with the rest).
    pub fn validate_cassandra(&self) -> Result<(), ConfigError> {
        self.validate_cassandra_connection()?;
        for (setting, path) in self.cassandra_tls_files().named("cassandra") {
            check_pem(&setting, path)?;
        }
        self.cassandra_password()?;
        self.consistency()?;
        Ok(())
    }

    /// A filter in this process over a shared database breaks the promise as soon as a second
    /// origin starts: refused unless the operator says this origin is the only one.
    fn validate_filter_home(&self) -> Result<(), ConfigError> {
        let private_filter = self.filter_home() == FilterHome::InProcess && self.filter_enabled;
        if private_filter && self.database_is_shared() && !self.single_origin {
            return Err(ConfigError::Invalid(
                "cassandra_nodes is set but redis_url and redis_cluster_nodes are not: every origin would keep a filter of its own, and one origin would answer \"not seen\" for keys written through another. Set redis_url (BLOOMGATE_REDIS_URL) to the Redis all origins share; or, if this is the only origin on this database, set single_origin = true".into(),
            ));
        }
        Ok(())
    }

    fn validate_redis_connection(&self) -> Result<(), ConfigError> {
        let tls = self.redis_tls();
        if self.filter_home() == FilterHome::InProcess {
            let set = self.redis_user.is_some() || self.redis_password.is_some() || self.redis_password_file.is_some();
            if set || tls.any() {
                return Err(ConfigError::Invalid(
                    "Redis credentials or TLS files are set but neither redis_url nor redis_cluster_nodes is: set the Redis to connect to".into(),
                ));
            }
            return Ok(());
        }
        let urls: Vec<&str> = match self.filter_home() {
            FilterHome::RedisCluster => self.redis_cluster_nodes.iter().map(String::as_str).collect(),
            _ => self.redis_url.iter().map(String::as_str).collect(),
        };
        let plain: Vec<&str> = urls.iter().copied().filter(|u| !u.starts_with("rediss://")).collect();
        if tls.any() && !plain.is_empty() {
            return Err(ConfigError::Invalid(format!(
                "redis_tls_* files are set but {} does not start with rediss://: use rediss:// to connect over TLS",
                plain.join(", ")
            )));
        }
        check_pair("redis_tls_client_cert_file", tls.client_cert, "redis_tls_client_key_file", tls.client_key)?;
        Ok(())
    }

    fn validate_cassandra_connection(&self) -> Result<(), ConfigError> {
        let tls = self.cassandra_tls_files();
        let credentials = self.cassandra_user.is_some() || self.has_cassandra_password();
        if !self.database_is_shared() && (credentials || tls.any() || self.cassandra_tls) {
            return Err(ConfigError::Invalid(
                "Cassandra credentials or TLS settings are set but cassandra_nodes is not: set the nodes to connect to"
                    .into(),
            ));
        }
        if !self.cassandra_tls && (tls.any() || self.cassandra_tls_server_name.is_some()) {
            return Err(ConfigError::Invalid(
                "cassandra_tls_* settings are set but cassandra_tls is false: set cassandra_tls = true to connect over TLS".into(),
            ));
        }
        if self.has_cassandra_password() && self.cassandra_user.is_none() {
            return Err(ConfigError::Invalid(
                "a Cassandra password is set without cassandra_user: set the user too".into(),
            ));
        }
        if self.cassandra_user.is_some() && !self.has_cassandra_password() {
            return Err(ConfigError::Invalid(
                "cassandra_user is set without a password: set cassandra_password (BLOOMGATE_CASSANDRA_PASSWORD) or cassandra_password_file".into(),
            ));
        }
        check_pair("cassandra_tls_client_cert_file", tls.client_cert, "cassandra_tls_client_key_file", tls.client_key)
    }

    fn has_cassandra_password(&self) -> bool {
        self.cassandra_password.is_some() || self.cassandra_password_file.is_some()
    }
}

/// A password given as text or in a file, never both.
fn password(store: &str, text: Option<&str>, file: Option<&Path>) -> Result<Option<String>, ConfigError> {
    match (text, file) {
        (Some(_), Some(_)) => {
            Err(ConfigError::Invalid(format!("both {store}_password and {store}_password_file are set: set one")))
        }
        (Some(text), None) => Ok(Some(text.to_owned())),
        (None, Some(path)) => {
            let read = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read { path: path.into(), cause })?;
            let line = read.lines().next().unwrap_or_default().to_owned();
            match line.is_empty() {
                true => Err(ConfigError::Invalid(format!("{store}_password_file {} is empty", path.display()))),
                false => Ok(Some(line)),
            }
        }
        (None, None) => Ok(None),
    }
}

/// A client certificate needs its key, and a key its certificate.
fn check_pair(cert_name: &str, cert: Option<&Path>, key_name: &str, key: Option<&Path>) -> Result<(), ConfigError> {
    match (cert, key) {
        (Some(_), None) => Err(ConfigError::Invalid(format!("{cert_name} is set without {key_name}: set both"))),
        (None, Some(_)) => Err(ConfigError::Invalid(format!("{key_name} is set without {cert_name}: set both"))),
        _ => Ok(()),
    }
}

/// The file the setting names can be read and holds PEM (a certificate or a key), so a wrong
/// path is refused at start and by `check-config`, not at the first connection.
fn check_pem(setting: &str, path: &Path) -> Result<(), ConfigError> {
    let text = std::fs::read(path).map_err(|cause| ConfigError::Read { path: PathBuf::from(path), cause })?;
    match text.windows(11).any(|w| w == b"-----BEGIN ") {
        true => Ok(()),
        false => Err(ConfigError::Invalid(format!(
            "{setting} {} holds no PEM block (-----BEGIN ...): give the certificate or key in PEM",
            path.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared_db() -> Config {
        Config { cassandra_nodes: vec!["10.0.0.1:9042".into()], ..Config::default() }
    }

    #[test]
    fn a_shared_database_with_a_filter_in_process_is_refused_unless_single_origin() {
        let err = shared_db().validate().unwrap_err().to_string();
        assert!(err.contains("redis_url") && err.contains("single_origin"), "{err}");
        assert!(Config { single_origin: true, ..shared_db() }.validate().is_ok());
        let redis = Config { redis_url: Some("redis://r:6379/".into()), ..shared_db() };
        assert!(redis.validate().is_ok());
        let cluster = Config { redis_cluster_nodes: vec!["redis://r:7001".into()], ..shared_db() };
        assert!(cluster.validate().is_ok());
        assert!(Config::default().validate().is_ok(), "the quick start: embedded keys, filter in process");
        let ab_baseline = Config { filter_enabled: false, ..shared_db() };
        assert!(ab_baseline.validate().is_ok(), "no filter consulted: nothing to disagree about");
    }

    #[test]
    fn tls_files_need_a_tls_url_and_credentials_need_their_store() {
        let ca = Some(PathBuf::from("/nonexistent/ca.pem"));
        let plain =
            Config { redis_url: Some("redis://r:6379/".into()), redis_tls_ca_file: ca.clone(), ..Config::default() };
        assert!(plain.validate().unwrap_err().to_string().contains("rediss://"));
        let nowhere = Config { redis_password: Some("pw".into()), ..Config::default() };
        assert!(nowhere.validate().unwrap_err().to_string().contains("redis_url"));
        let no_tls = Config { cassandra_tls_ca_file: ca, ..shared_db() };
        let err = Config { redis_url: Some("redis://r/".into()), ..no_tls }.validate().unwrap_err().to_string();
        assert!(err.contains("cassandra_tls = true"), "{err}");
        let with_redis = || Config { redis_url: Some("redis://r/".into()), ..shared_db() };
        let no_user = Config { cassandra_password: Some("pw".into()), ..with_redis() };
        assert!(no_user.validate().unwrap_err().to_string().contains("cassandra_user"));
        let no_password = Config { cassandra_user: Some("bg".into()), ..with_redis() };
        assert!(no_password.validate().unwrap_err().to_string().contains("cassandra_password"));
        let both = Config {
            cassandra_user: Some("bg".into()),
            cassandra_password: Some("pw".into()),
            cassandra_password_file: Some("/x".into()),
            ..with_redis()
        };
        assert!(both.validate().unwrap_err().to_string().contains("set one"));
        let half = Config {
            redis_url: Some("rediss://r/".into()),
            redis_tls_client_cert_file: Some("/c.pem".into()),
            ..Config::default()
        };
        assert!(half.validate().unwrap_err().to_string().contains("redis_tls_client_key_file"));
    }

    #[test]
    fn named_files_must_exist_and_hold_pem_and_passwords_come_from_their_file() {
        let dir = std::env::temp_dir().join(format!("bloomgate-stores-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (pem, junk, secret) = (dir.join("ca.pem"), dir.join("ca.der"), dir.join("password"));
        std::fs::write(&pem, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").unwrap();
        std::fs::write(&junk, [0x30, 0x82, 0x01]).unwrap();
        std::fs::write(&secret, "s3cret-password\n").unwrap();
        let tls = |ca: &Path| Config {
            redis_url: Some("rediss://r/".into()),
            redis_tls_ca_file: Some(ca.into()),
            redis_password_file: Some(secret.clone()),
            ..Config::default()
        };
        assert!(tls(&pem).validate().is_ok());
        assert_eq!(
            tls(&pem).redis_password().unwrap().as_deref(),
            Some("s3cret-password"),
            "the newline is not the password's"
        );
        let err = tls(&junk).validate().unwrap_err().to_string();
        assert!(err.contains("redis_tls_ca_file") && err.contains("PEM"), "{err}");
        let err = tls(&dir.join("missing.pem")).validate().unwrap_err().to_string();
        assert!(err.contains("missing.pem"), "{err}");
    }
}
