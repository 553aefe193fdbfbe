//! What libpq accepts and webpki does not: server certificates of X.509 version 1 (the
//! kind PostgreSQL's documented `openssl x509 -req … -CA root.crt` recipe makes with
//! OpenSSL 3.0 and older), and a host name found only in the certificate's Common Name.
//!
//! webpki checks every version 3 certificate; this module checks what it refuses, by
//! libpq's (OpenSSL's) rules:
//! - a version 1 certificate must chain to a root certificate of `sslrootcert`, directly
//!   or through the intermediates the server sent (each a CA, in its validity period),
//!   be in its own validity period, and, with `sslcrl`, be covered by a revocation list
//!   of its issuer that does not list it;
//! - the host name is matched against the subjectAltName entries of the host's kind (DNS
//!   names for a name, IP addresses for an address); when the certificate has none of
//!   them, against its Common Name, with libpq's wildcard rule (`*.example.com` matches
//!   one label).

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{
    CertificateDer, CertificateRevocationListDer, ServerName, SubjectPublicKeyInfoDer, UnixTime,
};
use rustls::{CertificateError, DigitallySignedStruct, Error};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;
use x509_parser::revocation_list::CertificateRevocationList;
use x509_parser::time::ASN1Time;
use x509_parser::x509::{SubjectPublicKeyInfo, X509Version};

/// The longest chain followed: the server's certificate and its intermediates.
const MAX_DEPTH: usize = 8;

/// A certificate parsed, or the error a handshake reports for it.
pub(super) fn parse<'a>(der: &'a CertificateDer<'_>) -> Result<X509Certificate<'a>, Error> {
    match X509Certificate::from_der(der.as_ref()) {
        Ok(([], cert)) => Ok(cert),
        _ => Err(Error::InvalidCertificate(CertificateError::BadEncoding)),
    }
}

/// Whether `cert` is of X.509 version 1 (webpki parses version 3 only).
pub(super) fn is_v1(cert: &X509Certificate<'_>) -> bool {
    cert.version() == X509Version::V1
}

/// Whether webpki refuses to read `cert` as a server's certificate: version 1, or a CA's
/// (libpq's documented self-signed server certificate is one).
pub(super) fn webpki_refuses(cert: &X509Certificate<'_>) -> bool {
    is_v1(cert) || cert.is_ca()
}

/// Checks a version 1 server certificate's chain to `roots` (and its revocation with
/// `crls`), as OpenSSL checks it for libpq.
pub(super) fn verify_chain(
    leaf: &X509Certificate<'_>,
    intermediates: &[CertificateDer<'_>],
    roots: &[CertificateDer<'static>],
    crls: &[CertificateRevocationListDer<'static>],
    now: UnixTime,
) -> Result<(), Error> {
    let now = i64::try_from(now.as_secs())
        .ok()
        .and_then(|secs| ASN1Time::from_timestamp(secs).ok())
        .ok_or(Error::InvalidCertificate(CertificateError::BadEncoding))?;
    in_validity(leaf, now)?;
    let roots: Vec<X509Certificate<'_>> = roots.iter().filter_map(|r| parse(r).ok()).collect();
    let intermediates: Vec<X509Certificate<'_>> =
        intermediates.iter().filter_map(|i| parse(i).ok()).collect();
    let mut current = leaf;
    let mut leaf_issuer: Option<&SubjectPublicKeyInfo<'_>> = None;
    for _ in 0..MAX_DEPTH {
        let signed_by = |issuer: &&X509Certificate<'_>| {
            issuer.subject().as_raw() == current.issuer().as_raw()
                && current.verify_signature(Some(issuer.public_key())).is_ok()
        };
        if let Some(root) = roots.iter().find(signed_by) {
            let issuer_key = leaf_issuer.unwrap_or(root.public_key());
            return not_revoked(leaf, issuer_key, crls);
        }
        let next = intermediates
            .iter()
            .filter(|i| i.is_ca() && in_validity(i, now).is_ok())
            .find(signed_by)
            .ok_or(Error::InvalidCertificate(CertificateError::UnknownIssuer))?;
        leaf_issuer.get_or_insert(next.public_key());
        current = next;
    }
    Err(Error::InvalidCertificate(CertificateError::UnknownIssuer))
}

fn in_validity(cert: &X509Certificate<'_>, now: ASN1Time) -> Result<(), Error> {
    let validity = cert.validity();
    if now < validity.not_before {
        Err(Error::InvalidCertificate(CertificateError::NotValidYet))
    } else if now > validity.not_after {
        Err(Error::InvalidCertificate(CertificateError::Expired))
    } else {
        Ok(())
    }
}

/// With revocation lists, one of the leaf's issuer (signed by it) must cover the leaf and
/// not list it: an unknown status is refused, as OpenSSL's CRL check refuses it.
fn not_revoked(
    leaf: &X509Certificate<'_>,
    issuer_key: &SubjectPublicKeyInfo<'_>,
    crls: &[CertificateRevocationListDer<'static>],
) -> Result<(), Error> {
    if crls.is_empty() {
        return Ok(());
    }
    let mut covered = false;
    for der in crls {
        let Ok((_, crl)) = CertificateRevocationList::from_der(der.as_ref()) else {
            continue;
        };
        if crl.issuer().as_raw() != leaf.issuer().as_raw()
            || crl.verify_signature(issuer_key).is_err()
        {
            continue;
        }
        covered = true;
        if crl
            .iter_revoked_certificates()
            .any(|revoked| revoked.raw_serial() == leaf.raw_serial())
        {
            return Err(Error::InvalidCertificate(CertificateError::Revoked));
        }
    }
    if covered {
        Ok(())
    } else {
        Err(Error::InvalidCertificate(
            CertificateError::UnknownRevocationStatus,
        ))
    }
}

/// libpq's host name check: the subjectAltName entries of the host's kind, or the Common
/// Name when the certificate has none of them.
pub(super) fn verify_name(cert: &X509Certificate<'_>, host: &ServerName<'_>) -> Result<(), Error> {
    let (name, ip) = match host {
        ServerName::DnsName(name) => (name.as_ref().to_string(), None),
        ServerName::IpAddress(ip) => {
            let ip = std::net::IpAddr::from(*ip);
            (ip.to_string(), Some(ip))
        }
        _ => (String::new(), None),
    };
    let sans: Vec<GeneralName<'_>> = match cert.subject_alternative_name() {
        Ok(Some(san)) => san.value.general_names.clone(),
        Ok(None) => Vec::new(),
        Err(_) => return Err(Error::InvalidCertificate(CertificateError::BadEncoding)),
    };
    let mut presented = Vec::new();
    for general in &sans {
        match (general, ip) {
            (GeneralName::DNSName(pattern), None) => {
                if name_matches(pattern, &name) {
                    return Ok(());
                }
                presented.push(format!("DnsName({pattern:?})"));
            }
            (GeneralName::IPAddress(bytes), Some(ip)) => {
                if ip_bytes(ip) == *bytes {
                    return Ok(());
                }
                presented.push(format!("IpAddress({bytes:?})"));
            }
            _ => {}
        }
    }
    if presented.is_empty() {
        // No name of the host's kind: the Common Name, of which libpq wants exactly one.
        let common_names: Vec<&str> = cert
            .subject()
            .iter_common_name()
            .filter_map(|cn| cn.as_str().ok())
            .collect();
        match common_names[..] {
            [cn] if ip.is_some() && cn == name => return Ok(()),
            [cn] if ip.is_none() && !name.is_empty() && name_matches(cn, &name) => return Ok(()),
            _ => {}
        }
        presented = common_names.iter().map(|cn| format!("CN {cn:?}")).collect();
    }
    Err(Error::InvalidCertificate(
        CertificateError::NotValidForNameContext {
            expected: host.to_owned(),
            presented,
        },
    ))
}

fn ip_bytes(ip: std::net::IpAddr) -> Vec<u8> {
    match ip {
        std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
        std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

/// libpq's match of a certificate name against the host: equal ignoring ASCII case, or
/// `*.rest` matching a host of one more label (`a.rest`, never `a.b.rest` or `.rest`).
/// A name holding a NUL byte never matches.
fn name_matches(pattern: &str, host: &str) -> bool {
    if pattern.contains('\0') || pattern.is_empty() {
        return false;
    }
    if pattern.eq_ignore_ascii_case(host) {
        return true;
    }
    let Some(rest) = pattern.strip_prefix('*') else {
        return false;
    };
    if !rest.starts_with('.') || rest.len() < 2 {
        return false;
    }
    match host.find('.') {
        Some(first_dot) if first_dot > 0 => host[first_dot..].eq_ignore_ascii_case(rest),
        _ => false,
    }
}

/// The handshake's signature checked with the public key of a certificate webpki refuses
/// to read ([`webpki_refuses`]).
pub(super) fn verify_handshake_signature(
    message: &[u8],
    cert: &X509Certificate<'_>,
    dss: &DigitallySignedStruct,
    algorithms: &WebPkiSupportedAlgorithms,
    tls13: bool,
) -> Result<HandshakeSignatureValid, Error> {
    let spki = SubjectPublicKeyInfoDer::from(cert.public_key().raw);
    if tls13 {
        return rustls::crypto::verify_tls13_signature_with_raw_key(
            message, &spki, dss, algorithms,
        );
    }
    let key = webpki::RawPublicKeyEntity::try_from(&spki)
        .map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))?;
    let candidates = algorithms
        .mapping
        .iter()
        .filter(|(scheme, _)| *scheme == dss.scheme)
        .flat_map(|(_, algs)| algs.iter());
    for alg in candidates {
        if key.verify_signature(*alg, message, dss.signature()).is_ok() {
            return Ok(HandshakeSignatureValid::assertion());
        }
    }
    Err(Error::InvalidCertificate(CertificateError::BadSignature))
}

#[cfg(test)]
mod tests {
    use super::name_matches;

    #[test]
    fn names_match_as_libpq_matches_them() {
        assert!(name_matches("localhost", "localhost"));
        assert!(name_matches("DB.Example.com", "db.example.COM"));
        assert!(name_matches("*.example.com", "db.example.com"));
        assert!(!name_matches("*.example.com", "a.db.example.com"));
        assert!(!name_matches("*.example.com", "example.com"));
        assert!(!name_matches("*.example.com", ".example.com"));
        assert!(!name_matches("*", "localhost"));
        assert!(!name_matches("*.", "a."));
        assert!(!name_matches("db*.example.com", "db1.example.com"));
        assert!(!name_matches("local\0host", "local"));
        assert!(!name_matches("", ""));
        assert!(!name_matches("other", "localhost"));
    }
}
