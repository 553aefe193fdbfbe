//! Zero-waste graceful restart against real PostgreSQL: a graceful stop gives the
//! caches' unissued IDs back when nobody reserved since, so a restart continues right
//! after the last ID issued; when another server reserved in between nothing is given
//! back; a kill -9 loses at most the cached segments and never reuses one.

use crate::common;

use std::collections::HashSet;
use std::net::TcpListener;
use std::time::Duration;

use common::http::{Remote, request, send, try_v1_ids, v1_ids};
use common::*;
use reqwest::Method;
use segmint::config::Config;
use segmint::server::Application;

const BIZ: &str = "order";

/// A server in this process that stops gracefully (as on SIGTERM) when told.
struct Running {
    /// Where it answers.
    remote: Remote,
    /// Starts the graceful stop.
    stop: tokio::sync::oneshot::Sender<()>,
    /// Ends when the stop (with its give-back) is over.
    done: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start(config: Config) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let app = Application::with_listener(config, listener).await.unwrap();
    let app = common::read(app).await;
    let base = format!("http://127.0.0.1:{}", app.port());
    let remote = Remote::new(&base, Duration::from_secs(30));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let done = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));
    Running { remote, stop, done }
}

impl Running {
    async fn ids(&self, token: &str, n: usize) -> Vec<i64> {
        v1_ids(&self.remote, BIZ, token, n).await
    }

    async fn stop(self) {
        self.stop.send(()).unwrap();
        self.done.await.unwrap().unwrap();
    }
}

/// `max_id` and `version` of the biz row.
fn row(pg: &PgCluster) -> (i64, i64) {
    let r = pg.row(BIZ);
    let f: Vec<i64> = r.split('|').take(2).map(|v| v.parse().unwrap()).collect();
    (f[0], f[1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_restart_continues_after_the_last_issued_id() {
    let pg = PgCluster::start();
    let config = config(&[&pg], "preload_percent = 20\nadaptive_step = false");
    let token = setup_biz(&config, BIZ, 100, false).await;

    let server = start(config.clone()).await;
    // 30 of the first segment's 100: the next one is fetched ahead (version 2).
    let first = server.ids(&token, 30).await;
    assert_eq!(first, (1..=30).collect::<Vec<_>>());
    let pg_ref = &pg;
    eventually(
        Duration::from_secs(5),
        "the next segment fetched (max_id 200, version 2)",
        move || async move {
            match tokio::task::block_in_place(|| row(pg_ref)) {
                (200, 2) => Ok(()),
                other => Err(format!("row at {other:?}")),
            }
        },
    )
    .await;
    server.stop().await;
    // Both segments went back: the row stands at the last ID issued.
    assert_eq!(tokio::task::block_in_place(|| row(&pg)), (30, 3));

    let server = start(config.clone()).await;
    assert_eq!(
        server.ids(&token, 3).await,
        [31, 32, 33],
        "no gap after the restart"
    );
    server.stop().await;

    // A stop with nothing issued since the restart gives its whole cache back too.
    let server = start(config).await;
    send(request(&server.remote, Method::GET, "/healthz", None)).await;
    server.stop().await;
    assert_eq!(tokio::task::block_in_place(|| row(&pg)).0, 33);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_given_back_after_another_server_reserved() {
    let pg = PgCluster::start();
    let config = config(&[&pg], "preload_percent = 100\nadaptive_step = false");
    let token = setup_biz(&config, BIZ, 100, false).await;

    let a = start(config.clone()).await;
    let b = start(config.clone()).await;
    let mut ids = a.ids(&token, 10).await; // a holds (0, 100]
    ids.extend(b.ids(&token, 10).await); // b reserves (100, 200] after it
    let before = tokio::task::block_in_place(|| row(&pg));
    assert_eq!(before, (200, 2));
    a.stop().await;
    assert_eq!(
        tokio::task::block_in_place(|| row(&pg)),
        before,
        "a's segment is not the row's last reservation: nothing given back"
    );
    // b's segment is the last one: b gives back its rest.
    b.stop().await;
    assert_eq!(tokio::task::block_in_place(|| row(&pg)), (110, 3));

    let c = start(config).await;
    ids.extend(c.ids(&token, 50).await);
    c.stop().await;
    let unique: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "duplicate among {ids:?}");
    assert_eq!(ids[20], 111);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_at_most_the_cached_segments_and_reuses_none() {
    let pg = PgCluster::start();
    let toml = config_toml(&[&pg], "preload_percent = 20\nadaptive_step = false");
    let config = Config::from_toml(&toml).unwrap();
    let token = setup_biz(&config, BIZ, 100, false).await;
    // A server just started may not serve yet: ask until it does.
    let get_ids = |server: &ServerProcess, n: usize| {
        let (remote, token) = (server.remote(Duration::from_secs(30)), token.clone());
        async move {
            eventually(Duration::from_secs(20), "server did not answer", || {
                try_v1_ids(&remote, BIZ, &token, n)
            })
            .await
        }
    };

    let mut server = ServerProcess::start(&toml).await;
    let first = get_ids(&server, 30).await;
    eventually(
        Duration::from_secs(10),
        "the prefetch reserves the second segment",
        async || match tokio::task::block_in_place(|| row(&pg)) {
            (200, _) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    server.kill9(); // SIGKILL: no give-back
    let (max_id, _) = tokio::task::block_in_place(|| row(&pg));
    assert_eq!(max_id, 200, "both cached segments stay reserved");

    let server = ServerProcess::start(&toml).await;
    let after = get_ids(&server, 5).await;
    let last = *first.last().unwrap();
    assert!(
        after[0] > last,
        "an ID was reused: {} after {last}",
        after[0]
    );
    assert!(
        after[0] - last <= 2 * 100,
        "more than the two cached segments were lost: {} after {last}",
        after[0]
    );
    assert_eq!(after[0], 201);
}

/// The real binary, stopped by SIGTERM: a burst of first requests makes the pool open
/// connections while the HTTP workers ask for them, and those connections still answer
/// at the stop, after the workers are gone: every biz's cache goes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cache_goes_back_through_connections_opened_while_serving() {
    let pg = PgCluster::start();
    let extra = "preload_percent = 20\nadaptive_step = false";
    let config = config(&[&pg], extra);
    let bizs: Vec<String> = (0..12).map(|i| format!("burst{i}")).collect();
    let mut tokens = Vec::new();
    for biz in &bizs {
        tokens.push(setup_biz(&config, biz, 100, false).await);
    }
    let mut server = ServerProcess::start(&config_toml(&[&pg], extra)).await;
    {
        // Dropped before the stop: no idle keep-alive connection for it to wait on.
        let remote = Remote::new(&server.base, Duration::from_secs(30));
        let firsts = futures_util::future::join_all(
            bizs.iter()
                .zip(&tokens)
                .map(|(biz, token)| v1_ids(&remote, biz, token, 3)),
        )
        .await;
        assert!(firsts.iter().all(|ids| *ids == [1, 2, 3]), "{firsts:?}");
    }
    let stopped = server.terminate_within(Duration::from_secs(30)).await;
    assert!(
        stopped.is_some_and(|(_, status)| status.success()),
        "{stopped:?}"
    );
    let rows: Vec<(String, String)> = tokio::task::block_in_place(|| {
        bizs.iter()
            .map(|biz| {
                let row = pg.row(biz);
                (
                    biz.clone(),
                    row.split('|').take(2).collect::<Vec<_>>().join("|"),
                )
            })
            .collect()
    });
    // max_id back at the last ID issued, one version past the reservation.
    let expected: Vec<(String, String)> = bizs
        .iter()
        .map(|biz| (biz.clone(), "3|2".to_string()))
        .collect();
    assert_eq!(rows, expected, "{}", server.log_text());
}
