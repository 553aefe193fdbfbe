//! Tinyid compatibility against real PostgreSQL: the exact response shapes of the four
//! `/tinyid/id/…` routes (GET, POST with a query string, POST with a form body), the
//! alignment rule, a transcription of Tinyid's Java client consuming
//! `nextSegmentIdSimple`, and the error shapes.

use crate::common;

use std::collections::HashSet;

use common::http::{Params, Resp, VIAS, Via, bearer, compat, send, tinyid_params, v1};
use common::*;
use serde_json::Value;

fn join(values: &[i64]) -> String {
    values
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn keys(v: &Value) -> Vec<String> {
    let mut keys: Vec<String> = v
        .as_object()
        .unwrap_or_else(|| panic!("expected a JSON object, got {v}"))
        .keys()
        .cloned()
        .collect();
    keys.sort();
    keys
}

fn parse_json(r: &Resp) -> Value {
    assert_eq!(r.status, 200, "Tinyid routes answer HTTP 200: {r:?}");
    assert!(
        r.content_type.starts_with("application/json"),
        "JSON content type expected: {r:?}"
    );
    serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("not JSON ({e}): {r:?}"))
}

/// The IDs of a successful `nextId` response, after checking its exact shape.
fn next_id_ids(r: &Resp) -> Vec<i64> {
    let v = parse_json(r);
    assert_eq!(keys(&v), ["code", "data", "message"], "nextId keys: {r:?}");
    assert_eq!(v["code"], 200, "{r:?}");
    assert_eq!(v["message"], "", "{r:?}");
    let ids: Vec<i64> = serde_json::from_value(v["data"].clone())
        .unwrap_or_else(|e| panic!("data must be an array of integers ({e}): {r:?}"));
    assert!(
        r.body.starts_with("{\"data\":[") && r.body.ends_with("],\"code\":200,\"message\":\"\"}"),
        "nextId raw body must read {{\"data\":[…],\"code\":200,\"message\":\"\"}}: {}",
        r.body
    );
    assert_eq!(
        r.body,
        format!(
            "{{\"data\":[{}],\"code\":200,\"message\":\"\"}}",
            join(&ids)
        ),
        "nextId raw body (key order data, code, message; no spaces)"
    );
    ids
}

/// The IDs of a successful `nextIdSimple` response.
fn simple_ids(r: &Resp) -> Vec<i64> {
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.content_type.starts_with("text/plain"),
        "text/plain expected: {r:?}"
    );
    assert_eq!(r.error_header, None, "no error header on success: {r:?}");
    let ids: Vec<i64> = r
        .body
        .split(',')
        .map(|s| {
            s.parse()
                .unwrap_or_else(|e| panic!("`{s}` is not an ID ({e}): {r:?}"))
        })
        .collect();
    assert_eq!(r.body, join(&ids), "simple body is `id,id,…`");
    ids
}

/// Records `ids`, none seen before.
fn fresh(seen: &mut HashSet<i64>, ids: &[i64], what: &str) {
    for &id in ids {
        assert!(id > 0, "{what}: non-positive ID {id}");
        assert!(seen.insert(id), "{what}: duplicate ID {id}");
    }
}

/// Tinyid's `SegmentId` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seg {
    current_id: i64,
    loading_id: i64,
    max_id: i64,
    delta: i64,
    remainder: i64,
}

/// The segment of a successful `nextSegmentId` response, after checking its exact shape.
fn next_segment(r: &Resp) -> Seg {
    let v = parse_json(r);
    assert_eq!(keys(&v), ["code", "data", "message"], "{r:?}");
    assert_eq!(v["code"], 200, "{r:?}");
    assert_eq!(v["message"], "", "{r:?}");
    let d = &v["data"];
    assert_eq!(
        keys(d),
        ["currentId", "delta", "loadingId", "maxId", "remainder"],
        "{r:?}"
    );
    let field = |k: &str| {
        d[k].as_i64()
            .unwrap_or_else(|| panic!("{k} must be an integer: {r:?}"))
    };
    let seg = Seg {
        current_id: field("currentId"),
        loading_id: field("loadingId"),
        max_id: field("maxId"),
        delta: field("delta"),
        remainder: field("remainder"),
    };
    assert_eq!(
        r.body,
        format!(
            "{{\"data\":{{\"currentId\":{},\"loadingId\":{},\"maxId\":{},\"delta\":{},\"remainder\":{}}},\"code\":200,\"message\":\"\"}}",
            seg.current_id, seg.loading_id, seg.max_id, seg.delta, seg.remainder
        ),
        "nextSegmentId raw body (Tinyid's key order)"
    );
    seg
}

/// The segment of a successful `nextSegmentIdSimple` response.
fn next_segment_simple(r: &Resp) -> Seg {
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.content_type.starts_with("text/plain"), "{r:?}");
    assert_eq!(r.error_header, None, "{r:?}");
    let f: Vec<i64> = r
        .body
        .split(',')
        .map(|s| s.parse().unwrap_or_else(|e| panic!("`{s}`: {e}: {r:?}")))
        .collect();
    assert_eq!(
        f.len(),
        5,
        "currentId,loadingId,maxId,delta,remainder: {r:?}"
    );
    assert_eq!(r.body, join(&f), "{r:?}");
    Seg {
        current_id: f[0],
        loading_id: f[1],
        max_id: f[2],
        delta: f[3],
        remainder: f[4],
    }
}

/// One `tiny_id_info` row as the harness's `row()` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Row {
    max_id: i64,
    version: i64,
    step: i64,
    delta: i64,
    remainder: i64,
}

fn row(c: &PgCluster, biz: &str) -> Row {
    parse_row(&c.row(biz), biz)
}

/// A row as `max_id|version|step|delta|remainder`.
fn parse_row(text: &str, biz: &str) -> Row {
    let f: Vec<i64> = text
        .split('|')
        .map(|s| s.parse().unwrap_or_else(|e| panic!("row `{text}`: {e}")))
        .collect();
    assert_eq!(f.len(), 5, "row of `{biz}`: `{text}`");
    Row {
        max_id: f[0],
        version: f[1],
        step: f[2],
        delta: f[3],
        remainder: f[4],
    }
}

fn rows(clusters: &[&PgCluster], biz: &str) -> Vec<Row> {
    clusters.iter().map(|c| row(c, biz)).collect()
}

/// The index of the database whose row of `biz` has the class of `seg`.
fn owner(rows: &[Row], seg: &Seg) -> usize {
    let owners: Vec<usize> = (0..rows.len())
        .filter(|&i| rows[i].delta == seg.delta && rows[i].remainder == seg.remainder)
        .collect();
    assert_eq!(
        owners.len(),
        1,
        "exactly one database must own class {} mod {}: {rows:?}",
        seg.remainder,
        seg.delta
    );
    owners[0]
}

/// Every ID the segment `(max_id - step, max_id]` yields under Tinyid's rule.
fn expected_ids(max_id: i64, step: i64, delta: i64, remainder: i64) -> Vec<i64> {
    ((max_id - step + 1)..=max_id)
        .filter(|x| x % delta == remainder)
        .collect()
}

/// Tinyid's Java client `SegmentId`, transcribed line by line.
struct JavaSegmentId {
    current_id: i64,
    loading_id: i64,
    max_id: i64,
    delta: i64,
    remainder: i64,
    is_init: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum JavaResult {
    Normal(i64),
    Loading(i64),
    Over,
}

impl JavaSegmentId {
    fn new(seg: Seg) -> Self {
        JavaSegmentId {
            current_id: seg.current_id,
            loading_id: seg.loading_id,
            max_id: seg.max_id,
            delta: seg.delta,
            remainder: seg.remainder,
            is_init: false,
        }
    }

    fn init(&mut self) {
        if self.is_init {
            return;
        }
        let id = self.current_id;
        if id % self.delta == self.remainder {
            self.is_init = true;
            return;
        }
        for _ in 0..=self.delta {
            self.current_id += 1;
            let id = self.current_id;
            if id % self.delta == self.remainder {
                self.current_id -= self.delta;
                self.is_init = true;
                return;
            }
        }
    }

    fn next_id(&mut self) -> JavaResult {
        self.init();
        self.current_id += self.delta;
        let id = self.current_id;
        if id > self.max_id {
            JavaResult::Over
        } else if id >= self.loading_id {
            JavaResult::Loading(id)
        } else {
            JavaResult::Normal(id)
        }
    }

    /// Every ID the client issues from this segment before it reports OVER.
    fn drain(mut self) -> Vec<i64> {
        let mut ids = Vec::new();
        loop {
            match self.next_id() {
                JavaResult::Normal(id) => {
                    assert!(id < self.loading_id, "NORMAL id {id} past loadingId");
                    ids.push(id);
                }
                JavaResult::Loading(id) => {
                    assert!(id >= self.loading_id, "LOADING id {id} before loadingId");
                    ids.push(id);
                }
                JavaResult::Over => return ids,
            }
            assert!(ids.len() <= 1_000_000, "runaway client");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_shapes_of_every_route() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let clusters = [&a, &b];
    let config = config(&clusters, "");
    let tok = setup_biz(&config, "shape", 100, false).await;
    let seg_tok = setup_biz(&config, "shape-seg", 100, false).await;
    let big_tok = setup_biz(&config, "shape-big", 200_000, false).await;
    let app = spawn_app(config).await;
    let mut seen = HashSet::new();

    // nextId and nextIdSimple: batchSize missing means 1; the IDs come back in order.
    for via in VIAS {
        for (route, simple) in [("nextId", false), ("nextIdSimple", true)] {
            let parse = if simple { simple_ids } else { next_id_ids };
            let r = compat(&app, route, via, &tinyid_params("shape", &tok, None)).await;
            let ids = parse(&r);
            assert_eq!(ids.len(), 1, "{route} {via:?} without batchSize: {r:?}");
            fresh(&mut seen, &ids, route);
            let r = compat(&app, route, via, &tinyid_params("shape", &tok, Some("7"))).await;
            let ids = parse(&r);
            assert_eq!(ids.len(), 7, "{route} {via:?} batchSize=7: {r:?}");
            fresh(&mut seen, &ids, route);
        }
    }
    // POST with bizType in the query string and the rest in the form body.
    let r = app
        .http
        .post(format!("{}/tinyid/id/nextId?bizType=shape", app.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={tok}&batchSize=3"));
    let ids = next_id_ids(&send(r).await);
    assert_eq!(ids.len(), 3, "query + form parameters are merged");
    fresh(&mut seen, &ids, "nextId query+form");
    let max: i64 = rows(&clusters, "shape")
        .iter()
        .map(|r| r.max_id)
        .max()
        .unwrap();
    assert!(
        seen.iter().all(|&id| id <= max),
        "every ID lies in a reserved segment (<= {max})"
    );

    // batchSize / count 100000 is accepted, not capped.
    let r = compat(
        &app,
        "nextIdSimple",
        Via::Get,
        &tinyid_params("shape-big", &big_tok, Some("100000")),
    )
    .await;
    let ids = simple_ids(&r);
    assert_eq!(ids.len(), 100_000, "batchSize=100000 must give 100000 IDs");
    let mut big = HashSet::new();
    fresh(&mut big, &ids, "batchSize=100000");
    let Resp { status, body, .. } = v1(
        &app,
        false,
        "/v1/ids/shape-big?count=100000",
        bearer(&big_tok),
    )
    .await;
    assert_eq!(status, 200, "count=100000: {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let ids: Vec<i64> = serde_json::from_value(v["ids"].clone()).unwrap();
    assert_eq!(ids.len(), 100_000, "count=100000 must give 100000 IDs");
    fresh(&mut big, &ids, "count=100000");

    // nextSegmentId / nextSegmentIdSimple: each call reserves one fresh segment.
    let mut last_max: [Option<i64>; 2] = [None, None];
    let mut calls = 0;
    for via in VIAS {
        for route in ["nextSegmentId", "nextSegmentIdSimple"] {
            let before = rows(&clusters, "shape-seg");
            let r = compat(
                &app,
                route,
                via,
                &tinyid_params("shape-seg", &seg_tok, None),
            )
            .await;
            let seg = if route == "nextSegmentId" {
                next_segment(&r)
            } else {
                next_segment_simple(&r)
            };
            calls += 1;
            let after = rows(&clusters, "shape-seg");
            let db = owner(&after, &seg);
            assert_eq!(
                (seg.delta, seg.remainder),
                (2, db as i64),
                "pg{db} issues {db} mod 2: {seg:?}"
            );
            assert_eq!(
                seg.max_id, after[db].max_id,
                "maxId is the row's new max_id: {seg:?}"
            );
            assert_eq!(
                after[db].max_id,
                before[db].max_id + 100,
                "the row advanced by one step"
            );
            assert_eq!(
                after[db].version,
                before[db].version + 1,
                "{route} {via:?} reserves exactly one fresh segment"
            );
            assert_eq!(
                after[1 - db],
                before[1 - db],
                "the other database is untouched"
            );
            assert_eq!(
                seg.current_id,
                seg.max_id - 100,
                "currentId = maxId - step, unaligned"
            );
            assert_eq!(
                seg.loading_id,
                seg.current_id + 20,
                "loadingId = currentId + step * 20 / 100"
            );
            if let Some(prev) = last_max[db] {
                assert_eq!(
                    seg.current_id, prev,
                    "consecutive segments of one row are adjacent"
                );
            }
            last_max[db] = Some(seg.max_id);
        }
    }
    let total: i64 = rows(&clusters, "shape-seg").iter().map(|r| r.version).sum();
    assert_eq!(total, calls, "one row version per segment call");

    // The v1 API's shapes.
    for post in [false, true] {
        let Resp { status, body, .. } = v1(&app, post, "/v1/ids/shape?count=3", bearer(&tok)).await;
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(keys(&v), ["biz", "ids"], "{body}");
        assert_eq!(v["biz"], "shape", "{body}");
        let ids: Vec<i64> = serde_json::from_value(v["ids"].clone()).unwrap();
        assert_eq!(ids.len(), 3, "{body}");
        fresh(&mut seen, &ids, "v1 ids");

        let before = rows(&clusters, "shape-seg");
        let Resp { status, body, .. } =
            v1(&app, post, "/v1/segments/shape-seg", bearer(&seg_tok)).await;
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            keys(&v),
            [
                "biz",
                "count",
                "current_id",
                "database",
                "delta",
                "first_id",
                "loading_id",
                "max_id",
                "remainder",
                "step",
                "version"
            ],
            "{body}"
        );
        let int = |k: &str| v[k].as_i64().unwrap_or_else(|| panic!("{k}: {body}"));
        let db = int("remainder") as usize;
        assert_eq!(v["biz"], "shape-seg", "{body}");
        assert_eq!(v["database"], format!("pg{db}"), "{body}");
        let after = rows(&clusters, "shape-seg");
        assert_eq!(int("max_id"), after[db].max_id, "{body}");
        assert_eq!(after[db].version, before[db].version + 1, "{body}");
        assert_eq!(int("version"), after[db].version, "{body}");
        assert_eq!(int("step"), 100, "{body}");
        assert_eq!(int("delta"), 2, "{body}");
        assert_eq!(int("current_id"), int("max_id") - 100, "{body}");
        assert_eq!(int("loading_id"), int("current_id") + 20, "{body}");
        let expect = expected_ids(int("max_id"), 100, 2, db as i64);
        assert_eq!(int("first_id"), expect[0], "{body}");
        assert_eq!(int("count"), expect.len() as i64, "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_align_like_tinyid_on_one_database() {
    let a = PgCluster::start();
    let cfg = config(&[&a], "");
    let token = setup_biz(&cfg, "tiny", 1000, false).await;
    a.psql(
        "UPDATE tiny_id_info SET max_id = 1000, step = 1000, delta = 3, remainder = 0 WHERE biz_type = 'tiny'",
    );
    let app = spawn_app(cfg).await;
    let params = tinyid_params("tiny", &token, None);

    let r = compat(&app, "nextSegmentId", Via::Get, &params).await;
    assert_eq!(
        r.body,
        r#"{"data":{"currentId":1000,"loadingId":1200,"maxId":2000,"delta":3,"remainder":0},"code":200,"message":""}"#,
        "segment (1000, 2000] of 0 mod 3, unaligned currentId"
    );
    let seg = next_segment(&r);
    assert_eq!(
        row(&a, "tiny"),
        Row {
            max_id: 2000,
            version: 1,
            step: 1000,
            delta: 3,
            remainder: 0
        },
        "one reservation"
    );
    let ids = JavaSegmentId::new(seg).drain();
    assert_eq!(
        ids.first(),
        Some(&1002),
        "first ID: smallest x > 1000, x % 3 == 0"
    );
    assert_eq!(
        ids.last(),
        Some(&1998),
        "last ID: largest x <= 2000, x % 3 == 0"
    );
    assert_eq!(ids.len(), 333, "every third ID of (1000, 2000]");
    assert_eq!(ids, expected_ids(2000, 1000, 3, 0));

    // The server's own IDs come from a later segment, never the one handed out.
    let r = compat(&app, "nextId", Via::Get, &params).await;
    assert_eq!(next_id_ids(&r), [2001], "server reserves (2000, 3000]");
    assert_eq!(row(&a, "tiny").max_id, 3000);
    assert_eq!(row(&a, "tiny").version, 2);

    let r = compat(&app, "nextSegmentIdSimple", Via::PostForm, &params).await;
    assert_eq!(r.body, "3000,3200,4000,3,0", "a fresh segment (3000, 4000]");
    assert_eq!(row(&a, "tiny").version, 3);

    let r = compat(
        &app,
        "nextIdSimple",
        Via::PostQuery,
        &tinyid_params("tiny", &token, Some("2")),
    )
    .await;
    assert_eq!(
        simple_ids(&r),
        [2004, 2007],
        "the server keeps issuing from its own segment (2000, 3000]"
    );

    let Resp { status, body, .. } = v1(&app, false, "/v1/segments/tiny", bearer(&token)).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "biz": "tiny", "database": "pg0", "current_id": 4000, "max_id": 5000,
            "step": 1000, "delta": 3, "remainder": 0, "first_id": 4002, "count": 333,
            "loading_id": 4200, "version": 4
        }),
        "v1 segment (4000, 5000]"
    );
    let Resp { status, body, .. } = v1(&app, false, "/v1/ids/tiny?count=1", bearer(&token)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["ids"],
        serde_json::json!([2010]),
        "{body}"
    );
    assert_eq!(
        row(&a, "tiny"),
        Row {
            max_id: 5000,
            version: 4,
            step: 1000,
            delta: 3,
            remainder: 0
        },
        "four reservations in all"
    );

    // loadingId follows the configured preload share.
    let app = spawn_app(config(&[&a], "preload_percent = 50")).await;
    let r = compat(&app, "nextSegmentIdSimple", Via::Get, &params).await;
    assert_eq!(
        r.body, "5000,5500,6000,3,0",
        "loadingId = 5000 + 1000 * 50 / 100"
    );
}

/// Consumes `segments` segments of `biz` with the Java client while the server issues
/// IDs of the same biz from two databases of `kind`, and checks every segment yields
/// exactly its IDs.
async fn java_client_consumes(kind: Kind, odd: bool, step: i64, segments: usize) {
    let dbs = Databases::start(kind, 2);
    let rows =
        |biz: &str| -> Vec<Row> { (0..2).map(|i| parse_row(&dbs.row(i, biz), biz)).collect() };
    let config = dbs.config("");
    let biz = if odd { "java-odd" } else { "java" };
    let token = setup_biz(&config, biz, step, odd).await;
    let app = spawn_app(config).await;
    let classes: Vec<(i64, i64)> = rows(biz).iter().map(|r| (r.delta, r.remainder)).collect();
    let expected_classes = if odd {
        vec![(4, 1), (4, 3)]
    } else {
        vec![(2, 0), (2, 1)]
    };
    assert_eq!(classes, expected_classes, "rows of `{biz}`");

    let mut all = HashSet::new();
    let mut client_ids = 0;
    let mut server_ids = 0;
    for round in 0..segments {
        let via = [Via::Get, Via::PostForm][round % 2];
        let r = compat(
            &app,
            "nextSegmentIdSimple",
            via,
            &tinyid_params(biz, &token, None),
        )
        .await;
        let seg = next_segment_simple(&r);
        assert!(
            classes.contains(&(seg.delta, seg.remainder)),
            "segment class must be a row's class: {seg:?}"
        );
        assert_eq!(seg.current_id, seg.max_id - step, "{seg:?}");
        assert_eq!(seg.loading_id, seg.current_id + step * 20 / 100, "{seg:?}");

        // The server issues IDs of the same biz between fetch and use.
        let r = compat(
            &app,
            "nextId",
            Via::Get,
            &tinyid_params(biz, &token, Some("37")),
        )
        .await;
        let served = next_id_ids(&r);
        assert_eq!(served.len(), 37);

        let got = JavaSegmentId::new(seg).drain();
        let want = expected_ids(seg.max_id, step, seg.delta, seg.remainder);
        assert!(!want.is_empty(), "segment holds IDs: {seg:?}");
        assert_eq!(
            got, want,
            "the Java client must issue exactly the IDs of (maxId - step, maxId] in class {} mod {}",
            seg.remainder, seg.delta
        );
        client_ids += got.len();
        for id in got {
            assert!(all.insert(id), "client ID {id} issued twice");
        }
        for id in served {
            assert!(
                classes.iter().any(|&(d, r)| id % d == r),
                "server ID {id} outside every row class"
            );
            assert!(all.insert(id), "server ID {id} also issued elsewhere");
            server_ids += 1;
        }
    }
    if odd {
        assert!(
            all.iter().all(|id| id % 2 == 1),
            "odd-only biz issued an even ID"
        );
    }
    assert_eq!(all.len(), client_ids + server_ids);
    let max: i64 = rows(biz).iter().map(|r| r.max_id).max().unwrap();
    assert!(
        all.iter().all(|&id| id > 0 && id <= max),
        "IDs within reserved ranges"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_client_gets_every_id_of_a_plain_biz_on_two_databases() {
    java_client_consumes(Kind::Postgres, false, 101, 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_client_gets_every_id_of_an_odd_only_biz() {
    java_client_consumes(Kind::Postgres, true, 103, 8).await;
}

/// The same protocol served from two MySQL/MariaDB databases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_client_gets_every_id_on_mysql_plain_and_odd_only() {
    java_client_consumes(Kind::MySql, false, 101, 6).await;
    java_client_consumes(Kind::MySql, true, 103, 6).await;
}

/// A compat request refused with code 6.
struct OtherCase<'a> {
    /// What is wrong with it.
    what: &'static str,
    /// Its parameters.
    params: Params<'a>,
    /// What the message must contain.
    needle: &'static str,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_shapes() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let clusters = [&a, &b];
    let config = config(&clusters, "");
    let alpha = setup_biz(&config, "alpha", 100, false).await;
    let beta = setup_biz(&config, "beta", 100, false).await;
    let app = spawn_app(config).await;
    let before = (rows(&clusters, "alpha"), rows(&clusters, "beta"));

    let token_cases: [(&str, Params); 4] = [
        ("missing token", vec![("bizType", "alpha")]),
        ("empty token", tinyid_params("alpha", "", None)),
        ("unknown token", tinyid_params("alpha", "not-a-token", None)),
        ("token of another biz", tinyid_params("alpha", &beta, None)),
    ];
    for (what, params) in &token_cases {
        for via in VIAS {
            for route in ["nextId", "nextSegmentId"] {
                let r = compat(&app, route, via, params).await;
                assert_eq!(r.status, 200, "{route} {via:?} {what}: {r:?}");
                assert!(r.content_type.starts_with("application/json"), "{r:?}");
                assert_eq!(
                    r.body, r#"{"code":5,"message":"token is error"}"#,
                    "{route} {via:?} {what}"
                );
            }
            for route in ["nextIdSimple", "nextSegmentIdSimple"] {
                let r = compat(&app, route, via, params).await;
                assert_eq!(r.status, 200, "{route} {via:?} {what}: {r:?}");
                assert_eq!(r.body, "", "{route} {via:?} {what}: empty body");
                assert_eq!(
                    r.error_header.as_deref(),
                    Some("5: token is error"),
                    "{route} {via:?} {what}"
                );
            }
        }
    }

    // Everything else is code 6 with our message and no `data`.
    let other_cases = [
        OtherCase {
            what: "unknown biz",
            params: tinyid_params("nosuch", &alpha, None),
            needle: "nosuch",
        },
        OtherCase {
            what: "missing bizType",
            params: vec![("token", alpha.as_str())],
            needle: "bizType",
        },
        OtherCase {
            what: "bad biz name",
            params: tinyid_params("a b", &alpha, None),
            needle: "biz type",
        },
    ];
    for OtherCase {
        what,
        params,
        needle,
    } in &other_cases
    {
        for via in VIAS {
            for route in ["nextId", "nextSegmentId"] {
                let r = compat(&app, route, via, params).await;
                let v = parse_json(&r);
                assert_eq!(
                    keys(&v),
                    ["code", "message"],
                    "{route} {via:?} {what}: {r:?}"
                );
                assert_eq!(v["code"], 6, "{route} {via:?} {what}: {r:?}");
                let msg = v["message"].as_str().unwrap();
                assert!(msg.contains(needle), "{route} {via:?} {what}: {msg}");
                assert!(
                    r.body.starts_with(r#"{"code":6,"message":"#),
                    "key order code, message: {}",
                    r.body
                );
            }
            for route in ["nextIdSimple", "nextSegmentIdSimple"] {
                let r = compat(&app, route, via, params).await;
                assert_eq!(r.status, 200, "{route} {via:?} {what}: {r:?}");
                assert_eq!(r.body, "", "{route} {via:?} {what}: empty body");
                let h = r.error_header.clone().unwrap_or_default();
                assert!(
                    h.starts_with("6: ") && h.contains(needle),
                    "{route} {via:?} {what}: X-Segmint-Error `{h}`"
                );
            }
        }
    }
    // batchSize errors on the ID routes.
    for bad in ["0", "-1", "100001", "abc", ""] {
        let r = compat(
            &app,
            "nextId",
            Via::Get,
            &tinyid_params("alpha", &alpha, Some(bad)),
        )
        .await;
        let v = parse_json(&r);
        assert_eq!(keys(&v), ["code", "message"], "batchSize={bad}: {r:?}");
        assert_eq!(v["code"], 6, "batchSize={bad}: {r:?}");
        assert!(
            v["message"].as_str().unwrap().contains("batchSize"),
            "batchSize={bad}: {r:?}"
        );
        let r = compat(
            &app,
            "nextIdSimple",
            Via::PostForm,
            &tinyid_params("alpha", &alpha, Some(bad)),
        )
        .await;
        assert_eq!(r.body, "", "batchSize={bad}: {r:?}");
        assert!(
            r.error_header
                .as_deref()
                .is_some_and(|h| h.starts_with("6: ") && h.contains("batchSize")),
            "batchSize={bad}: {r:?}"
        );
    }
    assert_eq!(
        (rows(&clusters, "alpha"), rows(&clusters, "beta")),
        before,
        "refused requests reserve nothing"
    );
    // And the valid token still works.
    let r = compat(
        &app,
        "nextId",
        Via::Get,
        &tinyid_params("alpha", &alpha, None),
    )
    .await;
    assert_eq!(next_id_ids(&r).len(), 1);
}
