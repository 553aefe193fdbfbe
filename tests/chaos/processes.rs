//! The servers and databases of the run: starting, signalling and inspecting them.

use super::*;
use common::row_sql;

/// One `segmint serve` process slot: a fixed port and log, the process restarted in it.
pub(crate) struct Server {
    pub(crate) index: usize,
    pub(crate) base: String,
    pub(crate) port: u16,
    pub(crate) config: PathBuf,
    pub(crate) log: PathBuf,
    /// The running process; taken out while it is being killed or terminated.
    pub(crate) child: Mutex<Option<ChildGuard>>,
}

impl Server {
    /// Starts `segmint serve`, its stdout and stderr appended to the log after a line
    /// saying why.
    pub(crate) fn spawn(&self, why: &str, t: f64) {
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the server log");
        writeln!(log, "=== chaos t={t:.1}s: start ({why})").unwrap();
        let child = serve_command(&self.config, self.port)
            // Every reservation is logged at info: far too many here.
            .env("RUST_LOG", "info,segmint::cache=warn")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn segmint serve");
        *self.child.lock().unwrap() = Some(ChildGuard(child));
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.lock().unwrap().as_ref().map(|c| c.0.id())
    }

    pub(crate) fn take(&self) -> Option<ChildGuard> {
        self.child.lock().unwrap().take()
    }

    /// Whether the process exited although nobody stopped it, and how.
    pub(crate) fn exited(&self) -> Option<ExitStatus> {
        let mut child = self.child.lock().unwrap();
        child.as_mut().and_then(|c| c.0.try_wait().ok().flatten())
    }

    pub(crate) fn signal(&self, signal: &str) -> Result<(), String> {
        let pid = self.pid().ok_or("no process")?;
        send_signal(pid, signal)
    }

    /// SIGKILL, as a crash would; reaps the process.
    pub(crate) fn kill9(&self) -> Result<(), String> {
        let mut child = self.take().ok_or("no process")?;
        child.0.kill().map_err(|e| format!("kill: {e}"))?;
        child.0.wait().map_err(|e| format!("wait: {e}"))?;
        Ok(())
    }

    /// SIGTERM, then waits for the graceful stop (SIGKILL after `limit`).
    pub(crate) async fn terminate(&self, limit: Duration) -> Result<ExitStatus, String> {
        let mut child = self.take().ok_or("no process")?;
        match child.terminate_within(limit).await? {
            Some((_, status)) => Ok(status),
            // Dropping the guard kills it.
            None => Err(format!("did not stop within {limit:?} of SIGTERM; killed")),
        }
    }

    pub(crate) async fn wait_healthy(&self, limit: Duration) -> Result<(), String> {
        wait_healthy(&self.base, limit, || self.exited()).await
    }

    pub(crate) fn log_tail(&self) -> String {
        tail(&self.log, 3000)
    }
}

/// The last `bytes` of a file, for failure messages.
pub(crate) fn tail(path: &Path, bytes: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut start = text.len().saturating_sub(bytes);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("--- {} (tail) ---\n{}", path.display(), &text[start..])
}

/// Size of the tmpfs under each disk-full fault's database. Measured: PostgreSQL's
/// `initdb --wal-segsize=1` and `CREATE DATABASE segmint` take 30 MB of it; MariaDB's
/// data directory 25 MB, and 37 MB once started (its 12 MB temporary tablespace). The
/// rest is room for the run's WAL (`max_wal_size` 2 MB: checkpoints every 2 MB, few
/// segments kept ahead) or InnoDB's growth, and what the ballast fills.
pub(crate) const TMPFS_MB: u64 = 64;
/// The database served by MariaDB, on a tmpfs of its own; the others are PostgreSQL.
pub(crate) const MARIA_DB: usize = 1;
/// The PostgreSQL database whose data directory is on a tmpfs.
pub(crate) const DISK_DB: usize = DATABASES - 1;
/// The databases the disk-full fault fills, one of each engine.
pub(crate) const DISK_DBS: [usize; 2] = [DISK_DB, MARIA_DB];

/// The server behind one database of the run.
pub(crate) enum Engine {
    Postgres(PgCluster),
    Maria(MariaServer),
}

impl Engine {
    /// Runs `sql` (one statement or more): the rows as `a|b|c` lines.
    pub(crate) fn sql(&self, sql: &str) -> String {
        match self {
            Engine::Postgres(c) => c.psql(sql),
            Engine::Maria(m) => m.sql(sql),
        }
    }

    pub(crate) fn log(&self) -> PathBuf {
        match self {
            Engine::Postgres(c) => c.log(),
            Engine::Maria(m) => m.log(),
        }
    }

    pub(crate) fn url(&self) -> String {
        match self {
            Engine::Postgres(c) => c.url(),
            Engine::Maria(m) => m.url(),
        }
    }

    /// The server's main process: the postmaster, or `mariadbd`.
    pub(crate) fn pid(&self) -> Result<u32, String> {
        match self {
            Engine::Postgres(c) => {
                let file = c.data().join("postmaster.pid");
                let text = std::fs::read_to_string(&file)
                    .map_err(|e| format!("{}: {e}", file.display()))?;
                text.lines()
                    .next()
                    .and_then(|l| l.trim().parse().ok())
                    .ok_or_else(|| format!("{}: no PID", file.display()))
            }
            Engine::Maria(m) => m.pid().ok_or_else(|| "mariadbd is not running".to_string()),
        }
    }

    /// `sql` run by the engine's client in the background (a lock it holds a while).
    pub(crate) fn sql_background(&self, sql: &str) -> ChildGuard {
        match self {
            Engine::Postgres(c) => c.psql_background(sql),
            Engine::Maria(m) => ChildGuard(
                m.client()
                    .args(["--execute", sql])
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .expect("spawn mariadb"),
            ),
        }
    }

    /// `max_id|version|step|delta|remainder` of a biz row.
    pub(crate) fn row(&self, biz: &str) -> String {
        self.sql(&row_sql(biz))
    }
}

/// One database of the run: its engine, and the tmpfs its data directory is on when a
/// disk-full fault fills it.
pub(crate) struct Database {
    pub(crate) index: usize,
    pub(crate) engine: Arc<Engine>,
    /// Dropped after the engine, whose server must be gone before the unmount.
    pub(crate) disk: Option<Tmpfs>,
}

impl Database {
    /// Starts database `index`: MariaDB for [`MARIA_DB`], PostgreSQL otherwise, on a
    /// tmpfs for those of [`DISK_DBS`].
    pub(crate) fn start(index: usize) -> Database {
        let disk = DISK_DBS.contains(&index).then(|| {
            let owner = if index == MARIA_DB {
                (0, 0)
            } else {
                run_as().unwrap_or((0, 0))
            };
            Tmpfs::mount(owner)
        });
        let engine = match (index == MARIA_DB, &disk) {
            (true, Some(disk)) => Engine::Maria(MariaServer::start_in(disk.data(), &[])),
            (true, None) => Engine::Maria(MariaServer::start()),
            // 1 MB WAL segments, so that WAL needs new files often, keeping little WAL,
            // so that the tmpfs holds it.
            (false, Some(disk)) => Engine::Postgres(PgCluster::init(
                cluster_dir("segmint-pg-tmpfs-"),
                disk.data(),
                &["--wal-segsize=1"],
                "-c max_wal_size=2MB -c min_wal_size=2MB -c wal_keep_size=0",
            )),
            (false, None) => Engine::Postgres(PgCluster::start()),
        };
        Database {
            index,
            engine: Arc::new(engine),
            disk,
        }
    }

    /// `pg0`, `maria1`, …: its name in the configuration, the reports and the logs.
    pub(crate) fn name(&self) -> String {
        db_name(self.index)
    }

    /// `PostgreSQL` or `MariaDB`.
    pub(crate) fn product(&self) -> &'static str {
        match &*self.engine {
            Engine::Postgres(_) => "PostgreSQL",
            Engine::Maria(_) => "MariaDB",
        }
    }

    pub(crate) fn log(&self) -> PathBuf {
        self.engine.log()
    }

    /// Runs a blocking engine operation (which panics on failure) off the runtime.
    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        what: &str,
        op: impl FnOnce(&Engine) -> T + Send + 'static,
    ) -> Result<T, String> {
        let engine = self.engine.clone();
        let result = tokio::task::spawn_blocking(move || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op(&engine)))
        })
        .await
        .map_err(|e| format!("{what}: {e}"))?;
        result.map_err(|panic| {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            format!(
                "{what} failed: {}",
                msg.lines().take(3).collect::<Vec<_>>().join(" | ")
            )
        })
    }

    /// Runs `sql` off the runtime: rows as `a|b|c` lines.
    pub(crate) async fn sql(&self, sql: String) -> Result<String, String> {
        self.blocking("SQL", move |e| e.sql(&sql)).await
    }

    /// Stops the server at once, without a crash: PostgreSQL's `pg_ctl stop -m
    /// immediate`, MariaDB's SIGTERM (it ends its sessions and flushes InnoDB).
    pub(crate) async fn stop(&self) -> Result<(), String> {
        self.blocking("stop", |e| match e {
            Engine::Postgres(c) => c.stop(),
            Engine::Maria(m) => m.shutdown(),
        })
        .await
    }

    /// SIGKILL of the server's main process, as a crash; returns once the processes
    /// that would keep it from starting again are gone, with a note on them.
    pub(crate) async fn kill9(&self) -> Result<String, String> {
        let began = Instant::now();
        match &*self.engine {
            Engine::Maria(_) => {
                self.blocking("kill -9 mariadbd", |e| {
                    if let Engine::Maria(m) = e {
                        m.stop()
                    }
                })
                .await?;
                Ok(format!(
                    "mariadbd gone in {:.2} s; ",
                    began.elapsed().as_secs_f64()
                ))
            }
            Engine::Postgres(_) => {
                let pid = self.engine.pid()?;
                let children = children_of(pid);
                send_signal(pid, "KILL")?;
                // The orphaned backends exit on their own once they see the postmaster
                // gone; the cluster cannot start while they hold its shared memory, nor
                // while the dead postmaster's PID exists, even as a zombie not yet
                // reaped (PostgreSQL then takes its lock file for a running server's).
                let deadline = Instant::now() + Duration::from_secs(15);
                while (proc_state(pid).is_some() || children.iter().any(|&c| alive(c)))
                    && Instant::now() < deadline
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok(format!(
                    "postmaster and {} children gone in {:.2} s; ",
                    children.len(),
                    began.elapsed().as_secs_f64()
                ))
            }
        }
    }

    /// Starts the server again, retrying: after a postmaster was killed its children
    /// may hold the shared memory for a moment.
    pub(crate) async fn restart(&self) -> Result<u32, String> {
        let mut last = String::new();
        for attempt in 1..=10 {
            let started = self
                .blocking("start", |e| match e {
                    Engine::Postgres(c) => c.start_again(),
                    Engine::Maria(m) => m.start_again(),
                })
                .await;
            match started {
                Ok(()) => return Ok(attempt),
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(last)
    }
}

/// The name of database `index` in the configuration: `maria1` for [`MARIA_DB`],
/// `pgN` for the others.
pub(crate) fn db_name(index: usize) -> String {
    if index == MARIA_DB {
        format!("maria{index}")
    } else {
        format!("pg{index}")
    }
}

/// A small tmpfs of its own under a database's data directory, so that the disk-full
/// fault fills a real file system. Unmounted on drop.
pub(crate) struct Tmpfs {
    /// The mount point, holding the data directory and the ballast.
    disk: PathBuf,
    /// Holds the mount point; removed after the unmount.
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a [`TMPFS_MB`] tmpfs owned by `(uid, gid)` (root only; a failure fails the
    /// run: the fault is never skipped).
    pub(crate) fn mount((uid, gid): (u32, u32)) -> Tmpfs {
        let dir = cluster_dir("segmint-tmpfs-");
        let disk = dir.path().join("disk");
        std::fs::create_dir(&disk).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={TMPFS_MB}m,mode=0700,uid={uid},gid={gid}"))
            .arg("tmpfs")
            .arg(&disk)
            .output();
        match mounted {
            Ok(out) if out.status.success() => {}
            Ok(out) => panic!(
                "the disk-full fault needs a tmpfs (run as root): mount -t tmpfs {} failed: {}",
                disk.display(),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => panic!("the disk-full fault needs a tmpfs: run mount: {e}"),
        }
        Tmpfs { disk, _dir: dir }
    }

    /// Where the database's data directory goes.
    pub(crate) fn data(&self) -> PathBuf {
        self.disk.join("data")
    }

    /// Where the disk-full fault writes its ballast: on the tmpfs, beside the data.
    pub(crate) fn ballast(&self) -> PathBuf {
        self.disk.join("ballast")
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // The server's last processes may hold the mount for a moment.
        for _ in 0..50 {
            let unmounted = Command::new("umount")
                .arg(&self.disk)
                .stderr(std::process::Stdio::null())
                .status();
            if unmounted.is_ok_and(|s| s.success()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let lazy = Command::new("umount").arg("-l").arg(&self.disk).status();
        if !lazy.is_ok_and(|s| s.success()) {
            eprintln!("chaos: could not unmount {}", self.disk.display());
        }
    }
}

/// Processes whose parent is `pid` (the postmaster's children).
pub(crate) fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some((_, ppid)) = proc_state(child)
            && ppid == pid
        {
            out.push(child);
        }
    }
    out
}

/// `(state, parent)` of a process from `/proc/PID/stat`, `None` once it is gone.
pub(crate) fn proc_state(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

pub(crate) fn alive(pid: u32) -> bool {
    matches!(proc_state(pid), Some((state, _)) if state != 'Z' && state != 'X')
}
