//! The client library's segments sized to its own rate, and its give-back on close,
//! against a real server and PostgreSQL: a client at full speed grows its segments up
//! to the server's `step_max`; a client closed after k IDs lets the next one continue
//! at k + 1, unless someone reserved in between; nothing is issued after close.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use segmint::client::blocking::BlockingClient;
use segmint::client::{Biz, Client, ErrorKind, Protocol};

const BIZ: &str = "order";

fn client(app: &TestApp, token: &str) -> Client {
    Client::builder()
        .servers([app.base.clone()])
        .token(token)
        .build()
        .unwrap()
}

/// A server on one PostgreSQL database with `BIZ` at step 1000; its token.
async fn server(extra: &str) -> (Databases, TestApp, String) {
    let dbs = Databases::start(Kind::Postgres, 1);
    let config = dbs.config(extra);
    let token = setup_biz(&config, BIZ, 1000, false).await;
    let app = spawn_app(config).await;
    (dbs, app, token)
}

/// Takes `n` IDs one by one.
async fn take(biz: &Biz, n: usize) -> Vec<i64> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        ids.push(biz.next_id().await.unwrap());
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_at_full_speed_grows_its_segments_up_to_step_max() {
    let (_dbs, app, token) = server("step_max = 200000").await;
    let c = client(&app, &token);
    let biz = c.biz(BIZ).unwrap();
    biz.record_segments();
    let start = Instant::now();
    let (mut issued, mut last_second) = (0u64, (0u64, 0u64));
    while start.elapsed() < Duration::from_secs(3) {
        let before = (issued, biz.stats().fetches);
        let second = Instant::now();
        while second.elapsed() < Duration::from_secs(1) {
            for _ in 0..4096 {
                biz.next_id().await.unwrap();
            }
            issued += 4096;
        }
        last_second = (issued - before.0, biz.stats().fetches - before.1);
    }
    let steps: Vec<i64> = biz.segments().iter().map(|s| s.step()).collect();
    let stats = biz.stats();
    assert_eq!(steps[0], 1000, "the first fetch takes the row's step");
    assert!(
        steps.iter().all(|&s| s <= 200_000),
        "never above step_max: {steps:?}"
    );
    assert!(
        steps.windows(2).all(|w| w[1] <= 2 * w[0]),
        "at most x2 per fetch: {steps:?}"
    );
    assert_eq!(stats.last_step, Some(200_000), "{steps:?}");
    // Fetches per million IDs: over the first five segments (the ramp from the row's
    // step), and over the last second.
    let ramp: i64 = steps[..5].iter().sum();
    let per_million_ramp = 5e6 / ramp as f64;
    let per_million_last = last_second.1 as f64 * 1e6 / last_second.0 as f64;
    assert!(
        per_million_last * 10.0 < per_million_ramp,
        "fetches per million IDs: {per_million_ramp:.1} at first, {per_million_last:.1} in the last second ({last_second:?}; {steps:?})"
    );
    // Callers wait while segments are shorter than a fetch: in the ramp, not on every
    // segment. (How many depends on how fast this machine issues IDs against how long
    // a fetch takes under its load: at most half the fetches, not an absolute count.)
    assert!(stats.waits * 2 < stats.fetches, "{stats:?}; {steps:?}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tinyids_protocol_segments_keep_the_row_step() {
    let (_dbs, app, token) = server("").await;
    let c = Client::builder()
        .servers([app.base.clone()])
        .token(&token)
        .protocol(Protocol::Tinyid)
        .build()
        .unwrap();
    let biz = c.biz(BIZ).unwrap();
    biz.record_segments();
    take(&biz, 50_000).await;
    let steps: Vec<i64> = biz.segments().iter().map(|s| s.step()).collect();
    assert!(steps.len() >= 50, "{} segments", steps.len());
    assert!(steps.iter().all(|&s| s == 1000), "{steps:?}");
    // Nothing to give back either: Tinyid's answer names no version.
    let summary = c.close().await;
    assert_eq!(summary.given_back, 0, "{summary:?}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_client_gives_back_and_the_next_continues_at_k_plus_1() {
    let (_dbs, app, token) = server("").await;
    let a = client(&app, &token);
    let biz = a.biz(BIZ).unwrap();
    // Past the prefetch point: a second segment is held, untouched.
    let ids = take(&biz, 300).await;
    assert_eq!(ids[..3], [1, 2, 3]);
    eventually(
        Duration::from_secs(5),
        "the next segment arrives",
        async || match biz.cached() {
            n if n > 700 => Ok(n),
            n => Err(format!("{n} cached")),
        },
    )
    .await;
    let cached = biz.cached();
    let summary = a.close().await;
    assert_eq!(summary.given_back, cached, "{summary:?}");
    assert_eq!(summary.wasted, 0, "{summary:?}");
    assert!(summary.errors.is_empty(), "{summary:?}");

    let b = client(&app, &token);
    assert_eq!(b.next_id(BIZ).await.unwrap(), 301);
    assert_eq!(b.close().await.given_back, 999);
    let c = client(&app, &token);
    assert_eq!(c.next_id(BIZ).await.unwrap(), 302);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_gives_back_the_segment_of_a_fetch_in_flight_too() {
    let (_dbs, app, token) = server("").await;
    let a = client(&app, &token);
    // The 201st ID is the prefetch point: the next segment's fetch starts, and close
    // comes at once, most likely before its answer.
    take(&a.biz(BIZ).unwrap(), 201).await;
    let summary = a.close().await;
    // The rest of the first segment and all of the second (its size is the client's
    // choice): nothing wasted, and the next client goes on at 202.
    assert!(summary.given_back >= 799 + 1000, "{summary:?}");
    assert_eq!(summary.wasted, 0, "{summary:?}");
    let b = client(&app, &token);
    assert_eq!(b.next_id(BIZ).await.unwrap(), 202);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_in_between_keeps_the_rest_wasted_and_nothing_is_issued_twice() {
    let (_dbs, app, token) = server("").await;
    let a = client(&app, &token);
    let biz_a = a.biz(BIZ).unwrap();
    let mut all = take(&biz_a, 100).await;
    // Another client reserves after a's segment, before a closes.
    let b = client(&app, &token);
    let biz_b = b.biz(BIZ).unwrap();
    all.extend(take(&biz_b, 10).await);
    let summary = a.close().await;
    assert_eq!(summary.given_back, 0, "{summary:?}");
    assert_eq!(summary.wasted, 900, "{summary:?}");
    // The rest of a's segment is never issued: b and a new client go on above it.
    all.extend(take(&biz_b, 3000).await);
    let c = client(&app, &token);
    all.extend(take(&c.biz(BIZ).unwrap(), 3000).await);
    assert_unique(&all);
    assert!(
        all[100..].iter().all(|&id| id > 1000),
        "an ID of a's segment was reissued"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_close_nothing_is_issued_and_closing_again_is_harmless() {
    let (_dbs, app, token) = server("").await;
    let a = client(&app, &token);
    let biz = a.biz(BIZ).unwrap();
    take(&biz, 10).await;
    let first = a.close().await;
    assert_eq!(first.given_back, 990, "{first:?}");
    assert!(biz.try_next_id().is_none());
    for result in [biz.next_id().await, a.next_id("other").await] {
        match result.map_err(|e| e.into_kind()) {
            Err(ErrorKind::Closed { .. }) => {}
            other => panic!("expected Closed, got {other:?}"),
        }
    }
    assert!(matches!(
        biz.next_ids(5).await.map_err(|e| e.into_kind()),
        Err(ErrorKind::Closed { .. })
    ));
    assert_eq!(a.clone().close().await, Default::default());

    // The blocking facade closes the same way, from a thread of its own.
    let base = app.base.clone();
    let ids = tokio::task::spawn_blocking(move || {
        let client = BlockingClient::builder()
            .servers([base])
            .token(token)
            .build()
            .unwrap();
        let biz = client.biz(BIZ).unwrap();
        let ids: Vec<i64> = (0..5).map(|_| biz.next_id().unwrap()).collect();
        let summary = client.close();
        assert_eq!(summary.given_back, 995, "{summary:?}");
        assert!(matches!(
            biz.next_id().map_err(|e| e.into_kind()),
            Err(ErrorKind::Closed { .. })
        ));
        ids
    })
    .await
    .unwrap();
    assert_eq!(ids, [11, 12, 13, 14, 15]);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_after_its_server_was_killed_wastes_the_rest_and_reissues_none() {
    let dbs = Databases::start(Kind::Postgres, 1);
    let token = setup_biz(&dbs.config(""), BIZ, 1000, false).await;
    let toml = config_toml_urls(&dbs.urls(), "");
    let mut first = ServerProcess::start(&toml).await;
    let a = Client::builder()
        .servers([first.base.clone()])
        .token(token.as_str())
        .build()
        .unwrap();
    let mut all = take(&a.biz(BIZ).unwrap(), 100).await;
    // The server that handed the segment out dies with its record of it.
    first.kill9();
    let summary = a.close().await;
    assert_eq!(summary.given_back, 0, "{summary:?}");
    assert_eq!(summary.wasted, 900, "{summary:?}");
    assert!(!summary.errors.is_empty(), "{summary:?}");
    // A new server process on the same database: nothing of a's segment comes back.
    let second = ServerProcess::start(&toml).await;
    let b = Client::builder()
        .servers([second.base.clone()])
        .token(token.as_str())
        .build()
        .unwrap();
    all.extend(take(&b.biz(BIZ).unwrap(), 3000).await);
    assert_unique(&all);
    assert!(
        all[100..].iter().all(|&id| id > 1000),
        "an ID of the killed server's client segment was reissued"
    );
}
