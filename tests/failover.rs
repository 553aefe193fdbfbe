//! Failover between two real PostgreSQL databases: while one answers, a database
//! crashing, restarting, or being down when the server starts fails no request and
//! never makes an ID appear twice; a database that comes back is used again.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::wait::until_locker_sleeps;
use common::*;
use segmint::biz::{BizTag, MAX_BATCH};
use serde_json::Value;
use tokio::task::{JoinHandle, block_in_place};

const BIZ: &str = "order";

/// Small segments (25 IDs on each of the two databases) so that fetches never stop.
const STEP: i64 = 50;

/// What the traffic tasks saw, shared between them and the test.
#[derive(Default)]
struct Log {
    /// Every ID issued, in no particular order.
    ids: Mutex<Vec<i64>>,
    /// One line per failed ID request.
    failures: Mutex<Vec<String>>,
    /// One line per `/readyz` answer other than 200.
    not_ready: Mutex<Vec<String>>,
    /// ID requests answered successfully.
    served: AtomicUsize,
}

/// The IDs in a successful response, or why there are none.
fn ids_in(
    what: &str,
    data: &Value,
    n: usize,
    body: &impl std::fmt::Display,
) -> Result<Vec<i64>, String> {
    let ids: Vec<i64> = serde_json::from_value(data.clone())
        .map_err(|e| format!("{what}: no IDs in the answer ({e}): {body}"))?;
    if ids.len() == n {
        Ok(ids)
    } else {
        Err(format!("{what}: {} IDs instead of {n}: {body}", ids.len()))
    }
}

/// One request of the mix: v1 and Tinyid's `nextId`, single IDs and batches.
async fn request(app: &TestApp, token: &str, kind: usize) -> Result<Vec<i64>, String> {
    let n = [1, 7, 1, 5][kind % 4];
    if kind % 4 < 2 {
        let what = format!("v1 count={n}");
        let (status, body) = app
            .get_v1(&format!("/v1/ids/{BIZ}?count={n}"), Some(token))
            .await;
        if status != 200 {
            return Err(format!("{what}: HTTP {status}: {body}"));
        }
        ids_in(&what, &body["ids"], n, &body)
    } else {
        let what = format!("nextId batchSize={n}");
        let (status, text) = app
            .get(&format!(
                "/tinyid/id/nextId?bizType={BIZ}&token={token}&batchSize={n}"
            ))
            .await;
        let body: Value = serde_json::from_str(&text).unwrap_or_default();
        if status != 200 || body["code"] != 200 {
            return Err(format!("{what}: HTTP {status}: {text}"));
        }
        ids_in(&what, &body["data"], n, &text)
    }
}

/// `clients` tasks requesting IDs back to back, plus one polling `/readyz`, until
/// `stop` is set.
fn start_traffic(
    app: &Arc<TestApp>,
    token: &str,
    log: &Arc<Log>,
    stop: &Arc<AtomicBool>,
    clients: usize,
) -> Vec<JoinHandle<()>> {
    let mut tasks: Vec<JoinHandle<()>> = (0..clients)
        .map(|client| {
            let (app, token, log, stop) =
                (app.clone(), token.to_string(), log.clone(), stop.clone());
            tokio::spawn(async move {
                let mut kind = client;
                while !stop.load(Ordering::Relaxed) {
                    match request(&app, &token, kind).await {
                        Ok(ids) => {
                            log.ids.lock().unwrap().extend(ids);
                            log.served.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => log.failures.lock().unwrap().push(e),
                    }
                    kind += 1;
                }
            })
        })
        .collect();
    let (app, log, stop) = (app.clone(), log.clone(), stop.clone());
    tasks.push(tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let (status, body) = app.get("/readyz").await;
            if status != 200 {
                log.not_ready
                    .lock()
                    .unwrap()
                    .push(format!("HTTP {status}: {body}"));
            }
            // The probe's pace: /readyz watched throughout the traffic.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }));
    tasks
}

/// `max_id` and `version` of the biz row.
fn max_and_version(db: &PgCluster) -> (i64, i64) {
    let row = db.psql(&format!(
        "SELECT max_id || ',' || version FROM tiny_id_info WHERE biz_type = '{BIZ}'"
    ));
    let (max, version) = row.split_once(',').expect("max_id,version");
    (max.parse().unwrap(), version.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_and_restart_of_one_database_fails_no_request() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    // Fixed steps: the test counts reservations, and wants many of them.
    let config = config(&[&a, &b], "adaptive_step = false");
    let token = setup_biz(&config, BIZ, STEP, false).await;
    let app = shared(spawn_app(config).await);
    let log = shared(Log::default());
    let stop = shared(AtomicBool::new(false));
    let tasks = start_traffic(&app, &token, &log, &stop, 4);

    eventually(
        Duration::from_secs(10),
        "both databases reserve segments",
        async || match block_in_place(|| (a.version(BIZ), b.version(BIZ))) {
            (pg0, pg1) if pg0 > 0 && pg1 > 0 => Ok(()),
            versions => Err(format!("versions {versions:?}")),
        },
    )
    .await;

    block_in_place(|| b.stop());
    let pg0_at_crash = block_in_place(|| a.version(BIZ));
    let served_at_crash = log.served.load(Ordering::Relaxed);
    // Long enough for pg1's back-off to run out several times, so that fetches pick it.
    eventually(
        Duration::from_secs(15),
        "pg0 reserves 30 segments while pg1 is down",
        async || match block_in_place(|| a.version(BIZ)) {
            pg0 if pg0 >= pg0_at_crash + 30 => Ok(()),
            pg0 => Err(format!("pg0 at version {pg0}, {pg0_at_crash} at the crash")),
        },
    )
    .await;
    let served_while_down = log.served.load(Ordering::Relaxed) - served_at_crash;
    assert!(
        served_while_down >= 30,
        "only {served_while_down} requests were served while pg1 was down"
    );
    // Copied out, so that a failing assertion does not poison the traffic's lock.
    let failures = log.failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "{} requests failed while pg0 was up; first ones: {:#?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );

    block_in_place(|| b.start_again());
    let (pg1_max, pg1_version) = block_in_place(|| max_and_version(&b));
    eventually(
        Duration::from_secs(10),
        "pg1 reserves a segment again after its restart and its IDs are issued",
        async || {
            let version = block_in_place(|| b.version(BIZ));
            let issued = log
                .ids
                .lock()
                .unwrap()
                .iter()
                .any(|&id| id % 2 == 1 && id > pg1_max);
            if version > pg1_version && issued {
                Ok(())
            } else {
                Err(format!(
                    "pg1 at version {version} ({pg1_version} at its restart), an odd ID above {pg1_max} issued: {issued}"
                ))
            }
        },
    )
    .await;

    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("traffic task panicked");
    }
    let failures = log.failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} requests failed; first ones: {:#?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    let not_ready = log.not_ready.lock().unwrap();
    assert!(
        not_ready.is_empty(),
        "/readyz was not 200 {} times while pg0 was up; first: {:?}",
        not_ready.len(),
        not_ready.first()
    );
    assert_unique(&log.ids.lock().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_down_at_startup_is_used_once_it_is_up() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let config = config(&[&a, &b], "");
    let token = setup_biz(&config, BIZ, STEP, false).await;
    block_in_place(|| b.stop());
    let app = spawn_app(config).await;
    let status = app.state.store.cluster().status();
    assert!(
        status[1].last_error.is_some(),
        "pg1 is down, yet its startup read recorded no error: {status:?}"
    );

    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.extend(app.ids(BIZ, &token, 25).await);
    }
    // Once pg1's back-off ends, a fetch tries it first half of the time and must go on
    // to pg0 within the same fetch: each of these requests empties the cache and waits.
    let biz = BizTag::parse(BIZ).unwrap();
    for round in 1..=8 {
        eventually(
            Duration::from_secs(2),
            "pg1's back-off ends",
            async || match &app.state.store.cluster().status()[1] {
                pg1 if pg1.up => Ok(()),
                pg1 => Err(format!("{pg1:?}")),
            },
        )
        .await;
        let n = app.state.cache.remaining(&biz) + 1;
        let (status, body) = app
            .get_v1(&format!("/v1/ids/{BIZ}?count={n}"), Some(&token))
            .await;
        assert_eq!(
            status, 200,
            "round {round}: {n} IDs, one more than cached, with pg1 down: {body}"
        );
        ids.extend(serde_json::from_value::<Vec<i64>>(body["ids"].clone()).unwrap());
    }
    let odd: Vec<i64> = ids.iter().copied().filter(|id| id % 2 == 1).collect();
    assert!(
        odd.is_empty(),
        "pg1 is down, yet odd IDs were issued: {odd:?}"
    );
    // pg0's row covers every ID issued: its even IDs up to max_id (segments may be
    // wider than the row's step, as the adaptive step follows the load).
    let pg0_max: i64 = block_in_place(|| a.row(BIZ))
        .split('|')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(
        pg0_max / 2 >= ids.len() as i64 && ids.iter().all(|&id| id <= pg0_max),
        "{} IDs, yet pg0's max_id is {pg0_max}",
        ids.len()
    );

    block_in_place(|| b.start_again());
    assert_eq!(
        block_in_place(|| b.version(BIZ)),
        0,
        "pg1 was used while down"
    );
    // Each request takes everything cached and one more (at most a batch), so that every
    // request goes on to a newly fetched segment, from either database: how long the
    // cached segments would last at a few IDs per request depends on the step the
    // adaptive sizing chose from the rounds above, and that on the machine's speed.
    eventually(
        Duration::from_secs(10),
        "an odd ID is issued once pg1 is back",
        async || {
            let cached = app.state.cache.remaining(&biz);
            let n = usize::try_from(cached + 1).map_or(MAX_BATCH, |n| n.min(MAX_BATCH));
            ids.extend(app.ids(BIZ, &token, n).await);
            if ids.iter().any(|id| id % 2 == 1) {
                Ok(())
            } else {
                Err(format!(
                    "{} IDs, pg1 version {}, status {:?}",
                    ids.len(),
                    block_in_place(|| b.version(BIZ)),
                    app.state.store.cluster().status()
                ))
            }
        },
    )
    .await;
    let pg1 = block_in_place(|| b.version(BIZ));
    assert!(
        pg1 > 0,
        "odd IDs were issued but pg1's row shows no reservation"
    );
    assert_unique(&ids);
}

/// A database whose biz row is locked answers nothing; each fetch that tries it first
/// goes on to the other database after the hedge delay, not after the fetch timeout,
/// and the stalled database is backed off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_database_costs_the_hedge_delay_not_the_fetch_timeout() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    // One ID per segment and database: every request fetches, with a fixed step.
    let config = config(
        &[&a, &b],
        "fetch_timeout_ms = 3000\nwait_timeout_ms = 5000\nadaptive_step = false\nbackoff_initial_ms = 200\nbackoff_max_ms = 200",
    );
    let token = setup_biz(&config, BIZ, 2, false).await;
    let app = spawn_app(config).await;
    app.ids(BIZ, &token, 4).await;

    let _locker = a.psql_background(
        "BEGIN; SELECT * FROM tiny_id_info WHERE biz_type = 'order' FOR UPDATE; SELECT pg_sleep(4); COMMIT;",
    );
    until_locker_sleeps(&a, "tiny_id_info", Duration::from_secs(10)).await;
    let mut ids = Vec::new();
    let mut slowest = Duration::ZERO;
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        let started = Instant::now();
        ids.extend(app.ids(BIZ, &token, 1).await);
        slowest = slowest.max(started.elapsed());
    }
    assert!(ids.len() > 20, "{} requests", ids.len());
    assert!(
        slowest < Duration::from_millis(700),
        "a request waited {slowest:?} on the stalled database"
    );
    let even = ids.iter().filter(|&&id| id % 2 == 0).count();
    assert!(
        even <= 2,
        "only the odd database could reserve; {even} even IDs are more than were cached"
    );
    assert_unique(&ids);
    app.stop().await;
}

/// With the usual hedge delay far longer than the cache lasts, a fetch that meets a
/// stalled database is still hedged in time: the delay shrinks to half the cache's
/// runway, so no request waits for the stalled database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_is_hedged_before_the_cache_runs_dry() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    // 500 IDs per segment and database; the fetch starts with 400 of them left, a few
    // tens of milliseconds at the rate below. Without the runway, a stalled fetch
    // would be hedged after 2 s and the requests would wait for it.
    let config = config(
        &[&a, &b],
        "fetch_timeout_ms = 5000\nwait_timeout_ms = 5000\nhedge_after_ms = 2000\nadaptive_step = false\nbackoff_initial_ms = 200\nbackoff_max_ms = 200",
    );
    let token = setup_biz(&config, BIZ, 1000, false).await;
    let app = spawn_app(config).await;
    // A second and more of steady load, so that the rate is known.
    let warm = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < warm {
        app.ids(BIZ, &token, 20).await;
    }

    let _locker = a.psql_background(
        "BEGIN; SELECT * FROM tiny_id_info WHERE biz_type = 'order' FOR UPDATE; SELECT pg_sleep(3); COMMIT;",
    );
    until_locker_sleeps(&a, "tiny_id_info", Duration::from_secs(10)).await;
    let mut ids = Vec::new();
    let mut slowest = Duration::ZERO;
    let mut hedged = false;
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        let started = Instant::now();
        ids.extend(app.ids(BIZ, &token, 20).await);
        slowest = slowest.max(started.elapsed());
        hedged |= app.state.store.cluster().status()[0]
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("no answer within"));
    }
    assert!(hedged, "no fetch met the stalled database");
    assert!(
        slowest < Duration::from_millis(500),
        "a request waited {slowest:?} although the other database could answer"
    );
    assert_unique(&ids);
    app.stop().await;
}
