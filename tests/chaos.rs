//! Chaos run: three real `segmint serve` processes over three PostgreSQL databases
//! (classes 0, 1 and 2 mod 3), ten workers asking for IDs through every API (Tinyid's
//! routes, the v1 API, whole segments, the client library) for `CHAOS_SECS` seconds
//! (default 60), while a fault injector kills, terminates and freezes the servers and
//! crashes, kills and stalls the databases. Failed requests are allowed; one ID received
//! twice fails the test.
//!
//! Every ID anybody received is kept as spans of consecutive members of its residue
//! class (an ID is `class + modulus × k`), so a long run costs a few bytes per request,
//! not per ID; the check sorts the spans of each class and finds any overlap exactly.
//!
//! `scripts/chaos [SECS]` runs it in release mode and keeps the report, and the logs of
//! every server and database, in `target/chaos/`. Environment:
//! - `CHAOS_SECS`: length of the fault phase in seconds (default 60, the CI run);
//! - `CHAOS_SEED`: seed of the fault schedule and the workers' choices (default: the
//!   clock; the report names it, so a schedule can be replayed);
//! - `CHAOS_OUT`: directory for `report.md` and the logs (default: none, report on
//!   stdout only).

mod common;

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use common::{
    ChildGuard, PgCluster, config_toml_urls, free_port, segmint_bin, serve_command, setup_biz,
    wait_healthy,
};
use segmint::client::{Client, ClientError, Protocol};
use segmint::config::Config;
use tokio::task::JoinSet;

/// Width of every segment: 100 IDs of `chaos` per database, 50 of `odd`, so that the
/// servers' caches and the segment routes reserve segments all the time.
const STEP: i64 = 300;
const SERVERS: usize = 3;
const DATABASES: usize = 3;
/// Longest a worker waits for one answer before it counts the server as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the workers go on once the last fault is repaired, at least: then until
/// each has succeeded again, for at most `CALM_MAX`.
const CALM: Duration = Duration::from_secs(3);
const CALM_MAX: Duration = Duration::from_secs(15);
/// Longest a restarted server or database may take to answer again.
const RECOVERY: Duration = Duration::from_secs(30);
/// Upper bound on the longest time a worker goes without a success (not counting the
/// test process's own stalls): faults last a few seconds and never take every database
/// or every server away, so a worker stuck for longer means the service stopped serving.
const MAX_UNAVAILABLE: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------
// Seeded randomness, so that a run's fault schedule can be replayed.

/// SplitMix64: small, fast and good enough to pick faults and batch sizes.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.between(lo, hi))
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

// ---------------------------------------------------------------------------------------
// The two bizs and their residue classes.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Biz {
    /// Plain: database `i` issues `i mod 3`.
    Chaos,
    /// Odd-only: database `i` issues `1 + 2i mod 6`.
    Odd,
}

const BIZS: [Biz; 2] = [Biz::Chaos, Biz::Odd];

impl Biz {
    fn name(self) -> &'static str {
        match self {
            Biz::Chaos => "chaos",
            Biz::Odd => "odd",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The rows' delta: every database issues one class of this modulus.
    fn modulus(self) -> i64 {
        match self {
            Biz::Chaos => DATABASES as i64,
            Biz::Odd => 2 * DATABASES as i64,
        }
    }

    /// The class (remainder) database `db` issues.
    fn class_of(self, db: usize) -> i64 {
        match self {
            Biz::Chaos => db as i64,
            Biz::Odd => 1 + 2 * db as i64,
        }
    }

    /// The database issuing `class`, if any may.
    fn database_of(self, class: i64) -> Option<usize> {
        (0..DATABASES).find(|&db| self.class_of(db) == class)
    }
}

// ---------------------------------------------------------------------------------------
// Every ID received, as spans of consecutive class members.

/// IDs `class + modulus × k` for `k` in `lo..=hi`, received by `source`.
#[derive(Debug, Clone, Copy)]
struct Span {
    lo: i64,
    hi: i64,
    source: u32,
}

impl Span {
    fn len(&self) -> u64 {
        (self.hi - self.lo + 1) as u64
    }
}

/// A segment as a server described it: the IDs `current < x <= max` of
/// `x % delta == remainder`.
#[derive(Debug, Clone, Copy)]
struct Seg {
    current: i64,
    max: i64,
    delta: i64,
    remainder: i64,
}

impl Seg {
    /// The smallest and largest ID of the segment, or `None` when it holds none (or
    /// its class is invalid).
    fn bounds(&self) -> Option<(i64, i64)> {
        if self.delta < 1 || !(0..self.delta).contains(&self.remainder) {
            return None;
        }
        let first = self.current + 1 + (self.remainder - (self.current + 1)).rem_euclid(self.delta);
        let last = self.max - (self.max - self.remainder).rem_euclid(self.delta);
        (first <= last).then_some((first, last))
    }

    fn count(&self) -> u64 {
        self.bounds()
            .map_or(0, |(first, last)| ((last - first) / self.delta + 1) as u64)
    }
}

/// IDs by biz and class, as spans.
struct Ledger {
    /// `[biz][class]`: spans in the order received.
    spans: Vec<Vec<Vec<Span>>>,
}

impl Ledger {
    fn new() -> Ledger {
        Ledger {
            spans: BIZS
                .iter()
                .map(|b| vec![Vec::new(); b.modulus() as usize])
                .collect(),
        }
    }

    /// Extends the last span of the class when `k` follows it from the same source;
    /// anything else, a repeat included, starts a span of its own.
    fn add_run(&mut self, biz: Biz, class: i64, lo: i64, hi: i64, source: u32) {
        let spans = &mut self.spans[biz.index()][class as usize];
        if let Some(last) = spans.last_mut()
            && last.source == source
            && last.hi.checked_add(1) == Some(lo)
        {
            last.hi = hi;
            return;
        }
        spans.push(Span { lo, hi, source });
    }

    fn add_ids(&mut self, biz: Biz, ids: &[i64], source: u32) {
        let m = biz.modulus();
        for &id in ids {
            let k = id.div_euclid(m);
            self.add_run(biz, id.rem_euclid(m), k, k, source);
        }
    }

    /// Every ID of `seg` (nothing when its class is invalid: that is reported apart).
    fn add_segment(&mut self, biz: Biz, seg: &Seg, source: u32) {
        let Some((first, last)) = seg.bounds() else {
            return;
        };
        let m = biz.modulus();
        if seg.delta == m {
            self.add_run(
                biz,
                seg.remainder,
                first.div_euclid(m),
                last.div_euclid(m),
                source,
            );
        } else {
            let ids: Vec<i64> = (0..)
                .map(|i| first + i * seg.delta)
                .take_while(|&x| x <= last)
                .collect();
            self.add_ids(biz, &ids, source);
        }
    }

    fn absorb(&mut self, other: Ledger) {
        for (mine, theirs) in self.spans.iter_mut().zip(other.spans) {
            for (a, b) in mine.iter_mut().zip(theirs) {
                a.extend(b);
            }
        }
    }

    fn total(&self, biz: Biz) -> u64 {
        self.spans[biz.index()]
            .iter()
            .flatten()
            .map(Span::len)
            .sum()
    }

    fn span_count(&self) -> usize {
        self.spans.iter().flatten().map(Vec::len).sum()
    }
}

/// Distinct IDs and duplicates of one biz in a ledger (whose spans it sorts).
struct Audit {
    distinct: u64,
    duplicates: u64,
    examples: Vec<String>,
}

fn audit(ledger: &mut Ledger, biz: Biz, sources: &[String]) -> Audit {
    let m = biz.modulus();
    let mut a = Audit {
        distinct: 0,
        duplicates: 0,
        examples: Vec::new(),
    };
    for (class, spans) in ledger.spans[biz.index()].iter_mut().enumerate() {
        spans.sort_unstable_by_key(|s| (s.lo, s.hi));
        let mut cover: Option<Span> = None;
        for s in spans.iter() {
            match cover {
                Some(c) if s.lo <= c.hi => {
                    let overlap = (s.hi.min(c.hi) - s.lo + 1) as u64;
                    a.duplicates += overlap;
                    if a.examples.len() < 10 {
                        a.examples.push(format!(
                            "biz `{}`: {overlap} ID(s) from {} received twice, by {} and by {}",
                            biz.name(),
                            class as i64 + m * s.lo,
                            sources[c.source as usize],
                            sources[s.source as usize]
                        ));
                    }
                    if s.hi > c.hi {
                        a.distinct += (s.hi - c.hi) as u64;
                        cover = Some(*s);
                    }
                }
                _ => {
                    a.distinct += s.len();
                    cover = Some(*s);
                }
            }
        }
    }
    a
}

/// Spans of `ids` not inside the spans of `segments`: IDs a client returned that no
/// segment it installed holds. Sorts both.
fn outside(ids: &mut Ledger, segments: &mut Ledger, biz: Biz) -> Vec<String> {
    let m = biz.modulus();
    let mut out = Vec::new();
    let classes = ids.spans[biz.index()]
        .iter_mut()
        .zip(segments.spans[biz.index()].iter_mut());
    for (class, (id_spans, seg_spans)) in classes.enumerate() {
        seg_spans.sort_unstable_by_key(|s| s.lo);
        let mut merged: Vec<(i64, i64)> = Vec::new();
        for s in seg_spans.iter() {
            match merged.last_mut() {
                Some(last) if s.lo <= last.1 + 1 => last.1 = last.1.max(s.hi),
                _ => merged.push((s.lo, s.hi)),
            }
        }
        for s in id_spans.iter() {
            let i = merged.partition_point(|&(lo, _)| lo <= s.lo);
            let inside = i > 0 && merged[i - 1].1 >= s.hi;
            if !inside && out.len() < 10 {
                out.push(format!(
                    "biz `{}`: IDs {}..={} are in no installed segment",
                    biz.name(),
                    class as i64 + m * s.lo,
                    class as i64 + m * s.hi
                ));
            }
        }
    }
    out
}

/// The audit must see what it is there to see: a planted duplicate (an ID both issued
/// alone and inside a segment), an ID in no segment, and nothing in a clean ledger.
fn audit_self_check() {
    let sources = vec!["a".to_string(), "b".to_string()];
    let seg = Seg {
        current: 0,
        max: 300,
        delta: 3,
        remainder: 1,
    };
    let mut clean = Ledger::new();
    clean.add_ids(Biz::Chaos, &[2, 5, 8, 302], 0);
    clean.add_segment(Biz::Chaos, &seg, 1);
    let a = audit(&mut clean, Biz::Chaos, &sources);
    assert_eq!((a.distinct, a.duplicates), (104, 0), "{:?}", a.examples);

    let mut planted = Ledger::new();
    planted.add_ids(Biz::Chaos, &[2, 5, 298, 301], 0);
    planted.add_segment(Biz::Chaos, &seg, 1);
    let a = audit(&mut planted, Biz::Chaos, &sources);
    assert_eq!((a.distinct, a.duplicates), (103, 1), "{:?}", a.examples);
    assert!(a.examples[0].contains("from 298"), "{:?}", a.examples);

    let mut segments = Ledger::new();
    segments.add_segment(
        Biz::Odd,
        &Seg {
            current: 0,
            max: 300,
            delta: 6,
            remainder: 1,
        },
        1,
    );
    let mut returned = Ledger::new();
    returned.add_ids(Biz::Odd, &[1, 7, 295], 0);
    assert!(outside(&mut returned, &mut segments, Biz::Odd).is_empty());
    returned.add_ids(Biz::Odd, &[301], 0);
    let stray = outside(&mut returned, &mut segments, Biz::Odd);
    assert!(stray.len() == 1 && stray[0].contains("301"), "{stray:?}");
}

// ---------------------------------------------------------------------------------------
// Servers and databases.

/// One `segmint serve` process slot: a fixed port and log, the process restarted in it.
struct Server {
    index: usize,
    base: String,
    port: u16,
    config: PathBuf,
    log: PathBuf,
    /// The running process; taken out while it is being killed or terminated.
    child: Mutex<Option<ChildGuard>>,
}

impl Server {
    /// Starts `segmint serve`, its stdout and stderr appended to the log after a line
    /// saying why.
    fn spawn(&self, why: &str, t: f64) {
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the server log");
        writeln!(log, "=== chaos t={t:.1}s: start ({why})").unwrap();
        let child = serve_command(&self.config, self.port)
            // Every reservation is logged at info: far too many here.
            .env("RUST_LOG", "info,segmint::generator=warn")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn segmint serve");
        *self.child.lock().unwrap() = Some(ChildGuard(child));
    }

    fn pid(&self) -> Option<u32> {
        self.child.lock().unwrap().as_ref().map(|c| c.0.id())
    }

    fn take(&self) -> Option<ChildGuard> {
        self.child.lock().unwrap().take()
    }

    /// Whether the process exited although nobody stopped it, and how.
    fn exited(&self) -> Option<ExitStatus> {
        let mut child = self.child.lock().unwrap();
        child.as_mut().and_then(|c| c.0.try_wait().ok().flatten())
    }

    fn signal(&self, signal: &str) -> Result<(), String> {
        let pid = self.pid().ok_or("no process")?;
        send_signal(pid, signal)
    }

    /// SIGKILL, as a crash would; reaps the process.
    fn kill9(&self) -> Result<(), String> {
        let mut child = self.take().ok_or("no process")?;
        child.0.kill().map_err(|e| format!("kill: {e}"))?;
        child.0.wait().map_err(|e| format!("wait: {e}"))?;
        Ok(())
    }

    /// SIGTERM, then waits for the graceful stop (SIGKILL after `limit`).
    async fn terminate(&self, limit: Duration) -> Result<ExitStatus, String> {
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

    async fn wait_healthy(&self, limit: Duration) -> Result<(), String> {
        wait_healthy(&self.base, limit, || self.exited()).await
    }

    fn log_tail(&self) -> String {
        tail(&self.log, 3000)
    }
}

fn send_signal(pid: u32, signal: &str) -> Result<(), String> {
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
fn tail(path: &Path, bytes: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut start = text.len().saturating_sub(bytes);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("--- {} (tail) ---\n{}", path.display(), &text[start..])
}

/// One database with what the faults need: its data directory (for the postmaster's
/// PID) and its log.
struct Database {
    index: usize,
    cluster: Arc<Cluster>,
    data_dir: PathBuf,
}

impl Database {
    fn log(&self) -> PathBuf {
        match &*self.cluster {
            Cluster::Plain(_) => self.data_dir.parent().unwrap().join("log"),
            Cluster::Tmpfs(t) => t.log(),
        }
    }

    fn postmaster_pid(&self) -> Result<u32, String> {
        let file = self.data_dir.join("postmaster.pid");
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        text.lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .ok_or_else(|| format!("{}: no PID", file.display()))
    }

    /// Runs a blocking cluster operation (which panics on failure) off the runtime.
    async fn blocking<T: Send + 'static>(
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
    async fn sql(&self, sql: String) -> Result<String, String> {
        self.blocking("psql", move |c| c.psql(&sql)).await
    }

    /// Starts the cluster again, retrying: after a postmaster was killed its children
    /// may hold the shared memory for a moment.
    async fn restart(&self) -> Result<u32, String> {
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
const TMPFS_MB: u64 = 64;
/// The database whose data directory is on the tmpfs.
const DISK_DB: usize = DATABASES - 1;

/// A database cluster of the run: the harness's, or one on a tmpfs of its own.
enum Cluster {
    Plain(PgCluster),
    Tmpfs(TmpfsCluster),
}

impl Cluster {
    fn start_again(&self) {
        match self {
            Cluster::Plain(c) => c.start_again(),
            Cluster::Tmpfs(c) => c.start_again(),
        }
    }

    fn stop(&self) {
        match self {
            Cluster::Plain(c) => c.stop(),
            Cluster::Tmpfs(c) => c.stop(),
        }
    }

    fn url(&self) -> String {
        match self {
            Cluster::Plain(c) => c.url(),
            Cluster::Tmpfs(c) => c.url(),
        }
    }

    fn psql(&self, sql: &str) -> String {
        match self {
            Cluster::Plain(c) => c.psql(sql),
            Cluster::Tmpfs(c) => c.psql_db("segmint", sql),
        }
    }

    fn psql_background(&self, sql: &str) -> ChildGuard {
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
    fn row(&self, biz: &str) -> String {
        self.psql(&format!(
            "SELECT max_id, version, step, delta, remainder FROM tiny_id_info WHERE biz_type = '{biz}'"
        ))
    }
}

/// `(uid, gid)` of the `postgres` user when running as root (PostgreSQL refuses root).
fn postgres_user() -> Option<(u32, u32)> {
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
fn pg_tool(program: &str) -> Command {
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

fn run_checked(what: &str, cmd: &mut Command) -> String {
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
struct TmpfsCluster {
    /// On the ordinary disk: the log and the socket, which stay writable while the
    /// tmpfs is full. Removed after the unmount.
    dir: tempfile::TempDir,
    /// The tmpfs mount point, holding the data directory and the ballast.
    disk: PathBuf,
    /// The cluster's loopback port.
    port: u16,
}

impl TmpfsCluster {
    /// Mounts the tmpfs (root only; a failure fails the run: the fault is never
    /// skipped), then `initdb` with 1 MB WAL segments, so that WAL needs new files
    /// often, and starts the cluster with a `segmint` database.
    fn start() -> TmpfsCluster {
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

    fn data(&self) -> PathBuf {
        self.disk.join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("log")
    }

    /// Where the disk-full fault writes its ballast: on the tmpfs, beside the data.
    fn ballast(&self) -> PathBuf {
        self.disk.join("ballast")
    }

    /// As the harness's clusters, with little WAL kept, so that the tmpfs holds it.
    fn start_again(&self) {
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

    fn stop(&self) {
        run_checked(
            "pg_ctl stop",
            pg_tool("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .args(["-m", "immediate", "-w", "stop"]),
        );
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/segmint", self.port)
    }

    fn psql_command(&self, db: &str, sql: &str) -> Command {
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

    fn psql_db(&self, db: &str, sql: &str) -> String {
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
fn children_of(pid: u32) -> Vec<u32> {
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
fn proc_state(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

fn alive(pid: u32) -> bool {
    matches!(proc_state(pid), Some((state, _)) if state != 'Z' && state != 'X')
}

// ---------------------------------------------------------------------------------------
// Shared state of the run.

const CHAOS: u8 = 0;
const CALMING: u8 = 1;
const STOPPING: u8 = 2;

struct Ctx {
    t0: Instant,
    /// `CHAOS`, then `CALMING` once every fault is repaired, then `STOPPING`.
    phase: AtomicU8,
    servers: Vec<Server>,
    databases: Vec<Database>,
    /// Tokens of `chaos` and `odd`.
    tokens: [String; 2],
    /// Things that must not happen other than a duplicate: a server exiting on its
    /// own, a restart that does not come back.
    anomalies: Mutex<Vec<String>>,
    /// Processes started in each server slot, the first included.
    starts: Vec<AtomicU32>,
    /// Workers that have succeeded since every fault was repaired.
    back: AtomicUsize,
    /// What the database did under each disk-full fault, for the report's totals.
    disk_full: Mutex<Vec<DiskOutcome>>,
    /// Holds the configuration file and the servers' logs; dropped last.
    _dir: tempfile::TempDir,
}

impl Ctx {
    fn secs(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.t0).as_secs_f64()
    }

    fn now(&self) -> f64 {
        self.secs(Instant::now())
    }

    fn phase(&self) -> u8 {
        self.phase.load(Ordering::SeqCst)
    }

    fn anomaly(&self, msg: String) {
        eprintln!("chaos: ANOMALY at t={:.1}s: {msg}", self.now());
        self.anomalies
            .lock()
            .unwrap()
            .push(format!("t={:.1}s: {msg}", self.now()));
    }

    fn start_server(&self, s: usize, why: &str) {
        self.starts[s].fetch_add(1, Ordering::SeqCst);
        self.servers[s].spawn(why, self.now());
    }
}

// ---------------------------------------------------------------------------------------
// Workers.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// `/tinyid/id/nextIdSimple?batchSize=N`: comma-separated text.
    NextIdSimple,
    /// `/tinyid/id/nextId?batchSize=N`: Tinyid's JSON envelope.
    NextId,
    /// `/v1/ids/{biz}?count=N`.
    V1Ids,
    /// `/v1/segments/{biz}`: a whole segment.
    V1Segment,
    /// `/tinyid/id/nextSegmentIdSimple`: a whole segment, as text.
    SegmentSimple,
}

/// One kind of request a worker sends: route, biz and the largest count (a random
/// count `1..=max` each time; `max = 1` for single IDs).
#[derive(Debug, Clone, Copy)]
struct Op {
    route: Route,
    biz: Biz,
    max: usize,
}

const fn op(route: Route, biz: Biz, max: usize) -> Op {
    Op { route, biz, max }
}

/// What a worker does: HTTP requests drawn from `ops`, or the client library.
enum Plan {
    Http(&'static [Op]),
    /// A client (shared by the workers of `group`) issuing `biz`.
    Client {
        group: usize,
    },
}

struct WorkerSpec {
    name: &'static str,
    api: &'static str,
    plan: Plan,
}

fn worker_specs() -> Vec<WorkerSpec> {
    use Biz::*;
    use Route::*;
    vec![
        WorkerSpec {
            name: "compat-simple",
            api: "Tinyid nextIdSimple, batchSize 1..100",
            plan: Plan::Http(const { &[op(NextIdSimple, Chaos, 100), op(NextIdSimple, Odd, 100)] }),
        },
        WorkerSpec {
            name: "compat-json",
            api: "Tinyid nextId, batchSize 1..100",
            plan: Plan::Http(const { &[op(NextId, Chaos, 100), op(NextId, Odd, 100)] }),
        },
        WorkerSpec {
            name: "compat-single",
            api: "Tinyid nextIdSimple / nextId, one ID",
            plan: Plan::Http(
                const {
                    &[
                        op(NextIdSimple, Chaos, 1),
                        op(NextId, Chaos, 1),
                        op(NextId, Odd, 1),
                    ]
                },
            ),
        },
        WorkerSpec {
            name: "v1-single",
            api: "v1 /v1/ids, one ID",
            plan: Plan::Http(const { &[op(V1Ids, Chaos, 1), op(V1Ids, Odd, 1)] }),
        },
        WorkerSpec {
            name: "v1-batch",
            api: "v1 /v1/ids?count=1..100",
            plan: Plan::Http(const { &[op(V1Ids, Chaos, 100), op(V1Ids, Odd, 100)] }),
        },
        WorkerSpec {
            name: "v1-segments",
            api: "v1 /v1/segments",
            plan: Plan::Http(const { &[op(V1Segment, Chaos, 1), op(V1Segment, Odd, 1)] }),
        },
        WorkerSpec {
            name: "compat-segments",
            api: "Tinyid nextSegmentIdSimple",
            plan: Plan::Http(const { &[op(SegmentSimple, Chaos, 1), op(SegmentSimple, Odd, 1)] }),
        },
        WorkerSpec {
            name: "client-a1",
            api: "client library (v1 protocol), `chaos`",
            plan: Plan::Client { group: 0 },
        },
        WorkerSpec {
            name: "client-a2",
            api: "client library, same client as client-a1",
            plan: Plan::Client { group: 0 },
        },
        WorkerSpec {
            name: "client-b",
            api: "client library (Tinyid protocol), `odd`",
            plan: Plan::Client { group: 1 },
        },
    ]
}

/// The clients: biz and protocol of each group.
const CLIENT_GROUPS: [(Biz, Protocol); 2] =
    [(Biz::Chaos, Protocol::V1), (Biz::Odd, Protocol::Tinyid)];

/// Why a request failed: a category for the report and whether it may happen at all
/// under these faults (an outage may; a refused token or a malformed answer may not).
struct Failure {
    category: String,
    detail: String,
    expected: bool,
}

impl Failure {
    fn outage(category: impl Into<String>, detail: impl Into<String>) -> Failure {
        Failure {
            category: category.into(),
            detail: detail.into(),
            expected: true,
        }
    }

    fn unexpected(category: impl Into<String>, detail: impl Into<String>) -> Failure {
        Failure {
            category: category.into(),
            detail: detail.into(),
            expected: false,
        }
    }

    fn transport(e: &reqwest::Error) -> Failure {
        let category = if e.is_timeout() {
            "no answer within 2 s"
        } else if e.is_connect() {
            "connection refused"
        } else {
            "connection lost"
        };
        Failure::outage(category, e.to_string())
    }

    /// A Tinyid-style error message (code 6): outages are expected, the rest is not.
    fn tinyid(route: &str, message: &str) -> Failure {
        if message.contains("no database reachable") {
            Failure::outage(format!("{route}: unavailable"), message)
        } else if message.contains("compare-and-set") {
            Failure::outage(format!("{route}: contention"), message)
        } else {
            Failure::unexpected(format!("{route}: error"), message)
        }
    }
}

/// A successful answer.
enum Answer {
    Ids(Vec<i64>),
    Segment { seg: Seg, database: Option<String> },
}

async fn request(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    op: Op,
    n: usize,
) -> Result<Answer, Failure> {
    let biz = op.biz.name();
    let req = match op.route {
        Route::NextIdSimple => http.get(format!(
            "{base}/tinyid/id/nextIdSimple?bizType={biz}&token={token}&batchSize={n}"
        )),
        Route::NextId => http.get(format!(
            "{base}/tinyid/id/nextId?bizType={biz}&token={token}&batchSize={n}"
        )),
        Route::V1Ids => http
            .get(format!("{base}/v1/ids/{biz}?count={n}"))
            .bearer_auth(token),
        Route::V1Segment => http
            .get(format!("{base}/v1/segments/{biz}"))
            .bearer_auth(token),
        Route::SegmentSimple => http.get(format!(
            "{base}/tinyid/id/nextSegmentIdSimple?bizType={biz}&token={token}"
        )),
    };
    let r = req.send().await.map_err(|e| Failure::transport(&e))?;
    let status = r.status().as_u16();
    let header = r
        .headers()
        .get("x-segmint-error")
        .map(|v| v.to_str().unwrap_or("?").to_string());
    let body = r.text().await.map_err(|e| Failure::transport(&e))?;
    let route = format!("{:?}", op.route);
    let bad = |what: String| {
        Failure::unexpected(
            format!("{route}: malformed answer"),
            format!("{what}: {body}"),
        )
    };
    let json = || {
        serde_json::from_str::<serde_json::Value>(&body).map_err(|e| bad(format!("not JSON ({e})")))
    };
    match op.route {
        Route::NextIdSimple | Route::SegmentSimple => {
            if let Some(reason) = header {
                return Err(match reason.split_once(": ") {
                    Some(("6", message)) => Failure::tinyid(&route, message),
                    _ => Failure::unexpected(format!("{route}: refused"), reason),
                });
            }
            if status != 200 {
                return Err(Failure::unexpected(format!("{route}: HTTP {status}"), body));
            }
            let numbers: Vec<i64> = body
                .trim()
                .split(',')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .map_err(|e| bad(format!("not numbers ({e})")))?;
            if op.route == Route::NextIdSimple {
                return Ok(Answer::Ids(numbers));
            }
            let [current, _loading, max, delta, remainder] = numbers[..] else {
                return Err(bad("not 5 numbers".into()));
            };
            Ok(Answer::Segment {
                seg: Seg {
                    current,
                    max,
                    delta,
                    remainder,
                },
                database: None,
            })
        }
        Route::NextId => {
            let v = json()?;
            match v["code"].as_i64() {
                Some(200) => serde_json::from_value(v["data"].clone())
                    .map(Answer::Ids)
                    .map_err(|e| bad(format!("no IDs ({e})"))),
                Some(6) => Err(Failure::tinyid(&route, v["message"].as_str().unwrap_or(""))),
                _ => Err(Failure::unexpected(format!("{route}: refused"), body)),
            }
        }
        Route::V1Ids | Route::V1Segment => {
            let v = json()?;
            if status != 200 {
                let code = v["error"]["code"].as_str().unwrap_or("?").to_string();
                let category = format!("{route}: HTTP {status} {code}");
                return Err(if status == 503 {
                    Failure::outage(category, body)
                } else {
                    Failure::unexpected(category, body)
                });
            }
            if op.route == Route::V1Ids {
                return serde_json::from_value(v["ids"].clone())
                    .map(Answer::Ids)
                    .map_err(|e| bad(format!("no IDs ({e})")));
            }
            let field = |k: &str| v[k].as_i64().ok_or_else(|| bad(format!("no `{k}`")));
            let seg = Seg {
                current: field("current_id")?,
                max: field("max_id")?,
                delta: field("delta")?,
                remainder: field("remainder")?,
            };
            if field("count")? != seg.count() as i64
                || v["first_id"].as_i64() != seg.bounds().map(|b| b.0)
                || field("step")? != seg.max - seg.current
            {
                return Err(bad(
                    "count, first_id or step disagree with the segment".into()
                ));
            }
            Ok(Answer::Segment {
                seg,
                database: v["database"].as_str().map(str::to_string),
            })
        }
    }
}

/// What one worker saw.
struct Stats {
    name: &'static str,
    api: &'static str,
    requests: u64,
    ok: u64,
    /// IDs received (for a segment, every ID in it).
    ids: u64,
    segments: u64,
    /// Successes once every fault was repaired.
    ok_when_calm: u64,
    failures: BTreeMap<String, u64>,
    /// Failures that no fault explains, and answers that break an invariant.
    unexpected: Vec<String>,
    longest_gap: Duration,
    /// When the longest gap began and ended (seconds into the run).
    gap_at: (f64, f64),
    /// Every gap of a second or more, `(from, to)` in seconds into the run.
    gaps: Vec<(f64, f64)>,
    last_ok: Instant,
    latencies_us: Vec<u32>,
}

impl Stats {
    fn new(name: &'static str, api: &'static str) -> Stats {
        Stats {
            name,
            api,
            requests: 0,
            ok: 0,
            ids: 0,
            segments: 0,
            ok_when_calm: 0,
            failures: BTreeMap::new(),
            unexpected: Vec::new(),
            longest_gap: Duration::ZERO,
            gap_at: (0.0, 0.0),
            gaps: Vec::new(),
            last_ok: Instant::now(),
            latencies_us: Vec::new(),
        }
    }

    fn answered(&mut self, started: Instant) {
        self.requests += 1;
        self.latencies_us
            .push(started.elapsed().as_micros().min(u32::MAX as u128) as u32);
    }

    fn gap_until(&mut self, ctx: &Ctx, now: Instant) {
        let gap = now - self.last_ok;
        let at = (ctx.secs(self.last_ok), ctx.secs(now));
        if gap > self.longest_gap {
            self.longest_gap = gap;
            self.gap_at = at;
        }
        if gap >= Duration::from_secs(1) {
            self.gaps.push(at);
        }
    }

    fn success(&mut self, ctx: &Ctx, started: Instant, ids: u64) {
        self.answered(started);
        let now = Instant::now();
        self.ok += 1;
        self.ids += ids;
        self.gap_until(ctx, now);
        self.last_ok = now;
        if ctx.phase() == CALMING {
            if self.ok_when_calm == 0 {
                ctx.back.fetch_add(1, Ordering::SeqCst);
            }
            self.ok_when_calm += 1;
        }
    }

    fn failure(&mut self, ctx: &Ctx, started: Instant, f: Failure) {
        self.answered(started);
        *self.failures.entry(f.category.clone()).or_default() += 1;
        if !f.expected {
            self.violation(ctx, format!("{}: {}", f.category, f.detail));
        }
    }

    fn violation(&mut self, ctx: &Ctx, msg: String) {
        if self.unexpected.len() < 20 {
            eprintln!("chaos: {} at t={:.1}s: {msg}", self.name, ctx.now());
            self.unexpected
                .push(format!("{} at t={:.1}s: {msg}", self.name, ctx.now()));
        }
    }
}

/// A worker's result: its statistics and the IDs it received.
struct Outcome {
    stats: Stats,
    ledger: Ledger,
    /// For a client worker, its group (its IDs are checked against the client's
    /// segments, which count as received instead).
    group: Option<usize>,
}

async fn http_worker(
    ctx: Arc<Ctx>,
    w: usize,
    spec: &WorkerSpec,
    ops: &'static [Op],
    mut rng: Rng,
) -> Outcome {
    let http = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(REQUEST_TIMEOUT)
        .build()
        .unwrap();
    let mut stats = Stats::new(spec.name, spec.api);
    let mut ledger = Ledger::new();
    let source = w as u32;
    let mut server = w % SERVERS;
    while ctx.phase() != STOPPING {
        let op = ops[rng.below(ops.len())];
        let n = rng.between(1, op.max as u64) as usize;
        let token = &ctx.tokens[op.biz.index()];
        let started = Instant::now();
        match request(&http, &ctx.servers[server].base, token, op, n).await {
            Ok(Answer::Ids(ids)) => {
                if ids.len() != n {
                    stats.violation(
                        &ctx,
                        format!("{op:?}: asked for {n} IDs, got {}", ids.len()),
                    );
                }
                ledger.add_ids(op.biz, &ids, source);
                stats.success(&ctx, started, ids.len() as u64);
            }
            Ok(Answer::Segment { seg, database }) => {
                if let Err(e) = check_segment(op.biz, &seg, database.as_deref()) {
                    stats.violation(&ctx, format!("{op:?}: {e}: {seg:?}"));
                }
                ledger.add_segment(op.biz, &seg, source);
                stats.segments += 1;
                stats.success(&ctx, started, seg.count());
            }
            Err(f) => {
                stats.failure(&ctx, started, f);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // Every request goes to the next server, a retry after a failure too.
        server = (server + 1) % SERVERS;
    }
    stats.gap_until(&ctx, Instant::now());
    Outcome {
        stats,
        ledger,
        group: None,
    }
}

/// A segment's class must be the class of the database it came from.
fn check_segment(biz: Biz, seg: &Seg, database: Option<&str>) -> Result<(), String> {
    if seg.max - seg.current != STEP {
        return Err(format!("step {} instead of {STEP}", seg.max - seg.current));
    }
    if seg.delta != biz.modulus() {
        return Err(format!("delta {} instead of {}", seg.delta, biz.modulus()));
    }
    let db = biz.database_of(seg.remainder).ok_or_else(|| {
        format!(
            "class {} mod {} belongs to no database",
            seg.remainder, seg.delta
        )
    })?;
    if let Some(name) = database
        && name != format!("pg{db}")
    {
        return Err(format!(
            "class {} mod {} is pg{db}'s, not {name}'s",
            seg.remainder, seg.delta
        ));
    }
    if seg.count() == 0 {
        return Err("no ID in the segment".into());
    }
    Ok(())
}

async fn client_worker(
    ctx: Arc<Ctx>,
    w: usize,
    spec: &WorkerSpec,
    group: usize,
    biz: segmint::client::Biz,
    mut rng: Rng,
) -> Outcome {
    let (biz_kind, _) = CLIENT_GROUPS[group];
    let mut stats = Stats::new(spec.name, spec.api);
    let mut ledger = Ledger::new();
    let source = w as u32;
    while ctx.phase() != STOPPING {
        let started = Instant::now();
        let result = if rng.below(2) == 0 {
            biz.next_id().await.map(|id| vec![id])
        } else {
            biz.next_ids(rng.between(1, 200) as usize).await
        };
        match result {
            Ok(ids) => {
                ledger.add_ids(biz_kind, &ids, source);
                stats.success(&ctx, started, ids.len() as u64);
            }
            Err(e) => {
                let failure = match &e {
                    ClientError::Unavailable { .. } => {
                        Failure::outage("client: every server failed", e.to_string())
                    }
                    ClientError::Timeout { .. } => {
                        Failure::outage("client: no segment in time", e.to_string())
                    }
                    _ => Failure::unexpected("client: refused", e.to_string()),
                };
                stats.failure(&ctx, started, failure);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // Keeps the clients from spending the whole machine on local IDs: they still
        // fetch a segment every few milliseconds.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    stats.gap_until(&ctx, Instant::now());
    Outcome {
        stats,
        ledger,
        group: Some(group),
    }
}

// ---------------------------------------------------------------------------------------
// Faults.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum FaultKind {
    ServerKill,
    ServerTerm,
    ServerStop,
    DbStop,
    DbKill,
    DbStall,
    BackInTime,
    DiskFull,
}

const FAULT_KINDS: [FaultKind; 8] = [
    FaultKind::ServerKill,
    FaultKind::ServerTerm,
    FaultKind::ServerStop,
    FaultKind::DbStop,
    FaultKind::DbKill,
    FaultKind::DbStall,
    FaultKind::BackInTime,
    FaultKind::DiskFull,
];

impl FaultKind {
    fn label(self) -> &'static str {
        match self {
            FaultKind::ServerKill => "segmint `kill -9`, restarted on its port",
            FaultKind::ServerTerm => "segmint SIGTERM (graceful stop, IDs given back), restarted",
            FaultKind::ServerStop => "segmint frozen (SIGSTOP … SIGCONT)",
            FaultKind::DbStop => "PostgreSQL `pg_ctl stop -m immediate`, restarted",
            FaultKind::DbKill => "PostgreSQL postmaster `kill -9`, restarted",
            FaultKind::DbStall => "PostgreSQL biz rows locked (`FOR UPDATE` + `pg_sleep`)",
            FaultKind::BackInTime => {
                "PostgreSQL biz rows restored from a backup taken seconds before, fenced, then `segmint db fence`"
            }
            FaultKind::DiskFull => {
                "PostgreSQL file system full (its tmpfs filled with a ballast file), then freed"
            }
        }
    }

    fn on_database(self) -> bool {
        matches!(
            self,
            FaultKind::DbStop
                | FaultKind::DbKill
                | FaultKind::DbStall
                | FaultKind::BackInTime
                | FaultKind::DiskFull
        )
    }

    /// How long the fault holds (down time, freeze, lock), drawn from the schedule.
    fn hold(self, rng: &mut Rng) -> Duration {
        match self {
            FaultKind::ServerKill => rng.millis(0, 1500),
            FaultKind::ServerTerm => Duration::ZERO,
            FaultKind::ServerStop => rng.millis(1000, 3000),
            FaultKind::DbStop => rng.millis(1000, 4000),
            FaultKind::DbKill => rng.millis(0, 2000),
            FaultKind::DbStall => rng.millis(3000, 6000),
            // From the backup to the restore.
            FaultKind::BackInTime => rng.millis(2000, 4000),
            FaultKind::DiskFull => rng.millis(2000, 4000),
        }
    }
}

struct FaultRecord {
    kind: FaultKind,
    target: usize,
    start: f64,
    end: f64,
    hold: Duration,
    note: String,
}

/// Which servers and databases a fault is acting on.
#[derive(Default)]
struct Busy {
    /// Servers a fault is acting on.
    servers: [bool; SERVERS],
    /// The database a fault takes away (down or stalled): at most one at a time.
    database: Option<usize>,
    /// The database a back-in-time fault is acting on, from its backup until its fence
    /// is lifted: no other fault touches it, and since at most one other database is
    /// taken away meanwhile, one more stays up to witness its reservations.
    restored: Option<usize>,
}

/// Every 2 to 5 s, starts the next fault of a shuffled deck that holds every kind (and a
/// kill of every server), passing over those that would break the rules now (at most one
/// database fault at a time, at least one server untouched) and waiting when all left
/// would. Faults overlap otherwise. Returns once the last fault is repaired, with how
/// many faults had to wait.
async fn inject(ctx: Arc<Ctx>, mut rng: Rng, until: Instant) -> (Vec<FaultRecord>, usize) {
    let busy = Arc::new(Mutex::new(Busy::default()));
    let mut running = JoinSet::new();
    let mut deck: Vec<(FaultKind, Option<usize>)> = Vec::new();
    let mut waits = 0;
    loop {
        let pause = rng.millis(2000, 5000);
        let now = Instant::now();
        if now + pause >= until {
            tokio::time::sleep(until.saturating_duration_since(now)).await;
            break;
        }
        tokio::time::sleep(pause).await;
        watch_for_crashes(&ctx, &busy);
        if deck.is_empty() {
            deck = vec![
                (FaultKind::ServerKill, Some(0)),
                (FaultKind::ServerKill, Some(1)),
                (FaultKind::ServerKill, Some(2)),
                (FaultKind::ServerTerm, None),
                (FaultKind::ServerStop, None),
                (FaultKind::ServerStop, None),
                (FaultKind::DbStop, None),
                (FaultKind::DbKill, None),
                (FaultKind::DbStall, None),
                (FaultKind::DbStall, None),
                (FaultKind::BackInTime, None),
                (FaultKind::DiskFull, Some(DISK_DB)),
            ];
            rng.shuffle(&mut deck);
        }
        // A fault the rules forbid now waits for the one in its way to be repaired.
        let mut waited = false;
        let chosen = loop {
            if let Some(chosen) = pick(&mut deck, &busy, &mut rng) {
                break Some(chosen);
            }
            if Instant::now() >= until {
                break None;
            }
            if !waited {
                waited = true;
                waits += 1;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        let Some((kind, target, hold)) = chosen else {
            break;
        };
        let (ctx, busy) = (ctx.clone(), busy.clone());
        running.spawn(async move {
            let start = ctx.now();
            eprintln!("chaos: t={start:.1}s {kind:?} on {target} for {hold:?}");
            let note = match run_fault(&ctx, kind, target, hold).await {
                Ok(note) => note,
                Err(e) => {
                    ctx.anomaly(format!("{kind:?} on {target}: {e}"));
                    format!("FAILED: {e}")
                }
            };
            let mut b = busy.lock().unwrap();
            if kind == FaultKind::BackInTime {
                b.restored = None;
            } else if kind.on_database() {
                b.database = None;
            } else {
                b.servers[target] = false;
            }
            FaultRecord {
                kind,
                target,
                start,
                end: ctx.now(),
                hold,
                note,
            }
        });
    }
    let mut records = Vec::new();
    while let Some(r) = running.join_next().await {
        records.push(r.expect("fault task"));
    }
    watch_for_crashes(&ctx, &busy);
    records.sort_by(|a, b| a.start.total_cmp(&b.start));
    (records, waits)
}

/// Takes the first fault of the deck that the rules allow now (at most one database
/// taken away at a time, never the one going back in time; at most one back-in-time
/// fault at a time; at least one server untouched), draws its target if the deck left
/// it open and how long it holds, and marks its target busy.
fn pick(
    deck: &mut Vec<(FaultKind, Option<usize>)>,
    busy: &Mutex<Busy>,
    rng: &mut Rng,
) -> Option<(FaultKind, usize, Duration)> {
    let mut b = busy.lock().unwrap();
    let servers_busy = b.servers.iter().filter(|&&x| x).count();
    let i = deck.iter().position(|&(kind, target)| {
        if kind == FaultKind::BackInTime {
            b.restored.is_none() && target.is_none_or(|d| b.database != Some(d))
        } else if kind.on_database() {
            b.database.is_none() && target.is_none_or(|d| b.restored != Some(d))
        } else {
            servers_busy + 1 < SERVERS && target.is_none_or(|s| !b.servers[s])
        }
    })?;
    let (kind, target) = deck.remove(i);
    let target = target.unwrap_or_else(|| {
        if kind.on_database() {
            let taken = if kind == FaultKind::BackInTime {
                b.database
            } else {
                b.restored
            };
            let free: Vec<usize> = (0..DATABASES).filter(|&d| taken != Some(d)).collect();
            free[rng.below(free.len())]
        } else {
            let free: Vec<usize> = (0..SERVERS).filter(|&s| !b.servers[s]).collect();
            free[rng.below(free.len())]
        }
    });
    if kind == FaultKind::BackInTime {
        b.restored = Some(target);
    } else if kind.on_database() {
        b.database = Some(target);
    } else {
        b.servers[target] = true;
    }
    Some((kind, target, kind.hold(rng)))
}

/// A server no fault is acting on must be running: one that exited on its own is an
/// anomaly (a crash), and is restarted.
fn watch_for_crashes(ctx: &Ctx, busy: &Mutex<Busy>) {
    let b = busy.lock().unwrap();
    for (s, server) in ctx.servers.iter().enumerate() {
        if !b.servers[s]
            && let Some(status) = server.exited()
        {
            ctx.anomaly(format!(
                "server {s} exited on its own ({status})\n{}",
                server.log_tail()
            ));
            drop(server.take());
            ctx.start_server(s, "after an unexpected exit");
        }
    }
}

/// Applies one fault and repairs it; a note for the timeline.
async fn run_fault(
    ctx: &Ctx,
    kind: FaultKind,
    target: usize,
    hold: Duration,
) -> Result<String, String> {
    match kind {
        FaultKind::ServerKill | FaultKind::ServerTerm => {
            let server = &ctx.servers[target];
            let note = if kind == FaultKind::ServerKill {
                server.kill9()?;
                String::new()
            } else {
                let began = Instant::now();
                let status = server.terminate(Duration::from_secs(15)).await?;
                if !status.success() {
                    return Err(format!(
                        "graceful stop exited with {status}\n{}",
                        server.log_tail()
                    ));
                }
                format!("stopped in {:.2} s", began.elapsed().as_secs_f64())
            };
            tokio::time::sleep(hold).await;
            ctx.start_server(target, &format!("after {kind:?}"));
            let began = Instant::now();
            server
                .wait_healthy(RECOVERY)
                .await
                .map_err(|e| format!("restart: {e}\n{}", server.log_tail()))?;
            Ok(
                format!("{note} back in {:.2} s", began.elapsed().as_secs_f64())
                    .trim()
                    .to_string(),
            )
        }
        FaultKind::ServerStop => {
            let server = &ctx.servers[target];
            server.signal("STOP")?;
            tokio::time::sleep(hold).await;
            server.signal("CONT")?;
            Ok(String::new())
        }
        FaultKind::DbStop | FaultKind::DbKill => {
            let db = &ctx.databases[target];
            let began = Instant::now();
            let mut note = String::new();
            if kind == FaultKind::DbStop {
                db.blocking("pg_ctl stop -m immediate", Cluster::stop)
                    .await?;
            } else {
                let pid = db.postmaster_pid()?;
                let children = children_of(pid);
                send_signal(pid, "KILL")?;
                // The orphaned backends exit on their own once they see the postmaster
                // gone; the cluster cannot start while they hold its shared memory, nor
                // while the dead postmaster's PID exists, even as a zombie not yet reaped
                // (PostgreSQL then takes its lock file for a running server's).
                let deadline = Instant::now() + Duration::from_secs(15);
                while (proc_state(pid).is_some() || children.iter().any(|&c| alive(c)))
                    && Instant::now() < deadline
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                note = format!(
                    "postmaster and {} children gone in {:.2} s; ",
                    children.len(),
                    began.elapsed().as_secs_f64()
                );
            }
            tokio::time::sleep(hold).await;
            let began = Instant::now();
            let attempts = db.restart().await?;
            Ok(format!(
                "{note}restarted in {:.2} s ({attempts} attempt{})",
                began.elapsed().as_secs_f64(),
                if attempts == 1 { "" } else { "s" }
            ))
        }
        FaultKind::BackInTime => back_in_time(ctx, target, hold).await,
        FaultKind::DiskFull => disk_full(ctx, target, hold).await,
        FaultKind::DbStall => {
            let db = &ctx.databases[target];
            let sql = format!(
                "BEGIN; SELECT * FROM tiny_id_info WHERE biz_type IN ('chaos', 'odd') FOR UPDATE; SELECT pg_sleep({:.3}); COMMIT;",
                hold.as_secs_f64()
            );
            let mut psql = db.cluster.psql_background(&sql);
            let deadline = Instant::now() + hold + Duration::from_secs(15);
            loop {
                if let Some(status) = psql.0.try_wait().map_err(|e| e.to_string())? {
                    return if status.success() {
                        Ok(String::new())
                    } else {
                        // The lock was taken or not: either way the database was in use.
                        Ok(format!("psql exited with {status}"))
                    };
                }
                if Instant::now() > deadline {
                    return Err("the locking psql did not finish".into());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Longest the servers may take to show a restored database fenced on `/readyz`, and to
/// use it again once `segmint db fence` raised it: a catalog refresh (1 s here), plus a
/// server frozen or restarting meanwhile.
const FENCE_SEEN: Duration = Duration::from_secs(15);
/// How long a restored database stays fenced before the operator raises it, so that
/// servers restarted meanwhile meet it fenced too.
const FENCE_HELD: Duration = Duration::from_secs(2);
/// How long the harness retries `segmint db fence` (it needs every other database).
const FENCE_RETRY: Duration = Duration::from_secs(30);

/// Whether server `base` shows database `name` fenced on `/readyz`: the reason if it
/// does, `Some(None)` if it does not, `None` when it does not answer.
async fn fence_shown(http: &reqwest::Client, base: &str, name: &str) -> Option<Option<String>> {
    let r = http.get(format!("{base}/readyz")).send().await.ok()?;
    let body: serde_json::Value = r.json().await.ok()?;
    let db = body["databases"]
        .as_array()?
        .iter()
        .find(|d| d["name"] == name)?;
    Some(db["fenced"].as_str().map(str::to_string))
}

/// What one server showed while the harness watched a fence.
enum Seen {
    /// It showed what was awaited at this time (seconds into the run); whether its
    /// process started after the watch began (a fresh server); the fence's reason.
    At(f64, bool, Option<String>),
    /// It answered, but never as awaited.
    Never,
    /// It never answered (killed or frozen the whole time).
    Silent,
}

/// Polls every server's `/readyz` until each shows `name` fenced (`fenced`) or not,
/// for at most [`FENCE_SEEN`].
async fn watch_fence(ctx: &Ctx, name: &str, fenced: bool) -> Vec<Seen> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let starts: Vec<u32> = ctx
        .starts
        .iter()
        .map(|s| s.load(Ordering::SeqCst))
        .collect();
    let mut seen: Vec<Seen> = (0..SERVERS).map(|_| Seen::Silent).collect();
    let deadline = Instant::now() + FENCE_SEEN;
    while Instant::now() < deadline {
        let mut asks = JoinSet::new();
        for (s, server) in ctx.servers.iter().enumerate() {
            if !matches!(seen[s], Seen::At(..)) {
                let (http, base, name) = (http.clone(), server.base.clone(), name.to_string());
                asks.spawn(async move { (s, fence_shown(&http, &base, &name).await) });
            }
        }
        if asks.is_empty() {
            break;
        }
        while let Some(asked) = asks.join_next().await {
            let (s, shown) = asked.expect("readyz task");
            match shown {
                Some(reason) if reason.is_some() == fenced => {
                    let fresh = ctx.starts[s].load(Ordering::SeqCst) > starts[s];
                    seen[s] = Seen::At(ctx.now(), fresh, reason);
                }
                Some(_) => seen[s] = Seen::Never,
                None => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen
}

/// One line on what the servers showed since `since` (seconds into the run); the
/// servers that answered but never showed it.
fn seen_note(seen: &[Seen], since: f64) -> (String, Vec<usize>) {
    let mut parts = Vec::new();
    let mut never = Vec::new();
    for (s, seen) in seen.iter().enumerate() {
        parts.push(match seen {
            Seen::At(at, fresh, _) => format!(
                "server {s} +{:.1} s{}",
                at - since,
                if *fresh { " (restarted since)" } else { "" }
            ),
            Seen::Never => {
                never.push(s);
                format!("server {s} NEVER")
            }
            Seen::Silent => format!("server {s} did not answer"),
        });
    }
    (parts.join(", "), never)
}

/// A restore from backup: takes a backup of database `target`'s biz rows, lets the
/// servers reserve from it for `hold`, and sets its rows back to the backup. Every
/// server must then show it fenced on `/readyz`; after [`FENCE_HELD`] the real
/// `segmint db fence` raises it (retried while another database is down), and every
/// server must use it again. The scheduler keeps the other databases from being taken
/// away together meanwhile, so each reservation is witnessed somewhere.
async fn back_in_time(ctx: &Ctx, target: usize, hold: Duration) -> Result<String, String> {
    let db = &ctx.databases[target];
    let name = format!("pg{target}");
    let backup = db
        .sql("SELECT biz_type, max_id, version FROM tiny_id_info ORDER BY biz_type".into())
        .await?;
    let backed_up = ctx.now();
    let rows: Vec<String> = backup
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split('|').collect();
            format!("('{}', {}::bigint, {}::bigint)", f[0], f[1], f[2])
        })
        .collect();
    if rows.is_empty() {
        return Err(format!("{name} has no biz rows to back up"));
    }
    tokio::time::sleep(hold).await;
    // The rows as the backup has them, in one statement; `now` locks each row to read
    // how far it had gone.
    let restore = format!(
        "WITH backup(biz_type, max_id, version) AS (VALUES {}), \
         now AS (SELECT t.biz_type, t.version FROM tiny_id_info t JOIN backup USING (biz_type) FOR UPDATE OF t) \
         UPDATE tiny_id_info t SET max_id = backup.max_id, version = backup.version \
         FROM backup JOIN now USING (biz_type) WHERE t.biz_type = backup.biz_type \
         RETURNING t.biz_type, now.version - backup.version",
        rows.join(", ")
    );
    let restored_rows = db.sql(restore).await?;
    let restored = ctx.now();
    let set_back: Vec<(String, i64)> = restored_rows
        .lines()
        .filter_map(|l| {
            let (biz, by) = l.split_once('|')?;
            Some((biz.to_string(), by.parse().ok()?))
        })
        .collect();
    let what = format!(
        "backup at t={backed_up:.1}s, restored at t={restored:.1}s: {} rows set back by {} versions",
        set_back.len(),
        set_back
            .iter()
            .map(|(biz, by)| format!("{by} (`{biz}`)"))
            .collect::<Vec<_>>()
            .join(" and ")
    );
    eprintln!("chaos: t={restored:.1}s {name}: {what}");
    if set_back.iter().all(|(_, by)| *by == 0) {
        return Err(format!(
            "{what}: nothing was reserved there meanwhile, so nothing went back in time"
        ));
    }

    let fenced = watch_fence(ctx, &name, true).await;
    let (fenced_note, never) = seen_note(&fenced, restored);
    let reason = fenced.iter().find_map(|s| match s {
        Seen::At(_, _, Some(reason)) => Some(reason.clone()),
        _ => None,
    });
    if !never.is_empty() || reason.is_none() {
        return Err(format!(
            "{what}; servers {never:?} answered /readyz without showing {name} fenced within {FENCE_SEEN:?} ({fenced_note})"
        ));
    }
    let reason = reason.unwrap_or_default();
    if !reason.contains("gone back in time") {
        return Err(format!("{what}; fenced for another reason: {reason}"));
    }

    tokio::time::sleep(FENCE_HELD).await;
    let config = ctx.servers[0].config.clone();
    let began = Instant::now();
    let mut attempts = 0;
    let raised = loop {
        attempts += 1;
        let (config, db_name) = (config.clone(), name.clone());
        let out = tokio::task::spawn_blocking(move || {
            Command::new(segmint_bin())
                .arg("--config")
                .arg(&config)
                .args(["db", "fence", &db_name])
                .env_remove("SEGMINT_CONFIG")
                .output()
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("run segmint db fence: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        if out.status.success() {
            break stdout;
        }
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        if began.elapsed() > FENCE_RETRY {
            return Err(format!(
                "{what}; `segmint db fence {name}` failed {attempts} times: {stderr}{stdout}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let lifted = ctx.now();
    let raised_rows = raised.lines().filter(|l| l.contains("raised from")).count();
    if raised_rows == 0 {
        return Err(format!(
            "{what}; `segmint db fence {name}` raised nothing: {raised}"
        ));
    }
    let used = watch_fence(ctx, &name, false).await;
    let (used_note, never) = seen_note(&used, lifted);
    if !never.is_empty() {
        return Err(format!(
            "{what}; servers {never:?} still showed {name} fenced {FENCE_SEEN:?} after `segmint db fence` ({used_note})"
        ));
    }
    Ok(format!(
        "{what}; shown fenced by {fenced_note} (\"{}\"); `segmint db fence {name}` at t={lifted:.1}s \
         ({attempts} attempt{}) raised {raised_rows} rows; used again by {used_note}",
        reason.chars().take(200).collect::<String>(),
        if attempts == 1 { "" } else { "s" }
    ))
}

/// What PostgreSQL did while its file system was full, from its log and its process.
#[derive(Default, Clone, Copy)]
struct DiskOutcome {
    /// Log lines saying `No space left on device` (errors and the PANIC among them).
    enospc: usize,
    /// PANICs: PostgreSQL's answer to a WAL write that fails.
    panics: usize,
    /// Whether the postmaster ended its backends and reinitialized on its own.
    reinitialized: bool,
    /// Whether the postmaster exited, so that the harness had to start it again.
    restarted: bool,
}

/// Fills the tmpfs of database `target` with a ballast file until `ENOSPC`, holds it
/// full for `hold`, deletes the ballast, and brings the database back if it crashed
/// (as the crash faults do). Returns a note on what PostgreSQL did.
///
/// The run's traffic writes less than one WAL segment in a few seconds, and PostgreSQL
/// keeps recycled segments ahead, so a full disk mostly costs it a few failed writes.
/// Every other disk-full fault (the first included) therefore also switches WAL
/// segments while the disk is full, as a burst of writes would, until PostgreSQL needs
/// a new segment file: the WAL write that then fails is its PANIC.
async fn disk_full(ctx: &Ctx, target: usize, hold: Duration) -> Result<String, String> {
    let db = &ctx.databases[target];
    let Cluster::Tmpfs(tmpfs) = &*db.cluster else {
        return Err(format!("pg{target} is not on a tmpfs"));
    };
    let log_from = std::fs::metadata(db.log()).map_or(0, |m| m.len());
    let pid = db.postmaster_pid()?;
    let children = children_of(pid);
    let ballast = tmpfs.ballast();
    let path = ballast.clone();
    let began = Instant::now();
    let filled = tokio::task::spawn_blocking(move || -> Result<u64, String> {
        let mut file = std::fs::File::create(&path).map_err(|e| format!("create ballast: {e}"))?;
        let chunk = vec![0u8; 1 << 20];
        loop {
            match file.write_all(&chunk) {
                Ok(()) => {}
                // ENOSPC: the file system is full, which is the point.
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => return Err(format!("write ballast: {e}")),
            }
        }
        file.metadata()
            .map(|m| m.len())
            .map_err(|e| format!("ballast size: {e}"))
    })
    .await
    .map_err(|e| e.to_string())??;
    let fill_secs = began.elapsed().as_secs_f64();
    let held_until = Instant::now() + hold;
    let burst = ctx.disk_full.lock().unwrap().len().is_multiple_of(2);
    let mut switches = 0;
    if burst {
        for _ in 0..5 {
            if !alive(pid) || Instant::now() >= held_until {
                break;
            }
            // Fails once PostgreSQL is down: that is what it is for.
            if db.sql("SELECT pg_switch_wal()".into()).await.is_ok() {
                switches += 1;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    tokio::time::sleep(held_until.saturating_duration_since(Instant::now())).await;
    std::fs::remove_file(&ballast).map_err(|e| format!("remove ballast: {e}"))?;

    // Either PostgreSQL answers again on its own (after errors, or a crash it recovered
    // from), or its postmaster has exited and is started again.
    let deadline = Instant::now() + RECOVERY;
    let mut outcome = DiskOutcome::default();
    let mut back = String::new();
    loop {
        if !alive(pid) {
            let gone = Instant::now() + Duration::from_secs(15);
            while children.iter().any(|&c| alive(c)) && Instant::now() < gone {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let restarting = Instant::now();
            let attempts = db.restart().await?;
            outcome.restarted = true;
            back = format!(
                "; the postmaster had exited: restarted in {:.2} s ({attempts} attempt{})",
                restarting.elapsed().as_secs_f64(),
                if attempts == 1 { "" } else { "s" }
            );
            break;
        }
        if db.sql("SELECT 1".into()).await.is_ok() {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "pg{target} did not answer within {RECOVERY:?} of the ballast's removal"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let log = std::fs::read(db.log()).unwrap_or_default();
    let log = String::from_utf8_lossy(log.get(log_from as usize..).unwrap_or_default());
    outcome.enospc = log.matches("No space left on device").count();
    outcome.panics = log.lines().filter(|l| l.contains("PANIC:")).count();
    outcome.reinitialized = log.contains("reinitializing");
    let first_error = log
        .lines()
        .find(|l| l.contains("No space left on device"))
        .and_then(|l| l.split_once("]").map(|(_, rest)| rest.trim().to_string()))
        .unwrap_or_default();
    ctx.disk_full.lock().unwrap().push(outcome);
    Ok(format!(
        "{:.1} MB of ballast filled the {TMPFS_MB} MB tmpfs in {fill_secs:.2} s; held full {:.1} s; \
         {}PostgreSQL logged {} ENOSPC line{}, {} PANIC{}{}{}{}",
        filled as f64 / (1 << 20) as f64,
        hold.as_secs_f64(),
        if burst {
            format!("WAL segment switches while full: {switches}; ")
        } else {
            String::new()
        },
        outcome.enospc,
        if outcome.enospc == 1 { "" } else { "s" },
        outcome.panics,
        if outcome.panics == 1 { "" } else { "s" },
        if outcome.reinitialized {
            ", ended its backends and reinitialized"
        } else {
            ""
        },
        back,
        if first_error.is_empty() {
            String::new()
        } else {
            format!(
                " (first: {})",
                first_error.chars().take(140).collect::<String>()
            )
        }
    ))
}

// ---------------------------------------------------------------------------------------
// The test.

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(us: u32) -> String {
    format!("{:.1}", f64::from(us) / 1000.0)
}

fn utc_now() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// Sums `key=N` over the lines of a log.
fn sum_field(text: &str, key: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_once(key))
        .filter_map(|(_, rest)| {
            rest.split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}

/// Three databases (classes 0, 1, 2 mod 3) with `chaos` and the odd-only `odd`, and three
/// servers using them all, each answering.
async fn set_up() -> Arc<Ctx> {
    let clusters: Vec<Arc<Cluster>> = std::thread::scope(|s| {
        let starting: Vec<_> = (0..DATABASES)
            .map(|i| {
                s.spawn(move || {
                    if i == DISK_DB {
                        Cluster::Tmpfs(TmpfsCluster::start())
                    } else {
                        Cluster::Plain(PgCluster::start())
                    }
                })
            })
            .collect();
        starting
            .into_iter()
            .map(|h| Arc::new(h.join().unwrap()))
            .collect()
    });
    let urls: Vec<String> = clusters.iter().map(|c| c.url()).collect();
    // Fixed steps: segments stay small and are reserved all the time.
    let extra = "adaptive_step = false";
    let config = || Config::from_toml(&config_toml_urls(&urls, extra)).expect("configuration");
    let tokens = [
        setup_biz(&config(), Biz::Chaos.name(), STEP, false).await,
        setup_biz(&config(), Biz::Odd.name(), STEP, true).await,
    ];
    let dir = tempfile::Builder::new()
        .prefix("segmint-chaos-")
        .tempdir()
        .unwrap();
    let config_file = dir.path().join("segmint.toml");
    std::fs::write(&config_file, config_toml_urls(&urls, extra)).unwrap();
    let databases: Vec<Database> = clusters
        .iter()
        .enumerate()
        .map(|(i, c)| Database {
            index: i,
            cluster: c.clone(),
            data_dir: PathBuf::from(c.psql("SHOW data_directory")),
        })
        .collect();
    for db in &databases {
        for biz in BIZS {
            let row = db.cluster.row(biz.name());
            let f: Vec<&str> = row.split('|').collect();
            assert_eq!(
                (f[3].parse::<i64>().unwrap(), f[4].parse::<i64>().unwrap()),
                (biz.modulus(), biz.class_of(db.index)),
                "class of `{}` on pg{}: {row}",
                biz.name(),
                db.index
            );
        }
    }
    let servers: Vec<Server> = (0..SERVERS)
        .map(|i| {
            let port = free_port();
            Server {
                index: i,
                base: format!("http://127.0.0.1:{port}"),
                port,
                config: config_file.clone(),
                log: dir.path().join(format!("server-{i}.log")),
                child: Mutex::new(None),
            }
        })
        .collect();
    let ctx = Arc::new(Ctx {
        t0: Instant::now(),
        phase: AtomicU8::new(CHAOS),
        servers,
        databases,
        tokens,
        anomalies: Mutex::new(Vec::new()),
        starts: (0..SERVERS).map(|_| AtomicU32::new(0)).collect(),
        back: AtomicUsize::new(0),
        disk_full: Mutex::new(Vec::new()),
        _dir: dir,
    });
    for s in 0..SERVERS {
        ctx.start_server(s, "initial");
    }
    for server in &ctx.servers {
        if let Err(e) = server.wait_healthy(RECOVERY).await {
            panic!(
                "server {} did not start: {e}\n{}",
                server.index,
                server.log_tail()
            );
        }
    }
    ctx
}

/// What a run produced.
struct Run {
    secs: u64,
    seed: u64,
    setup_secs: f64,
    chaos_secs: f64,
    calm_secs: f64,
    /// Traffic from the first request to the last.
    run_secs: f64,
    outcomes: Vec<Outcome>,
    faults: Vec<FaultRecord>,
    /// Faults that had to wait for another to be repaired.
    waits: usize,
    /// The clients' handles, holding the segments they installed.
    clients: Vec<segmint::client::Biz>,
    /// Names of the sources of IDs, indexed by `Span::source`.
    sources: Vec<String>,
    /// When the test process itself stood still, and for how long.
    stalls: Vec<(f64, Duration)>,
}

/// Times the test process itself did not run: a 100 ms timer firing 0.5 s or more late
/// means the machine (or its VM) paused everything, servers and databases included, or
/// starved this runtime; a worker's gap at such a time is not the service's.
async fn watch_stalls(ctx: Arc<Ctx>) -> Vec<(f64, Duration)> {
    let tick = Duration::from_millis(100);
    let mut stalls = Vec::new();
    while ctx.phase() != STOPPING {
        let before = Instant::now();
        tokio::time::sleep(tick).await;
        let late = before.elapsed().saturating_sub(tick);
        if late >= Duration::from_millis(500) {
            stalls.push((ctx.secs(before), late));
        }
    }
    stalls
}

/// Traffic from every worker for `secs` seconds of faults, then without until every
/// worker has succeeded again (`CALM` to `CALM_MAX`); returns once every worker stopped.
async fn run(ctx: &Arc<Ctx>, secs: u64, seed: u64, setup_secs: f64) -> Run {
    let mut rng = Rng::new(seed);
    let bases: Vec<String> = ctx.servers.iter().map(|s| s.base.clone()).collect();
    let clients: Vec<segmint::client::Biz> = CLIENT_GROUPS
        .iter()
        .map(|&(biz, protocol)| {
            let client = Client::builder()
                .servers(bases.clone())
                .token(ctx.tokens[biz.index()].clone())
                .protocol(protocol)
                .request_timeout(REQUEST_TIMEOUT)
                .wait_timeout(Duration::from_secs(5))
                .backoff(Duration::from_millis(100), Duration::from_secs(1))
                .build()
                .unwrap();
            let handle = client.biz(biz.name()).unwrap();
            handle.record_segments();
            handle
        })
        .collect();
    let specs: &'static [WorkerSpec] = Vec::leak(worker_specs());
    let mut workers = JoinSet::new();
    for (w, spec) in specs.iter().enumerate() {
        let worker_rng = Rng::new(rng.next());
        let ctx = ctx.clone();
        match spec.plan {
            Plan::Http(ops) => workers.spawn(http_worker(ctx, w, spec, ops, worker_rng)),
            Plan::Client { group } => workers.spawn(client_worker(
                ctx,
                w,
                spec,
                group,
                clients[group].clone(),
                worker_rng,
            )),
        };
    }
    let stalls = tokio::spawn(watch_stalls(ctx.clone()));
    let traffic_began = Instant::now();
    let (faults, waits) = inject(
        ctx.clone(),
        Rng::new(rng.next()),
        traffic_began + Duration::from_secs(secs),
    )
    .await;
    let chaos_secs = traffic_began.elapsed().as_secs_f64();

    // Every fault is repaired: everything must answer, and every worker succeed again.
    for server in &ctx.servers {
        if let Err(e) = server.wait_healthy(RECOVERY).await {
            ctx.anomaly(format!(
                "server {} not healthy after the faults: {e}\n{}",
                server.index,
                server.log_tail()
            ));
        }
    }
    for db in &ctx.databases {
        if let Err(e) = db.blocking("SELECT 1", |c| drop(c.psql("SELECT 1"))).await {
            ctx.anomaly(format!(
                "pg{} not answering after the faults: {e}",
                db.index
            ));
        }
    }
    ctx.phase.store(CALMING, Ordering::SeqCst);
    let calm_began = Instant::now();
    tokio::time::sleep(CALM).await;
    while ctx.back.load(Ordering::SeqCst) < specs.len() && calm_began.elapsed() < CALM_MAX {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let calm_secs = calm_began.elapsed().as_secs_f64();
    ctx.phase.store(STOPPING, Ordering::SeqCst);
    let mut outcomes = Vec::new();
    while let Some(o) = workers.join_next().await {
        outcomes.push(o.expect("worker task"));
    }
    outcomes.sort_by_key(|o| specs.iter().position(|s| s.name == o.stats.name));
    Run {
        secs,
        seed,
        setup_secs,
        chaos_secs,
        calm_secs,
        run_secs: traffic_began.elapsed().as_secs_f64(),
        outcomes,
        faults,
        waits,
        clients,
        sources: specs.iter().map(|s| s.name.to_string()).collect(),
        stalls: stalls.await.expect("stall watch"),
    }
}

/// One verdict of the audit.
struct Check {
    what: String,
    ok: bool,
    detail: String,
}

fn check(what: impl Into<String>, problems: &[String], fine: impl Into<String>) -> Check {
    Check {
        what: what.into(),
        ok: problems.is_empty(),
        detail: if problems.is_empty() {
            fine.into()
        } else {
            problems.join("; ")
        },
    }
}

/// Figures of the audit shown besides the checks.
struct Findings {
    /// `(biz, IDs received, distinct, duplicates)`.
    per_biz: Vec<(Biz, u64, u64, u64)>,
    /// Per client: `(segments installed, their IDs, IDs returned)`.
    clients: Vec<(usize, u64, u64)>,
    spans: usize,
    given_back: u64,
    wasted: u64,
}

/// Checks everything received: no duplicate, every ID in its database's class and
/// below that database's `max_id`, the clients' IDs within their segments; and that the
/// service kept serving and the faults were all there.
fn audit_run(ctx: &Ctx, run: &mut Run) -> (Vec<Check>, Findings) {
    let mut checks = Vec::new();
    let mut received = Ledger::new();
    let mut client_ids: Vec<Ledger> = CLIENT_GROUPS.iter().map(|_| Ledger::new()).collect();
    let mut spans = 0;
    for o in run.outcomes.iter_mut() {
        let ledger = std::mem::replace(&mut o.ledger, Ledger::new());
        spans += ledger.span_count();
        match o.group {
            None => received.absorb(ledger),
            Some(g) => client_ids[g].absorb(ledger),
        }
    }

    // A client's segments count as received; what it returned must lie within them.
    let mut clients = Vec::new();
    for (g, handle) in run.clients.iter().enumerate() {
        let (biz, _) = CLIENT_GROUPS[g];
        let source = run.sources.len() as u32;
        run.sources
            .push(format!("client {g} (`{}`) segments", biz.name()));
        let mut segs = Ledger::new();
        let installed = handle.segments();
        let mut problems = Vec::new();
        for range in &installed {
            let seg = Seg {
                current: range.current_id(),
                max: range.max_id(),
                delta: range.residue().delta(),
                remainder: range.residue().remainder(),
            };
            if let Err(e) = check_segment(biz, &seg, None)
                && problems.len() < 5
            {
                problems.push(format!("{seg:?}: {e}"));
            }
            segs.add_segment(biz, &seg, source);
        }
        let mut ids = std::mem::replace(&mut client_ids[g], Ledger::new());
        let returned = ids.total(biz);
        let twice = audit(&mut ids, biz, &run.sources);
        problems.extend(twice.examples);
        problems.extend(outside(&mut ids, &mut segs, biz));
        checks.push(check(
            format!("client {g}: every ID it returned is unique and in a segment it installed"),
            &problems,
            format!("{returned} IDs returned from {} segments", installed.len()),
        ));
        clients.push((installed.len(), segs.total(biz), returned));
        received.absorb(segs);
    }

    let mut per_biz = Vec::new();
    let mut duplicates = Vec::new();
    let mut out_of_class = Vec::new();
    for biz in BIZS {
        let total = received.total(biz);
        let a = audit(&mut received, biz, &run.sources);
        duplicates.extend(a.examples);
        let m = biz.modulus();
        for (class, spans) in received.spans[biz.index()].iter().enumerate() {
            let Some(lo) = spans.iter().map(|s| s.lo).min() else {
                continue;
            };
            let hi = spans.iter().map(|s| s.hi).max().unwrap();
            let (min_id, max_id) = (class as i64 + m * lo, class as i64 + m * hi);
            match biz.database_of(class as i64) {
                None => out_of_class.push(format!(
                    "biz `{}`: IDs {min_id}..={max_id} are {class} mod {m}, a class no database issues",
                    biz.name()
                )),
                Some(db) => {
                    let row = ctx.databases[db].cluster.row(biz.name());
                    let row_max: i64 = row.split('|').next().unwrap().parse().unwrap();
                    if max_id > row_max || min_id < 1 {
                        out_of_class.push(format!(
                            "biz `{}`: IDs of class {class} mod {m} reach {min_id}..={max_id}, beyond pg{db}'s row ({row})",
                            biz.name()
                        ));
                    }
                }
            }
        }
        per_biz.push((biz, total, a.distinct, a.duplicates));
    }
    let dup_count: u64 = per_biz.iter().map(|p| p.3).sum();
    if dup_count > 0 {
        duplicates.insert(0, format!("{dup_count} duplicate(s)"));
    }
    checks.insert(
        0,
        check(
            "no ID received twice (every API, every segment, every client segment)",
            &duplicates,
            format!("{} distinct IDs", per_biz.iter().map(|p| p.2).sum::<u64>()),
        ),
    );
    checks.push(check(
        "every ID in its database's class and below that database's max_id (`odd`: all odd)",
        &out_of_class,
        "classes 0, 1, 2 mod 3 (`chaos`) and 1, 3, 5 mod 6 (`odd`)",
    ));

    let stats = || run.outcomes.iter().map(|o| &o.stats);
    let unexpected: Vec<String> = stats().flat_map(|s| s.unexpected.clone()).collect();
    checks.push(check(
        "every failure is an outage (connection, timeout, 503, unavailable); every answer well-formed",
        &unexpected,
        "yes",
    ));
    let not_back: Vec<String> = stats()
        .filter(|s| s.ok_when_calm == 0)
        .map(|s| format!("{} did not", s.name))
        .collect();
    checks.push(check(
        format!(
            "every worker served again within {} s of the last repair",
            CALM_MAX.as_secs()
        ),
        &not_back,
        format!("yes, all within {:.1} s", run.calm_secs),
    ));
    let (longest, worker, from, to) = longest_unavailable(run);
    let stuck = if longest >= MAX_UNAVAILABLE.as_secs_f64() {
        vec![format!(
            "{worker}: {longest:.1} s from t = {from:.1} s to {to:.1} s"
        )]
    } else {
        Vec::new()
    };
    checks.push(check(
        format!(
            "no worker without a success for {} s or more (not counting stalls of the test process)",
            MAX_UNAVAILABLE.as_secs()
        ),
        &stuck,
        format!("longest: {longest:.2} s ({worker})"),
    ));

    let (mut given_back, mut wasted) = (0, 0);
    for server in &ctx.servers {
        let text = std::fs::read_to_string(&server.log).unwrap_or_default();
        if let Some(i) = text.find("panicked") {
            let end = (i + 400..text.len())
                .find(|&e| text.is_char_boundary(e))
                .unwrap_or(text.len());
            ctx.anomaly(format!(
                "server {} panicked: {}",
                server.index,
                &text[i..end]
            ));
        }
        given_back += sum_field(&text, "given_back=");
        wasted += sum_field(&text, "wasted=");
    }
    let anomalies = ctx.anomalies.lock().unwrap().clone();
    checks.push(check(
        "no server crashed or panicked; every restart came back; every fault's own checks passed",
        &anomalies,
        "yes",
    ));
    if run.secs >= 60 {
        let restarts = restarts(&run.faults);
        let mut missing: Vec<String> = FAULT_KINDS
            .iter()
            .filter(|&&k| count(&run.faults, k) == 0)
            .map(|k| format!("no {k:?}"))
            .collect();
        missing.extend(
            (0..SERVERS)
                .filter(|&s| restarts[s] == 0)
                .map(|s| format!("server {s} never restarted")),
        );
        checks.push(check(
            "every kind of fault injected; every server restarted",
            &missing,
            format!(
                "{} faults; restarts per server: {restarts:?}",
                run.faults.len()
            ),
        ));
    }
    (
        checks,
        Findings {
            per_biz,
            clients,
            spans,
            given_back,
            wasted,
        },
    )
}

/// The longest time one worker went without a success, less the time the test process
/// itself stood still meanwhile: `(seconds, worker, from, to)`.
fn longest_unavailable(run: &Run) -> (f64, &'static str, f64, f64) {
    let stalled: Vec<(f64, f64)> = run
        .stalls
        .iter()
        .map(|&(at, late)| (at + 0.1, at + 0.1 + late.as_secs_f64()))
        .collect();
    let mut longest = (0.0, "", 0.0, 0.0);
    for s in run.outcomes.iter().map(|o| &o.stats) {
        // Gaps under a second are not listed; the longest one stands for them.
        let gaps = if s.gaps.is_empty() {
            vec![s.gap_at]
        } else {
            s.gaps.clone()
        };
        for (from, to) in gaps {
            let still: f64 = stalled
                .iter()
                .map(|&(a, b)| (b.min(to) - a.max(from)).max(0.0))
                .sum();
            if to - from - still > longest.0 {
                longest = (to - from - still, s.name, from, to);
            }
        }
    }
    longest
}

fn count(faults: &[FaultRecord], kind: FaultKind) -> usize {
    faults.iter().filter(|f| f.kind == kind).count()
}

/// Restarts of each server (kill -9 or SIGTERM, then started again).
fn restarts(faults: &[FaultRecord]) -> Vec<usize> {
    (0..SERVERS)
        .map(|s| {
            faults
                .iter()
                .filter(|f| {
                    f.target == s && matches!(f.kind, FaultKind::ServerKill | FaultKind::ServerTerm)
                })
                .count()
        })
        .collect()
}

/// The report, in Markdown.
fn report(ctx: &Ctx, run: &mut Run, checks: &[Check], found: &Findings) -> String {
    use std::fmt::Write as _;
    let mut r = String::new();
    let w = &mut r;
    let passed = checks.iter().all(|c| c.ok);
    let (secs, seed) = (run.secs, run.seed);
    let _ = writeln!(w, "# segmint chaos run\n");
    let _ = writeln!(
        w,
        "**{}** — {secs} s of faults, seed `{seed}` (`CHAOS_SEED={seed} scripts/chaos {secs}` draws the same faults again), {}.\n",
        if passed { "PASSED" } else { "FAILED" },
        utc_now()
    );
    let _ = writeln!(
        w,
        "- Machine: {}, {} cores; {} build of segmint {}.",
        cpu_model(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(
        w,
        "- Setup: {DATABASES} PostgreSQL clusters (classes 0, 1, 2 mod 3; pg{DISK_DB} on a {TMPFS_MB} MB tmpfs), {SERVERS} `segmint serve` processes using all three \
         (fetch timeout 1 s, wait timeout 3 s, back-off 0.1–0.4 s, adaptive step off); bizs `chaos` (step {STEP}: \
         segments of 100 IDs) and `odd` (`--odd`, step {STEP}: 50 IDs, classes 1, 3, 5 mod 6); {} workers, 2 s request timeout.",
        run.outcomes.len()
    );
    let _ = writeln!(
        w,
        "- Timing: setup {:.1} s, faults {:.1} s, calm {:.1} s; traffic {:.1} s in all. Spans kept for the audit: {}.\n",
        run.setup_secs, run.chaos_secs, run.calm_secs, run.run_secs, found.spans
    );
    let _ = writeln!(w, "## Checks\n");
    for c in checks {
        let _ = writeln!(
            w,
            "- {} {}: {}",
            if c.ok { "✅" } else { "❌" },
            c.what,
            c.detail
        );
    }
    let _ = writeln!(w, "\n## Totals\n");
    let _ = writeln!(w, "| | value |\n| --- | --- |");
    for (biz, total, distinct, dup) in &found.per_biz {
        let _ = writeln!(
            w,
            "| IDs of `{}` received (distinct / duplicates) | {total} ({distinct} / {dup}) |",
            biz.name()
        );
    }
    let requests: u64 = run.outcomes.iter().map(|o| o.stats.requests).sum();
    let ok: u64 = run.outcomes.iter().map(|o| o.stats.ok).sum();
    let _ = writeln!(w, "| requests (HTTP requests, client calls) | {requests} |");
    let _ = writeln!(
        w,
        "| successes | {ok} ({:.3} %) |",
        100.0 * ok as f64 / requests.max(1) as f64
    );
    let longest = run
        .outcomes
        .iter()
        .map(|o| &o.stats)
        .max_by_key(|s| s.longest_gap)
        .unwrap();
    let _ = writeln!(
        w,
        "| longest unavailability (longest time between two successes of one worker) | {:.2} s ({}, t = {:.1}–{:.1} s) |",
        longest.longest_gap.as_secs_f64(),
        longest.name,
        longest.gap_at.0,
        longest.gap_at.1
    );
    let (unavailable, worker, from, to) = longest_unavailable(run);
    let _ = writeln!(
        w,
        "| the same, less the test process's own stalls | {unavailable:.2} s ({worker}, t = {from:.1}–{to:.1} s) |"
    );
    let longest_stall = run.stalls.iter().max_by_key(|s| s.1);
    let _ = writeln!(
        w,
        "| stalls of the test process itself (a 0.1 s timer 0.5 s or more late) | {}{} |",
        run.stalls.len(),
        longest_stall.map_or(String::new(), |(at, late)| format!(
            ", longest {:.2} s at t = {at:.1} s",
            late.as_secs_f64()
        ))
    );
    for (g, (n, ids, returned)) in found.clients.iter().enumerate() {
        let _ = writeln!(
            w,
            "| client {g} (`{}`): segments installed, their IDs, IDs returned | {n}, {ids}, {returned} |",
            CLIENT_GROUPS[g].0.name()
        );
    }
    let _ = writeln!(
        w,
        "| IDs given back / wasted by graceful stops | {} / {} |",
        found.given_back, found.wasted
    );

    let _ = writeln!(w, "\n## Workers\n");
    let _ = writeln!(
        w,
        "| worker | API | requests | successes | IDs | longest gap | p50 ms | p99 ms | max ms |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for o in run.outcomes.iter_mut() {
        let s = &mut o.stats;
        s.latencies_us.sort_unstable();
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} ({:.2} %) | {} | {:.2} s at {:.1} s | {} | {} | {} |",
            s.name,
            s.api,
            s.requests,
            s.ok,
            100.0 * s.ok as f64 / s.requests.max(1) as f64,
            s.ids,
            s.longest_gap.as_secs_f64(),
            s.gap_at.1,
            ms(percentile(&s.latencies_us, 0.5)),
            ms(percentile(&s.latencies_us, 0.99)),
            ms(s.latencies_us.last().copied().unwrap_or(0)),
        );
    }

    let mut failures: BTreeMap<String, u64> = BTreeMap::new();
    for o in &run.outcomes {
        for (k, n) in &o.stats.failures {
            *failures.entry(k.clone()).or_default() += n;
        }
    }
    let _ = writeln!(w, "\n## Failures seen by the workers\n");
    let _ = writeln!(w, "| failure | count |\n| --- | ---: |");
    for (k, n) in &failures {
        let _ = writeln!(w, "| {k} | {n} |");
    }
    if failures.is_empty() {
        let _ = writeln!(w, "| none | 0 |");
    }

    let faults = &run.faults;
    let _ = writeln!(w, "\n## Faults injected\n");
    let _ = writeln!(w, "| fault | count | held (total) |\n| --- | ---: | ---: |");
    for kind in FAULT_KINDS {
        let held = faults
            .iter()
            .filter(|f| f.kind == kind)
            .fold(0.0, |sum, f| sum + (f.end - f.start));
        let _ = writeln!(
            w,
            "| {} | {} | {held:.1} s |",
            kind.label(),
            count(faults, kind)
        );
    }
    let starts: Vec<u32> = ctx
        .starts
        .iter()
        .map(|s| s.load(Ordering::SeqCst))
        .collect();
    let _ = writeln!(
        w,
        "| total | {} | |\n\nServer restarts (kill -9 or SIGTERM): {:?}; processes started per server: {starts:?}; \
         faults that had to wait for another to be repaired first: {}.",
        faults.len(),
        restarts(faults),
        run.waits
    );
    let _ = writeln!(w, "\n## Storage faults\n");
    let restores: Vec<&FaultRecord> = faults
        .iter()
        .filter(|f| f.kind == FaultKind::BackInTime)
        .collect();
    let _ = writeln!(
        w,
        "Back in time (a database's biz rows restored from a backup): {}.\n",
        restores.len()
    );
    for f in restores {
        let _ = writeln!(
            w,
            "- t = {:.1}–{:.1} s, pg{}: {}",
            f.start,
            f.end,
            f.target,
            f.note.replace('\n', " ")
        );
    }
    let fills: Vec<&FaultRecord> = faults
        .iter()
        .filter(|f| f.kind == FaultKind::DiskFull)
        .collect();
    let outcomes = ctx.disk_full.lock().unwrap().clone();
    let _ = writeln!(
        w,
        "\nDisk full (pg{DISK_DB}'s {TMPFS_MB} MB tmpfs filled until ENOSPC): {}; PostgreSQL logged ENOSPC in {}, \
         PANICked in {}, reinitialized itself in {}, and exited (restarted by the harness) in {}.\n",
        fills.len(),
        outcomes.iter().filter(|o| o.enospc > 0).count(),
        outcomes.iter().filter(|o| o.panics > 0).count(),
        outcomes.iter().filter(|o| o.reinitialized).count(),
        outcomes.iter().filter(|o| o.restarted).count(),
    );
    for f in fills {
        let _ = writeln!(
            w,
            "- t = {:.1}–{:.1} s, pg{}: {}",
            f.start,
            f.end,
            f.target,
            f.note.replace('\n', " ")
        );
    }
    let _ = writeln!(w, "\n<details><summary>Fault timeline</summary>\n");
    let _ = writeln!(
        w,
        "| t (s) | until | fault | target | hold | note |\n| ---: | ---: | --- | --- | ---: | --- |"
    );
    for f in faults {
        let target = if f.kind.on_database() {
            format!("pg{}", f.target)
        } else {
            format!("server {}", f.target)
        };
        let _ = writeln!(
            w,
            "| {:.1} | {:.1} | {:?} | {target} | {:.1} s | {} |",
            f.start,
            f.end,
            f.kind,
            f.hold.as_secs_f64(),
            f.note.replace('\n', " ").replace('|', "/")
        );
    }
    let _ = writeln!(w, "\n</details>");
    r
}

/// Copies the report and every log to `out`.
fn keep(ctx: &Ctx, report: &str, out: &Path) {
    std::fs::create_dir_all(out).unwrap();
    std::fs::write(out.join("report.md"), report).unwrap();
    for server in &ctx.servers {
        let _ = std::fs::copy(
            &server.log,
            out.join(format!("server-{}.log", server.index)),
        );
    }
    for db in &ctx.databases {
        let _ = std::fs::copy(db.log(), out.join(format!("pg{}.log", db.index)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_run_never_duplicates() {
    let secs: u64 = std::env::var("CHAOS_SECS")
        .ok()
        .map(|s| s.parse().expect("CHAOS_SECS: a number of seconds"))
        .unwrap_or(60);
    let seed: u64 = std::env::var("CHAOS_SEED")
        .ok()
        .map(|s| s.parse().expect("CHAOS_SEED: an unsigned integer"))
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                % 1_000_000_007
        });
    eprintln!("chaos: {secs} s of faults, seed {seed}");
    audit_self_check();
    let setup_began = Instant::now();
    let ctx = set_up().await;
    let mut run = run(&ctx, secs, seed, setup_began.elapsed().as_secs_f64()).await;
    let (checks, findings) = audit_run(&ctx, &mut run);
    let report = report(&ctx, &mut run, &checks, &findings);
    println!("{report}");
    if let Some(out) = std::env::var_os("CHAOS_OUT") {
        keep(&ctx, &report, Path::new(&out));
    }
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| format!("{}: {}", c.what, c.detail))
        .collect();
    if !failed.is_empty() {
        let tails: Vec<String> = ctx.servers.iter().map(Server::log_tail).collect();
        panic!(
            "chaos run failed (seed {seed}; CHAOS_OUT=DIR keeps every log):\n{}\n\n{}",
            failed.join("\n"),
            tails.join("\n")
        );
    }
}
