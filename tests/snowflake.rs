//! Snowflake IDs with worker IDs leased from the databases, tested on real processes:
//! three servers sharing two PostgreSQL databases, a server frozen by SIGSTOP past its
//! lease, a database stopped under a lease, and clocks stepped back with Debian's
//! `faketime` (also across a restart). The lease rows themselves are tested against
//! both stores.

use crate::by_kind;
use crate::common;

use common::clock::ShiftedClock;
use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::cli::{config_file, segmint_cli, segmint_ok};
use common::http::{Remote, Resp, Target, bearer, metric, v1};
use common::wait::until_sql;
use common::*;
use segmint::config::Config;
use segmint::store::Store;

/// Leases short enough for a test: a new holder waits 600 ms before its first ID.
const FAST_LEASES: &str = r#"snowflake = { enabled = true, bizs = ["order"], lease_ms = 600, renew_ms = 150, grace_ms = 300 }"#;

/// Leaf's decoding, as `LeafMonitorController.decodeSnowflakeId` writes it:
/// (timestamp, worker ID, sequence).
fn leaf_decode(id: i64) -> (i64, i64, i64) {
    let timestamp = (id >> 22) + 1288834974657;
    let worker_id = (id >> 12) ^ (id >> 22 << 10);
    let sequence = id ^ (id >> 12 << 12);
    (timestamp, worker_id, sequence)
}

fn worker_of(id: i64) -> i64 {
    leaf_decode(id).1
}

/// Databases with the biz `order`, a token for it, and the configuration file that
/// the CLI and the server processes read.
struct Setup {
    dbs: Databases,
    toml: String,
    /// The configuration file, kept for the life of the test.
    file: tempfile::NamedTempFile,
    token: String,
}

impl Setup {
    fn start(n: usize, extra: &str) -> Setup {
        Setup::naming(n, n, extra)
    }

    /// `n` databases, of which the configuration names the first `named`.
    fn naming(n: usize, named: usize, extra: &str) -> Setup {
        let dbs = Databases::start(Kind::Postgres, n);
        let toml = config_toml_urls(&dbs.urls()[..named], extra);
        let file = config_file(&toml);
        segmint_ok(file.path(), &["migrate"], &[]);
        segmint_ok(file.path(), &["biz", "add", "order", "--step", "1000"], &[]);
        let token = segmint_ok(file.path(), &["token", "add", "--biz", "order"], &[])
            .trim()
            .to_owned();
        Setup {
            dbs,
            toml,
            file,
            token,
        }
    }

    async fn server(&self) -> ServerProcess {
        ServerProcess::start(&self.toml).await
    }

    /// Three servers of this configuration, and a client of each.
    async fn three_servers(&self) -> ([ServerProcess; 3], Vec<Remote>) {
        let servers = [
            self.server().await,
            self.server().await,
            self.server().await,
        ];
        let remotes = servers
            .iter()
            .map(|s| s.remote(Duration::from_secs(30)))
            .collect();
        (servers, remotes)
    }

    /// The worker IDs leased in database `i`, with their holders.
    fn leases(&self, i: usize) -> String {
        self.dbs.sql(
            i,
            "SELECT worker_id || ':' || holder FROM segmint_worker_lease ORDER BY worker_id",
        )
    }
}

/// `count` snowflake IDs of `order`, or the answer.
async fn try_snowflakes(target: &impl Target, token: &str, count: usize) -> Result<Vec<i64>, Resp> {
    common::http::snowflakes_of(target, "order", token, count).await
}

/// `id` decoded by `/v1/snowflake/order/decode/{id}`.
async fn decoded(target: &impl Target, token: &str, id: i64) -> serde_json::Value {
    let r = v1(
        target,
        false,
        &format!("/v1/snowflake/order/decode/{id}"),
        bearer(token),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    r.json()
}

/// From every server at once: its first IDs, then `batches` batches of `batch` IDs
/// each; the IDs of each server in the order issued.
async fn issue_from_each(
    remotes: &[Remote],
    token: &str,
    batches: usize,
    batch: usize,
) -> Vec<Vec<i64>> {
    let runs = remotes.iter().map(|remote| async move {
        let mut ids = first_snowflakes(remote, token).await;
        for _ in 0..batches {
            ids.extend(
                try_snowflakes(remote, token, batch)
                    .await
                    .unwrap_or_else(|r| panic!("{r:?}")),
            );
        }
        ids
    });
    futures_util::future::join_all(runs).await
}

/// Waits until `target` issues snowflake IDs (its lease is active); the first batch.
async fn first_snowflakes(target: &impl Target, token: &str) -> Vec<i64> {
    eventually(
        Duration::from_secs(15),
        "the server issues snowflake IDs",
        async || {
            try_snowflakes(target, token, 10)
                .await
                .map_err(|r| format!("{r:?}"))
        },
    )
    .await
}

/// No worker ID was used by both servers at overlapping times: for each worker ID both
/// used, the timestamps of one server's IDs all lie before the other's.
fn assert_no_worker_id_shared(a: &[i64], b: &[i64]) {
    let times = |ids: &[i64], w: i64| -> Vec<i64> {
        ids.iter()
            .filter(|&&id| worker_of(id) == w)
            .map(|&id| leaf_decode(id).0)
            .collect()
    };
    let workers: HashSet<i64> = a.iter().chain(b).map(|&id| worker_of(id)).collect();
    for w in workers {
        let (ta, tb) = (times(a, w), times(b, w));
        if let (Some(a_first), Some(a_last), Some(b_first), Some(b_last)) = (
            ta.iter().min(),
            ta.iter().max(),
            tb.iter().min(),
            tb.iter().max(),
        ) {
            assert!(
                a_last < b_first || b_last < a_first,
                "worker ID {w}: first server {a_first}..={a_last}, second {b_first}..={b_last}"
            );
        }
    }
}

fn assert_increasing(ids: &[i64], what: &str) {
    for pair in ids.windows(2) {
        assert!(pair[0] < pair[1], "{what}: {} then {}", pair[0], pair[1]);
    }
}

/// Three servers share two databases and issue more than 1,000,000 snowflake IDs at
/// once: no duplicate, three distinct worker IDs, each leased in the database whose
/// class holds it, each server's IDs increasing, every ID decoded by Leaf's formula
/// to its server's worker ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_on_two_databases_issue_a_million_unique_ids() {
    let setup = Setup::start(2, FAST_LEASES);
    let (_servers, remotes) = setup.three_servers().await;
    let per_server = issue_from_each(&remotes, &setup.token, 7, 50_000).await;
    let mut all = Vec::new();
    let mut workers = HashSet::new();
    for (i, ids) in per_server.iter().enumerate() {
        assert_increasing(ids, &format!("server {i}"));
        let own: HashSet<i64> = ids.iter().map(|&id| worker_of(id)).collect();
        assert_eq!(
            own.len(),
            1,
            "server {i} issued with one worker ID: {own:?}"
        );
        workers.extend(own);
        all.extend_from_slice(ids);
    }
    assert!(all.len() >= 1_000_000, "{} IDs", all.len());
    assert_unique(&all);
    assert_eq!(workers.len(), 3, "distinct worker IDs: {workers:?}");
    // Each database leased only the worker IDs of its class (i mod 2).
    for i in 0..2 {
        let leased = setup.leases(i);
        for line in leased.lines() {
            let w: i64 = line.split(':').next().unwrap().parse().unwrap();
            assert_eq!(
                w % 2,
                i as i64,
                "database {i} leased worker ID {w}: {leased}"
            );
        }
    }
    let leased: usize = (0..2).map(|i| setup.leases(i).lines().count()).sum();
    assert_eq!(leased, 3, "one lease row per server");
    // The decode route agrees with Leaf's formula.
    let id = all[all.len() / 2];
    let body = decoded(&remotes[0], &setup.token, id).await;
    let (timestamp, worker, sequence) = leaf_decode(id);
    assert_eq!(body["timestamp_ms"], timestamp, "{body}");
    assert_eq!(body["worker_id"], worker, "{body}");
    assert_eq!(body["sequence"], sequence, "{body}");
}

/// A server frozen by SIGSTOP past its lease loses its worker ID to another server,
/// and after SIGCONT issues nothing more with it: it answers 503 until it has leased
/// another worker ID and waited out earlier holders, then issues with that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_frozen_past_its_lease_never_issues_with_it_again() {
    let setup = Setup::start(1, FAST_LEASES);
    let frozen = setup.server().await;
    let frozen_remote = frozen.remote(Duration::from_secs(5));
    let mut all = first_snowflakes(&frozen_remote, &setup.token).await;
    let old_worker = worker_of(all[0]);
    all.extend(
        try_snowflakes(&frozen_remote, &setup.token, 1000)
            .await
            .unwrap(),
    );
    send_signal(frozen.child.0.id(), "STOP").unwrap();
    // Past the lease (600 ms) and the grace period (300 ms) by the database's clock:
    // the row a new holder may take.
    let free = format!(
        "SELECT count(*) FROM segmint_worker_lease WHERE worker_id = {old_worker} \
         AND expires_ms + 300 < (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
    );
    let what = format!("worker ID {old_worker} past its lease and grace period");
    until_sql(
        setup.dbs.cluster(0),
        &free,
        "1",
        &what,
        Duration::from_secs(10),
    )
    .await;
    let taker_process = setup.server().await;
    let taker = taker_process.remote(Duration::from_secs(5));
    let taken = first_snowflakes(&taker, &setup.token).await;
    assert_eq!(
        worker_of(taken[0]),
        old_worker,
        "the lowest free worker ID is the frozen server's"
    );
    all.extend(taken);
    send_signal(frozen.child.0.id(), "CONT").unwrap();
    let resumed = Instant::now();
    let mut refused = 0;
    let mut after = Vec::new();
    // Ask the thawed server at once and until it issues again, while the taker issues.
    while resumed.elapsed() < Duration::from_secs(10) {
        all.extend(try_snowflakes(&taker, &setup.token, 100).await.unwrap());
        match try_snowflakes(&frozen_remote, &setup.token, 100).await {
            Ok(ids) => {
                after.extend(ids);
                if after.len() > 1000 {
                    break;
                }
            }
            Err(r) => {
                assert_eq!(r.status, 503, "{r:?}");
                assert!(r.retry_after.is_some(), "{r:?}");
                refused += 1;
            }
        }
    }
    assert!(refused > 0, "the thawed server refused at first");
    assert!(
        !after.is_empty(),
        "the thawed server issues again with a new worker ID"
    );
    for id in &after {
        assert_ne!(
            worker_of(*id),
            old_worker,
            "issued {id} with the lost worker ID"
        );
    }
    all.extend(after);
    assert_unique(&all);
    // It found the lease taken at its next renewal, or (when the freeze caught a
    // renewal in flight) saw that renewal time out past its deadline: either way it
    // stopped issuing with the worker ID, and says so.
    let mut stopped = 0.0;
    for outcome in ["lost", "failed"] {
        stopped += metric(
            &frozen_remote,
            &format!("segmint_snowflake_lease_renewals_total{{outcome=\"{outcome}\"}}"),
        )
        .await;
    }
    assert!(stopped >= 1.0, "counted: {stopped}");
    assert!(
        frozen.log_text().contains("stopped issuing with it"),
        "{}",
        frozen.log_text()
    );
}

/// The lease rows go back in time (a restore from a backup taken before the lease):
/// the worker ID looks free to anyone, and the holder's next renewal fails. A second
/// server starts meanwhile; both lease again and both are asked all along: no
/// duplicate, and no worker ID used by both servers at overlapping times (a new holder
/// waits a lease before its first ID, by when an earlier one has stopped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_row_restored_from_a_backup_never_shares_a_worker_id() {
    let setup = Setup::start(1, FAST_LEASES);
    let first_process = setup.server().await;
    let first = first_process.remote(Duration::from_secs(5));
    let mut a = first_snowflakes(&first, &setup.token).await;
    setup.dbs.sql(
        0,
        "UPDATE segmint_worker_lease SET version = 0, expires_ms = 0, bound_ms = 0, last_ms = 0",
    );
    let second_process = setup.server().await;
    let second = second_process.remote(Duration::from_secs(5));
    let mut b = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        if let Ok(ids) = try_snowflakes(&first, &setup.token, 50).await {
            a.extend(ids);
        }
        if let Ok(ids) = try_snowflakes(&second, &setup.token, 50).await {
            b.extend(ids);
        }
    }
    assert!(!b.is_empty(), "the second server issues");
    assert_no_worker_id_shared(&a, &b);
    let lost = metric(
        &first,
        "segmint_snowflake_lease_renewals_total{outcome=\"lost\"}",
    )
    .await;
    assert!(lost >= 1.0, "the first server saw its lease gone: {lost}");
    a.extend(b);
    assert_unique(&a);
}

/// The database holding a server's lease stops: the server issues until its lease
/// would run out, then leases a worker ID from the other database (the other class);
/// no duplicate, and the first database coming back changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_down_under_a_lease_moves_the_server_to_the_other_database() {
    let setup = Setup::start(2, FAST_LEASES);
    let server = setup.server().await;
    let remote = server.remote(Duration::from_secs(5));
    let mut all = first_snowflakes(&remote, &setup.token).await;
    let first = worker_of(all[0]);
    let db = usize::try_from(first % 2).unwrap();
    setup.dbs.stop(db);
    let stopped = Instant::now();
    let moved = eventually(
        Duration::from_secs(15),
        "IDs with a worker ID of the other database",
        async || match try_snowflakes(&remote, &setup.token, 100).await {
            Ok(ids) => {
                all.extend_from_slice(&ids);
                let last = worker_of(*ids.last().unwrap());
                if last % 2 != first % 2 {
                    return Ok(last);
                }
                Err(format!("still worker ID {last}"))
            }
            Err(r) if r.status == 503 => Err(format!("{r:?}")),
            Err(r) => panic!("{r:?}"),
        },
    )
    .await;
    // The old worker ID stops within its lease of the last renewal.
    let old_after: Vec<i64> = all
        .iter()
        .copied()
        .filter(|&id| worker_of(id) == first)
        .collect();
    assert!(!old_after.is_empty());
    assert!(
        stopped.elapsed() > Duration::from_millis(400),
        "moved only once the lease ran out"
    );
    setup.dbs.start_again(db);
    for _ in 0..20 {
        let ids = try_snowflakes(&remote, &setup.token, 500).await.unwrap();
        assert!(ids.iter().all(|&id| worker_of(id) == moved), "{ids:?}");
        all.extend(ids);
    }
    assert_unique(&all);
    let failed = metric(
        &remote,
        "segmint_snowflake_lease_renewals_total{outcome=\"failed\"}",
    )
    .await;
    assert!(failed >= 1.0, "failed renewals are counted: {failed}");
}

/// The clock steps back by 4 ms (waited out: IDs keep increasing) and by 3 s (503
/// with `Retry-After`, a log line and the clock-back metric until the clock has
/// caught up; then IDs above every earlier one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clock_steps_back_are_waited_out_or_refused_until_caught_up() {
    let setup = Setup::start(1, FAST_LEASES);
    let clock = ShiftedClock::new("+0");
    let process = clock.server(&setup.toml).await;
    let server = process.remote(Duration::from_secs(5));
    let mut all = first_snowflakes(&server, &setup.token).await;
    all.extend(try_snowflakes(&server, &setup.token, 100).await.unwrap());
    clock.set("-0.004");
    for _ in 0..20 {
        all.extend(try_snowflakes(&server, &setup.token, 50).await.unwrap());
    }
    assert_increasing(&all, "across a 4 ms step back");
    let before_big = *all.last().unwrap();
    clock.set("-3.004");
    let r = try_snowflakes(&server, &setup.token, 1).await.unwrap_err();
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.json()["error"]["code"], "clock_behind", "{r:?}");
    let wait: u64 = r.retry_after.as_deref().unwrap().parse().unwrap();
    assert!((2..=4).contains(&wait), "Retry-After {wait}");
    let refused = metric(
        &server,
        "segmint_snowflake_clock_back_total{outcome=\"refused\"}",
    )
    .await;
    assert!(refused >= 1.0, "{refused}");
    let caught_up = eventually(
        Duration::from_secs(8),
        "IDs again once the clock caught up",
        async || {
            try_snowflakes(&server, &setup.token, 10)
                .await
                .map_err(|r| format!("{r:?}"))
        },
    )
    .await;
    assert!(
        caught_up[0] > before_big,
        "{} after {before_big}",
        caught_up[0]
    );
    all.extend(caught_up);
    assert_increasing(&all, "across a 3 s step back");
    assert!(process.log_text().contains("the clock went back"));
}

/// A server stopped and started again with its clock 5 s behind gets its worker ID
/// back, and issues nothing at or below what was recorded for it: 503 until its
/// clock has passed the recorded bound, then IDs above every earlier one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_the_clock_behind_waits_for_the_recorded_timestamp() {
    // Renewed as often as FAST_LEASES, but with seconds of slack: the worker ID must
    // still be held when the server stops, however late a busy machine runs a renewal.
    // (The bound a restart waits for is the lease's end: a longer lease, a longer wait.)
    let setup = Setup::start(
        1,
        r#"snowflake = { enabled = true, bizs = ["order"], lease_ms = 2000, renew_ms = 150, grace_ms = 300 }"#,
    );
    let clock = ShiftedClock::new("+0");
    let mut server = clock.server(&setup.toml).await;
    let remote = server.remote(Duration::from_secs(5));
    let mut before = first_snowflakes(&remote, &setup.token).await;
    before.extend(try_snowflakes(&remote, &setup.token, 1000).await.unwrap());
    server.terminate_within(Duration::from_secs(10)).await;
    let log = server.log_text();
    assert!(
        log.contains("released the snowflake worker ID"),
        "the worker ID was not released at the stop:\n{log}"
    );
    clock.set("-5");
    let restarted_process = clock.server(&setup.toml).await;
    let restarted = restarted_process.remote(Duration::from_secs(5));
    let started = Instant::now();
    let mut behind = 0;
    let after = eventually(
        Duration::from_secs(30),
        "IDs once the clock passed the recorded bound",
        async || match try_snowflakes(&restarted, &setup.token, 10).await {
            Ok(ids) => Ok(ids),
            Err(r) => {
                assert_eq!(r.status, 503, "{r:?}");
                if r.json()["error"]["code"] == "clock_behind" {
                    behind += 1;
                }
                Err(format!("{r:?}"))
            }
        },
    )
    .await;
    assert!(behind > 0, "refused while the clock was behind");
    assert!(
        started.elapsed() > Duration::from_secs(4),
        "issued after {:?}, with the clock 5 s behind",
        started.elapsed()
    );
    assert_eq!(
        worker_of(after[0]),
        worker_of(before[0]),
        "the same worker ID"
    );
    assert!(
        after[0] > *before.last().unwrap(),
        "{} after {}",
        after[0],
        before.last().unwrap()
    );
}

/// The lease rows against a real database: a store of two databases leases only the
/// worker IDs of each one's class; a lease is taken again only a grace period after
/// it ran out, with the earlier holder's bound as the new holder's floor; renewals are
/// compare-and-set on holder and version, and last/bound only grow.
async fn leases_follow_classes_grace_and_compare_and_set(kind: Kind) {
    let n = match kind {
        Kind::Postgres => 2,
        Kind::Embedded => 1,
        Kind::MySql => 2,
    };
    let dbs = Databases::start(kind, n);
    let config: Config = dbs.config("");
    let store = Store::connect(&config).unwrap();
    for (name, r) in store.cluster().migrate().await.results() {
        r.unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let lease = Duration::from_millis(300);
    let grace = Duration::from_millis(1000);
    let mut taken = Vec::new();
    for h in 0..6 {
        let l = store
            .take_lease(&format!("h{h}"), lease, grace)
            .await
            .unwrap();
        assert_eq!(
            i64::from(l.worker_id) % i64::try_from(n).unwrap(),
            i64::try_from(l.database).unwrap(),
            "{l:?}"
        );
        assert_eq!(l.floor_ms, 0, "a new row has no earlier holder: {l:?}");
        taken.push(l);
    }
    let distinct: HashSet<(usize, u16)> = taken.iter().map(|l| (l.database, l.worker_id)).collect();
    assert_eq!(distinct.len(), 6);
    // The first lease of a database is its class's lowest worker ID.
    let first = taken[0].clone();
    assert_eq!(usize::from(first.worker_id), first.database, "{first:?}");
    // Renewals: a stale version or another holder loses; last and bound only grow.
    let renewed = store
        .cluster()
        .renew_lease(&first, 300, 1_000, 5_000)
        .await
        .unwrap()
        .expect("the holder renews");
    assert!(renewed.version > first.version);
    assert!(
        store
            .cluster()
            .renew_lease(&first, 300, 1, 1)
            .await
            .unwrap()
            .is_none()
    );
    let mut stranger = renewed.clone();
    stranger.holder = "stranger".into();
    assert!(
        store
            .cluster()
            .renew_lease(&stranger, 300, 1, 1)
            .await
            .unwrap()
            .is_none()
    );
    let lower = store
        .cluster()
        .renew_lease(&renewed, 300, 10, 20)
        .await
        .unwrap()
        .unwrap();
    let rows = store.cluster().list_leases().await;
    let row = rows[first.database]
        .1
        .as_ref()
        .unwrap()
        .iter()
        .find(|r| r.worker_id == first.worker_id)
        .unwrap()
        .clone();
    assert_eq!((row.last_ms, row.bound_ms), (1_000, 5_000), "{row:?}");
    assert_eq!(row.version, lower.version);
    // Run out, but within the grace period: none of them is taken again.
    let all: Vec<(usize, u16)> = distinct.iter().copied().collect();
    until_leases_past(&store, &all, Duration::ZERO, "the six leases run out").await;
    let within_grace = take_on(&store, first.database, "late", lease, grace).await;
    assert!(
        !distinct.contains(&(within_grace.database, within_grace.worker_id)),
        "{within_grace:?} was still in its grace period"
    );
    // Past the grace period: the lowest worker ID is free again, with the earlier
    // holder's bound as the floor.
    let what = "the first lease past its grace period";
    until_leases_past(&store, &[(first.database, first.worker_id)], grace, what).await;
    let reused = take_on(&store, first.database, "again", lease, grace).await;
    assert_eq!(reused.worker_id, first.worker_id, "{reused:?}");
    assert_eq!(
        reused.floor_ms, 5_000,
        "the earlier holder's bound: {reused:?}"
    );
    // A release needs the holder, not the version (a renewal whose answer was lost
    // moved it on); a released lease is free at once and keeps what was recorded.
    let mut stranger = reused.clone();
    stranger.holder = "stranger".into();
    assert!(
        store
            .cluster()
            .renew_lease(&stranger, -1001, 1, 1)
            .await
            .unwrap()
            .is_none()
    );
    let mut stale = reused.clone();
    stale.version -= 1;
    store
        .cluster()
        .renew_lease(&stale, -1001, 7_000, 8_000)
        .await
        .unwrap()
        .expect("the holder releases");
    let next = take_on(&store, first.database, "after-release", lease, grace).await;
    assert_eq!(next.worker_id, first.worker_id, "{next:?}");
    assert_eq!(next.floor_ms, 8_000, "{next:?}");
}

/// Waits until each lease of `which` (database, worker ID) ran out more than `after`
/// ago by its database's clock, as a take judges it.
async fn until_leases_past(store: &Store, which: &[(usize, u16)], after: Duration, what: &str) {
    let after_ms = i64::try_from(after.as_millis()).unwrap();
    eventually(Duration::from_secs(10), what, async || {
        let rows = store.cluster().list_leases().await;
        for &(db, worker) in which {
            let row = rows[db]
                .1
                .as_ref()
                .map_err(|e| e.to_string())?
                .iter()
                .find(|r| r.worker_id == worker)
                .unwrap_or_else(|| panic!("no lease row of worker ID {worker} on {db}"));
            if row.expires_ms + after_ms >= row.db_now_ms {
                return Err(format!("{row:?}"));
            }
        }
        Ok(())
    })
    .await
}

/// A lease taken on database `db`: takes (and keeps) leases until one lands there.
async fn take_on(
    store: &Store,
    db: usize,
    holder: &str,
    lease: Duration,
    grace: Duration,
) -> segmint::store::Lease {
    for i in 0..40 {
        let l = store
            .take_lease(&format!("{holder}{i}"), lease, grace)
            .await
            .unwrap();
        if l.database == db {
            return l;
        }
    }
    panic!("no lease on database {db} in 40 takes");
}

by_kind!(leases_follow_classes_grace_and_compare_and_set);

/// Two servers lease worker IDs 0 and 1 from one database; `segmint db add` brings a
/// second one in while they issue, so worker ID 1 moves to it: it is blocked on the
/// first database, its holder loses it at its next renewal and leases an even one (its
/// configuration names the first database only), and the worker ID is freed on the
/// second database with its holder's bound. No duplicate, and no worker ID used by two
/// servers at overlapping times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_ids_move_with_a_layout_change_without_sharing() {
    let setup = Setup::naming(2, 1, FAST_LEASES);
    let (dbs, token) = (&setup.dbs, &setup.token);
    let first = setup.server().await;
    let a_remote = first.remote(Duration::from_secs(5));
    let mut a = first_snowflakes(&a_remote, token).await;
    let second = setup.server().await;
    let b_remote = second.remote(Duration::from_secs(5));
    let mut b = first_snowflakes(&b_remote, token).await;
    let workers: HashSet<i64> = [worker_of(a[0]), worker_of(b[0])].into();
    assert_eq!(
        workers,
        [0, 1].into(),
        "the lowest worker IDs of the one class"
    );

    let change = tokio::task::spawn_blocking({
        let (path, url) = (setup.file.path().to_owned(), dbs.urls()[1].clone());
        move || segmint_ok(&path, &["db", "add", "pg1", &url], &[])
    });
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        if let Ok(ids) = try_snowflakes(&a_remote, token, 50).await {
            a.extend(ids);
        }
        if let Ok(ids) = try_snowflakes(&b_remote, token, 50).await {
            b.extend(ids);
        }
    }
    let out = change.await.unwrap();
    assert!(out.contains("layout epoch 1 is done"), "{out}");
    assert!(out.contains("worker IDs: "), "{out}");
    // Worker ID 1 left the first database: blocked there, free on the second with the
    // bound its last holder recorded.
    let blocked = dbs.sql(
        0,
        "SELECT holder, bound_ms FROM segmint_worker_lease WHERE worker_id = 1",
    );
    let (holder, bound) = blocked.split_once('|').unwrap();
    assert_eq!(holder, "segmint-layout");
    let moved = dbs.sql(
        1,
        "SELECT bound_ms FROM segmint_worker_lease WHERE worker_id = 1",
    );
    assert!(
        moved.parse::<i64>().unwrap() >= bound.parse::<i64>().unwrap() && bound != "0",
        "bound {bound} on the first database, {moved} on the second"
    );
    // Both servers issue again, each with an even worker ID now.
    let a_late = first_snowflakes(&a_remote, token).await;
    let b_late = first_snowflakes(&b_remote, token).await;
    for id in a_late.iter().chain(&b_late) {
        assert_eq!(
            worker_of(*id) % 2,
            0,
            "worker ID {} after the change",
            worker_of(*id)
        );
    }
    a.extend(a_late);
    b.extend(b_late);
    let used: HashSet<i64> = a.iter().chain(&b).map(|&id| worker_of(id)).collect();
    assert!(
        used.len() >= 3,
        "one server moved to another worker ID: {used:?}"
    );
    assert_no_worker_id_shared(&a, &b);
    a.extend(b);
    assert_unique(&a);
}

/// [`FAST_LEASES`] with the JavaScript-safe layout, and `more` keys.
fn js_leases(more: &str) -> String {
    format!(
        r#"snowflake = {{ enabled = true, bizs = ["order"], lease_ms = 600, renew_ms = 150, grace_ms = 300, layout = "js"{more} }}"#
    )
}

/// What a server of another spec answers: 503 `no_worker_id` saying which database
/// records which spec, or the answer it gave instead.
async fn refused_for_its_spec(target: &impl Target, token: &str) -> Result<String, String> {
    match try_snowflakes(target, token, 1).await {
        Ok(ids) => panic!("a server of another spec issued {ids:?}"),
        Err(r) => {
            let message = if r.status == 503 {
                r.json()["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            } else {
                String::new()
            };
            if message.contains("records the snowflake spec") {
                Ok(message)
            } else {
                Err(format!("{r:?}"))
            }
        }
    }
}

/// Three servers with the JavaScript-safe layout share two databases under load from
/// all three at once: every ID below 2^53, no duplicate, each server's IDs increasing,
/// decoded by the route to a worker ID below 32 and a time within a minute of now.
/// A server with Leaf's layout, and one with the JavaScript-safe layout but another
/// epoch, started against them never lease a worker ID and issue nothing (503 naming
/// both specs), while the three keep issuing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_layout_ids_stay_below_2_53_and_other_specs_never_lease() {
    // Leases of 2 s: the three servers issue 100,000 IDs each at once, and a lease
    // that ran out under that load (600 ms leases did, with the machine's other load)
    // would move a server to another worker ID.
    let setup = Setup::start(
        2,
        r#"snowflake = { enabled = true, bizs = ["order"], lease_ms = 2000, renew_ms = 200, grace_ms = 300, layout = "js" }"#,
    );
    let (_servers, remotes) = setup.three_servers().await;
    let layout = segmint::snowflake::Layout::JS;
    let epoch = segmint::snowflake::LEAF_EPOCH_MS;
    let per_server = issue_from_each(&remotes, &setup.token, 20, 5_000).await;
    let mut all = Vec::new();
    for (i, ids) in per_server.iter().enumerate() {
        assert_increasing(ids, &format!("server {i}"));
        assert!(
            ids.iter().all(|&id| (0..1 << 53).contains(&id)),
            "server {i}: an ID at or above 2^53: {:?}",
            ids.iter().max()
        );
        let workers: HashSet<u16> = ids
            .iter()
            .map(|&id| {
                segmint::snowflake::decode(id, epoch, &layout)
                    .unwrap()
                    .worker_id
            })
            .collect();
        assert_eq!(workers.len(), 1, "server {i}: {workers:?}");
        all.extend_from_slice(ids);
    }
    assert!(all.len() >= 300_000, "{} IDs", all.len());
    assert_unique(&all);
    let now_ms = segmint::snowflake::Clock::now_ms(&mut segmint::snowflake::SystemClock);
    for (i, ids) in per_server.iter().enumerate() {
        let body = decoded(&remotes[i], &setup.token, ids[ids.len() / 2]).await;
        assert!(body["worker_id"].as_u64().unwrap() < 32, "{body}");
        let t = body["timestamp_ms"].as_i64().unwrap();
        assert!((t - now_ms).abs() < 60_000, "{t} against {now_ms}: {body}");
        assert_eq!(body["layout"]["name"], "js", "{body}");
        assert_eq!(body["layout"]["total_bits"], 53, "{body}");
        assert_eq!(body["layout"]["js_safe"], true, "{body}");
    }
    let leaf = ServerProcess::start(&config_toml_urls(&setup.dbs.urls(), FAST_LEASES)).await;
    let later = ServerProcess::start(&config_toml_urls(
        &setup.dbs.urls(),
        &js_leases(", epoch_ms = 1288834974658"),
    ))
    .await;
    for (server, what) in [(&leaf, "Leaf's layout"), (&later, "another epoch")] {
        let remote = server.remote(Duration::from_secs(30));
        let message = eventually(
            Duration::from_secs(30),
            &format!("the server of {what} says why it has no worker ID"),
            async || refused_for_its_spec(&remote, &setup.token).await,
        )
        .await;
        assert!(
            message.contains("snowflake.layout") && message.contains("snowflake.epoch_ms"),
            "{message}"
        );
        let ours = segmint::snowflake::Spec {
            epoch_ms: epoch,
            layout,
        }
        .record();
        assert!(message.contains(&ours), "{what}: {message}");
    }
    // Over several leases' time (of the three's 2 s), the two keep refusing, lease
    // nothing, and the three keep issuing.
    for _ in 0..20 {
        for server in [&leaf, &later] {
            refused_for_its_spec(&server.remote(Duration::from_secs(30)), &setup.token)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        for remote in &remotes {
            try_snowflakes(remote, &setup.token, 100)
                .await
                .unwrap_or_else(|r| panic!("{r:?}"));
        }
        // Real time over several leases: what is checked is that nothing changes.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let leased: usize = (0..2).map(|i| setup.leases(i).lines().count()).sum();
    assert_eq!(leased, 3, "the three servers' lease rows alone");
    for i in 0..2 {
        assert_eq!(
            setup.dbs.sql(i, "SELECT spec FROM segmint_snowflake"),
            segmint::snowflake::Spec {
                epoch_ms: epoch,
                layout
            }
            .record(),
            "database {i}"
        );
    }
}

/// Two servers, one with Leaf's layout and one with the JavaScript-safe one, started
/// at the same moment on fresh databases: never both issue. Either one recorded its
/// spec on both databases and issues while the other is refused, or each recorded its
/// own on one database and both are refused. Five times over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_layouts_started_at_once_on_fresh_databases_never_both_issue() {
    for round in 0..5 {
        let setup = Setup::start(2, FAST_LEASES);
        let js = config_toml_urls(&setup.dbs.urls(), &js_leases(""));
        let (leaf, js) = tokio::join!(setup.server(), ServerProcess::start(&js));
        let (leaf, js) = (
            leaf.remote(Duration::from_secs(30)),
            js.remote(Duration::from_secs(30)),
        );
        // Each server's outcome once decided: issuing, or refused for its spec.
        let outcome = async |remote: &Remote| {
            eventually(
                Duration::from_secs(30),
                &format!("round {round}: the server issues or is refused for its spec"),
                async || match try_snowflakes(remote, &setup.token, 1).await {
                    Ok(_) => Ok(true),
                    Err(r) if r.body.contains("records the snowflake spec") => Ok(false),
                    Err(r) => Err(format!("{r:?}")),
                },
            )
            .await
        };
        let (leaf_issues, js_issues) = (outcome(&leaf).await, outcome(&js).await);
        let records: Vec<String> = (0..2)
            .map(|i| setup.dbs.sql(i, "SELECT spec FROM segmint_snowflake"))
            .collect();
        assert!(
            !(leaf_issues && js_issues),
            "round {round}: both issue; records {records:?}"
        );
        // Whoever issues, its spec is on both databases; and it keeps issuing while
        // the other keeps being refused.
        let leaf_record = segmint::snowflake::Spec::default().record();
        assert_eq!(
            leaf_issues,
            records.iter().all(|r| *r == leaf_record),
            "round {round}: {records:?}"
        );
        for _ in 0..5 {
            assert_eq!(
                try_snowflakes(&leaf, &setup.token, 1).await.is_ok(),
                leaf_issues
            );
            assert_eq!(
                try_snowflakes(&js, &setup.token, 1).await.is_ok(),
                js_issues
            );
            // Real time over several renewals: the outcome holds.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eprintln!(
            "round {round}: Leaf's issues {leaf_issues}, js issues {js_issues}, records {records:?}"
        );
    }
}

/// A server started while one of two databases is down leases a worker ID of the one
/// that answers: the membership `segmint migrate` recorded there says which worker IDs
/// are that database's, and the spec's record there is confirmed. No ID repeats between
/// it and the server that recorded the spec. A server of another spec is refused, with
/// the database down and once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_started_while_a_database_is_down_leases_from_the_one_that_answers() {
    let setup = Setup::start(2, FAST_LEASES);
    let first = setup.server().await;
    let first_remote = first.remote(Duration::from_secs(30));
    let mut ids = first_snowflakes(&first_remote, &setup.token).await;
    // The database that does not hold the first server's lease (its class is the
    // worker ID's residue mod 2).
    let other = 1 - worker_of(ids[0]) % 2;
    setup.dbs.stop(usize::try_from(other).unwrap());
    let fresh = setup.server().await;
    let remote = fresh.remote(Duration::from_secs(30));
    let got = first_snowflakes(&remote, &setup.token).await;
    assert!(
        got.iter().all(|&id| worker_of(id) % 2 != other),
        "a worker ID of the database that answers"
    );
    ids.extend(got);
    ids.extend(
        try_snowflakes(&first_remote, &setup.token, 100)
            .await
            .unwrap(),
    );
    let js = ServerProcess::start(&config_toml_urls(&setup.dbs.urls(), &js_leases(""))).await;
    let js_remote = js.remote(Duration::from_secs(30));
    eventually(
        Duration::from_secs(30),
        "a server of another spec is refused while a database is down",
        async || refused_for_its_spec(&js_remote, &setup.token).await,
    )
    .await;
    setup.dbs.start_again(usize::try_from(other).unwrap());
    ids.extend(try_snowflakes(&remote, &setup.token, 100).await.unwrap());
    ids.extend(
        try_snowflakes(&first_remote, &setup.token, 100)
            .await
            .unwrap(),
    );
    assert_unique(&ids);
    refused_for_its_spec(&js_remote, &setup.token)
        .await
        .unwrap_or_else(|e| panic!("still refused once the database is back: {e:?}"));
}

/// A coarse layout through a real server: ticks of 100 ms, 7 sequence bits (1,280 IDs
/// a second). A batch of a second's IDs spans ticks and stays increasing, each ID in a
/// tick of its own sequence; one ID more is a 400 that issues nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coarse_layout_issues_a_seconds_ids_and_refuses_more() {
    let setup = Setup::start(
        1,
        r#"snowflake = { enabled = true, bizs = ["order"], lease_ms = 1000, renew_ms = 300, grace_ms = 300, layout = { unit_ms = 100, timestamp_bits = 36, worker_bits = 5, sequence_bits = 7 } }"#,
    );
    let server = setup.server().await;
    let remote = server.remote(Duration::from_secs(30));
    let layout = segmint::snowflake::Layout::new(100, 36, 5, 7).unwrap();
    let mut ids = first_snowflakes(&remote, &setup.token).await;
    ids.extend(try_snowflakes(&remote, &setup.token, 1_280).await.unwrap());
    assert_increasing(&ids, "one server");
    assert_unique(&ids);
    let ticks: HashSet<i64> = ids
        .iter()
        .map(|&id| {
            let d =
                segmint::snowflake::decode(id, segmint::snowflake::LEAF_EPOCH_MS, &layout).unwrap();
            assert_eq!(
                (d.timestamp_ms - segmint::snowflake::LEAF_EPOCH_MS) % 100,
                0,
                "a tick's first millisecond"
            );
            d.timestamp_ms
        })
        .collect();
    assert!(
        ticks.len() >= 10,
        "1,290 IDs over at least 10 ticks: {}",
        ticks.len()
    );
    let r = try_snowflakes(&remote, &setup.token, 1_281)
        .await
        .unwrap_err();
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("1280"), "{r:?}");
    let next = try_snowflakes(&remote, &setup.token, 1).await.unwrap();
    assert!(next[0] > *ids.last().unwrap());
    let body = decoded(&remote, &setup.token, next[0]).await;
    assert_eq!(body["layout"]["unit_ms"], 100, "{body}");
    assert_eq!(body["layout"]["name"], serde_json::Value::Null, "{body}");
    assert_eq!(body["layout"]["js_safe"], true, "{body}");
}

/// A biz of snowflake IDs alone, as docs/configuration.md describes it: named in
/// `[snowflake] bizs`, without a row in `tiny_id_info`. `token add --biz` grants it all
/// the same, and the v1 route serves it with that token; a biz neither in a row nor in
/// `[snowflake] bizs` is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snowflake_biz_needs_no_row_for_its_token() {
    let extra = r#"snowflake = { enabled = true, bizs = ["sf"], lease_ms = 600, renew_ms = 150, grace_ms = 300 }"#;
    let dbs = Databases::start(Kind::Postgres, 1);
    let toml = config_toml_urls(&dbs.urls(), extra);
    let file = config_file(&toml);
    segmint_ok(file.path(), &["migrate"], &[]);
    let token = segmint_ok(file.path(), &["token", "add", "--biz", "sf"], &[])
        .trim()
        .to_owned();
    assert_eq!(
        dbs.sql(0, "SELECT count(*) FROM tiny_id_info WHERE biz_type = 'sf'"),
        "0",
        "no row was made"
    );
    let missing = segmint_cli(file.path(), &["token", "add", "--biz", "nobody"], &[]);
    assert!(
        !missing.ok() && missing.stderr.contains("biz `nobody` does not exist"),
        "{missing:?}"
    );
    let server = ServerProcess::start(&toml).await;
    let remote = server.remote(Duration::from_secs(10));
    // The first ID waits for a worker ID's lease; a refused token never passes.
    let ids =
        common::wait::eventually(Duration::from_secs(20), "snowflake IDs of sf", async || {
            match common::http::snowflakes_of(&remote, "sf", &token, 5).await {
                Ok(ids) => Ok(ids),
                Err(r) if r.status == 503 => Err(format!("{r:?}")),
                Err(r) => panic!("the token was not taken: {r:?}"),
            }
        })
        .await;
    assert_eq!(ids.len(), 5);
}

/// Every table of database `i` copied aside (`backup_*`): a backup taken now.
fn back_up(dbs: &Databases, i: usize) -> Vec<String> {
    let tables: Vec<String> = dbs
        .sql(
            i,
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename",
        )
        .lines()
        .map(str::to_owned)
        .collect();
    for t in &tables {
        dbs.sql(i, &format!("CREATE TABLE backup_{t} AS TABLE {t}"));
    }
    tables
}

/// Database `i`'s `tables` as [`back_up`] copied them: the whole database restored.
fn restore_whole(dbs: &Databases, i: usize, tables: &[String]) {
    let sql: String = tables
        .iter()
        .map(|t| format!("DELETE FROM {t}; INSERT INTO {t} SELECT * FROM backup_{t};"))
        .collect();
    dbs.sql(i, &format!("BEGIN; {sql} COMMIT;"));
}

/// A database restored from a backup taken before `db add` forgets the change: the
/// worker IDs it had blocked (those that moved to the new member) are free there again,
/// and a server configured with that database alone reads only its layout from before
/// the change. Here every even worker ID is held on pg0 by another process, so server
/// B (configured with both) leases worker ID 1 on pg1; after pg0's restore, server C
/// (configured with pg0 alone) leases worker ID 1 there. B reads the other members'
/// lease rows at each renewal and gives worker ID 1 up before C's wait is over: no
/// worker ID used by both at overlapping times, no duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_restored_from_before_an_add_never_shares_a_moved_worker_id() {
    let setup = Setup::naming(2, 1, FAST_LEASES);
    let dbs = &setup.dbs;
    dbs.sql(
        0,
        "INSERT INTO segmint_worker_lease (worker_id, holder, version, expires_ms, last_ms, bound_ms) \
         SELECT w, 'another-process', 1, 9000000000000000, 0, 0 FROM generate_series(0, 1022, 2) AS w",
    );
    let tables = back_up(dbs, 0);
    segmint_ok(
        setup.file.path(),
        &["db", "add", "pg1", &dbs.urls()[1]],
        &[],
    );
    // B reads the catalog once, at its start: it neither sees pg0 go back nor writes
    // the layout back there during the test, so C leases before anything heals pg0.
    let b_config = format!("{FAST_LEASES}\ncatalog_refresh_ms = 600000");
    let b_process = ServerProcess::start(&config_toml_urls(&dbs.urls(), &b_config)).await;
    let b_remote = b_process.remote(Duration::from_secs(5));
    let mut b = first_snowflakes(&b_remote, &setup.token).await;
    assert_eq!(worker_of(b[0]), 1, "the lowest odd worker ID, on pg1");

    restore_whole(dbs, 0, &tables);
    let c_process = setup.server().await;
    let c_remote = c_process.remote(Duration::from_secs(5));
    let mut c = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        if let Ok(ids) = try_snowflakes(&b_remote, &setup.token, 50).await {
            b.extend(ids);
        }
        if let Ok(ids) = try_snowflakes(&c_remote, &setup.token, 50).await {
            c.extend(ids);
        }
    }
    assert!(!c.is_empty(), "C issues:\n{}", c_process.log_text());
    assert_eq!(
        worker_of(c[0]),
        1,
        "C leased the worker ID the restore freed on pg0"
    );
    assert_no_worker_id_shared(&b, &c);
    assert!(
        b_process
            .log_text()
            .contains("another configured database leases this worker ID"),
        "{}",
        b_process.log_text()
    );
    let moved = worker_of(*b.last().expect("B issued"));
    assert_ne!(moved, 1, "B issues again with another worker ID");
    b.extend(c);
    assert_unique(&b);
}
