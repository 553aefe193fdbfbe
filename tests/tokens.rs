//! The token lifecycle against real databases, on both stores: revocation and expiry
//! under traffic on both APIs, rotation with a grace period, refused prefixes, a
//! revocation with a database down, `token list`, and the audit lines.

use crate::by_kind;
use crate::common;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::tokens::*;
use common::wait::{catalog_reads, until_catalog_read};
use common::*;
use segmint::store::Store;

/// The catalog refresh of the servers in these tests.
const REFRESH: Duration = Duration::from_millis(500);

/// Slack for a loaded two-core machine on top of what a change may take by design.
const MARGIN: Duration = Duration::from_secs(2);

fn refresh_toml() -> String {
    format!("catalog_refresh_ms = {}", REFRESH.as_millis())
}

/// A token never granted: its answers are what revoked and expired tokens must get.
const UNKNOWN: &str = "00000000000000000000000000000000000000000000000000000000000000ff";

/// Sends requests with `token` and `keep` on both APIs until both refuse `token`;
/// `keep` must be served throughout and every answer to `token` is an ID or exactly
/// `unknown`'s. Returns when Tinyid's route and v1 first refused `token`.
async fn first_refusals(
    app: &TestApp,
    token: &str,
    keep: &str,
    unknown: &Answers,
) -> (SystemTime, SystemTime) {
    let deadline = SystemTime::now() + Duration::from_secs(20);
    let (mut tinyid, mut v1) = (None, None);
    let mut served = 0;
    while tinyid.is_none() || v1.is_none() {
        assert!(SystemTime::now() < deadline, "{token} still accepted");
        let a = answers(app, token).await;
        let at = SystemTime::now();
        for (refused, first, what) in [
            (a.tinyid == unknown.tinyid, &mut tinyid, "Tinyid"),
            (a.v1 == unknown.v1, &mut v1, "v1"),
        ] {
            if refused {
                first.get_or_insert(at);
            } else {
                assert!(
                    first.is_none(),
                    "{what}: accepted again after a refusal: {a:?}"
                );
            }
        }
        if tinyid.is_none() && v1.is_none() {
            assert!(
                a.issued(),
                "neither an ID nor an unknown token's answer: {a:?}"
            );
            served += 1;
        }
        let k = answers(app, keep).await;
        assert!(k.issued(), "another token stopped working: {k:?}");
    }
    assert_eq!(answers(app, token).await, *unknown, "stays refused");
    println!(
        "{}: served {served} times before the first refusal",
        prefix(token)
    );
    (tinyid.unwrap_or(deadline), v1.unwrap_or(deadline))
}

/// Checks with [`first_refusals`] that `token` is refused on both APIs from `expires`
/// (unix seconds) on, and not much later: expiry is checked at each request.
async fn refused_at_expiry(
    app: &TestApp,
    token: &str,
    keep: &str,
    unknown: &Answers,
    expires: f64,
) {
    let (tinyid, v1) = first_refusals(app, token, keep, unknown).await;
    for (api, at) in [("Tinyid", tinyid), ("v1", v1)] {
        let late = unix(at) - expires;
        println!("{api}: refused {late:.3}s after the expiry");
        assert!(
            (0.0..=MARGIN.as_secs_f64()).contains(&late),
            "{api}: {late}"
        );
    }
}

/// `at` as unix seconds.
fn unix(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// The merged `token list` entry of `token`, read through the library.
async fn summary(setup: &TokenSetup, token: &str) -> segmint::store::TokenSummary {
    let hash = segmint::biz::hash_token(token);
    Store::connect(&setup.config)
        .unwrap()
        .list_tokens()
        .await
        .tokens
        .into_iter()
        .find(|t| t.hash == hash)
        .expect("the token is listed")
}

/// The `token list` line of `token`.
fn list_line(setup: &TokenSetup, token: &str) -> String {
    let out = setup.ok(&["token", "list"]).stdout;
    assert!(!out.contains(token), "token list never shows a token");
    out.lines()
        .find(|l| l.starts_with(&prefix(token)))
        .unwrap_or_else(|| panic!("no line for {}:\n{out}", prefix(token)))
        .to_owned()
}

async fn a_revoked_token_is_refused_within_the_refresh(kind: Kind) {
    let setup = Arc::new(TokenSetup::start(kind, &refresh_toml()));
    let (token, keep) = (setup.add_token(&[]), setup.add_token(&[]));
    let app = spawn_app(setup.config.clone()).await;
    let unknown = answers(&app, UNKNOWN).await;
    assert_eq!(unknown.v1.0, 401, "{unknown:?}");
    assert!(answers(&app, &token).await.issued());

    let revoke = {
        let (setup, prefix) = (setup.clone(), prefix(&token));
        tokio::task::spawn_blocking(move || {
            let run = setup.cli(&["token", "revoke", &prefix]);
            (run, SystemTime::now())
        })
    };
    let (tinyid, v1) = first_refusals(&app, &token, &keep, &unknown).await;
    let (run, revoked) = revoke.await.unwrap();
    assert!(run.ok(), "{}", run.stderr);
    let lines = run.stdout.lines().filter(|l| l.contains("revoked token"));
    assert_eq!(
        lines.count(),
        setup.config.databases.len(),
        "{}",
        run.stdout
    );
    for (api, at) in [("Tinyid", tinyid), ("v1", v1)] {
        let delay = at.duration_since(revoked).unwrap_or_default();
        println!("{kind:?} {api}: refused {delay:?} after `token revoke` returned");
        assert!(delay <= REFRESH + MARGIN, "{api}: {delay:?}");
    }
    app.stop().await;
}

async fn an_expired_token_gets_the_unknown_answer(kind: Kind) {
    // No periodic refresh in the test's time: only the check at each request can
    // refuse the token at its expiry.
    let setup = TokenSetup::start(kind, "catalog_refresh_ms = 600000");
    let app = spawn_app(setup.config.clone()).await;
    let keep = setup.add_token(&[]);
    let token = setup.add_token(&["--expires-in", "3s"]);
    let unknown = answers(&app, UNKNOWN).await;
    let expires = summary(&setup, &token).await.expires.expect("an expiry") as f64;
    assert!(answers(&app, &token).await.issued(), "works before expiry");

    refused_at_expiry(&app, &token, &keep, &unknown, expires).await;
    let line = list_line(&setup, &token);
    assert!(line.contains(" expired "), "{line}");
    app.stop().await;
}

async fn rotation_keeps_both_tokens_for_the_grace_period(kind: Kind) {
    let setup = TokenSetup::start(kind, &refresh_toml());
    let old = setup.add_token(&["--remark", "billing"]);
    let app = spawn_app(setup.config.clone()).await;
    let unknown = answers(&app, UNKNOWN).await;
    assert!(answers(&app, &old).await.issued());

    let run = setup.ok(&["token", "rotate", &prefix(&old), "--grace", "3s"]);
    let new = run.stdout.trim().to_owned();
    assert!(
        new.len() == 64 && new != old,
        "stdout is the new token: {new:?}"
    );
    let lowered = summary(&setup, &old).await.expires.expect("lowered");
    let old_expires = lowered as f64;
    let rotated = summary(&setup, &new).await;
    assert_eq!(rotated.remark, "billing");
    assert_eq!(rotated.bizs.iter().collect::<Vec<_>>(), ["order"]);
    assert_eq!(rotated.expires, None);

    // Once a refresh has read the lowered expiry, both still work.
    let digest = segmint::biz::token_digest(&old);
    eventually(
        REFRESH + MARGIN,
        "the server reads the old token's lowered expiry",
        async || {
            let now = unix(SystemTime::now()) as i64;
            match app.state.store.catalog().grant(&digest, now) {
                Some(grant) if grant.expires == Some(lowered) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(
        answers(&app, &old).await.issued(),
        "old token within the grace"
    );
    assert!(answers(&app, &new).await.issued(), "new token");
    refused_at_expiry(&app, &old, &new, &unknown, old_expires).await;
    app.stop().await;
}

async fn refused_prefixes_change_nothing(kind: Kind) {
    let setup = TokenSetup::start(kind, "");
    let twins = [
        format!("abcdef0123{}", "1".repeat(54)),
        format!("abcdef0123{}", "2".repeat(54)),
    ];
    for i in 0..setup.config.databases.len() {
        for (hash, biz) in twins.iter().zip(["order", "pay"]) {
            setup.dbs.sql(
                i,
                &format!("INSERT INTO tiny_id_token (token, biz_type) VALUES ('{hash}', '{biz}')"),
            );
        }
    }
    // (the command, what its text says, the reason of its refusal under `--json`)
    let cases: [(&[&str], &[&str], Option<&str>); 6] = [
        (
            &["token", "revoke", "abcdef0"],
            &["at least 8 hex digits"],
            Some("invalid_argument"),
        ),
        (
            &["token", "revoke", "abcdefgh01"],
            &["at least 8 hex digits"],
            Some("invalid_argument"),
        ),
        (
            &["token", "revoke", "0000000000"],
            &["no token's hash starts with `0000000000`"],
            Some("token_unknown"),
        ),
        (
            &["token", "revoke", "ABCDEF0123"],
            &[
                "names 2 tokens",
                "abcdef0123111111 (biz order)",
                "abcdef0123222222 (biz pay)",
            ],
            Some("token_ambiguous"),
        ),
        (
            &["token", "rotate", "abcdef0123"],
            &["names 2 tokens"],
            Some("token_ambiguous"),
        ),
        // Refused by the argument parser, before any refusal of segmint's.
        (&["token", "revoke"], &["PREFIX"], None),
    ];
    for (args, says, reason) in cases {
        let run = setup.cli(args);
        assert!(!run.ok(), "{args:?} succeeded: {}", run.stdout);
        for s in says {
            assert!(run.stderr.contains(s), "{args:?}: {}", run.stderr);
        }
        assert!(audit_lines(&run.stderr).is_empty(), "{}", run.stderr);
        let Some(reason) = reason else { continue };
        // Under `--json`: the reason and the advice as values; the candidates of an
        // ambiguous prefix as notes.
        let e = setup.cli(&[args, &["--json"]].concat()).failure();
        assert_eq!(e["reason"], reason, "{args:?}: {e}");
        assert!(
            e["hint"].as_str().is_some_and(|h| !h.is_empty()),
            "{args:?}: {e}"
        );
        let notes = e["notes"].as_array().expect("notes");
        assert_eq!(
            notes.len(),
            if reason == "token_ambiguous" { 2 } else { 0 },
            "{args:?}: {e}"
        );
    }
    let untouched = "2|0|0";
    let count = "SELECT count(*), count(revoke_time), count(expire_time) FROM tiny_id_token";
    for i in 0..setup.config.databases.len() {
        assert_eq!(setup.dbs.sql(i, count), untouched, "database {i}");
    }
    // The same hash on every database is one token.
    let run = setup.ok(&["token", "revoke", "abcdef01231"]);
    assert!(
        run.stdout.contains("revoked token abcdef0123111111"),
        "{}",
        run.stdout
    );
    for i in 0..setup.config.databases.len() {
        assert_eq!(setup.dbs.sql(i, count), "2|1|0", "database {i}");
    }
}

async fn token_list_shows_expiry_and_last_use(kind: Kind) {
    let setup = TokenSetup::start(kind, &refresh_toml());
    let token = setup.add_token(&["--expires-in", "90d", "--remark", "svc"]);
    let line = list_line(&setup, &token);
    let fields: Vec<&str> = line.split_whitespace().collect();
    let in_90_days = SystemTime::now() + Duration::from_secs(90 * 86_400);
    let day = humantime::format_rfc3339_seconds(in_90_days).to_string();
    assert_eq!(fields[1..3], ["order", "active"], "{line}");
    assert!(
        fields[4].starts_with(&day[..10]),
        "expires in 90 days: {line}"
    );
    assert_eq!(fields[5], "-", "never used: {line}");
    assert!(line.ends_with(" svc"), "{line}");

    let app = spawn_app(setup.config.clone()).await;
    assert!(answers(&app, &token).await.issued());
    let used = SystemTime::now();
    // Written by the next catalog refresh: within one refresh interval (on PostgreSQL,
    // to both databases).
    let written = "SELECT count(last_used_time) FROM tiny_id_token";
    let last_used = eventually_every(
        Duration::from_millis(100),
        REFRESH + MARGIN,
        "the token's last use written",
        async || {
            if kind == Kind::Postgres {
                for i in 0..2 {
                    let n = setup.dbs.sql(i, written);
                    if n != "1" {
                        return Err(format!("{n} last uses on database {i}"));
                    }
                }
            }
            let last_used = summary(&setup, &token).await.last_used;
            last_used.ok_or_else(|| "no last use".to_owned())
        },
    )
    .await as f64;
    assert!(
        (unix(used) - last_used).abs() <= 2.0,
        "{last_used} vs {used:?}"
    );
    let line = list_line(&setup, &token);
    assert_ne!(line.split_whitespace().nth(5), Some("-"), "{line}");
    if kind == Kind::Postgres {
        for i in 0..2 {
            assert_eq!(setup.dbs.sql(i, written), "1", "database {i}");
        }
    }
    setup.ok(&["token", "revoke", &prefix(&token)]);
    assert!(list_line(&setup, &token).contains(" revoked "));
    app.stop().await;
}

async fn audit_lines_name_the_change_never_the_token(kind: Kind) {
    let setup = TokenSetup::start(kind, "");
    let databases = match kind {
        Kind::Postgres => "databases=pg0,pg1",
        Kind::Embedded => "databases=pg0",
        Kind::MySql => "databases=pg0,pg1",
    };
    let run = setup.ok(&["biz", "add", "pay", "--step", "10"]);
    let audit = audit_lines(&run.stderr);
    assert_eq!(audit.len(), 1, "{}", run.stderr);
    assert!(
        audit[0].contains("command=\"biz add\"")
            && audit[0].contains("biz=\"pay\"")
            && audit[0].contains(databases),
        "{}",
        audit[0]
    );

    let run = setup.ok(&["token", "add", "--biz", "pay"]);
    let token = run.stdout.trim().to_owned();
    let audit = audit_lines(&run.stderr);
    assert_eq!(audit.len(), 1, "{}", run.stderr);
    assert!(
        audit[0].contains("command=\"token add\"") && audit[0].contains(&prefix(&token)),
        "{}",
        audit[0]
    );

    let run = setup.ok(&["token", "rotate", &prefix(&token), "--grace", "0"]);
    let new = run.stdout.trim().to_owned();
    let audit = audit_lines(&run.stderr);
    assert_eq!(
        audit.len(),
        2,
        "the new token and the old one: {}",
        run.stderr
    );
    assert!(
        audit
            .iter()
            .all(|l| l.contains("command=\"token rotate\"") && l.contains(databases))
    );
    assert!(
        audit[0].contains(&prefix(&new)) && audit[1].contains(&prefix(&token)),
        "{audit:?}"
    );
    assert!(
        !run.stderr.contains(&token) && !run.stderr.contains(&new),
        "{}",
        run.stderr
    );

    let run = setup.ok(&["token", "revoke", &prefix(&new)]);
    let audit = audit_lines(&run.stderr);
    assert_eq!(audit.len(), 1, "{}", run.stderr);
    assert!(
        audit[0].contains("command=\"token revoke\"")
            && audit[0].contains(&prefix(&new))
            && audit[0].contains("biz=\"pay\""),
        "{}",
        audit[0]
    );

    let run = setup.ok(&["db", "fence", "pg0"]);
    let audit = audit_lines(&run.stderr);
    assert_eq!(audit.len(), 1, "{}", run.stderr);
    assert!(audit[0].contains("command=\"db fence\""), "{}", audit[0]);
    assert!(!run.stderr.contains(&new) && !run.stdout.contains(&new));
}

by_kind!(
    a_revoked_token_is_refused_within_the_refresh,
    an_expired_token_gets_the_unknown_answer,
    rotation_keeps_both_tokens_for_the_grace_period,
    refused_prefixes_change_nothing,
    token_list_shows_expiry_and_last_use,
    audit_lines_name_the_change_never_the_token,
);

/// A revocation written while one PostgreSQL database is down holds: the database that
/// says revoked wins, also once the other one is back; the command fails, naming the
/// down database, and succeeds when run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_with_a_database_down_holds() {
    let setup = TokenSetup::start(Kind::Postgres, &refresh_toml());
    let (token, keep) = (setup.add_token(&[]), setup.add_token(&[]));
    let app = spawn_app(setup.config.clone()).await;
    let unknown = answers(&app, UNKNOWN).await;
    assert!(answers(&app, &token).await.issued());

    setup.dbs.stop(1);
    let e = setup
        .cli(&["token", "revoke", &prefix(&token), "--json"])
        .failure();
    assert_eq!(e["reason"], "write_failed", "{e}");
    assert!(
        e["message"].as_str().is_some_and(|m| m.contains("\"pg1\"")),
        "{e}"
    );
    assert!(
        e["hint"]
            .as_str()
            .is_some_and(|h| h.contains("run the command again")),
        "{e}"
    );
    let notes: Vec<&str> = e["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert!(
        notes.iter().any(|n| n.starts_with("\"pg1\": FAILED"))
            && notes
                .iter()
                .any(|n| n.starts_with("\"pg0\": revoked token")),
        "{e}"
    );
    let revoked = "SELECT count(revoke_time) FROM tiny_id_token WHERE revoke_time IS NOT NULL";
    assert_eq!(setup.dbs.sql(0, revoked), "1");
    first_refusals(&app, &token, &keep, &unknown).await;

    setup.dbs.start_again(1);
    assert_eq!(setup.dbs.sql(1, revoked), "0", "pg1 missed the revocation");
    // Two reads of pg1 (still granting the token) since it is back: the first is in
    // the catalog.
    let reads = catalog_reads(&app, "pg1").await;
    until_catalog_read(&app, "pg1", reads, 2, 2 * REFRESH + MARGIN).await;
    assert_eq!(
        answers(&app, &token).await,
        unknown,
        "pg0's revocation wins"
    );
    assert!(answers(&app, &keep).await.issued());

    let run = setup.ok(&["token", "revoke", &prefix(&token)]);
    assert!(
        run.stdout.contains("\"pg0\": token")
            && run.stdout.contains("already revoked")
            && run.stdout.contains("\"pg1\": revoked token"),
        "{}",
        run.stdout
    );
    assert_eq!(setup.dbs.sql(1, revoked), "1");
    app.stop().await;
}

/// An embedded file's times are text: one written by hand in another format still
/// counts, so a token revoked or expired that way stays refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_written_embedded_times_fail_closed() {
    let setup = TokenSetup::start(Kind::Embedded, "");
    let (revoked, expired) = (setup.add_token(&[]), setup.add_token(&[]));
    for (token, column) in [(&revoked, "revoke_time"), (&expired, "expire_time")] {
        let hash = segmint::biz::hash_token(token);
        setup.dbs.sql(
            0,
            &format!("UPDATE tiny_id_token SET {column} = 'yes', create_time = 'then' WHERE token = '{hash}'"),
        );
    }
    assert!(list_line(&setup, &revoked).contains(" revoked "));
    assert!(list_line(&setup, &expired).contains(" expired "));
}

/// One token for several bizs: `token add --biz order --biz msg` grants both (a biz
/// named twice once), every biz is checked before anything is written, the token
/// serves each biz and no other, and a rotation keeps them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_token_is_granted_many_bizs() {
    let setup = TokenSetup::start(Kind::Embedded, &refresh_toml());
    setup.ok(&["biz", "add", "msg", "--step", "1000"]);
    setup.ok(&["biz", "add", "other", "--step", "1000"]);
    let issued: serde_json::Value = serde_json::from_str(
        &setup
            .ok(&[
                "token", "add", "--biz", "order", "--biz", "msg", "--biz", "order", "--json",
            ])
            .stdout,
    )
    .expect("token add --json");
    assert_eq!(
        issued["bizs"],
        serde_json::json!(["order", "msg"]),
        "{issued}"
    );
    assert_eq!(issued["biz"], serde_json::Value::Null, "{issued}");
    let token = issued["token"].as_str().expect("the token").to_owned();
    assert_eq!(
        summary(&setup, &token)
            .await
            .bizs
            .iter()
            .collect::<Vec<_>>(),
        ["msg", "order"]
    );

    // A biz no database has refuses the whole command: no token is written.
    let before = setup.ok(&["token", "list"]).stdout.lines().count();
    let run = setup.cli(&["token", "add", "--biz", "order", "--biz", "nosuch"]);
    assert!(!run.ok(), "an unknown biz is refused: {}", run.stdout);
    assert!(run.stdout.is_empty(), "no token shown: {}", run.stdout);
    assert!(run.stderr.contains("nosuch"), "{}", run.stderr);
    let after = setup.ok(&["token", "list"]).stdout.lines().count();
    assert_eq!(before, after, "nothing written");

    let app = spawn_app(setup.config.clone()).await;
    for biz in ["order", "msg"] {
        assert_eq!(app.ids(biz, &token, 3).await.len(), 3, "{biz}");
    }
    let (status, body) = app.get_v1("/v1/ids/other", Some(&token)).await;
    assert_eq!(status, 403, "a biz the token lacks: {body}");

    let rotated = setup.ok(&["token", "rotate", &prefix(&token), "--json"]);
    let rotated: serde_json::Value = serde_json::from_str(&rotated.stdout).expect("json");
    assert_eq!(
        rotated["bizs"],
        serde_json::json!(["msg", "order"]),
        "{rotated}"
    );
    let new = rotated["token"].as_str().expect("the new token").to_owned();
    for biz in ["order", "msg"] {
        assert_eq!(app.ids(biz, &new, 3).await.len(), 3, "{biz}, rotated");
    }
    app.stop().await;
}

/// A wrong token asked again and again is refused from memory: the first miss reads
/// the catalog again (a token created since the last refresh must work at once), the
/// repeats do not, until the catalog changes. A token created after the misses works
/// at its first request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_retried_never_reaches_the_databases() {
    // No periodic refresh during the test: every read counted is a miss's.
    let setup = TokenSetup::start(Kind::Embedded, "catalog_refresh_ms = 600000");
    let good = setup.add_token(&[]);
    let app = spawn_app(setup.config.clone()).await;
    assert_eq!(app.ids("order", &good, 1).await.len(), 1);

    let before = catalog_reads(&app, "pg0").await;
    for _ in 0..30 {
        let (status, body) = app.get_v1("/v1/ids/order", Some(UNKNOWN)).await;
        assert_eq!(status, 401, "{body}");
    }
    let reads = catalog_reads(&app, "pg0").await - before;
    assert!(
        reads <= 1.0,
        "30 requests with one wrong token read the catalog {reads} times"
    );

    // A token created now, never missed, is read by its first request.
    let new = setup.add_token(&[]);
    assert_eq!(app.ids("order", &new, 1).await.len(), 1);
    // The catalog changed: the wrong token is read for once more, then from memory.
    let before = catalog_reads(&app, "pg0").await;
    for _ in 0..10 {
        let (status, _) = app.get_v1("/v1/ids/order", Some(UNKNOWN)).await;
        assert_eq!(status, 401);
    }
    let reads = catalog_reads(&app, "pg0").await - before;
    assert!(reads <= 1.0, "read {reads} times after the change");
    app.stop().await;
}
