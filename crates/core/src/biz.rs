//! Parsed request inputs: biz tags, batch sizes and tokens. The biz-name rule is shared
//! by the server and the client library; the token and duration parts are the server's.

use sha2::{Digest, Sha256};

/// Largest batch one request may ask for.
pub const MAX_BATCH: usize = 100_000;

/// Why an input was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("biz type must be 1 to 63 characters of letters, digits, '_', '-' or '.'")]
    BizTag,
    #[error("{name} must be an integer between 1 and {MAX_BATCH}, got `{value}`")]
    Batch { name: &'static str, value: String },
    #[error(
        "`{value}` is not a duration: give a number and a unit, e.g. 30s, 15m, 12h, 90d ({reason})"
    )]
    Duration { value: String, reason: String },
}

/// Longest token lifetime or grace period: far beyond any sensible one, and well
/// inside what both stores' timestamps hold.
pub const MAX_LIFETIME: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 86_400);

/// The name of an ID sequence, as stored in `tiny_id_info.biz_type`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BizTag(String);

impl BizTag {
    /// # Errors
    /// [`InputError::BizTag`] unless the tag is 1–63 characters of `[A-Za-z0-9_.-]`.
    pub fn parse(tag: &str) -> Result<BizTag, InputError> {
        let ok = (1..=63).contains(&tag.len())
            && tag
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
        if ok {
            Ok(BizTag(tag.to_owned()))
        } else {
            Err(InputError::BizTag)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name of the interim rows that issue this biz's periods before the period
    /// `until` (`order#20261201`): `#` is in no biz name a user gives, so it names no
    /// other biz.
    pub fn interim(&self, until: i64) -> BizTag {
        BizTag(format!("{}#{until}", self.0))
    }
}

impl std::fmt::Display for BizTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How many IDs one request asks for: `1..=MAX_BATCH`. Never silently capped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSize(usize);

impl BatchSize {
    /// Parses the `name` parameter; a missing one means 1.
    ///
    /// # Errors
    /// [`InputError::Batch`] for anything but an integer in `1..=MAX_BATCH`.
    pub fn parse(name: &'static str, value: Option<&str>) -> Result<BatchSize, InputError> {
        let Some(value) = value else {
            return Ok(BatchSize(1));
        };
        value
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_BATCH).contains(n))
            .map(BatchSize)
            .ok_or_else(|| InputError::Batch {
                name,
                value: value.chars().take(32).collect(),
            })
    }

    pub fn get(self) -> usize {
        self.0
    }
}

/// A token's lifetime or grace period: a duration such as `30s`, `15m`, `12h`, `90d`
/// (or `1h 30m`), at most [`MAX_LIFETIME`]; `0` is accepted and means none.
///
/// # Errors
/// [`InputError::Duration`] naming the value and why it is not one.
pub fn parse_duration(value: &str) -> Result<std::time::Duration, InputError> {
    let refused = |reason: String| InputError::Duration {
        value: value.to_owned(),
        reason,
    };
    let d = humantime::parse_duration(value.trim()).map_err(|e| refused(e.to_string()))?;
    if d > MAX_LIFETIME {
        return Err(refused("at most 100 years".into()));
    }
    Ok(d)
}

/// A token's lifetime from its creation: as [`parse_duration`], and at least a second
/// (a token that expires as it is made is of no use).
///
/// # Errors
/// [`InputError::Duration`] naming the value and why it is not a lifetime.
pub fn parse_lifetime(value: &str) -> Result<std::time::Duration, InputError> {
    match parse_duration(value)? {
        d if d.as_secs() == 0 => Err(InputError::Duration {
            value: value.to_owned(),
            reason: "a token's lifetime must be at least 1s".into(),
        }),
        d => Ok(d),
    }
}

/// A fresh random token: 32 random bytes, hex-encoded. Shown once, stored hashed.
pub fn generate_token() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// A token's SHA-256 digest: what a request's token is checked by.
pub type TokenDigest = [u8; 32];

/// The SHA-256 digest of `token`, computed for every request.
pub fn token_digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

/// What the databases store in place of a token: its SHA-256, hex-encoded. A leaked
/// table reveals no usable token, and lookups by hash leak no timing about the token.
pub fn hash_token(token: &str) -> String {
    hex::encode(token_digest(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn biz_tags() {
        assert!(BizTag::parse("order-v2.eu_1").is_ok());
        for bad in ["", "a b", "x;drop", "é", &"a".repeat(64)] {
            assert_eq!(BizTag::parse(bad), Err(InputError::BizTag), "{bad}");
        }
    }

    #[test]
    fn batch_sizes() {
        assert_eq!(BatchSize::parse("batchSize", None).unwrap().get(), 1);
        assert_eq!(
            BatchSize::parse("batchSize", Some("100000")).unwrap().get(),
            100_000
        );
        for bad in ["0", "-1", "100001", "abc", "", "1.5"] {
            assert!(BatchSize::parse("batchSize", Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        use std::time::Duration;
        let ok = [
            ("30s", 30),
            ("15m", 900),
            ("12h", 43_200),
            ("90d", 7_776_000),
            ("1h 30m", 5_400),
            ("0", 0),
            ("0s", 0),
        ];
        for (text, secs) in ok {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_secs(secs)),
                "{text}"
            );
        }
        for bad in ["", "90", "d", "-1d", "1 fortnight", "36600d"] {
            let e = parse_duration(bad).expect_err(bad).to_string();
            assert!(e.contains(&format!("`{bad}`")) && e.contains("90d"), "{e}");
        }
        assert_eq!(parse_lifetime("1s"), Ok(Duration::from_secs(1)));
        for zero in ["0", "0s", "500ms"] {
            let e = parse_lifetime(zero).expect_err(zero).to_string();
            assert!(e.contains("at least 1s"), "{e}");
        }
    }

    #[test]
    fn tokens_are_random_and_hashed() {
        let (a, b) = (generate_token(), generate_token());
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        assert_eq!(hash_token(&a).len(), 64);
        assert_ne!(hash_token(&a), a);
        assert_eq!(hash_token(&a), hash_token(&a));
        assert_eq!(hash_token(&a), hex::encode(token_digest(&a)));
        // SHA-256("abc"), FIPS 180-2 appendix B.1.
        assert_eq!(
            hash_token("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
