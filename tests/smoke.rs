mod common;

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
    let (status, body) = app
        .get(&format!(
            "/tinyid/id/nextIdSimple?bizType=order&token={token}&batchSize=3"
        ))
        .await;
    assert_eq!(status, 200);
    assert_eq!(body.split(',').count(), 3, "{body}");
}
