//! The client library against real servers and PostgreSQL: no duplicate among clients
//! and direct HTTP users, issuing from the cache through a server outage, failing over
//! between servers without the caller noticing, and issuing exactly the IDs of the
//! segments it fetched.

use crate::common;

use std::net::TcpListener;
use std::time::Duration;

use common::*;
use segmint::client::{Client, ErrorKind, Protocol, blocking::BlockingClient};
use segmint::config::Config;
use segmint::server::Application;

const BIZ: &str = "order";

/// A server on `port` (0: any), running in this process.
async fn server_on(config: Config, port: u16) -> (u16, actix_web::dev::ServerHandle) {
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind");
    let app = Application::with_listener(config, listener)
        .await
        .expect("build app");
    let app = common::read(app).await;
    let (port, handle) = (app.port(), app.handle());
    tokio::spawn(app.run_until(std::future::pending()));
    (port, handle)
}

fn client(ports: &[u16], token: &str) -> Client {
    Client::builder()
        .servers(ports.iter().map(|p| format!("http://127.0.0.1:{p}")))
        .token(token)
        .request_timeout(Duration::from_secs(2))
        .wait_timeout(Duration::from_secs(5))
        .backoff(Duration::from_millis(100), Duration::from_millis(400))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_clients_and_http_users_share_a_biz_without_duplicates() {
    let dbs = Databases::start(Kind::Postgres, 2);
    let config = dbs.config("");
    let token = setup_biz(&config, BIZ, 20_000, false).await;
    let app = spawn_app(config).await;
    let port: u16 = app.base.rsplit(':').next().unwrap().parse().unwrap();

    let mut tasks = Vec::new();
    for k in 0..4 {
        let c = client(&[port], &token);
        tasks.push(tokio::spawn(async move {
            let biz = c.biz(BIZ).unwrap();
            let mut ids = Vec::with_capacity(240_000);
            while ids.len() < 240_000 {
                if k % 2 == 0 {
                    ids.push(biz.next_id().await.unwrap());
                } else {
                    ids.extend(biz.next_ids(1 + ids.len() % 500).await.unwrap());
                }
            }
            ids
        }));
    }
    for _ in 0..2 {
        let (http, base, token) = (app.http.clone(), app.base.clone(), token.clone());
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            while ids.len() < 20_000 {
                let r = http
                    .get(format!(
                        "{base}/tinyid/id/nextIdSimple?bizType={BIZ}&token={token}&batchSize=100"
                    ))
                    .send()
                    .await
                    .unwrap();
                let text = r.text().await.unwrap();
                ids.extend(text.split(',').map(|v| v.parse::<i64>().unwrap()));
            }
            ids
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    assert!(all.len() >= 1_000_000, "{} IDs", all.len());
    assert_unique(&all);
    assert!(all.iter().all(|&id| id > 0));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_outlives_the_server_and_the_client_recovers() {
    let dbs = Databases::start(Kind::Postgres, 1);
    let config = dbs.config("");
    let token = setup_biz(&config, BIZ, 1_000, false).await;
    let (port, server) = server_on(config.clone(), 0).await;
    let c = client(&[port], &token);
    let biz = c.biz(BIZ).unwrap();
    let mut ids = vec![biz.next_id().await.unwrap()];
    // Past the prefetch point: the next segment is fetched too.
    while biz.cached() < 1_000 || ids.len() < 300 {
        ids.push(biz.next_id().await.unwrap());
    }
    server.stop(true).await;

    // Everything cached is still issued, then a clear error.
    let cached = biz.cached();
    assert!(cached >= 1_000, "{cached}");
    for _ in 0..cached {
        ids.push(biz.next_id().await.expect("issued from the cache"));
    }
    match biz.next_id().await.map_err(|e| e.into_kind()) {
        Err(ErrorKind::Unavailable { biz: b, reasons }) => {
            assert_eq!(b, BIZ);
            assert!(reasons.contains(&port.to_string()), "{reasons}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }

    // The server comes back on the same port: the client serves again.
    let (_, server) = server_on(config, port).await;
    // A time limit rather than a number of attempts: one attempt may wait for a fetch.
    let recovered = eventually(
        Duration::from_secs(10),
        "the client recovers when a server returns",
        async || biz.next_id().await.map_err(|e| e.to_string()),
    )
    .await;
    ids.push(recovered);
    assert_unique(&ids);
    server.stop(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_servers_killed_goes_unnoticed() {
    let dbs = Databases::start(Kind::Postgres, 2);
    let config = dbs.config("");
    // Small segments: the client fetches often, so it meets the dead server.
    let token = setup_biz(&config, BIZ, 100, false).await;
    let (a, server_a) = server_on(config.clone(), 0).await;
    let (b, server_b) = server_on(config, 0).await;
    let c = client(&[a, b], &token);
    let biz = c.biz(BIZ).unwrap();
    let worker = tokio::spawn(async move {
        let mut ids = Vec::new();
        for _ in 0..30_000 {
            ids.push(
                biz.next_id()
                    .await
                    .expect("no error while one server lives"),
            );
            if ids.len() % 100 == 0 {
                tokio::task::yield_now().await;
            }
        }
        ids
    });
    // The worker issues for a while, so that server A stops under its load.
    tokio::time::sleep(Duration::from_millis(100)).await;
    server_a.stop(false).await;
    let ids = worker.await.unwrap();
    assert_unique(&ids);
    server_b.stop(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_issues_exactly_the_ids_of_its_segments() {
    let dbs = Databases::start(Kind::Postgres, 2);
    let config = dbs.config("");
    let token = setup_biz(&config, BIZ, 64, true).await;
    let app = spawn_app(config).await;
    // Segments meant to last a millisecond stay at the row's step: many switches.
    let c = Client::builder()
        .servers([app.base.clone()])
        .token(&token)
        .segment_target(Duration::from_millis(1))
        .build()
        .unwrap();
    let biz = c.biz(BIZ).unwrap();
    biz.record_segments();

    let mut issued = Vec::new();
    for i in 0..500 {
        if i % 3 == 0 {
            issued.extend(biz.next_ids(7).await.unwrap());
        } else {
            issued.push(biz.next_id().await.unwrap());
        }
    }
    let segments = biz.segments();
    assert!(segments.len() >= 10, "{} segments", segments.len());
    let (last, earlier) = segments.split_last().unwrap();
    // Every earlier segment was issued completely, in order, and the last one from
    // its start: nothing skipped inside a segment, nothing outside the segments.
    let mut expected: Vec<i64> = earlier.iter().flat_map(|s| s.ids()).collect();
    let tail = issued.len() - expected.len();
    expected.extend(last.ids().take(tail));
    assert_eq!(issued, expected);
    assert!(issued.iter().all(|id| id % 2 == 1), "odd-only biz");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speaks_tinyid_and_reports_refusals_clearly() {
    let dbs = Databases::start(Kind::Embedded, 2);
    let config = dbs.config("");
    let token = setup_biz(&config, BIZ, 50, false).await;
    let app = spawn_app(config).await;
    let port: u16 = app.base.rsplit(':').next().unwrap().parse().unwrap();
    let tinyid = Client::builder()
        .servers([format!("http://127.0.0.1:{port}")])
        .token(&token)
        .protocol(Protocol::Tinyid)
        .build()
        .unwrap();
    let ids = tinyid.next_ids(BIZ, 200).await.unwrap();
    assert_unique(&ids);
    assert_eq!(ids.len(), 200);

    for protocol in [Protocol::V1, Protocol::Tinyid] {
        let wrong = Client::builder()
            .servers([format!("http://127.0.0.1:{port}")])
            .token("not-a-token")
            .protocol(protocol)
            .build()
            .unwrap();
        match wrong.next_id(BIZ).await.map_err(|e| e.into_kind()) {
            Err(ErrorKind::Refused { biz, .. }) => assert_eq!(biz, BIZ),
            other => panic!("{protocol:?}: expected Refused, got {other:?}"),
        }
    }
    let err = Client::builder().token("t").build().err().unwrap();
    assert!(err.to_string().contains("servers"), "{err}");
    let err = Client::builder()
        .servers(["127.0.0.1:9999"])
        .token("t")
        .build()
        .err()
        .unwrap();
    assert!(err.to_string().contains("http://"), "{err}");
    app.stop().await;
}

#[test]
fn the_blocking_client_issues_without_a_runtime() {
    let dbs = Databases::start(Kind::Embedded, 1);
    let config = dbs.config("");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let token = rt.block_on(setup_biz(&config, BIZ, 100, false));
    let (port, server) = rt.block_on(server_on(config, 0));
    let client = BlockingClient::builder()
        .servers([format!("http://127.0.0.1:{port}")])
        .token(&token)
        .build()
        .unwrap();
    let biz = client.biz(BIZ).unwrap();
    let mut ids: Vec<i64> = (0..1_000).map(|_| biz.next_id().unwrap()).collect();
    ids.extend(biz.next_ids(250).unwrap());
    assert_unique(&ids);
    assert_eq!(ids[..5], [1, 2, 3, 4, 5]);
    drop(client);
    rt.block_on(server.stop(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_client_stops_its_tasks() {
    let dbs = Databases::start(Kind::Embedded, 1);
    let config = dbs.config("");
    let token = setup_biz(&config, BIZ, 100, false).await;
    let (port, server) = server_on(config, 0).await;
    let alive = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    // Whatever the server starts on its first requests belongs to the baseline.
    {
        let warm = client(&[port], &token);
        warm.next_id(BIZ).await.unwrap();
    }
    // The warm client's tasks end and the server's settle: no state to wait for but
    // the count itself, which is what is measured.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = alive();

    let c = client(&[port], &token);
    let biz = c.biz(BIZ).unwrap();
    // Past the prefetch point of several segments: fetches ran, connections pooled.
    for _ in 0..1_000 {
        biz.next_id().await.unwrap();
    }
    assert!(alive() > before, "the client has tasks while it lives");
    drop(biz);
    drop(c);
    eventually(
        Duration::from_secs(2),
        "the client's tasks end once it is dropped",
        async || match alive() {
            now if now > before => Err(format!("{now} tasks alive, {before} before")),
            _ => Ok(()),
        },
    )
    .await;
    server.stop(false).await;
}
