//! Throwaway PostgreSQL clusters, and the configuration that points segmint at them.
//!
//! Clusters are real `pg_ctl` clusters on loopback ports, run as the `postgres` user
//! when the tests run as root (PostgreSQL refuses root). `initdb` and `CREATE DATABASE`
//! cost about a second, which every cluster of every test process would pay (nextest
//! runs each test in a process of its own), so they are done once into a template
//! data directory under the target directory, which each [`PgCluster::start`] copies
//! to a tmpfs. [`PgCluster::init`] still runs `initdb` for a cluster that needs its
//! own options.

use std::fs::File;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use segmint::config::{Config, DatabaseKind};
use segmint::store::postgres::PgStore;
use segmint::store::sqlite::SqliteStore;
use segmint::store::{OpenMode, SegmentStore};

use super::ChildGuard;

/// The directory holding `initdb`, `pg_ctl` and `psql`: the newest Debian version,
/// else the first on `PATH`.
pub fn pg_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let on_path = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .unwrap_or_default();
        let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .map(|d| {
                d.flatten()
                    .map(|e| {
                        let major = e.file_name().to_str().and_then(|v| v.parse().ok());
                        (major.unwrap_or(0), e.path().join("bin"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        debian.sort();
        let newest_first = debian.into_iter().rev().map(|(_, dir)| dir);
        newest_first
            .chain(on_path)
            .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
            .expect(
                "PostgreSQL server binaries (initdb, pg_ctl) not found: run scripts/test, which installs Debian's postgresql",
            )
    })
}

/// `(uid, gid)` of the `postgres` user when running as root, else `None`.
pub fn run_as() -> Option<(u32, u32)> {
    static USER: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    *USER.get_or_init(|| {
        let me = std::fs::metadata("/proc/self")
            .map(|m| m.uid())
            .unwrap_or(1);
        if me != 0 {
            return None;
        }
        let passwd = std::fs::read_to_string("/etc/passwd").expect("read /etc/passwd");
        let line = passwd.lines().find(|l| l.starts_with("postgres:")).expect(
            "running as root needs a `postgres` user (Debian's postgresql package creates it)",
        );
        let f: Vec<&str> = line.split(':').collect();
        Some((f[2].parse().unwrap(), f[3].parse().unwrap()))
    })
}

/// A PostgreSQL program (`initdb`, `pg_ctl`, `psql`) from [`pg_bin`], run as
/// [`run_as`], in the C locale whatever the environment says.
pub fn pg_command(program: &str) -> Command {
    let mut cmd = Command::new(pg_bin().join(program));
    if let Some((uid, gid)) = run_as() {
        cmd.uid(uid).gid(gid);
    }
    cmd.env_remove("PGDATA").env("LC_ALL", "C");
    cmd
}

/// The trimmed stdout of a command that must have succeeded; panics naming `what`
/// with its output otherwise.
pub fn check(what: &str, out: std::io::Result<Output>) -> String {
    let out = out.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The ports [`free_port`] hands out: below Linux's ephemeral range (32768 and up), so
/// that no connection's source port and no `bind` to port 0 takes one while a database
/// of a test is restarting on it.
const TEST_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A loopback port no other test process of this machine holds: each is reserved by a
/// lock on a file named after it (held until this process exits, so that a database
/// stopped and started again finds its port free) and checked free by binding it.
pub fn free_port() -> u16 {
    static HELD: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());
    let dir = std::env::temp_dir().join("segmint-test-ports");
    std::fs::create_dir_all(&dir).expect("the ports' lock directory");
    let span = TEST_PORTS.end - TEST_PORTS.start;
    let first = rand::random::<u16>() % span;
    for k in 0..span {
        let port = TEST_PORTS.start + (first + k) % span;
        let Ok(file) = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(port.to_string()))
        else {
            continue;
        };
        if file.try_lock().is_ok() && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            HELD.lock().unwrap_or_else(|e| e.into_inner()).push(file);
            return port;
        }
    }
    panic!("no free port in {TEST_PORTS:?}");
}

/// A temporary directory the cluster's user may write in (the log, the socket, a
/// data directory), prefixed `prefix`, in [`cluster_root`].
pub fn cluster_dir(prefix: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(cluster_root())
        .unwrap();
    if let Some((uid, gid)) = run_as() {
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
    }
    dir
}

/// Where clusters live: `/dev/shm` when it is a tmpfs with room to spare, else the
/// temporary directory. A cluster has some 1,300 files, and creating a file costs a
/// millisecond on some disks (measured on ext4 in a loaded VM: 1.2 ms, against 30 µs
/// on tmpfs): copying the template there took 1.6 s, nearly all that it saves.
fn cluster_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        /// Room left for other clusters and everything else: some 20 clusters.
        const ROOM: u64 = 1 << 30;
        let shm = Path::new("/dev/shm");
        let free = Command::new("stat")
            .args(["-f", "-c", "%T %a %S"])
            .arg(shm)
            .output()
            .ok()
            .and_then(|out| {
                let out = String::from_utf8(out.stdout).ok()?;
                let [kind, blocks, size] = out.split_whitespace().collect::<Vec<_>>()[..] else {
                    return None;
                };
                let free = blocks.parse::<u64>().ok()? * size.parse::<u64>().ok()?;
                (kind == "tmpfs").then_some(free)
            });
        if free.is_some_and(|free| free >= ROOM) {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    })
}

/// `initdb` options of every cluster, before a caller's own.
const INITDB: [&str; 6] = ["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"];

/// What a new cluster runs once `initdb` is done.
const CREATE_DATABASE: &str = "CREATE DATABASE segmint";

/// A throwaway PostgreSQL cluster with a `segmint` database, removed on drop.
pub struct PgCluster {
    /// Holds the log and the socket, and the data directory unless it is elsewhere.
    dir: tempfile::TempDir,
    /// The data directory.
    data: PathBuf,
    /// Server options (`-c name=value …`) added to the harness's.
    settings: String,
    /// The loopback port it listens on, kept across restarts.
    pub port: u16,
}

impl PgCluster {
    /// Starts a copy of the template cluster (see [`template`]).
    pub fn start() -> PgCluster {
        let dir = cluster_dir("segmint-pg-");
        let data = dir.path().join("data");
        check(
            "copy the template cluster",
            Command::new("cp")
                .arg("-a")
                .arg(template())
                .arg(&data)
                .output(),
        );
        let mut cluster = PgCluster {
            dir,
            data,
            settings: String::new(),
            port: free_port(),
        };
        cluster.first_start();
        cluster
    }

    /// Makes a cluster with its own `initdb`, for a test that needs `initdb` options
    /// (`initdb_args`, after the harness's), its data directory elsewhere than in
    /// `dir` (`data`, which must not exist yet, in a directory the cluster's user may
    /// write in), or server `settings` (`-c name=value …`, after the harness's). `dir`
    /// (from [`cluster_dir`]) holds the log and the socket. Starts it and creates the
    /// `segmint` database.
    pub fn init(
        dir: tempfile::TempDir,
        data: PathBuf,
        initdb_args: &[&str],
        settings: &str,
    ) -> PgCluster {
        check(
            "initdb",
            pg_command("initdb")
                .args(INITDB)
                .args(initdb_args)
                .arg("-D")
                .arg(&data)
                .output(),
        );
        let mut cluster = PgCluster {
            dir,
            data,
            settings: settings.to_owned(),
            port: free_port(),
        };
        cluster.first_start();
        cluster.psql_db("postgres", CREATE_DATABASE);
        cluster
    }

    /// The data directory.
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// The server's log.
    pub fn log(&self) -> PathBuf {
        self.dir.path().join("log")
    }

    /// Starts the cluster (again) on its port, with its data directory.
    pub fn start_again(&self) {
        if let Err(why) = self.try_start() {
            panic!("{why}");
        }
    }

    /// Starts a new cluster: as [`PgCluster::start_again`], but a port that another
    /// process took between [`free_port`] and the start (tests run in parallel, and
    /// the kernel hands out released ports as clients' source ports) is replaced by a
    /// new one, a few times.
    fn first_start(&mut self) {
        for _ in 0..4 {
            match self.try_start() {
                Ok(()) => return,
                Err(why) if why.contains("Address already in use") => self.port = free_port(),
                Err(why) => panic!("{why}"),
            }
        }
        self.start_again();
    }

    /// Stops the cluster and starts it again with `env` added to its processes'
    /// environment (libfaketime's, to shift its clock: see
    /// [`ShiftedClock::env`](super::clock::ShiftedClock::env)).
    pub fn restart_with_env(&self, env: &[(String, String)]) {
        check("pg_ctl stop", self.pg_ctl_stop(&["-m", "fast", "-w"]));
        if let Err(why) = self.try_start_with(env) {
            panic!("{why}");
        }
    }

    /// `pg_ctl start`; on failure, what it said and the end of the server's log.
    fn try_start(&self) -> Result<(), String> {
        self.try_start_with(&[])
    }

    /// [`PgCluster::try_start`] with `env` added to the environment.
    fn try_start_with(&self, env: &[(String, String)]) -> Result<(), String> {
        let opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=off -c full_page_writes=off -c max_connections=200 {}",
            self.port,
            self.dir.path().display(),
            self.settings,
        );
        let out = pg_command("pg_ctl")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(self.log())
            .args(["-o", &opts, "-w", "-t", "30", "start"])
            .output()
            .map_err(|e| format!("pg_ctl start: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        let log = std::fs::read_to_string(self.log()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        Err(format!(
            "pg_ctl start failed (port {}): {}\n{}\nserver log, last lines:\n{}",
            self.port,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ))
    }

    /// `pg_ctl stop` with `args`.
    fn pg_ctl_stop(&self, args: &[&str]) -> std::io::Result<Output> {
        pg_command("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(args)
            .arg("stop")
            .output()
    }

    /// Stops the cluster at once, as a crash would (`-m immediate`).
    pub fn stop(&self) {
        check("pg_ctl stop", self.pg_ctl_stop(&["-m", "immediate", "-w"]));
    }

    /// As [`PgCluster::stop`], for a drop guard that must not panic and must not go
    /// on while the server still runs: waits, and ignores a failure (the cluster may
    /// be stopped already).
    pub fn halt(&self) {
        let _ = self.pg_ctl_stop(&["-m", "immediate", "-w"]);
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
        self.psql(&row_sql(biz))
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
        let _ = self.pg_ctl_stop(&["-m", "immediate"]);
    }
}

/// The template data directory every [`PgCluster::start`] copies: `initdb` and the
/// `segmint` database, stopped cleanly so that a copy starts without recovery.
///
/// Made once under `CARGO_TARGET_TMPDIR` and kept across runs, named after everything
/// that shapes it, so that another PostgreSQL, user or recipe makes another. Test
/// processes start at once: the first takes a file lock and makes it under a
/// temporary name, renamed when complete, so that a process killed meanwhile leaves
/// no half template (the next maker removes its leftovers); the others wait on the
/// lock and find it made.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let name = template_name();
        let made = root.join(&name);
        let data = made.join("data");
        if !data.is_dir() {
            std::fs::create_dir_all(root).unwrap();
            let lock = File::create(root.join(format!("{name}.lock"))).unwrap();
            lock.lock().expect("lock the template cluster");
            if !data.is_dir() {
                let making = root.join(format!("{name}.making"));
                if making.exists() {
                    std::fs::remove_dir_all(&making).unwrap();
                }
                make_template(&making);
                std::fs::rename(&making, &made).unwrap();
            }
        }
        data
    })
}

/// `pg-template-MAJOR-HASH`, where the hash covers what shapes the template: the
/// programs and their version, the user owning the files and the recipe.
fn template_name() -> String {
    let version = check(
        "initdb --version",
        pg_command("initdb").arg("--version").output(),
    );
    let mut hash = DefaultHasher::new();
    (pg_bin(), &version, run_as(), INITDB, CREATE_DATABASE).hash(&mut hash);
    let major = version
        .split_whitespace()
        .find_map(|w| w.split('.').next()?.parse::<u32>().ok())
        .unwrap_or(0);
    format!("pg-template-{major}-{:016x}", hash.finish())
}

/// `initdb` and `CREATE DATABASE` into `making/data`, then a clean stop.
fn make_template(making: &Path) {
    std::fs::create_dir(making).unwrap();
    if let Some((uid, gid)) = run_as() {
        std::os::unix::fs::chown(making, Some(uid), Some(gid)).unwrap();
    }
    let cluster = PgCluster::init(
        cluster_dir("segmint-pg-template-"),
        making.join("data"),
        &[],
        "",
    );
    check(
        "pg_ctl stop -m fast",
        cluster.pg_ctl_stop(&["-m", "fast", "-w", "-t", "60"]),
    );
}

/// Configuration for `clusters` as databases `pg0, pg1, …` with classes `i mod N`,
/// short timeouts so that failures are seen quickly, and `extra` TOML on top (its
/// keys replace the defaults here).
pub fn config_toml(clusters: &[&PgCluster], extra: &str) -> String {
    let urls: Vec<String> = clusters.iter().map(|c| c.url()).collect();
    config_toml_urls(&urls, extra)
}

/// `max_id|version|step|delta|remainder` of `biz`'s row, as SQL any engine runs.
pub fn row_sql(biz: &str) -> String {
    format!(
        "SELECT max_id, version, step, delta, remainder FROM tiny_id_info WHERE biz_type = '{biz}'"
    )
}

/// As [`config_toml`], for databases at `urls` (PostgreSQL or `sqlite://` files).
pub fn config_toml_urls(urls: &[String], extra: &str) -> String {
    let named: Vec<(String, String)> = urls
        .iter()
        .enumerate()
        .map(|(i, url)| (format!("pg{i}"), url.clone()))
        .collect();
    config_toml_named(&named, extra)
}

/// As [`config_toml_urls`], with each database's name given beside its URL.
pub fn config_toml_named(databases: &[(String, String)], extra: &str) -> String {
    let n = databases.len();
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
    for (i, (name, url)) in databases.iter().enumerate() {
        toml.push_str(&format!(
            "[[databases]]\nname = \"{name}\"\nurl = \"{url}\"\ndelta = {n}\nremainder = {i}\n"
        ));
    }
    toml
}

pub fn config(clusters: &[&PgCluster], extra: &str) -> Config {
    Config::from_toml(&config_toml(clusters, extra)).expect("test configuration")
}

/// Database `i` of `config` as one bare [`SegmentStore`], without the checks of the
/// [`segmint::store::Store`] above it: for primitives the cluster never calls so.
/// An embedded file must exist already.
pub fn raw_store(config: &Config, i: usize) -> Box<dyn SegmentStore> {
    match &config.databases[i].kind {
        DatabaseKind::Postgres(pg) => {
            Box::new(PgStore::new(pg, 2, Duration::from_secs(5)).unwrap())
        }
        DatabaseKind::Sqlite(path) => {
            Box::new(SqliteStore::open(path, Duration::from_secs(5), OpenMode::Existing).unwrap())
        }
        DatabaseKind::MySql(my) => {
            Box::new(segmint::store::mysql::MyStore::new(my, 2, Duration::from_secs(5)).unwrap())
        }
    }
}

/// Which kind of database a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Postgres,
    Embedded,
    /// MariaDB, as the MySQL engine runs against it.
    MySql,
}

/// N databases of one kind, named `pg0, pg1, …` in their configuration, with SQL
/// access for checking and editing rows behind segmint's back.
pub struct Databases {
    /// PostgreSQL or embedded, for all of them.
    pub kind: Kind,
    /// How many databases.
    n: usize,
    /// The PostgreSQL clusters; none for other kinds.
    clusters: Vec<PgCluster>,
    /// The MariaDB servers; none for other kinds.
    servers: Vec<super::MariaServer>,
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
                Kind::Embedded | Kind::MySql => Vec::new(),
            },
            servers: match kind {
                Kind::MySql => (0..n).map(|_| super::MariaServer::start()).collect(),
                Kind::Postgres | Kind::Embedded => Vec::new(),
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
            Kind::MySql => self.servers.iter().map(super::MariaServer::url).collect(),
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
            Kind::MySql => self.servers[i].sql(sql),
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

    /// Whether database `i` holds `table` (a database no command migrated holds none).
    pub fn has_table(&self, i: usize, table: &str) -> bool {
        match self.kind {
            Kind::Postgres => {
                self.sql(i, &format!("SELECT to_regclass('{table}') IS NOT NULL")) == "t"
            }
            Kind::MySql => {
                self.sql(
                    i,
                    &format!(
                        "SELECT count(*) FROM information_schema.tables
                         WHERE table_schema = database() AND table_name = '{table}'"
                    ),
                ) == "1"
            }
            Kind::Embedded => {
                self.file(i).exists()
                    && self.sql(
                        i,
                        &format!("SELECT count(*) FROM sqlite_master WHERE name = '{table}'"),
                    ) == "1"
            }
        }
    }

    /// Restarts every PostgreSQL cluster on `clock`: their `now()` is then its time.
    pub fn shift_clocks(&self, clock: &super::clock::ShiftedClock) {
        assert_eq!(
            self.kind,
            Kind::Postgres,
            "only PostgreSQL clusters are restarted"
        );
        let env = clock.env(&super::clock::faketime_lib());
        for cluster in &self.clusters {
            cluster.restart_with_env(&env);
        }
    }

    /// The PostgreSQL cluster of database `i`.
    pub fn cluster(&self, i: usize) -> &PgCluster {
        &self.clusters[i]
    }

    /// The MariaDB server of database `i`.
    pub fn maria(&self, i: usize) -> &super::MariaServer {
        &self.servers[i]
    }

    /// Stops database `i` (PostgreSQL or MariaDB) at once, as a crash would.
    pub fn stop(&self, i: usize) {
        match self.kind {
            Kind::MySql => self.servers[i].stop(),
            _ => self.clusters[i].stop(),
        }
    }

    /// Starts database `i` again after [`Databases::stop`].
    pub fn start_again(&self, i: usize) {
        match self.kind {
            Kind::MySql => self.servers[i].start_again(),
            _ => self.clusters[i].start_again(),
        }
    }

    /// `max_id|version|step|delta|remainder` of a biz row on database `i`.
    pub fn row(&self, i: usize, biz: &str) -> String {
        self.sql(i, &row_sql(biz))
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

/// A session on the database at `url` that runs `sql` (taking a lock: `LOCK TABLE …`,
/// `SELECT … FOR UPDATE`) in a transaction it leaves open: the lock is held until the
/// session runs `ROLLBACK` or is dropped.
pub async fn hold(url: &str, sql: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    tokio::spawn(connection);
    client
        .batch_execute(&format!("BEGIN; {sql}"))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    client
}
