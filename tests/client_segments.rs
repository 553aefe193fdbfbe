//! Segments for the client library against real PostgreSQL: the `?step=` size hint
//! bounded by the row's step, `step_max` and the room below `i64::MAX`; the give-back
//! of a closed client (`POST /v1/segments/{biz}/return`), which returns only what
//! provably nobody reserved after, and wastes the rest; the client metrics.

use crate::by_kind;
use crate::common;

use common::http::{Resp, bearer, get, metric, request, send};
use common::*;
use reqwest::Method;
use serde_json::{Value, json};

const BIZ: &str = "order";
const ALICE: &str = "alice-0123456789abcdef";
const BOB: &str = "bob-0123456789abcdef";

/// `GET /v1/segments/{BIZ}`, with `?step=` when `step` is given and `X-Segmint-Client`
/// when `client` is.
async fn fetch(app: &TestApp, token: &str, step: Option<&str>, client: Option<&str>) -> Resp {
    let path = match step {
        Some(step) => format!("/v1/segments/{BIZ}?step={step}"),
        None => format!("/v1/segments/{BIZ}"),
    };
    let req = request(app, Method::GET, &path, bearer(token));
    send(match client {
        Some(client) => req.header("x-segmint-client", client),
        None => req,
    })
    .await
}

/// [`fetch`] that must succeed: the segment's answer.
async fn segment(app: &TestApp, token: &str, step: Option<&str>, client: Option<&str>) -> Value {
    let r = fetch(app, token, step, client).await;
    assert_eq!(r.status, 200, "{r:?}");
    r.json()
}

/// `POST /v1/segments/{BIZ}/return` with `body` as it is.
async fn give_back_raw(app: &TestApp, token: &str, body: &str) -> Resp {
    let path = format!("/v1/segments/{BIZ}/return");
    send(
        request(app, Method::POST, &path, bearer(token))
            .header("content-type", "application/json")
            .body(body.to_owned()),
    )
    .await
}

/// `client` gives back `segment` (an answer of [`segment`]) after issuing `issued`
/// of its IDs; returns `(given_back, wasted)`.
async fn give_back(
    app: &TestApp,
    token: &str,
    client: &str,
    segment: &Value,
    issued: i64,
) -> (u64, u64) {
    let last_issued = (issued > 0).then(|| nth_id(segment, issued));
    let body = json!({"client": client, "segments": [{
        "database": segment["database"],
        "version": segment["version"],
        "last_issued": last_issued,
    }]});
    let r = give_back_raw(app, token, &body.to_string()).await;
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    assert_eq!(v["biz"], BIZ);
    (
        v["given_back"].as_u64().unwrap(),
        v["wasted"].as_u64().unwrap(),
    )
}

/// The `n`-th ID (from 1) of a segment answer.
fn nth_id(segment: &Value, n: i64) -> i64 {
    segment["first_id"].as_i64().unwrap() + (n - 1) * segment["delta"].as_i64().unwrap()
}

fn int(v: &Value, key: &str) -> i64 {
    v[key]
        .as_i64()
        .unwrap_or_else(|| panic!("no integer `{key}` in {v}"))
}

/// `(max_id, version)` of the biz row on database `i`.
fn row(dbs: &Databases, i: usize) -> (i64, i64) {
    let r = dbs.row(i, BIZ);
    let f: Vec<i64> = r.split('|').take(2).map(|v| v.parse().unwrap()).collect();
    (f[0], f[1])
}

/// One database of `kind` with [`BIZ`] at `step` (odd-only when `odd`), `step_max` at
/// 50,000, and a server on it.
async fn one_database(kind: Kind, step: i64, odd: bool) -> (Databases, TestApp, String) {
    let dbs = Databases::start(kind, 1);
    let config = dbs.config("step_max = 50000");
    let token = setup_biz(&config, BIZ, step, odd).await;
    let app = spawn_app(config).await;
    (dbs, app, token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hint_is_bounded_by_the_row_step_and_step_max() {
    let (dbs, app, token) = one_database(Kind::Postgres, 1000, false).await;
    let label = format!("{{biz=\"{BIZ}\"}}");
    for name in [
        "segmint_client_segment_step",
        "segmint_client_ids_given_back_total",
        "segmint_client_ids_wasted_total",
    ] {
        assert_eq!(metric(&app, &format!("{name}{label}")).await, 0.0, "{name}");
    }
    let steps =
        |reason: &str| format!("segmint_client_steps_total{{biz=\"{BIZ}\",reason=\"{reason}\"}}");
    for reason in ["minimum", "target", "maximum"] {
        assert_eq!(metric(&app, &steps(reason)).await, 0.0, "{reason}");
    }

    for (asked, step) in [
        (None, 1000),
        (Some("10000000"), 50_000),
        (Some("9223372036854775807"), 50_000),
        (Some("10"), 1000),
        (Some("20000"), 20_000),
    ] {
        let s = segment(&app, &token, asked, Some(ALICE)).await;
        assert_eq!(int(&s, "step"), step, "{asked:?}: {s}");
        assert_eq!(int(&s, "count"), step, "{asked:?}: {s}");
        assert_eq!(
            (int(&s, "max_id"), int(&s, "version")),
            row(&dbs, 0),
            "the answer's version is the row's: {s}"
        );
    }
    assert_eq!(
        metric(&app, &format!("segmint_client_segment_step{label}")).await,
        20_000.0
    );
    for (reason, n) in [("minimum", 1.0), ("target", 1.0), ("maximum", 2.0)] {
        assert_eq!(metric(&app, &steps(reason)).await, n, "{reason}");
    }
    // Tinyid's route never takes a hint.
    let r = get(
        &app,
        &format!("/tinyid/id/nextSegmentId?bizType={BIZ}&token={token}&step=20000"),
    )
    .await;
    let data = &r.json()["data"];
    assert_eq!(int(data, "maxId") - int(data, "currentId"), 1000, "{data}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_hint_or_client_id_is_refused_and_changes_nothing() {
    let (dbs, app, token) = one_database(Kind::Postgres, 1000, false).await;
    let before = row(&dbs, 0);
    for bad in [
        "0",
        "-5",
        "abc",
        "1e3",
        "99999999999999999999",
        "",
        "+5",
        "1.5",
    ] {
        let r = fetch(&app, &token, Some(bad), Some(ALICE)).await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
        let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains("`step`"), "{bad}: {message}");
    }
    for bad in [
        "short",
        "has spaces in it, sixteen+",
        &"x".repeat(65),
        "slash/0123456789abcdef",
    ] {
        let r = fetch(&app, &token, None, Some(bad)).await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
        assert!(r.body.contains("X-Segmint-Client"), "{bad}: {r:?}");
    }
    assert_eq!(row(&dbs, 0), before, "nothing reserved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_the_top_a_hint_shrinks_to_the_room_and_never_wraps() {
    let (dbs, app, token) = one_database(Kind::Postgres, 1000, false).await;
    let top = i64::MAX - 5000;
    dbs.sql(
        0,
        &format!(
            "UPDATE tiny_id_info SET max_id = {top}, version = version + 1 WHERE biz_type = '{BIZ}'"
        ),
    );
    let s = segment(&app, &token, Some("40000"), Some(ALICE)).await;
    assert_eq!(
        (int(&s, "step"), int(&s, "max_id")),
        (5000, i64::MAX),
        "{s}"
    );
    let before = row(&dbs, 0);
    let r = fetch(&app, &token, Some("40000"), Some(ALICE)).await;
    assert_eq!(r.status, 409, "{r:?}");
    assert_eq!(r.json()["error"]["code"], "id_space_exhausted");
    assert_eq!(row(&dbs, 0), before);
}

async fn a_closed_client_lets_the_next_continue_after_its_last_id(kind: Kind) {
    let (dbs, app, token) = one_database(kind, 1000, false).await;
    let s = segment(&app, &token, Some("5000"), Some(ALICE)).await;
    let (count, version) = (int(&s, "count"), int(&s, "version"));
    assert_eq!((count, int(&s, "first_id")), (5000, 1));
    let k = 37;
    assert_eq!(
        give_back(&app, &token, ALICE, &s, k).await,
        ((count - k) as u64, 0)
    );
    assert_eq!(
        row(&dbs, 0),
        (nth_id(&s, k), version + 1),
        "back to the last issued, version moved on"
    );
    // A replay finds nothing to give back, and changes nothing.
    assert_eq!(give_back(&app, &token, ALICE, &s, k).await, (0, 0));
    assert_eq!(row(&dbs, 0).1, version + 1);
    // The server's own cache continues right after.
    assert_eq!(app.ids(BIZ, &token, 1).await, [nth_id(&s, k + 1)]);
    let label = format!("{{biz=\"{BIZ}\"}}");
    assert_eq!(
        metric(&app, &format!("segmint_client_ids_given_back_total{label}")).await,
        (count - k) as f64
    );
    assert_eq!(
        metric(&app, &format!("segmint_client_ids_wasted_total{label}")).await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_two_databases_the_give_back_moves_the_segments_own_row() {
    let dbs = Databases::start(Kind::Postgres, 2);
    // Hedging off: on a loaded machine a reservation stalled past the hedge delay is
    // also tried on the other database, whose segment, reserved but dropped, would
    // leave a gap where this test expects the next segment to start.
    let config = dbs.config("hedge_after_ms = 0");
    let token = setup_biz(&config, BIZ, 1000, false).await;
    let app = spawn_app(config).await;
    let s = segment(&app, &token, Some("3000"), Some(ALICE)).await;
    let db: usize = s["database"].as_str().unwrap()[2..].parse().unwrap();
    let other = row(&dbs, 1 - db);
    assert_eq!(int(&s, "delta"), 2);
    let k = 10;
    assert_eq!(give_back(&app, &token, ALICE, &s, k).await, (1500 - 10, 0));
    assert_eq!(row(&dbs, db).0, nth_id(&s, k));
    assert_eq!(row(&dbs, 1 - db), other, "the other database is untouched");
    // The next segment of that database starts right after the last issued ID.
    let next = loop {
        let n = segment(&app, &token, None, Some(BOB)).await;
        if n["database"] == s["database"] {
            break n;
        }
    };
    assert_eq!(int(&next, "first_id"), nth_id(&s, k + 1), "{next}");
}

async fn after_a_reservation_in_between_nothing_is_given_back_and_no_id_twice(kind: Kind) {
    let (dbs, app, token) = one_database(kind, 1000, false).await;
    let a = segment(&app, &token, Some("4000"), Some(ALICE)).await;
    let b = segment(&app, &token, None, Some(BOB)).await;
    let after_b = row(&dbs, 0);
    let k = 5;
    assert_eq!(
        give_back(&app, &token, ALICE, &a, k).await,
        (0, (int(&a, "count") - k) as u64)
    );
    assert_eq!(row(&dbs, 0), after_b, "nothing moved");
    let c = segment(&app, &token, None, None).await;
    assert!(int(&c, "first_id") > int(&b, "max_id"), "{c} after {b}");
    // Bob's segment is not the last any more either.
    assert_eq!(give_back(&app, &token, BOB, &b, 0).await, (0, 1000));
    // The cache's IDs come after everything handed out.
    let ids = app.ids(BIZ, &token, 10).await;
    assert!(ids[0] > int(&c, "max_id"), "{ids:?}");
    assert_eq!(
        metric(
            &app,
            &format!("segmint_client_ids_wasted_total{{biz=\"{BIZ}\"}}")
        )
        .await,
        (int(&a, "count") - k + 1000) as f64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_not_the_clients_own_or_misdescribed_are_wasted_and_nothing_moves() {
    let (dbs, app, token) = one_database(Kind::Postgres, 1000, true).await;
    let s = segment(&app, &token, None, Some(ALICE)).await;
    assert_eq!((int(&s, "delta"), int(&s, "count")), (2, 500));
    let before = row(&dbs, 0);
    let answer =
        |segments: Value, client: &str| json!({"client": client, "segments": segments}).to_string();
    let described = |version: Value, last: Value| json!([{"database": "pg0", "version": version, "last_issued": last}]);
    for (body, wasted) in [
        // Another client's segment: not this one's to give.
        (answer(described(s["version"].clone(), Value::Null), BOB), 0),
        // A segment this server never handed out.
        (
            answer(described(json!(int(&s, "version") + 7), Value::Null), ALICE),
            0,
        ),
        (
            answer(
                json!([{"database": "pg9", "version": s["version"], "last_issued": null}]),
                ALICE,
            ),
            0,
        ),
        // Off the odd class: the client's account cannot be trusted, all of it is lost.
        (
            answer(
                described(s["version"].clone(), json!(int(&s, "first_id") + 1)),
                ALICE,
            ),
            500,
        ),
    ] {
        let r = give_back_raw(&app, &token, &body).await;
        assert_eq!(r.status, 200, "{body}: {r:?}");
        assert_eq!(
            (r.json()["given_back"].as_u64(), r.json()["wasted"].as_u64()),
            (Some(0), Some(wasted)),
            "{body}"
        );
        assert_eq!(row(&dbs, 0), before, "{body}");
    }
    // Outside the segment, and a segment fetched without a client id.
    let s = segment(&app, &token, None, Some(ALICE)).await;
    let body = answer(
        described(s["version"].clone(), json!(int(&s, "max_id") + 1)),
        ALICE,
    );
    let r = give_back_raw(&app, &token, &body).await;
    assert_eq!(
        (r.status, r.json()["wasted"].as_u64()),
        (200, Some(500)),
        "{r:?}"
    );
    let anonymous = segment(&app, &token, None, None).await;
    assert_eq!(give_back(&app, &token, ALICE, &anonymous, 0).await, (0, 0));
    assert_eq!(
        row(&dbs, 0),
        (int(&anonymous, "max_id"), int(&anonymous, "version"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_give_back_is_refused_and_changes_nothing() {
    let (dbs, app, token) = one_database(Kind::Embedded, 1000, false).await;
    let s = segment(&app, &token, None, Some(ALICE)).await;
    let before = row(&dbs, 0);
    let v = &s["version"];
    for body in [
        String::new(),
        "{".into(),
        "{}".into(),
        json!({"client": ALICE}).to_string(),
        json!({"segments": []}).to_string(),
        json!({"client": ALICE, "segments": [{"database": "pg0"}]}).to_string(),
        json!({"client": ALICE, "segments": [{"version": v}]}).to_string(),
        json!({"client": ALICE, "segments": [{"database": "pg0", "version": "7"}]}).to_string(),
        json!({"client": ALICE, "segments": [{"database": "pg0", "version": v, "last_issued": 1.5}]}).to_string(),
        json!({"client": "short", "segments": [{"database": "pg0", "version": v}]}).to_string(),
        json!({"client": ALICE, "segments": {"database": "pg0", "version": v}}).to_string(),
    ] {
        let r = give_back_raw(&app, &token, &body).await;
        assert_eq!(r.status, 400, "{body}: {r:?}");
        assert_eq!(r.json()["error"]["code"], "bad_request", "{body}");
    }
    // The header, when sent, must name the body's client.
    let body =
        json!({"client": ALICE, "segments": [{"database": "pg0", "version": v}]}).to_string();
    let r = send(
        request(
            &app,
            Method::POST,
            &format!("/v1/segments/{BIZ}/return"),
            bearer(&token),
        )
        .header("x-segmint-client", BOB)
        .body(body.clone()),
    )
    .await;
    assert_eq!(r.status, 400, "{r:?}");
    // Without a token: 401.
    let r = send(
        request(
            &app,
            Method::POST,
            &format!("/v1/segments/{BIZ}/return"),
            None,
        )
        .body(body),
    )
    .await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(row(&dbs, 0), before);
    // The record survived: the well-formed give-back still works.
    assert_eq!(give_back(&app, &token, ALICE, &s, 0).await, (1000, 0));
}

by_kind!(
    a_closed_client_lets_the_next_continue_after_its_last_id,
    after_a_reservation_in_between_nothing_is_given_back_and_no_id_twice,
);
