//! Test harness: throwaway PostgreSQL clusters and in-process segmint servers.
//!
//! Clusters are real `initdb`/`pg_ctl` clusters on loopback ports, run as the
//! `postgres` user when the tests run as root (PostgreSQL refuses root).
#![allow(dead_code)]

pub mod tls;
pub mod wait;

#[allow(unused_imports)] // Not every test binary waits.
pub use wait::eventually;

use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod memory;
pub mod operator;

use segmint::biz::BizTag;
use segmint::config::Config;
use segmint::segment::Residue;
use segmint::server::Application;
use segmint::store::Store;

/// The directory holding `initdb`, `pg_ctl` and `psql`.
fn pg_bin() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let mut debian: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    debian.sort();
    debian.reverse();
    for dir in debian.into_iter().chain(on_path) {
        if dir.join("initdb").is_file() && dir.join("pg_ctl").is_file() {
            return dir;
        }
    }
    panic!(
        "PostgreSQL server binaries (initdb, pg_ctl) not found: run scripts/test, which installs Debian's postgresql"
    );
}

/// `(uid, gid)` of the `postgres` user when running as root, else `None`.
fn run_as() -> Option<(u32, u32)> {
    let me = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1);
    if me != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").expect("read /etc/passwd");
    let line = passwd
        .lines()
        .find(|l| l.starts_with("postgres:"))
        .expect("running as root needs a `postgres` user (Debian's postgresql package creates it)");
    let f: Vec<&str> = line.split(':').collect();
    Some((f[2].parse().unwrap(), f[3].parse().unwrap()))
}

fn pg_command(program: &str) -> Command {
    let mut cmd = Command::new(pg_bin().join(program));
    if let Some((uid, gid)) = run_as() {
        cmd.uid(uid).gid(gid);
    }
    cmd.env_remove("PGDATA").env("LC_ALL", "C");
    cmd
}

fn check(what: &str, out: std::io::Result<Output>) -> String {
    let out = out.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A free loopback port (bound and released; good enough for tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A throwaway PostgreSQL cluster with a `segmint` database, removed on drop.
pub struct PgCluster {
    dir: tempfile::TempDir,
    pub port: u16,
}

impl PgCluster {
    pub fn start() -> PgCluster {
        let dir = tempfile::Builder::new()
            .prefix("segmint-pg-")
            .tempdir()
            .unwrap();
        if let Some((uid, gid)) = run_as() {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let data = dir.path().join("data");
        check(
            "initdb",
            pg_command("initdb")
                .args([
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--no-sync",
                    "-E",
                    "UTF8",
                    "-D",
                ])
                .arg(&data)
                .output(),
        );
        let cluster = PgCluster {
            dir,
            port: free_port(),
        };
        cluster.start_again();
        cluster.psql_db("postgres", "CREATE DATABASE segmint");
        cluster
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Starts the cluster (again) on its port, with its data directory.
    pub fn start_again(&self) {
        let opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=off -c full_page_writes=off -c max_connections=200",
            self.port,
            self.dir.path().display()
        );
        check(
            "pg_ctl start",
            pg_command("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .arg("-l")
                .arg(self.dir.path().join("log"))
                .args(["-o", &opts, "-w", "-t", "30", "start"])
                .output(),
        );
    }

    /// Stops the cluster at once, as a crash would (`-m immediate`).
    pub fn stop(&self) {
        check(
            "pg_ctl stop",
            pg_command("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .args(["-m", "immediate", "-w", "stop"])
                .output(),
        );
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/segmint", self.port)
    }

    /// Runs SQL on the `segmint` database; returns psql's unaligned output.
    pub fn psql(&self, sql: &str) -> String {
        self.psql_db("segmint", sql)
    }

    fn psql_db(&self, db: &str, sql: &str) -> String {
        check(
            "psql",
            pg_command("psql")
                .args([
                    "-X",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-At",
                    "-h",
                    "127.0.0.1",
                    "-U",
                    "postgres",
                ])
                .args(["-p", &self.port.to_string(), "-d", db, "-c", sql])
                .output(),
        )
    }

    /// Runs SQL in a background psql; the returned child is killed on drop.
    pub fn psql_background(&self, sql: &str) -> ChildGuard {
        ChildGuard(
            pg_command("psql")
                .args(["-X", "-q", "-h", "127.0.0.1", "-U", "postgres"])
                .args(["-p", &self.port.to_string(), "-d", "segmint", "-c", sql])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("spawn psql"),
        )
    }

    /// `max_id,version` of a biz row, to see whether anything changed.
    pub fn row(&self, biz: &str) -> String {
        self.psql(&format!("SELECT max_id, version, step, delta, remainder FROM tiny_id_info WHERE biz_type = '{biz}'"))
    }

    /// The version of a biz row: how many segments were reserved from it.
    pub fn version(&self, biz: &str) -> i64 {
        self.psql(&format!(
            "SELECT version FROM tiny_id_info WHERE biz_type = '{biz}'"
        ))
        .parse()
        .unwrap()
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = pg_command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "stop"])
            .output();
    }
}

/// A child process killed when dropped.
pub struct ChildGuard(pub std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl ChildGuard {
    /// Sends SIGTERM to this process alone (never a group) and waits for its exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        let sent = std::process::Command::new("kill")
            .args(["-s", "TERM", &self.0.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -s TERM {}", self.0.id());
        self.0.wait().expect("wait for the process").code()
    }
}

/// Configuration for `clusters` as databases `pg0, pg1, …` with classes `i mod N`,
/// short timeouts so that failures are seen quickly, and `extra` TOML on top (its
/// keys replace the defaults here).
pub fn config_toml(clusters: &[&PgCluster], extra: &str) -> String {
    let urls: Vec<String> = clusters.iter().map(|c| c.url()).collect();
    config_toml_urls(&urls, extra)
}

/// As [`config_toml`], for databases at `urls` (PostgreSQL or `sqlite://` files).
pub fn config_toml_urls(urls: &[String], extra: &str) -> String {
    let n = urls.len();
    let defaults = [
        ("bind", "\"127.0.0.1:0\""),
        ("workers", "2"),
        ("fetch_timeout_ms", "1000"),
        ("wait_timeout_ms", "3000"),
        ("backoff_initial_ms", "100"),
        ("backoff_max_ms", "400"),
        ("catalog_refresh_ms", "1000"),
    ];
    let mut toml = format!("{extra}\n");
    for (key, value) in defaults {
        if !extra
            .lines()
            .any(|l| l.trim_start().starts_with(&format!("{key} ")))
        {
            toml.push_str(&format!("{key} = {value}\n"));
        }
    }
    for (i, url) in urls.iter().enumerate() {
        toml.push_str(&format!(
            "[[databases]]\nname = \"pg{i}\"\nurl = \"{url}\"\ndelta = {n}\nremainder = {i}\n"
        ));
    }
    toml
}

/// Which kind of database a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Postgres,
    Embedded,
}

/// N databases of one kind, named `pg0, pg1, …` in their configuration, with SQL
/// access for checking and editing rows behind segmint's back.
pub struct Databases {
    pub kind: Kind,
    /// How many databases.
    n: usize,
    clusters: Vec<PgCluster>,
    /// Holds the embedded files.
    dir: tempfile::TempDir,
}

impl Databases {
    pub fn start(kind: Kind, n: usize) -> Databases {
        Databases {
            kind,
            n,
            clusters: match kind {
                Kind::Postgres => (0..n).map(|_| PgCluster::start()).collect(),
                Kind::Embedded => Vec::new(),
            },
            dir: tempfile::Builder::new()
                .prefix("segmint-db-")
                .tempdir()
                .unwrap(),
        }
    }

    fn file(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("db{i}.db"))
    }

    pub fn urls(&self) -> Vec<String> {
        match self.kind {
            Kind::Postgres => self.clusters.iter().map(PgCluster::url).collect(),
            Kind::Embedded => (0..self.n)
                .map(|i| format!("sqlite://{}", self.file(i).display()))
                .collect(),
        }
    }

    pub fn config(&self, extra: &str) -> Config {
        Config::from_toml(&config_toml_urls(&self.urls(), extra)).expect("test configuration")
    }

    /// Runs SQL on database `i`; rows as `a|b|c` lines, like `psql -At`.
    pub fn sql(&self, i: usize, sql: &str) -> String {
        match self.kind {
            Kind::Postgres => self.clusters[i].psql(sql),
            Kind::Embedded => {
                let conn = rusqlite::Connection::open(self.file(i)).unwrap();
                conn.busy_timeout(Duration::from_secs(5)).unwrap();
                let mut stmt = conn.prepare(sql).unwrap();
                let columns = stmt.column_count();
                let mut rows = stmt.query([]).unwrap();
                let mut lines = Vec::new();
                while let Some(row) = rows.next().unwrap() {
                    let fields: Vec<String> = (0..columns)
                        .map(|c| match row.get_ref(c).unwrap() {
                            rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                            rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into(),
                            rusqlite::types::ValueRef::Real(v) => v.to_string(),
                            _ => String::new(),
                        })
                        .collect();
                    lines.push(fields.join("|"));
                }
                lines.join("\n")
            }
        }
    }

    /// Stops PostgreSQL database `i` at once, as a crash would.
    pub fn stop(&self, i: usize) {
        self.clusters[i].stop();
    }

    /// Starts PostgreSQL database `i` again after [`Databases::stop`].
    pub fn start_again(&self, i: usize) {
        self.clusters[i].start_again();
    }

    /// `max_id|version|step|delta|remainder` of a biz row on database `i`.
    pub fn row(&self, i: usize, biz: &str) -> String {
        self.sql(i, &format!("SELECT max_id, version, step, delta, remainder FROM tiny_id_info WHERE biz_type = '{biz}'"))
    }

    /// Reservations made from the biz row on database `i`.
    pub fn version(&self, i: usize, biz: &str) -> i64 {
        self.sql(
            i,
            &format!("SELECT version FROM tiny_id_info WHERE biz_type = '{biz}'"),
        )
        .parse()
        .unwrap()
    }
}

pub fn config(clusters: &[&PgCluster], extra: &str) -> Config {
    Config::from_toml(&config_toml(clusters, extra)).expect("test configuration")
}

/// Migrates every database and adds `biz` with `step` (odd-only when `odd`), plus a
/// token for it. Returns the token.
pub async fn setup_biz(config: &Config, biz: &str, step: i64, odd: bool) -> String {
    let store = Store::connect(config).unwrap();
    for (db, r) in store.migrate().await {
        r.unwrap_or_else(|e| panic!("migrate {db}: {e}"));
    }
    let within = odd.then(|| Residue::new(2, 1).unwrap());
    let biz = BizTag::parse(biz).unwrap();
    store.add_biz(&biz, step, 1, within).await.unwrap();
    store.add_token(&biz, "test").await.unwrap().0
}

/// Adds a token for `biz` (which must exist).
pub async fn add_token(config: &Config, biz: &str) -> String {
    let store = Store::connect(config).unwrap();
    store
        .add_token(&BizTag::parse(biz).unwrap(), "test")
        .await
        .unwrap()
        .0
}

/// A segmint server running in this process on a random port.
pub struct TestApp {
    pub base: String,
    pub http: reqwest::Client,
    pub state: actix_web::web::Data<segmint::server::AppState>,
    handle: actix_web::dev::ServerHandle,
}

pub async fn spawn_app(config: Config) -> TestApp {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let app = Application::with_listener(config, listener)
        .await
        .expect("build app");
    run_app(app)
}

/// Runs `app` in this process; the handle serves its `bind` address.
pub fn run_app(app: Application) -> TestApp {
    let base = format!("http://127.0.0.1:{}", app.port());
    let handle = app.handle();
    let state = app.state();
    tokio::spawn(app.run_until(std::future::pending()));
    TestApp {
        base,
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
        state,
        handle,
    }
}

impl TestApp {
    /// GET `path` (with query) and return status and body text.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// Tinyid's `nextIdSimple` for `biz`: the body and the `X-Segmint-Error` header,
    /// if any.
    pub async fn next_id_simple(&self, biz: &str, token: &str) -> (String, Option<String>) {
        let r = self
            .http
            .get(format!(
                "{}/tinyid/id/nextIdSimple?bizType={biz}&token={token}",
                self.base
            ))
            .send()
            .await
            .unwrap();
        let error = r
            .headers()
            .get("x-segmint-error")
            .map(|v| v.to_str().unwrap().to_owned());
        (r.text().await.unwrap(), error)
    }

    /// GET `path` with a bearer token; status and parsed JSON body.
    pub async fn get_v1(&self, path: &str, token: Option<&str>) -> (u16, serde_json::Value) {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }

    /// `n` IDs through the v1 API; panics on any failure.
    pub async fn ids(&self, biz: &str, token: &str, n: usize) -> Vec<i64> {
        let (status, body) = self
            .get_v1(&format!("/v1/ids/{biz}?count={n}"), Some(token))
            .await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_value(body["ids"].clone()).unwrap()
    }

    pub async fn stop(&self) {
        self.handle.stop(true).await;
    }
}

/// Shares one value between tasks.
pub fn shared<T>(v: T) -> Arc<T> {
    Arc::new(v)
}

/// The path of the `segmint` binary built for these tests.
pub fn segmint_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_segmint"))
}

/// `segmint --config CONFIG serve` on `127.0.0.1:port` (through `SEGMINT_BIND`), with
/// stdin closed and no `SEGMINT_CONFIG` from the environment. The caller chooses the
/// log level and where the output goes.
pub fn serve_command(config: &Path, port: u16) -> Command {
    let mut cmd = Command::new(segmint_bin());
    cmd.arg("--config")
        .arg(config)
        .arg("serve")
        .env("SEGMINT_BIND", format!("127.0.0.1:{port}"))
        .env_remove("SEGMINT_CONFIG")
        .stdin(std::process::Stdio::null());
    cmd
}

/// Polls `GET {base}/healthz` until it answers with a 2xx status.
///
/// # Errors
/// When `exited` reports that the server process ended first, or after `limit`.
pub async fn wait_healthy(
    base: &str,
    limit: Duration,
    mut exited: impl FnMut() -> Option<ExitStatus>,
) -> Result<(), String> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("an HTTP client");
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(r) = http.get(format!("{base}/healthz")).send().await
            && r.status().is_success()
        {
            return Ok(());
        }
        if let Some(status) = exited() {
            return Err(format!("segmint serve exited before answering: {status}"));
        }
        if Instant::now() > deadline {
            return Err(format!("no answer on {base}/healthz within {limit:?}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// [`wait_healthy`] for a child process the caller owns.
pub async fn child_healthy(child: &mut Child, base: &str, limit: Duration) -> Result<(), String> {
    wait_healthy(base, limit, || child.try_wait().ok().flatten()).await
}

/// A real `segmint serve` process on a free loopback port, with its configuration and
/// its log (stderr) in a temporary directory; killed when dropped.
pub struct ServerProcess {
    pub child: ChildGuard,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Where the server's stderr goes.
    pub log: PathBuf,
    /// Holds the configuration and the log.
    _dir: tempfile::TempDir,
}

impl ServerProcess {
    /// Starts `segmint serve` with the configuration `toml` and waits until it answers.
    pub async fn start(toml: &str) -> ServerProcess {
        Self::start_with_env(toml, &[]).await
    }

    /// [`ServerProcess::start`] with the variables `env` set for the server.
    pub async fn start_with_env(toml: &str, env: &[(&str, &str)]) -> ServerProcess {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("segmint.toml");
        std::fs::write(&file, toml).unwrap();
        let log = dir.path().join("serve.log");
        let port = free_port();
        let mut child = ChildGuard(
            serve_command(&file, port)
                .envs(env.iter().copied())
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap(),
        );
        let base = format!("http://127.0.0.1:{port}");
        child_healthy(&mut child.0, &base, Duration::from_secs(20))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{e}; log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            });
        ServerProcess {
            child,
            base,
            log,
            _dir: dir,
        }
    }

    /// The server's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM and waits at most `limit` for the process to exit; returns how long
    /// it took and its status, or `None` if it was still running (it is then killed on
    /// drop).
    pub async fn terminate_within(&mut self, limit: Duration) -> Option<(Duration, ExitStatus)> {
        let pid = self.child.0.id();
        let sent = Command::new("kill")
            .args(["-s", "TERM", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -s TERM {pid}");
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.0.try_wait().expect("poll the server") {
                return Some((start.elapsed(), status));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}
pub mod by_kind;
pub mod cli;
pub mod http;
pub mod stop;
pub mod tokens;
