//! The `[sequences]` table: how this server owns sections of sequence bizs (per-key
//! numbers that only go up) and where the others reach it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid};

/// Longest a section lease may be: a minute (a dead owner's sections wait it out).
const MAX_LEASE_MS: u64 = 60_000;

/// `[sequences]` as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawSequences {
    advertise: Option<String>,
    lease_ms: u64,
    grace_ms: u64,
}

impl Default for RawSequences {
    fn default() -> Self {
        RawSequences {
            advertise: None,
            lease_ms: 1_500,
            grace_ms: 250,
        }
    }
}

/// How this server takes part in serving sequence bizs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequencesConfig {
    /// The base URL other servers and clients reach this server at (`http://host:port`),
    /// written in the section rows it owns; `None`: `http://` and the address it
    /// listens on (`127.0.0.1` for an unspecified host).
    pub advertise: Option<String>,
    /// How long a section's lease lasts from a claim or renewal: an owner renews it
    /// every quarter of it and stops answering when it runs out; a dead owner's
    /// sections are taken over after it and the grace (the failover gap).
    pub lease: Duration,
    /// How long past a lease's end, by the database's clock, another server waits
    /// before taking the section: room for the clocks' rates to differ.
    pub grace: Duration,
}

impl Default for SequencesConfig {
    fn default() -> Self {
        // The defaults are valid: validation cannot fail.
        RawSequences::default()
            .validate()
            .unwrap_or_else(|_| unreachable!("the default [sequences] is valid"))
    }
}

impl SequencesConfig {
    /// How often an owner renews its leases and the servers rebalance the sections.
    pub fn renew_every(&self) -> Duration {
        self.lease / 4
    }
}

impl RawSequences {
    /// Validates `[sequences]`.
    pub(super) fn validate(self) -> Result<SequencesConfig, ConfigError> {
        if !(100..=MAX_LEASE_MS).contains(&self.lease_ms) {
            return Err(invalid(
                "sequences.lease_ms",
                format!("must be between 100 and {MAX_LEASE_MS} (a minute)"),
            ));
        }
        if self.grace_ms > self.lease_ms {
            return Err(invalid(
                "sequences.grace_ms",
                "must be at most sequences.lease_ms",
            ));
        }
        if let Some(url) = &self.advertise {
            let rest = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"));
            let ok = rest
                .is_some_and(|r| !r.is_empty() && !r.contains('/') && r.rsplit_once(':').is_some());
            if !ok {
                return Err(invalid(
                    "sequences.advertise",
                    format!("must be `http://host:port` (or https), got `{url}`"),
                ));
            }
        }
        Ok(SequencesConfig {
            advertise: self.advertise,
            lease: Duration::from_millis(self.lease_ms),
            grace: Duration::from_millis(self.grace_ms),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bad_keys() {
        let d = SequencesConfig::default();
        assert_eq!((d.lease.as_millis(), d.grace.as_millis()), (1_500, 250));
        assert_eq!(d.renew_every().as_millis(), 375);
        let bad = |raw: RawSequences| match raw.validate() {
            Err(ConfigError::Invalid { key, .. }) => key,
            other => panic!("{other:?}"),
        };
        let raw = RawSequences::default;
        assert_eq!(
            bad(RawSequences {
                lease_ms: 50,
                ..raw()
            }),
            "sequences.lease_ms"
        );
        assert_eq!(
            bad(RawSequences {
                grace_ms: 2_000,
                ..raw()
            }),
            "sequences.grace_ms"
        );
        for url in ["10.0.0.1:9999", "http://", "http://host", "http://h:1/x"] {
            assert_eq!(
                bad(RawSequences {
                    advertise: Some(url.into()),
                    ..raw()
                }),
                "sequences.advertise",
                "{url}"
            );
        }
        let ok = RawSequences {
            advertise: Some("http://10.0.0.5:9999".into()),
            ..raw()
        };
        assert!(ok.validate().is_ok());
    }
}
