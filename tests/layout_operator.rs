//! The operator's side of layout changes (`segmint db add` / `db remove`), against real
//! PostgreSQL and real server processes: a change is refused, changing nothing, while a
//! database that may hold live rows is not configured or does not answer; `db remove
//! --lost` retires a database's classes and worker IDs for good, so that it never
//! collides if it comes back; of two changes started at once one wins and the other
//! changes nothing; servers do not use a database whose layout is behind or lost; a biz
//! left frozen by a command killed midway is finished by the servers within a bound.
//!
//! On 41936a7 (before claims, `--lost`, standings and healing) each test fails: the
//! comment above it says where.

use crate::common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::cli::CliRun;
use common::http::{Remote, Target, get, metric, try_v1_ids};
use common::layout::{
    Cluster, REFRESH, SILENT, assert_consistent, bulk_bizs, cli, cli_ok, highest_max_id,
    kill_midway, live_rows, toml_for,
};
use common::traffic::{Stream, Traffic, check_streams};
use common::*;

/// Runs `segmint --json args…` with the configuration `toml` and checks that it was
/// refused for `reason`: a message saying that nothing changed, a hint, and each of
/// `words` in the message or the hint. The message, for the log.
fn refusal(toml: &str, args: &[&str], reason: &str, words: &[&str]) -> String {
    let e = cli(toml, &[&["--json"], args].concat()).failure();
    assert_eq!(
        (&e["kind"], &e["reason"]),
        (&serde_json::json!("refused"), &serde_json::json!(reason)),
        "{args:?}: {e}"
    );
    let message = e["message"].as_str().unwrap_or_default();
    let hint = e["hint"].as_str().unwrap_or_default();
    assert!(!hint.is_empty(), "{args:?}: no hint: {e}");
    for w in words {
        assert!(
            message.contains(w) || hint.contains(w),
            "the refusal does not say `{w}`: {e}"
        );
    }
    assert!(message.contains("nothing changed"), "{args:?}: {e}");
    message.to_owned()
}

/// The message a command ended with (its logs come before it).
fn said_last(run: &CliRun) -> String {
    run.stderr
        .lines()
        .filter(|l| l.starts_with("segmint: "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether database `i` has segmint's schema (a database never migrated has none).
fn has_schema(dbs: &Databases, i: usize) -> bool {
    dbs.sql(i, "SELECT to_regclass('segmint_layout') IS NOT NULL") == "t"
}

/// What a layout change writes on database `i`: each biz row's class, epoch, freeze
/// and claim (not `max_id` and `version`, which reservations move), the layout rows
/// and the worker IDs blocked by a change.
fn layout_state(dbs: &Databases, i: usize) -> String {
    if !has_schema(dbs, i) {
        return "no schema".into();
    }
    [
        "SELECT biz_type, delta, remainder, layout_epoch, frozen, claimed_by FROM tiny_id_info ORDER BY biz_type",
        "SELECT epoch, members, state, changed_ms FROM segmint_layout ORDER BY epoch",
        "SELECT count(*) FROM segmint_worker_lease WHERE holder = 'segmint-layout'",
    ]
    .map(|q| dbs.sql(i, q))
    .join("\n--\n")
}

/// The newest layout row on database `i`: `epoch members state`.
fn newest_layout(dbs: &Databases, i: usize) -> String {
    dbs.sql(
        i,
        "SELECT epoch || ' ' || members || ' ' || state FROM segmint_layout ORDER BY epoch DESC LIMIT 1",
    )
}

/// The entry of database `name` in the server's `/readyz`.
async fn readyz_entry(target: &impl Target, name: &str) -> serde_json::Value {
    let ready = get(target, "/readyz").await.json();
    ready["databases"]
        .as_array()
        .expect("databases in /readyz")
        .iter()
        .find(|d| d["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} missing from /readyz: {ready}"))
}

/// Waits until the server shows database `name` with the layout standing `standing`
/// (not used: `in_layout` false, `segmint_database_layout_behind` 1); the `/readyz`
/// entry.
async fn shows_standing(target: &impl Target, name: &str, standing: &str) -> serde_json::Value {
    eventually(
        Duration::from_secs(10),
        &format!("the server shows {name} as `{standing}`"),
        async || {
            let entry = readyz_entry(target, name).await;
            let behind = metric(
                target,
                &format!("segmint_database_layout_behind{{database=\"{name}\"}}"),
            )
            .await;
            match (
                entry["layout"].as_str(),
                entry["in_layout"].as_bool(),
                behind,
            ) {
                (Some(s), Some(false), 1.0) if s == standing => Ok(entry),
                other => Err(format!("{other:?}: {entry}")),
            }
        },
    )
    .await
}

/// Snowflake IDs for `plain`, with leases short enough for a test (a new holder waits
/// 600 ms before its first ID).
const SNOWFLAKE: &str = r#"snowflake = { enabled = true, bizs = ["plain"], lease_ms = 600, renew_ms = 150, grace_ms = 300 }"#;

/// `count` snowflake IDs of `plain`, or the answer.
async fn try_snowflakes(
    target: &impl Target,
    token: &str,
    count: usize,
) -> Result<Vec<i64>, String> {
    common::http::snowflakes_of(target, "plain", token, count)
        .await
        .map_err(|r| format!("{r:?}"))
}

/// The worker ID that issued the snowflake ID `id`.
fn worker_of(id: i64) -> u16 {
    segmint::snowflake::decode(
        id,
        segmint::snowflake::LEAF_EPOCH_MS,
        &segmint::snowflake::Layout::LEAF,
    )
    .expect("a snowflake ID")
    .worker_id
}

/// The IDs of `biz` that the streams got.
fn ids_of<'a>(streams: &'a [Stream], biz: &'a str) -> impl Iterator<Item = i64> + 'a {
    streams
        .iter()
        .filter(move |s| s.biz == biz)
        .flat_map(|s| s.ids.iter().copied())
}

/// Reproduction 1. Two servers on pg0 and pg1 under traffic. `db remove pg1` run with
/// a configuration naming pg0 alone is refused naming pg1 and `--lost`, and changes
/// nothing. pg1 goes down; `db remove pg1 --lost` (pg0 alone) takes it out while
/// keeping pg0's class, 0 mod 2: pg1's 1 mod 2 is retired, never given to pg0. pg1
/// comes back with its live rows, unaware: servers on pg1 alone and on pg0 alone both
/// serve, each from its own class (plain 0 / 1 mod 2, odd-only 1 / 3 mod 4, worker IDs
/// even / odd); then a server on both shows pg1 `lost` (`/readyz`, `/status`, the
/// metric) and does not use it. Across all of them no ID, no snowflake ID repeats and
/// no worker ID is used by two servers.
///
/// On 41936a7 the first `db remove pg1` succeeded from pg0 alone: pg0 went to 0 mod 1
/// (pg1's odd IDs, and its odd worker IDs, given to pg0 while pg1's rows stayed live),
/// and `--lost` did not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_missing_from_the_configuration_is_refused_then_declared_lost_for_good() {
    let c = Cluster::start(2, 1, "50", true);
    let (dbs, one, token) = (&c.dbs, &c.toml, &c.plain_token);
    let out = cli_ok(one, &["db", "add", "pg1", &c.urls[1]]);
    assert!(
        out.contains("layout epoch 1 is done: pg0 (0 mod 2), pg1 (1 mod 2)"),
        "{out}"
    );
    // Snowflake IDs on from the start: a server reading both databases records the
    // spec on each and confirms it, so that the servers on one database alone later
    // lease on it.
    let two = format!("{SNOWFLAKE}\n{}", toml_for(dbs, &[0, 1]));
    let a = ServerProcess::start(&two).await;
    let b = ServerProcess::start(&two).await;
    let traffic = Traffic::start(vec![a.base.clone(), b.base.clone()], token, &c.odd_token);
    let grew = async |i: usize, by: i64| {
        let from = dbs.version(i, "plain");
        eventually(
            Duration::from_secs(20),
            &format!("pg{i} gives out segments"),
            async || match dbs.version(i, "plain") {
                v if v >= from + by => Ok(()),
                v => Err(format!("version {v}, was {from}")),
            },
        )
        .await
    };
    grew(0, 3).await;
    grew(1, 3).await;
    eventually(
        Duration::from_secs(20),
        "the snowflake spec confirmed on both databases",
        async || match [0, 1].map(|i| dbs.sql(i, "SELECT confirmed FROM segmint_snowflake")) {
            [a, b] if a == "t" && b == "t" => Ok(()),
            read => Err(format!("{read:?}")),
        },
    )
    .await;

    // Refused from a configuration without pg1: nothing changed, and pg1 still serves.
    let before = [layout_state(dbs, 0), layout_state(dbs, 1)];
    let e = refusal(
        one,
        &["db", "remove", "pg1"],
        "database_missing_from_config",
        &["\"pg1\"", "is not configured", "--lost"],
    );
    eprintln!("refused: {e}");
    assert_eq!(
        [layout_state(dbs, 0), layout_state(dbs, 1)],
        before,
        "refused, yet changed"
    );
    grew(1, 2).await;

    // pg1 goes down, and is declared lost from pg0 alone: pg0 keeps 0 mod 2. (Down, so
    // that it does not learn it was lost from a server that reads it, as a database
    // restored elsewhere from a backup would not.)
    dbs.stop(1);
    let out = cli_ok(one, &["db", "remove", "pg1", "--lost"]);
    assert!(out.contains("lost for good: pg1"), "{out}");
    assert!(
        out.contains("layout epoch 2 is done: pg0 (0 mod 2)"),
        "{out}"
    );
    assert_eq!(newest_layout(dbs, 0), "2 pg0=2:0,!pg1=2:1 done");
    assert_eq!(live_rows(dbs, 1, "plain"), vec![(0, 2, 0, 2)]);
    assert_eq!(live_rows(dbs, 1, "odd"), vec![(0, 4, 1, 2)]);
    grew(0, 3).await;
    let mut streams = traffic.finish().await;
    drop((a, b));

    // pg1 comes back as it was: its rows live in epoch 1, its layout rows unaware.
    dbs.start_again(1);
    assert_eq!(live_rows(dbs, 2, "plain")[1], (1, 2, 1, 1));
    assert_eq!(newest_layout(dbs, 1), "1 pg0=2:0,pg1=2:1 done");
    let config = |members: &[usize]| format!("{SNOWFLAKE}\n{}", toml_for(dbs, members));
    let lone1 = ServerProcess::start(&config(&[1])).await;
    let lone0 = ServerProcess::start(&config(&[0])).await;
    let mut issued = Issued::default();
    // First servers on each database alone: both serve, each from its own class.
    let alone = [(&lone1, Side::Pg1), (&lone0, Side::Pg0)];
    let traffic = Traffic::start(
        vec![lone1.base.clone(), lone0.base.clone()],
        token,
        &c.odd_token,
    );
    issued.sample(&alone, &c, true).await;
    streams.extend(traffic.finish().await);

    // Then one on both: it does not use pg1 (and may tell pg1 it was lost).
    let both = ServerProcess::start(&config(&[0, 1])).await;
    let remote = both.remote(Duration::from_secs(5));
    let pg1 = shows_standing(&remote, "pg1", "lost").await;
    assert!(pg1["residue"].is_null(), "{pg1}");
    let pg0 = readyz_entry(&remote, "pg0").await;
    assert_eq!(
        (pg0["layout"].as_str(), pg0["residue"].as_str()),
        (Some("current"), Some("0 mod 2")),
        "{pg0}"
    );
    assert_eq!(
        metric(&remote, "segmint_database_layout_behind{database=\"pg0\"}").await,
        0.0
    );
    let html = get(&remote, "/status").await.body;
    assert!(html.contains("declared lost"), "{html}");
    let traffic = Traffic::start(
        vec![lone1.base.clone(), lone0.base.clone(), both.base.clone()],
        token,
        &c.odd_token,
    );
    issued
        .sample(&[alone[0], alone[1], (&both, Side::Pg0)], &c, false)
        .await;
    streams.extend(traffic.finish().await);
    eprintln!(
        "the server on pg1 alone answered {} requests and refused {}; it now sees pg1 as {}",
        issued.pg1_side.0,
        issued.pg1_side.1,
        readyz_entry(&lone1.remote(Duration::from_secs(5)), "pg1").await
    );

    check_streams(&streams);
    issued.plain.extend(ids_of(&streams, "plain"));
    issued.odd.extend(ids_of(&streams, "odd"));
    assert_unique(&issued.plain);
    assert_unique(&issued.odd);
    // Worker IDs: pg0's side even, pg1's odd, none used by two servers, no snowflake ID
    // twice.
    let workers: Vec<(String, HashSet<u16>)> = issued
        .snowflakes
        .iter()
        .map(|(base, ids)| (base.clone(), ids.iter().map(|&id| worker_of(id)).collect()))
        .collect();
    eprintln!("worker IDs per server: {workers:?}");
    for (k, (_, a)) in workers.iter().enumerate() {
        assert!(
            !a.is_empty(),
            "a server issued no snowflake ID: {workers:?}"
        );
        for (_, b) in &workers[k + 1..] {
            assert!(
                a.is_disjoint(b),
                "a worker ID used by two servers: {workers:?}"
            );
        }
    }
    let all: Vec<i64> = issued
        .snowflakes
        .into_iter()
        .flat_map(|(_, ids)| ids)
        .collect();
    assert_unique(&all);
}

/// Which database a server of reproduction 1 issues from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// pg0, in 0 mod 2 (the odd-only biz in 1 mod 4), even worker IDs.
    Pg0,
    /// pg1 alone, lost: in 1 mod 2 (3 mod 4), odd worker IDs.
    Pg1,
}

impl Side {
    /// Whether `id` of `biz` lies in this side's class.
    fn holds(self, biz: &str, id: i64) -> bool {
        let (modulus, pg0) = if biz == "odd" { (4, 1) } else { (2, 0) };
        let own = if self == Side::Pg0 {
            pg0
        } else {
            pg0 + modulus / 2
        };
        id % modulus == own
    }
}

/// What the servers of reproduction 1 issued, asked one at a time.
#[derive(Default)]
struct Issued {
    plain: Vec<i64>,
    odd: Vec<i64>,
    /// Snowflake IDs per server (by address).
    snowflakes: Vec<(String, Vec<i64>)>,
    /// Requests the server on pg1 alone answered, and refused.
    pg1_side: (u32, u32),
}

impl Issued {
    /// Asks each server of `servers` in turn for plain, odd-only and snowflake IDs for
    /// 3 s, first waiting for each one's first snowflake IDs (`pg1_serves`: also on pg1's
    /// side; else a server on pg1 may refuse, once it learnt pg1 was lost). Every ID
    /// must lie in its side's class, every worker ID too.
    async fn sample(&mut self, servers: &[(&ServerProcess, Side)], c: &Cluster, pg1_serves: bool) {
        let must = |side: Side| side == Side::Pg0 || pg1_serves;
        let mut snowflake = |base: &str, side: Side, ids: Vec<i64>| {
            for &id in &ids {
                let w = i64::from(worker_of(id));
                assert!(
                    side.holds("plain", w),
                    "worker ID {w} from {base} ({side:?})"
                );
            }
            match self.snowflakes.iter_mut().find(|(b, _)| b == base) {
                Some((_, all)) => all.extend(ids),
                None => self.snowflakes.push((base.to_owned(), ids)),
            }
        };
        for &(s, side) in servers.iter().filter(|(_, side)| must(*side)) {
            let r = s.remote(Duration::from_secs(5));
            let ids = eventually(
                Duration::from_secs(15),
                &format!("{} ({side:?}) issues snowflake IDs", s.base),
                async || try_snowflakes(&r, &c.plain_token, 10).await,
            )
            .await;
            snowflake(&s.base, side, ids);
        }
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            for &(s, side) in servers {
                let r = s.remote(Duration::from_secs(5));
                for (biz, token) in [("plain", &c.plain_token), ("odd", &c.odd_token)] {
                    match try_v1_ids(&r, biz, token, 10).await {
                        Ok(ids) => {
                            for &id in &ids {
                                assert!(
                                    side.holds(biz, id),
                                    "{biz} ID {id} from {} ({side:?})",
                                    s.base
                                );
                            }
                            let all = if biz == "odd" {
                                &mut self.odd
                            } else {
                                &mut self.plain
                            };
                            all.extend(ids);
                            if side == Side::Pg1 {
                                self.pg1_side.0 += 1;
                            }
                        }
                        Err(e) if must(side) => panic!("{} ({side:?}): {e}", s.base),
                        Err(_) => self.pg1_side.1 += 1,
                    }
                }
                if let Ok(ids) = try_snowflakes(&r, &c.plain_token, 20).await {
                    snowflake(&s.base, side, ids);
                }
            }
        }
    }
}

/// How two changes race.
#[derive(Debug, Clone, Copy)]
enum Race {
    /// From pg0 alone (no layout stored yet): `db add pg1` against `db add pg2`.
    AddAdd,
    /// From pg0 and pg1 (layout epoch 1): `db add pg2` against `db remove pg1`.
    AddRemove,
    /// As [`Race::AddRemove`], the remove started first.
    RemoveAdd,
}

/// Reproduction 2. A cluster under traffic, with enough bizs that a change takes a
/// while; two changes started together (the second `stagger` after the first): exactly
/// one exits 0, the other is refused having changed nothing (it lost the claim, saw
/// the first under way and heartbeating, saw it needs a database it is not
/// configured with, or found the new database without a schema yet). No layout row is left `moving`, no database out of the winner's
/// layout holds a live row, the loser's new database holds no biz row, and servers on
/// [pg0, pg1] and [pg0, pg2] under traffic give no duplicate.
///
/// On 41936a7 the second command started within 3 s of the first was refused only by
/// comparing the first's `changed_ms` (another host's clock) with its own, and two
/// commands that read the layouts before either wrote them both ran, each writing its
/// own epoch 1 to the databases: both could exit 0.
async fn race(race: Race, stagger: Duration) {
    let c = Cluster::start(3, 1, "50", true);
    let dbs = &c.dbs;
    bulk_bizs(dbs, 200);
    let (one, two, three) = (
        c.toml.clone(),
        toml_for(dbs, &[0, 1]),
        toml_for(dbs, &[0, 1, 2]),
    );
    if !matches!(race, Race::AddAdd) {
        let out = cli_ok(&one, &["db", "add", "pg1", &c.urls[1]]);
        assert!(out.contains("layout epoch 1 is done"), "{out}");
    }
    // (configuration, command, the members of the layout it makes)
    let add1 = (
        one.clone(),
        vec!["db", "add", "pg1", c.urls[1].as_str()],
        vec![0, 1],
    );
    let add2 = (
        one.clone(),
        vec!["db", "add", "pg2", c.urls[2].as_str()],
        vec![0, 2],
    );
    let add2_of_3 = (three.clone(), vec!["db", "add", "pg2"], vec![0, 1, 2]);
    let remove1 = (three.clone(), vec!["db", "remove", "pg1"], vec![0]);
    let (serving, commands) = match race {
        Race::AddAdd => (&one, [add1, add2]),
        Race::AddRemove => (&two, [add2_of_3, remove1]),
        Race::RemoveAdd => (&two, [remove1, add2_of_3]),
    };
    let server = ServerProcess::start(serving).await;
    let traffic = Traffic::start(vec![server.base.clone()], &c.plain_token, &c.odd_token);
    let from = dbs.version(0, "plain");
    eventually(
        Duration::from_secs(20),
        "traffic reserves",
        async || match dbs.version(0, "plain") {
            v if v > from + 2 => Ok(()),
            v => Err(format!("version {v}")),
        },
    )
    .await;

    let spawn = |(toml, args, _): &(String, Vec<&str>, Vec<usize>)| {
        let (toml, args): (String, Vec<String>) =
            (toml.clone(), args.iter().map(|a| a.to_string()).collect());
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cli(&toml, &args)
        })
    };
    let first = spawn(&commands[0]);
    tokio::time::sleep(stagger).await;
    let second = spawn(&commands[1]);
    let runs = [first.await.unwrap(), second.await.unwrap()];
    let won: Vec<usize> = (0..2).filter(|&k| runs[k].ok()).collect();
    assert_eq!(
        won.len(),
        1,
        "{race:?}, {stagger:?}: not exactly one change ran:\n{runs:#?}"
    );
    let (winner, loser) = (won[0], 1 - won[0]);
    let said = &runs[loser].stderr;
    assert!(
        said.contains("nothing changed")
            && (said.contains("claimed layout epoch")
                || said.contains("is running the change to layout epoch")
                || said.contains("is not configured")
                // The remove read pg2 before the add had migrated it.
                || said.contains("did not answer")),
        "{race:?}, {stagger:?}: the loser's refusal:\n{said}"
    );
    eprintln!(
        "{race:?}, second started {stagger:?} after the first: `{}` won; `{}` was refused: {}",
        commands[winner].1.join(" "),
        commands[loser].1.join(" "),
        said_last(&runs[loser])
    );

    let members = &commands[winner].2;
    let epoch = if matches!(race, Race::AddAdd) { 1 } else { 2 };
    let names: Vec<String> = members.iter().map(|i| format!("pg{i}")).collect();
    let newest = newest_layout(dbs, 0);
    assert!(
        newest.starts_with(&format!("{epoch} ")) && newest.ends_with(" done"),
        "{newest}"
    );
    for i in 0..3 {
        if !has_schema(dbs, i) {
            continue;
        }
        let moving = dbs.sql(
            i,
            "SELECT count(*) FROM segmint_layout WHERE state = 'moving'",
        );
        assert_eq!(moving, "0", "pg{i} holds a layout row still moving");
        let live = dbs.sql(i, "SELECT count(*) FROM tiny_id_info WHERE NOT frozen");
        if members.contains(&i) {
            assert_eq!(
                live_rows(dbs, 3, "plain")
                    .iter()
                    .find(|r| r.0 == i)
                    .map(|r| r.3),
                Some(epoch),
                "pg{i} of {names:?}"
            );
        } else {
            assert_eq!(live, "0", "pg{i} is out of {names:?} but holds live rows");
        }
    }
    // The loser's database, when it was a new one: not a single biz row (nor a schema,
    // when the loser was refused before it migrated the database).
    let loser_db: usize = commands[loser].1[2][2..].parse().unwrap();
    if !members.contains(&loser_db) && commands[loser].1[1] == "add" && has_schema(dbs, loser_db) {
        assert_eq!(dbs.sql(loser_db, "SELECT count(*) FROM tiny_id_info"), "0");
    }
    assert_consistent(dbs, 3);
    let mut streams = traffic.finish().await;
    drop(server);

    let s01 = ServerProcess::start(&two).await;
    let s02 = ServerProcess::start(&toml_for(dbs, &[0, 2])).await;
    let traffic = Traffic::start(
        vec![s01.base.clone(), s02.base.clone()],
        &c.plain_token,
        &c.odd_token,
    );
    // The servers serve: each stream gets enough answers to judge (`finish` waits for
    // them), and then the IDs are checked.
    streams.extend(traffic.finish().await);
    check_streams(&streams);
}

/// Reproduction 2, five interleavings, each on fresh databases.
mod two_changes_at_once {
    use super::{Race, race};
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn add_and_add_started_together() {
        race(Race::AddAdd, Duration::ZERO).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn add_and_add_the_second_a_moment_later() {
        race(Race::AddAdd, Duration::from_millis(250)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn add_and_remove_started_together() {
        race(Race::AddRemove, Duration::ZERO).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn add_then_remove_a_moment_later() {
        race(Race::AddRemove, Duration::from_millis(250)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn remove_then_add_a_moment_later() {
        race(Race::RemoveAdd, Duration::from_millis(250)).await;
    }
}

/// A member stopped: `db remove pg0`, `db add pg2` and `db remove pg1` are refused
/// naming pg1 (the removes with the `--lost` hint), changing nothing. pg1 up again:
/// `db remove pg1 --lost` is refused (it answers). pg1 stopped: `--lost` takes it out,
/// pg0 keeping 0 mod 2. pg1 up again: `db add pg1` is refused (declared lost), with or
/// without its URL. A new database gets classes and worker IDs that avoid pg1's class
/// for good: pg0 0 mod 4, pg2 2 mod 4, every odd worker ID blocked on both.
///
/// On 41936a7 there was no `--lost`: the refusals did not name it, and `db remove pg1
/// --lost` was an unknown argument.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_are_refused_while_a_member_is_down_answers_or_was_lost() {
    let c = Cluster::start(3, 1, "10", false);
    let (dbs, one) = (&c.dbs, &c.toml);
    cli_ok(one, &["db", "add", "pg1", &c.urls[1]]);
    let two = toml_for(dbs, &[0, 1]);
    let state = || [0, 1, 2].map(|i| layout_state(dbs, i));
    let before = state();

    // (0) pg1 left out of the configuration: named before pg2 is touched.
    let e = refusal(
        one,
        &["db", "add", "pg2", &c.urls[2]],
        "database_missing_from_config",
        &["\"pg1\""],
    );
    eprintln!("`db add pg2` without pg1 refused: {e}");
    assert!(
        !has_schema(dbs, 2),
        "pg2 was migrated by a refused `db add`"
    );
    assert_eq!(state(), before);

    // (a) pg1 stopped.
    dbs.stop(1);
    let down = |i: usize| {
        if i == 1 {
            None
        } else {
            Some(layout_state(dbs, i))
        }
    };
    let before_up = [0, 1, 2].map(|i| (i != 1).then(|| before[i].clone()));
    for args in [["db", "remove", "pg0"], ["db", "remove", "pg1"]] {
        let e = refusal(
            &two,
            &args,
            "database_unanswered",
            &["\"pg1\" did not answer", "segmint db remove pg1 --lost"],
        );
        eprintln!("{args:?} refused: {e}");
        assert_eq!([0, 1, 2].map(down), before_up, "{args:?} changed something");
    }
    // `db add` checks what the change needs before it touches the new database.
    let e = refusal(
        &two,
        &["db", "add", "pg2", &c.urls[2]],
        "database_unanswered",
        &["\"pg1\" did not answer"],
    );
    eprintln!("`db add pg2` refused: {e}");
    assert_eq!(
        [0, 1].map(down),
        [0, 1].map(|i| before_up[i].clone()),
        "`db add pg2` changed something"
    );
    assert!(
        !has_schema(dbs, 2),
        "pg2 was migrated by a refused `db add`"
    );
    dbs.start_again(1);
    assert_eq!(layout_state(dbs, 1), before[1]);

    // (b) `--lost` while pg1 is configured and answers.
    let e = refusal(
        &two,
        &["db", "remove", "pg1", "--lost"],
        "database_answers",
        &["\"pg1\" answers", "segmint db remove pg1"],
    );
    eprintln!("--lost refused: {e}");
    assert_eq!(
        [0, 1].map(|i| layout_state(dbs, i)),
        [0, 1].map(|i| before[i].clone())
    );

    // Declared lost while it is down; it comes back with its rows.
    dbs.stop(1);
    let out = cli_ok(&two, &["db", "remove", "pg1", "--lost"]);
    assert!(
        out.contains("layout epoch 2 is done: pg0 (0 mod 2)"),
        "{out}"
    );
    dbs.start_again(1);
    assert_eq!(live_rows(dbs, 2, "plain"), vec![(0, 2, 0, 2), (1, 2, 1, 1)]);

    // (c) The lost name is never added again.
    let lost = [0, 1].map(|i| layout_state(dbs, i));
    for (toml, args) in [
        (&two, vec!["db", "add", "pg1"]),
        (one, vec!["db", "add", "pg1", c.urls[1].as_str()]),
    ] {
        let e = refusal(toml, &args, "database_lost", &["\"pg1\" was declared lost"]);
        eprintln!("{args:?} refused: {e}");
        assert_eq!([0, 1].map(|i| layout_state(dbs, i)), lost);
    }
    // A new database: classes and worker IDs avoid the lost class for good.
    let out = cli_ok(one, &["db", "add", "pg2", &c.urls[2]]);
    assert!(
        out.contains("layout epoch 3 is done: pg0 (0 mod 4), pg2 (2 mod 4)"),
        "{out}"
    );
    assert_eq!(newest_layout(dbs, 0), "3 pg0=4:0,pg2=4:2,!pg1=2:1 done");
    for i in [0, 2] {
        let odd_blocked = dbs.sql(
            i,
            "SELECT count(*) FROM segmint_worker_lease WHERE worker_id % 2 = 1 AND holder = 'segmint-layout'",
        );
        assert_eq!(odd_blocked, "512", "odd worker IDs free on pg{i}");
    }
    let plain = live_rows(dbs, 3, "plain");
    assert!(
        plain.contains(&(0, 4, 0, 3)) && plain.contains(&(2, 4, 2, 3)),
        "{plain:?}"
    );
}

/// A change that claimed layout epoch 2 on pg0 and stopped before pg1 (claims go to
/// pg0 first), written by SQL: pg1's newest epoch is behind pg0's. The server shows pg1
/// `behind` (`/readyz`, `/status`, the metric) and reserves from pg0 alone; once pg1
/// holds the row too it is used again. No ID repeats.
///
/// On 41936a7 a server used every configured database whatever its layout rows said:
/// pg1 kept giving out segments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_does_not_use_a_database_whose_layout_is_behind() {
    let c = Cluster::start(2, 1, "10", false);
    let (dbs, token) = (&c.dbs, &c.plain_token);
    cli_ok(&c.toml, &["db", "add", "pg1", &c.urls[1]]);
    let server = ServerProcess::start(&toml_for(dbs, &[0, 1])).await;
    let remote = server.remote(Duration::from_secs(5));
    let mut ids = Vec::new();
    let mut serve_until = async |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < deadline, "{what}: not within 20 s");
            ids.extend(
                try_v1_ids(&remote, "plain", token, 10)
                    .await
                    .unwrap_or_else(|e| panic!("{what}: {e}")),
            );
        }
    };
    serve_until("both databases serve", &|| {
        dbs.version(0, "plain") > 3 && dbs.version(1, "plain") > 3
    })
    .await;

    let row = format!(
        "INSERT INTO segmint_layout (epoch, members, state, changed_ms) \
         VALUES (2, 'pg0=2:0,pg1=2:1', 'moving', {})",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    dbs.sql(0, &row);
    let pg1 = shows_standing(&remote, "pg1", "behind").await;
    assert!(pg1["residue"].is_null(), "{pg1}");
    assert_eq!(readyz_entry(&remote, "pg0").await["layout"], "current");
    let html = get(&remote, "/status").await.body;
    assert!(html.contains("layout behind another database's"), "{html}");
    // A reservation that started before the server read the row may still end on pg1:
    // two more from pg0 first.
    let v0 = dbs.version(0, "plain");
    serve_until("pg0 serves", &|| dbs.version(0, "plain") >= v0 + 2).await;
    let (v0, v1) = (dbs.version(0, "plain"), dbs.version(1, "plain"));
    serve_until("pg0 alone serves", &|| dbs.version(0, "plain") >= v0 + 10).await;
    assert_eq!(
        dbs.version(1, "plain"),
        v1,
        "a database behind gave out segments"
    );

    dbs.sql(1, &row);
    eventually(
        Duration::from_secs(10),
        "pg1 is current again",
        async || match readyz_entry(&remote, "pg1").await {
            e if e["layout"] == "current" && e["in_layout"] == true => Ok(()),
            e => Err(e.to_string()),
        },
    )
    .await;
    serve_until("pg1 serves again", &|| dbs.version(1, "plain") > v1 + 2).await;
    assert_unique(&ids);
}

/// Reproduction of a cut-off change: `db remove pg1` killed right after it claimed
/// layout epoch 2, then every row of `plain` frozen by SQL exactly as the command's
/// first step freezes them (`frozen`, `claimed_by` 2, `version + 1`). The two servers
/// under requests finish moving the biz themselves once the change's row has been
/// silent for the configured silence (`SILENT`, 2.5 s): `plain` is served again with
/// IDs above the fence within that silence + the catalog refresh (500 ms) + 10 s of
/// slack (the figure is printed), its rows end in
/// epoch 2's class (pg0: 0 mod 1; pg1's frozen), no ID repeats; running the command
/// again finishes the change.
///
/// On 41936a7 servers never moved a biz: it stayed frozen until the command was run
/// again (and there was no `claimed_by` column).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_finish_a_biz_left_frozen_by_a_killed_command_within_the_bound() {
    // How long a change's row must stay the same before servers finish its bizs
    // (`protocol.silent_ms`), and the catalog refresh, both as `toml_for` configures.
    let bound = SILENT + REFRESH + Duration::from_secs(10);

    let c = Cluster::start(2, 1, "10", true);
    let (dbs, plain_token, odd_token) = (&c.dbs, &c.plain_token, &c.odd_token);
    cli_ok(&c.toml, &["db", "add", "pg1", &c.urls[1]]);
    let two = toml_for(dbs, &[0, 1]);
    let servers = [
        ServerProcess::start(&two).await,
        ServerProcess::start(&two).await,
    ];
    let remotes: Vec<Remote> = servers
        .iter()
        .map(|s| s.remote(Duration::from_secs(5)))
        .collect();
    let (mut plain, mut odd) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(20);
    while dbs.version(0, "plain") < 4 || dbs.version(1, "plain") < 4 {
        assert!(Instant::now() < deadline, "both databases serve");
        for r in &remotes {
            plain.extend(try_v1_ids(r, "plain", plain_token, 10).await.unwrap());
            odd.extend(try_v1_ids(r, "odd", odd_token, 10).await.unwrap());
        }
    }

    let out = kill_midway(&two, &["db", "remove", "pg1"], "layout epoch 1 → 2", 1);
    eprintln!("the command printed before it was killed:\n{out}");
    for i in 0..2 {
        dbs.sql(
            i,
            "UPDATE tiny_id_info SET frozen = true, claimed_by = 2, version = version + 1 \
             WHERE biz_type = 'plain'",
        );
    }
    let frozen_at = Instant::now();
    let fence = highest_max_id(dbs, 2, "plain");

    // Requests to both servers in turn until one gives an ID above the fence: a
    // segment reserved after the move (what the servers had cached lies below it).
    let (mut refused, mut last) = (0, String::new());
    let healed = 'heal: loop {
        for r in &remotes {
            match try_v1_ids(r, "plain", plain_token, 10).await {
                Ok(ids) => {
                    let above = ids.iter().any(|&id| id > fence);
                    plain.extend(ids);
                    if above {
                        break 'heal frozen_at.elapsed();
                    }
                }
                Err(e) => {
                    refused += 1;
                    last = e;
                }
            }
            assert!(
                frozen_at.elapsed() < bound,
                "plain not served above the fence {fence} within {bound:?} of being frozen; {refused} requests refused, the last: {last}\n{}\n{}",
                servers[0].log_tail(),
                servers[1].log_tail()
            );
        }
    };
    eprintln!(
        "plain frozen by a cut-off change was served again {healed:?} after its rows were frozen ({refused} requests refused meanwhile, the last: {last}); bound {bound:?}"
    );
    assert!(healed < bound, "{healed:?}");
    assert!(
        servers.iter().any(|s| s
            .log_text()
            .contains("finished moving a biz whose layout change was cut off")),
        "no server says it moved the biz"
    );
    // The rows: pg0's in epoch 2's class, above the fence; pg1's frozen.
    assert_eq!(live_rows(dbs, 2, "plain"), vec![(0, 1, 0, 2)]);
    assert_eq!(
        dbs.sql(
            1,
            "SELECT frozen FROM tiny_id_info WHERE biz_type = 'plain'"
        ),
        "t"
    );
    // Both servers reserve in the new class (what one still had cached lies below).
    for r in &remotes {
        eventually(
            Duration::from_secs(10),
            "served above the fence",
            async || {
                let ids = try_v1_ids(r, "plain", plain_token, 10).await?;
                let above = ids.iter().any(|&id| id > fence);
                plain.extend(ids);
                above
                    .then_some(())
                    .ok_or_else(|| format!("none above {fence}"))
            },
        )
        .await;
    }

    // Run again, the command finishes the change (after watching its row for SILENT).
    let out = cli_ok(&two, &["db", "remove", "pg1"]);
    assert!(
        out.contains("finishing the change to layout epoch 2"),
        "{out}"
    );
    assert!(
        out.contains("layout epoch 2 is done: pg0 (0 mod 1)"),
        "{out}"
    );
    assert_eq!(live_rows(dbs, 2, "odd"), vec![(0, 2, 1, 2)]);
    for r in &remotes {
        plain.extend(try_v1_ids(r, "plain", plain_token, 10).await.unwrap());
        let ids = eventually(Duration::from_secs(10), "odd is served", async || {
            try_v1_ids(r, "odd", odd_token, 10).await
        })
        .await;
        odd.extend(ids);
    }
    assert!(
        odd.iter().all(|id| id % 2 == 1),
        "an even ID of the odd-only biz"
    );
    assert_unique(&plain);
    assert_unique(&odd);
}

/// A database restored from a backup while a change runs: `db remove pg1` freezes
/// `plain` on pg0 and pg1 and is held (a lock on pg0's witness row of pg1) just before
/// it records the frozen rows as witnesses; meanwhile pg1's row goes back to a backup
/// taken before the last reservations (unfrozen, an older version and `max_id`), as a
/// restore would. The command reads the rows again before switching, finds pg1's
/// behind what it froze, stops non-zero naming pg1 (pg0's row thawed, pg1's left as it
/// is), and the server fences pg1; no ID repeats. Once the operator raises pg1 with
/// `db fence`, the command runs through.
///
/// Without the read before the switch (as on 3eb127e), the change went on and was
/// marked done beside a live pg1 row of the old layout; servers that had not read the
/// witnesses of the freeze could reserve from it (the model's scenario F).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restored_during_a_change_stops_it_and_is_fenced() {
    let c = Cluster::start(2, 1, "10", false);
    let (dbs, token) = (&c.dbs, &c.plain_token);
    cli_ok(&c.toml, &["db", "add", "pg1", &c.urls[1]]);
    let two = toml_for(dbs, &[0, 1]);
    let server = ServerProcess::start(&two).await;
    let remote = server.remote(Duration::from_secs(5));
    let mut ids = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while dbs.version(0, "plain") < 4 || dbs.version(1, "plain") < 4 {
        assert!(Instant::now() < deadline, "both databases serve");
        ids.extend(try_v1_ids(&remote, "plain", token, 10).await.unwrap());
    }
    // The backup of pg1's row, then more reservations on pg1 (witnessed on pg0).
    let backup = dbs.sql(
        1,
        "SELECT max_id, version, frozen, claimed_by FROM tiny_id_info WHERE biz_type = 'plain'",
    );
    let v1 = dbs.version(1, "plain");
    let deadline = Instant::now() + Duration::from_secs(20);
    while dbs.version(1, "plain") < v1 + 3 {
        assert!(Instant::now() < deadline, "pg1 serves past its backup");
        ids.extend(try_v1_ids(&remote, "plain", token, 10).await.unwrap());
    }
    let issued = *ids.iter().max().unwrap();
    let witnessed = dbs.sql(
        0,
        "SELECT count(*) FROM segmint_witness WHERE database = 'pg1' AND biz_type = 'plain'",
    );
    assert_eq!(witnessed, "1", "pg1's reservations are witnessed on pg0");

    // Hold the command where it records the frozen rows as witnesses on pg0.
    let client = hold(
        &c.urls[0],
        "SELECT 1 FROM segmint_witness \
             WHERE database = 'pg1' AND biz_type = 'plain' FOR UPDATE",
    )
    .await;
    let command = {
        let two = two.clone();
        tokio::task::spawn_blocking(move || cli(&two, &["--json", "db", "remove", "pg1"]))
    };
    let frozen = "SELECT frozen AND claimed_by = 2 FROM tiny_id_info WHERE biz_type = 'plain'";
    eventually(
        Duration::from_secs(30),
        "both rows frozen by the change",
        async || match (dbs.sql(0, frozen), dbs.sql(1, frozen)) {
            (a, b) if a == "t" && b == "t" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    // The restore: pg1's row as it was at the backup.
    let f: Vec<&str> = backup.split('|').collect();
    dbs.sql(
        1,
        &format!(
            "UPDATE tiny_id_info SET max_id = {}, version = {}, frozen = '{}', claimed_by = {} \
             WHERE biz_type = 'plain'",
            f[0], f[1], f[2], f[3]
        ),
    );
    client.batch_execute("ROLLBACK").await.expect("unlock");
    let e = command.await.expect("the command").failure();
    assert_eq!(e["reason"], "row_behind_witness", "{e}");
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("database \"pg1\" went back in time")),
        "{e}"
    );
    assert!(
        e["hint"]
            .as_str()
            .is_some_and(|h| h.contains("segmint db fence pg1")),
        "{e}"
    );
    eprintln!("the command said: {e}");
    assert_eq!(
        dbs.sql(
            0,
            "SELECT frozen, layout_epoch FROM tiny_id_info WHERE biz_type = 'plain'"
        ),
        "f|1",
        "pg0's row is thawed in epoch 1"
    );
    assert!(newest_layout(dbs, 0).ends_with("moving"));

    // The server fences pg1: it is behind what the server saw and what was witnessed.
    eventually(Duration::from_secs(20), "pg1 fenced", async || {
        let pg1 = readyz_entry(&remote, "pg1").await;
        if pg1["fenced"].is_string() {
            Ok(())
        } else {
            Err(pg1.to_string())
        }
    })
    .await;
    for _ in 0..20 {
        ids.extend(try_v1_ids(&remote, "plain", token, 10).await.unwrap());
    }
    assert_unique(&ids);
    assert!(ids.iter().max().unwrap() > &issued);

    // The operator raises pg1 above every issued ID; the change then runs through.
    // The change is still pending: the row raised is frozen for it, never put back
    // into service in the class epoch 2 takes away (the model's scenario F found IDs
    // issued twice when `db fence` raised it live).
    cli_ok(&two, &["db", "fence", "pg1"]);
    assert_eq!(
        dbs.sql(
            1,
            "SELECT frozen OR layout_epoch >= 2, version >= 1099511627776 \
             FROM tiny_id_info WHERE biz_type = 'plain'"
        ),
        "t|t",
        "pg1's row is raised, and not live in epoch 1"
    );
    let out = cli_ok(&two, &["db", "remove", "pg1"]);
    assert!(
        out.contains("layout epoch 2 is done: pg0 (0 mod 1)"),
        "{out}"
    );
    for _ in 0..20 {
        ids.extend(try_v1_ids(&remote, "plain", token, 10).await.unwrap());
    }
    assert_unique(&ids);
}

/// Worker IDs around a database about to be added. Two servers on pg0 alone hold
/// worker IDs 0 and 1 there (pg0 is 0 mod 1: every worker ID is pg0's). A third server
/// is started configured with pg0 and the new, empty pg1 as `db add pg1` will make them
/// (pg1: 1 mod 2), but cut off from pg0: it reads only pg1, which holds no layout, and
/// leases no worker ID there (worker ID 1 is in use on pg0), saying why in its log.
/// Once `db add pg1` has stored the layout (blocking worker ID 1 on pg0, freeing it on
/// pg1 with its bound), it still leases none: pg1 holds no snowflake spec yet, and only
/// a server reading both databases may record it there (`snowflake::agreement`; on
/// bd2b2d6, before the agreement, it leased an odd worker ID on pg1 above the bound).
/// The old servers keep issuing. No snowflake ID repeats.
///
/// On 3eb127e the third server fell back to its configured classes and leased worker
/// ID 1 on pg1 at once, beside the holder on pg0 (the model's scenario E2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_reaching_only_a_new_database_leases_no_worker_id_there() {
    let c = Cluster::start(2, 1, "10", false);
    let (dbs, token) = (&c.dbs, &c.plain_token);
    // The new database's schema, from a configuration naming both: the membership is
    // recorded already (pg0's), so pg1 gets no layout row.
    cli_ok(&toml_for(dbs, &[0, 1]), &["migrate"]);
    assert_eq!(dbs.sql(1, "SELECT count(*) FROM segmint_layout"), "0");
    let one = format!("{SNOWFLAKE}\n{}", toml_for(dbs, &[0]));
    let old = [
        ServerProcess::start(&one).await,
        ServerProcess::start(&one).await,
    ];
    let mut ids = Vec::new();
    let mut workers = HashSet::new();
    for s in &old {
        let r = s.remote(Duration::from_secs(5));
        let got = eventually(Duration::from_secs(10), "a worker ID on pg0", async || {
            try_snowflakes(&r, token, 10).await
        })
        .await;
        workers.extend(got.iter().map(|&id| worker_of(id)));
        ids.extend(got);
    }
    assert_eq!(workers, HashSet::from([0, 1]), "worker IDs held on pg0");

    // pg0 unreachable from the new server: its URL points at a closed port.
    let cut_off = format!("{SNOWFLAKE}\n{}", toml_for(dbs, &[0, 1]))
        .replace(&c.urls[0], "postgres://postgres@127.0.0.1:9/segmint");
    let new = ServerProcess::start(&cut_off).await;
    eventually(
        Duration::from_secs(10),
        "the new server refuses to lease on pg1",
        async || {
            let log = new.log_text();
            if log.contains("no layout done was read") {
                Ok(())
            } else {
                Err(log)
            }
        },
    )
    .await;
    for s in &old {
        let r = s.remote(Duration::from_secs(5));
        ids.extend(try_snowflakes(&r, token, 10).await.unwrap());
    }
    assert_eq!(
        dbs.sql(1, "SELECT count(*) FROM segmint_worker_lease"),
        "0",
        "a worker ID leased on pg1 without a layout"
    );

    // The change stores the layout; the new server, which cannot read pg0's snowflake
    // spec, still leases nothing, and says so.
    cli_ok(&c.toml, &["db", "add", "pg1", &c.urls[1]]);
    let remote = new.remote(Duration::from_secs(5));
    eventually(
        Duration::from_secs(20),
        "the new server waits for the databases to agree on the snowflake spec",
        async || match try_snowflakes(&remote, token, 10).await {
            Ok(got) => panic!("leased without reading pg0's spec: {got:?}"),
            Err(e) if e.contains("agree on the snowflake spec") => Ok(()),
            Err(e) => Err(e),
        },
    )
    .await;
    for s in &old {
        let r = s.remote(Duration::from_secs(5));
        if let Ok(got) = try_snowflakes(&r, token, 10).await {
            ids.extend(got);
        }
    }
    assert!(
        try_snowflakes(&remote, token, 1).await.is_err(),
        "still no worker ID"
    );
    assert_unique(&ids);
}

/// `segmint import` racing `db remove`: the import reads the layouts (epoch 1, none
/// pending) and is then held on a table lock on pg0 before it creates the biz; the
/// remove starts meanwhile. Once the lock goes, whatever the order, the imported biz
/// ends up moved by the change (live on pg0 in epoch 2), never left behind in epoch 1
/// where no server serves it and no change moves it; an import that loses the race
/// stops naming the change.
///
/// Without the layout check in the insert's transaction (as on e763dd1), the change
/// claimed its epoch and listed the bizs while the import waited, and the import then
/// created rows in epoch 1 that the change never moved (the model's scenario G).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_racing_a_change_leaves_no_row_behind() {
    let c = Cluster::start(2, 1, "10", false);
    let dbs = &c.dbs;
    cli_ok(&c.toml, &["db", "add", "pg1", &c.urls[1]]);
    let two = toml_for(dbs, &[0, 1]);
    let client = hold(&c.urls[0], "LOCK TABLE tiny_id_info IN EXCLUSIVE MODE").await;
    let waiting = async |n: i64, what: &'static str| {
        eventually(Duration::from_secs(30), what, async || {
            let now: i64 = dbs
                .sql(0, "SELECT count(*) FROM pg_locks WHERE NOT granted")
                .parse()
                .map_err(|e| format!("{e}"))?;
            if now >= n {
                Ok(())
            } else {
                Err(format!("{now} waiting"))
            }
        })
        .await;
    };
    let file = tempfile::NamedTempFile::new().expect("a file");
    std::fs::write(
        file.path(),
        "id\tbiz_type\tbegin_id\tmax_id\tstep\tdelta\tremainder\tcreate_time\tupdate_time\tversion\n\
         1\tlate\t1\t2001\t1000\t1\t0\t2017-11-19 00:00:00\t2017-11-20 10:00:00\t3\n",
    )
    .expect("write the export");
    let path = file.path().to_str().expect("a path").to_owned();
    let import = {
        let two = two.clone();
        tokio::task::spawn_blocking(move || cli(&two, &["import", "tinyid", &path]))
    };
    waiting(1, "the import waits for the lock").await;
    let remove = {
        let two = two.clone();
        tokio::task::spawn_blocking(move || cli(&two, &["db", "remove", "pg1"]))
    };
    waiting(2, "the remove waits too").await;
    client.batch_execute("ROLLBACK").await.expect("unlock");
    let removed = remove.await.expect("the remove");
    assert!(removed.ok(), "{removed:?}");
    let imported = import.await.expect("the import");
    let said = format!("{}{}", imported.stdout, imported.stderr);
    assert!(
        imported.ok() || said.contains("a change to layout epoch 2 began meanwhile"),
        "{said}"
    );
    let row = "SELECT layout_epoch, frozen FROM tiny_id_info WHERE biz_type = 'late'";
    assert_eq!(dbs.sql(0, row), "2|f", "pg0 serves the biz in epoch 2");
    let left = "SELECT count(*) FROM tiny_id_info WHERE layout_epoch < 2 AND NOT frozen";
    for i in 0..2 {
        assert_eq!(
            dbs.sql(i, left),
            "0",
            "no live row left in epoch 1 on pg{i}"
        );
    }
}

/// A step of a change waiting on a lock longer than a request may wait (the fetch
/// timeout, 1 s here) is judged by the step bound (`protocol.step_timeout_ms`, 30 s by
/// default), on the database's side too: the change finishes once the lock is gone,
/// instead of being cut off by a `statement_timeout` of a request's length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_waiting_on_a_lock_longer_than_a_request_may_still_finishes() {
    let c = Cluster::start(2, 1, "10", false);
    let dbs = &c.dbs;
    // Writes of witnesses on pg0 wait; reads go on.
    let client = hold(&c.urls[0], "LOCK TABLE segmint_witness IN EXCLUSIVE MODE").await;
    let add = {
        let (toml, url) = (c.toml.clone(), c.urls[1].clone());
        tokio::task::spawn_blocking(move || cli(&toml, &["db", "add", "pg1", &url]))
    };
    eventually(
        Duration::from_secs(60),
        "the change waits for the lock",
        async || {
            let waiting = dbs.sql(
                0,
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
             WHERE NOT l.granted AND c.relname = 'segmint_witness'",
            );
            if waiting == "1" {
                Ok(())
            } else {
                Err(format!("{waiting} waiting"))
            }
        },
    )
    .await;
    // Held past the fetch timeout (1 s): the waiting statement outlives a request's
    // bound, which cut it off before.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    client.batch_execute("ROLLBACK").await.expect("unlock");
    let added = add.await.expect("the add");
    assert!(added.ok(), "{added:?}");
    assert!(added.stdout.contains("layout epoch 1 is done"), "{added:?}");
    assert_eq!(
        dbs.sql(
            0,
            "SELECT count(*) FROM segmint_witness WHERE biz_type = 'plain'"
        ),
        "1",
        "pg0 holds pg1's frozen row of `plain` as a witness"
    );
}

/// As above for an import: its read of every biz row and its batches of new rows wait
/// on a lock past the fetch timeout (at a million bizs the read alone takes seconds),
/// and the import finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_waiting_on_a_lock_longer_than_a_request_may_still_finishes() {
    let c = Cluster::start(1, 1, "10", false);
    let client = hold(
        &c.urls[0],
        "LOCK TABLE tiny_id_info IN ACCESS EXCLUSIVE MODE",
    )
    .await;
    let file = tempfile::NamedTempFile::new().expect("a file");
    std::fs::write(
        file.path(),
        "biz_type\tmax_id\tstep\tdelta\tremainder\nlate\t1000\t100\t1\t0\n",
    )
    .expect("write the export");
    let path = file.path().to_str().expect("a path").to_owned();
    let import = {
        let toml = c.toml.clone();
        tokio::task::spawn_blocking(move || cli(&toml, &["import", "tinyid", &path]))
    };
    let dbs = &c.dbs;
    eventually(
        Duration::from_secs(60),
        "the import waits for the lock",
        async || {
            let waiting = dbs.sql(0, "SELECT count(*) FROM pg_locks WHERE NOT granted");
            if waiting == "0" {
                Err("none waiting".to_owned())
            } else {
                Ok(())
            }
        },
    )
    .await;
    // Held past the fetch timeout (1 s), as above: real time, not a condition.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    client.batch_execute("ROLLBACK").await.expect("unlock");
    let imported = import.await.expect("the import");
    assert!(imported.ok(), "{imported:?}");
    assert_eq!(
        dbs.sql(0, "SELECT max_id FROM tiny_id_info WHERE biz_type = 'late'"),
        "1000"
    );
}
