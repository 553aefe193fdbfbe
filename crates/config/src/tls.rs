//! The rustls connector for one PostgreSQL database, built from its libpq TLS settings;
//! and the TLS settings of one MySQL or MariaDB database ([`my_tls`]), with which its
//! driver builds its own connector.
//!
//! Certificates are checked as libpq checks them: not at all without `sslrootcert`
//! (`prefer`, `require`: encryption only), the chain to `sslrootcert` but not the host
//! name for `verify-ca` (and for `prefer`/`require` once a root certificate is given),
//! chain and host name for `verify-full`. webpki checks what it can; `tls/peer.rs` checks what
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

/// The mysql client's `--ssl-mode`, as far as segmint's MySQL driver (mysql_async with
/// rustls) can follow it. `PREFERRED`, the client's default, is not among them: it falls
/// back to plain text when the server offers no TLS, which the driver cannot do (see
/// [`my_tls`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MySslMode {
    /// Plain TCP: no `ssl-mode` (and no `ssl-ca`), or `DISABLED`.
    Disabled,
    /// TLS or no connection; the certificate is checked only when `ssl-ca` is given, and
    /// then as for `VERIFY_CA`.
    Required,
    /// TLS, and the server's certificate must chain to `ssl-ca`.
    VerifyCa,
    /// As `VERIFY_CA`, and the certificate must also name the host connected to.
    VerifyIdentity,
}

impl MySslMode {
    /// The mysql client's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            MySslMode::Disabled => "DISABLED",
            MySslMode::Required => "REQUIRED",
            MySslMode::VerifyCa => "VERIFY_CA",
            MySslMode::VerifyIdentity => "VERIFY_IDENTITY",
        }
    }
}

/// A PEM file as read at startup: what the driver is handed, and where it came from.
#[derive(Clone)]
pub struct PemFile {
    pub path: std::path::PathBuf,
    pub pem: Vec<u8>,
}

/// The TLS part of a `mysql://` URL, with its files read and checked.
#[derive(Clone)]
pub struct MyTls {
    pub mode: MySslMode,
    /// `ssl-ca`: the certificates the server's must chain to. Given, it is always
    /// checked (under `REQUIRED` too, as by the mysql client).
    pub ca: Option<PemFile>,
    /// `ssl-cert` and `ssl-key`: a client certificate and its private key.
    pub client: Option<(PemFile, PemFile)>,
}

impl MyTls {
    /// No TLS.
    pub const DISABLED: MyTls = MyTls {
        mode: MySslMode::Disabled,
        ca: None,
        client: None,
    };
}

impl std::fmt::Debug for MyTls {
    /// The mode and the files' paths; never a key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MyTls")
            .field("mode", &self.mode)
            .field("ca", &self.ca.as_ref().map(|c| &c.path))
            .field(
                "client",
                &self.client.as_ref().map(|(c, k)| (&c.path, &k.path)),
            )
            .finish()
    }
}

/// The TLS parameters of a `mysql://` URL, as written (values percent-decoded).
#[derive(Debug, Default)]
pub struct MyTlsParams<'a> {
    /// `ssl-mode` (or `ssl_mode`, `sslmode`), any case.
    pub mode: Option<&'a str>,
    pub ca: Option<&'a str>,
    pub cert: Option<&'a str>,
    pub key: Option<&'a str>,
    pub crl: Option<&'a str>,
}

/// Reads the TLS parameters of a `mysql://` URL as the mysql client reads its options,
/// and every file they name now, so that a bad one is a configuration error rather than
/// a failure at the first connection:
/// - no `ssl-mode`: plain text, or `VERIFY_CA` when `ssl-ca` is given (as the mysql
///   client takes `--ssl-ca` without `--ssl-mode`);
/// - `PREFERRED` is refused: the mysql client then tries TLS and falls back to plain text,
///   which mysql_async cannot (it either requires TLS or never asks for it);
/// - `VERIFY_CA` and `VERIFY_IDENTITY` need `ssl-ca` (the mysql client refuses them
///   without a CA too);
/// - `ssl-ca`, `ssl-cert` and `ssl-key` need a mode that encrypts, rather than being
///   ignored; `ssl-cert` and `ssl-key` go together;
/// - `ssl-crl` is refused: mysql_async cannot check revocation.
///
/// # Errors
/// A message naming the parameter (and the file).
pub fn my_tls(params: &MyTlsParams<'_>) -> Result<MyTls, String> {
    let explicit = match params.mode {
        None => None,
        Some(value) => Some(match value.to_ascii_uppercase().as_str() {
            "DISABLED" => MySslMode::Disabled,
            "REQUIRED" => MySslMode::Required,
            "VERIFY_CA" => MySslMode::VerifyCa,
            "VERIFY_IDENTITY" => MySslMode::VerifyIdentity,
            "PREFERRED" => {
                return Err(format!(
                    "ssl-mode={value} is not supported: the MySQL driver cannot fall back from \
                     TLS to plain text as the mysql client does; use ssl-mode=REQUIRED (or \
                     VERIFY_CA, VERIFY_IDENTITY) to encrypt, or ssl-mode=DISABLED for plain text"
                ));
            }
            _ => {
                return Err(format!(
                    "invalid ssl-mode \"{value}\": use DISABLED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY"
                ));
            }
        }),
    };
    if let Some(crl) = params.crl {
        return Err(format!(
            "ssl-crl={crl}: revocation lists are not supported for MySQL/MariaDB (the driver cannot check them)"
        ));
    }
    let mode = match (explicit, params.ca) {
        (Some(mode), _) => mode,
        (None, Some(_)) => MySslMode::VerifyCa,
        (None, None) => MySslMode::Disabled,
    };
    if mode == MySslMode::Disabled {
        if let Some(name) = [
            ("ssl-ca", params.ca),
            ("ssl-cert", params.cert),
            ("ssl-key", params.key),
        ]
        .iter()
        .find_map(|(name, value)| value.map(|_| *name))
        {
            return Err(format!(
                "{name} needs TLS: give ssl-mode=REQUIRED, VERIFY_CA or VERIFY_IDENTITY (without ssl-mode the connection is plain text)"
            ));
        }
        return Ok(MyTls::DISABLED);
    }
    if params.ca.is_none() && matches!(mode, MySslMode::VerifyCa | MySslMode::VerifyIdentity) {
        return Err(format!(
            "ssl-mode={} needs ssl-ca, the CA certificate the server's must chain to",
            mode.as_str()
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let ca = match params.ca {
        None => None,
        Some(path) => {
            let file = read_pem("ssl-ca", path)?;
            let mut store = RootCertStore::empty();
            for cert in pem_items::<CertificateDer>("ssl-ca", &file)? {
                store.add(cert).map_err(|e| format!("ssl-ca {path}: {e}"))?;
            }
            Some(file)
        }
    };
    let client = match (params.cert, params.key) {
        (None, None) => None,
        (Some(_), None) => return Err("ssl-cert needs ssl-key, its private key".into()),
        (None, Some(_)) => return Err("ssl-key needs ssl-cert, its certificate".into()),
        (Some(cert_path), Some(key_path)) => {
            let cert = read_pem("ssl-cert", cert_path)?;
            let key = read_pem("ssl-key", key_path)?;
            let chain = pem_items::<CertificateDer>("ssl-cert", &cert)?;
            let private = PrivateKeyDer::from_pem_slice(&key.pem).map_err(|e| match e {
                rustls::pki_types::pem::Error::NoItemsFound => {
                    format!("ssl-key {key_path}: no private key in it")
                }
                e => format!("ssl-key {key_path}: {e}"),
            })?;
            // What the driver does at each connection: a key of another certificate, or
            // of a kind the provider cannot sign with, is refused now.
            rustls::sign::CertifiedKey::from_der(chain, private, &provider).map_err(|e| {
                format!("ssl-key {key_path} does not go with ssl-cert {cert_path}: {e}")
            })?;
            Some((cert, key))
        }
    };
    Ok(MyTls { mode, ca, client })
}

fn read_pem(key: &str, path: &str) -> Result<PemFile, String> {
    let pem = std::fs::read(path).map_err(|e| format!("{key} {path}: {e}"))?;
    Ok(PemFile {
        path: path.into(),
        pem,
    })
}

/// Every PEM item of one kind in `file`; at least one.
fn pem_items<T: PemObject>(key: &str, file: &PemFile) -> Result<Vec<T>, String> {
    let all = T::pem_slice_iter(&file.pem)
        .collect::<Result<Vec<T>, _>>()
        .map_err(|e| format!("{key} {}: {e}", file.path.display()))?;
    if all.is_empty() {
        return Err(format!(
            "{key} {}: no PEM item of the expected kind in it",
            file.path.display()
        ));
    }
    Ok(all)
}
