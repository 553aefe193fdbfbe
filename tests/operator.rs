//! The operator routes (`/metrics`, `/status`, `/v1/bizs`, `/readyz`): behind the
//! operator token, on their own address, both, or neither (the quick start), in
//! process and in the real binary. The store is embedded: what is tested here is the
//! HTTP layer, which is the same for every store.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::operator::{OPERATOR_ROUTES, OPERATOR_TOKEN, spawn_app_with_operator};
use common::*;
use segmint::server::STOP_LIMIT;

/// One embedded database with the biz `order` and a token for it; `extra` TOML on top.
async fn order_database(extra: &str) -> (Databases, segmint::config::Config, String) {
    let dbs = Databases::start(Kind::Embedded, 1);
    let config = dbs.config(extra);
    let token = setup_biz(&config, "order", 100, false).await;
    (dbs, config, token)
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// What an unknown path answers at `app`, for `path`.
fn unmatched(path: &str) -> serde_json::Value {
    serde_json::json!({"error": {"code": "not_found", "message": format!("no route for GET {path}")}})
}

/// Asserts that `app` serves every operator route with `authorization`, with its own
/// content (a 2xx status, as the database is up).
async fn serves_operator_routes(app: &TestApp, authorization: Option<&str>) {
    for path in OPERATOR_ROUTES {
        let answer = app.get_authorized(path, authorization).await;
        assert_eq!(answer.status, 200, "{path} at {}: {answer:?}", app.base);
        let expected = match path {
            "/metrics" => "segmint_database_up{database=\"pg0\"} 1",
            "/status" => "<h1>segmint",
            "/v1/bizs" => "\"biz\":\"order\"",
            _ => "\"status\":\"ready\"",
        };
        assert!(answer.body.contains(expected), "{path}: {}", answer.body);
    }
}

/// Asserts that `app` answers every operator route with the one 401 of a missing or
/// wrong operator token, whatever `authorizations` carry.
async fn refuses_operator_routes(app: &TestApp, authorizations: &[Option<&str>]) {
    for path in OPERATOR_ROUTES {
        let mut answers = Vec::new();
        for authorization in authorizations {
            answers.push(app.get_authorized(path, *authorization).await);
        }
        let first = &answers[0];
        assert_eq!(first.status, 401, "{path}: {first:?}");
        assert_eq!(first.challenge.as_deref(), Some("Bearer"), "{path}");
        let body: serde_json::Value = serde_json::from_str(&first.body).unwrap();
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
    assert_eq!(app.get("/healthz").await.0, 200);
    let (status, body) = app.get("/openapi.json").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(app.ids("order", token, 2).await.len(), 2);
    let (id, error) = app.next_id_simple("order", token).await;
    assert!(
        error.is_none() && id.parse::<i64>().is_ok(),
        "{id} {error:?}"
    );
}

#[tokio::test]
async fn with_an_operator_token_each_operator_route_needs_it() {
    let extra = format!("operator_token = \"{OPERATOR_TOKEN}\"");
    let (_dbs, config, token) = order_database(&extra).await;
    let app = spawn_app(config).await;

    let wrong = bearer("operator-token-for-tests-0123456780");
    let biz_token = bearer(&token);
    refuses_operator_routes(
        &app,
        &[
            None,
            Some(&wrong),
            Some(&biz_token),
            Some("Basic b3BlcmF0b3I6eA=="),
            Some("Bearer"),
        ],
    )
    .await;
    let right = bearer(OPERATOR_TOKEN);
    serves_operator_routes(&app, Some(&right)).await;
    // The scheme is case-insensitive, as in the v1 API.
    let lower = format!("bearer {OPERATOR_TOKEN}");
    assert_eq!(
        app.get_authorized("/metrics", Some(&lower)).await.status,
        200
    );

    serves_public_routes(&app, &token).await;
    // The operator token is no biz token.
    let (status, _) = app.get_v1("/v1/ids/order", Some(OPERATOR_TOKEN)).await;
    assert_eq!(status, 401);

    // The refusals are counted under their route, like any answer.
    let metrics = app.get_authorized("/metrics", Some(&right)).await.body;
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
        let (status, body) = public.get_v1(path, None).await;
        assert_eq!(
            (status, &body),
            (404, &unmatched(path)),
            "{path} on the public address answers as an unknown path"
        );
    }
    serves_public_routes(&public, &token).await;

    serves_operator_routes(&operator, None).await;
    assert_eq!(operator.get("/healthz").await.0, 200);
    let (status, body) = operator.get_v1("/v1/ids/order", Some(&token)).await;
    assert_eq!(
        (status, body),
        (404, unmatched("/v1/ids/order")),
        "IDs are served on the public address only"
    );
}

#[tokio::test]
async fn operator_bind_and_token_together() {
    let extra = format!("operator_token = \"{OPERATOR_TOKEN}\"");
    let (_dbs, config, token) = order_database(&extra).await;
    let (public, operator) = spawn_app_with_operator(config).await;
    let right = bearer(OPERATOR_TOKEN);

    for path in OPERATOR_ROUTES {
        let answer = public.get_authorized(path, Some(&right)).await;
        assert_eq!(answer.status, 404, "{path}: not here, even with the token");
    }
    serves_public_routes(&public, &token).await;
    refuses_operator_routes(&operator, &[None, Some("Bearer not-the-operator-token")]).await;
    serves_operator_routes(&operator, Some(&right)).await;
}

#[tokio::test]
async fn without_operator_keys_every_route_answers_anyone_on_one_address() {
    let (_dbs, config, token) = order_database("").await;
    assert!(config.operator_bind.is_none() && config.operator_token.is_none());
    let app = spawn_app(config).await;
    serves_operator_routes(&app, None).await;
    serves_operator_routes(&app, Some("Bearer anything-at-all-0123456789")).await;
    serves_public_routes(&app, &token).await;
}

/// Runs `segmint serve` on `toml` with `env` and asserts it fails at once, naming `key`
/// and never showing `secret`.
fn refused_at_start(toml: &str, env: &[(&str, &str)], key: &str, secret: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("segmint.toml");
    std::fs::write(&file, toml).unwrap();
    let out = serve_command(&file, free_port())
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started with {toml}: {stderr}");
    assert!(stderr.contains(&format!("`{key}`")), "{stderr}");
    assert!(!stderr.contains(secret), "the token is shown: {stderr}");
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
    // SEGMINT_BIND puts `bind` on 127.0.0.1:port; the same address is refused.
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let same = dir.path().join("segmint.toml");
    std::fs::write(
        &same,
        toml(&format!("operator_bind = \"127.0.0.1:{port}\"")),
    )
    .unwrap();
    let out = serve_command(&same, port).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`operator_bind`"), "{stderr}");
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
    let http = reqwest::Client::new();
    let get = |url: String, auth: Option<&str>| {
        let mut req = http.get(url);
        if let Some(token) = auth {
            req = req.bearer_auth(token);
        }
        async move {
            let r = req.send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let operator = format!("http://{operator_base}");
    let public = &server.base;

    let (status, body) = get(format!("{public}/v1/ids/order?count=1"), Some(&token)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(get(format!("{public}/healthz"), None).await.0, 200);
    assert_eq!(get(format!("{operator}/healthz"), None).await.0, 200);
    for path in OPERATOR_ROUTES {
        let (status, _) = get(format!("{public}{path}"), Some(OPERATOR_TOKEN)).await;
        assert_eq!(status, 404, "{path} on the public address");
        let (status, _) = get(format!("{operator}{path}"), None).await;
        assert_eq!(status, 401, "{path} without the token");
        let (status, body) = get(format!("{operator}{path}"), Some(OPERATOR_TOKEN)).await;
        assert_eq!(status, 200, "{path}: {body}");
    }

    let (took, status) = server
        .terminate_within(STOP_LIMIT)
        .await
        .unwrap_or_else(|| panic!("not stopped within {STOP_LIMIT:?}"));
    assert!(status.success(), "{status}: {}", server.log_text());
    assert!(took < Duration::from_secs(10), "stopping took {took:?}");
    let log = server.log_text();
    assert!(log.contains("segmint listening"), "{log}");
    assert!(!log.contains(OPERATOR_TOKEN), "the token is logged:\n{log}");
    assert!(
        reqwest::get(format!("{operator}/healthz")).await.is_err(),
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
