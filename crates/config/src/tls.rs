//! The rustls connector for one PostgreSQL database, built from its libpq TLS settings.
//!
//! Certificates are checked as libpq checks them: not at all without `sslrootcert`
//! (`prefer`, `require`: encryption only), the chain to `sslrootcert` but not the host
//! name for `verify-ca` (and for `prefer`/`require` once a root certificate is given),
//! chain and host name for `verify-full`. webpki checks what it can; [`peer`] checks what
//! libpq accepts beyond it: version 1 server certificates and a host name found only in
//! the Common Name.

use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{
    CertificateDer, CertificateRevocationListDer, PrivateKeyDer, ServerName, UnixTime,
};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::{RootCert, SslMode, TlsSettings};

mod peer;

/// Builds the connector, reading every certificate and key file now so that a bad one
/// is a configuration error rather than a failure at the first connection.
///
/// # Errors
/// A message naming the key (`sslrootcert`, `sslcert`, `sslkey`, `sslcrl`) and the file.
pub fn connector(settings: &TlsSettings) -> Result<MakeRustlsConnect, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = match &settings.root_cert {
        None => None,
        Some(root) => {
            let roots = root_certs(root)?;
            let mut store = RootCertStore::empty();
            match root {
                RootCert::File(path) => {
                    for cert in &roots {
                        store
                            .add(cert.clone())
                            .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
                    }
                }
                RootCert::System => {
                    store.add_parsable_certificates(roots.iter().cloned());
                }
            }
            let mut builder =
                WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone());
            let crls = match &settings.crl {
                None => Vec::new(),
                Some(crl) => pem_all::<CertificateRevocationListDer>("sslcrl", crl)?,
            };
            if !crls.is_empty() {
                // OpenSSL's CRL check in libpq covers the server's own certificate.
                builder = builder
                    .with_crls(crls.clone())
                    .only_check_end_entity_revocation();
            }
            let webpki = builder
                .build()
                .map_err(|e| format!("sslrootcert/sslcrl: {e}"))?;
            Some(Chain {
                webpki,
                roots,
                crls,
            })
        }
    };
    let check_name = match (&chain, settings.mode) {
        (None, SslMode::VerifyCa | SslMode::VerifyFull) => {
            return Err(format!(
                "sslmode={} needs sslrootcert",
                settings.mode.as_str()
            ));
        }
        (_, mode) => mode == SslMode::VerifyFull,
    };
    let verifier = Arc::new(Libpq {
        algorithms: provider.signature_verification_algorithms,
        chain,
        check_name,
    });
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match &settings.client_cert {
        None => builder.with_no_client_auth(),
        Some(client) => {
            let chain = pem_all::<CertificateDer>("sslcert", &client.cert)?;
            let key = PrivateKeyDer::from_pem_file(&client.key)
                .map_err(|e| format!("sslkey {}: {e}", client.key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("sslcert/sslkey: {e}"))?
        }
    };
    Ok(MakeRustlsConnect::new(config))
}

/// Every PEM item of one kind in `path`; at least one.
fn pem_all<T: PemObject>(key: &str, path: &Path) -> Result<Vec<T>, String> {
    let read = |e: rustls::pki_types::pem::Error| format!("{key} {}: {e}", path.display());
    let all = T::pem_file_iter(path)
        .map_err(read)?
        .collect::<Result<Vec<T>, _>>()
        .map_err(read)?;
    if all.is_empty() {
        return Err(format!(
            "{key} {}: no PEM item of the expected kind in it",
            path.display()
        ));
    }
    Ok(all)
}

/// The certificates of `sslrootcert`: its file's, or the system's.
fn root_certs(root: &RootCert) -> Result<Vec<CertificateDer<'static>>, String> {
    match root {
        RootCert::File(path) => pem_all::<CertificateDer>("sslrootcert", path),
        RootCert::System => {
            let found = rustls_native_certs::load_native_certs();
            if found.certs.is_empty() {
                let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
                return Err(format!(
                    "sslrootcert=system: no system CA certificates found (install ca-certificates) {}",
                    errors.join("; ")
                ));
            }
            Ok(found.certs)
        }
    }
}

/// What a root certificate is checked against.
#[derive(Debug)]
struct Chain {
    /// Version 3 certificates: chain, validity, revocation and subjectAltName names.
    webpki: Arc<WebPkiServerVerifier>,
    /// The root certificates, for what webpki cannot parse (version 1).
    roots: Vec<CertificateDer<'static>>,
    /// `sslcrl`'s lists, likewise.
    crls: Vec<CertificateRevocationListDer<'static>>,
}

/// libpq's checks of the server's certificate. The handshake's signatures are always
/// checked against the certificate the server sent.
#[derive(Debug)]
struct Libpq {
    /// Signature algorithms of the provider, for the handshake's signatures.
    algorithms: WebPkiSupportedAlgorithms,
    /// With a root certificate (`verify-ca`, `verify-full`, and `prefer`/`require` once
    /// one is given): the chain must lead to one. `None` for `prefer` and `require`
    /// without one: encryption without authentication, as in libpq.
    chain: Option<Chain>,
    /// `verify-full`: the certificate must name the host.
    check_name: bool,
}

impl ServerCertVerifier for Libpq {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        let leaf = peer::parse(end_entity)?;
        // webpki refuses version 1 certificates, and a CA's certificate as the server's:
        // libpq's documented self-signed server certificate, trusted as its own root.
        let trusted_itself = chain
            .roots
            .iter()
            .any(|r| r.as_ref() == end_entity.as_ref());
        if peer::is_v1(&leaf) || trusted_itself {
            peer::verify_chain(&leaf, intermediates, &chain.roots, &chain.crls, now)?;
        } else {
            // webpki checks the chain (and revocation) before the name, so a name error
            // means everything else held.
            match chain.webpki.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ) {
                Ok(verified) => return Ok(verified),
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) => {}
                Err(other) => return Err(other),
            }
        }
        if self.check_name {
            peer::verify_name(&leaf, server_name)?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        match peer::parse(cert) {
            Ok(parsed) if peer::webpki_refuses(&parsed) => {
                peer::verify_handshake_signature(message, &parsed, dss, &self.algorithms, false)
            }
            _ => rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms),
        }
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        match peer::parse(cert) {
            Ok(parsed) if peer::webpki_refuses(&parsed) => {
                peer::verify_handshake_signature(message, &parsed, dss, &self.algorithms, true)
            }
            _ => rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms),
        }
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
