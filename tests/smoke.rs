use crate::common;

use common::http::{Via, compat, tinyid_params};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_ids_from_two_databases() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let config = config(&[&a, &b], "");
    let token = setup_biz(&config, "order", 100, false).await;
    let app = spawn_app(config).await;
    let ids = app.ids("order", &token, 150).await;
    assert_eq!(ids.len(), 150);
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 150);
    let r = compat(
        &app,
        "nextIdSimple",
        Via::Get,
        &tinyid_params("order", &token, Some("3")),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body.split(',').count(), 3, "{}", r.body);
    // A percent-encoded letter in the path is the letter.
    let (status, body) = app.get_v1("/v1/ids/ord%65r?count=2", Some(&token)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["biz"], "order", "{body}");
    assert_eq!(body["ids"].as_array().map(Vec::len), Some(2), "{body}");
}

/// A biz and token created while the server runs work at once, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_biz_created_while_running_is_served_at_once() {
    let pg = PgCluster::start();
    // A long periodic refresh: only the refresh on a miss can pick the new biz up.
    let config = config(&[&pg], "catalog_refresh_ms = 600000");
    setup_biz(&config, "first", 10, false).await;
    let app = spawn_app(config.clone()).await;
    let token = setup_biz_only(&config, "second", 10).await;
    assert_eq!(app.ids("second", &token, 3).await, vec![1, 2, 3]);
    let (status, body) = app.get_v1("/v1/ids/second", Some("not-a-token")).await;
    assert_eq!(status, 401, "{body}");
}

async fn setup_biz_only(config: &segmint::config::Config, biz: &str, step: i64) -> String {
    let store = segmint::store::Store::connect(config).unwrap();
    let tag = segmint::biz::BizTag::parse(biz).unwrap();
    store.cluster().add_biz(&tag, step, 1, None).await.unwrap();
    store.add_token(&tag, "").await.unwrap().0
}
