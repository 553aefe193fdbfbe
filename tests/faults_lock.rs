//! A biz whose step is near the top of the ID space, against the real `segmint serve`
//! binary: the prefetch after the first segment overflows, and from then on every
//! request runs the runway arithmetic on a cache of ~5·10¹⁸ IDs. The server must keep
//! answering (IDs from the cache, a clear error once the space is exhausted), never
//! issue a wrapped or repeated ID, and stop on SIGTERM within a bound.

use crate::common;

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use common::*;

/// Wider than half of `i64::MAX`: a second segment of this step cannot fit.
const HUGE_STEP: i64 = 5_000_000_000_000_000_000;
/// How long one request may take before the server counts as hung.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// How long SIGTERM may take to stop the server.
const STOP_WITHIN: Duration = Duration::from_secs(10);

/// GET `path` with `token`; status and JSON body, or a panic naming the hang.
async fn get(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    token: &str,
) -> (u16, serde_json::Value) {
    let r = http
        .get(format!("{base}{path}"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: no answer within {ANSWER_WITHIN:?}: {e}"));
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(serde_json::Value::Null))
}

async fn huge_step_keeps_answering_and_stops(kind: Kind) {
    let dbs = Databases::start(kind, 1);
    let extra = "preload_percent = 0\nadaptive_step = false";
    let toml = config_toml_urls(&dbs.urls(), extra);
    let config = dbs.config(extra);
    let token = setup_biz(&config, "order", HUGE_STEP, false).await;
    // A row already past the point where its step fits: the first reservation overflows.
    let top_token = setup_biz(&config, "top", HUGE_STEP, false).await;
    dbs.sql(
        0,
        &format!(
            "UPDATE tiny_id_info SET max_id = {} WHERE biz_type = 'top'",
            i64::MAX - HUGE_STEP + 1
        ),
    );
    let top_before = dbs.row(0, "top");

    let mut server = ServerProcess::start(&toml).await;
    let base = server.base.clone();
    let http = reqwest::Client::builder()
        .timeout(ANSWER_WITHIN)
        .build()
        .unwrap();

    let (status, body) = get(&http, &base, "/v1/ids/order?count=1", &token).await;
    assert_eq!(status, 200, "{body}");
    let mut ids: Vec<i64> = serde_json::from_value(body["ids"].clone()).unwrap();
    // The prefetch of a second segment overflows; the sampler meanwhile measures a
    // rate above zero, so the next requests compute a runway of ~10²⁰ seconds.
    wait_for_log(&server.log, "segment fetch failed", Duration::from_secs(5)).await;
    eventually(
        Duration::from_secs(10),
        "the sampler measures a rate above zero",
        async || {
            let r = http.get(format!("{base}/v1/bizs")).send().await;
            let body: serde_json::Value = r
                .map_err(|e| e.to_string())?
                .json()
                .await
                .map_err(|e| e.to_string())?;
            let rate = body["bizs"]
                .as_array()
                .and_then(|bizs| bizs.iter().find(|b| b["biz"] == "order"))
                .and_then(|b| b["rate"].as_f64());
            match rate {
                Some(rate) if rate > 0.0 => Ok(()),
                _ => Err(body.to_string()),
            }
        },
    )
    .await;
    for _ in 0..20 {
        let (status, body) = get(&http, &base, "/v1/ids/order?count=3", &token).await;
        assert_eq!(status, 200, "the cache still holds IDs: {body}");
        ids.extend(serde_json::from_value::<Vec<i64>>(body["ids"].clone()).unwrap());
    }
    let unique: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "an ID was issued twice: {ids:?}");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    assert!(
        ids.iter().all(|&id| (1..=HUGE_STEP).contains(&id)),
        "an ID outside the first segment: {ids:?}"
    );

    // The exhausted biz: a clear refusal, on every route, and its row untouched.
    for path in ["/v1/ids/top?count=1", "/v1/segments/top"] {
        for _ in 0..3 {
            let (status, body) = get(&http, &base, path, &top_token).await;
            assert_eq!(status, 409, "{path}: {body}");
            assert_eq!(body["error"]["code"], "id_space_exhausted", "{body}");
            let message = body["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("IDs never wrap"), "{message}");
        }
    }
    let (status, body) = get(&http, &base, "/v1/ids/order?count=1", &token).await;
    assert_eq!(status, 200, "still answering: {body}");

    let took = server.terminate_within(STOP_WITHIN).await;
    let log_text = server.log_text();
    assert!(
        took.is_some(),
        "segmint serve was still running {STOP_WITHIN:?} after SIGTERM; log:\n{log_text}"
    );
    assert!(!log_text.contains("panicked"), "a panic:\n{log_text}");
    assert_eq!(dbs.row(0, "top"), top_before);
    let order_max: i64 = dbs
        .row(0, "order")
        .split('|')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        order_max <= HUGE_STEP,
        "the row advanced past the first segment: {order_max}"
    );
}

/// Waits until `log` contains `text`.
async fn wait_for_log(log: &Path, text: &str, limit: Duration) {
    eventually(limit, &format!("`{text}` in the log"), async || {
        let now = std::fs::read_to_string(log).unwrap_or_default();
        if now.contains(text) {
            Ok(())
        } else {
            Err(format!("log:\n{now}"))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_huge_step_keeps_answering_and_stops_on_sigterm() {
    huge_step_keeps_answering_and_stops(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_huge_step_keeps_answering_and_stops_on_sigterm() {
    huge_step_keeps_answering_and_stops(Kind::Embedded).await;
}
