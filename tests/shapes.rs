//! Per-biz ID order and format through real processes: a million IDs per order mode
//! from two servers sharing two PostgreSQL databases (no duplicate, classes kept,
//! shuffled IDs inside their segments, opaque IDs without visible order), formatted
//! IDs as strings that `segmint id decode` reads back, segment routes refused for keyed
//! orders, and bad `biz add` flags refused with nothing changed.

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use common::cli::{CliCluster, segmint_cli};
use common::http::{Remote, Resp, Target, Via, bearer, compat, tinyid_params, v1};
use common::*;

/// Segments of a fixed size, so that a segment is exactly one block of the shuffled
/// order.
const STEP: i64 = 100_000;

/// `/v1/ids/{biz}?count=N` as JSON values (numbers or strings).
async fn v1_values(
    target: &impl Target,
    biz: &str,
    token: &str,
    query: &str,
) -> Vec<serde_json::Value> {
    let r = v1(
        target,
        false,
        &format!("/v1/ids/{biz}?{query}"),
        bearer(token),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    r.json()["ids"].as_array().expect("ids").clone()
}

/// A million IDs of `biz` from the two servers, 100,000 per request, each response's
/// IDs in the order issued.
async fn million(servers: &[Remote], biz: &str, token: &str) -> Vec<Vec<i64>> {
    let runs = servers.iter().map(|s| async move {
        let mut batches = Vec::new();
        for _ in 0..5 {
            let ids = v1_values(s, biz, token, "count=100000").await;
            batches.push(ids.iter().map(|v| v.as_i64().expect("a number")).collect());
        }
        batches
    });
    futures_util::future::join_all(runs).await.concat()
}

fn increasing_share(ids: &[i64]) -> f64 {
    let up = ids.windows(2).filter(|w| w[0] < w[1]).count();
    up as f64 / (ids.len() - 1) as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_ids_per_order_from_two_servers_are_unique_and_keep_their_classes() {
    let setup = CliCluster::start("adaptive_step = false");
    let seq = setup.add("seq", STEP, &[]);
    let shuf = setup.add("shuf", STEP, &["--order", "shuffled", "--odd"]);
    let opq = setup.add("opq", STEP, &["--order", "opaque", "--domain", "js"]);
    let a = ServerProcess::start(&setup.toml).await;
    let b = ServerProcess::start(&setup.toml).await;
    let servers = [
        a.remote(Duration::from_secs(60)),
        b.remote(Duration::from_secs(60)),
    ];

    let sequential = million(&servers, "seq", &seq).await;
    let all: Vec<i64> = sequential.concat();
    assert_unique(&all);
    // Sequential IDs increase within a segment (a batch spans segments of both
    // databases, so a step down may come between two).
    for batch in &sequential {
        let share = increasing_share(batch);
        assert!(share > 0.999, "sequential: {share} of pairs increase");
    }

    let shuffled = million(&servers, "shuf", &shuf).await;
    let all: Vec<i64> = shuffled.concat();
    assert_eq!(all.len(), 1_000_000);
    assert_unique(&all);
    assert!(all.iter().all(|id| id % 2 == 1), "odd-only stays odd");
    for batch in &shuffled {
        let share = increasing_share(batch);
        assert!(
            (0.4..0.6).contains(&share),
            "shuffled: {share} of pairs increase"
        );
    }
    // Inside its segment: the sequential value behind an ID is in the same segment
    // (STEP wide, segments aligned on STEP with the adaptive step off).
    for &id in all.iter().step_by(100_003).take(10) {
        let decoded = setup.decode("shuf", &id.to_string());
        let sequential: i64 = decoded
            .split("sequential value ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{decoded}"));
        assert_eq!((id - 1) / STEP, (sequential - 1) / STEP, "{decoded}");
        assert!(decoded.contains("database \"pg"), "{decoded}");
    }

    let opaque = million(&servers, "opq", &opq).await;
    let all: Vec<i64> = opaque.concat();
    assert_unique(&all);
    assert!(
        all.iter().all(|&id| id > 0 && id < 1 << 53),
        "inside the js domain"
    );
    let share = increasing_share(&all);
    assert!(
        (0.45..0.55).contains(&share),
        "opaque: {share} of pairs increase"
    );
    // The largest of a million tells nothing of the volume: it lies far above it.
    assert!(*all.iter().max().unwrap() > 1 << 40);

    // Two databases: both classes of the servers' rows were used for each biz.
    for biz in ["seq", "shuf", "opq"] {
        for db in 0..2 {
            let row = setup.dbs.row(db, biz);
            assert!(!row.is_empty(), "{biz} on pg{db}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn formats_write_strings_that_decode_back() {
    let setup = CliCluster::start("adaptive_step = false");
    let sms = setup.add("sms", STEP, &["--prefix", "sms_", "--width", "12"]);
    let code = setup.add(
        "code",
        STEP,
        &[
            "--order",
            "opaque",
            "--domain",
            "digits:10",
            "--base",
            "36",
            "--check",
            "--width",
            "7",
        ],
    );
    let plain = setup.add("plain", STEP, &[]);
    let server = ServerProcess::start(&setup.toml).await;
    let remote = server.remote(Duration::from_secs(10));

    let ids = v1_values(&remote, "sms", &sms, "count=3").await;
    let texts: Vec<&str> = ids.iter().map(|v| v.as_str().expect("a string")).collect();
    assert!(
        texts[0].starts_with("sms_") && texts[0].len() == 16,
        "{texts:?}"
    );
    let decoded = setup.decode("sms", texts[0]);
    assert!(decoded.contains("sequential value"), "{decoded}");

    let codes = v1_values(&remote, "code", &code, "count=200").await;
    let codes: Vec<String> = codes
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    assert!(codes.iter().all(|c| c.len() == 8), "{codes:?}");
    assert_eq!(codes.iter().collect::<HashSet<_>>().len(), 200);
    let decoded = setup.decode("code", &codes[0]);
    assert!(decoded.contains("(opaque)"), "{decoded}");
    // A mistyped character is caught by the check character.
    let mut typo = codes[0].clone().into_bytes();
    typo[2] = if typo[2] == b'0' { b'1' } else { b'0' };
    let typo = String::from_utf8(typo).unwrap();
    let run = segmint_cli(setup.file.path(), &["id", "decode", "code", &typo], &[]);
    assert!(
        !run.ok() && run.stderr.contains("check character"),
        "{run:?}"
    );

    // Tinyid's routes keep answering numbers; they decode to the same format.
    let r = compat(
        &remote,
        "nextIdSimple",
        Via::Get,
        &tinyid_params("sms", &sms, Some("2")),
    )
    .await;
    assert_eq!(r.numbers().len(), 2, "{r:?}");
    // Any biz's IDs as strings on request; a formatted biz cannot answer numbers, and
    // asking changes nothing.
    let as_strings = v1_values(&remote, "plain", &plain, "count=2&as=string").await;
    assert!(
        as_strings.iter().all(serde_json::Value::is_string),
        "{as_strings:?}"
    );
    let before = setup.dbs.row(0, "sms") + &setup.dbs.row(1, "sms");
    let r = v1(
        &remote,
        false,
        "/v1/ids/sms?count=1&as=number",
        bearer(&sms),
    )
    .await;
    assert_eq!(r.status, 400, "{r:?}");
    let r = v1(&remote, false, "/v1/ids/plain?as=text", bearer(&plain)).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(before, setup.dbs.row(0, "sms") + &setup.dbs.row(1, "sms"));
}

/// Segments of a keyed order are not handed out (a client could not apply the order
/// without the key): Tinyid's segment routes answer code 6, the v1 route 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_of_keyed_orders_are_refused() {
    let setup = CliCluster::start("adaptive_step = false");
    let shuf = setup.add("shuf", STEP, &["--order", "shuffled"]);
    let app = ServerProcess::start(&setup.toml).await;
    let remote = app.remote(Duration::from_secs(10));
    let r: Resp = compat(
        &remote,
        "nextSegmentId",
        Via::Get,
        &tinyid_params("shuf", &shuf, None),
    )
    .await;
    assert_eq!(r.json()["code"], 6, "{r:?}");
    assert!(r.body.contains("shuffled"), "{r:?}");
    let r = v1(&remote, false, "/v1/segments/shuf", bearer(&shuf)).await;
    assert_eq!(r.status, 409, "{r:?}");
    assert_eq!(r.json()["error"]["code"], "segments_unavailable", "{r:?}");
    // Its IDs are served.
    assert_eq!(v1_values(&remote, "shuf", &shuf, "count=5").await.len(), 5);
    // A shape edited by hand on one database: the databases disagree on the order, so
    // the biz is refused rather than served under either.
    setup.dbs.sql(
        1,
        "UPDATE segmint_biz_shape SET shape_key = repeat('0', 32)",
    );
    eventually(Duration::from_secs(10), "the biz refused", async || {
        let r = v1(&remote, false, "/v1/ids/shuf", bearer(&shuf)).await;
        if r.status == 500 && r.body.contains("shape row differs") {
            Ok(())
        } else {
            Err(format!("{r:?}"))
        }
    })
    .await;
}

/// Bad flags name the flag and change nothing.
#[test]
fn bad_shapes_are_refused_and_change_nothing() {
    let setup = CliCluster::start("adaptive_step = false");
    for (args, mentions) in [
        (vec!["--order", "random"], "--order"),
        (
            vec!["--order", "opaque", "--domain", "digits:99"],
            "--domain",
        ),
        (vec!["--prefix", "a b"], "--prefix"),
        (vec!["--base", "16"], "--base"),
        (vec!["--width", "3"], "--width"),
        (vec!["--order", "opaque", "--domain", "digits:3"], "domain"),
        (vec!["--reset", "daily"], "--reset"),
        (vec!["--format", "ORD{MM}{seq:04}"], "--format"),
        (
            vec!["--format", "ORD{yyyy}{seq:04}", "--reset", "daily"],
            "--reset",
        ),
        (
            vec!["--format", "ORD{yyyy}{seq:04}", "--reset", "hourly"],
            "--reset",
        ),
        (
            vec!["--format", "{yyyy}{MM}{dd}{seq:06}", "--zone", "Mars/Base"],
            "--zone",
        ),
        (
            vec!["--format", "{yyyy}{seq:02}", "--start", "100"],
            "--start",
        ),
        (
            vec!["--format", "{yyyy}{seq:04}", "--order", "shuffled"],
            "--format",
        ),
        (vec!["--format", "{yyyy}{MM}{dd}{seq:011}"], "--format"),
    ] {
        let mut all = vec!["biz", "add", "bad", "--step", "1000"];
        all.extend_from_slice(&args);
        let run = segmint_cli(setup.file.path(), &all, &[]);
        assert!(!run.ok(), "{args:?}: {run:?}");
        assert!(run.stderr.contains(mentions), "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("nothing changed"),
            "{args:?}: {}",
            run.stderr
        );
        all.push("--json");
        let e = segmint_cli(setup.file.path(), &all, &[]).failure();
        assert_eq!(e["reason"], "invalid_shape", "{args:?}: {e}");
        assert!(
            e["message"].as_str().is_some_and(|m| m.contains(mentions)),
            "{args:?}: {e}"
        );
        for db in 0..2 {
            assert_eq!(
                setup.dbs.sql(
                    db,
                    "SELECT count(*) FROM tiny_id_info WHERE biz_type = 'bad'"
                ),
                "0"
            );
        }
    }
}
