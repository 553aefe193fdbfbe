//! The catalog refresh reads each database's change feed: at rest it returns no row,
//! whatever the number of bizs, and what changes at rest (a new biz and its token, a
//! revocation, an edit by hand) is seen within `catalog_refresh_ms` through the feed
//! alone. A database that restarted (a restore from a backup restarts it) is read in
//! full again.

use crate::common;

use std::time::Duration;

use common::http::{bearer, metric, v1, v1_ids};
use common::{
    Databases, Kind, add_token, eventually, hold, setup_biz, spawn_app, spawn_app_at_once,
};
use segmint::biz::hash_token;
use segmint::store::Store;

/// Bizs created by SQL beside the served ones, so that a full read would show.
const BULK: usize = 2_000;

/// `segmint_catalog_…{database="pg{db}",read="{read}"}`.
async fn catalog_metric(app: &common::TestApp, family: &str, db: usize, read: &str) -> f64 {
    metric(
        app,
        &format!("segmint_catalog_{family}{{database=\"pg{db}\",read=\"{read}\"}}"),
    )
    .await
}

/// The rows the feed reads of both databases returned so far.
async fn feed_rows(app: &common::TestApp) -> f64 {
    catalog_metric(app, "rows_read_total", 0, "feed").await
        + catalog_metric(app, "rows_read_total", 1, "feed").await
}

/// The full reads of both databases so far.
async fn full_reads(app: &common::TestApp) -> [f64; 2] {
    [
        catalog_metric(app, "reads_total", 0, "full").await,
        catalog_metric(app, "reads_total", 1, "full").await,
    ]
}

/// Waits until ten feed reads of each database in a row returned no row (the
/// witnesses and token uses of the first requests written and read back), and
/// returns the rows the feed had read by then.
async fn at_rest(app: &common::TestApp) -> f64 {
    let mut last = feed_rows(app).await;
    for _ in 0..100 {
        let reads = catalog_metric(app, "reads_total", 0, "feed").await;
        let app_ref = &app;
        eventually(
            Duration::from_secs(30),
            "ten more feed reads",
            move || async move {
                let now = catalog_metric(app_ref, "reads_total", 0, "feed").await;
                (now >= reads + 10.0)
                    .then_some(())
                    .ok_or(format!("{now} feed reads"))
            },
        )
        .await;
        let now = feed_rows(app).await;
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the feed never went quiet: {last} rows read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_at_rest_are_read_through_the_feed_alone() {
    let dbs = Databases::start(Kind::Postgres, 2);
    let config = dbs.config("catalog_refresh_ms = 100");
    let token = setup_biz(&config, "first", 100, false).await;
    for i in 0..2 {
        dbs.sql(
            i,
            &format!(
                "INSERT INTO tiny_id_info (biz_type, step, delta, remainder)
                 SELECT 'bulk' || g, 100, 2, {i} FROM generate_series(1, {BULK}) g"
            ),
        );
    }
    let app = spawn_app(config.clone()).await;
    assert_eq!(v1_ids(&app, "first", &token, 3).await.len(), 3);
    let full = full_reads(&app).await;
    assert!(
        full.iter().all(|&n| n >= 1.0),
        "the first read is full: {full:?}"
    );
    // The witnesses of every row are written once to the other database, and read
    // back through its feed; then refreshes read nothing.
    let rows = at_rest(&app).await;
    assert_eq!(full_reads(&app).await, full, "no full read at rest");

    // A biz and its token added at rest are served within the refresh interval.
    let second = setup_biz(&config, "second", 100, false).await;
    assert_eq!(v1_ids(&app, "second", &second, 2).await.len(), 2);
    // A revocation at rest is seen: the token is refused.
    let store = Store::connect(&config).unwrap();
    let spare = add_token(&config, "second").await;
    assert_eq!(v1_ids(&app, "second", &spare, 1).await.len(), 1);
    store.revoke_token(&hash_token(&spare)[..12]).await.unwrap();
    let (app_ref, spare_ref) = (&app, &spare);
    eventually(
        Duration::from_secs(10),
        "the revoked token refused",
        move || async move {
            let r = v1(app_ref, false, "/v1/ids/second", bearer(spare_ref)).await;
            (r.status == 401)
                .then_some(())
                .ok_or(format!("{}", r.status))
        },
    )
    .await;
    // An edit by hand at rest (a biz's class moved to an overlapping one) refuses it.
    dbs.sql(
        1,
        "UPDATE tiny_id_info SET remainder = 0 WHERE biz_type = 'bulk7'",
    );
    let bulk = add_token(&config, "bulk7").await;
    let bulk_ref = &bulk;
    eventually(
        Duration::from_secs(10),
        "the overlapping biz refused",
        move || async move {
            let r = v1(app_ref, false, "/v1/ids/bulk7", bearer(bulk_ref)).await;
            (r.status >= 400 && r.status != 401)
                .then_some(())
                .ok_or(format!("{} {}", r.status, r.body))
        },
    )
    .await;
    assert_eq!(
        full_reads(&app).await,
        full,
        "every change was read through the feed"
    );
    // The feed may return a row twice (a writer that began before a read and
    // committed after it), never the catalog again and again.
    let rows = at_rest(&app).await - rows;
    assert!(
        rows < 2.0 * BULK as f64,
        "the changes cost {rows} rows read: the catalog was read again and again"
    );

    // A database that restarted is read in full again.
    dbs.stop(0);
    dbs.start_again(0);
    eventually(
        Duration::from_secs(30),
        "a full read of the restarted database",
        move || async move {
            let now = full_reads(app_ref).await;
            (now[0] > full[0]).then_some(()).ok_or(format!("{now:?}"))
        },
    )
    .await;
    assert_eq!(v1_ids(&app, "first", &token, 3).await.len(), 3);
}

/// A server's first catalog read (the full read of every row) is bounded by the
/// step bound, not by the fetch timeout a request is judged by: a first read that waits
/// past the fetch timeout (here on a lock; at a million bizs on the rows themselves)
/// finishes with every biz, instead of giving up on the database's rows at the fetch
/// timeout. The server serves meanwhile (see the test below), but its catalog is the
/// full read's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_read_longer_than_the_fetch_timeout_finishes() {
    let dbs = Databases::start(Kind::Postgres, 2);
    let config = dbs.config("fetch_timeout_ms = 300\ncatalog_refresh_ms = 100");
    let token = setup_biz(&config, "first", 100, false).await;
    let client = hold(
        &dbs.urls()[0],
        "LOCK TABLE tiny_id_info IN ACCESS EXCLUSIVE MODE",
    )
    .await;
    let app = spawn_app_at_once(config.clone()).await;
    let dbs_ref = &dbs;
    eventually(
        Duration::from_secs(30),
        "the first read waits for the lock",
        move || async move {
            let waiting = dbs_ref.sql(0, "SELECT count(*) FROM pg_locks WHERE NOT granted");
            (waiting != "0")
                .then_some(())
                .ok_or(format!("{waiting} waiting"))
        },
    )
    .await;
    // Past the fetch timeout, the first read still waits: no catalog yet. Real time
    // must pass for that to show.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !app.state.store.catalog().is_read(),
        "a catalog without pg0's rows: its read gave up at the fetch timeout"
    );
    client.batch_execute("ROLLBACK").await.expect("unlock");
    let app_ref = &app;
    eventually(
        Duration::from_secs(30),
        "both first reads done",
        move || async move {
            let full = full_reads(app_ref).await;
            (full == [1.0, 1.0])
                .then_some(())
                .ok_or(format!("{full:?}"))
        },
    )
    .await;
    assert!(app.state.store.catalog().biz("first").is_some());
    assert_eq!(v1_ids(&app, "first", &token, 2).await.len(), 2);
}

/// Holds `LOCK TABLE segmint_feed` on every database, then starts a server: its
/// catalog reads (full or of the feed) wait, a look at one biz does not (it reads no
/// feed position). Returns the server once both first reads wait, and the locks.
async fn spawn_with_feeds_held(
    dbs: &Databases,
    config: &segmint::config::Config,
) -> (common::TestApp, Vec<tokio_postgres::Client>) {
    let mut held = Vec::new();
    for url in dbs.urls() {
        held.push(hold(&url, "LOCK TABLE segmint_feed IN ACCESS EXCLUSIVE MODE").await);
    }
    let app = spawn_app_at_once(config.clone()).await;
    eventually(
        Duration::from_secs(30),
        "the first reads wait for the locks",
        move || async move {
            let waiting: Vec<String> = (0..2)
                .map(|i| dbs.sql(i, "SELECT count(*) FROM pg_locks WHERE NOT granted"))
                .collect();
            (waiting.iter().all(|w| w != "0"))
                .then_some(())
                .ok_or(format!("{waiting:?} waiting"))
        },
    )
    .await;
    (app, held)
}

/// A server serves before its first catalog read ends (seconds over a million bizs):
/// a biz asked for meanwhile is read alone, by index, and served. What such a look
/// cannot serve (an unknown or revoked token) waits for the full read, which decides
/// it as before. Here the full reads wait on a lock that a look does not meet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_serves_before_its_first_catalog_read_ends() {
    let dbs = Databases::start(Kind::Postgres, 2);
    let config = dbs.config("catalog_refresh_ms = 100");
    let token = setup_biz(&config, "early", 100, false).await;
    let revoked = add_token(&config, "early").await;
    let store = Store::connect(&config).unwrap();
    store
        .revoke_token(&hash_token(&revoked)[..12])
        .await
        .unwrap();
    let (app, held) = spawn_with_feeds_held(&dbs, &config).await;
    let mut ids = v1_ids(&app, "early", &token, 250).await;
    assert!(
        !app.state.store.catalog().is_read(),
        "served from a catalog read in full: the locks did not hold the reads"
    );
    assert_eq!(full_reads(&app).await, [0.0, 0.0]);
    // Neither a revoked token nor an unknown one is served by a look: both wait for
    // the full read, which refuses them.
    let asks: Vec<_> = [revoked.as_str(), "no-such-token"]
        .into_iter()
        .map(|t| {
            let (base, http) = (app.base.clone(), app.http.clone());
            let auth = format!("Bearer {t}");
            tokio::spawn(async move {
                http.get(format!("{base}/v1/ids/early"))
                    .header("Authorization", auth)
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
            })
        })
        .collect();
    // A while for a wrong answer to come: what is checked is that none does.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        asks.iter().all(|a| !a.is_finished()),
        "a token a look did not find was decided before the full read"
    );
    for client in held {
        client.batch_execute("ROLLBACK").await.expect("unlock");
    }
    for ask in asks {
        assert_eq!(ask.await.unwrap().expect("an answer"), 401);
    }
    assert_eq!(full_reads(&app).await, [1.0, 1.0]);
    ids.extend(v1_ids(&app, "early", &token, 250).await);
    let unique: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "an ID issued twice");
}

/// A database that went back in time (a restore from a backup) is caught by a look
/// before the first catalog read ends, as by the full read: the look learns the
/// biz's witnesses, and the reservation judges the row by them. No ID is issued twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_behind_its_witnesses_is_caught_before_the_catalog_is_read() {
    let dbs = Databases::start(Kind::Postgres, 2);
    let config = dbs.config("catalog_refresh_ms = 100");
    let token = setup_biz(&config, "early", 10, false).await;
    let mut ids = Vec::new();
    {
        let app = spawn_app(config.clone()).await;
        // Until pg1 holds a witness of pg0's row (reservations pick a database at
        // random).
        for _ in 0..200 {
            ids.extend(v1_ids(&app, "early", &token, 20).await);
            let witnessed = dbs.sql(
                1,
                "SELECT count(*) FROM segmint_witness WHERE database = 'pg0' AND max_id > 0",
            );
            if witnessed != "0" {
                break;
            }
        }
        app.stop().await;
    }
    // pg0's row goes back to before every reservation: a restore from an old backup.
    dbs.sql(
        0,
        "UPDATE tiny_id_info SET max_id = 0, version = 0 WHERE biz_type = 'early'",
    );
    let (app, held) = spawn_with_feeds_held(&dbs, &config).await;
    for _ in 0..20 {
        ids.extend(v1_ids(&app, "early", &token, 20).await);
    }
    assert!(!app.state.store.catalog().is_read());
    let fenced = app.state.store.cluster().status()[0].fenced.clone();
    assert!(
        fenced.is_some(),
        "pg0 not fenced: {:?}",
        app.state.store.cluster().status()
    );
    for client in held {
        client.batch_execute("ROLLBACK").await.expect("unlock");
    }
    let unique: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "an ID issued twice");
}
