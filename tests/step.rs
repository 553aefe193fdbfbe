//! Adaptive step sizing against real databases: the step follows the observed rate,
//! doubling at most per fetch and stopping at `step_max`, without rewriting the row's
//! `step`; switched off, every segment uses the row's step; segments handed to
//! clients report the step they really have. Plus the operators' views of it:
//! `/v1/bizs`, `/status` and the log line of every reservation.

use crate::common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::http::{Via, bearer, compat, get, metric, tinyid_params, v1, v1_ids};
use common::*;
use segmint::server::STOP_LIMIT;

const BIZ: &str = "order";
const ROW_STEP: i64 = 10;

/// Requests `count` IDs at a time from `tasks` tasks for `for_how_long`; every ID.
async fn load(
    app: &TestApp,
    token: &str,
    tasks: usize,
    count: usize,
    for_how_long: Duration,
) -> Vec<i64> {
    let until = Instant::now() + for_how_long;
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (app, token) = (app.remote(), token.to_string());
        handles.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            while Instant::now() < until {
                ids.extend(v1_ids(&app, BIZ, &token, count).await);
            }
            ids
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all
}

fn assert_unique(ids: &[i64]) {
    let mut seen = HashSet::with_capacity(ids.len());
    for id in ids {
        assert!(seen.insert(*id), "ID {id} issued twice");
    }
}

/// The `/v1/bizs` entry of `biz`.
async fn biz_report(app: &TestApp, biz: &str) -> serde_json::Value {
    let body = bizs(app).await;
    body["bizs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["biz"] == biz)
        .unwrap_or_else(|| panic!("{biz} missing from {body}"))
        .clone()
}

/// `/v1/bizs`: every biz and database as the server sees them.
async fn bizs(app: &TestApp) -> serde_json::Value {
    let r = get(app, "/v1/bizs").await;
    assert_eq!(r.status, 200, "{r:?}");
    r.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_follows_the_rate_up_to_the_maximum_and_leaves_the_row_alone() {
    let dbs = Databases::start(Kind::Postgres, 1);
    let config = dbs.config("step_max = 640");
    let token = setup_biz(&config, BIZ, ROW_STEP, false).await;
    let app = spawn_app(config).await;

    let ids = load(&app, &token, 4, 20, Duration::from_secs(4)).await;
    assert_unique(&ids);

    let report = biz_report(&app, BIZ).await;
    assert_eq!(report["step"], 640, "{report}");
    assert_eq!(report["last_step_reason"], "maximum", "{report}");
    let peak = report["peak_rate"].as_f64().unwrap();
    assert!(peak > 0.0, "{report}");
    // 600 × the peak rate, rounded up: well past the maximum.
    let recommended = report["recommended_step"].as_i64().unwrap();
    assert!(
        recommended as f64 >= 600.0 * peak && recommended > 640,
        "{report}"
    );
    assert!(report["issued"].as_u64().unwrap() >= ids.len() as u64);

    // The row's step column is the minimum, not rewritten; max_id moved by the chosen steps.
    let row = dbs.row(0, BIZ);
    let fields: Vec<i64> = row.split('|').map(|f| f.parse().unwrap()).collect();
    let (max_id, version, step) = (fields[0], fields[1], fields[2]);
    assert_eq!(step, ROW_STEP, "row: {row}");
    assert!(
        max_id > version * ROW_STEP,
        "segments were wider than the row's step: {row}"
    );
    assert!(
        max_id <= version * 640,
        "no segment wider than step_max: {row}"
    );

    for reason in ["growth_limited", "maximum"] {
        let n = metric(
            &app,
            &format!("segmint_step_choices_total{{biz=\"{BIZ}\",reason=\"{reason}\"}}"),
        )
        .await;
        assert!(n >= 1.0, "no step chosen for {reason}");
    }
    assert_eq!(
        metric(&app, &format!("segmint_biz_step{{biz=\"{BIZ}\"}}")).await,
        640.0
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_step_switched_off_keeps_the_row_step() {
    let dbs = Databases::start(Kind::Postgres, 1);
    let config = dbs.config("adaptive_step = false");
    let token = setup_biz(&config, BIZ, ROW_STEP, false).await;
    let app = spawn_app(config).await;

    let ids = load(&app, &token, 4, 20, Duration::from_secs(3)).await;
    assert_unique(&ids);

    let report = biz_report(&app, BIZ).await;
    assert_eq!(report["step"], ROW_STEP, "{report}");
    assert_eq!(report["last_step_reason"], "fixed", "{report}");
    assert!(
        report["recommended_step"].as_i64().unwrap() > ROW_STEP,
        "{report}"
    );
    let row = dbs.row(0, BIZ);
    let fields: Vec<i64> = row.split('|').map(|f| f.parse().unwrap()).collect();
    assert_eq!(
        fields[0],
        fields[1] * ROW_STEP,
        "every segment one row step: {row}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_segments_report_their_real_step_and_are_counted() {
    let dbs = Databases::start(Kind::Postgres, 2);
    let config = dbs.config("preload_percent = 30");
    let token = setup_biz(&config, BIZ, 100, false).await;
    let app = spawn_app(config).await;
    // Make the cache's step grow first: client segments keep the row's step anyway.
    load(&app, &token, 2, 20, Duration::from_secs(2)).await;

    let r = v1(&app, false, &format!("/v1/segments/{BIZ}"), bearer(&token)).await;
    assert_eq!(r.status, 200, "{r:?}");
    let s = r.json();
    let (current, max) = (
        s["current_id"].as_i64().unwrap(),
        s["max_id"].as_i64().unwrap(),
    );
    assert_eq!(s["step"], 100, "{s}");
    assert_eq!(max - current, 100, "{s}");
    assert_eq!(s["loading_id"], current + 30, "{s}");
    assert_eq!(s["count"], 50, "{s}");

    let r = compat(
        &app,
        "nextSegmentIdSimple",
        Via::Get,
        &tinyid_params(BIZ, &token, None),
    )
    .await;
    assert_eq!(r.status, 200);
    let f = r.numbers();
    let (current, loading, max) = (f[0], f[1], f[2]);
    assert_eq!(max - current, 100, "{r:?}");
    assert_eq!(loading, current + 30, "{r:?}");

    assert_eq!(
        metric(&app, &format!("segmint_segment_ids_total{{biz=\"{BIZ}\"}}")).await,
        100.0,
        "two segments of 50 IDs"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bizs_and_status_list_every_biz_and_database() {
    let dbs = Databases::start(Kind::Embedded, 2);
    let config = dbs.config("");
    let token = setup_biz(&config, BIZ, 100, false).await;
    setup_biz(&config, "idle", 100, false).await;
    setup_biz(&config, "clash", 100, false).await;
    // The same class on both databases: refused, with a reason.
    dbs.sql(
        1,
        "UPDATE tiny_id_info SET remainder = 0 WHERE biz_type = 'clash'",
    );
    let app = spawn_app(config).await;
    assert_eq!(v1_ids(&app, BIZ, &token, 5).await.len(), 5);

    let order = biz_report(&app, BIZ).await;
    assert_eq!(order["issued"], 5, "{order}");
    assert!(order["cached_ids"].as_u64().unwrap() > 0, "{order}");
    assert_eq!(order["step"], 100, "{order}");
    let idle = biz_report(&app, "idle").await;
    assert_eq!(idle["issued"], 0, "{idle}");
    assert_eq!(idle["step"], 0, "{idle}");
    let clash = biz_report(&app, "clash").await;
    let why = clash["refused"].as_str().unwrap_or_default();
    assert!(why.contains("pg0") && why.contains("pg1"), "{clash}");

    let body = bizs(&app).await;
    let names: Vec<&str> = body["databases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pg0", "pg1"]);
    assert_eq!(body["step_policy"]["target_secs"], 600);

    let r = get(&app, "/status").await;
    assert_eq!(r.status, 200);
    let html = r.body;
    for needle in [
        "<td>order</td>",
        "<td>idle</td>",
        "<td>clash</td>",
        "<td>pg0</td>",
        "<td>pg1</td>",
        ">up<",
    ] {
        assert!(html.contains(needle), "{needle} missing from\n{html}");
    }
    app.stop().await;
}

/// Every reservation for the cache is logged with its step and why; consecutive steps
/// never change by more than a factor of 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reservation_is_logged_with_its_step_and_reason() {
    let dbs = Databases::start(Kind::Postgres, 1);
    let toml = config_toml_urls(&dbs.urls(), "step_max = 320");
    let config = segmint::config::Config::from_toml(&toml).unwrap();
    let token = setup_biz(&config, BIZ, ROW_STEP, false).await;
    let mut server = ServerProcess::start_with_env(&toml, &[("RUST_LOG", "info")]).await;
    let remote = server.remote(Duration::from_secs(30));
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        v1_ids(&remote, BIZ, &token, 20).await;
    }
    let status = server.sigterm(STOP_LIMIT).await;
    assert_eq!(status.code(), Some(0), "SIGTERM stops the server");
    let log = server.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("reserved a segment"))
        .collect();

    let field = |line: &str, name: &str| -> String {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name}= in {line}"))
            .to_string()
    };
    let steps: Vec<(i64, String)> = lines
        .iter()
        .map(|l| (field(l, "step").parse().unwrap(), field(l, "reason")))
        .collect();
    assert!(steps.len() >= 5, "{lines:#?}");
    assert_eq!(steps[0], (ROW_STEP, "minimum".to_string()), "{lines:#?}");
    for pair in steps.windows(2) {
        let ((a, _), (b, _)) = (&pair[0], &pair[1]);
        assert!(
            *b <= a * 2 && *b * 2 >= *a,
            "step jumped from {a} to {b}: {lines:#?}"
        );
    }
    assert!(
        steps.iter().any(|(_, r)| r == "growth_limited"),
        "{lines:#?}"
    );
    assert_eq!(
        steps.last().unwrap(),
        &(320, "maximum".to_string()),
        "{lines:#?}"
    );
    for l in &lines {
        assert!(
            l.contains(&format!("biz={BIZ}")) && l.contains("database=pg0"),
            "{l}"
        );
    }
}

/// Near the top of the ID space a wide adaptive step shrinks to the room left instead
/// of refusing early; past the row's own step the biz is refused, never wrapped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_the_top_the_adaptive_step_shrinks_instead_of_refusing() {
    let dbs = Databases::start(Kind::Embedded, 1);
    let config = dbs.config("");
    setup_biz(&config, BIZ, ROW_STEP, false).await;
    let top = i64::MAX - 1_000;
    dbs.sql(
        0,
        &format!("UPDATE tiny_id_info SET max_id = {top} WHERE biz_type = '{BIZ}'"),
    );
    let store = segmint::store::Store::connect(&config).unwrap();
    let biz = segmint::biz::BizTag::parse(BIZ).unwrap();
    let wide = Some(segmint::step::StepHint {
        peak_rate: 1e6,
        previous: Some(500_000),
    });
    let r = store.reserve(&biz, wide, None).await.expect("room is left");
    assert_eq!(
        r.range.max_id(),
        i64::MAX,
        "the rest of the ID space, no more"
    );
    assert_eq!(r.range.step(), 1_000);
    let err = store.reserve(&biz, wide, None).await.unwrap_err();
    assert!(err.to_string().contains("exceeds"), "{err}");
    assert_eq!(
        dbs.row(0, BIZ).split('|').next(),
        Some(&*i64::MAX.to_string())
    );
}
