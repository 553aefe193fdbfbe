//! The operator routes (`/metrics`, `/status`, `/v1/bizs`, `/readyz`): behind the
//! operator token, on their own address, both, or neither (the quick start), in
//! process and in the real binary. The store is embedded: what is tested here is the
//! HTTP layer, which is the same for every store.

use crate::common;

use std::time::{Duration, Instant};

use common::cli::{CliRun, config_file, segmint_cli};
use common::http::{Remote, Target, bearer, get, next_id_simple, request, try_send, v1, v1_ids};
use common::operator::{OPERATOR_ROUTES, OPERATOR_TOKEN, spawn_app_with_operator};
use common::*;
use reqwest::Method;
use reqwest::header::HeaderValue;
use segmint::server::STOP_LIMIT;

/// One embedded database with the biz `order` and a token for it; `extra` TOML on top.
async fn order_database(extra: &str) -> (Databases, segmint::config::Config, String) {
    let dbs = Databases::start(Kind::Embedded, 1);
    let config = dbs.config(extra);
    let token = setup_biz(&config, "order", 100, false).await;
    (dbs, config, token)
}

/// What an unknown path answers at `app`, for `path`.
fn unmatched(path: &str) -> serde_json::Value {
    serde_json::json!({"error": {"code": "not_found", "message": format!("no route for GET {path}")}})
}

/// Asserts that `app` serves every operator route with `authorization`, with its own
/// content (a 2xx status, as the database is up).
async fn serves_operator_routes(app: &impl Target, authorization: Option<HeaderValue>) {
    for path in OPERATOR_ROUTES {
        let r = v1(app, false, path, authorization.clone()).await;
        assert_eq!(r.status, 200, "{path} at {}: {r:?}", app.base());
        let expected = match path {
            "/metrics" => "segmint_database_up{database=\"pg0\"} 1",
            "/status" => "<h1>segmint",
            "/v1/bizs" => "\"biz\":\"order\"",
            _ => "\"status\":\"ready\"",
        };
        assert!(r.body.contains(expected), "{path}: {}", r.body);
    }
}

/// Asserts that `app` answers every operator route with the one 401 of a missing or
/// wrong operator token, whatever `authorizations` carry.
async fn refuses_operator_routes(app: &impl Target, authorizations: &[Option<HeaderValue>]) {
    for path in OPERATOR_ROUTES {
        let mut answers = Vec::new();
        for authorization in authorizations {
            answers.push(v1(app, false, path, authorization.clone()).await);
        }
        let first = &answers[0];
        assert_eq!(first.status, 401, "{path}: {first:?}");
        assert_eq!(first.www_authenticate.as_deref(), Some("Bearer"), "{path}");
        let body = first.json();
        assert_eq!(body["error"]["code"], "unauthorized", "{path}: {body}");
        assert!(
            answers.iter().all(|a| a == first),
            "{path}: the same answer for every refused header: {answers:?}"
        );
    }
}

/// The routes everyone may use: health, the description, the ID routes (with the biz's
/// own token).
async fn serves_public_routes(app: &TestApp, token: &str) {
    assert_eq!(get(app, "/healthz").await.status, 200);
    let r = get(app, "/openapi.json").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(v1_ids(app, "order", token, 2).await.len(), 2);
    let r = next_id_simple(app, "order", token).await;
    assert!(
        r.error_header.is_none() && r.body.parse::<i64>().is_ok(),
        "{r:?}"
    );
}

#[tokio::test]
async fn with_an_operator_token_each_operator_route_needs_it() {
    let extra = format!("operator_token = \"{OPERATOR_TOKEN}\"");
    let (_dbs, config, token) = order_database(&extra).await;
    let app = spawn_app(config).await;

    refuses_operator_routes(
        &app,
        &[
            None,
            bearer("operator-token-for-tests-0123456780"),
            bearer(&token),
            Some(HeaderValue::from_static("Basic b3BlcmF0b3I6eA==")),
            Some(HeaderValue::from_static("Bearer")),
        ],
    )
    .await;
    serves_operator_routes(&app, bearer(OPERATOR_TOKEN)).await;
    // The scheme is case-insensitive, as in the v1 API.
    let lower = HeaderValue::from_str(&format!("bearer {OPERATOR_TOKEN}")).unwrap();
    assert_eq!(v1(&app, false, "/metrics", Some(lower)).await.status, 200);

    serves_public_routes(&app, &token).await;
    // The operator token is no biz token.
    let r = v1(&app, false, "/v1/ids/order", bearer(OPERATOR_TOKEN)).await;
    assert_eq!(r.status, 401);

    // The refusals are counted under their route, like any answer.
    let metrics = v1(&app, false, "/metrics", bearer(OPERATOR_TOKEN))
        .await
        .body;
    let refused = metrics
        .lines()
        .find(|l| {
            l.starts_with("segmint_http_requests_total{")
                && l.contains("route=\"/status\"")
                && l.contains("status=\"401\"")
        })
        .unwrap_or_else(|| panic!("no 401 series for /status:\n{metrics}"));
    assert!(refused.ends_with(" 5"), "{refused}");
}

#[tokio::test]
async fn with_operator_bind_the_public_address_does_not_serve_the_operator_routes() {
    let (_dbs, config, token) = order_database("").await;
    let (public, operator) = spawn_app_with_operator(config).await;

    for path in OPERATOR_ROUTES {
        let r = get(&public, path).await;
        assert_eq!(
            (r.status, r.json()),
            (404, unmatched(path)),
            "{path} on the public address answers as an unknown path"
        );
    }
    serves_public_routes(&public, &token).await;

    serves_operator_routes(&operator, None).await;
    assert_eq!(get(&operator, "/healthz").await.status, 200);
    let r = v1(&operator, false, "/v1/ids/order", bearer(&token)).await;
    assert_eq!(
        (r.status, r.json()),
        (404, unmatched("/v1/ids/order")),
        "IDs are served on the public address only"
    );
}

#[tokio::test]
async fn operator_bind_and_token_together() {
    let extra = format!("operator_token = \"{OPERATOR_TOKEN}\"");
    let (_dbs, config, token) = order_database(&extra).await;
    let (public, operator) = spawn_app_with_operator(config).await;
    for path in OPERATOR_ROUTES {
        let r = v1(&public, false, path, bearer(OPERATOR_TOKEN)).await;
        assert_eq!(r.status, 404, "{path}: not here, even with the token");
    }
    serves_public_routes(&public, &token).await;
    let wrong = HeaderValue::from_static("Bearer not-the-operator-token");
    refuses_operator_routes(&operator, &[None, Some(wrong)]).await;
    serves_operator_routes(&operator, bearer(OPERATOR_TOKEN)).await;
}

#[tokio::test]
async fn without_operator_keys_every_route_answers_anyone_on_one_address() {
    let (_dbs, config, token) = order_database("").await;
    assert!(config.operator_bind.is_none() && config.operator_token.is_none());
    let app = spawn_app(config).await;
    serves_operator_routes(&app, None).await;
    serves_operator_routes(&app, bearer("anything-at-all-0123456789")).await;
    serves_public_routes(&app, &token).await;
}

/// Runs `segmint serve` on `toml` with `env` and asserts it fails at once, naming `key`
/// and never showing `secret`; what it did.
fn refused_at_start(toml: &str, env: &[(&str, &str)], key: &str, secret: &str) -> CliRun {
    let file = config_file(toml);
    let run = segmint_cli(file.path(), &["serve"], env);
    let stderr = &run.stderr;
    assert!(!run.ok(), "started with {toml}: {stderr}");
    assert!(stderr.contains(&format!("`{key}`")), "{stderr}");
    assert!(!stderr.contains(secret), "the token is shown: {stderr}");
    run
}

#[tokio::test]
async fn the_binary_refuses_a_bad_operator_configuration_naming_the_key() {
    let (dbs, _, _) = order_database("").await;
    let toml = |extra: &str| config_toml_urls(&dbs.urls(), extra);
    let short = "short-op-token";
    refused_at_start(
        &toml(&format!("operator_token = \"{short}\"")),
        &[],
        "operator_token",
        short,
    );
    refused_at_start(
        &toml(""),
        &[("SEGMINT_OPERATOR_TOKEN", short)],
        "operator_token",
        short,
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), format!("{short}\n")).unwrap();
    let from_file = format!("operator_token_file = {:?}", file.path());
    refused_at_start(&toml(&from_file), &[], "operator_token_file", short);
    refused_at_start(
        &toml(&format!(
            "operator_token = \"{OPERATOR_TOKEN}\"\n{from_file}"
        )),
        &[],
        "operator_token_file",
        OPERATOR_TOKEN,
    );
    // SEGMINT_BIND puts `bind` on the address; the same address is refused.
    let same = format!("127.0.0.1:{}", free_port());
    let run = refused_at_start(
        &toml(&format!("operator_bind = \"{same}\"")),
        &[("SEGMINT_BIND", &same)],
        "operator_bind",
        OPERATOR_TOKEN,
    );
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    // An address in use: the start fails naming the key.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap();
    refused_at_start(
        &toml(&format!("operator_bind = \"{taken}\"")),
        &[],
        "operator_bind",
        OPERATOR_TOKEN,
    );
}

/// `segmint serve` with the operator routes on `operator_bind` and the token given by
/// `token_from` (extra TOML and environment): each address serves its routes, the
/// token is never logged, and SIGTERM stops both addresses within the bound.
async fn binary_with_operator_address(token_from: (&str, &[(&str, &str)])) {
    let (extra, env) = token_from;
    let operator_base = format!("127.0.0.1:{}", free_port());
    let extra = format!("operator_bind = \"{operator_base}\"\n{extra}");
    let (dbs, _, token) = order_database(&extra).await;
    let mut server =
        ServerProcess::start_with_env(&config_toml_urls(&dbs.urls(), &extra), env).await;
    let public = server.remote(Duration::from_secs(30));
    let operator = Remote::new(&format!("http://{operator_base}"), Duration::from_secs(30));

    let r = v1(&public, false, "/v1/ids/order?count=1", bearer(&token)).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(get(&public, "/healthz").await.status, 200);
    assert_eq!(get(&operator, "/healthz").await.status, 200);
    for path in OPERATOR_ROUTES {
        let r = v1(&public, false, path, bearer(OPERATOR_TOKEN)).await;
        assert_eq!(r.status, 404, "{path} on the public address");
        let r = get(&operator, path).await;
        assert_eq!(r.status, 401, "{path} without the token");
        let r = v1(&operator, false, path, bearer(OPERATOR_TOKEN)).await;
        assert_eq!(r.status, 200, "{path}: {r:?}");
    }

    let started = Instant::now();
    let status = server.sigterm(STOP_LIMIT).await;
    let took = started.elapsed();
    assert!(status.success(), "{status}: {}", server.log_text());
    assert!(took < Duration::from_secs(10), "stopping took {took:?}");
    let log = server.log_text();
    assert!(log.contains("segmint listening"), "{log}");
    assert!(!log.contains(OPERATOR_TOKEN), "the token is logged:\n{log}");
    assert!(
        try_send(request(&operator, Method::GET, "/healthz", None))
            .await
            .is_err(),
        "the operator address is closed too"
    );
}

#[tokio::test]
async fn the_binary_serves_operator_routes_on_operator_bind_with_a_token_file() {
    let file = tempfile::NamedTempFile::new().unwrap();
    // As a container secret is mounted: the token and a line break.
    std::fs::write(file.path(), format!("{OPERATOR_TOKEN}\n")).unwrap();
    let extra = format!("operator_token_file = {:?}", file.path());
    binary_with_operator_address((&extra, &[])).await;
}

#[tokio::test]
async fn the_binary_serves_operator_routes_on_operator_bind_with_a_token_from_the_environment() {
    binary_with_operator_address(("", &[("SEGMINT_OPERATOR_TOKEN", OPERATOR_TOKEN)])).await;
}
