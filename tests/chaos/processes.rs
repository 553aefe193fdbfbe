//! The servers and databases of the run: starting, signalling and inspecting them.

use super::*;

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
        send_signal(child.0.id(), "TERM")?;
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = child.0.try_wait().map_err(|e| e.to_string())? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                let _ = child.0.kill();
                let _ = child.0.wait();
                return Err(format!("did not stop within {limit:?} of SIGTERM; killed"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(crate) async fn wait_healthy(&self, limit: Duration) -> Result<(), String> {
        wait_healthy(&self.base, limit, || self.exited()).await
    }

    pub(crate) fn log_tail(&self) -> String {
        tail(&self.log, 3000)
    }
}

pub(crate) fn send_signal(pid: u32, signal: &str) -> Result<(), String> {
    // Only ever a positive PID: one process, never a group.
    assert!(pid > 0);
    let status = Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .status()
        .map_err(|e| format!("run kill: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill -s {signal} {pid}: {status}"))
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

/// One database with what the faults need: its data directory (for the postmaster's
/// PID) and its log.
pub(crate) struct Database {
    pub(crate) index: usize,
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) data_dir: PathBuf,
}

impl Database {
    pub(crate) fn log(&self) -> PathBuf {
        match &*self.cluster {
            Cluster::Plain(_) => self.data_dir.parent().unwrap().join("log"),
            Cluster::Tmpfs(t) => t.log(),
        }
    }

    pub(crate) fn postmaster_pid(&self) -> Result<u32, String> {
        let file = self.data_dir.join("postmaster.pid");
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        text.lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .ok_or_else(|| format!("{}: no PID", file.display()))
    }

    /// Runs a blocking cluster operation (which panics on failure) off the runtime.
    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        what: &str,
        op: impl FnOnce(&Cluster) -> T + Send + 'static,
    ) -> Result<T, String> {
        let cluster = self.cluster.clone();
        let result = tokio::task::spawn_blocking(move || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op(&cluster)))
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

    /// Runs `sql` off the runtime: psql's unaligned output.
    pub(crate) async fn sql(&self, sql: String) -> Result<String, String> {
        self.blocking("psql", move |c| c.psql(&sql)).await
    }

    /// Starts the cluster again, retrying: after a postmaster was killed its children
    /// may hold the shared memory for a moment.
    pub(crate) async fn restart(&self) -> Result<u32, String> {
        let mut last = String::new();
        for attempt in 1..=10 {
            match self.blocking("pg_ctl start", Cluster::start_again).await {
                Ok(()) => return Ok(attempt),
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(last)
    }
}

/// Size of the tmpfs under the disk-full fault's cluster. Measured: `initdb
/// --wal-segsize=1` and `CREATE DATABASE segmint` take 30 MB of it; the rest is room for
/// the run's WAL (`max_wal_size` 2 MB: checkpoints every 2 MB, few segments kept ahead)
/// and table growth, and what the ballast fills.
pub(crate) const TMPFS_MB: u64 = 64;
/// The database whose data directory is on the tmpfs.
pub(crate) const DISK_DB: usize = DATABASES - 1;

/// A database cluster of the run: the harness's, or one on a tmpfs of its own.
pub(crate) enum Cluster {
    Plain(PgCluster),
    Tmpfs(TmpfsCluster),
}

impl Cluster {
    pub(crate) fn start_again(&self) {
        match self {
            Cluster::Plain(c) => c.start_again(),
            Cluster::Tmpfs(c) => c.start_again(),
        }
    }

    pub(crate) fn stop(&self) {
        match self {
            Cluster::Plain(c) => c.stop(),
            Cluster::Tmpfs(c) => c.stop(),
        }
    }

    pub(crate) fn url(&self) -> String {
        match self {
            Cluster::Plain(c) => c.url(),
            Cluster::Tmpfs(c) => c.url(),
        }
    }

    pub(crate) fn psql(&self, sql: &str) -> String {
        match self {
            Cluster::Plain(c) => c.psql(sql),
            Cluster::Tmpfs(c) => c.psql_db("segmint", sql),
        }
    }

    pub(crate) fn psql_background(&self, sql: &str) -> ChildGuard {
        match self {
            Cluster::Plain(c) => c.psql_background(sql),
            Cluster::Tmpfs(c) => ChildGuard(
                c.psql_command("segmint", sql)
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .expect("spawn psql"),
            ),
        }
    }

    /// `max_id|version|step|delta|remainder` of a biz row.
    pub(crate) fn row(&self, biz: &str) -> String {
        self.psql(&format!(
            "SELECT max_id, version, step, delta, remainder FROM tiny_id_info WHERE biz_type = '{biz}'"
        ))
    }
}

/// `(uid, gid)` of the `postgres` user when running as root (PostgreSQL refuses root).
pub(crate) fn postgres_user() -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata("/proc/self").ok()?.uid() != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    let line = passwd.lines().find(|l| l.starts_with("postgres:"))?;
    let f: Vec<&str> = line.split(':').collect();
    Some((f[2].parse().ok()?, f[3].parse().ok()?))
}

/// A PostgreSQL program (`initdb`, `pg_ctl`, `psql`) of the newest installed version,
/// run as `postgres` when the test runs as root.
pub(crate) fn pg_tool(program: &str) -> Command {
    use std::os::unix::process::CommandExt;
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    versions.sort();
    let path = versions
        .into_iter()
        .rev()
        .map(|bin| bin.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(program));
    let mut cmd = Command::new(path);
    if let Some((uid, gid)) = postgres_user() {
        cmd.uid(uid).gid(gid);
    }
    cmd.env_remove("PGDATA").env("LC_ALL", "C");
    cmd
}

pub(crate) fn run_checked(what: &str, cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A PostgreSQL cluster whose data directory is on a small tmpfs of its own, so that
/// the disk-full fault fills a real file system. Stopped and unmounted on drop.
pub(crate) struct TmpfsCluster {
    /// On the ordinary disk: the log and the socket, which stay writable while the
    /// tmpfs is full. Removed after the unmount.
    pub(crate) dir: tempfile::TempDir,
    /// The tmpfs mount point, holding the data directory and the ballast.
    pub(crate) disk: PathBuf,
    /// The cluster's loopback port.
    pub(crate) port: u16,
}

impl TmpfsCluster {
    /// Mounts the tmpfs (root only; a failure fails the run: the fault is never
    /// skipped), then `initdb` with 1 MB WAL segments, so that WAL needs new files
    /// often, and starts the cluster with a `segmint` database.
    pub(crate) fn start() -> TmpfsCluster {
        let dir = tempfile::Builder::new()
            .prefix("segmint-pg-tmpfs-")
            .tempdir()
            .unwrap();
        let owner = postgres_user();
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let disk = dir.path().join("disk");
        std::fs::create_dir(&disk).unwrap();
        let (uid, gid) = owner.unwrap_or((0, 0));
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
        let cluster = TmpfsCluster {
            dir,
            disk,
            port: free_port(),
        };
        run_checked(
            "initdb",
            pg_tool("initdb")
                .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"])
                .args(["--wal-segsize=1", "-D"])
                .arg(cluster.data()),
        );
        cluster.start_again();
        cluster.psql_db("postgres", "CREATE DATABASE segmint");
        cluster
    }

    pub(crate) fn data(&self) -> PathBuf {
        self.disk.join("data")
    }

    pub(crate) fn log(&self) -> PathBuf {
        self.dir.path().join("log")
    }

    /// Where the disk-full fault writes its ballast: on the tmpfs, beside the data.
    pub(crate) fn ballast(&self) -> PathBuf {
        self.disk.join("ballast")
    }

    /// As the harness's clusters, with little WAL kept, so that the tmpfs holds it.
    pub(crate) fn start_again(&self) {
        let opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=off -c full_page_writes=off -c max_connections=200 \
             -c max_wal_size=2MB -c min_wal_size=2MB -c wal_keep_size=0",
            self.port,
            self.dir.path().display()
        );
        run_checked(
            "pg_ctl start",
            pg_tool("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .arg("-l")
                .arg(self.log())
                .args(["-o", &opts, "-w", "-t", "30", "start"]),
        );
    }

    pub(crate) fn stop(&self) {
        run_checked(
            "pg_ctl stop",
            pg_tool("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .args(["-m", "immediate", "-w", "stop"]),
        );
    }

    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/segmint", self.port)
    }

    pub(crate) fn psql_command(&self, db: &str, sql: &str) -> Command {
        let mut cmd = pg_tool("psql");
        cmd.args(["-X", "-v", "ON_ERROR_STOP=1", "-At", "-h", "127.0.0.1"])
            .args([
                "-U",
                "postgres",
                "-p",
                &self.port.to_string(),
                "-d",
                db,
                "-c",
                sql,
            ]);
        cmd
    }

    pub(crate) fn psql_db(&self, db: &str, sql: &str) -> String {
        run_checked("psql", &mut self.psql_command(db, sql))
    }
}

impl Drop for TmpfsCluster {
    fn drop(&mut self) {
        let _ = pg_tool("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        // The postmaster's last children may hold the mount for a moment.
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
