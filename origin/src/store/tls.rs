//! TLS for the stores' connections, from the configured files: the roots a server's
//! certificate must chain to (the CA file, or the platform's roots without one), the client
//! certificate a server may ask for, and, for Cassandra, the name its certificates carry.
//! Certificates are always verified: there is no setting that turns verification off.

use crate::config::TlsFiles;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::Path;
use std::sync::Arc;

/// The crypto the stores' TLS runs on: ring, as the client's (aws-lc-rs, rustls's other
/// provider, needs cmake and a long C build). Installed as the process's default once, for the
/// Redis driver, which builds its own configuration from it. ring offers no post-quantum key
/// exchange (hence rustls's deprecation note): classical ECDHE to the stores, as most managed
/// Redis and Cassandra services offer today.
#[allow(deprecated)]
pub fn crypto() -> Arc<rustls::crypto::CryptoProvider> {
    let provider = rustls::crypto::ring::default_provider();
    // Err only when a default is installed already (a second origin in one test process).
    let _ = provider.clone().install_default();
    Arc::new(provider)
}

fn read(setting: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{setting} {}: {e}", path.display()))
}

/// The Redis driver's TLS material: the CA file's certificates as its only roots (the
/// platform's without one), and the client certificate and key if set.
pub fn redis_certificates(files: TlsFiles<'_>) -> Result<redis::TlsCertificates, String> {
    let root_cert = files.ca.map(|ca| read("redis_tls_ca_file", ca)).transpose()?;
    let client_tls = match (files.client_cert, files.client_key) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read("redis_tls_client_cert_file", cert)?,
            client_key: read("redis_tls_client_key_file", key)?,
        }),
        _ => None,
    };
    Ok(redis::TlsCertificates { client_tls, root_cert })
}

/// The Cassandra driver's TLS configuration: roots as for Redis, the client certificate if
/// set, and every node's certificate checked against `server_name` when given (else against
/// the node's IP address, which is what the driver connects to).
pub fn cassandra_config(files: TlsFiles<'_>, server_name: Option<&str>) -> Result<ClientConfig, String> {
    let provider = crypto();
    let roots = Arc::new(roots(files.ca, "cassandra_tls_ca_file")?);
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?;
    let builder = match server_name {
        None => builder.with_root_certificates(roots),
        Some(name) => {
            let name = ServerName::try_from(name.to_owned())
                .map_err(|e| format!("cassandra_tls_server_name {name:?} is not a DNS name or IP address: {e}"))?;
            let inner = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| format!("cassandra_tls_ca_file: {e}"))?;
            builder.dangerous().with_custom_certificate_verifier(Arc::new(NamedServer { inner, name }))
        }
    };
    match (files.client_cert, files.client_key) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_slice_iter(&read("cassandra_tls_client_cert_file", cert)?)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("cassandra_tls_client_cert_file {}: {e}", cert.display()))?;
            let key = PrivateKeyDer::from_pem_slice(&read("cassandra_tls_client_key_file", key)?)
                .map_err(|e| format!("cassandra_tls_client_key_file {}: {e}", key.display()))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| format!("Cassandra client certificate: {e}"))
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

/// The CA file's certificates, or the platform's roots without one.
fn roots(ca: Option<&Path>, setting: &str) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(path) => {
            for cert in CertificateDer::pem_slice_iter(&read(setting, path)?) {
                let cert = cert.map_err(|e| format!("{setting} {}: {e}", path.display()))?;
                roots.add(cert).map_err(|e| format!("{setting} {}: {e}", path.display()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
    }
    match roots.is_empty() {
        true => Err(format!("no CA certificate to verify the server with: set {setting}")),
        false => Ok(roots),
    }
}

/// Verifies a server's certificate chain as webpki does, but against one configured name
/// instead of the address the driver connected to.
#[derive(Debug)]
struct NamedServer {
    inner: Arc<WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl ServerCertVerifier for NamedServer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _connected_to: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner.verify_server_cert(end_entity, intermediates, &self.name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
