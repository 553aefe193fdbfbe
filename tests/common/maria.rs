//! Throwaway MariaDB servers, as [`super::pg`] has throwaway PostgreSQL clusters.
//!
//! A server is a real `mariadbd` on a loopback port, with its own socket, pid file,
//! log and data directory in a temporary directory, started with `--no-defaults` so
//! that no `my.cnf` of the machine changes it. It runs as the user running the tests;
//! as root it is told so (`--user=root`), which `mariadbd` otherwise refuses. Its data
//! directory is a copy of a template made once with `mariadb-install-db` (see
//! [`template`]), which holds the `segmint` database and a `root@127.0.0.1` account
//! without password and with every privilege, the account of [`MariaServer::url`].
//! The server is a child of the test process, killed when dropped.

use std::fs::File;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use super::{check, free_port, send_signal};

/// `mariadbd`: `$MARIADBD` (set by `scripts/test`), else the first on `PATH`, else
/// Debian's `/usr/sbin/mariadbd` (outside a normal user's `PATH`).
pub fn mariadbd() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var_os("MARIADBD")
            .map(PathBuf::from)
            .filter(|p| p.is_file())
            .or_else(|| program("mariadbd"))
            .expect(NOT_INSTALLED)
    })
}

const NOT_INSTALLED: &str =
    "MariaDB not found: run scripts/test, which installs Debian's mariadb-server";

/// A MariaDB program on `PATH`, else in `/usr/bin` or `/usr/sbin`.
fn program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    path.into_iter()
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// A MariaDB program (`mariadbd`, `mariadb`, `mariadb-admin`, `mariadb-install-db`)
/// with `--no-defaults` (which must come first), in the C locale, without the
/// `MYSQL_*` variables that would point a client elsewhere.
pub fn maria_command(name: &str) -> Command {
    let path = if name == "mariadbd" {
        mariadbd().to_path_buf()
    } else {
        program(name).unwrap_or_else(|| panic!("{name}: {NOT_INSTALLED}"))
    };
    let mut cmd = Command::new(path);
    cmd.arg("--no-defaults").env("LC_ALL", "C");
    for var in [
        "MYSQL_PWD",
        "MYSQL_HOST",
        "MYSQL_TCP_PORT",
        "MYSQL_UNIX_PORT",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Whether the tests run as root, when `mariadbd` needs `--user=root`.
fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Server options that shape the files of a data directory, the same for the
/// template's `mariadb-install-db` and every start: a start with another redo log size
/// would rewrite the log. 8 MB rather than the default 96 MB, each copy being in memory.
const SHAPE: [&str; 2] = [
    "--innodb-log-file-size=8M",
    "--character-set-server=utf8mb4",
];

/// Server options of every start, after [`SHAPE`] (the socket, port and paths come
/// from [`MariaServer`]). A small buffer pool: many servers run at once.
const SETTINGS: [&str; 5] = [
    "--bind-address=127.0.0.1",
    "--skip-name-resolve",
    "--innodb-flush-log-at-trx-commit=1",
    "--innodb-buffer-pool-size=16M",
    "--max-connections=200",
];

/// What `mariadb-install-db` runs once the system tables are made, in bootstrap mode
/// (without grant checks until `FLUSH PRIVILEGES` loads them). `root@127.0.0.1`
/// exists already (`--auth-root-authentication-method=normal`); made and granted here
/// so that the template does not depend on that.
const INIT_SQL: &str = "FLUSH PRIVILEGES;
CREATE DATABASE segmint CHARACTER SET utf8mb4;
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
";

/// How long a server may take to accept connections (many start at once on a loaded
/// machine; one alone takes some 0.1 s).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A throwaway MariaDB server with a `segmint` database, killed and removed on drop.
pub struct MariaServer {
    /// Holds the log, the socket, the pid file and the data directory.
    dir: tempfile::TempDir,
    /// The data directory.
    data: PathBuf,
    /// The loopback port it listens on, kept across restarts.
    pub port: u16,
    /// The running `mariadbd`, if any.
    server: Mutex<Option<Child>>,
    /// Options of every start after [`SETTINGS`] ([`MariaServer::start_with`]).
    extra: Vec<String>,
}

impl MariaServer {
    /// Starts a copy of the template data directory (see [`template`]).
    pub fn start() -> MariaServer {
        MariaServer::start_with(&[])
    }

    /// As [`MariaServer::start`], with more server options (`--ssl-cert=…`), given after
    /// the usual ones at this start and every start again.
    pub fn start_with(options: &[&str]) -> MariaServer {
        let dir = server_dir();
        let data = dir.path().join("data");
        MariaServer::start_at(dir, data, options)
    }

    /// As [`MariaServer::start_with`], with the data directory at `data` (which must not
    /// exist; its parent must): on a file system of its own, for a disk-full fault. The
    /// log, socket and pid file stay in the server's temporary directory.
    pub fn start_in(data: PathBuf, options: &[&str]) -> MariaServer {
        MariaServer::start_at(server_dir(), data, options)
    }

    fn start_at(dir: tempfile::TempDir, data: PathBuf, options: &[&str]) -> MariaServer {
        check(
            "copy the template MariaDB data directory",
            Command::new("cp")
                .arg("-a")
                .arg(template())
                .arg(&data)
                .output(),
        );
        let mut server = MariaServer {
            dir,
            data,
            port: free_port(),
            server: Mutex::new(None),
            extra: options.iter().map(|o| (*o).to_owned()).collect(),
        };
        server.first_start();
        server
    }

    /// `mysql://root@127.0.0.1:PORT/segmint`: the `segmint` database as the
    /// all-privileged `root@127.0.0.1`, without password.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/segmint", self.port)
    }

    /// The data directory.
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// The server's log (`--log-error`, and what it writes on stdout and stderr).
    pub fn log(&self) -> PathBuf {
        self.dir.path().join("mariadbd.log")
    }

    /// The server's Unix socket (as root, it logs in as `root@localhost`).
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    /// The process ID of the running `mariadbd`; `None` when stopped.
    pub fn pid(&self) -> Option<u32> {
        self.child().as_ref().map(Child::id)
    }

    /// Starts the server (again) on its port, with its data directory and settings.
    pub fn start_again(&self) {
        if let Err(why) = self.try_start() {
            panic!("{why}");
        }
    }

    /// Starts a new server: as [`MariaServer::start_again`], but a port that another
    /// process took between [`free_port`] and the start (tests run in parallel, and the
    /// kernel hands out released ports as clients' source ports) is replaced by a new
    /// one, a few times.
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

    /// Spawns `mariadbd` and waits until it answers on its socket (its own: another
    /// server may have taken the port, which would answer on TCP); on failure, why and
    /// the end of the log since this start.
    fn try_start(&self) -> Result<(), String> {
        let mut slot = self.child();
        if let Some(child) = slot.as_mut()
            && child.try_wait().ok().flatten().is_none()
        {
            return Err(format!(
                "MariaDB on port {} is running already (pid {})",
                self.port,
                child.id()
            ));
        }
        *slot = None;
        let log_path = self.log();
        let since = std::fs::metadata(&log_path).map_or(0, |m| m.len());
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("open {}: {e}", log_path.display()))?;
        let stderr = log
            .try_clone()
            .map_err(|e| format!("open {}: {e}", log_path.display()))?;
        let dir = self.dir.path();
        let mut cmd = maria_command("mariadbd");
        if is_root() {
            cmd.arg("--user=root");
        }
        cmd.arg(format!("--datadir={}", self.data.display()))
            .arg(format!("--port={}", self.port))
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!("--pid-file={}", dir.join("pid").display()))
            // Its temporary tables (information_schema's among them) in its own
            // directory. With many servers on one /tmp, a migration's reads of
            // information_schema failed about one run in three ("Error on delete of
            // '/tmp/#sql-temptable-…' (Errcode: 2)"); in six runs since, none did.
            .arg(format!("--tmpdir={}", dir.display()))
            .arg(format!("--log-error={}", log_path.display()))
            .args(SHAPE)
            .args(SETTINGS)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr);
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", mariadbd().display()))?;
        let child = slot.insert(child);
        let failed = |why: String| {
            let log = std::fs::read(&log_path).unwrap_or_default();
            let log = String::from_utf8_lossy(log.get(since as usize..).unwrap_or_default());
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            format!(
                "MariaDB on port {} (data {}): {why}\nserver log, last lines:\n{}",
                self.port,
                self.data.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait().map_err(|e| failed(e.to_string()))? {
                *slot = None;
                return Err(failed(format!("mariadbd exited at start: {status}")));
            }
            if self.socket().exists() && self.ping() {
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                *slot = None;
                return Err(failed(format!(
                    "not accepting connections after {START_TIMEOUT:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the server answers `mariadb-admin ping` on its socket.
    fn ping(&self) -> bool {
        maria_command("mariadb-admin")
            .args(["--user=root", "--protocol=socket", "--connect-timeout=5"])
            .arg(format!("--socket={}", self.socket().display()))
            .arg("ping")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn child(&self) -> MutexGuard<'_, Option<Child>> {
        self.server.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Kills the server (SIGKILL), as a crash would, and waits until it is gone;
    /// panics when it is not running.
    pub fn stop(&self) {
        let mut child = self
            .child()
            .take()
            .unwrap_or_else(|| panic!("stop MariaDB on port {}: not running", self.port));
        child
            .kill()
            .unwrap_or_else(|e| panic!("kill MariaDB on port {}: {e}", self.port));
        child
            .wait()
            .unwrap_or_else(|e| panic!("wait for MariaDB on port {}: {e}", self.port));
    }

    /// As [`MariaServer::stop`], for a drop guard that must not panic and must not go
    /// on while the server still runs: waits, and ignores that it was stopped already.
    pub fn halt(&self) {
        if let Some(mut child) = self.child().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server cleanly (SIGTERM: running statements are ended, InnoDB is
    /// flushed) and waits until it is gone; panics when it is not running or takes
    /// more than a minute.
    pub fn shutdown(&self) {
        let mut slot = self.child();
        let child = slot
            .as_mut()
            .unwrap_or_else(|| panic!("shut MariaDB on port {} down: not running", self.port));
        send_signal(child.id(), "TERM").unwrap_or_else(|e| panic!("{e}"));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => panic!(
                    "MariaDB on port {} still runs a minute after SIGTERM",
                    self.port
                ),
                Err(e) => panic!("wait for MariaDB on port {}: {e}", self.port),
            }
        }
        *slot = None;
    }

    /// Runs SQL (one or more statements) on the `segmint` database with the `mariadb`
    /// client, over TCP as `root@127.0.0.1` (the account of [`MariaServer::url`]).
    /// Returns the rows of every result set as `a|b|c` lines, like `psql -At`, with
    /// NULL as an empty field; panics with the client's error otherwise.
    pub fn sql(&self, sql: &str) -> String {
        let xml = check(
            &format!("SQL on MariaDB at port {}: {sql}", self.port),
            self.client().arg("--xml").args(["--execute", sql]).output(),
        );
        rows_from_xml(&xml).join("\n")
    }

    /// The `mariadb` client on the `segmint` database, over TCP as `root@127.0.0.1`;
    /// the caller adds what to run (`--execute SQL`) and how.
    pub fn client(&self) -> Command {
        let mut cmd = maria_command("mariadb");
        cmd.args([
            "--user=root",
            "--host=127.0.0.1",
            "--protocol=tcp",
            "--default-character-set=utf8mb4",
            "--database=segmint",
        ])
        .arg(format!("--port={}", self.port));
        cmd
    }
}

impl Drop for MariaServer {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The rows of the `mariadb --xml` client's result sets as `a|b|c` lines, NULL
/// (`xsi:nil="true"`) as an empty field. Reading XML rather than `--batch` output keeps
/// NULL apart from the string `NULL` and a value with a tab or newline whole. The
/// client escapes `<`, `>`, `&` and `"` in values and names, so the markup is found
/// by plain search.
fn rows_from_xml(xml: &str) -> Vec<String> {
    let mut rows = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find("<row>") {
        let end = rest[start..]
            .find("</row>")
            .map(|e| start + e)
            .unwrap_or_else(|| panic!("unterminated <row> in mariadb --xml output:\n{xml}"));
        let mut row = &rest[start + "<row>".len()..end];
        let mut fields = Vec::new();
        while let Some(at) = row.find("<field name=\"") {
            row = &row[at + "<field name=\"".len()..];
            // The name ends at the first quote: a quote in it is escaped.
            let name_end = row.find('"').expect("mariadb --xml: field name");
            row = &row[name_end + 1..];
            if let Some(after) = row.strip_prefix(" xsi:nil=\"true\" />") {
                fields.push(String::new());
                row = after;
            } else {
                let value = row.strip_prefix('>').expect("mariadb --xml: field value");
                let close = value.find("</field>").expect("mariadb --xml: </field>");
                fields.push(unescape_xml(&value[..close]));
                row = &value[close + "</field>".len()..];
            }
        }
        rows.push(fields.join("|"));
        rest = &rest[end + "</row>".len()..];
    }
    rows
}

fn unescape_xml(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

/// A temporary directory for a server, in `/dev/shm` when it is a tmpfs with room to
/// spare, else in the temporary directory: as for PostgreSQL clusters
/// ([`super::cluster_dir`]), creating the copy's files on a disk costs far more.
fn server_dir() -> tempfile::TempDir {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    let root = ROOT.get_or_init(|| {
        /// Room left for other servers and everything else.
        const ROOM: u64 = 1 << 30;
        let shm = Path::new("/dev/shm");
        let out = Command::new("stat")
            .args(["-f", "-c", "%T %a %S"])
            .arg(shm)
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .unwrap_or_default();
        let free = match out.split_whitespace().collect::<Vec<_>>()[..] {
            ["tmpfs", blocks, size] => blocks.parse::<u64>().ok().zip(size.parse::<u64>().ok()),
            _ => None,
        };
        if free.is_some_and(|(blocks, size)| blocks * size >= ROOM) {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    });
    tempfile::Builder::new()
        .prefix("segmint-maria-")
        .tempdir_in(root)
        .unwrap_or_else(|e| panic!("make a directory for MariaDB in {}: {e}", root.display()))
}

/// The template data directory every [`MariaServer::start`] copies: the system tables
/// and [`INIT_SQL`], made by `mariadb-install-db` (the server in bootstrap mode, which
/// leaves it shut down cleanly, some 0.4 s).
///
/// Made once under `CARGO_TARGET_TMPDIR` and kept across runs, named after everything
/// that shapes it, so that another MariaDB, user or recipe makes another. Test
/// processes start at once: the first takes a file lock and makes it under a
/// temporary name, renamed when complete, so that a process killed meanwhile leaves no
/// half template (the next maker removes its leftovers); the others wait on the lock
/// and find it made. (As the PostgreSQL template, `super::pg::template`.)
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let name = template_name();
        let made = root.join(&name);
        let data = made.join("data");
        if !data.is_dir() {
            std::fs::create_dir_all(root)
                .unwrap_or_else(|e| panic!("create {}: {e}", root.display()));
            let lock = File::create(root.join(format!("{name}.lock")))
                .unwrap_or_else(|e| panic!("create the MariaDB template's lock file: {e}"));
            lock.lock().expect("lock the MariaDB template");
            if !data.is_dir() {
                let making = root.join(format!("{name}.making"));
                if making.exists() {
                    std::fs::remove_dir_all(&making)
                        .unwrap_or_else(|e| panic!("remove {}: {e}", making.display()));
                }
                make_template(&making);
                std::fs::rename(&making, &made)
                    .unwrap_or_else(|e| panic!("rename {}: {e}", making.display()));
            }
        }
        data
    })
}

/// `maria-template-VERSION-HASH`, where the hash covers what shapes the template: the
/// server and its version, the user owning the files and the recipe.
fn template_name() -> String {
    let version = check(
        "mariadbd --version",
        maria_command("mariadbd").arg("--version").output(),
    );
    let mut hash = DefaultHasher::new();
    (
        mariadbd(),
        program("mariadb-install-db"),
        &version,
        std::fs::metadata("/proc/self").map(|m| m.uid()).ok(),
        SHAPE,
        INIT_SQL,
    )
        .hash(&mut hash);
    // "mariadbd  Ver 10.11.19-MariaDB-0+deb12u1 for …": 10.11.19.
    let release = version
        .split_whitespace()
        .skip_while(|w| *w != "Ver")
        .nth(1)
        .and_then(|v| v.split('-').next())
        .unwrap_or("unknown");
    format!("maria-template-{release}-{:016x}", hash.finish())
}

/// `mariadb-install-db` into `making/data`, with [`INIT_SQL`] after the system tables.
/// `--cross-bootstrap` leaves out the accounts named after this machine's host name
/// (which `--skip-name-resolve` ignores, with a warning at every start), and the
/// host name lookup that fails on a machine whose name does not resolve.
fn make_template(making: &Path) {
    std::fs::create_dir(making).unwrap_or_else(|e| panic!("create {}: {e}", making.display()));
    let init = making.join("init.sql");
    std::fs::write(&init, INIT_SQL).unwrap_or_else(|e| panic!("write {}: {e}", init.display()));
    let mut cmd = maria_command("mariadb-install-db");
    if is_root() {
        cmd.arg("--user=root");
    }
    check(
        "mariadb-install-db (the MariaDB template)",
        cmd.arg(format!("--datadir={}", making.join("data").display()))
            .args([
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--cross-bootstrap",
                "--innodb-buffer-pool-size=16M",
            ])
            .arg(format!("--extra-file={}", init.display()))
            .args(SHAPE)
            .output(),
    );
}
