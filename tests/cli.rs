//! The `segmint` binary: admin subcommands, environment overrides, graceful stop.

use crate::common;

use std::time::Duration;

use common::cli::{config_file, segmint_cli};
use common::http::{Via, compat_request, request, tinyid_params, try_send};
use common::wait::{until_locker_sleeps, until_segmint_waits_on_lock};
use common::*;
use reqwest::Method;

/// Runs `segmint --config FILE args…`; returns (success, stdout, stderr).
fn segmint(config: &tempfile::NamedTempFile, args: &[&str]) -> (bool, String, String) {
    let run = segmint_cli(config.path(), args, &[]);
    (run.ok(), run.stdout, run.stderr)
}

#[test]
fn admin_commands_report_per_database() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let cfg = config_file(&config_toml(&[&a, &b], ""));

    let (ok, out, err) = segmint(&cfg, &["migrate"]);
    assert!(ok, "{err}");
    assert_eq!(
        out,
        "\"pg0\": applied 0001_init, 0002_witness, 0003_token_lifecycle, 0004_description, 0005_worker_lease, 0006_biz_shape, 0007_layout, 0008_layout_claim, 0009_change_feed, 0010_token_lookup, 0011_biz_period, 0012_snowflake_layout, 0013_sequence_section\n\"pg1\": applied 0001_init, 0002_witness, 0003_token_lifecycle, 0004_description, 0005_worker_lease, 0006_biz_shape, 0007_layout, 0008_layout_claim, 0009_change_feed, 0010_token_lookup, 0011_biz_period, 0012_snowflake_layout, 0013_sequence_section\nrecorded the cluster's membership (layout epoch 0): pg0 (0 mod 2), pg1 (1 mod 2)\n"
    );
    let (ok, out, _) = segmint(&cfg, &["migrate"]);
    assert!(ok);
    assert_eq!(
        out,
        "\"pg0\": schema up to date\n\"pg1\": schema up to date\nmembership: recorded before (servers follow the stored layout)\n",
        "migrate is idempotent"
    );

    let (ok, out, err) = segmint(&cfg, &["biz", "add", "order", "--step", "1000", "--even"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("\"pg0\": added biz `order`") && out.contains("\"pg1\": added biz `order`"),
        "{out}"
    );
    assert_eq!(a.row("order"), "0|0|1000|4|0");
    assert_eq!(b.row("order"), "0|0|1000|4|2");
    let (ok, _, err) = segmint(&cfg, &["biz", "add", "order", "--step", "1000"]);
    assert!(!ok && err.contains("already exists"), "{err}");
    let (ok, _, err) = segmint(&cfg, &["biz", "add", "bad name", "--step", "10"]);
    assert!(!ok && err.contains("biz type"), "{err}");

    let (ok, token, err) = segmint(
        &cfg,
        &[
            "token",
            "add",
            "--biz",
            "order",
            "--remark",
            "orders service",
        ],
    );
    assert!(ok, "{err}");
    let token = token.strip_suffix('\n').expect("one line on stdout");
    assert!(
        token.len() == 64 && token.bytes().all(|c| c.is_ascii_hexdigit()),
        "stdout is the token alone: {token:?}"
    );
    assert!(
        err.contains("pg0") && err.contains("pg1"),
        "report goes to stderr: {err}"
    );
    assert!(!err.contains(token), "the token is printed once, on stdout");
    for c in [&a, &b] {
        let stored = c.psql("SELECT token FROM tiny_id_token WHERE biz_type = 'order'");
        assert_eq!(
            stored,
            segmint::biz::hash_token(token),
            "only the hash is stored"
        );
    }
    let (ok, _, err) = segmint(&cfg, &["token", "add", "--biz", "missing"]);
    assert!(!ok && err.contains("missing"), "{err}");

    let (ok, out, _) = segmint(&cfg, &["token", "list"]);
    assert!(
        ok && out.contains("orders service") && !out.contains(token),
        "{out}"
    );
    let (ok, out, _) = segmint(&cfg, &["biz", "list"]);
    assert!(
        ok && out.lines().filter(|l| l.contains("order")).count() == 2,
        "{out}"
    );

    // The same facts as JSON, for scripts.
    let json = |args: &[&str]| -> (bool, serde_json::Value) {
        let (ok, out, err) = segmint(&cfg, args);
        let doc = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
        (ok, doc)
    };
    let (ok, bizs) = json(&["biz", "list", "--json"]);
    assert!(ok);
    let rows: Vec<(&str, i64, i64, i64, bool)> = bizs["bizs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["database"].as_str().unwrap(),
                r["step"].as_i64().unwrap(),
                r["delta"].as_i64().unwrap(),
                r["remainder"].as_i64().unwrap(),
                r["frozen"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [("pg0", 1000, 4, 0, false), ("pg1", 1000, 4, 2, false)]
    );
    assert_eq!(bizs["unreachable"], serde_json::json!([]));
    let (ok, tokens) = json(&["token", "list", "--json"]);
    assert!(ok);
    let t = &tokens["tokens"][0];
    assert_eq!(t["bizs"], serde_json::json!(["order"]));
    assert_eq!(t["remark"], "orders service");
    assert_eq!(t["state"], "active");
    assert_eq!(t["databases"], serde_json::json!(["pg0", "pg1"]));
    assert!(
        segmint::biz::hash_token(token).starts_with(t["token_sha256"].as_str().unwrap()),
        "{t}"
    );
    let (ok, layout) = json(&["db", "list", "--json"]);
    assert!(ok);
    assert_eq!(
        layout["layout"]["epoch"], 0,
        "no change made yet: the membership `migrate` recorded"
    );
    assert_eq!(layout["layout"]["members"].as_array().unwrap().len(), 2);
    assert_eq!(layout["pending"], serde_json::Value::Null);
    assert_eq!(layout["databases"][1]["name"], "pg1");
    assert_eq!(
        layout["databases"][1]["class"],
        serde_json::json!({ "delta": 2, "remainder": 1 })
    );
    assert_eq!(layout["databases"][1]["rows"], 1);
    let export = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        export.path(),
        "biz_tag\tmax_id\tstep\tdescription\tupdate_time\ninvoice\t73000\t1000\tinvoices\t2019-01-01 12:00:00\n",
    )
    .unwrap();
    let path = export.path().to_str().unwrap();
    let (ok, dry) = json(&["import", "leaf", path, "--dry-run", "--json"]);
    assert!(ok, "{dry}");
    assert_eq!(
        (&dry["dry_run"], &dry["bizs"], &dry["changes"]),
        (
            &serde_json::json!(true),
            &serde_json::json!(1),
            &serde_json::json!(2)
        )
    );
    assert_eq!(dry["refused"], serde_json::json!([]));

    a.stop();
    // A database that cannot be read: named in the document, and the exit is non-zero.
    let (ok, bizs) = json(&["biz", "list", "--json"]);
    assert!(!ok);
    assert_eq!(bizs["unreachable"][0]["database"], "pg0");
    assert_eq!(bizs["bizs"][0]["database"], "pg1");
    let (ok, layout) = json(&["db", "list", "--json"]);
    assert!(!ok);
    assert_eq!(layout["databases"][0]["state"], "unreachable");
    let (ok, _, err) = segmint(&cfg, &["biz", "add", "late", "--step", "10"]);
    assert!(
        !ok && err.contains("\"pg0\" is unreachable") && err.contains("nothing changed"),
        "{err}"
    );
    assert_eq!(
        b.psql("SELECT count(*) FROM tiny_id_info WHERE biz_type = 'late'"),
        "0"
    );
}

/// Every admin command speaks JSON under `--json` (before or after the subcommand): one
/// document on stdout with the facts the text gives; a failure is a JSON document on
/// stderr with its kind, a refusal's reason, its message, a hint and notes, and the exit
/// is non-zero. The text of a failure carries the hint too.
#[test]
fn every_admin_command_speaks_json() {
    let dbs = Databases::start(Kind::Embedded, 2);
    let urls = dbs.urls();
    let cfg = config_file(&config_toml_urls(&urls[..1], ""));
    let json = |args: &[&str]| -> serde_json::Value {
        let run = segmint_cli(cfg.path(), args, &[]);
        assert!(run.ok(), "{args:?}: {}{}", run.stdout, run.stderr);
        serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", run.stdout))
    };
    let failure = |args: &[&str]| -> serde_json::Value {
        let run = segmint_cli(cfg.path(), args, &[]);
        assert!(!run.ok(), "{args:?} should fail: {}", run.stdout);
        assert!(run.stdout.is_empty(), "{args:?}: {}", run.stdout);
        serde_json::json!({ "error": run.failure() })
    };
    // A refusal for `reason`, with advice; its message (without the advice).
    let refused = |args: &[&str], reason: &str| -> String {
        let e = failure(args)["error"].clone();
        assert_eq!(
            (&e["kind"], &e["reason"]),
            (&serde_json::json!("refused"), &serde_json::json!(reason)),
            "{args:?}: {e}"
        );
        assert!(
            e["hint"].as_str().is_some_and(|h| !h.is_empty()),
            "{args:?}: {e}"
        );
        assert!(e["notes"].is_array(), "{args:?}: {e}");
        e["message"].as_str().unwrap_or_default().to_owned()
    };

    let migrated = json(&["--json", "migrate"]);
    assert_eq!(migrated["databases"][0]["name"], "pg0");
    assert_eq!(migrated["databases"][0]["error"], serde_json::Value::Null);
    // The test's databases were created migrated: nothing to apply.
    assert_eq!(migrated["databases"][0]["applied"], serde_json::json!([]));

    let added = json(&[
        "biz", "add", "order", "--step", "100", "--odd", "--prefix", "ORD", "--json",
    ]);
    assert_eq!(added["biz"], "order");
    assert_eq!(added["step"], 100);
    assert_eq!(
        added["within"],
        serde_json::json!({ "delta": 2, "remainder": 1 })
    );
    assert_eq!(added["shape"]["prefix"], "ORD");
    assert!(
        added["notes"].as_array().unwrap().iter().any(|n| n
            .as_str()
            .unwrap()
            .starts_with("\"pg0\": added biz `order`")),
        "{added}"
    );

    let issued = json(&[
        "token",
        "add",
        "--biz",
        "order",
        "--expires-in",
        "1h",
        "--json",
    ]);
    let token = issued["token"].as_str().unwrap().to_owned();
    assert_eq!(token.len(), 64, "{issued}");
    assert_eq!(issued["biz"], "order");
    assert_eq!(issued["expires_in_seconds"], 3600);

    let decoded = json(&["id", "decode", "order", "ORD7", "--json"]);
    assert_eq!(
        (
            &decoded["number"],
            &decoded["sequential"],
            &decoded["database"]
        ),
        (
            &serde_json::json!(7),
            &serde_json::json!(7),
            &serde_json::json!("pg0")
        )
    );
    assert_eq!(
        decoded["class"],
        serde_json::json!({ "delta": 2, "remainder": 1 })
    );

    // Tokens are named by a prefix of their hash, as `token list` shows them.
    let hash = segmint::biz::hash_token(&token);
    let prefix = &hash[..8];
    let rotated = json(&["token", "rotate", prefix, "--grace", "1m", "--json"]);
    assert_eq!(rotated["rotated"], prefix);
    assert_eq!(rotated["grace_seconds"], 60);
    assert_eq!(rotated["failed"], serde_json::json!([]));
    assert_ne!(rotated["token"], token.as_str());
    let revoked = json(&["token", "revoke", prefix, "--json"]);
    assert_eq!(
        (&revoked["command"], &revoked["target"]),
        (
            &serde_json::json!("token revoke"),
            &serde_json::json!(prefix)
        )
    );

    let fenced = json(&["db", "fence", "pg0", "--json"]);
    assert_eq!(fenced["target"], "pg0");

    let changed = json(&["db", "add", "pg1", &urls[1], "--json"]);
    assert_eq!(changed["change"], "add");
    assert_eq!(changed["database"], "pg1");
    assert_eq!(changed["layout"]["epoch"], 1);
    let members: Vec<&str> = changed["layout"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(members, ["pg0", "pg1"]);
    assert!(
        !changed["steps"].as_array().unwrap().is_empty(),
        "{changed}"
    );

    // Failures: typed, with a hint.
    let missing = failure(&["token", "add", "--biz", "missing", "--json"]);
    assert_eq!(missing["error"]["kind"], "not_found");
    assert!(
        missing["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("segmint biz add"),
        "{missing}"
    );
    assert_eq!(
        (&missing["error"]["reason"], &missing["error"]["notes"]),
        (&serde_json::Value::Null, &serde_json::json!([]))
    );
    let unknown = refused(&["db", "fence", "nowhere", "--json"], "database_unknown");
    assert!(unknown.contains("nowhere"), "{unknown}");
    let unknown = refused(&["db", "add", "pg9", "--json"], "database_unknown");
    assert!(unknown.contains("\"pg9\" is not configured"), "{unknown}");
    // A prefix too short, and a token revoked above: the advice is the hint, not the
    // message.
    let short = refused(&["token", "revoke", "abc", "--json"], "invalid_argument");
    assert!(
        short.contains("`abc`") && short.contains("nothing changed"),
        "{short}"
    );
    let revoked = failure(&["token", "rotate", prefix, "--json"]);
    assert_eq!(revoked["error"]["reason"], "token_revoked", "{revoked}");
    assert_eq!(
        revoked["error"]["hint"],
        "create a new one with `segmint token add`"
    );
    assert!(
        !revoked["error"]["message"]
            .as_str()
            .unwrap()
            .contains("segmint token add"),
        "{revoked}"
    );
    // pg1 is in the layout but not in this configuration: a change must not leave it
    // behind.
    let lost = refused(
        &["db", "remove", "pg0", "--lost", "--json"],
        "database_missing_from_config",
    );
    assert!(lost.contains("\"pg1\" is not configured"), "{lost}");
    // A refusal with no advice to give: `hint` is null.
    let exists = failure(&["biz", "add", "order", "--step", "100", "--json"]);
    assert_eq!(
        (&exists["error"]["reason"], &exists["error"]["hint"]),
        (&serde_json::json!("biz_exists"), &serde_json::Value::Null),
        "{exists}"
    );
    // As text: the message, then the hint on a line of its own.
    let text = segmint_cli(cfg.path(), &["token", "revoke", "abc"], &[]);
    assert!(
        text.stderr.contains(
            "segmint: `abc` is not a token's hash prefix (8 or more hex digits); nothing changed\nhint: give at least 8 hex digits"
        ),
        "{}",
        text.stderr
    );
    let text = segmint_cli(cfg.path(), &["token", "add", "--biz", "missing"], &[]);
    assert!(!text.ok());
    assert!(
        text.stderr
            .contains("segmint: biz `missing` does not exist\nhint: create the biz"),
        "{}",
        text.stderr
    );
    let bad = config_file("pool_size = \"many\"\n");
    let run = segmint_cli(bad.path(), &["--json", "biz", "list"], &[]);
    assert_eq!(run.code, Some(2));
    let doc: serde_json::Value = serde_json::from_str(run.stderr.trim()).unwrap();
    assert_eq!(doc["error"]["kind"], "config");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("pool_size"),
        "{doc}"
    );
}

/// SIGTERM stops accepting, lets the in-flight request finish, and exits 0. The
/// listen address comes from `SEGMINT_BIND`, overriding the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_in_flight_requests_and_exits_zero() {
    let pg = PgCluster::start();
    let toml = config_toml(&[&pg], "fetch_timeout_ms = 5000\nwait_timeout_ms = 8000");
    let cfg = config_file(&toml);
    let (ok, _, err) = segmint(&cfg, &["migrate"]);
    assert!(ok, "{err}");
    assert!(segmint(&cfg, &["biz", "add", "slow", "--step", "10"]).0);
    let (_, token, _) = segmint(&cfg, &["token", "add", "--biz", "slow"]);
    let mut server = ServerProcess::start(&toml).await;

    // Hold the biz row locked for 2 s: the first request waits on the reservation.
    let locker = pg.psql_background(
        "BEGIN; SELECT * FROM tiny_id_info WHERE biz_type = 'slow' FOR UPDATE; SELECT pg_sleep(2); COMMIT;",
    );
    until_locker_sleeps(&pg, "tiny_id_info", Duration::from_secs(10)).await;
    let remote = server.remote(Duration::from_secs(30));
    let in_flight = tokio::spawn({
        let remote = remote.clone();
        async move {
            let params = tinyid_params("slow", token.trim(), None);
            try_send(compat_request(&remote, "nextIdSimple", Via::Get, &params)).await
        }
    });
    // In flight: the server's reservation waits on the locked row.
    until_segmint_waits_on_lock(&pg, 1, Duration::from_secs(10)).await;
    let status = server.sigterm(Duration::from_secs(30)).await;

    let answer = in_flight
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("in-flight request failed: {e:?}\n{}", server.log_text()));
    assert_eq!(answer.body, "1", "the in-flight request got its ID");
    assert_eq!(status.code(), Some(0), "graceful stop exits 0");
    assert!(
        try_send(request(&remote, Method::GET, "/healthz", None))
            .await
            .is_err(),
        "no longer accepting"
    );
    drop(locker);
}
