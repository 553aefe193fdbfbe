//! Token lifecycle tests: databases with a configuration file for the `segmint` CLI,
//! and the answers a token gets on both APIs.

use segmint::config::Config;

use super::cli::{CliRun, config_file, segmint_cli};
use super::http::{Target, bearer, next_id_simple, v1};
use super::{Databases, Kind, config_toml_urls};

/// Databases of one kind (two PostgreSQL servers, or one embedded file), migrated,
/// with the biz `order`, and a configuration file shared by the CLI and servers.
pub struct TokenSetup {
    /// The databases, for SQL behind segmint's back.
    pub dbs: Databases,
    /// The configuration the CLI reads, also given to in-process servers.
    pub config: Config,
    /// The configuration file.
    file: tempfile::NamedTempFile,
}

impl TokenSetup {
    /// Starts the databases; `extra` is TOML added to the test defaults.
    pub fn start(kind: Kind, extra: &str) -> TokenSetup {
        let n = match kind {
            Kind::Postgres => 2,
            Kind::Embedded => 1,
            Kind::MySql => 2,
        };
        let dbs = Databases::start(kind, n);
        let toml = config_toml_urls(&dbs.urls(), extra);
        let setup = TokenSetup {
            config: Config::from_toml(&toml).expect("test configuration"),
            dbs,
            file: config_file(&toml),
        };
        setup.ok(&["migrate"]);
        setup.ok(&["biz", "add", "order", "--step", "1000"]);
        setup
    }

    /// Runs `segmint --config FILE args…` with info logs on stderr.
    pub fn cli(&self, args: &[&str]) -> CliRun {
        segmint_cli(self.file.path(), args, &[("RUST_LOG", "info")])
    }

    /// As [`TokenSetup::cli`], for a command that must succeed.
    pub fn ok(&self, args: &[&str]) -> CliRun {
        let run = self.cli(args);
        assert!(run.ok(), "segmint {args:?} failed:\n{}", run.stderr);
        run
    }

    /// `segmint token add --biz order` with `extra` arguments; the token printed.
    pub fn add_token(&self, extra: &[&str]) -> String {
        let mut args = vec!["token", "add", "--biz", "order"];
        args.extend_from_slice(extra);
        self.ok(&args).stdout.trim().to_owned()
    }
}

/// The hash prefix `token list` shows for `token` and commands accept.
pub fn prefix(token: &str) -> String {
    segmint::biz::hash_token(token)[..segmint::store::HASH_PREFIX].to_owned()
}

/// What a token gets for `order` on both APIs: Tinyid's `nextIdSimple` (body and
/// error header) and v1 (status and JSON body).
#[derive(Debug, Clone, PartialEq)]
pub struct Answers {
    /// `nextIdSimple`'s body and `X-Segmint-Error` header.
    pub tinyid: (String, Option<String>),
    /// `/v1/ids/order`'s status and body.
    pub v1: (u16, serde_json::Value),
}

impl Answers {
    /// Both APIs issued an ID.
    pub fn issued(&self) -> bool {
        self.tinyid.1.is_none() && self.tinyid.0.parse::<i64>().is_ok() && self.v1.0 == 200
    }
}

/// Asks for one ID of `order` with `token` on both APIs.
pub async fn answers(app: &impl Target, token: &str) -> Answers {
    let tinyid = next_id_simple(app, "order", token).await;
    let v1 = v1(app, false, "/v1/ids/order?count=1", bearer(token)).await;
    Answers {
        tinyid: (tinyid.body, tinyid.error_header),
        v1: (v1.status, v1.json()),
    }
}

/// The lines of `stderr` logged for the audit trail.
pub fn audit_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("segmint::audit"))
        .collect()
}
