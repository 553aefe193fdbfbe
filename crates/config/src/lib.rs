//! Layered settings: a TOML file, then `SEGMINT_…` environment variables, validated
//! once at load so the rest of the code works with parsed types only.

// The core, under the names the configuration's modules use.
use segmint_core::{biz, segment, step};

use std::path::Path;
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use crate::biz::{TokenDigest, token_digest};
use crate::segment::Residue;
use crate::step::StepPolicy;

mod leaf;
mod libpq;
mod protocol;
mod snowflake;
pub mod tls;

pub use leaf::LeafConfig;
pub use libpq::{ClientCert, RootCert, SslMode, TlsSettings};
pub use protocol::Protocol;
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

/// The settings as written in the file and the environment, before validation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    bind: String,
    preload_percent: i64,
    fetch_timeout_ms: u64,
    wait_timeout_ms: u64,
    backoff_initial_ms: u64,
    backoff_max_ms: u64,
    catalog_refresh_ms: u64,
    pool_size: usize,
    workers: usize,
    adaptive_step: bool,
    step_target_secs: u64,
    step_max: i64,
    metrics_max_bizs: usize,
    max_body_bytes: usize,
    hedge_after_ms: u64,
    request_timeout_ms: u64,
    keep_alive_ms: u64,
    operator_bind: Option<String>,
    operator_token: Option<Secret>,
    operator_token_file: Option<std::path::PathBuf>,
    /// Optional in a file read alone, as every key of `[leaf]` has its default.
    #[serde(default)]
    leaf: leaf::RawLeaf,
    /// Optional, as every key of `[snowflake]` has its default.
    #[serde(default)]
    snowflake: snowflake::RawSnowflake,
    /// Optional, as every key of `[protocol]` has its default.
    #[serde(default)]
    protocol: protocol::RawProtocol,
    databases: Vec<RawDatabase>,
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
            protocol: protocol::RawProtocol::default(),
            databases: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDatabase {
    name: String,
    url: String,
    #[serde(default = "one")]
    delta: i64,
    #[serde(default)]
    remainder: i64,
    /// A file whose content (less trailing newlines) is the password.
    #[serde(default)]
    password_file: Option<std::path::PathBuf>,
    /// An environment variable holding the password.
    #[serde(default)]
    password_env: Option<String>,
}

/// A secret as read from the file or the environment: printed as `..` by `Debug`, and
/// refused without its value when it is not a string.
#[derive(Clone, Serialize)]
struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        // Serde's own type errors quote the value they found.
        match <figment::value::Value as Deserialize>::deserialize(d)? {
            figment::value::Value::String(_, text) => Ok(Secret(text)),
            _ => Err(serde::de::Error::custom(
                "must be a string (in quotes, in TOML)",
            )),
        }
    }
}

fn one() -> i64 {
    1
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
    /// Bizs with their own metric label; the rest share `_other`.
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
    /// The timings of the cluster protocol, shared by every server and command.
    pub protocol: Protocol,
    /// The databases, with pairwise disjoint residue classes.
    pub databases: Vec<DatabaseConfig>,
}

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

/// One database: where it is and which residue class it issues from.
#[derive(Clone)]
pub struct DatabaseConfig {
    /// Unique name used in logs, errors and metrics.
    pub name: String,
    /// Which engine, and how to reach it.
    pub kind: DatabaseKind,
    /// The residue class plain bizs get on this database.
    pub residue: Residue,
}

/// The engine behind one configured database, chosen by its URL's scheme.
#[derive(Clone)]
pub enum DatabaseKind {
    /// `postgres://…` or libpq key=value pairs.
    Postgres(Box<PgTarget>),
    /// `sqlite://path`: an embedded database file, relative to the working directory
    /// unless absolute (`sqlite:///var/lib/segmint/a.db`).
    Sqlite(std::path::PathBuf),
}

/// How to reach one PostgreSQL database.
#[derive(Clone)]
pub struct PgTarget {
    /// What tokio-postgres reads: host, user, password (whatever its source), options.
    pub config: tokio_postgres::Config,
    /// The TLS part of the connection string, after libpq's rules.
    pub tls: TlsSettings,
    /// Built once from `tls`, with its certificate files already read.
    pub connector: tokio_postgres_rustls::MakeRustlsConnect,
}

impl std::fmt::Debug for DatabaseConfig {
    /// Never prints the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseConfig")
            .field("name", &self.name)
            .field("location", &self.location())
            .field("residue", &self.residue)
            .finish()
    }
}

impl DatabaseConfig {
    /// `host:port/dbname` or the file path, safe to log.
    pub fn location(&self) -> String {
        match &self.kind {
            DatabaseKind::Postgres(target) => {
                let pg = &target.config;
                let host = pg
                    .get_hosts()
                    .first()
                    .map(|h| match h {
                        tokio_postgres::config::Host::Tcp(h) => h.clone(),
                        tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
                    })
                    .unwrap_or_default();
                let port = pg.get_ports().first().copied().unwrap_or(5432);
                let db = pg.get_dbname().unwrap_or("");
                format!("{host}:{port}/{db}")
            }
            DatabaseKind::Sqlite(path) => format!("sqlite:{}", path.display()),
        }
    }

    pub fn is_embedded(&self) -> bool {
        matches!(self.kind, DatabaseKind::Sqlite(_))
    }
}

/// Whether two embedded database paths name the same file, spelled differently
/// (`data/a.db`, `./data/a.db`, or absolute from the working directory).
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    fn normal(p: &std::path::Path) -> std::path::PathBuf {
        let absolute = match std::env::current_dir() {
            Ok(cwd) if p.is_relative() => cwd.join(p),
            _ => p.to_path_buf(),
        };
        absolute
            .components()
            .filter(|c| *c != std::path::Component::CurDir)
            .collect()
    }
    normal(a) == normal(b)
}

const DATABASE_NAME_RULE: &str = "must be non-empty and use only letters, digits, '-', '_' and '.'";

fn valid_database_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

impl Config {
    /// This configuration with one more database, `name` at `url`: the one `segmint db
    /// add` brings in. Its class comes from the layout the change writes, so it is not
    /// checked against the configured classes.
    ///
    /// # Errors
    /// A message naming the bad argument: a malformed name, one already configured, or
    /// a malformed URL.
    pub fn with_database(&self, name: &str, url: &str) -> Result<Config, String> {
        if !valid_database_name(name) {
            return Err(format!("NAME `{name}` {DATABASE_NAME_RULE}"));
        }
        if self.databases.iter().any(|d| d.name == name) {
            return Err(format!(
                "database \"{name}\" is configured already; `segmint db list` shows whether it is in the layout"
            ));
        }
        let kind = database_kind(url).map_err(|e| format!("URL: {e}"))?;
        let mut config = self.clone();
        config.databases.push(DatabaseConfig {
            name: name.to_owned(),
            kind,
            residue: Residue::ALL,
        });
        Ok(config)
    }
}

/// Parses a database URL: `sqlite://path` or a PostgreSQL URL / key=value string.
fn database_kind(url: &str) -> Result<DatabaseKind, String> {
    if let Some(path) = url.strip_prefix("sqlite://") {
        if path.is_empty() {
            return Err("`sqlite://` needs a file path, e.g. sqlite://data/segmint.db".into());
        }
        return Ok(DatabaseKind::Sqlite(path.into()));
    }
    let (config, tls) = libpq::parse(url)?;
    let connector = crate::tls::connector(&tls)?;
    Ok(DatabaseKind::Postgres(Box::new(PgTarget {
        config,
        tls,
        connector,
    })))
}

/// Where a database's password is read from, besides its URL.
enum PasswordSource<'a> {
    /// `password_file`: a file, as container secrets are mounted.
    File(&'a Path),
    /// `password_env`: an environment variable's name.
    Env(&'a str),
}

/// The password from `password_file` or `password_env`, if either is set: at most one
/// source per database, the URL's password included. Errors name the key and the file
/// or variable, never the password.
fn password(
    file: Option<&Path>,
    env: Option<&str>,
    kind: &DatabaseKind,
    key: impl Fn(&str) -> String,
) -> Result<Option<String>, ConfigError> {
    let (field, secret) = match (file, env) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => {
            return Err(invalid(
                key("password_env"),
                "give the password in one place: password_file or password_env",
            ));
        }
        (Some(path), None) => ("password_file", PasswordSource::File(path)),
        (None, Some(name)) => ("password_env", PasswordSource::Env(name)),
    };
    match kind {
        DatabaseKind::Sqlite(_) => {
            return Err(invalid(key(field), "is for PostgreSQL databases only"));
        }
        DatabaseKind::Postgres(pg) if pg.config.get_password().is_some() => {
            return Err(invalid(
                key(field),
                "the url holds a password too: give the password in one place",
            ));
        }
        DatabaseKind::Postgres(_) => {}
    }
    let password = match secret {
        PasswordSource::File(path) => read_secret_file(&key(field), path)?,
        // Not VarError's own text: for a value that is not UTF-8 it shows the value.
        PasswordSource::Env(name) => std::env::var(name).map_err(|e| {
            let why = match e {
                std::env::VarError::NotPresent => "is not set",
                std::env::VarError::NotUnicode(_) => "is not valid UTF-8",
            };
            invalid(key(field), format!("environment variable {name} {why}"))
        })?,
    };
    if password.is_empty() {
        return Err(invalid(key(field), "the password is empty"));
    }
    Ok(Some(password))
}

/// A secret from a file, as container secrets are mounted: its content less trailing
/// line breaks. An error names `key` and the file, never the content.
fn read_secret_file(key: &str, path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map(|text| text.trim_end_matches(['\n', '\r']).to_owned())
        .map_err(|e| invalid(key, format!("cannot read {}: {e}", path.display())))
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
        Self::from_figment(Figment::new().merge(Toml::file(path)))
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

    /// Whether every database is embedded (a single-node setup).
    pub fn all_embedded(&self) -> bool {
        self.databases.iter().all(DatabaseConfig::is_embedded)
    }

    /// Parses settings from TOML text (plus the environment), as [`Config::load`] does.
    ///
    /// # Errors
    /// [`ConfigError`] naming the offending key.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        Self::from_figment(Figment::new().merge(Toml::string(text)))
    }

    fn from_figment(file: Figment) -> Result<Config, ConfigError> {
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

/// The configuration of `extra` TOML and one PostgreSQL database, as the tests of the
/// configuration's tables load it; the error as text.
#[cfg(test)]
fn with_one_database(extra: &str) -> Result<Config, String> {
    Config::from_toml(&format!(
        "{extra}\n[[databases]]\nname = \"a\"\nurl = \"postgres://postgres@127.0.0.1:5432/segmint\"\n"
    ))
    .map_err(|e| e.to_string())
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}

/// Parses `value` of `key` as an `IP:port` address.
fn socket_addr(key: &str, value: &str) -> Result<std::net::SocketAddr, ConfigError> {
    value.parse().map_err(|_| {
        invalid(
            key,
            format!("`{value}` is not an address like 127.0.0.1:9999"),
        )
    })
}

/// Whether listening on `a` and `b` would take the same port of an interface. Port 0
/// picks a free port for each address, so two of them never collide.
fn collide(a: std::net::SocketAddr, b: std::net::SocketAddr) -> bool {
    let shared_ip = a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified();
    a.port() == b.port() && a.port() != 0 && shared_ip
}

impl RawSettings {
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
            (Some(Secret(token)), None) => ("operator_token", token.clone()),
            (None, Some(path)) => (
                "operator_token_file",
                read_secret_file("operator_token_file", path)?,
            ),
        };
        OperatorToken::parse(&token)
            .map(Some)
            .map_err(|message| invalid(key, message))
    }

    fn validate(self) -> Result<Config, ConfigError> {
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
        let operator_token = self.operator_token()?;
        let mut taken = vec![("bind", self.bind.as_str())];
        taken.extend(self.operator_bind.as_deref().map(|a| ("operator_bind", a)));
        let leaf = self.leaf.validate(&taken)?;
        let snowflake = self.snowflake.validate()?;
        let protocol = self.protocol.validate()?;
        let preload_percent = u8::try_from(self.preload_percent)
            .ok()
            .filter(|p| *p <= 100)
            .ok_or_else(|| invalid("preload_percent", "must be between 0 and 100"))?;
        for (key, ms) in [
            ("fetch_timeout_ms", self.fetch_timeout_ms),
            ("wait_timeout_ms", self.wait_timeout_ms),
            ("backoff_initial_ms", self.backoff_initial_ms),
            ("catalog_refresh_ms", self.catalog_refresh_ms),
            ("request_timeout_ms", self.request_timeout_ms),
        ] {
            if ms == 0 {
                return Err(invalid(key, "must be at least 1"));
            }
        }
        if !(64..=1 << 20).contains(&self.max_body_bytes) {
            return Err(invalid("max_body_bytes", "must be between 64 and 1048576"));
        }
        if self.step_target_secs == 0 {
            return Err(invalid("step_target_secs", "must be at least 1"));
        }
        if self.step_max < 1 {
            return Err(invalid("step_max", "must be at least 1"));
        }
        if self.backoff_max_ms < self.backoff_initial_ms {
            return Err(invalid(
                "backoff_max_ms",
                "must be at least backoff_initial_ms",
            ));
        }
        if self.pool_size == 0 {
            return Err(invalid("pool_size", "must be at least 1"));
        }
        if self.databases.is_empty() {
            return Err(invalid(
                "databases",
                "at least one [[databases]] entry is required",
            ));
        }
        let mut databases: Vec<DatabaseConfig> = Vec::with_capacity(self.databases.len());
        for (i, db) in self.databases.into_iter().enumerate() {
            let key = |field: &str| format!("databases[{i}].{field} (database \"{}\")", db.name);
            if !valid_database_name(&db.name) {
                return Err(invalid(key("name"), DATABASE_NAME_RULE));
            }
            if databases.iter().any(|d| d.name == db.name) {
                return Err(invalid(key("name"), "is used by another database"));
            }
            let residue = Residue::new(db.delta, db.remainder).map_err(|e| {
                let field = if db.delta < 1 { "delta" } else { "remainder" };
                invalid(key(field), e.to_string())
            })?;
            let mut kind = database_kind(&db.url).map_err(|e| invalid(key("url"), e))?;
            if let Some(password) = password(
                db.password_file.as_deref(),
                db.password_env.as_deref(),
                &kind,
                key,
            )? && let DatabaseKind::Postgres(pg) = &mut kind
            {
                pg.config.password(password);
            }
            if let DatabaseKind::Sqlite(path) = &kind
                && let Some(other) = databases
                    .iter()
                    .find(|d| matches!(&d.kind, DatabaseKind::Sqlite(p) if same_file(p, path)))
            {
                return Err(invalid(
                    key("url"),
                    format!(
                        "file {} is already database \"{}\"",
                        path.display(),
                        other.name
                    ),
                ));
            }
            if let Some(other) = databases.iter().find(|d| d.residue.overlaps(residue)) {
                return Err(invalid(
                    key("remainder"),
                    format!(
                        "residue class {residue} overlaps {} of database \"{}\": the two databases could issue the same ID",
                        other.residue, other.name
                    ),
                ));
            }
            databases.push(DatabaseConfig {
                name: db.name,
                kind,
                residue,
            });
        }
        Ok(Config {
            bind: self.bind,
            preload_percent,
            fetch_timeout: Duration::from_millis(self.fetch_timeout_ms),
            wait_timeout: Duration::from_millis(self.wait_timeout_ms),
            backoff_initial: Duration::from_millis(self.backoff_initial_ms),
            backoff_max: Duration::from_millis(self.backoff_max_ms),
            catalog_refresh: Duration::from_millis(self.catalog_refresh_ms),
            step: StepPolicy {
                adaptive: self.adaptive_step,
                target: Duration::from_secs(self.step_target_secs),
                max: self.step_max,
            },
            metrics_max_bizs: self.metrics_max_bizs,
            max_body_bytes: self.max_body_bytes,
            hedge_after: Duration::from_millis(self.hedge_after_ms),
            request_timeout: Duration::from_millis(self.request_timeout_ms),
            keep_alive: Duration::from_millis(self.keep_alive_ms),
            operator_bind: self.operator_bind,
            operator_token,
            leaf,
            snowflake,
            protocol,
            pool_size: self.pool_size,
            workers: self.workers,
            databases,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn error(text: &str) -> String {
        Config::from_toml(text).unwrap_err().to_string()
    }

    #[test]
    fn loads_two_databases_with_defaults() {
        let cfg = Config::from_toml(TWO).unwrap();
        assert_eq!(cfg.bind, "127.0.0.1:9999");
        assert_eq!(cfg.preload_percent, 20);
        assert_eq!(cfg.databases.len(), 2);
        assert_eq!(cfg.databases[1].residue, Residue::new(2, 1).unwrap());
        let shown = format!("{:?}", cfg.databases[0]);
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("127.0.0.1:5432/segmint"), "{shown}");
    }

    #[test]
    fn built_in_default_is_one_embedded_database() {
        let cfg = Config::from_toml(BUILT_IN).unwrap();
        assert!(cfg.all_embedded());
        assert_eq!(cfg.databases[0].location(), "sqlite:data/segmint.db");
        let mixed = TWO.replace(
            "postgres://postgres@127.0.0.1:5433/segmint",
            "sqlite:///tmp/b.db",
        );
        let cfg = Config::from_toml(&mixed).unwrap();
        assert!(!cfg.all_embedded() && cfg.databases[1].is_embedded());
    }

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
    fn names_the_offending_key() {
        let overlap = TWO.replace("remainder = 1", "remainder = 0");
        let msg = error(&overlap);
        assert!(msg.contains("databases[1].remainder"), "{msg}");
        assert!(msg.contains("\"a\""), "{msg}");
        let msg = error(&TWO.replace("remainder = 1", "remainder = 2"));
        assert!(
            msg.contains("databases[1].remainder") && msg.contains("\"b\""),
            "{msg}"
        );
        let msg = error(&TWO.replacen("delta = 2", "delta = 0", 1));
        assert!(msg.contains("databases[0].delta"), "{msg}");
        let msg = error(&TWO.replace("name = \"b\"", "name = \"a\""));
        assert!(msg.contains("databases[1].name"), "{msg}");
        let msg = error(&TWO.replacen("postgres://", "mysql://", 1));
        assert!(msg.contains("databases[0].url"), "{msg}");
        let same_file = TWO.replace(
            "postgres://postgres:secret@127.0.0.1:5432/segmint",
            "sqlite://x.db",
        );
        let msg = error(&same_file.replace(
            "postgres://postgres@127.0.0.1:5433/segmint",
            "sqlite://./x.db",
        ));
        assert!(
            msg.contains("databases[1].url") && msg.contains("x.db"),
            "{msg}"
        );
        let msg = error(&format!("preload_percent = 101\n{TWO}"));
        assert!(msg.contains("preload_percent"), "{msg}");
        let msg = error(&format!("bogus = 1\n{TWO}"));
        assert!(msg.contains("bogus"), "{msg}");
        assert!(error("").contains("databases"));
    }

    #[test]
    fn password_from_a_file_or_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret pass\n").unwrap();
        let one = |url: &str, extra: &str| {
            format!("[[databases]]\nname = \"a\"\nurl = \"{url}\"\n{extra}\n")
        };
        let pg_password = |text: &str| match &Config::from_toml(text).unwrap().databases[0].kind {
            DatabaseKind::Postgres(pg) => pg.config.get_password().map(<[u8]>::to_vec),
            DatabaseKind::Sqlite(_) => None,
        };
        let url = "postgres://u@h/db";
        let from_file = one(
            url,
            &format!("password_file = {:?}", file.display().to_string()),
        );
        assert_eq!(pg_password(&from_file), Some(b"s3cret pass".to_vec()));
        let path = std::env::var("PATH").unwrap();
        let from_env = one(url, "password_env = \"PATH\"");
        assert_eq!(pg_password(&from_env), Some(path.into_bytes()));

        let msg = error(&one("postgres://u:pw@h/db", "password_env = \"PATH\""));
        assert!(
            msg.contains("databases[0].password_env") && msg.contains("url"),
            "{msg}"
        );
        let msg = error(&format!("{from_file}password_env = \"PATH\""));
        assert!(msg.contains("databases[0].password_env"), "{msg}");
        let msg = error(&one(
            url,
            "password_env = \"SEGMINT_TEST_NO_SUCH_VARIABLE\"",
        ));
        assert!(
            msg.contains("password_env") && msg.contains("SEGMINT_TEST_NO_SUCH_VARIABLE"),
            "{msg}"
        );
        let msg = error(&one(url, "password_file = \"/nonexistent/pw\""));
        assert!(
            msg.contains("databases[0].password_file") && msg.contains("/nonexistent/pw"),
            "{msg}"
        );
        std::fs::write(&file, "\n").unwrap();
        let msg = error(&from_file);
        assert!(
            msg.contains("password_file") && msg.contains("empty"),
            "{msg}"
        );
        let msg = error(&one("sqlite://a.db", "password_env = \"PATH\""));
        assert!(
            msg.contains("password_env") && msg.contains("PostgreSQL"),
            "{msg}"
        );
    }

    #[test]
    fn tls_errors_name_the_url_and_the_file() {
        let one = |url: &str| format!("[[databases]]\nname = \"a\"\nurl = \"{url}\"\n");
        let msg = error(&one("postgres://u:hunter2@h/db?sslmode=verify-full"));
        assert!(msg.contains("databases[0].url (database \"a\")"), "{msg}");
        assert!(
            msg.contains("sslrootcert") && !msg.contains("hunter2"),
            "{msg}"
        );
        let msg = error(&one(
            "host=h sslmode=verify-ca sslrootcert=/nonexistent/ca.crt",
        ));
        assert!(
            msg.contains("databases[0].url") && msg.contains("/nonexistent/ca.crt"),
            "{msg}"
        );
        let msg = error(&one("postgres://h/db?sslmode=bogus"));
        assert!(
            msg.contains("databases[0].url") && msg.contains("bogus"),
            "{msg}"
        );
    }

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
}
