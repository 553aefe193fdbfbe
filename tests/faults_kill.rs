//! Fault matrix: a database killed while a reservation is in flight. The reservation's
//! `UPDATE` waits on a row lock held by another session when the database is stopped
//! at once (`pg_ctl -m immediate`, as a crash): its outcome never reaches segmint, so
//! its segment must give no IDs, and once the database is back nothing is reissued.

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;

const BIZ: &str = "order";

/// `Ok` once the `SELECT count(*)` `count` is no longer zero on `cluster`.
fn nonzero(cluster: &PgCluster, count: &str) -> Result<(), String> {
    match tokio::task::block_in_place(|| cluster.psql(count)).as_str() {
        "0" => Err("none yet".into()),
        _ => Ok(()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_killed_during_a_reservation_gives_no_ids_from_it() {
    let cluster = PgCluster::start();
    let extra = "adaptive_step = false\nfetch_timeout_ms = 5000\nwait_timeout_ms = 8000";
    let config = common::config(&[&cluster], extra);
    let token = setup_biz(&config, BIZ, 10, false).await;
    let app = shared(spawn_app(common::config(&[&cluster], extra)).await);
    let mut seen = HashSet::new();
    for id in app.ids(BIZ, &token, 5).await {
        assert!(seen.insert(id));
    }

    // Another session holds the row: the next reservation's UPDATE waits on it.
    let _lock = cluster.psql_background(&format!(
        "BEGIN; SELECT * FROM tiny_id_info WHERE biz_type = '{BIZ}' FOR UPDATE; SELECT pg_sleep(60); COMMIT"
    ));
    eventually(
        Duration::from_secs(10),
        "the row lock is taken",
        async || {
            nonzero(
                &cluster,
                "SELECT count(*) FROM pg_locks WHERE mode = 'RowShareLock'",
            )
        },
    )
    .await;
    let before = cluster.row(BIZ);
    // More IDs than the cache holds: the request waits for a reservation.
    let waiting = {
        let (app, token) = (app.clone(), token.clone());
        tokio::spawn(async move {
            app.get_v1(&format!("/v1/ids/{BIZ}?count=40"), Some(&token))
                .await
        })
    };
    eventually(
        Duration::from_secs(10),
        "a reservation waits on the row lock",
        async || {
            nonzero(
                &cluster,
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
            )
        },
    )
    .await;
    tokio::task::block_in_place(|| cluster.stop());
    let (status, body) = waiting.await.unwrap();
    assert_ne!(
        status, 200,
        "a reservation whose outcome was lost gave IDs: {body}"
    );
    assert!(
        body.to_string().contains("unavailable") || status == 503,
        "{status} {body}"
    );

    tokio::task::block_in_place(|| cluster.start_again());
    assert_eq!(
        cluster.row(BIZ),
        before,
        "the killed reservation never committed"
    );
    let mut after = 0;
    eventually(
        Duration::from_secs(20),
        "100 IDs after the restart",
        async || {
            while after < 100 {
                let (status, body) = app
                    .get_v1(&format!("/v1/ids/{BIZ}?count=1"), Some(&token))
                    .await;
                if status != 200 {
                    return Err(format!("{after} so far, then {status} {body}"));
                }
                let id = body["ids"][0].as_i64().unwrap();
                assert!(
                    seen.insert(id),
                    "ID {id} issued twice after the database came back"
                );
                after += 1;
            }
            Ok(())
        },
    )
    .await;
    let max_id: i64 = cluster.row(BIZ).split('|').next().unwrap().parse().unwrap();
    assert!(
        seen.iter().all(|id| *id <= max_id),
        "every ID lies below the row's max_id"
    );
    app.stop().await;
}
