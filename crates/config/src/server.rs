//! The server's own keys: where it listens (`bind`, `operator_bind`), who may use the
//! operator routes (`operator_token`, `operator_token_file`), and the limits of one
//! HTTP request (`max_body_bytes`, `request_timeout_ms`).

use subtle::ConstantTimeEq;

use crate::biz::{TokenDigest, token_digest};
use crate::raw::RawSettings;
use crate::secret::read_secret_file;
use crate::{ConfigError, invalid};

/// Shortest operator token accepted: a guessable one would protect nothing.
pub const OPERATOR_TOKEN_MIN_LEN: usize = 16;

/// The token of the operator routes, kept only as its SHA-256 digest, so that no
/// `Debug`, log line or error can print it.
#[derive(Clone)]
pub struct OperatorToken(TokenDigest);

impl OperatorToken {
    /// Accepts a token of at least [`OPERATOR_TOKEN_MIN_LEN`] visible ASCII characters
    /// (it travels in an `Authorization` header, where spaces would split it).
    fn parse(token: &str) -> Result<OperatorToken, String> {
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("must be visible ASCII characters without spaces".into());
        }
        if token.len() < OPERATOR_TOKEN_MIN_LEN {
            return Err(format!(
                "must be at least {OPERATOR_TOKEN_MIN_LEN} characters (e.g. `openssl rand -hex 32`)"
            ));
        }
        Ok(OperatorToken(token_digest(token)))
    }

    /// Whether `presented` is the token. Digests are compared, in constant time, so
    /// neither the token's characters nor its length show in the time taken.
    pub fn matches(&self, presented: &str) -> bool {
        self.0[..].ct_eq(&token_digest(presented)[..]).into()
    }
}

impl std::fmt::Debug for OperatorToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OperatorToken(..)")
    }
}

/// Parses `value` of `key` as an `IP:port` address.
pub(crate) fn socket_addr(key: &str, value: &str) -> Result<std::net::SocketAddr, ConfigError> {
    value.parse().map_err(|_| {
        invalid(
            key,
            format!("`{value}` is not an address like 127.0.0.1:9999"),
        )
    })
}

/// Whether listening on `a` and `b` would take the same port of an interface. Port 0
/// picks a free port for each address, so two of them never collide.
pub(crate) fn collide(a: std::net::SocketAddr, b: std::net::SocketAddr) -> bool {
    let shared_ip = a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified();
    a.port() == b.port() && a.port() != 0 && shared_ip
}

/// The address `bind` of key `key`, checked to take no port of `others` (addresses
/// already taken, with their keys); `hint` ends the message of a collision.
pub(crate) fn own_address(
    key: &str,
    bind: &str,
    others: &[(&str, &str)],
    hint: &str,
) -> Result<(), ConfigError> {
    let address = socket_addr(key, bind)?;
    for (other_key, other) in others {
        // The others are checked before: one that does not parse is not reached.
        let Ok(other) = socket_addr(other_key, other) else {
            continue;
        };
        if collide(address, other) {
            return Err(invalid(
                key,
                format!("`{bind}` is the address of `{other_key}`; {hint}"),
            ));
        }
    }
    Ok(())
}

impl RawSettings {
    /// Checks `bind` and `operator_bind`, then reads the operator token. They are
    /// checked before anything else: Leaf's address is checked against these two.
    pub(crate) fn listeners(&self) -> Result<Option<OperatorToken>, ConfigError> {
        let bind = socket_addr("bind", &self.bind)?;
        if let Some(operator_bind) = &self.operator_bind
            && collide(socket_addr("operator_bind", operator_bind)?, bind)
        {
            return Err(invalid(
                "operator_bind",
                format!(
                    "`{operator_bind}` is the address of `bind`; name another port or interface, or leave operator_bind unset to serve the operator routes on `bind`"
                ),
            ));
        }
        self.operator_token()
    }

    /// The operator token, from `operator_token` or read from `operator_token_file`
    /// (its trailing line break trimmed, as secrets files are written). Neither the
    /// token nor the file's contents appear in an error.
    fn operator_token(&self) -> Result<Option<OperatorToken>, ConfigError> {
        let (key, token) = match (&self.operator_token, &self.operator_token_file) {
            (None, None) => return Ok(None),
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "operator_token_file",
                    "set either operator_token or operator_token_file, not both",
                ));
            }
            (Some(token), None) => ("operator_token", token.expose().to_owned()),
            (None, Some(path)) => (
                "operator_token_file",
                read_secret_file("operator_token_file", path)?,
            ),
        };
        OperatorToken::parse(&token)
            .map(Some)
            .map_err(|message| invalid(key, message))
    }

    /// Checks `request_timeout_ms` and `max_body_bytes`, the limits one request is
    /// held to.
    pub(crate) fn request_limits(&self) -> Result<(), ConfigError> {
        if self.request_timeout_ms == 0 {
            return Err(invalid("request_timeout_ms", "must be at least 1"));
        }
        if !(64..=1 << 20).contains(&self.max_body_bytes) {
            return Err(invalid("max_body_bytes", "must be between 64 and 1048576"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{Config, TWO, error};

    #[test]
    fn operator_keys_are_checked_and_the_token_never_shown() {
        let token = "0123456789abcdef-secret";
        let cfg = Config::from_toml(&format!("operator_token = \"{token}\"\n{TWO}")).unwrap();
        let operator = cfg.operator_token.as_ref().unwrap();
        assert!(operator.matches(token) && !operator.matches("0123456789abcdef-secreT"));
        assert!(!format!("{cfg:?}").contains("secret"), "{cfg:?}");

        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), format!("{token}\n")).unwrap();
        let from_file = format!("operator_token_file = {:?}\n{TWO}", file.path());
        let cfg = Config::from_toml(&from_file).unwrap();
        assert!(
            cfg.operator_token.unwrap().matches(token),
            "newline trimmed"
        );
        let both = format!("operator_token = \"{token}\"\n{from_file}");
        assert!(error(&both).contains("`operator_token_file`"));
        let msg = error(&format!("operator_token_file = \"/nonexistent/t\"\n{TWO}"));
        assert!(
            msg.contains("`operator_token_file`") && msg.contains("/nonexistent/t"),
            "{msg}"
        );
        std::fs::write(file.path(), "short-secret\n").unwrap();
        let msg = error(&from_file);
        assert!(
            msg.contains("`operator_token_file`") && msg.contains("16"),
            "{msg}"
        );

        for (value, not_shown) in [
            ("\"short-secret\"", "short-secret"),
            ("\"0123456789 secret\"", "secret"),
            ("1234567890123456789", "1234567890123456789"),
        ] {
            let msg = error(&format!("operator_token = {value}\n{TWO}"));
            assert!(msg.contains("operator_token"), "{msg}");
            assert!(!msg.contains(not_shown), "{msg}");
        }
    }

    #[test]
    fn operator_bind_is_an_address_other_than_bind() {
        let with = |bind: &str, operator: &str| {
            Config::from_toml(&format!(
                "bind = \"{bind}\"\noperator_bind = \"{operator}\"\n{TWO}"
            ))
        };
        let cfg = with("0.0.0.0:9999", "127.0.0.1:9998").unwrap();
        assert_eq!(cfg.operator_bind.as_deref(), Some("127.0.0.1:9998"));
        assert!(with("127.0.0.1:0", "127.0.0.1:0").is_ok(), "two free ports");
        assert!(with("127.0.0.1:9999", "10.0.0.1:9999").is_ok());
        for (bind, operator) in [
            ("127.0.0.1:9999", "127.0.0.1:9999"),
            ("0.0.0.0:9999", "127.0.0.1:9999"),
            ("127.0.0.1:9999", "0.0.0.0:9999"),
        ] {
            let msg = with(bind, operator).unwrap_err().to_string();
            assert!(msg.contains("`operator_bind`"), "{msg}");
        }
        let msg = with("127.0.0.1:9999", "localhost").unwrap_err().to_string();
        assert!(msg.contains("`operator_bind`"), "{msg}");
        assert!(Config::from_toml(TWO).unwrap().operator_bind.is_none());
    }

    #[test]
    fn request_limits_are_checked() {
        let msg = error(&format!("request_timeout_ms = 0\n{TWO}"));
        assert!(
            msg.contains("`request_timeout_ms`: must be at least 1"),
            "{msg}"
        );
        for bytes in [63, (1 << 20) + 1] {
            let msg = error(&format!("max_body_bytes = {bytes}\n{TWO}"));
            assert!(
                msg.contains("`max_body_bytes`: must be between 64 and 1048576"),
                "{msg}"
            );
        }
        let cfg = Config::from_toml(&format!("max_body_bytes = 64\n{TWO}")).unwrap();
        assert_eq!(cfg.max_body_bytes, 64);
    }
}
