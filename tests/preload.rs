//! The double buffer against real databases: the next segment is fetched once, at the
//! preload threshold and before the current one runs out; requests that find the cache
//! empty share one fetch; a batch wider than a segment spans as many as it needs.

use crate::common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use segmint::biz::BizTag;
use segmint::config::Config;
use tokio::task::block_in_place;

const BIZ: &str = "order";

/// 50 IDs per segment on each of the two databases (delta 2); every test here turns the
/// adaptive step off, as it counts segments of exactly this size, and hedging, as it
/// counts the reservations waiting on locked rows.
const STEP: i64 = 100;
const PER_SEGMENT: u64 = 50;

/// Long enough for a fetch, had one started, to have reserved its segment on loopback.
const QUIET: Duration = Duration::from_millis(250);

/// Segments reserved so far, over both databases.
fn reservations(dbs: &[&PgCluster]) -> i64 {
    block_in_place(|| dbs.iter().map(|db| db.version(BIZ)).sum())
}

/// Waits until `reservations` reaches `n` and the cache holds `cached` IDs.
async fn settles_at(app: &TestApp, dbs: &[&PgCluster], n: i64, cached: u64) {
    let biz = BizTag::parse(BIZ).unwrap();
    eventually(
        Duration::from_secs(5),
        &format!("{n} reservations and {cached} IDs cached"),
        async || {
            let (got, left) = (reservations(dbs), app.state.cache.remaining(&biz));
            assert!(
                got <= n,
                "expected {n} reservations and {cached} IDs cached, got {got} and {left}"
            );
            if got == n && left == cached {
                Ok(())
            } else {
                Err(format!("{got} and {left}"))
            }
        },
    )
    .await;
}

/// Checks that nothing is fetched while the cache holds `cached` IDs.
async fn stays_at(app: &TestApp, dbs: &[&PgCluster], n: i64, cached: u64, why: &str) {
    tokio::time::sleep(QUIET).await;
    let biz = BizTag::parse(BIZ).unwrap();
    assert_eq!(reservations(dbs), n, "reservations: {why}");
    assert_eq!(app.state.cache.remaining(&biz), cached, "IDs cached: {why}");
}

fn assert_unique(ids: &[i64]) {
    let mut seen = HashSet::with_capacity(ids.len());
    let twice: Vec<i64> = ids.iter().copied().filter(|&id| !seen.insert(id)).collect();
    assert!(
        twice.is_empty(),
        "of {} IDs, issued twice: {twice:?}",
        ids.len()
    );
}

/// Consecutive IDs of one segment: same class, `delta` apart.
fn assert_consecutive(ids: &[i64], what: &str) {
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 2),
        "{what} are not consecutive IDs of one segment: {ids:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_segment_is_fetched_once_at_the_threshold() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let dbs = [&a, &b];
    let config = config(
        &dbs,
        "preload_percent = 20\nadaptive_step = false\nhedge_after_ms = 0",
    );
    let token = setup_biz(&config, BIZ, STEP, false).await;
    let app = spawn_app(config).await;

    // The first request fetches the first segment and waits for it.
    let mut first = app.ids(BIZ, &token, 1).await;
    assert_eq!(
        reservations(&dbs),
        1,
        "the first request reserves one segment"
    );
    first.extend(app.ids(BIZ, &token, 8).await);
    stays_at(
        &app,
        &dbs,
        1,
        41,
        "9 of 50 IDs used, below the 20 % threshold",
    )
    .await;

    first.extend(app.ids(BIZ, &token, 1).await);
    // 10 of 50 used: the next segment arrives while 40 of the first are still cached.
    settles_at(&app, &dbs, 2, 40 + PER_SEGMENT).await;

    first.extend(app.ids(BIZ, &token, 40).await);
    assert_consecutive(&first, "the 50 IDs of the first segment");
    stays_at(
        &app,
        &dbs,
        2,
        PER_SEGMENT,
        "first segment used up, second one waiting",
    )
    .await;

    let mut second = app.ids(BIZ, &token, 9).await;
    stays_at(&app, &dbs, 2, 41, "9 of the second segment used").await;
    second.extend(app.ids(BIZ, &token, 1).await);
    settles_at(&app, &dbs, 3, 40 + PER_SEGMENT).await;
    assert_consecutive(&second, "the first 10 IDs of the second segment");

    assert_unique(&[first, second].concat());
}

/// Holds a lock on the biz row of every database, so that a reservation's UPDATE waits.
struct RowLocks(Vec<tokio_postgres::Client>);

impl RowLocks {
    async fn take(dbs: &[&PgCluster]) -> RowLocks {
        let mut clients = Vec::new();
        for db in dbs {
            let (client, connection) = tokio_postgres::connect(&db.url(), tokio_postgres::NoTls)
                .await
                .expect("connect to lock the biz row");
            tokio::spawn(connection);
            client
                .batch_execute(&format!(
                    "BEGIN; SELECT 1 FROM tiny_id_info WHERE biz_type = '{BIZ}' FOR UPDATE"
                ))
                .await
                .expect("lock the biz row");
            clients.push(client);
        }
        RowLocks(clients)
    }

    async fn release(self) {
        for client in self.0 {
            client.batch_execute("ROLLBACK").await.expect("unlock");
        }
    }
}

/// Reservations of this server waiting for a row lock, over both databases.
fn blocked_reservations(dbs: &[&PgCluster]) -> i64 {
    block_in_place(|| {
        dbs.iter()
            .map(|db| {
                db.psql(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE application_name = 'segmint' AND wait_event_type = 'Lock'",
                )
                .parse::<i64>()
                .unwrap()
            })
            .sum()
    })
}

/// `n` concurrent single-ID requests while `locks` keep the cache empty: all of them
/// wait behind one fetch, then all are served once it is let through.
async fn burst_behind_one_fetch(
    app: &Arc<TestApp>,
    token: &str,
    dbs: &[&PgCluster],
    locks: RowLocks,
    n: usize,
) -> Vec<i64> {
    let requests: Vec<_> = (0..n)
        .map(|_| {
            let (app, token) = (app.clone(), token.to_string());
            tokio::spawn(async move {
                app.get_v1(&format!("/v1/ids/{BIZ}?count=1"), Some(&token))
                    .await
            })
        })
        .collect();
    eventually(
        Duration::from_secs(2),
        "a reservation reaches the locked row",
        async || match blocked_reservations(dbs) {
            0 => Err("none blocked".into()),
            _ => Ok(()),
        },
    )
    .await;
    tokio::time::sleep(QUIET).await;
    let done = requests.iter().filter(|r| r.is_finished()).count();
    assert_eq!(done, 0, "requests answered while no segment could arrive");
    assert_eq!(
        blocked_reservations(dbs),
        1,
        "{n} requests wait on an empty cache: one fetch in flight (single flight)"
    );
    locks.release().await;
    let mut ids = Vec::new();
    for request in requests {
        let (status, body) = request.await.unwrap();
        assert_eq!(status, 200, "a request that waited for the fetch: {body}");
        ids.extend(serde_json::from_value::<Vec<i64>>(body["ids"].clone()).unwrap());
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_on_an_empty_cache_share_one_fetch() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let dbs = [&a, &b];
    // Fetch only when the segment is used up; give the held-up fetch time to wait.
    let toml = config_toml(
        &dbs,
        "preload_percent = 100\nadaptive_step = false\nhedge_after_ms = 0",
    )
    .replace("fetch_timeout_ms = 1000", "fetch_timeout_ms = 3000");
    let config = Config::from_toml(&toml).expect("test configuration");
    let token = setup_biz(&config, BIZ, STEP, false).await;
    let app = shared(spawn_app(config).await);

    // Cold: nothing cached yet.
    let locks = RowLocks::take(&dbs).await;
    let mut ids = burst_behind_one_fetch(&app, &token, &dbs, locks, 32).await;
    settles_at(&app, &dbs, 1, PER_SEGMENT - 32).await;

    // Used up: the request taking the last cached ID starts the fetch.
    let locks = RowLocks::take(&dbs).await;
    ids.extend(app.ids(BIZ, &token, PER_SEGMENT as usize - 32).await);
    assert_eq!(app.state.cache.remaining(&BizTag::parse(BIZ).unwrap()), 0);
    ids.extend(burst_behind_one_fetch(&app, &token, &dbs, locks, 32).await);
    settles_at(&app, &dbs, 2, PER_SEGMENT - 32).await;

    assert_eq!(ids.len(), 82);
    assert_unique(&ids);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_wider_than_a_segment_spans_segments() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let dbs = [&a, &b];
    let config = config(&dbs, "adaptive_step = false\nhedge_after_ms = 0");
    let token = setup_biz(&config, BIZ, STEP, false).await;
    let app = spawn_app(config).await;

    let mut ids = app.ids(BIZ, &token, 350).await;
    assert_eq!(ids.len(), 350);
    // Seven segments, and the eighth fetched as the seventh ran out.
    settles_at(&app, &dbs, 8, PER_SEGMENT).await;

    let (status, text) = app
        .get(&format!(
            "/tinyid/id/nextId?bizType={BIZ}&token={token}&batchSize=350"
        ))
        .await;
    assert_eq!(status, 200, "{text}");
    let body: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["code"], 200, "{text}");
    let more: Vec<i64> = serde_json::from_value(body["data"].clone()).unwrap();
    assert_eq!(more.len(), 350, "nextId batchSize=350");
    // The cached eighth segment, six more, and the next one fetched.
    settles_at(&app, &dbs, 15, PER_SEGMENT).await;

    ids.extend(more);
    assert_unique(&ids);
    let (max_even, max_odd) = block_in_place(|| {
        let max = |db: &PgCluster| -> i64 {
            db.psql(&format!(
                "SELECT max_id FROM tiny_id_info WHERE biz_type = '{BIZ}'"
            ))
            .parse()
            .unwrap()
        };
        (max(&a), max(&b))
    });
    let outside: Vec<i64> = ids
        .iter()
        .copied()
        .filter(|&id| id <= 0 || id > if id % 2 == 0 { max_even } else { max_odd })
        .collect();
    assert!(
        outside.is_empty(),
        "IDs beyond what pg0 (max_id {max_even}) and pg1 (max_id {max_odd}) reserved: {outside:?}"
    );
}
