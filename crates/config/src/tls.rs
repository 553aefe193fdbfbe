//! The rustls connector for one PostgreSQL database, built from its libpq TLS settings.
//!
//! Certificates are checked as libpq checks them: not at all without `sslrootcert`
//! (`prefer`, `require`: encryption only), the chain to `sslrootcert` but not the host
//! name for `verify-ca` (and for `prefer`/`require` once a root certificate is given),
//! chain and host name for `verify-full`.

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
            let mut builder = WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots(root)?),
                provider.clone(),
            );
            if let Some(crl) = &settings.crl {
                // OpenSSL's CRL check in libpq covers the server's own certificate.
                builder = builder
                    .with_crls(pem_all::<CertificateRevocationListDer>("sslcrl", crl)?)
                    .only_check_end_entity_revocation();
            }
            Some(
                builder
                    .build()
                    .map_err(|e| format!("sslrootcert/sslcrl: {e}"))?,
            )
        }
    };
    let verifier: Arc<dyn ServerCertVerifier> = match (chain, settings.mode) {
        (Some(webpki), SslMode::VerifyFull) => webpki,
        (None, SslMode::VerifyCa | SslMode::VerifyFull) => {
            return Err(format!(
                "sslmode={} needs sslrootcert",
                settings.mode.as_str()
            ));
        }
        (chain, _) => Arc::new(Lenient {
            algorithms: provider.signature_verification_algorithms,
            chain,
        }),
    };
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

fn roots(root: &RootCert) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match root {
        RootCert::File(path) => {
            for cert in pem_all::<CertificateDer>("sslrootcert", path)? {
                store
                    .add(cert)
                    .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            }
        }
        RootCert::System => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
                return Err(format!(
                    "sslrootcert=system: no system CA certificates found (install ca-certificates) {}",
                    errors.join("; ")
                ));
            }
        }
    }
    Ok(store)
}

/// The checks of libpq's modes below `verify-full`. The handshake's signatures are
/// always checked against the certificate the server sent.
#[derive(Debug)]
struct Lenient {
    /// Signature algorithms of the provider, for the handshake's signatures.
    algorithms: WebPkiSupportedAlgorithms,
    /// `verify-ca` (and `prefer`/`require` with a root certificate): the chain must
    /// lead to a root certificate, whatever name it holds. `None` for `prefer` and
    /// `require` without one: encryption without authentication, as in libpq.
    chain: Option<Arc<WebPkiServerVerifier>>,
}

impl ServerCertVerifier for Lenient {
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
        // webpki checks the chain (and revocation) before the name, so a name error
        // means everything else held.
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
