//! Every database down: the server keeps issuing exactly the IDs it has cached, then
//! answers "unavailable" in both APIs, and serves again once a database is back.

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use segmint::biz::BizTag;
use serde_json::Value;
use tokio::task::block_in_place;

const BIZ: &str = "order";

/// 500 IDs per segment on each of the two databases.
const STEP: i64 = 1000;

/// Most IDs asked for in one request while the databases are down.
const CHUNK: u64 = 130;

/// `n` IDs through v1 (`compat` false) or Tinyid's `nextId`; `Err` describes a failure.
async fn next_ids(app: &TestApp, token: &str, n: u64, compat: bool) -> Result<Vec<i64>, String> {
    let (status, ok, body) = if compat {
        let (status, text) = app
            .get(&format!(
                "/tinyid/id/nextId?bizType={BIZ}&token={token}&batchSize={n}"
            ))
            .await;
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, status == 200 && body["code"] == 200, body)
    } else {
        let (status, body) = app
            .get_v1(&format!("/v1/ids/{BIZ}?count={n}"), Some(token))
            .await;
        (status, status == 200, body)
    };
    if !ok {
        return Err(format!("HTTP {status}: {body}"));
    }
    let data = if compat { &body["data"] } else { &body["ids"] };
    let ids: Vec<i64> = serde_json::from_value(data.clone()).map_err(|e| format!("{e}: {body}"))?;
    if ids.len() as u64 != n {
        return Err(format!("{} IDs instead of {n}: {body}", ids.len()));
    }
    Ok(ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_serves_through_a_full_outage_then_service_resumes() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let config = config(&[&a, &b], "preload_percent = 20");
    let token = setup_biz(&config, BIZ, STEP, false).await;
    let app = spawn_app(config).await;
    let biz = BizTag::parse(BIZ).unwrap();
    let cache = &app.state.cache;

    // 20 % of the first segment: the second one is fetched ahead.
    let mut issued = app.ids(BIZ, &token, 100).await;
    eventually(
        Duration::from_secs(5),
        "the preloaded segment installed: 400 + 500 IDs cached",
        async || match cache.remaining(&biz) {
            900 => Ok(()),
            n => Err(format!("{n} IDs cached")),
        },
    )
    .await;
    let versions = block_in_place(|| a.version(BIZ) + b.version(BIZ));
    assert_eq!(versions, 2, "two segments cached, so two reservations");

    block_in_place(|| {
        a.stop();
        b.stop();
    });

    // Never ask for more than is cached: a request that can be served only in part fails.
    let mut cached = cache.remaining(&biz);
    let mut served = 0;
    let mut compat = false;
    while cached > 0 {
        let n = cached.min(CHUNK);
        let ids = next_ids(&app, &token, n, compat).await.unwrap_or_else(|e| {
            panic!(
                "{} with {cached} IDs cached, every database down: {e}",
                if compat { "nextId" } else { "v1" }
            )
        });
        issued.extend(ids);
        served += n;
        let left = cache.remaining(&biz);
        assert_eq!(left, cached - n, "cache after serving {n} of {cached} IDs");
        cached = left;
        compat = !compat;
    }
    assert_eq!(
        served, 900,
        "IDs served from the cache while every database was down"
    );

    let (status, body) = app
        .get_v1(&format!("/v1/ids/{BIZ}?count=1"), Some(&token))
        .await;
    assert_eq!(
        status, 503,
        "v1 with an empty cache and no database: {body}"
    );
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    let (status, text) = app
        .get(&format!(
            "/tinyid/id/nextId?bizType={BIZ}&token={token}&batchSize=1"
        ))
        .await;
    assert_eq!(status, 200, "Tinyid's errors travel in a 200: {text}");
    let body: Value = serde_json::from_str(&text).expect("nextId answers JSON");
    assert_eq!(
        body["code"], 6,
        "nextId with an empty cache and no database: {text}"
    );
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()) && body.get("data").is_none(),
        "an error has a message and no data: {text}"
    );
    let (status, text) = app.get("/readyz").await;
    assert_eq!(status, 503, "/readyz with every database down: {text}");
    let (status, text) = app.get("/healthz").await;
    assert_eq!(
        status, 200,
        "/healthz does not depend on the databases: {text}"
    );
    assert_eq!(cache.remaining(&biz), 0, "failed requests issued nothing");

    block_in_place(|| a.start_again());
    let highest_even = issued
        .iter()
        .copied()
        .filter(|id| id % 2 == 0)
        .max()
        .unwrap_or(0);
    let resumed = eventually(
        Duration::from_secs(5),
        "v1 serves once pg0 is back",
        async || {
            let answer = next_ids(&app, &token, 1, false).await;
            if let Err(e) = &answer {
                assert!(
                    e.contains("\"unavailable\""),
                    "while pg0 restarts, only \"unavailable\" is expected: {e}"
                );
            }
            answer
        },
    )
    .await;
    let more = next_ids(&app, &token, 50, true)
        .await
        .expect("nextId once pg0 is back");
    let after: Vec<i64> = resumed.into_iter().chain(more).collect();
    assert!(
        after.iter().all(|&id| id % 2 == 0 && id > highest_even),
        "with only pg0 up, new IDs come from new pg0 segments (even, above {highest_even}): {after:?}"
    );
    let (status, text) = app.get("/readyz").await;
    assert_eq!(status, 200, "/readyz with pg0 back: {text}");

    issued.extend(after);
    let mut seen = HashSet::with_capacity(issued.len());
    let twice: Vec<i64> = issued
        .iter()
        .copied()
        .filter(|&id| !seen.insert(id))
        .collect();
    assert!(
        twice.is_empty(),
        "of {} IDs, these were issued twice: {twice:?}",
        issued.len()
    );
}

/// During an outage, a batch larger than the cache fails without using the cache up:
/// smaller requests after it are still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_batch_in_an_outage_leaves_the_cache_intact() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let config = config(&[&a, &b], "preload_percent = 100");
    let token = setup_biz(&config, BIZ, STEP, false).await;
    let app = spawn_app(config).await;
    let biz = BizTag::parse(BIZ).unwrap();
    let first = app.ids(BIZ, &token, 10).await;
    let cached = app.state.cache.remaining(&biz);
    assert_eq!(cached, 490, "one segment of 500, 10 issued");
    a.stop();
    b.stop();
    for compat in [false, true] {
        let err = next_ids(&app, &token, cached + 1, compat)
            .await
            .unwrap_err();
        assert!(err.contains("503") || err.contains("\"code\":6"), "{err}");
        assert_eq!(
            app.state.cache.remaining(&biz),
            cached,
            "the failed batch took nothing"
        );
    }
    let rest = next_ids(&app, &token, cached, false)
        .await
        .expect("the cache still serves");
    let all: HashSet<i64> = first.iter().chain(&rest).copied().collect();
    assert_eq!(all.len(), 500);
}
