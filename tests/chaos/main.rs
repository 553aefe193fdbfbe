//! Chaos run: three real `segmint serve` processes over three databases (classes 0, 1
//! and 2 mod 3): two PostgreSQL clusters and a MariaDB server (on Tinyid's tables, as
//! segmint creates them), ten workers asking for IDs through every API (Tinyid's
//! routes, the v1 API, whole segments, the client library) for `CHAOS_SECS` seconds
//! (default 60), while a fault injector kills, terminates and freezes the servers,
//! crashes, kills, stalls, restores and fills the disks of the databases (the first
//! round kills and restores MariaDB; both engines' disks fill every round), and runs
//! the operator's layout commands
//! (`segmint db remove` / `db add`: as planned, with a database missing from the
//! configuration, two at once, killed midway). Failed requests are allowed; one ID
//! received twice fails the test.
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
//!
//! Layout: this file holds the settings, the shared state and the test itself;
//! [`ledger`] keeps and audits every ID received, [`processes`] starts and signals the
//! servers and databases, [`workers`] sends the requests, [`faults`] injects the faults,
//! [`layout`] holds the layout faults, run through [`commands`] (`segmint db` processes),
//! [`report`] checks the finished run and writes its report.

mod commands;
#[path = "../common/mod.rs"]
mod common;
mod faults;
mod layout;
mod ledger;
mod processes;
mod report;
mod workers;

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use common::{
    ChildGuard, MariaServer, PgCluster, cluster_dir, config_toml_named, free_port, run_as,
    send_signal, serve_command, setup_biz, wait_healthy,
};
use segmint::client::{Client, ErrorKind, Protocol};
use segmint::config::Config;
use tokio::task::JoinSet;

use commands::*;
use faults::*;
use layout::*;
use ledger::*;
use processes::*;
use report::*;
use workers::*;

/// Width of every segment: 100 IDs of `chaos` per database, 50 of `odd`, so that the
/// servers' caches and the segment routes reserve segments all the time.
const STEP: i64 = 300;
/// The servers' `step_max`: the widest segment a client's ask gets.
const STEP_MAX: i64 = 3000;
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

    /// Every class (delta, remainder) database `db` may issue from: its own in the
    /// configured layout, its class in each layout with one other database taken out
    /// (the layout faults), database `k` of the two left issuing `k mod 2`, and every
    /// ID alone (two racing removes that ran one after the other leave one database).
    fn classes_of(self, db: usize) -> Vec<(i64, i64)> {
        let alone = match self {
            Biz::Chaos => (1, 0),
            Biz::Odd => (2, 1),
        };
        let mut classes = vec![(self.modulus(), self.class_of(db)), alone];
        for out in (0..DATABASES).filter(|&o| o != db) {
            let k = (0..DATABASES).filter(|&d| d != out).position(|d| d == db);
            let n = DATABASES as i64 - 1;
            if let Some(k) = k {
                let k = k as i64;
                classes.push(match self {
                    Biz::Chaos => (n, k),
                    Biz::Odd => (2 * n, 1 + 2 * k),
                });
            }
        }
        classes
    }

    /// The database issuing `class`, if any may.
    fn database_of(self, class: i64) -> Option<usize> {
        (0..DATABASES).find(|&db| self.class_of(db) == class)
    }
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
    /// What the layout faults' commands did, for the report's checks and totals.
    layout_log: Mutex<LayoutLog>,
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

/// Three databases (classes 0, 1, 2 mod 3) with `chaos` and the odd-only `odd`, and three
/// servers using them all, each answering.
async fn set_up() -> Arc<Ctx> {
    let databases: Vec<Database> = std::thread::scope(|s| {
        let starting: Vec<_> = (0..DATABASES)
            .map(|i| s.spawn(move || Database::start(i)))
            .collect();
        starting.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let named: Vec<(String, String)> = databases
        .iter()
        .map(|db| (db.name(), db.engine.url()))
        .collect();
    // Fixed steps for the servers' own segments: they stay small and are reserved all
    // the time; clients ask for theirs, within `step_max`.
    let extra = format!("adaptive_step = false\nstep_max = {STEP_MAX}");
    let config = || Config::from_toml(&config_toml_named(&named, &extra)).expect("configuration");
    let tokens = [
        setup_biz(&config(), Biz::Chaos.name(), STEP, false).await,
        setup_biz(&config(), Biz::Odd.name(), STEP, true).await,
    ];
    let dir = tempfile::Builder::new()
        .prefix("segmint-chaos-")
        .tempdir()
        .unwrap();
    let config_file = dir.path().join("segmint.toml");
    std::fs::write(&config_file, config_toml_named(&named, &extra)).unwrap();
    for db in &databases {
        for biz in BIZS {
            let row = db.engine.row(biz.name());
            let f: Vec<&str> = row.split('|').collect();
            assert_eq!(
                (f[3].parse::<i64>().unwrap(), f[4].parse::<i64>().unwrap()),
                (biz.modulus(), biz.class_of(db.index)),
                "class of `{}` on {}: {row}",
                biz.name(),
                db.name()
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
        layout_log: Mutex::new(LayoutLog::default()),
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
                // Segments that last about 50 ms at the worker's rate: the clients keep
                // fetching often enough to run into every fault.
                .segment_target(Duration::from_millis(50))
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
        secs >= 60,
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
        if let Err(e) = db.sql("SELECT 1".into()).await {
            ctx.anomaly(format!("{} not answering after the faults: {e}", db.name()));
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
