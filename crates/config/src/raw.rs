//! The settings as read: figment's layers (the built-in defaults, the file, then the
//! environment) and the unvalidated struct they are extracted into.
//!
//! The file's top level is one flat table, so [`RawSettings`] holds the keys of every
//! subsystem: serde cannot flatten sections into it and still refuse unknown keys. Each
//! subsystem's module checks its own keys (`impl RawSettings` in `server.rs` and
//! `cache.rs`, the tables' and the databases' own raw structs); this module runs those
//! checks in order and assembles the validated [`Config`].

use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Serialized};
use serde::{Deserialize, Serialize};

use crate::database::RawDatabase;
use crate::secret::Secret;
use crate::{Config, ConfigError, database, invalid, leaf, protocol, resp, sequences, snowflake};

/// The settings as written in the file and the environment, before validation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSettings {
    pub(crate) bind: String,
    pub(crate) preload_percent: i64,
    pub(crate) fetch_timeout_ms: u64,
    pub(crate) wait_timeout_ms: u64,
    pub(crate) backoff_initial_ms: u64,
    pub(crate) backoff_max_ms: u64,
    pub(crate) catalog_refresh_ms: u64,
    pub(crate) pool_size: usize,
    pub(crate) workers: usize,
    pub(crate) adaptive_step: bool,
    pub(crate) step_target_secs: u64,
    pub(crate) step_max: i64,
    pub(crate) metrics_max_bizs: usize,
    pub(crate) max_body_bytes: usize,
    pub(crate) hedge_after_ms: u64,
    pub(crate) request_timeout_ms: u64,
    pub(crate) keep_alive_ms: u64,
    pub(crate) operator_bind: Option<String>,
    pub(crate) operator_token: Option<Secret>,
    pub(crate) operator_token_file: Option<std::path::PathBuf>,
    /// Optional in a file read alone, as every key of `[leaf]` has its default.
    #[serde(default)]
    pub(crate) leaf: leaf::RawLeaf,
    /// Optional, as every key of `[snowflake]` has its default.
    #[serde(default)]
    pub(crate) snowflake: snowflake::RawSnowflake,
    /// Optional, as every key of `[sequences]` has its default.
    #[serde(default)]
    pub(crate) sequences: sequences::RawSequences,
    /// Optional, as every key of `[resp]` has its default.
    #[serde(default)]
    pub(crate) resp: resp::RawResp,
    /// Optional, as every key of `[protocol]` has its default.
    #[serde(default)]
    pub(crate) protocol: protocol::RawProtocol,
    pub(crate) databases: Vec<RawDatabase>,
}

impl Default for RawSettings {
    fn default() -> Self {
        RawSettings {
            bind: "127.0.0.1:9999".into(),
            preload_percent: 20,
            fetch_timeout_ms: 3_000,
            wait_timeout_ms: 5_000,
            backoff_initial_ms: 500,
            backoff_max_ms: 10_000,
            catalog_refresh_ms: 5_000,
            pool_size: 8,
            workers: 0,
            adaptive_step: true,
            step_target_secs: 600,
            step_max: 1_000_000,
            metrics_max_bizs: 1_000,
            max_body_bytes: 8_192,
            hedge_after_ms: 50,
            request_timeout_ms: 5_000,
            keep_alive_ms: 5_000,
            operator_bind: None,
            operator_token: None,
            operator_token_file: None,
            leaf: leaf::RawLeaf::default(),
            snowflake: snowflake::RawSnowflake::default(),
            sequences: sequences::RawSequences::default(),
            resp: resp::RawResp::default(),
            protocol: protocol::RawProtocol::default(),
            databases: Vec::new(),
        }
    }
}

/// The built-in defaults, then `file`, then the `SEGMINT_…` environment, validated.
pub(crate) fn load(file: Figment) -> Result<Config, ConfigError> {
    let mut figment = Figment::from(Serialized::defaults(RawSettings::default()))
        .merge(file)
        .merge(Env::prefixed("SEGMINT_").ignore(&["config", "operator_token"]));
    // Taken as written: the environment provider would read `123…` as a number and
    // `"…"` as an escaped string.
    if let Some(token) = std::env::var_os("SEGMINT_OPERATOR_TOKEN") {
        let token = token.into_string().map_err(|_| {
            invalid(
                "operator_token (SEGMINT_OPERATOR_TOKEN)",
                "must be visible ASCII characters without spaces",
            )
        })?;
        figment = figment.merge(Serialized::default("operator_token", token));
    }
    let raw: RawSettings = figment.extract().map_err(Box::new)?;
    raw.validate()
}

impl RawSettings {
    /// Checks every key and assembles the validated whole.
    fn validate(mut self) -> Result<Config, ConfigError> {
        // Only the first bad key found is reported, so the subsystems' checks run in
        // one fixed order, interleaved where that order always was: the addresses and
        // the operator token, the tables, the cache's timings, the request limits, the
        // step and back-off, and last the databases.
        let operator_token = self.listeners()?;
        let mut taken = vec![("bind", self.bind.as_str())];
        taken.extend(self.operator_bind.as_deref().map(|a| ("operator_bind", a)));
        let leaf = std::mem::take(&mut self.leaf).validate(&taken)?;
        let leaf_bind = leaf.bind.clone().filter(|_| leaf.enabled);
        taken.extend(leaf_bind.as_deref().map(|a| ("leaf.bind", a)));
        let resp = std::mem::take(&mut self.resp).validate(&taken)?;
        let snowflake = std::mem::take(&mut self.snowflake).validate()?;
        let sequences = std::mem::take(&mut self.sequences).validate()?;
        let protocol = std::mem::take(&mut self.protocol).validate()?;
        let preload_percent = self.fetch_timings()?;
        self.request_limits()?;
        let step = self.step_and_backoff()?;
        let metrics_max_bizs = self.metrics_bound()?;
        let databases = database::validate(self.pool_size, std::mem::take(&mut self.databases))?;
        Ok(Config {
            bind: self.bind,
            preload_percent,
            fetch_timeout: Duration::from_millis(self.fetch_timeout_ms),
            wait_timeout: Duration::from_millis(self.wait_timeout_ms),
            backoff_initial: Duration::from_millis(self.backoff_initial_ms),
            backoff_max: Duration::from_millis(self.backoff_max_ms),
            catalog_refresh: Duration::from_millis(self.catalog_refresh_ms),
            step,
            metrics_max_bizs,
            max_body_bytes: self.max_body_bytes,
            hedge_after: Duration::from_millis(self.hedge_after_ms),
            request_timeout: Duration::from_millis(self.request_timeout_ms),
            keep_alive: Duration::from_millis(self.keep_alive_ms),
            operator_bind: self.operator_bind,
            operator_token,
            leaf,
            snowflake,
            sequences,
            resp,
            protocol,
            pool_size: self.pool_size,
            workers: self.workers,
            databases,
        })
    }
}

#[cfg(test)]
mod tests {
    use figment::providers::{Format, Toml};

    use super::*;
    use crate::{BUILT_IN, TWO, error};

    /// `config/default.toml` says it shows every top-level key with its default, and that
    /// without it the same embedded database is built in: the file, read alone, must be
    /// the built-in defaults plus [`BUILT_IN`], and must mention every key.
    #[test]
    fn default_toml_matches_the_built_in_defaults() {
        let text = include_str!("../../../config/default.toml");
        // Read alone, so a key missing from the file fails here instead of taking the
        // built-in value.
        let file: RawSettings = Figment::from(Toml::string(text)).extract().unwrap();
        let built_in: RawSettings = Figment::from(Serialized::defaults(RawSettings::default()))
            .merge(Toml::string(BUILT_IN))
            .extract()
            .unwrap();
        let file = serde_json::to_value(file).unwrap();
        let built_in = serde_json::to_value(built_in).unwrap();
        for (key, default) in built_in.as_object().unwrap() {
            assert_eq!(&file[key], default, "`{key}` in config/default.toml");
            let documented = text
                .lines()
                .any(|l| l.trim_start_matches("# ").starts_with(&format!("{key} = ")));
            assert!(
                documented || key == "databases",
                "config/default.toml does not show `{key}`"
            );
        }
        assert_eq!(file, built_in);
    }

    #[test]
    fn names_an_unknown_key() {
        let msg = error(&format!("bogus = 1\n{TWO}"));
        assert!(msg.contains("bogus"), "{msg}");
    }

    /// With two bad keys, the one checked first is reported: the subsystems' checks
    /// interleave, and moving one of them would change which key a message names.
    #[test]
    fn the_first_bad_key_in_check_order_is_reported() {
        for (keys, reported) in [
            (
                "operator_bind = \"nowhere\"\nrequest_timeout_ms = 0",
                "`operator_bind`",
            ),
            (
                "request_timeout_ms = 0\n[leaf]\nbind = \"nowhere\"",
                "`leaf.bind`",
            ),
            (
                "preload_percent = 101\n[protocol]\nsilent_ms = 0",
                "`protocol.silent_ms`",
            ),
            (
                "request_timeout_ms = 0\npreload_percent = 101",
                "`preload_percent`",
            ),
            (
                "request_timeout_ms = 0\ncatalog_refresh_ms = 0",
                "`catalog_refresh_ms`",
            ),
            (
                "step_max = 0\nrequest_timeout_ms = 0",
                "`request_timeout_ms`",
            ),
            ("step_max = 0\nmax_body_bytes = 1", "`max_body_bytes`"),
            ("pool_size = 0\nbackoff_max_ms = 1", "`backoff_max_ms`"),
        ] {
            let msg = error(&format!("{keys}\n{TWO}"));
            assert!(msg.contains(reported), "{keys}: {msg}");
        }
        let msg = error("pool_size = 0");
        assert!(msg.contains("`pool_size`"), "{msg}");
    }
}
