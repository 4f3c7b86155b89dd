//! Mutual authentication by pinned certificates.
//!
//! Each node has one [`Identity`] (a certificate and its private key) and a
//! list of [`Peer`]s it trusts, each named and given by its exact
//! certificate. There is no certificate authority: a peer is trusted when
//! the certificate it presents is byte for byte one on the list *and* it
//! proves, in the TLS 1.3 handshake, that it holds the matching key
//! (rustls checks the signature with the `ring` provider). Both sides check
//! each other; anything else is refused with a log line naming what was
//! wrong.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// The ALPN protocol name of the link protocol, version 1.
/// (Both sides require it.)
pub const ALPN: &[u8] = b"ferry-net/1";

/// This node's certificate and private key.
#[derive(Debug)]
pub struct Identity {
    /// The certificate (DER) peers must be told to trust.
    pub cert: CertificateDer<'static>,
    /// Its private key (DER, PKCS#8).
    pub key: PrivateKeyDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Identity {
        Identity { cert: self.cert.clone(), key: self.key.clone_key() }
    }
}

impl Identity {
    /// A fresh self-signed identity (ECDSA P-256) for `name`: what a node
    /// generates once and keeps; tests make them on the fly.
    ///
    /// # Errors
    /// If key generation fails.
    pub fn generate(name: &str) -> Result<Identity, rcgen::Error> {
        let key = rcgen::KeyPair::generate()?;
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()])?.self_signed(&key)?;
        Ok(Identity { cert: cert.der().clone(), key: PrivatePkcs8KeyDer::from(key.serialize_der()).into() })
    }

    /// Reads an identity from PEM text (a certificate and a PKCS#8 key).
    ///
    /// # Errors
    /// If either part is missing or malformed.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Identity, String> {
        let cert = parse_cert_pem(cert_pem)?;
        let key = rcgen::KeyPair::from_pem(key_pem).map_err(|e| format!("private key: {e}"))?;
        Ok(Identity { cert, key: PrivatePkcs8KeyDer::from(key.serialize_der()).into() })
    }

    /// The identity as PEM text: (certificate, private key).
    pub fn to_pem(&self) -> (String, String) {
        let cert = pem_encode("CERTIFICATE", self.cert.as_ref());
        let key = pem_encode("PRIVATE KEY", self.key.secret_der());
        (cert, key)
    }
}

fn pem_encode(tag: &str, der: &[u8]) -> String {
    pem::encode(&pem::Pem::new(tag, der.to_vec()))
}

/// Parses one PEM certificate.
///
/// # Errors
/// If the text holds no PEM `CERTIFICATE` block.
pub fn parse_cert_pem(text: &str) -> Result<CertificateDer<'static>, String> {
    let p = pem::parse(text).map_err(|e| format!("certificate: {e}"))?;
    if p.tag() != "CERTIFICATE" {
        return Err(format!("expected a CERTIFICATE block, found {}", p.tag()));
    }
    Ok(CertificateDer::from(p.into_contents()))
}

/// A peer this node trusts: its name (the `host` of `name@host`) and its
/// exact certificate.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The name this node calls the peer by.
    pub name: String,
    /// The certificate it must present.
    pub cert: CertificateDer<'static>,
}

/// Checks a presented certificate against a pinned list.
#[derive(Debug)]
pub(crate) struct Pinned {
    peers: Vec<Peer>,
    provider: Arc<CryptoProvider>,
}

impl Pinned {
    pub(crate) fn new(peers: Vec<Peer>, provider: Arc<CryptoProvider>) -> Pinned {
        Pinned { peers, provider }
    }

    fn check(&self, cert: &CertificateDer<'_>, side: &str) -> Result<(), rustls::Error> {
        if self.peers.iter().any(|p| p.cert.as_ref() == cert.as_ref()) {
            Ok(())
        } else {
            // Anyone who can reach a node may make it say this: once a
            // minute at most (the refusal itself is told to the caller).
            static SAID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            crate::node::say_once_a_minute(&SAID, &format!("ferry-net: refused a {side} whose certificate is not on the trusted list"));
            Err(rustls::Error::General(format!("{side} certificate is not on the trusted list")))
        }
    }

    fn schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.check(end_entity, "server").map(|()| ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes()
    }
}

impl ClientCertVerifier for Pinned {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.check(end_entity, "client").map(|()| ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes()
    }
}

/// The rustls provider used throughout: `ring`, TLS 1.3 only.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Server side: present `id`, require a client certificate on `peers`.
pub(crate) fn server_config(id: &Identity, peers: Vec<Peer>) -> Result<rustls::ServerConfig, rustls::Error> {
    let p = provider();
    let mut c = rustls::ServerConfig::builder_with_provider(p.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(Arc::new(Pinned::new(peers, p)))
        .with_single_cert(vec![id.cert.clone()], id.key.clone_key())?;
    c.alpn_protocols = vec![ALPN.to_vec()];
    Ok(c)
}

/// Client side: present `id`, require the server to present `peer`'s
/// certificate.
pub(crate) fn client_config(id: &Identity, peer: &Peer) -> Result<rustls::ClientConfig, rustls::Error> {
    let p = provider();
    let mut c = rustls::ClientConfig::builder_with_provider(p.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned::new(vec![peer.clone()], p)))
        .with_client_auth_cert(vec![id.cert.clone()], id.key.clone_key())?;
    c.alpn_protocols = vec![ALPN.to_vec()];
    Ok(c)
}

/// A QUIC client configuration that presents `id` and accepts only `peer`'s
/// certificate: what [`crate::Node::connect`] uses, public for tools and
/// tests that speak to a node directly.
///
/// # Errors
/// If rustls refuses the identity.
pub fn quic_client_config(id: &Identity, peer: &Peer) -> Result<quinn::ClientConfig, rustls::Error> {
    let c = client_config(id, peer)?;
    let c = quinn::crypto::rustls::QuicClientConfig::try_from(c).map_err(|e| rustls::Error::General(e.to_string()))?;
    Ok(quinn::ClientConfig::new(Arc::new(c)))
}

/// A QUIC server configuration that presents `id` and accepts only clients
/// presenting a certificate on `peers`.
///
/// # Errors
/// If rustls refuses the identity.
pub fn quic_server_config(id: &Identity, peers: Vec<Peer>) -> Result<quinn::ServerConfig, rustls::Error> {
    let c = server_config(id, peers)?;
    let c = quinn::crypto::rustls::QuicServerConfig::try_from(c).map_err(|e| rustls::Error::General(e.to_string()))?;
    Ok(quinn::ServerConfig::with_crypto(Arc::new(c)))
}
