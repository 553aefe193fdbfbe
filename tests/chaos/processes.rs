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

/// One database with what the faults need: its data directory (for the postmaster's
/// PID) and its log.
pub(crate) struct Database {
    pub(crate) index: usize,
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) data_dir: PathBuf,
}

impl Database {
    pub(crate) fn log(&self) -> PathBuf {
        self.cluster.log()
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
        op: impl FnOnce(&PgCluster) -> T + Send + 'static,
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
            match self.blocking("pg_ctl start", PgCluster::start_again).await {
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

/// Either is a harness cluster; the tmpfs one only adds its file system.
impl std::ops::Deref for Cluster {
    type Target = PgCluster;

    fn deref(&self) -> &PgCluster {
        match self {
            Cluster::Plain(c) => c,
            Cluster::Tmpfs(t) => &t.cluster,
        }
    }
}

/// A harness cluster whose data directory is on a small tmpfs of its own, so that the
/// disk-full fault fills a real file system. Stopped and unmounted on drop.
pub(crate) struct TmpfsCluster {
    /// Its log and socket are on another file system, writable while the tmpfs is full.
    pub(crate) cluster: PgCluster,
    /// The tmpfs mount point, holding the data directory and the ballast.
    pub(crate) disk: PathBuf,
}

impl TmpfsCluster {
    /// Mounts the tmpfs (root only; a failure fails the run: the fault is never
    /// skipped), then makes the cluster with 1 MB WAL segments, so that WAL needs new
    /// files often, keeping little WAL, so that the tmpfs holds it.
    pub(crate) fn start() -> TmpfsCluster {
        let dir = cluster_dir("segmint-pg-tmpfs-");
        let disk = dir.path().join("disk");
        std::fs::create_dir(&disk).unwrap();
        let (uid, gid) = run_as().unwrap_or((0, 0));
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
        let cluster = PgCluster::init(
            dir,
            disk.join("data"),
            &["--wal-segsize=1"],
            "-c max_wal_size=2MB -c min_wal_size=2MB -c wal_keep_size=0",
        );
        TmpfsCluster { cluster, disk }
    }

    /// Where the disk-full fault writes its ballast: on the tmpfs, beside the data.
    pub(crate) fn ballast(&self) -> PathBuf {
        self.disk.join("ballast")
    }
}

impl Drop for TmpfsCluster {
    /// Runs before the cluster's own drop removes its directory, which must not hold
    /// the mount then.
    fn drop(&mut self) {
        self.cluster.halt();
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
