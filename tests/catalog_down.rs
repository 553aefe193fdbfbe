//! A server started while its only database is down has never read its tokens and
//! bizs: a valid token must then get "unavailable" (503 on v1, Tinyid code 6), never
//! "invalid token", and work as soon as the database is back; the client library tries
//! another server instead of giving up.

use crate::common;

use std::time::Duration;

use common::http::{Target, Via, bearer, compat, next_id_simple, tinyid_params, v1};
use common::{PgCluster, config, eventually, setup_biz, spawn_app};
use segmint::client::{Client, Protocol};

/// A 64-hex-digit token no database knows.
const UNKNOWN: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// HTTP status and `error.code` of `GET /v1/ids/{biz}` with `token`.
async fn v1_code(app: &impl Target, biz: &str, token: &str) -> (u16, String) {
    let r = v1(app, false, &format!("/v1/ids/{biz}?count=3"), bearer(token)).await;
    let code = r.json()["error"]["code"].as_str().unwrap_or("").to_string();
    (r.status, code)
}

/// Tinyid's `code` from `nextId`, and the `X-Segmint-Error` of `nextIdSimple`.
async fn tinyid(app: &impl Target, biz: &str, token: &str) -> (i64, String) {
    let r = compat(app, "nextId", Via::Get, &tinyid_params(biz, token, None)).await;
    assert_eq!(r.status, 200, "Tinyid's JSON routes answer 200: {r:?}");
    let header = next_id_simple(app, biz, token).await.error_header;
    (
        r.json()["code"].as_i64().unwrap(),
        header.unwrap_or_default(),
    )
}

#[tokio::test]
async fn valid_token_is_unavailable_until_the_database_is_read() {
    let pg = PgCluster::start();
    let config = config(&[&pg], "catalog_refresh_ms = 200");
    let token = setup_biz(&config, "late", 100, false).await;
    pg.stop();
    let app = spawn_app(config).await;

    for t in [token.as_str(), UNKNOWN] {
        assert_eq!(
            v1_code(&app, "late", t).await,
            (503, "unavailable".to_string()),
            "no database read yet: nothing is known about the token"
        );
        let (code, simple) = tinyid(&app, "late", t).await;
        assert_eq!(code, 6, "Tinyid: unavailable, not 'token is error'");
        assert!(simple.starts_with("6:"), "{simple}");
    }

    pg.start_again();
    let (app_ref, token_ref) = (&app, &token);
    eventually(
        Duration::from_secs(15),
        "the valid token served after the database came back",
        move || async move {
            match v1_code(app_ref, "late", token_ref).await {
                (200, _) => Ok(()),
                (503, body) => Err(format!("503: {body}")),
                other => panic!("the valid token after the database came back: {other:?}"),
            }
        },
    )
    .await;
    assert_eq!(tinyid(&app, "late", &token).await.0, 200);
    assert_eq!(
        v1_code(&app, "late", UNKNOWN).await,
        (401, "unauthorized".to_string()),
        "once the catalog is read, an unknown token is refused"
    );
    assert_eq!(tinyid(&app, "late", UNKNOWN).await.0, 5);
}

#[tokio::test]
async fn client_moves_on_from_a_server_that_never_read_its_database() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    // The biz and token on both databases (disjoint classes), then one server per
    // database; the first one's database is down when it starts.
    let token = setup_biz(&config(&[&a, &b], ""), "moves", 100, false).await;
    a.stop();
    let down = spawn_app(config(&[&a], "")).await;
    let up = spawn_app(config(&[&b], "")).await;
    for protocol in [Protocol::V1, Protocol::Tinyid] {
        let client = Client::builder()
            .servers([down.base.clone(), up.base.clone()])
            .token(&token)
            .protocol(protocol)
            .request_timeout(Duration::from_secs(2))
            .wait_timeout(Duration::from_secs(5))
            .backoff(Duration::from_millis(100), Duration::from_millis(400))
            .build()
            .unwrap();
        let ids = client.next_ids("moves", 5).await.unwrap_or_else(|e| {
            panic!("{protocol:?}: a final error instead of IDs from the second server: {e:?}")
        });
        assert_eq!(ids.len(), 5);
        assert!(
            ids.iter().all(|id| id % 2 == 1),
            "from the second database's class: {ids:?}"
        );
    }
    assert_eq!(
        v1_code(&down, "moves", &token).await.0,
        503,
        "the first server still cannot vouch for the token"
    );
}
