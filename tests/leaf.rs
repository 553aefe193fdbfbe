//! Leaf's routes against real PostgreSQL: off by default, the allow-list, Leaf's exact
//! answer shapes (`/api/segment/get/{key}`, `/decodeSnowflakeId`), a separate
//! `leaf.bind`, and the v1 decode route with its token.

use crate::common;

use std::collections::HashSet;
use std::net::TcpListener;
use std::time::Duration;

use common::http::{Remote, Resp, get, send};
use common::*;
use segmint::server::Application;
use serde_json::json;

/// The `[leaf]` table as a top-level inline table, so that the harness's default keys
/// appended after it stay top-level.
const LEAF_ORDER: &str = r#"leaf = { enabled = true, bizs = ["order", "ghost"] }"#;

/// An ID composed as Leaf's `SnowflakeIDGenImpl.get` composes it, with Leaf's epoch.
fn leaf_id(timestamp: i64, worker_id: i64, sequence: i64) -> i64 {
    let twepoch = 1288834974657_i64;
    ((timestamp - twepoch) << 22) | (worker_id << 12) | sequence
}

fn assert_plain(r: &Resp, status: u16) {
    assert_eq!(r.status, status, "{r:?}");
    assert_eq!(r.content_type, "text/plain;charset=UTF-8", "{r:?}");
    assert!(
        !r.body.is_empty() && r.body.len() < 200 && !r.body.contains('\n'),
        "a short one-line body: {r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_routes_are_off_by_default() {
    let pg = PgCluster::start();
    let config = config(&[&pg], "");
    let token = setup_biz(&config, "order", 100, false).await;
    let app = spawn_app(config).await;
    for path in ["/api/segment/get/order", "/decodeSnowflakeId?snowflakeId=1"] {
        assert_eq!(get(&app, path).await.status, 404, "{path}");
    }
    // The v1 decode route is part of the v1 API, behind its token, whatever `[leaf]` says.
    let (status, body) = app
        .get_v1("/v1/snowflake/order/decode/4194304", Some(&token))
        .await;
    assert_eq!(status, 200, "{body}");
}

/// IDs from `/api/segment/get/{key}` over two databases: a decimal body of Leaf's
/// content type, unique, in the biz's class (odd-only), for any method as Leaf maps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segment_ids_are_unique_and_in_the_bizs_classes() {
    let dbs = Databases::start(Kind::Postgres, 2);
    let config = dbs.config(LEAF_ORDER);
    setup_biz(&config, "order", 50, true).await;
    setup_biz(&config, "secret", 50, false).await;
    let app = spawn_app(config).await;
    let mut seen = HashSet::new();
    for i in 0..400 {
        let path = "/api/segment/get/order";
        let req = if i % 2 == 0 {
            app.http.get(format!("{}{path}", app.base))
        } else {
            app.http.post(format!("{}{path}", app.base))
        };
        let r = send(req).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.content_type, "text/plain;charset=UTF-8", "{r:?}");
        let id: i64 = r
            .body
            .parse()
            .unwrap_or_else(|e| panic!("a decimal body ({e}): {r:?}"));
        assert_eq!(id.rem_euclid(2), 1, "odd-only biz gave {id}");
        assert!(seen.insert(id), "duplicate {id}");
    }
    // Both databases served: with 400 IDs and segments of 50 each, more than one
    // segment was reserved, and the two databases' odd classes are 1 and 3 mod 4.
    let classes: HashSet<i64> = seen.iter().map(|id| id.rem_euclid(4)).collect();
    assert!(classes.is_subset(&HashSet::from([1, 3])), "{classes:?}");

    // A biz outside the allow-list, a listed biz that does not exist and a biz that
    // does not exist at all get the same answer; a malformed key a 400.
    let refused = get(&app, "/api/segment/get/secret").await;
    assert_plain(&refused, 404);
    assert!(refused.body.contains("secret"), "{refused:?}");
    assert_plain(&get(&app, "/api/segment/get/ghost").await, 404);
    assert_plain(&get(&app, "/api/segment/get/nobody").await, 404);
    let bad = get(&app, "/api/segment/get/a%20b").await;
    assert_plain(&bad, 400);
    assert!(bad.body.contains("key"), "{bad:?}");
}

/// `/decodeSnowflakeId` answers Leaf's JSON (every value a string) for an ID composed
/// by Leaf's formula, and 400 with `errorMsg` for a malformed one; the v1 route the
/// same parts as numbers, behind a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decode_answers_as_leaf_does() {
    let pg = PgCluster::start();
    let config = config(&[&pg], LEAF_ORDER);
    let token = setup_biz(&config, "order", 10, false).await;
    let app = spawn_app(config).await;
    // Leaf's documented example: 1567733700834, worker 39, sequence 3448 (Leaf prints
    // the time in its JVM's zone, UTC+8: 09:35:00.834; segmint prints UTC).
    let id = leaf_id(1567733700834, 39, 3448);
    let r = get(&app, &format!("/decodeSnowflakeId?snowflakeId={id}")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.content_type.starts_with("application/json"), "{r:?}");
    assert_eq!(
        r.json(),
        json!({
            "timestamp": "1567733700834(2019-09-06 01:35:00.834)",
            "workerId": "39",
            "sequenceId": "3448",
        })
    );
    for bad in ["abc", "-5", "1e3", "", "99999999999999999999"] {
        let r = get(&app, &format!("/decodeSnowflakeId?snowflakeId={bad}")).await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
        let msg = r.json()["errorMsg"].as_str().unwrap_or_default().to_owned();
        assert!(msg.contains("snowflakeId"), "{bad}: {r:?}");
    }
    let missing = get(&app, "/decodeSnowflakeId").await;
    assert_eq!(missing.status, 400, "{missing:?}");

    let path = format!("/v1/snowflake/order/decode/{id}");
    let (status, body) = app.get_v1(&path, Some(&token)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({
            "id": id,
            "timestamp_ms": 1567733700834_i64,
            "time": "2019-09-06T01:35:00.834Z",
            "worker_id": 39,
            "sequence": 3448,
            "layout": {
                "name": "leaf",
                "unit_ms": 1,
                "timestamp_bits": 41,
                "worker_bits": 10,
                "sequence_bits": 12,
                "total_bits": 63,
                "js_safe": false,
            },
        })
    );
    assert_eq!(app.get_v1(&path, None).await.0, 401);
    let (status, body) = app
        .get_v1("/v1/snowflake/order/decode/x1", Some(&token))
        .await;
    assert_eq!(status, 400, "{body}");
}

/// With `leaf.bind`, Leaf's routes are served there and not on `bind`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_bind_serves_the_leaf_routes_alone() {
    let pg = PgCluster::start();
    let config = config(
        &[&pg],
        r#"leaf = { enabled = true, bizs = ["order"], bind = "127.0.0.1:0" }"#,
    );
    let token = setup_biz(&config, "order", 10, false).await;
    let app = Application::with_listener(config, TcpListener::bind("127.0.0.1:0").unwrap())
        .await
        .expect("build app");
    let app = common::read(app).await;
    let port = app.leaf_port().expect("a Leaf address");
    let public = run_app(app);
    let leaf = Remote {
        base: format!("http://127.0.0.1:{port}"),
        ..public.remote()
    };
    let r = get(&leaf, "/api/segment/get/order").await;
    assert_eq!((r.status, r.body.as_str()), (200, "1"), "{r:?}");
    assert_eq!(get(&public, "/api/segment/get/order").await.status, 404);
    assert_eq!(get(&leaf, "/v1/ids/order").await.status, 404);
    assert_eq!(public.ids("order", &token, 1).await, vec![2]);
    assert_eq!(get(&leaf, "/healthz").await.status, 200);
}

/// `/api/snowflake/get/{key}` answers one snowflake ID as Leaf's plain decimal body,
/// decoded by Leaf's formula to the worker ID leased here: 503 with `Retry-After` while
/// the new lease waits out earlier holders, 404 for a key not in both `[leaf] bizs`
/// and `[snowflake] bizs`, and nothing at all while `[snowflake]` is off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snowflake_ids_answer_as_leaf_does() {
    let pg = PgCluster::start();
    let leaf = r#"leaf = { enabled = true, bizs = ["order", "user"] }"#;
    setup_biz(&config(&[&pg], leaf), "order", 10, false).await;
    let off = spawn_app(config(&[&pg], leaf)).await;
    let r = get(&off, "/api/snowflake/get/order").await;
    assert_plain(&r, 404);
    off.stop().await;
    let snowflake = r#"snowflake = { enabled = true, bizs = ["order", "audit"], lease_ms = 600, renew_ms = 150 }"#;
    let app = spawn_app(config(&[&pg], &format!("{leaf}\n{snowflake}"))).await;
    let waiting = get(&app, "/api/snowflake/get/order").await;
    assert_plain(&waiting, 503);
    assert_eq!(waiting.retry_after.as_deref(), Some("1"), "{waiting:?}");
    let first = eventually(Duration::from_secs(10), "a snowflake ID", async || {
        let r = get(&app, "/api/snowflake/get/order").await;
        if r.status == 200 {
            Ok(r)
        } else {
            Err(format!("{r:?}"))
        }
    })
    .await;
    assert_plain(&first, 200);
    let mut last: i64 = first.body.parse().expect("a decimal body");
    for _ in 0..50 {
        let r = get(&app, "/api/snowflake/get/order").await;
        assert_plain(&r, 200);
        let id: i64 = r.body.parse().expect("a decimal body");
        assert!(id > last, "{id} after {last}");
        let (origin_timestamp, worker_id, _) = (
            (id >> 22) + 1288834974657,
            (id >> 12) ^ (id >> 22 << 10),
            id ^ (id >> 12 << 12),
        );
        assert_eq!(worker_id, 0, "the one database's lowest worker ID");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        assert!(
            (now - origin_timestamp).abs() < 5_000,
            "{origin_timestamp} vs {now}"
        );
        last = id;
    }
    // In [leaf] bizs only, in [snowflake] bizs only, in neither: the same 404.
    for key in ["user", "audit", "nobody"] {
        assert_plain(&get(&app, &format!("/api/snowflake/get/{key}")).await, 404);
    }
    assert_plain(&get(&app, "/api/snowflake/get/a%20b").await, 400);
}
