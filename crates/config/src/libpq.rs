//! PostgreSQL connection strings read as libpq reads them.
//!
//! tokio-postgres knows `sslmode=disable|prefer|require` only and refuses the other TLS
//! keys, so they are taken out of the URL (`postgres://…?sslmode=verify-full&…`) or the
//! key=value string (`host=h sslmode=verify-full …`) here, with libpq's quoting and
//! percent-decoding, into [`TlsSettings`]; the rest is handed to tokio-postgres as written.

use std::path::PathBuf;

/// libpq's `sslmode`: whether TLS is used and how much of the server's certificate is
/// checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP only.
    Disable,
    /// TLS when the server offers it, else plain TCP (libpq's default). `allow` means
    /// this too: it only differs from `prefer` by trying plain TCP first.
    Prefer,
    /// TLS or no connection; the certificate is checked only when `sslrootcert` is given.
    Require,
    /// TLS, and the server's certificate must chain to `sslrootcert`.
    VerifyCa,
    /// As `verify-ca`, and the certificate must also name the host connected to.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, String> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!(
                    "invalid sslmode \"{other}\": use disable, allow, prefer, require, verify-ca or verify-full"
                ));
            }
        })
    }

    /// The libpq spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// The mode tokio-postgres negotiates with; verification is the connector's part.
    pub fn negotiation(self) -> tokio_postgres::config::SslMode {
        match self {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        }
    }
}

/// Where the CA certificates that vouch for the server come from (`sslrootcert`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// A PEM file of CA certificates.
    File(PathBuf),
    /// `sslrootcert=system`: the operating system's trusted CAs.
    System,
}

/// A client certificate and its private key (`sslcert`, `sslkey`), both PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert {
    /// The certificate chain presented to the server.
    pub cert: PathBuf,
    /// The private key of the first certificate.
    pub key: PathBuf,
}

/// The TLS part of one connection string, after libpq's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// The effective mode: `require` with a root certificate is `verify-ca`, and
    /// `sslrootcert=system` without a mode is `verify-full`.
    pub mode: SslMode,
    /// CAs to check the server's certificate against; none means no check (libpq's
    /// `prefer` and `require` without a root certificate).
    pub root_cert: Option<RootCert>,
    /// The certificate to authenticate with, if the server asks for one.
    pub client_cert: Option<ClientCert>,
    /// `sslcrl`: revoked server certificates (PEM), checked for the server's own one.
    pub crl: Option<PathBuf>,
}

/// The TLS keys as written, before libpq's rules are applied.
#[derive(Default)]
struct TlsKeys {
    mode: Option<SslMode>,
    root_cert: Option<String>,
    cert: Option<String>,
    key: Option<String>,
    crl: Option<String>,
}

impl TlsKeys {
    /// Takes `key=value` if it is one of the TLS keys; `false` for any other key.
    fn take(&mut self, key: &str, value: String) -> Result<bool, String> {
        let slot = match key {
            "sslmode" => {
                self.mode = Some(SslMode::parse(&value)?);
                return Ok(true);
            }
            "sslrootcert" => &mut self.root_cert,
            "sslcert" => &mut self.cert,
            "sslkey" => &mut self.key,
            "sslcrl" => &mut self.crl,
            _ => return Ok(false),
        };
        // libpq treats an empty value as not given.
        *slot = Some(value).filter(|v| !v.is_empty());
        Ok(true)
    }

    fn settings(self) -> Result<TlsSettings, String> {
        let root_cert = self.root_cert.map(|r| match r.as_str() {
            "system" => RootCert::System,
            _ => RootCert::File(r.into()),
        });
        let mode = match (self.mode, &root_cert) {
            (None, Some(RootCert::System)) => SslMode::VerifyFull,
            (Some(mode), Some(RootCert::System)) if mode != SslMode::VerifyFull => {
                return Err(format!(
                    "weak sslmode \"{}\" may not be used with sslrootcert=system (use \"verify-full\")",
                    mode.as_str()
                ));
            }
            (Some(SslMode::Require), Some(_)) => SslMode::VerifyCa,
            (mode, _) => mode.unwrap_or(SslMode::Prefer),
        };
        if mode == SslMode::Disable {
            return Ok(TlsSettings {
                mode,
                root_cert: None,
                client_cert: None,
                crl: None,
            });
        }
        if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) && root_cert.is_none() {
            return Err(format!(
                "sslmode={} needs sslrootcert: a PEM file of the CA certificates that signed the server's certificate, or `system`",
                mode.as_str()
            ));
        }
        let client_cert = match (self.cert, self.key) {
            (Some(cert), Some(key)) => Some(ClientCert {
                cert: cert.into(),
                key: key.into(),
            }),
            (None, None) => None,
            (Some(_), None) => return Err("sslcert needs sslkey, its private key".into()),
            (None, Some(_)) => return Err("sslkey needs sslcert, its certificate".into()),
        };
        if self.crl.is_some() && root_cert.is_none() {
            return Err("sslcrl needs sslrootcert: revocation is checked while verifying the server's certificate".into());
        }
        Ok(TlsSettings {
            mode,
            root_cert,
            client_cert,
            crl: self.crl.map(PathBuf::from),
        })
    }
}

/// Splits a PostgreSQL URL or key=value string into what tokio-postgres reads and the
/// TLS settings.
///
/// # Errors
/// A message naming the bad key or the syntax error; it never repeats the password.
pub fn parse(conninfo: &str) -> Result<(tokio_postgres::Config, TlsSettings), String> {
    let mut tls = TlsKeys::default();
    let rest = match ["postgresql://", "postgres://"]
        .iter()
        .find(|p| conninfo.starts_with(*p))
    {
        Some(_) => url_without_tls(conninfo, &mut tls)?,
        None => pairs_without_tls(conninfo, &mut tls)?,
    };
    let pg = rest.parse().map_err(|e: tokio_postgres::Error| {
        // The reason ("unknown option `x`") is in the source.
        let reason = std::error::Error::source(&e).map_or(String::new(), |s| format!(": {s}"));
        format!("not a PostgreSQL URL or key=value string: {e}{reason}")
    })?;
    Ok((pg, tls.settings()?))
}

/// The URL less its TLS query parameters, which go to `tls`. Like libpq, keys and
/// values are percent-decoded (a `+` stays a `+`), and JDBC's `ssl=true` means
/// `sslmode=require`.
fn url_without_tls(url: &str, tls: &mut TlsKeys) -> Result<String, String> {
    // The query starts at the first `?` after the credentials, as tokio-postgres splits.
    let after_credentials = url.find('@').map_or(0, |at| at + 1);
    let Some(query_at) = url[after_credentials..]
        .find('?')
        .map(|q| q + after_credentials)
    else {
        return Ok(url.to_string());
    };
    let mut kept = Vec::new();
    for param in url[query_at + 1..].split('&').filter(|p| !p.is_empty()) {
        let Some((key, value)) = param.split_once('=') else {
            return Err("a URL query parameter without `=`".into());
        };
        let (key, value) = (percent_decode(key)?, percent_decode(value)?);
        let taken = if key == "ssl" && value == "true" {
            tls.take("sslmode", "require".into())?
        } else {
            tls.take(&key, value)?
        };
        if !taken {
            kept.push(param);
        }
    }
    let base = &url[..query_at];
    Ok(if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    })
}

/// libpq's strict percent-decoding: every `%` starts two hex digits, and `%00` is
/// refused.
fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    for (i, _) in text.match_indices('%') {
        let hex = bytes.get(i + 1..i + 3).unwrap_or_default();
        if hex.len() != 2 || !hex.iter().all(u8::is_ascii_hexdigit) {
            return Err("invalid percent-encoding in a URL query parameter".into());
        }
        if hex == b"00" {
            return Err("forbidden %00 in a URL query parameter".into());
        }
    }
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| "a URL query parameter is not UTF-8 once percent-decoded".into())
}

/// The key=value string less its TLS pairs, which go to `tls`. Values are read as
/// libpq reads them: single-quoted or up to the next white space, with `\` escaping
/// the next character. The other pairs are kept exactly as written.
fn pairs_without_tls(text: &str, tls: &mut TlsKeys) -> Result<String, String> {
    let mut kept = Vec::new();
    let mut chars = text.char_indices().peekable();
    let skip_space = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
    };
    loop {
        skip_space(&mut chars);
        let Some(&(start, _)) = chars.peek() else {
            break;
        };
        let mut key = String::new();
        while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace() && *c != '=') {
            key.push(c);
        }
        skip_space(&mut chars);
        // The word is not repeated: it could be a password written without its key.
        if chars.next_if(|(_, c)| *c == '=').is_none() {
            return Err(format!(
                "missing \"=\" after the word at byte {start} (neither sqlite://PATH, a postgres:// URL nor key=value pairs)"
            ));
        }
        skip_space(&mut chars);
        let quoted = chars.next_if(|(_, c)| *c == '\'').is_some();
        let mut value = String::new();
        let mut closed = false;
        while let Some((_, c)) = chars.next_if(|(_, c)| quoted || !c.is_whitespace()) {
            match c {
                '\\' => value.extend(chars.next().map(|(_, c)| c)),
                '\'' if quoted => {
                    closed = true;
                    break;
                }
                c => value.push(c),
            }
        }
        if quoted && !closed {
            return Err(format!(
                "unterminated quoted value of \"{key}\" in the key=value string"
            ));
        }
        let end = chars.peek().map_or(text.len(), |(i, _)| *i);
        if !tls.take(&key, value)? {
            kept.push(&text[start..end]);
        }
    }
    Ok(kept.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls_of(conninfo: &str) -> TlsSettings {
        parse(conninfo).unwrap().1
    }

    #[test]
    fn url_keys_are_taken_out_and_decoded() {
        let (pg, tls) = parse(
            "postgres://u:p%3Fw@h:5433/db?sslmode=verify-full&application_name=x&sslrootcert=/c%20a/ca.crt",
        )
        .unwrap();
        assert_eq!(pg.get_password(), Some(&b"p?w"[..]));
        assert_eq!(pg.get_ports(), [5433]);
        assert_eq!(pg.get_application_name(), Some("x"));
        assert_eq!(pg.get_ssl_mode(), tokio_postgres::config::SslMode::Prefer);
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.root_cert, Some(RootCert::File("/c a/ca.crt".into())));
        // A `+` is not a space in libpq's URLs.
        let tls = tls_of("postgresql://h/db?sslmode=require&sslrootcert=/a+b.crt");
        assert_eq!(tls.root_cert, Some(RootCert::File("/a+b.crt".into())));
        assert_eq!(tls.mode, SslMode::VerifyCa, "require with a root cert");
        assert_eq!(tls_of("postgres://h/db?ssl=true").mode, SslMode::Require);
        assert_eq!(tls_of("postgres://h/db").mode, SslMode::Prefer);
        assert_eq!(
            tls_of("postgres://h/db?sslmode=allow").mode,
            SslMode::Prefer
        );
    }

    #[test]
    fn key_value_pairs_follow_libpq_quoting() {
        let (pg, tls) = parse(
            r"host=h  user = u password='it\'s a secret' dbname=d sslmode = verify-ca sslrootcert='/my certs/it\'s.crt' sslcert=/c.crt sslkey=/c\ k.key",
        )
        .unwrap();
        assert_eq!(pg.get_password(), Some(&b"it's a secret"[..]));
        assert_eq!(pg.get_user(), Some("u"));
        assert_eq!(pg.get_dbname(), Some("d"));
        assert_eq!(tls.mode, SslMode::VerifyCa);
        assert_eq!(
            tls.root_cert,
            Some(RootCert::File("/my certs/it's.crt".into()))
        );
        assert_eq!(
            tls.client_cert,
            Some(ClientCert {
                cert: "/c.crt".into(),
                key: "/c k.key".into()
            })
        );
    }

    #[test]
    fn libpq_rules_and_refusals() {
        let system = tls_of("host=h sslrootcert=system");
        assert_eq!(
            (system.mode, system.root_cert),
            (SslMode::VerifyFull, Some(RootCert::System))
        );
        let error = |s: &str| parse(s).unwrap_err();
        assert!(error("host=h sslrootcert=system sslmode=require").contains("weak sslmode"));
        assert!(error("host=h sslmode=verify-full").contains("needs sslrootcert"));
        assert!(error("postgres://h/db?sslmode=verify-ca").contains("needs sslrootcert"));
        assert!(error("host=h sslmode=on").contains("invalid sslmode \"on\""));
        assert!(error("host=h sslcert=/c.crt").contains("sslcert needs sslkey"));
        assert!(error("host=h sslcrl=/c.crl").contains("sslcrl needs sslrootcert"));
        assert!(error("postgres://h/db?sslmode=%zz").contains("percent-encoding"));
        let unknown = error("host=h sslpassword=x");
        assert!(unknown.contains("sslpassword"), "{unknown}");
        let bad = error("host=h hunter2 user=u");
        assert!(!bad.contains("hunter2"), "{bad}");
        assert!(error("host='h").contains("unterminated"));
        let off = tls_of("host=h sslmode=disable sslrootcert=/nowhere");
        assert_eq!((off.mode, off.root_cert), (SslMode::Disable, None));
    }
}
