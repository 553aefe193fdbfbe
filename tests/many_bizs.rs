//! Many bizs on one server: `/v1/bizs` a page at a time (every biz once while bizs
//! are added, by rate and runway, bad parameters refused), `/status` and `/metrics`
//! of a size that does not grow with the number of bizs.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::http::get;
use common::*;
use serde_json::Value;

/// Adds `tenant-{from}` … `tenant-{to - 1}` (six digits) in one statement.
fn add_tenants(dbs: &Databases, from: usize, to: usize) {
    dbs.sql(
        0,
        &format!(
            "INSERT INTO tiny_id_info (biz_type, step) \
             SELECT 'tenant-' || lpad(g::text, 6, '0'), 100 FROM generate_series({from}, {}) g",
            to - 1
        ),
    );
}

/// Waits until the server lists `n` bizs.
async fn wait_for_bizs(app: &TestApp, n: u64) {
    eventually(Duration::from_secs(10), "the catalog refresh", async || {
        let total = get(app, "/v1/bizs?limit=1").await.json()["total"].clone();
        (total == n).then_some(()).ok_or(format!("total {total}"))
    })
    .await;
}

/// The names of a `/v1/bizs` page.
fn names(page: &Value) -> Vec<String> {
    page["bizs"]
        .as_array()
        .unwrap_or_else(|| panic!("no bizs in {page}"))
        .iter()
        .map(|b| b["biz"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_by_name_shows_every_biz_once_in_order_while_bizs_are_added() {
    let dbs = Databases::start(Kind::Postgres, 1);
    let config = dbs.config("catalog_refresh_ms = 50");
    setup_biz(&config, "tenant-000000", 100, false).await;
    add_tenants(&dbs, 1, 300);
    let app = spawn_app(config).await;
    wait_for_bizs(&app, 300).await;
    let before: Vec<String> = (0..300).map(|i| format!("tenant-{i:06}")).collect();

    let mut seen = Vec::new();
    let mut path = "/v1/bizs?limit=7".to_string();
    for page_number in 0.. {
        let r = get(&app, &path).await;
        assert_eq!(r.status, 200, "{r:?}");
        let page = r.json();
        let shown = names(&page);
        assert!(shown.len() <= 7, "{page}");
        seen.extend(shown);
        // Bizs added between pages: one sorting before every page, one after.
        dbs.sql(
            0,
            &format!(
                "INSERT INTO tiny_id_info (biz_type, step) VALUES \
                 ('tenant-000000-{page_number}', 100), ('tenant-999999-{page_number}', 100)"
            ),
        );
        match page["next"].as_str() {
            None => break,
            Some(next) => path = format!("/v1/bizs?limit=7&after={next}"),
        }
    }
    let old: Vec<&String> = seen.iter().filter(|n| before.contains(n)).collect();
    assert_eq!(
        old,
        before.iter().collect::<Vec<_>>(),
        "every biz there before the first page, once and in order"
    );
    let distinct: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), seen.len(), "none twice");
    assert!(
        seen.iter().any(|n| n.starts_with("tenant-999999-")),
        "bizs added ahead of the cursor are shown"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bizs_sort_by_rate_and_by_runway_and_bad_parameters_are_refused() {
    let dbs = Databases::start(Kind::Postgres, 1);
    let config = dbs.config("adaptive_step = false");
    // `busy` issues the most, `short` the fewest but from a tiny step: the shortest
    // runway. `unused-*` never issue.
    let mut tokens = Vec::new();
    for (biz, step, ids) in [("busy", 1000, 200), ("medium", 1000, 40), ("short", 10, 9)] {
        tokens.push((biz, setup_biz(&config, biz, step, false).await, ids));
    }
    for biz in ["unused-a", "unused-b"] {
        setup_biz(&config, biz, 100, false).await;
    }
    let app = spawn_app(config).await;
    for (biz, token, ids) in &tokens {
        for _ in 0..*ids {
            app.ids(biz, token, 1).await;
        }
    }
    // Rates are sampled once a second, and a sample may catch a biz midway through its
    // requests (a CI run met `short` ranked by 1 ID of its 9): the rates are read until
    // two reads more than a second apart, a sample between them, agree.
    let mut previous: Option<Vec<f64>> = None;
    eventually_every(
        Duration::from_millis(1100),
        Duration::from_secs(10),
        "every rate sampled with all its requests",
        async || {
            let page = get(&app, "/v1/bizs?sort=name").await.json();
            let rates: Vec<f64> = page["bizs"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|b| b["rate"].as_f64())
                .collect();
            let settled = rates.iter().filter(|r| **r > 0.0).count() == 3
                && previous.as_ref() == Some(&rates);
            previous = Some(rates);
            settled.then_some(()).ok_or(format!("{page}"))
        },
    )
    .await;

    let sorted = async |sort: &str, limit: usize| {
        let mut all = Vec::new();
        let mut path = format!("/v1/bizs?sort={sort}&limit={limit}");
        loop {
            let r = get(&app, &path).await;
            assert_eq!(r.status, 200, "{r:?}");
            let page = r.json();
            assert_eq!(page["total"], 5, "{page}");
            all.extend(names(&page));
            match page["next"].as_str() {
                None => return all,
                Some(next) => path = format!("/v1/bizs?sort={sort}&limit={limit}&after={next}"),
            }
        }
    };
    for limit in [1, 2, 3, 5] {
        assert_eq!(
            sorted("rate", limit).await,
            ["busy", "medium", "short", "unused-a", "unused-b"],
            "limit {limit}"
        );
        assert_eq!(
            sorted("runway", limit).await,
            ["short", "busy", "medium", "unused-a", "unused-b"],
            "limit {limit}"
        );
    }
    let page = get(&app, "/v1/bizs?sort=rate&q=US").await.json();
    assert_eq!(names(&page), ["busy", "unused-a", "unused-b"], "{page}");
    assert_eq!(page["total"], 3);

    let rate_cursor = get(&app, "/v1/bizs?sort=rate&limit=1").await.json()["next"]
        .as_str()
        .unwrap()
        .to_string();
    for (query, names) in [
        ("limit=0", "`limit`"),
        ("limit=1001", "`limit`"),
        ("limit=ten", "`limit`"),
        ("sort=size", "`sort`"),
        ("after=not-a-cursor", "`after`"),
        (&format!("after={rate_cursor}"), "`sort=rate`"),
        (&format!("q={}", "x".repeat(64)), "`q`"),
    ] {
        for route in ["/v1/bizs", "/status"] {
            let r = get(&app, &format!("{route}?{query}")).await;
            assert_eq!(r.status, 400, "{route}?{query}: {r:?}");
            let error = &r.json()["error"];
            assert_eq!(error["code"], "bad_request", "{route}?{query}");
            let message = error["message"].as_str().unwrap();
            assert!(message.contains(names), "{route}?{query}: {message}");
        }
    }
    app.stop().await;
}

/// The number of bizs' rows in a `/status` page.
fn biz_rows(html: &str) -> usize {
    let bizs = html.split("<h2>Databases</h2>").next().unwrap_or_default();
    bizs.matches("<tr><td>").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_metrics_stay_the_same_size_with_ten_times_the_bizs() {
    let dbs = Databases::start(Kind::Postgres, 1);
    let config = dbs.config("metrics_max_bizs = 3");
    let token = setup_biz(&config, "tenant-000000", 100, false).await;
    add_tenants(&dbs, 1, 200);
    let app = spawn_app(config.clone()).await;
    wait_for_bizs(&app, 200).await;
    let small = get(&app, "/status").await;
    assert_eq!(small.status, 200);
    assert_eq!(biz_rows(&small.body), 50, "{}", small.body);
    assert!(
        small.body.contains("200 bizs known, 0 in use"),
        "{}",
        small.body
    );

    add_tenants(&dbs, 200, 2_000);
    wait_for_bizs(&app, 2_000).await;
    let large = get(&app, "/status").await;
    assert_eq!(biz_rows(&large.body), 50);
    assert!(large.body.contains("2000 bizs known"), "{}", large.body);
    assert!(
        large.body.len() <= small.body.len() + 64,
        "/status grew from {} to {} bytes",
        small.body.len(),
        large.body.len()
    );

    // The search, and the next page through the page's own link.
    let found = get(&app, "/status?q=TENANT-00019").await.body;
    assert_eq!(biz_rows(&found), 10, "{found}");
    assert!(found.contains("10 of 10 matching"), "{found}");
    assert!(!found.contains("rel=\"next\""), "{found}");
    let next = large
        .body
        .split("<a href=\"")
        .find_map(|a| a.split_once("\" rel=\"next\"").map(|(href, _)| href))
        .unwrap_or_else(|| panic!("no link to the next page in {}", large.body))
        .replace("&amp;", "&");
    let second = get(&app, &format!("/{next}")).await;
    assert_eq!(second.status, 200, "{second:?}");
    assert!(
        second.body.contains("<td>tenant-000050</td>"),
        "{}",
        second.body
    );
    assert!(!second.body.contains("<td>tenant-000049</td>"));

    // `/metrics`: with more bizs than `metrics_max_bizs`, only the busiest in use
    // have series of their own (not the first by name); the rest count under `_other`.
    let mut issued = 0;
    for (i, n) in [(0, 10), (1, 20), (2, 30), (3, 40), (4, 50)] {
        let biz = format!("tenant-{i:06}");
        let token = match i {
            0 => token.clone(),
            _ => add_token(&config, &biz).await,
        };
        for _ in 0..n {
            app.ids(&biz, &token, 1).await;
        }
        issued += n;
    }
    // Scraped once the rates are sampled, every request of each biz counted (the
    // busiest three by rate are then the last three: on a loaded machine a sample once
    // caught `tenant-000004` with part of its requests, below `tenant-000001`), so that
    // no biz loses its series between scrapes and the sum below is of every count.
    eventually(Duration::from_secs(10), "rates sampled", async || {
        let page = get(&app, "/v1/bizs?sort=rate&limit=5").await.json();
        let last = page["bizs"][4]["rate"].as_f64().unwrap_or_default();
        let first: Vec<&str> = (0..3)
            .filter_map(|i| page["bizs"][i]["biz"].as_str())
            .collect();
        (last > 0.0 && first == ["tenant-000004", "tenant-000003", "tenant-000002"])
            .then_some(())
            .ok_or(format!("{page}"))
    })
    .await;
    let text = get(&app, "/metrics").await.body;
    let labels: BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once("biz=\"")?.1.split_once('"'))
        .map(|(biz, _)| biz)
        .collect();
    assert_eq!(
        labels,
        BTreeSet::from(["_other", "tenant-000002", "tenant-000003", "tenant-000004"]),
        "{text}"
    );
    let issued_series: f64 = text
        .lines()
        .filter_map(|l| l.strip_prefix("segmint_ids_issued_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert_eq!(
        issued_series, issued as f64,
        "the sum over bizs misses nothing"
    );
    for (state, n) in [("known", 2_000), ("in_use", 5), ("own_series", 3)] {
        assert!(
            text.contains(&format!("segmint_bizs{{state=\"{state}\"}} {n}\n")),
            "{state}: {text}"
        );
    }
    app.stop().await;
}
