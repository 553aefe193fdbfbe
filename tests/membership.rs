//! The cluster's membership is recorded in the databases (`segmint migrate` writes the
//! layout of epoch 0) and servers take it from there, never from their configuration
//! alone: a member a server is not configured with counts as a database that does not
//! answer, and a configured database that is not a member is never used.
//!
//! The two reproductions: servers of two snowflake specs, each configured with part of
//! a static cluster, both leased worker IDs and issued equal IDs (219,507 in 6 s) when
//! each took its own configuration for the whole cluster.

use std::collections::HashSet;
use std::time::Duration;

use crate::by_kind;
use crate::common;
use common::http::{Target, get, metric, snowflakes_of, v1_ids};
use common::layout::{cli_ok, toml_for};
use common::wait::eventually;
use common::*;

/// Snowflake IDs of `order` with the JavaScript-safe layout.
const JS: &str = r#"snowflake = { enabled = true, bizs = ["order"], lease_ms = 1000, renew_ms = 200, grace_ms = 300, layout = "js" }"#;
/// The JavaScript-safe layout with renewals 2 s apart: a restored member gets its
/// record back from a renewal only seconds later, after another server has tried.
const JS_SLOW: &str = r#"snowflake = { enabled = true, bizs = ["order"], lease_ms = 4000, renew_ms = 2000, grace_ms = 300, layout = "js" }"#;
/// Another spec: the reproductions' narrower layout.
const NARROW: &str = r#"snowflake = { enabled = true, bizs = ["order"], lease_ms = 1000, renew_ms = 200, grace_ms = 300, layout = { timestamp_bits = 41, worker_bits = 6, sequence_bits = 6 } }"#;

/// A configuration naming the databases `members` of `dbs` with the classes of the
/// whole cluster of `n` (`pg{i}`: `i mod n`), whatever part of it is named.
fn part_of(dbs: &Databases, n: usize, members: &[usize], extra: &str) -> String {
    let urls = dbs.urls();
    let mut toml = format!(
        "{extra}\nbind = \"127.0.0.1:0\"\nworkers = 2\nfetch_timeout_ms = 1000\nwait_timeout_ms = 3000\n\
         backoff_initial_ms = 100\nbackoff_max_ms = 400\ncatalog_refresh_ms = 300\nadaptive_step = false\n"
    );
    for &i in members {
        toml.push_str(&format!(
            "[[databases]]\nname = \"pg{i}\"\nurl = \"{}\"\ndelta = {n}\nremainder = {i}\n",
            urls[i]
        ));
    }
    toml
}

/// Two PostgreSQL databases, classes 0 and 1 mod 2, migrated with both configured (the
/// membership recorded), biz `order` and a token for it.
fn two_databases() -> (Databases, String) {
    let dbs = Databases::start(Kind::Postgres, 2);
    let both = part_of(&dbs, 2, &[0, 1], "");
    let out = cli_ok(&both, &["migrate"]);
    assert!(
        out.contains(
            "recorded the cluster's membership (layout epoch 0): pg0 (0 mod 2), pg1 (1 mod 2)"
        ),
        "{out}"
    );
    cli_ok(&both, &["biz", "add", "order", "--step", "1000"]);
    let token = cli_ok(&both, &["token", "add", "--biz", "order"])
        .trim()
        .to_owned();
    (dbs, token)
}

/// The message of a 503 `no_worker_id` answer; panics on IDs.
async fn refusal(target: &impl Target, token: &str) -> String {
    match snowflakes_of(target, "order", token, 1).await {
        Ok(ids) => panic!("a server that must not lease issued {ids:?}"),
        Err(r) => {
            assert_eq!(r.status, 503, "{r:?}");
            r.json()["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        }
    }
}

/// Under load from `leasing` (batches of 1,000), `refused` never issues; the IDs of
/// `leasing`, which never repeat.
async fn one_leases(leasing: &impl Target, refused: &impl Target, token: &str) -> Vec<i64> {
    let mut ids = eventually(Duration::from_secs(15), "a server leases", async || {
        snowflakes_of(leasing, "order", token, 10)
            .await
            .map_err(|r| format!("{r:?}"))
    })
    .await;
    for _ in 0..20 {
        ids.extend(snowflakes_of(leasing, "order", token, 1_000).await.unwrap());
        refusal(refused, token).await;
    }
    let distinct: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "an ID issued twice");
    ids
}

/// Waits until `target` refuses for another spec, naming both: `found` recorded in a
/// database, `own` its own.
async fn refused_naming(target: &impl Target, token: &str, found: &str, own: &str) {
    eventually(
        Duration::from_secs(15),
        "a 503 naming both specs",
        async || {
            let m = refusal(target, token).await;
            if m.contains("records the snowflake spec") && m.contains(found) && m.contains(own) {
                Ok(())
            } else {
                Err(m)
            }
        },
    )
    .await;
}

/// The spec records' distinguishing parts.
const JS_BITS: &str = "worker_bits=5";
const NARROW_BITS: &str = "worker_bits=6";

/// Reproduction 1: server A (JavaScript-safe layout) configured with both databases
/// leases and confirms its spec; pg1 then loses its record (a restore from a backup
/// older than it). Server B (another layout) configured with pg1 alone never leases:
/// pg0, a member it is not configured with, counts as not answering, so B cannot record
/// its spec (its first tries come before A's next renewal), and once A's renewal has
/// written A's record back B answers 503 naming both specs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_of_another_spec_on_a_restored_member_alone_never_leases() {
    let (dbs, token) = two_databases();
    let a = ServerProcess::start(&part_of(&dbs, 2, &[0, 1], JS_SLOW)).await;
    let a_remote = a.remote(Duration::from_secs(30));
    eventually(Duration::from_secs(15), "A leases", async || {
        snowflakes_of(&a_remote, "order", &token, 1)
            .await
            .map_err(|r| format!("{r:?}"))
    })
    .await;
    dbs.sql(1, "DELETE FROM segmint_snowflake");
    let b = ServerProcess::start(&part_of(&dbs, 2, &[1], NARROW)).await;
    let b_remote = b.remote(Duration::from_secs(30));
    one_leases(&a_remote, &b_remote, &token).await;
    refused_naming(&b_remote, &token, JS_BITS, NARROW_BITS).await;
    assert_eq!(
        dbs.sql(1, "SELECT count(*) FROM segmint_snowflake"),
        "1",
        "A's record written back, not B's"
    );
    let ready = get(&b_remote, "/readyz").await.json();
    assert_eq!(
        ready["membership"]["unconfigured"],
        serde_json::json!(["pg0"])
    );
    assert_eq!(
        metric(&b_remote, "segmint_layout_members_unconfigured").await,
        1.0
    );
    assert_eq!(metric(&b_remote, "segmint_layout_recorded").await, 1.0);
}

/// Reproduction 2: A (JavaScript-safe layout) configured with pg0 alone and B (another
/// layout) with pg1 alone. Neither records a spec on its part of the cluster alone:
/// each names the member it is not configured with. Once a server configured with both
/// has recorded and confirmed the JavaScript-safe spec, A leases on its confirmed
/// record and B answers 503 naming both specs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_configured_with_parts_of_a_static_cluster_never_lease_two_specs() {
    let (dbs, token) = two_databases();
    let a = ServerProcess::start(&part_of(&dbs, 2, &[0], JS)).await;
    let b = ServerProcess::start(&part_of(&dbs, 2, &[1], NARROW)).await;
    let (a_remote, b_remote) = (
        a.remote(Duration::from_secs(30)),
        b.remote(Duration::from_secs(30)),
    );
    for remote in [&a_remote, &b_remote] {
        eventually(
            Duration::from_secs(15),
            "undecided, naming the member not configured here",
            async || {
                let m = refusal(remote, &token).await;
                match m.contains("not configured here") {
                    true => Ok(()),
                    false => Err(m),
                }
            },
        )
        .await;
    }
    assert_eq!(dbs.sql(0, "SELECT count(*) FROM segmint_snowflake"), "0");
    assert_eq!(dbs.sql(1, "SELECT count(*) FROM segmint_snowflake"), "0");

    let full = ServerProcess::start(&part_of(&dbs, 2, &[0, 1], JS)).await;
    let full_remote = full.remote(Duration::from_secs(30));
    let mut ids = eventually(
        Duration::from_secs(15),
        "the full server leases",
        async || {
            snowflakes_of(&full_remote, "order", &token, 10)
                .await
                .map_err(|r| format!("{r:?}"))
        },
    )
    .await;
    ids.extend(one_leases(&a_remote, &b_remote, &token).await);
    refused_naming(&b_remote, &token, JS_BITS, NARROW_BITS).await;
    ids.extend(
        snowflakes_of(&full_remote, "order", &token, 1_000)
            .await
            .unwrap(),
    );
    let distinct: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "an ID issued twice");
}

by_kind!(configured_databases_outside_the_membership_are_never_used);

/// Membership `{pg0: 0 mod 2, pg1: 1 mod 2}` recorded. A server configured with pg0,
/// pg1 and pg2 (and classes of three) follows the recorded classes and never uses pg2;
/// one configured with pg1 alone counts pg0 as not answering and serves pg1's class.
/// `/readyz` and the metrics say so; no ID repeats between them.
async fn configured_databases_outside_the_membership_are_never_used(kind: Kind) {
    let dbs = Databases::start(kind, 3);
    let members = part_of(&dbs, 2, &[0, 1], "");
    cli_ok(&members, &["migrate"]);
    cli_ok(&members, &["biz", "add", "order", "--step", "10"]);
    let token = cli_ok(&members, &["token", "add", "--biz", "order"])
        .trim()
        .to_owned();
    // pg2's schema, from a configuration naming all three: the membership is recorded
    // already, and stays as it was.
    let three = toml_for(&dbs, &[0, 1, 2]);
    let out = cli_ok(&three, &["migrate"]);
    assert!(out.contains("membership: recorded before"), "{out}");

    let wide = ServerProcess::start(&three).await;
    let narrow = ServerProcess::start(&part_of(&dbs, 2, &[1], "")).await;
    let (w, n) = (
        wide.remote(Duration::from_secs(30)),
        narrow.remote(Duration::from_secs(30)),
    );
    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.extend(v1_ids(&w, "order", &token, 25).await);
        let odd = v1_ids(&n, "order", &token, 25).await;
        assert!(odd.iter().all(|id| id % 2 == 1), "pg1's class: {odd:?}");
        ids.extend(odd);
    }
    let distinct: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "an ID issued twice");
    assert_eq!(
        dbs.sql(2, "SELECT count(*) FROM tiny_id_info"),
        "0",
        "pg2 unused"
    );

    let ready = get(&w, "/readyz").await.json();
    assert_eq!(
        ready["membership"]["not_members"],
        serde_json::json!(["pg2"])
    );
    assert_eq!(ready["membership"]["epoch"], 0);
    let pg2 = &ready["databases"][2];
    assert_eq!(
        (pg2["name"].as_str(), pg2["in_layout"].as_bool()),
        (Some("pg2"), Some(false))
    );
    assert_eq!(
        ready["databases"][0]["residue"], "0 mod 2",
        "the recorded class"
    );
    let ready = get(&n, "/readyz").await.json();
    assert_eq!(
        ready["membership"]["unconfigured"],
        serde_json::json!(["pg0"])
    );
    assert_eq!(metric(&n, "segmint_layout_members_unconfigured").await, 1.0);
    assert_eq!(metric(&w, "segmint_layout_members_unconfigured").await, 0.0);
    assert_eq!(
        metric(&w, "segmint_database_in_layout{database=\"pg2\"}").await,
        0.0
    );
}

/// `migrate` with a database missing from the configuration refuses to record the
/// membership, naming the IDs no database would get. A cluster whose membership was
/// never recorded (migrated by an earlier version: its layout rows deleted here) uses
/// no database: 503 saying what to run. The next command that writes rows (here `biz
/// add`, as `migrate` would) records it, with every database configured, and the
/// server serves at its next catalog read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_uses_no_database_before_the_membership_is_recorded() {
    let dbs = Databases::start(Kind::Postgres, 2);
    let both = part_of(&dbs, 2, &[0, 1], "");
    let half = part_of(&dbs, 2, &[0], "");
    let refused = common::layout::cli(&half, &["migrate"]);
    assert_eq!(refused.code, Some(1), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("give IDs like 1 to no database"),
        "{}",
        refused.stderr
    );
    assert_eq!(dbs.sql(0, "SELECT count(*) FROM segmint_layout"), "0");
    cli_ok(&both, &["migrate"]);
    cli_ok(&both, &["biz", "add", "order", "--step", "10"]);
    let token = cli_ok(&both, &["token", "add", "--biz", "order"])
        .trim()
        .to_owned();
    for i in 0..2 {
        dbs.sql(i, "DELETE FROM segmint_layout");
    }
    let server = ServerProcess::start(&both).await;
    let remote = server.remote(Duration::from_secs(30));
    let body = common::http::try_v1_ids(&remote, "order", &token, 1)
        .await
        .expect_err("no database is used");
    assert!(body.contains("segmint migrate"), "{body}");
    assert_eq!(metric(&remote, "segmint_layout_recorded").await, 0.0);
    let ready = get(&remote, "/readyz").await;
    assert_eq!(ready.status, 503, "{ready:?}");
    assert_eq!(ready.json()["membership"]["epoch"], serde_json::Value::Null);
    cli_ok(&both, &["biz", "add", "other", "--step", "10"]);
    for i in 0..2 {
        assert_eq!(
            dbs.sql(i, "SELECT state || ' ' || members FROM segmint_layout"),
            "done pg0=2:0,pg1=2:1"
        );
    }
    let ids = eventually(Duration::from_secs(15), "IDs once recorded", async || {
        common::http::try_v1_ids(&remote, "order", &token, 3).await
    })
    .await;
    assert_eq!(ids.len(), 3);
}

/// Two `segmint migrate`s of different configurations at once (one naming pg0 and
/// pg1, the other pg1 alone with every ID): at least one ends well, and the
/// databases never hold two different memberships `done`, so no two servers use
/// overlapping classes (the model's scenario M checks every interleaving).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_migrates_of_different_configurations_at_once_record_one_membership() {
    let dbs = Databases::start(Kind::Postgres, 2);
    // Schemas first (each database migrated alone, the record that made deleted), so
    // that both commands race on the membership alone.
    let both = part_of(&dbs, 2, &[0, 1], "");
    let alone = part_of(&dbs, 1, &[1], "").replace("remainder = 1", "remainder = 0");
    for i in 0..2 {
        cli_ok(
            &part_of(&dbs, 1, &[i], "").replace("remainder = 1", "remainder = 0"),
            &["migrate"],
        );
        dbs.sql(i, "DELETE FROM segmint_layout");
    }
    let runs = std::thread::scope(|s| {
        let a = s.spawn(|| common::layout::cli(&both, &["migrate"]));
        let b = s.spawn(|| common::layout::cli(&alone, &["migrate"]));
        [a.join().unwrap(), b.join().unwrap()]
    });
    assert!(
        runs.iter().any(|r| r.code == Some(0)),
        "neither recorded: {:?}",
        runs.iter().map(|r| &r.stderr).collect::<Vec<_>>()
    );
    for r in runs.iter().filter(|r| r.code != Some(0)) {
        assert!(
            r.stderr.contains("records another membership"),
            "{}",
            r.stderr
        );
    }
    let done: HashSet<String> = (0..2)
        .map(|i| dbs.sql(i, "SELECT members FROM segmint_layout WHERE state = 'done'"))
        .filter(|m| !m.is_empty())
        .collect();
    assert_eq!(done.len(), 1, "memberships done: {done:?}");
}
