//! No duplicate, ever: two servers × two databases, many concurrent clients mixing
//! single IDs, batches and whole segments through both APIs.

use crate::common;

use std::collections::HashMap;

use common::http::{Via, bearer, compat, next_id_simple, tinyid_params, v1, v1_ids};
use common::*;
use rand::Rng;

/// IDs one client saw, with what it needs for the per-database order check.
#[derive(Default)]
struct Seen {
    /// Every ID, from any route.
    all: Vec<i64>,
    /// IDs issued by a server (not whole segments), by (server, residue mod 4), in
    /// the order received: each server issues a database's IDs in increasing order.
    issued: HashMap<(usize, i64), Vec<i64>>,
    segments: usize,
}

/// Every ID of a Tinyid segment `currentId,loadingId,maxId,delta,remainder`.
fn segment_ids(current: i64, max: i64, delta: i64, remainder: i64) -> Vec<i64> {
    ((current + 1)..=max)
        .filter(|x| x.rem_euclid(delta) == remainder)
        .collect()
}

async fn client(apps: &[TestApp], token: &str, target: usize, seed: u64) -> Seen {
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
    let mut seen = Seen::default();
    while seen.all.len() < target {
        let server = rng.random_range(0..apps.len());
        let app = &apps[server];
        let op = rng.random_range(0..10);
        let ids: Vec<i64> = match op {
            0..=2 => {
                let r = next_id_simple(app, "odd", token).await;
                assert_eq!(r.status, 200);
                let id = r.numbers();
                assert_eq!(id.len(), 1, "nextIdSimple answered {r:?}");
                id
            }
            3..=4 => {
                let n = rng.random_range(2..300).to_string();
                let params = tinyid_params("odd", token, Some(&n));
                let r = compat(app, "nextId", Via::Get, &params).await;
                assert_eq!(r.status, 200);
                let v = r.json();
                assert_eq!(v["code"], 200, "{r:?}");
                serde_json::from_value(v["data"].clone()).unwrap()
            }
            5..=7 => v1_ids(app, "odd", token, rng.random_range(1..400)).await,
            8 => {
                let params = tinyid_params("odd", token, None);
                let r = compat(app, "nextSegmentIdSimple", Via::Get, &params).await;
                assert_eq!(r.status, 200);
                let f = r.numbers();
                assert_eq!(f.len(), 5, "{r:?}");
                assert!(
                    [1, 3].contains(&f[4]) && f[3] == 4,
                    "odd biz rows are 1 or 3 mod 4: {r:?}"
                );
                seen.segments += 1;
                seen.all.extend(segment_ids(f[0], f[2], f[3], f[4]));
                continue;
            }
            _ => {
                let r = v1(app, false, "/v1/segments/odd", bearer(token)).await;
                assert_eq!(r.status, 200, "{r:?}");
                let body = r.json();
                let get = |k: &str| body[k].as_i64().unwrap();
                let ids = segment_ids(
                    get("current_id"),
                    get("max_id"),
                    get("delta"),
                    get("remainder"),
                );
                assert_eq!(ids.len() as i64, get("count"));
                assert_eq!(ids.first().copied(), Some(get("first_id")));
                seen.segments += 1;
                seen.all.extend(ids);
                continue;
            }
        };
        for id in ids {
            seen.issued
                .entry((server, id.rem_euclid(4)))
                .or_default()
                .push(id);
            seen.all.push(id);
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_two_databases_never_duplicate() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let config = config(&[&a, &b], "preload_percent = 20");
    let token = setup_biz(&config, "odd", 500, true).await;
    let apps = shared(vec![
        spawn_app(config.clone()).await,
        spawn_app(config).await,
    ]);

    const CLIENTS: usize = 16;
    const PER_CLIENT: usize = 13_000;
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (apps, token) = (apps.clone(), token.clone());
            tokio::spawn(async move { client(&apps, &token, PER_CLIENT, i as u64).await })
        })
        .collect();

    let mut all = Vec::new();
    let mut segments = 0;
    for t in tasks {
        let seen = t.await.expect("client task");
        for ((server, class), ids) in &seen.issued {
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "server {server} issued IDs of class {class} mod 4 out of order"
            );
        }
        segments += seen.segments;
        all.extend(seen.all);
    }

    assert!(all.len() >= 200_000, "only {} IDs", all.len());
    assert!(segments > 0, "no segment route was exercised");
    if let Some(even) = all.iter().find(|id| *id % 2 == 0) {
        panic!("odd-only biz issued the even ID {even}");
    }
    let total = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), total, "{} duplicate IDs", total - all.len());
    // Both databases were used: the classes 1 mod 4 (pg0) and 3 mod 4 (pg1) both occur.
    assert!(all.iter().any(|id| id % 4 == 1) && all.iter().any(|id| id % 4 == 3));
    assert!(a.version("odd") > 0 && b.version("odd") > 0);
}
