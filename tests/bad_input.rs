//! Bad input gets a clear error and changes nothing (design invariant 7), against real
//! PostgreSQL: every refused request, on the Tinyid-compatible routes and the v1 API, is
//! followed by a check that no row of any database moved — on a biz that has already
//! served IDs and on one never used. Also: overflow near `i64::MAX`, bizs whose rows
//! overlap across databases, and bad configuration files given to the binary.

use crate::common;

use std::time::Duration;

use common::cli::{config_file, segmint_cli};
use common::http::{COMPAT_ROUTES, Params, Resp, Via, bearer, compat, request, tinyid_params, v1};
use common::*;
use reqwest::Method;
use reqwest::header::HeaderValue;
use serde_json::Value;

/// The two ways of sending compat parameters that reach the same extractor: a
/// query string and a form body.
const GET_AND_FORM: [Via; 2] = [Via::Get, Via::PostForm];

/// The expected refusal of a compat request.
#[derive(Debug, Clone, Copy)]
enum Refusal<'a> {
    /// Code 5, "token is error".
    Token,
    /// Code 6 with a message containing this.
    Other(&'a str),
}

fn assert_compat_refusal(r: &Resp, route: &str, expect: Refusal, what: &str) {
    assert_eq!(r.status, 200, "{what}: Tinyid errors are HTTP 200: {r:?}");
    if route.ends_with("Simple") {
        assert_eq!(
            r.body, "",
            "{what}: simple routes answer errors with an empty body"
        );
        let h = r
            .error_header
            .as_deref()
            .unwrap_or_else(|| panic!("{what}: X-Segmint-Error missing: {r:?}"));
        match expect {
            Refusal::Token => assert_eq!(h, "5: token is error", "{what}"),
            Refusal::Other(needle) => assert!(
                h.starts_with("6: ") && h.contains(needle),
                "{what}: X-Segmint-Error `{h}` should be code 6 mentioning `{needle}`"
            ),
        }
        return;
    }
    assert!(
        r.content_type.starts_with("application/json"),
        "{what}: {r:?}"
    );
    match expect {
        Refusal::Token => assert_eq!(r.body, r#"{"code":5,"message":"token is error"}"#, "{what}"),
        Refusal::Other(needle) => {
            let v = r.json();
            let mut keys: Vec<&String> = v.as_object().expect("object").keys().collect();
            keys.sort();
            assert_eq!(
                keys,
                ["code", "message"],
                "{what}: no `data` on errors: {r:?}"
            );
            assert_eq!(v["code"], 6, "{what}: {r:?}");
            let msg = v["message"].as_str().unwrap();
            assert!(
                msg.contains(needle),
                "{what}: `{msg}` should mention `{needle}`"
            );
        }
    }
}

/// Asserts a v1 error body `{"error":{"code","message"}}` with `status` and `code`;
/// returns the message.
fn assert_v1_error(r: &Resp, status: u16, code: &str, what: &str) -> String {
    assert_eq!(r.status, status, "{what}: {r:?}");
    assert!(
        r.content_type.starts_with("application/json"),
        "{what}: {r:?}"
    );
    let v = r.json();
    assert_eq!(
        v.as_object().map(|o| o.len()),
        Some(1),
        "{what}: only `error`: {r:?}"
    );
    assert_eq!(v["error"]["code"], code, "{what}: {r:?}");
    let msg = v["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: error.message missing: {r:?}"))
        .to_string();
    assert!(!msg.is_empty(), "{what}: empty message");
    if status == 401 {
        assert_eq!(
            r.www_authenticate.as_deref(),
            Some("Bearer"),
            "{what}: 401 carries WWW-Authenticate: Bearer"
        );
    }
    msg
}

/// Direct connections to every cluster, to read the rows after each request cheaply.
struct Rows {
    clients: Vec<tokio_postgres::Client>,
    bizs: Vec<&'static str>,
}

impl Rows {
    async fn connect(clusters: &[&PgCluster], bizs: &[&'static str]) -> Rows {
        let mut clients = Vec::new();
        for c in clusters {
            let (client, conn) = tokio_postgres::connect(&c.url(), tokio_postgres::NoTls)
                .await
                .expect("connect to the test cluster");
            tokio::spawn(conn);
            clients.push(client);
        }
        Rows {
            clients,
            bizs: bizs.to_vec(),
        }
    }

    /// `row(biz)` of every tracked biz on every database (the same columns as
    /// `PgCluster::row`), plus the row counts of both tables.
    async fn state(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, client) in self.clients.iter().enumerate() {
            for biz in &self.bizs {
                let row = client
                    .query_one(
                        "SELECT max_id, version, step, delta, remainder FROM tiny_id_info WHERE biz_type = $1",
                        &[biz],
                    )
                    .await
                    .unwrap_or_else(|e| panic!("row of `{biz}` on pg{i}: {e}"));
                let f: Vec<i64> = (0..5).map(|k| row.get(k)).collect();
                out.push(format!(
                    "pg{i} {biz}: {}",
                    f.iter().map(i64::to_string).collect::<Vec<_>>().join("|")
                ));
            }
            let counts = client
                .query_one(
                    "SELECT (SELECT count(*) FROM tiny_id_info), (SELECT count(*) FROM tiny_id_token)",
                    &[],
                )
                .await
                .unwrap();
            out.push(format!(
                "pg{i}: {} bizs, {} tokens",
                counts.get::<_, i64>(0),
                counts.get::<_, i64>(1)
            ));
        }
        out
    }

    async fn assert_unchanged(&self, before: &[String], what: &str) {
        assert_eq!(
            self.state().await,
            before,
            "{what} must change nothing in the databases"
        );
    }
}

/// `row(biz)` of every cluster, through psql.
fn psql_rows(clusters: &[&PgCluster], bizs: &[&str]) -> Vec<String> {
    clusters
        .iter()
        .flat_map(|c| bizs.iter().map(|b| c.row(b)))
        .collect()
}

/// Two clusters with bizs `used` (which has served IDs), `fresh` (never used) and
/// `other`, and a running server. Returns the tokens of the three.
struct Setup {
    a: PgCluster,
    b: PgCluster,
    app: TestApp,
    used: String,
    fresh: String,
    other: String,
}

async fn setup() -> Setup {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let config = config(&[&a, &b], "");
    let used = setup_biz(&config, "used", 1000, false).await;
    let fresh = setup_biz(&config, "fresh", 1000, false).await;
    let other = setup_biz(&config, "other", 1000, false).await;
    let app = spawn_app(config).await;
    // A few IDs, far below the 20 % of a 500-ID segment that starts a prefetch.
    assert_eq!(app.ids("used", &used, 5).await.len(), 5);
    let r = compat(
        &app,
        "nextIdSimple",
        Via::Get,
        &tinyid_params("used", &used, Some("3")),
    )
    .await;
    assert_eq!(r.body.split(',').count(), 3, "{r:?}");
    let versions = |biz: &str| a.version(biz) + b.version(biz);
    assert!(versions("used") >= 1, "`used` has reserved segments");
    assert_eq!(versions("fresh"), 0, "`fresh` was never used");
    Setup {
        a,
        b,
        app,
        used,
        fresh,
        other,
    }
}

/// Waits until no background fetch moves the rows, and returns the settled state.
async fn settled(rows: &Rows) -> Vec<String> {
    let mut last = rows.state().await;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = rows.state().await;
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("rows keep changing with no request: {last:?}");
}

/// A token no biz has.
const UNKNOWN_TOKEN: &str = "0123456789abcdef";

/// Counts (`batchSize`, `count`) that are not an integer in 1..=100000.
const BAD_COUNTS: [&str; 6] = ["0", "-1", "100001", "abc", "", "1.5"];

/// A compat request that must be refused, on every route it applies to.
struct CompatCase<'a> {
    /// What is wrong with it.
    what: String,
    /// Its parameters.
    params: Params<'a>,
    /// How it must be refused.
    refusal: Refusal<'a>,
    /// It concerns `batchSize`, which only the ID routes take.
    ids_only: bool,
}

impl<'a> CompatCase<'a> {
    /// A request with `params`, refused on every route.
    fn new(what: String, params: Params<'a>, refusal: Refusal<'a>) -> CompatCase<'a> {
        CompatCase {
            what,
            params,
            refusal,
            ids_only: false,
        }
    }
}

/// A v1 request that must be refused, with the error it must get.
struct V1Case {
    /// What is wrong with it.
    what: String,
    /// Its path and query.
    path: String,
    /// Its raw `Authorization` header, if any.
    auth: Option<HeaderValue>,
    /// The HTTP status.
    status: u16,
    /// `error.code`.
    code: &'static str,
    /// What `error.message` must contain.
    mentions: String,
}

impl V1Case {
    /// A request to `path` refused as 401 `unauthorized` for its `auth`.
    fn unauthorized(what: String, path: &str, auth: Option<HeaderValue>) -> V1Case {
        V1Case {
            what,
            path: path.to_owned(),
            auth,
            status: 401,
            code: "unauthorized",
            mentions: String::new(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compat_bad_requests_change_nothing() {
    let s = setup().await;
    let clusters = [&s.a, &s.b];
    let bizs = ["used", "fresh", "other"];
    let rows = Rows::connect(&clusters, &bizs).await;
    let before = settled(&rows).await;
    let psql_before = psql_rows(&clusters, &bizs);
    let long = "a".repeat(64);

    let mut cases: Vec<CompatCase> = Vec::new();
    for (biz, token) in [("used", s.used.as_str()), ("fresh", s.fresh.as_str())] {
        cases.extend([
            CompatCase::new(
                format!("unknown biz with the token of `{biz}`"),
                tinyid_params("nosuch", token, None),
                Refusal::Other("nosuch"),
            ),
            CompatCase::new(
                "unknown biz with an unknown token".into(),
                tinyid_params("nosuch", UNKNOWN_TOKEN, None),
                Refusal::Token,
            ),
            CompatCase::new(
                format!("`{biz}` with an unknown token"),
                tinyid_params(biz, UNKNOWN_TOKEN, None),
                Refusal::Token,
            ),
            CompatCase::new(
                format!("`{biz}` without a token"),
                vec![("bizType", biz)],
                Refusal::Token,
            ),
            CompatCase::new(
                format!("`{biz}` with an empty token"),
                tinyid_params(biz, "", None),
                Refusal::Token,
            ),
            CompatCase::new(
                format!("`{biz}` with the token of `other`"),
                tinyid_params(biz, &s.other, None),
                Refusal::Token,
            ),
        ]);
        for bad in BAD_COUNTS {
            cases.push(CompatCase {
                ids_only: true,
                ..CompatCase::new(
                    format!("`{biz}` with batchSize `{bad}`"),
                    tinyid_params(biz, token, Some(bad)),
                    Refusal::Other("batchSize"),
                )
            });
        }
    }
    for name in ["a b", "x;drop", "é", long.as_str(), "", "used'--"] {
        cases.push(CompatCase::new(
            format!("illegal biz name `{name}`"),
            tinyid_params(name, &s.used, None),
            Refusal::Other("biz type"),
        ));
    }
    cases.push(CompatCase::new(
        "missing bizType".into(),
        vec![("token", s.used.as_str())],
        Refusal::Other("bizType"),
    ));

    let mut checked = 0;
    for case in &cases {
        for route in COMPAT_ROUTES {
            if case.ids_only && route.contains("Segment") {
                continue; // the segment routes take no batchSize
            }
            for via in GET_AND_FORM {
                let label = format!("{route} {via:?} {}", case.what);
                let r = compat(&s.app, route, via, &case.params).await;
                assert_compat_refusal(&r, route, case.refusal, &label);
                rows.assert_unchanged(&before, &label).await;
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "ran {checked} refused requests");
    assert_eq!(
        psql_rows(&clusters, &bizs),
        psql_before,
        "row() of every cluster"
    );

    // The same server still serves both bizs afterwards.
    for (biz, token) in [("used", &s.used), ("fresh", &s.fresh)] {
        let r = compat(
            &s.app,
            "nextIdSimple",
            Via::Get,
            &tinyid_params(biz, token, Some("2")),
        )
        .await;
        assert_eq!(
            r.body.split(',').count(),
            2,
            "{biz} after the refusals: {r:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_bad_requests_change_nothing() {
    let s = setup().await;
    let clusters = [&s.a, &s.b];
    let bizs = ["used", "fresh", "other"];
    let rows = Rows::connect(&clusters, &bizs).await;
    let before = settled(&rows).await;
    let psql_before = psql_rows(&clusters, &bizs);

    let mut cases: Vec<V1Case> = Vec::new();
    for route in ["ids", "segments"] {
        for (biz, token) in [("used", s.used.as_str()), ("fresh", s.fresh.as_str())] {
            let path = format!("/v1/{route}/{biz}");
            let unknown = format!("/v1/{route}/nosuch");
            cases.extend([
                V1Case {
                    what: format!("unknown biz with the token of `{biz}`"),
                    path: unknown.clone(),
                    auth: bearer(token),
                    status: 404,
                    code: "not_found",
                    mentions: "nosuch".into(),
                },
                V1Case::unauthorized(
                    "unknown biz with an unknown token".into(),
                    &unknown,
                    bearer(UNKNOWN_TOKEN),
                ),
                V1Case::unauthorized("unknown biz without a token".into(), &unknown, None),
                V1Case::unauthorized(
                    format!("`{biz}` with an unknown token"),
                    &path,
                    bearer(UNKNOWN_TOKEN),
                ),
                V1Case::unauthorized(format!("`{biz}` without a token"), &path, None),
                V1Case {
                    what: format!("`{biz}` with the token of `other`"),
                    path: path.clone(),
                    auth: bearer(&s.other),
                    status: 403,
                    code: "forbidden",
                    mentions: biz.into(),
                },
            ]);
            let malformed = [
                format!("Basic {token}"),
                format!("Token {token}"),
                token.to_string(),
                "Bearer".to_string(),
                format!("Bearer {token} extra"),
            ];
            for auth in malformed {
                cases.push(V1Case::unauthorized(
                    format!("`{biz}` with Authorization `{auth}`"),
                    &path,
                    Some(HeaderValue::from_str(&auth).unwrap()),
                ));
            }
            cases.push(V1Case::unauthorized(
                format!("`{biz}` with a non-UTF-8 Authorization"),
                &path,
                Some(HeaderValue::from_bytes(b"Bearer \xff\xfe").unwrap()),
            ));
            if route == "ids" {
                for bad in BAD_COUNTS {
                    cases.push(V1Case {
                        what: format!("`{biz}` with count `{bad}`"),
                        path: format!("{path}?count={bad}"),
                        auth: bearer(token),
                        status: 400,
                        code: "bad_request",
                        mentions: "count".into(),
                    });
                }
            }
        }
        let long = "a".repeat(64);
        for name in [
            "a%20b",
            "x;drop",
            "%C3%A9",
            long.as_str(),
            "a%2Fb",
            "used'--",
        ] {
            cases.push(V1Case {
                what: format!("illegal biz name `{name}`"),
                path: format!("/v1/{route}/{name}"),
                auth: bearer(&s.used),
                status: 400,
                code: "bad_request",
                mentions: "biz type".into(),
            });
        }
    }

    let mut checked = 0;
    for case in &cases {
        for post in [false, true] {
            let label = format!(
                "{} {}: {}",
                if post { "POST" } else { "GET" },
                case.path,
                case.what
            );
            let r = v1(&s.app, post, &case.path, case.auth.clone()).await;
            let msg = assert_v1_error(&r, case.status, case.code, &label);
            assert!(
                msg.contains(&case.mentions),
                "{label}: `{msg}` should mention `{}`",
                case.mentions
            );
            rows.assert_unchanged(&before, &label).await;
            checked += 1;
        }
    }
    assert!(checked > 80, "ran {checked} refused requests");

    // Unknown routes: 404 with a JSON error. The per-biz routes take exactly one
    // non-empty segment after their prefix, like the pattern `/v1/ids/{biz}`.
    for route in ["ids", "segments"] {
        for path in [
            format!("/v1/{route}"),
            format!("/v1/{route}/"),
            format!("/v1/{route}/used/"),
            format!("/v1/{route}//used"),
            format!("/v1/{route}/used/extra"),
            format!("/v1/{route}/used//"),
            format!("/v1/{route}x/used"),
            format!("/v1/{route}%2Fused"),
        ] {
            for post in [false, true] {
                let r = v1(&s.app, post, &path, bearer(&s.used)).await;
                let msg = assert_v1_error(&r, 404, "not_found", &path);
                assert!(msg.contains("no route"), "{path}: {msg}");
                rows.assert_unchanged(&before, &path).await;
            }
        }
        // Methods other than GET and POST: 405 naming the allowed ones.
        for method in [Method::PUT, Method::DELETE, Method::PATCH, Method::HEAD] {
            let path = format!("/v1/{route}/used");
            let r = request(&s.app, method.clone(), &path, bearer(&s.used))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 405, "{method} /v1/{route}/used");
            assert_eq!(
                r.headers().get("allow").and_then(|v| v.to_str().ok()),
                Some("GET, POST"),
                "{method} /v1/{route}/used"
            );
            rows.assert_unchanged(&before, &format!("{method} /v1/{route}/used"))
                .await;
        }
    }
    for (post, path) in [
        (false, "/v1/nope"),
        (false, "/tinyid/id/nope"),
        (false, "/"),
    ] {
        let r = v1(&s.app, post, path, bearer(&s.used)).await;
        assert_v1_error(&r, 404, "not_found", path);
        rows.assert_unchanged(&before, path).await;
    }
    assert_eq!(
        psql_rows(&clusters, &bizs),
        psql_before,
        "row() of every cluster"
    );

    // The same server still serves both bizs afterwards.
    assert_eq!(s.app.ids("used", &s.used, 2).await.len(), 2);
    // The prefix and the biz are matched after percent-decoding, as the router does.
    let r = v1(&s.app, false, "/v1/%69ds/us%65d?count=2", bearer(&s.used)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let body: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["ids"].as_array().map(Vec::len), Some(2), "{}", r.body);
    assert_eq!(s.app.ids("fresh", &s.fresh, 2).await.len(), 2);
}

const I64_MAX: i64 = i64::MAX;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflow_near_i64_max_is_refused() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let clusters = [&a, &b];
    let config = config(&clusters, "");
    let ovf = setup_biz(&config, "ovf", 100, false).await;
    let edge = setup_biz(&config, "edge", 100, false).await;
    let ok = setup_biz(&config, "ok", 100, false).await;
    for c in clusters {
        c.psql(&format!(
            "UPDATE tiny_id_info SET max_id = {}, step = 100 WHERE biz_type = 'ovf'",
            I64_MAX - 10
        ));
        c.psql(&format!(
            "UPDATE tiny_id_info SET max_id = {}, step = 100 WHERE biz_type = 'edge'",
            I64_MAX - 100
        ));
    }
    let app = spawn_app(config).await;
    let rows = Rows::connect(&clusters, &["ovf", "edge", "ok"]).await;

    let refuse_everywhere = |biz: &'static str, token: String| {
        let app = &app;
        let rows = &rows;
        async move {
            let before = rows.state().await;
            for (post, route) in [
                (false, "ids"),
                (true, "ids"),
                (false, "segments"),
                (true, "segments"),
            ] {
                let path = if route == "ids" {
                    format!("/v1/ids/{biz}?count=1")
                } else {
                    format!("/v1/segments/{biz}")
                };
                let r = v1(app, post, &path, bearer(&token)).await;
                let msg = assert_v1_error(&r, 409, "id_space_exhausted", &path);
                assert!(
                    msg.contains(biz),
                    "409 message `{msg}` should name biz `{biz}`"
                );
                rows.assert_unchanged(&before, &path).await;
            }
            for route in COMPAT_ROUTES {
                for via in GET_AND_FORM {
                    let r = compat(app, route, via, &tinyid_params(biz, &token, None)).await;
                    let what = format!("{route} {biz} near i64::MAX");
                    assert_compat_refusal(&r, route, Refusal::Other(biz), &what);
                    rows.assert_unchanged(&before, &what).await;
                }
            }
        }
    };

    // max_id + step > i64::MAX on every database: refused, rows unchanged.
    let ovf_rows = psql_rows(&clusters, &["ovf"]);
    refuse_everywhere("ovf", ovf.clone()).await;
    assert_eq!(
        psql_rows(&clusters, &["ovf"]),
        ovf_rows,
        "`ovf` rows unchanged"
    );
    for r in &ovf_rows {
        assert!(
            r.starts_with(&format!("{}|0|", I64_MAX - 10)),
            "`ovf` never advanced: {r}"
        );
    }

    // Another biz keeps working.
    assert_eq!(app.ids("ok", &ok, 10).await.len(), 10);
    let r = compat(
        &app,
        "nextIdSimple",
        Via::Get,
        &tinyid_params("ok", &ok, None),
    )
    .await;
    assert!(r.body.parse::<i64>().is_ok(), "`ok` still served: {r:?}");

    // max_id + step == i64::MAX is fine: the last 100 IDs, i64::MAX included, no wrap.
    let mut ids = app.ids("edge", &edge, 100).await;
    ids.sort_unstable();
    assert_eq!(
        ids,
        ((I64_MAX - 99)..=I64_MAX).collect::<Vec<_>>(),
        "the two rows yield exactly (i64::MAX - 100, i64::MAX]"
    );
    for (i, c) in clusters.iter().enumerate() {
        assert_eq!(
            c.row("edge"),
            format!("{I64_MAX}|1|100|2|{i}"),
            "each row advanced once, to i64::MAX"
        );
    }
    // …and then the biz is exhausted.
    refuse_everywhere("edge", edge.clone()).await;
    assert_eq!(app.ids("ok", &ok, 10).await.len(), 10, "`ok` still served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_rows_refuse_only_that_biz() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let clusters = [&a, &b];
    let config = config(&clusters, "");
    let fine = setup_biz(&config, "fine", 100, false).await;
    // `lap`: 2 mod 4 on both databases. `lap2`: 0 mod 2 and 2 mod 4 (2 ≡ 0 mod 2).
    let insert = |c: &PgCluster, biz: &str, delta: i64, remainder: i64| {
        c.psql(&format!(
            "INSERT INTO tiny_id_info (biz_type, begin_id, max_id, step, delta, remainder, version) VALUES ('{biz}', 0, 0, 100, {delta}, {remainder}, 0)"
        ));
    };
    insert(&a, "lap", 4, 2);
    insert(&b, "lap", 4, 2);
    insert(&a, "lap2", 2, 0);
    insert(&b, "lap2", 4, 2);
    let lap = add_token(&config, "lap").await;
    let lap2 = add_token(&config, "lap2").await;
    let app = spawn_app(config).await;
    let rows = Rows::connect(&clusters, &["fine", "lap", "lap2"]).await;
    let before = rows.state().await;

    for (biz, token) in [("lap", &lap), ("lap2", &lap2)] {
        for (post, path) in [
            (false, format!("/v1/ids/{biz}?count=1")),
            (true, format!("/v1/ids/{biz}")),
            (false, format!("/v1/segments/{biz}")),
            (true, format!("/v1/segments/{biz}")),
        ] {
            let r = v1(&app, post, &path, bearer(token)).await;
            let msg = assert_v1_error(&r, 500, "biz_misconfigured", &path);
            for needle in [format!("`{biz}`"), "\"pg0\"".into(), "\"pg1\"".into()] {
                assert!(
                    msg.contains(&needle),
                    "{path}: `{msg}` should name {needle}"
                );
            }
            rows.assert_unchanged(&before, &path).await;
        }
        for route in COMPAT_ROUTES {
            for via in GET_AND_FORM {
                let r = compat(&app, route, via, &tinyid_params(biz, token, None)).await;
                let what = format!("{route} {biz} with overlapping rows");
                assert_compat_refusal(&r, route, Refusal::Other("pg1"), &what);
                assert_compat_refusal(&r, route, Refusal::Other("pg0"), &what);
                assert_compat_refusal(&r, route, Refusal::Other(biz), &what);
                rows.assert_unchanged(&before, &what).await;
            }
        }
    }
    // Another biz keeps working.
    assert_eq!(app.ids("fine", &fine, 10).await.len(), 10);
    let r = compat(
        &app,
        "nextId",
        Via::PostForm,
        &tinyid_params("fine", &fine, None),
    )
    .await;
    assert!(
        r.body.starts_with(r#"{"data":["#),
        "`fine` still served: {r:?}"
    );

    // Once the rows are made disjoint by hand, the biz is served again (after the
    // periodic catalog refresh), from the corrected classes.
    b.psql("UPDATE tiny_id_info SET remainder = 0 WHERE biz_type = 'lap'");
    let (app, lap) = (&app, &lap);
    let ids: Vec<i64> = eventually(
        Duration::from_secs(10),
        "`lap` served after its rows were fixed",
        move || async move {
            let r = v1(app, false, "/v1/ids/lap?count=30", bearer(lap)).await;
            match r.status {
                200 => Ok(serde_json::from_value(r.json()["ids"].clone()).unwrap()),
                _ => Err(format!("{r:?}")),
            }
        },
    )
    .await;
    assert_eq!(ids.len(), 30);
    assert!(
        ids.iter().all(|id| id % 4 == 2 || id % 4 == 0),
        "IDs from 2 mod 4 (pg0) or 0 mod 4 (pg1): {ids:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_databases_give_503_and_change_nothing() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let clusters = [&a, &b];
    let config = config(&clusters, "");
    let token = setup_biz(&config, "down", 100, false).await;
    let app = spawn_app(config).await;
    let before = psql_rows(&clusters, &["down"]);
    a.stop();
    b.stop();
    for (post, path) in [(false, "/v1/ids/down?count=1"), (true, "/v1/segments/down")] {
        let r = v1(&app, post, path, bearer(&token)).await;
        assert_v1_error(&r, 503, "unavailable", path);
    }
    for route in COMPAT_ROUTES {
        let r = compat(&app, route, Via::Get, &tinyid_params("down", &token, None)).await;
        assert_compat_refusal(&r, route, Refusal::Other("database"), route);
    }
    a.start_again();
    b.start_again();
    assert_eq!(
        psql_rows(&clusters, &["down"]),
        before,
        "failed requests reserved nothing"
    );
    // Served again once the back-off (at most 400 ms here) is over.
    let (app, token) = (&app, &token);
    eventually(
        Duration::from_secs(10),
        "served again",
        move || async move {
            let r = v1(app, false, "/v1/ids/down?count=3", bearer(token)).await;
            match r.status {
                200 => Ok(()),
                _ => {
                    assert_eq!(r.status, 503, "only unavailable while recovering: {r:?}");
                    Err(format!("{r:?}"))
                }
            }
        },
    )
    .await;
}

/// A two-database configuration with a dummy URL (nothing listens on port 1).
fn two_databases(db1_extra: &str) -> String {
    format!(
        "[[databases]]\nname = \"a\"\nurl = \"postgres://postgres@127.0.0.1:1/segmint\"\ndelta = 2\nremainder = 0\n\
         [[databases]]\nname = \"b\"\nurl = \"postgres://postgres@127.0.0.1:1/segmint\"\n{db1_extra}\n"
    )
}

/// Runs `segmint --config <toml> migrate`; returns (exit code, stdout, stderr).
fn migrate_with(toml: &str) -> (Option<i32>, String, String) {
    let file = config_file(toml);
    let run = segmint_cli(file.path(), &["migrate"], &[]);
    (run.code, run.stdout, run.stderr)
}

/// A configuration file the binary must refuse before touching any database.
struct ConfigCase {
    /// What is wrong with it.
    what: &'static str,
    /// The file.
    toml: String,
    /// What the error must name.
    names: &'static [&'static str],
}

#[test]
fn bad_configuration_is_refused_by_the_binary() {
    // Control: a valid file gets past the configuration and fails only on connecting.
    let (code, stdout, stderr) = migrate_with(&two_databases("delta = 2\nremainder = 1"));
    assert_ne!(code, Some(0), "nothing listens on port 1: {stdout}{stderr}");
    assert!(
        !stderr.contains("configuration"),
        "the control configuration is valid: {stderr}"
    );
    assert!(
        stdout.contains("\"a\"") && stdout.contains("\"b\""),
        "migrate tried both databases: {stdout}"
    );

    let cases = [
        ConfigCase {
            what: "overlapping residue classes",
            toml: two_databases("delta = 2\nremainder = 0"),
            names: &["databases[1].remainder", "\"a\""],
        },
        ConfigCase {
            what: "remainder >= delta",
            toml: two_databases("delta = 2\nremainder = 2"),
            names: &["databases[1].remainder"],
        },
        ConfigCase {
            what: "overlapping classes of different deltas",
            toml: two_databases("delta = 4\nremainder = 2"),
            names: &["databases[1].remainder"],
        },
        ConfigCase {
            what: "delta 0",
            toml: two_databases("delta = 0\nremainder = 0"),
            names: &["databases[1].delta"],
        },
        ConfigCase {
            what: "unknown top-level key",
            toml: format!(
                "bogus_key = 1\n{}",
                two_databases("delta = 2\nremainder = 1")
            ),
            names: &["bogus_key"],
        },
        ConfigCase {
            what: "unknown key in a database",
            toml: two_databases("delta = 2\nremainder = 1\ncolour = \"red\""),
            names: &["colour", "databases"],
        },
    ];
    for ConfigCase { what, toml, names } in cases {
        let (code, stdout, stderr) = migrate_with(&toml);
        assert!(
            code.is_some_and(|c| c != 0),
            "{what}: must exit non-zero, got {code:?}: {stderr}"
        );
        for needle in names {
            assert!(
                stderr.contains(needle),
                "{what}: stderr must name `{needle}`: {stderr}"
            );
        }
        assert!(
            !stdout.contains("\"a\""),
            "{what}: no database may be touched: {stdout}"
        );
    }
}
