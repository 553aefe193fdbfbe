//! Layered settings: a TOML file, then `SEGMINT_…` environment variables, validated
//! once at load so the rest of the code works with parsed types only.
//!
//! The file's top level is one flat table, read whole by `raw.rs`; each subsystem's
//! module holds the checks and tests of its own keys: `server.rs` (addresses, operator
//! token, request limits), `cache.rs` (fetch timings, step, back-off), `database.rs`
//! (the `[[databases]]` and their classes), `secret.rs` (passwords and secret files),
//! and one module per table: `leaf.rs`, `snowflake.rs`, `sequences.rs`, `resp.rs`,
//! `protocol.rs`.

// The core, under the names the configuration's modules use.
use segmint_core::{biz, segment, step};

use std::path::Path;
use std::time::Duration;

use figment::Figment;
use figment::providers::{Format, Toml};

use crate::step::StepPolicy;

mod cache;
mod database;
mod leaf;
mod libpq;
mod protocol;
mod raw;
mod resp;
mod secret;
mod sequences;
mod server;
mod snowflake;
pub mod tls;

pub use cache::METRICS_MAX_BIZS_LIMIT;
pub use database::{BizTables, DatabaseConfig, DatabaseKind, MyTarget, PgTarget};
pub use leaf::LeafConfig;
pub use libpq::{ClientCert, RootCert, SslMode, TlsSettings};
pub use protocol::{BEATS_PER_SILENCE, Protocol};
pub use resp::RespConfig;
pub use sequences::SequencesConfig;
pub use server::{OPERATOR_TOKEN_MIN_LEN, OperatorToken};
pub use snowflake::SnowflakeConfig;

/// Default configuration file, relative to the working directory.
pub const DEFAULT_PATH: &str = "config/default.toml";

/// The configuration used when there is no file at all: one embedded database in
/// `data/`, so that `segmint serve` works on a fresh machine with nothing installed.
pub const BUILT_IN: &str = r#"
[[databases]]
name = "local"
url = "sqlite://data/segmint.db"
"#;

/// Why a configuration was refused. Every message names the offending key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration file {0} not found")]
    Missing(String),
    #[error("configuration: {0}")]
    Load(#[from] Box<figment::Error>),
    #[error("configuration key `{key}`: {message}")]
    Invalid { key: String, message: String },
}

/// Validated settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address the HTTP server listens on.
    pub bind: String,
    /// Share of a segment (percent) issued before the next one is fetched.
    pub preload_percent: u8,
    /// Longest a segment fetch may take on one database before it counts as down.
    pub fetch_timeout: Duration,
    /// Longest a request waits for an in-flight fetch when the cache is empty.
    pub wait_timeout: Duration,
    /// First back-off after a database fails; doubles on each further failure.
    pub backoff_initial: Duration,
    /// Cap on the back-off.
    pub backoff_max: Duration,
    /// How often bizs and tokens are re-read from the databases.
    pub catalog_refresh: Duration,
    /// Connections per database pool.
    pub pool_size: usize,
    /// HTTP worker threads; 0 means one per core.
    pub workers: usize,
    /// How the step of the cache's segments is chosen.
    pub step: StepPolicy,
    /// Bizs with metrics of their own at most, the busiest in use; the rest count
    /// under `_other`.
    pub metrics_max_bizs: usize,
    /// Least time a database round trip may go unanswered before a reservation is
    /// also tried on another database; zero turns hedging off.
    pub hedge_after: Duration,
    /// Largest request body accepted (a Tinyid form is a few dozen bytes).
    pub max_body_bytes: usize,
    /// Longest a client may take to send a request's head; then it is disconnected.
    pub request_timeout: Duration,
    /// How long an idle keep-alive connection is kept open; 0 disables keep-alive.
    pub keep_alive: Duration,
    /// Where the operator routes are served instead of `bind`; `None`: on `bind`.
    pub operator_bind: Option<String>,
    /// The token the operator routes require; `None`: they answer anyone.
    pub operator_token: Option<OperatorToken>,
    /// Leaf's routes: whether, where and for which bizs they are served.
    pub leaf: LeafConfig,
    /// Snowflake IDs: whether, for which bizs, and the timing of worker-ID leases.
    pub snowflake: SnowflakeConfig,
    /// Sequence bizs: where other servers reach this one, the timing of section leases.
    pub sequences: SequencesConfig,
    /// The Redis-protocol listener (off unless it has an address) and its key table.
    pub resp: RespConfig,
    /// The timings of the cluster protocol, shared by every server and command.
    pub protocol: Protocol,
    /// The databases, with pairwise disjoint residue classes.
    pub databases: Vec<DatabaseConfig>,
}

impl Config {
    /// Loads `path`, applies `SEGMINT_…` environment overrides and validates.
    ///
    /// # Errors
    /// [`ConfigError`] naming the missing file or the offending key.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        if !path.is_file() {
            return Err(ConfigError::Missing(path.display().to_string()));
        }
        raw::load(Figment::new().merge(Toml::file(path)))
    }

    /// Loads `path` if given; else [`DEFAULT_PATH`] if it exists; else the built-in
    /// embedded configuration ([`BUILT_IN`]).
    ///
    /// # Errors
    /// [`ConfigError`] naming the missing file or the offending key.
    pub fn load_or_default(path: Option<&Path>) -> Result<Config, ConfigError> {
        match path {
            Some(path) => Self::load(path),
            None if Path::new(DEFAULT_PATH).is_file() => Self::load(Path::new(DEFAULT_PATH)),
            None => Self::from_toml(BUILT_IN),
        }
    }

    /// Parses settings from TOML text (plus the environment), as [`Config::load`] does.
    ///
    /// # Errors
    /// [`ConfigError`] naming the offending key.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        raw::load(Figment::new().merge(Toml::string(text)))
    }
}

/// The biz names of the list `key` (`leaf.bizs`, `snowflake.bizs`), without repeats;
/// a bad name is refused naming `key[i]`.
fn biz_list(key: &str, names: &[String]) -> Result<Vec<crate::biz::BizTag>, ConfigError> {
    let mut bizs = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let tag = crate::biz::BizTag::parse(name)
            .map_err(|e| invalid(format!("{key}[{i}]"), e.to_string()))?;
        if !bizs.contains(&tag) {
            bizs.push(tag);
        }
    }
    Ok(bizs)
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}

/// Two PostgreSQL databases with disjoint classes, the first with a password in its
/// URL: the configuration most tests change one key of.
#[cfg(test)]
const TWO: &str = r#"
        [[databases]]
        name = "a"
        url = "postgres://postgres:secret@127.0.0.1:5432/segmint"
        delta = 2
        remainder = 0
        [[databases]]
        name = "b"
        url = "postgres://postgres@127.0.0.1:5433/segmint"
        delta = 2
        remainder = 1
    "#;

/// The message of the error `text` is refused with.
#[cfg(test)]
fn error(text: &str) -> String {
    Config::from_toml(text).unwrap_err().to_string()
}

/// The configuration of `extra` TOML and one PostgreSQL database, as the tests of the
/// configuration's tables load it; the error as text.
#[cfg(test)]
fn with_one_database(extra: &str) -> Result<Config, String> {
    Config::from_toml(&format!(
        "{extra}\n[[databases]]\nname = \"a\"\nurl = \"postgres://postgres@127.0.0.1:5432/segmint\"\n"
    ))
    .map_err(|e| e.to_string())
}
