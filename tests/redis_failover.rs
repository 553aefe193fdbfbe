//! `scripts/redis-failover` run on this build's segmint, as RELIABILITY.md reports it: a
//! redis-py client's `INCR`s through a failover. Redis (a replica promoted after its
//! primary was killed while the replication stream was held) hands out again every
//! number the replica had not received; segmint (a server killed, the client on the
//! other) hands out none twice, and the sequence key's numbers only go up.

use std::path::Path;

use std::time::Duration;

use crate::common::python::{redis_python, run_script};
use crate::common::*;

/// The number before `after` in `text`: `handed out 12 numbers` → 12.
fn number_before(text: &str, after: &str) -> u64 {
    let head = &text[..text
        .find(after)
        .unwrap_or_else(|| panic!("no {after:?} in {text:?}"))];
    let digits = head.trim_end().rsplit(' ').next().unwrap_or_default();
    digits
        .parse()
        .unwrap_or_else(|e| panic!("{digits:?} before {after:?}: {e}"))
}

/// A file the script wrote, read.
fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_hands_out_numbers_again_after_a_failover_and_segmint_does_not() {
    let python = redis_python().await;
    let dbs = Databases::start(Kind::Postgres, 1);
    let out = tempfile::tempdir().unwrap();
    let report_dir = out.path().join("run");
    // About 10 s on an idle machine; killed (its servers with it) if the test ends first.
    let report = run_script(
        &python,
        "scripts/redis-failover",
        |c| {
            c.arg("--bin")
                .arg(segmint_bin())
                .args(["--database-url", &dbs.urls()[0], "--out"])
                .arg(&report_dir)
        },
        Duration::from_secs(120),
    )
    .await;
    // One row a run and key.
    for run in ["Redis: primary killed", "segmint: server A killed"] {
        for key in ["`order_id`", "`msg_seq:42`"] {
            let rows = report
                .lines()
                .filter(|l| l.starts_with(&format!("| {run}")) && l.contains(key))
                .count();
            assert_eq!(rows, 1, "{run}, {key}:\n{report}");
        }
    }
    let result = report
        .lines()
        .find(|l| l.starts_with("Result: "))
        .unwrap_or_else(|| panic!("no result line:\n{report}"));
    let redis = number_before(result, " numbers twice");
    let segmint = number_before(result, ", and `msg_seq:42`");
    let back = number_before(result, " times.");
    assert!(redis > 0, "Redis handed out no number twice:\n{report}");
    assert_eq!((segmint, back), (0, 0), "{report}");
    // Redis handed out again exactly the numbers its replica had not received.
    let summary: serde_json::Value =
        serde_json::from_str(&read(&report_dir.join("summary.json"))).unwrap();
    for key in ["order_id", "msg_seq:42"] {
        let lost = summary["redis"]["lost"][key].as_u64().unwrap();
        let twice = summary["redis"]["keys"][key]["twice"].as_u64().unwrap();
        assert!(
            lost > 0 && twice == lost,
            "{key}: {lost} lost, {twice} twice"
        );
        for run in ["redis", "segmint"] {
            let after = summary[run]["keys"][key]["answers_after"].as_u64().unwrap();
            assert!(after > 0, "{run} answered {key} after the kill");
        }
    }
}
