//! A TLS terminator in front of a plain-HTTP server, as a load balancer puts one in front of
//! an origin: a CA of its own and a certificate it signed for `127.0.0.1` and `localhost`
//! (made by rcgen at start), TLS accepted with tokio-rustls, the bytes copied both ways to the
//! server's plain port. A client trusts it by trusting [`TlsFront::ca_pem`].

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// A running terminator; dropped = stopped.
pub struct TlsFront {
    /// `https://127.0.0.1:PORT`.
    pub base: String,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// The CA's certificate, PEM: what a client adds to its roots to trust this front.
    pub ca_pem: String,
    accept: JoinHandle<()>,
}

impl TlsFront {
    /// Terminates TLS on a free port and forwards each connection to `upstream` (`host:port`,
    /// plain HTTP).
    pub async fn start(upstream: &str) -> TlsFront {
        let (ca_pem, config) = certificates();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port for the TLS front");
        let port = listener.local_addr().unwrap().port();
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let upstream = upstream.to_owned();
        let accept = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(forward(acceptor.clone(), tcp, upstream.clone()));
            }
        });
        TlsFront { base: format!("https://127.0.0.1:{port}"), port, ca_pem, accept }
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// One connection: the handshake (a client that does not trust the CA, or does not speak TLS,
/// ends here), then bytes both ways until either side closes.
async fn forward(acceptor: TlsAcceptor, tcp: TcpStream, upstream: String) {
    let Ok(mut tls) = acceptor.accept(tcp).await else { return };
    let Ok(mut plain) = TcpStream::connect(&upstream).await else { return };
    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
}

/// A fresh CA's certificate (PEM), and a server config whose certificate that CA signed for
/// 127.0.0.1 and localhost.
fn certificates() -> (String, ServerConfig) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name.push(DnType::CommonName, "bloomgate test CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();

    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    leaf.distinguished_name.push(DnType::CommonName, "bloomgate test origin");
    let leaf_key = KeyPair::generate().unwrap();
    let leaf_cert = leaf.signed_by(&leaf_key, &ca).unwrap();

    let chain = vec![leaf_cert.der().clone(), CertificateDer::from(ca.der().to_vec())];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    // Named, not the process's default: the workspace builds two providers (scylla brings
    // aws-lc-rs), so rustls cannot pick one. ring is the client's (reqwest's rustls features);
    // rustls deprecates it only for its lack of post-quantum key exchange, no matter on loopback.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("a server config for the test certificate");
    (ca.pem(), config)
}
