//! Counters that restart each period, through real processes on two PostgreSQL
//! databases: a rollover at midnight in the biz's zone under load from two servers
//! whose clocks are 200 ms apart (libfaketime), also on a day a daylight-saving change
//! skips midnight; a restart in the middle of a period; a counter that outgrows its
//! width; and what every route does for such a biz.

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::cli::{CliCluster, segmint_cli, segmint_ok};
use common::clock::{ShiftedClock, noon_zone};
use common::http::{Remote, Target, Via, bearer, compat, get, metric, tinyid_params, v1};
use common::*;

/// `ORD`, the date, six digits of counter.
const ORDER: &str = "ORD{yyyy}{MM}{dd}{seq:06}";

/// `biz add NAME --step STEP --format PATTERN --zone ZONE`; a token for it.
fn add(setup: &CliCluster, name: &str, step: i64, pattern: &str, zone: &str) -> String {
    setup.add(name, step, &["--format", pattern, "--zone", zone])
}

/// Two databases with biz `name` (`pattern`, segments of `step`) in a zone where it is
/// now about noon, and a server: the cluster, the biz's token, today's `yyyyMMdd`
/// there and the server.
async fn at_noon(
    name: &str,
    step: i64,
    pattern: &str,
) -> (CliCluster, String, String, ServerProcess) {
    let setup = CliCluster::start("");
    let (zone, ahead) = noon_zone();
    let token = add(&setup, name, step, pattern, &zone);
    let today = yyyymmdd(now_ms(), ahead);
    let server = ServerProcess::start(&setup.toml).await;
    (setup, token, today, server)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// `/v1/ids/{biz}?count=N` as strings, or the response when it is not a 200.
async fn formatted(
    target: &impl Target,
    biz: &str,
    token: &str,
    n: usize,
) -> Result<Vec<String>, common::http::Resp> {
    let r = v1(
        target,
        false,
        &format!("/v1/ids/{biz}?count={n}"),
        bearer(token),
    )
    .await;
    if r.status != 200 {
        return Err(r);
    }
    Ok(r.json()["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_str().expect("a formatted ID").to_owned())
        .collect())
}

/// The date (`yyyyMMdd`) and counter of an `ORD…` ID.
fn date_and_counter(id: &str) -> (&str, i64) {
    assert!(id.len() == 17 && id.starts_with("ORD"), "{id}");
    (&id[3..11], id[11..].parse().unwrap())
}

/// Two databases with biz `ord` and two servers whose clocks reach `midnight_ms`
/// 200 ms apart, 25 s from now by the true clock (the databases' clocks with the later
/// server), for load from 3 s before it.
struct Rollover {
    _setup: CliCluster,
    token: String,
    servers: Vec<ServerProcess>,
    /// How far each server's clock is ahead of the true one; server 0 is `lead_ms`
    /// ahead of server 1.
    offset_ms: [i64; 2],
    /// When server 1's clock reaches midnight, by the true clock.
    target_ms: i64,
    lead_ms: i64,
}

impl Rollover {
    async fn start(zone: &str, midnight_ms: i64, pattern: &str) -> Rollover {
        let setup = CliCluster::start("");
        let token = add(&setup, "ord", 200, pattern, zone);
        // Midnight comes 25 s from now by the true clock: time for the databases to
        // restart on the shifted clock and both servers to start on a loaded machine
        // (each takes about a second idle).
        let lead_ms = 200;
        let target_ms = now_ms() + 25_000;
        let offset_ms = [midnight_ms - target_ms + lead_ms, midnight_ms - target_ms];
        // The databases' clocks are the later server's: a server begins a period only
        // once a database's clock has too (the earlier one is within the tolerance).
        setup
            .dbs
            .shift_clocks(&ShiftedClock::ahead(offset_ms[1] as f64 / 1000.0));
        let mut servers = Vec::new();
        for &ms in &offset_ms {
            let clock = ShiftedClock::ahead(ms as f64 / 1000.0);
            servers.push(clock.server(&setup.toml).await);
        }
        let load_from = target_ms - 3_000;
        assert!(
            now_ms() < load_from,
            "the databases and servers took over 22 s to start: the rollover would be missed"
        );
        tokio::time::sleep(Duration::from_millis((load_from - now_ms()).max(0) as u64)).await;
        Rollover {
            _setup: setup,
            token,
            servers,
            offset_ms,
            target_ms,
            lead_ms,
        }
    }
}

/// What one request of [`http_load`] got: the server's index, the true times it was
/// sent and answered, and the formatted IDs or the response.
type Answer = (usize, i64, i64, Result<Vec<String>, common::http::Resp>);

/// The pause between two requests of one [`http_load`] loop: some hundreds a second
/// each, as the layout tests' streams (`common::traffic`). Unpaced, each loop takes as
/// much CPU as its server answers with, from every test running beside it.
const PACE: Duration = Duration::from_millis(2);

/// `tasks` loops per server asking `/v1/ids/ord?count=20` until `until` (true ms), each
/// pausing [`PACE`] after an answer.
async fn http_load(
    servers: &[ServerProcess],
    token: &str,
    tasks: usize,
    until: i64,
) -> Vec<Answer> {
    let remotes: Vec<Remote> = servers
        .iter()
        .map(|s| s.remote(Duration::from_secs(10)))
        .collect();
    let runs = remotes.iter().enumerate().flat_map(|(s, remote)| {
        (0..tasks).map(move |_| async move {
            let mut out = Vec::new();
            while now_ms() < until {
                let sent = now_ms();
                let ids = formatted(remote, "ord", token, 20).await;
                out.push((s, sent, now_ms(), ids));
                tokio::time::sleep(PACE).await;
            }
            out
        })
    });
    futures_util::future::join_all(runs)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// Two servers on clocks 200 ms apart issue `ORD…` IDs under load across the midnight
/// at `midnight_ms` (the true instant the biz's zone begins the day `after`; `before`
/// is the day before): no ID twice; each ID of the day its server's clock was in, or
/// of the next day when a server whose clock is ahead had begun it on every database
/// (200 ms early at most); both days' counters start low.
async fn rollover(zone: &str, midnight_ms: i64, before: &str, after: &str) {
    let Rollover {
        token,
        servers,
        offset_ms,
        target_ms,
        lead_ms,
        _setup: _databases,
        ..
    } = Rollover::start(zone, midnight_ms, ORDER).await;
    // Requests from 3 tasks per server until 3 s after midnight.
    let answers = http_load(&servers, &token, 3, target_ms + 3_000).await;
    let mut seen = HashSet::new();
    let mut per_day: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut per_server_day: HashSet<(usize, String)> = HashSet::new();
    for (s, sent, answered, ids) in &answers {
        let ids = ids.as_ref().unwrap_or_else(|r| panic!("server {s}: {r:?}"));
        // The server's clock during the request.
        let (from, to) = (sent + offset_ms[*s], answered + offset_ms[*s]);
        for id in ids {
            assert!(seen.insert(id.clone()), "{id} issued twice");
            let (day, counter) = date_and_counter(id);
            let allowed = if day == before {
                from < midnight_ms
            } else if day == after {
                to + lead_ms >= midnight_ms
            } else {
                false
            };
            assert!(
                allowed,
                "{id} from server {s}, whose clock read {from}..{to} (midnight at {midnight_ms})"
            );
            per_day.entry(day.to_owned()).or_default().push(counter);
            per_server_day.insert((*s, day.to_owned()));
        }
    }
    let days: Vec<&String> = per_day.keys().collect();
    assert_eq!(days, [before, after], "both days issued");
    for counters in per_day.values() {
        let first = counters.iter().min().unwrap();
        assert!(*first <= 2, "each day's counter starts at 1 or 2: {first}");
    }
    for s in 0..2 {
        for day in [before, after] {
            assert!(
                per_server_day.contains(&(s, day.to_owned())),
                "server {s} issued IDs of {day}"
            );
        }
    }
    println!(
        "{} IDs in {} requests; {:?}",
        seen.len(),
        answers.len(),
        per_day
            .iter()
            .map(|(d, c)| (d, c.len()))
            .collect::<Vec<_>>()
    );
}

/// Midnight in Shanghai (16:00 UTC), the next one to come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn midnight_in_the_zone_under_load_from_two_servers_200_ms_apart() {
    let (midnight, before, after) = next_shanghai_midnight();
    rollover("Asia/Shanghai", midnight, &before, &after).await;
}

/// Client libraries crossing midnight at once.
const CLIENTS: usize = 12;

/// Segment reservations every database has answered to a server, of any outcome.
async fn reservations(server: &ServerProcess) -> f64 {
    let r = get(&server.remote(Duration::from_secs(10)), "/metrics").await;
    assert_eq!(r.status, 200, "{r:?}");
    r.body
        .lines()
        .filter(|l| l.starts_with("segmint_segment_fetches_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Twelve client libraries, each given both servers (clocks 200 ms apart), issue IDs
/// from their own segments across midnight in Shanghai, while the servers also issue
/// over HTTP: no ID twice; an ID of the day before only while the server that handed
/// out its segment was still in that day, one of the new day only once a server had
/// begun it; every client drops its segment of the day before at midnight. The
/// databases see a few reservations at midnight, not one per client: a client's
/// segment is carved out of its server's own buffer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_libraries_cross_midnight_without_a_reservation_each() {
    let (midnight_ms, before, after) = next_shanghai_midnight();
    // Nine digits of counter: clients and servers issue far more than a million a day.
    let pattern = "ORD{yyyy}{MM}{dd}{seq:09}";
    let Rollover {
        token,
        servers,
        target_ms,
        lead_ms,
        offset_ms,
        _setup: _databases,
        ..
    } = Rollover::start("Asia/Shanghai", midnight_ms, pattern).await;
    let urls: Vec<String> = servers.iter().map(|s| s.base.clone()).collect();
    let clients: Vec<segmint_client::Client> = (0..CLIENTS)
        .map(|_| {
            segmint_client::Client::builder()
                .servers(urls.clone())
                .token(token.clone())
                .request_timeout(Duration::from_secs(10))
                .wait_timeout(Duration::from_secs(20))
                .build()
                .unwrap()
        })
        .collect();
    let until = target_ms + 3_000;
    // Each client issues batches of 10 IDs, with the true times before and after.
    let issuing = clients.iter().enumerate().map(|(c, client)| async move {
        let biz = client.biz("ord").unwrap();
        let mut out = Vec::new();
        while now_ms() < until {
            let from = now_ms();
            let ids = biz.next_ids(10).await;
            out.push((c, from, now_ms(), ids));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        (out, biz.stats())
    });
    // The servers' own requests, as in the rollover test.
    let http = http_load(&servers, &token, 1, until);
    // Reservations in the second before the first server's midnight and in the
    // second from it.
    let first_midnight = target_ms - lead_ms;
    let counted = async {
        let mut marks = Vec::new();
        for at in [
            first_midnight - 1_000,
            first_midnight,
            first_midnight + 1_000,
        ] {
            tokio::time::sleep(Duration::from_millis((at - now_ms()).max(0) as u64)).await;
            let mut total = 0.0;
            for server in &servers {
                total += reservations(server).await;
            }
            marks.push(total);
        }
        marks
    };
    let (issued, served, marks) =
        tokio::join!(futures_util::future::join_all(issuing), http, counted);
    let mut seen = HashSet::new();
    let mut per_day: BTreeMap<String, usize> = BTreeMap::new();
    let mut clients_of_day: HashSet<(usize, String)> = HashSet::new();
    for (batches, stats) in &issued {
        for (c, from, to, ids) in batches {
            let ids = ids.as_ref().unwrap_or_else(|e| panic!("client {c}: {e}"));
            for id in ids {
                let text = format!("ORD{id}");
                assert!(seen.insert(text.clone()), "{text} issued twice");
                let day = &text[3..11];
                // The segment's period ends by the true clock no later than its
                // server reached midnight (server 1, the later, at `target_ms`); one of
                // the new day was carved after a server reached it.
                let allowed = if day == before {
                    *from < target_ms
                } else if day == after {
                    *to >= first_midnight
                } else {
                    false
                };
                assert!(
                    allowed,
                    "{text} from client {c}, issued between {from} and {to} (true ms); midnight reached from {first_midnight} to {target_ms}"
                );
                *per_day.entry(day.to_owned()).or_default() += 1;
                clients_of_day.insert((*c, day.to_owned()));
            }
        }
        assert!(
            stats.expired >= 1,
            "each client dropped its segment of the day before: {stats:?}"
        );
    }
    for (s, sent, answered, ids) in &served {
        let ids = ids.as_ref().unwrap_or_else(|r| panic!("server {s}: {r:?}"));
        let (from, to) = (sent + offset_ms[*s], answered + offset_ms[*s]);
        for id in ids {
            assert!(
                seen.insert(id.clone()),
                "{id} issued twice (a client issued it too)"
            );
            let day = &id[3..11];
            assert!(
                (day == before && from < midnight_ms)
                    || (day == after && to + lead_ms >= midnight_ms),
                "{id} from server {s}, whose clock read {from}..{to}"
            );
        }
    }
    for c in 0..CLIENTS {
        for day in [&before, &after] {
            assert!(
                clients_of_day.contains(&(c, day.to_string())),
                "client {c} issued IDs of {day}"
            );
        }
    }
    let (before_midnight, after_midnight) = (marks[1] - marks[0], marks[2] - marks[1]);
    println!(
        "{} IDs from {CLIENTS} clients and 2 servers; {per_day:?}; reservations on the databases: {before_midnight} in the second before midnight, {after_midnight} in the second from it",
        seen.len()
    );
    // Each client fetched a segment of the new day; the databases saw each server
    // begin the day on each, and little more.
    assert!(
        after_midnight <= 8.0,
        "{after_midnight} reservations in the second from midnight, for {CLIENTS} clients"
    );
}

/// The next midnight in Shanghai (UTC+8 without daylight saving since 1991), and the
/// days before and after it.
fn next_shanghai_midnight() -> (i64, String, String) {
    let day_ms = 86_400_000;
    let midnight = (now_ms() + 8 * 3_600_000).div_euclid(day_ms) * day_ms + day_ms - 8 * 3_600_000;
    (midnight, yyyymmdd(midnight - 1, 8), yyyymmdd(midnight, 8))
}

/// A server whose clock is ten minutes behind another's: once the other has begun the new
/// day on every database, the late server's requests get the new day's IDs (none of
/// the other's) rather than an error, though its clock is still in the old day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_behind_follows_a_day_begun_on_every_database() {
    let (midnight, before, after) = next_shanghai_midnight();
    let setup = CliCluster::start("");
    let token = add(&setup, "ord", 100, ORDER, "Asia/Shanghai");
    // Ten minutes apart: the late server's clock stays in the old day however long the
    // early one takes.
    let ahead = ShiftedClock::ahead((midnight - now_ms() + 300_000) as f64 / 1000.0);
    let behind = ShiftedClock::ahead((midnight - now_ms() - 300_000) as f64 / 1000.0);
    // The databases' clocks are the early server's: the day begins by theirs too.
    setup.dbs.shift_clocks(&ahead);
    let early = ahead.server(&setup.toml).await;
    let early = early.remote(Duration::from_secs(10));
    // The early server reserves until both databases' rows are in the new day.
    let floor: i64 = format!("{after}000000").parse().unwrap();
    let mut issued = HashSet::new();
    for round in 0.. {
        let rows: Vec<i64> = (0..2)
            .map(|db| {
                setup
                    .dbs
                    .sql(db, "SELECT max_id FROM tiny_id_info WHERE biz_type = 'ord'")
                    .parse()
                    .unwrap()
            })
            .collect();
        if rows.iter().all(|&max_id| max_id > floor) {
            break;
        }
        assert!(
            round < 200,
            "the new day never began on both databases: {rows:?}"
        );
        for id in formatted(&early, "ord", &token, 100).await.unwrap() {
            assert_eq!(date_and_counter(&id).0, after, "{id}");
            issued.insert(id);
        }
    }
    let late = behind.server(&setup.toml).await;
    let late = late.remote(Duration::from_secs(10));
    let ids = formatted(&late, "ord", &token, 50)
        .await
        .unwrap_or_else(|r| panic!("the late server refused: {r:?}"));
    for id in ids {
        assert_eq!(date_and_counter(&id).0, after, "{id} (not {before})");
        assert!(issued.insert(id.clone()), "{id} issued twice");
    }
}

/// Santiago's clocks skip from 00:00 to 01:00 on 6 September 2026: that day begins at
/// 01:00 local time (04:00 UTC), and the day before ends when its midnight would
/// have been.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn midnight_skipped_by_a_daylight_saving_change() {
    let begins = 1_788_667_200_000; // 2026-09-06T04:00:00Z
    rollover("America/Santiago", begins, "20260905", "20260906").await;
}

/// `yyyyMMdd` of the instant `ms` in a zone `hours` ahead of UTC (civil from days, as
/// in Howard Hinnant's algorithm).
fn yyyymmdd(ms: i64, hours: i64) -> String {
    let days = (ms + hours * 3_600_000).div_euclid(86_400_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}{m:02}{d:02}")
}

/// Five batches of 77 `ord` IDs from `server`.
async fn five_batches(server: &ServerProcess, token: &str) -> Vec<String> {
    let remote = server.remote(Duration::from_secs(10));
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.extend(formatted(&remote, "ord", token, 77).await.unwrap());
    }
    ids
}

/// A server killed with `kill -9` in the middle of a period, then started again:
/// its IDs continue above what was issued in each database's class, in the same day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_the_middle_of_a_period_continues_above_what_was_issued() {
    let (setup, token, today, mut server) = at_noon("ord", 100, ORDER).await;
    let before = five_batches(&server, &token).await;
    server.child.kill9();
    let server = ServerProcess::start(&setup.toml).await;
    let after = five_batches(&server, &token).await;
    let top = |ids: &[String], parity: i64| {
        ids.iter()
            .map(|id| date_and_counter(id))
            .inspect(|(day, _)| assert_eq!(*day, today))
            .map(|(_, c)| c)
            .filter(|c| c % 2 == parity)
            .collect::<Vec<i64>>()
    };
    for parity in [0, 1] {
        let (old, new) = (top(&before, parity), top(&after, parity));
        let highest = old.iter().max().copied().unwrap_or(0);
        assert!(
            new.iter().all(|&c| c > highest),
            "class {parity} mod 2 continues above {highest}: {new:?}"
        );
    }
    let all: HashSet<&String> = before.iter().chain(&after).collect();
    assert_eq!(all.len(), before.len() + after.len());
}

/// A counter of two digits: 99 IDs a day (1 to 99, both databases' classes), then
/// 409 `period_exhausted` naming the period, never a wider or wrapped number; the
/// rows stay inside the day's window; the metric the alert reads is at 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_that_outgrows_its_width_is_an_error() {
    let (setup, token, today, server) = at_noon("tick", 10, "T{yyyy}{MM}{dd}{seq:02}").await;
    let remote = server.remote(Duration::from_secs(10));
    let mut ids = Vec::new();
    let refused = loop {
        match formatted(&remote, "tick", &token, 1).await {
            Ok(batch) => ids.extend(batch),
            Err(r) => break r,
        }
        assert!(ids.len() <= 99, "more IDs than the counter holds: {ids:?}");
    };
    assert_eq!(refused.status, 409, "{refused:?}");
    assert_eq!(
        refused.json()["error"]["code"],
        "period_exhausted",
        "{refused:?}"
    );
    let label = format!("{}-{}-{}", &today[..4], &today[4..6], &today[6..]);
    assert!(refused.body.contains(&label), "{refused:?}");
    let mut counters: Vec<i64> = ids
        .iter()
        .map(|id| {
            assert!(
                id.len() == 11 && id.starts_with(&format!("T{today}")),
                "{id}"
            );
            id[9..].parse().unwrap()
        })
        .collect();
    counters.sort();
    assert_eq!(counters, (1..=99).collect::<Vec<i64>>());
    // Refused again, and the rows never left the day's window.
    let again = formatted(&remote, "tick", &token, 1).await.unwrap_err();
    assert_eq!(again.status, 409, "{again:?}");
    let ceiling: i64 = format!("{today}99").parse().unwrap();
    for db in 0..2 {
        let max_id: i64 = setup
            .dbs
            .sql(
                db,
                "SELECT max_id FROM tiny_id_info WHERE biz_type = 'tick'",
            )
            .parse()
            .unwrap();
        assert!(
            max_id <= ceiling,
            "database {db}: max_id {max_id} beyond {ceiling}"
        );
    }
    assert_eq!(
        metric(&remote, "segmint_biz_period_used_ratio{biz=\"tick\"}").await,
        1.0
    );
    assert_eq!(
        metric(&remote, "segmint_biz_period_issued{biz=\"tick\"}").await,
        99.0
    );
}

/// Tinyid's number routes and Leaf's segment route answer the number behind each ID
/// (the date, then the counter: `20261125000123`), which `id decode` reads as it reads the formatted ID;
/// Tinyid's segment routes refuse (their clients cannot tell when a period ends);
/// `/v1/segments` carves a segment with its period's end; the v1 route cannot answer
/// numbers for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_says_what_it_does_for_a_periodic_biz() {
    let (setup, token, today, server) = at_noon("ord", 1000, ORDER).await;
    drop(server);
    // Leaf's routes too, for the biz.
    let server = ServerProcess::start(&format!(
        "{}\n[leaf]\nenabled = true\nbizs = [\"ord\"]\n",
        setup.toml
    ))
    .await;
    let remote = server.remote(Duration::from_secs(10));
    let leaf = get(&remote, "/api/segment/get/ord").await;
    assert_eq!(leaf.status, 200, "{leaf:?}");
    assert!(
        leaf.body.starts_with(&today) && leaf.body.len() == 14,
        "Leaf's route answers the number behind the ID: {leaf:?}"
    );
    let r = compat(
        &remote,
        "nextIdSimple",
        Via::Get,
        &tinyid_params("ord", &token, Some("3")),
    )
    .await;
    let numbers = r.numbers();
    assert_eq!(numbers.len(), 3, "{r:?}");
    for n in &numbers {
        assert!(
            n.to_string().starts_with(&today) && n.to_string().len() == 14,
            "{n}"
        );
    }
    let decoded = segmint_ok(
        setup.file.path(),
        &["id", "decode", "ord", &numbers[0].to_string()],
        &[],
    );
    let label = format!("{}-{}-{}", &today[..4], &today[4..6], &today[6..]);
    assert!(
        decoded.contains(&format!(
            "period {label}, counter {}",
            numbers[0] % 1_000_000
        )),
        "{decoded}"
    );
    let text = formatted(&remote, "ord", &token, 1)
        .await
        .unwrap()
        .remove(0);
    let decoded = segmint_ok(
        setup.file.path(),
        &["id", "decode", "ord", &text, "--json"],
        &[],
    );
    let doc: serde_json::Value = serde_json::from_str(&decoded).unwrap();
    assert_eq!(doc["period"], label.as_str(), "{doc}");
    assert_eq!(doc["counter"], date_and_counter(&text).1, "{doc}");
    assert_eq!(
        doc["number"].as_i64().unwrap().to_string(),
        text[3..],
        "{doc}"
    );

    let r = compat(
        &remote,
        "nextSegmentId",
        Via::Get,
        &tinyid_params("ord", &token, None),
    )
    .await;
    assert_eq!(r.json()["code"], 6, "{r:?}");
    assert!(r.body.contains("restarts its counter each period"), "{r:?}");
    // The client library's route: a segment carved out of the server's buffer, with
    // its period and how long that has left; it names no database (nothing of it can
    // be given back).
    let r = v1(&remote, false, "/v1/segments/ord?step=50", bearer(&token)).await;
    assert_eq!(r.status, 200, "{r:?}");
    let segment = r.json();
    assert_eq!(segment["period"], label.as_str(), "{segment}");
    let left = segment["period_left_ms"].as_i64().unwrap();
    assert!((1..=86_400_000).contains(&left), "{segment}");
    assert!(
        segment["database"].is_null() && segment["version"].is_null(),
        "{segment}"
    );
    let count = segment["count"].as_i64().unwrap();
    assert!((1..=50).contains(&count), "{segment}");
    let first = segment["first_id"].as_i64().unwrap();
    assert_eq!(first.to_string()[..8], today, "{segment}");
    let r = v1(&remote, false, "/v1/ids/ord?as=number", bearer(&token)).await;
    assert_eq!(r.status, 400, "{r:?}");
    // A typo in a date field is caught.
    let run = segmint_cli(
        setup.file.path(),
        &["id", "decode", "ord", "ORD20261331000001"],
        &[],
    );
    assert!(!run.ok() && run.stderr.contains("not a date"), "{run:?}");
    // A counter below the period's first can never be issued.
    setup.add("from3", 10, &["--format", ORDER, "--start", "3"]);
    let run = segmint_cli(
        setup.file.path(),
        &["id", "decode", "from3", &format!("ORD{today}000002")],
        &[],
    );
    assert!(
        !run.ok()
            && run
                .stderr
                .contains("counter 2, below the first of each period (3)"),
        "{run:?}"
    );
    let decoded = segmint_ok(
        setup.file.path(),
        &["id", "decode", "from3", &format!("ORD{today}000003")],
        &[],
    );
    assert!(decoded.contains("counter 3"), "{decoded}");
}

/// `db add` while a periodic biz is served, over HTTP and to a client library, by a
/// server on the two databases it had; then a server on all three. A layout change
/// moves a periodic biz's rows as any biz's: no ID twice, every ID of today, and the
/// new database issues the biz's numbers afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_added_while_a_periodic_biz_is_served_issues_no_id_twice() {
    let c = common::layout::Cluster::start(3, 2, "50", false);
    let (zone, ahead) = noon_zone();
    let today = yyyymmdd(now_ms(), ahead);
    common::layout::cli_ok(
        &c.toml,
        &[
            "biz", "add", "ord", "--step", "50", "--format", ORDER, "--zone", &zone,
        ],
    );
    let token = common::layout::cli_ok(&c.toml, &["token", "add", "--biz", "ord"])
        .trim()
        .to_owned();
    let two = ServerProcess::start(&c.toml).await;
    let client = segmint_client::Client::builder()
        .servers([two.base.clone()])
        .token(token.clone())
        .request_timeout(Duration::from_secs(10))
        .wait_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = |base: String| {
        let (token, stop) = (token.clone(), stop.clone());
        tokio::spawn(async move {
            let remote = Remote::new(&base, Duration::from_secs(10));
            let mut ids = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                ids.extend(formatted(&remote, "ord", &token, 20).await.unwrap());
            }
            ids
        })
    };
    let from_client = {
        let (biz, stop) = (client.biz("ord").unwrap(), stop.clone());
        tokio::spawn(async move {
            let mut ids = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                ids.extend(biz.next_ids(20).await.unwrap());
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            ids
        })
    };
    let mut loads = vec![load(two.base.clone()), load(two.base.clone())];
    let grew = async |i: usize, by: i64| {
        let from = c.dbs.version(i, "ord");
        eventually(
            Duration::from_secs(30),
            &format!("pg{i} gives out segments of the biz"),
            async || match c.dbs.version(i, "ord") {
                v if v >= from + by => Ok(()),
                v => Err(format!("version {v}, was {from}")),
            },
        )
        .await
    };
    grew(0, 3).await;
    grew(1, 3).await;
    let add = {
        let (toml, url) = (c.toml.clone(), c.urls[2].clone());
        tokio::task::spawn_blocking(move || {
            common::layout::cli_ok(&toml, &["db", "add", "pg2", &url])
        })
    };
    let out = add.await.unwrap();
    assert!(out.contains("layout epoch 1 is done"), "{out}");
    let three = ServerProcess::start(&common::layout::toml_for(&c.dbs, &[0, 1, 2])).await;
    loads.push(load(three.base.clone()));
    for i in 0..3 {
        grew(i, 3).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut seen = HashSet::new();
    for load in loads {
        for id in load.await.unwrap() {
            assert_eq!(date_and_counter(&id).0, today, "{id}");
            assert!(seen.insert(id.clone()), "{id} issued twice");
        }
    }
    let served = seen.len();
    for number in from_client.await.unwrap() {
        let id = format!("ORD{number}");
        assert_eq!(date_and_counter(&id).0, today, "{id}");
        assert!(
            seen.insert(id.clone()),
            "{id} issued twice (once by the client)"
        );
    }
    println!(
        "{served} IDs over HTTP and {} from the client library across `db add pg2`",
        seen.len() - served
    );
}

/// A daily biz on two databases whose clocks are right (PostgreSQL or MariaDB). A
/// server whose clock is three days ahead begins no period: every request gets 503
/// `clock_ahead` naming the offset, its `/readyz` and `segmint_clock_offset_seconds`
/// say how far ahead it is, and the rows stay in today's window. A server with the
/// right clock serves today's numbers meanwhile, and one started three days behind
/// issues today's numbers too (by the databases' clocks), not its own day's. Rows moved
/// into a later period behind segmint's back (an older version under a clock ahead) give the right server 503
/// `rows_ahead`, not a blame on its clock.
async fn one_clock_far_off_cannot_move_a_period(kind: Kind) {
    const DAY: i64 = 86_400;
    let setup = CliCluster::start_kind(kind, "");
    let (zone, hours) = noon_zone();
    let token = add(&setup, "ord", 100, ORDER, &zone);
    let today = yyyymmdd(now_ms(), hours);
    let in_three_days = yyyymmdd(now_ms() + 3 * DAY * 1000, hours);
    let ahead = ShiftedClock::ahead((3 * DAY) as f64)
        .server(&setup.toml)
        .await;
    let ahead = ahead.remote(Duration::from_secs(10));
    for _ in 0..3 {
        let r = formatted(&ahead, "ord", &token, 10).await.unwrap_err();
        assert_eq!(r.status, 503, "{r:?}");
        let body = r.json();
        assert_eq!(body["error"]["code"], "clock_ahead", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("this server's clock is 3 d 0 h ahead of the databases'")
                && message.contains(&format!(
                    "period {}-{}-{}",
                    &in_three_days[..4],
                    &in_three_days[4..6],
                    &in_three_days[6..]
                )),
            "{message}"
        );
    }
    let ready = get(&ahead, "/readyz").await;
    assert_eq!(ready.status, 200, "{ready:?}");
    let clock = &ready.json()["clock"];
    let ahead_ms = clock["ahead_ms"].as_i64().unwrap();
    assert!(
        (3 * DAY * 1000 - 60_000..3 * DAY * 1000 + 60_000).contains(&ahead_ms),
        "{clock}"
    );
    assert_eq!(clock["within_tolerance"], false, "{clock}");
    let offset = metric(&ahead, "segmint_clock_offset_seconds{database=\"pg0\"}").await;
    assert!((offset - (3 * DAY) as f64).abs() < 60.0, "{offset}");
    // Nothing was reserved in the later period.
    let floor: i64 = format!("{today}000000").parse().unwrap();
    for db in 0..2 {
        let max_id: i64 = setup
            .dbs
            .sql(db, "SELECT max_id FROM tiny_id_info WHERE biz_type = 'ord'")
            .parse()
            .unwrap();
        assert!(
            max_id <= floor,
            "database {db} at {max_id}: a period was begun"
        );
    }
    // The right server serves today.
    let mut right_process = ServerProcess::start(&setup.toml).await;
    let right = right_process.remote(Duration::from_secs(10));
    let mut issued: HashSet<String> = HashSet::new();
    for id in formatted(&right, "ord", &token, 50).await.unwrap() {
        assert_eq!(date_and_counter(&id).0, today, "{id}");
        assert!(issued.insert(id.clone()), "{id} twice");
    }
    let clock = get(&right, "/readyz").await.json()["clock"].clone();
    assert_eq!(clock["within_tolerance"], true, "{clock}");
    // Once both databases' rows are in today, a server started with its clock three
    // days behind (a clock stepped back, a restart on a wrong clock) issues today's
    // numbers by the databases' clocks, never a day they have left.
    let row = |db| -> i64 {
        setup
            .dbs
            .sql(db, "SELECT max_id FROM tiny_id_info WHERE biz_type = 'ord'")
            .parse()
            .unwrap()
    };
    for round in 0.. {
        if (0..2).all(|db| row(db) > floor) {
            break;
        }
        assert!(round < 200, "today never began on both databases");
        issued.extend(formatted(&right, "ord", &token, 100).await.unwrap());
    }
    let behind = ShiftedClock::ahead(-(3 * DAY) as f64)
        .server(&setup.toml)
        .await;
    let behind = behind.remote(Duration::from_secs(10));
    for id in formatted(&behind, "ord", &token, 50).await.unwrap() {
        assert_eq!(date_and_counter(&id).0, today, "{id}");
        assert!(issued.insert(id.clone()), "{id} twice");
    }
    // Rows in the current period: nothing to recover, nothing changed.
    let early = segmint_cli(setup.file.path(), &["biz", "recover", "ord"], &[]);
    assert!(
        !early.ok() && early.stderr.contains("not ahead of the databases' clocks"),
        "{}",
        early.stderr
    );
    // Rows moved into the later period behind segmint's back: the right server says
    // so, and blames no clock of its own.
    let later: i64 = format!("{in_three_days}000500").parse().unwrap();
    for db in 0..2 {
        setup.dbs.sql(
            db,
            &format!(
                "UPDATE tiny_id_info SET max_id = {}, version = version + 1 WHERE biz_type = 'ord'",
                later + db as i64
            ),
        );
    }
    let fresh = ServerProcess::start(&setup.toml).await;
    let fresh = fresh.remote(Duration::from_secs(10));
    let r = formatted(&fresh, "ord", &token, 10).await.unwrap_err();
    let body = r.json();
    assert_eq!(
        (r.status, body["error"]["code"].as_str()),
        (503, Some("rows_ahead")),
        "{body}"
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("a clock that was ahead moved the rows"),
        "{message}"
    );
    // The way back: with every server restarted (the right one's cache of today is
    // given up), `biz recover --above` the last number issued today serves today
    // again from interim rows, above it; the rows moved ahead are not touched.
    right_process
        .terminate_within(Duration::from_secs(10))
        .await;
    let last = issued.iter().max().unwrap().clone();
    let until: String = in_three_days.clone();
    let out = segmint_ok(
        setup.file.path(),
        &["biz", "recover", "ord", "--above", &last],
        &[],
    );
    assert!(
        out.contains(&format!("now come from `ord#{until}`")),
        "{out}"
    );
    let again = segmint_cli(setup.file.path(), &["biz", "recover", "ord"], &[]);
    assert!(
        !again.ok() && again.stderr.contains("recovered already"),
        "{}",
        again.stderr
    );
    for db in 0..2 {
        let max_id: i64 = setup
            .dbs
            .sql(db, "SELECT max_id FROM tiny_id_info WHERE biz_type = 'ord'")
            .parse()
            .unwrap();
        assert_eq!(max_id, later + db as i64, "the moved rows are untouched");
    }
    let after = ServerProcess::start(&setup.toml).await;
    let after = after.remote(Duration::from_secs(10));
    for _ in 0..5 {
        for id in formatted(&after, "ord", &token, 100).await.unwrap() {
            assert_eq!(date_and_counter(&id).0, today, "{id}");
            assert!(id > last, "{id} is not above {last}");
            assert!(issued.insert(id.clone()), "{id} issued twice");
        }
    }
    // When the later period comes (PostgreSQL: its clusters restarted on a clock
    // three days ahead), the biz's own rows issue it again, above what they issued.
    if kind == Kind::Postgres {
        let later_clock = ShiftedClock::ahead((3 * DAY) as f64);
        setup.dbs.shift_clocks(&later_clock);
        let then = later_clock.server(&setup.toml).await;
        let then = then.remote(Duration::from_secs(10));
        for id in formatted(&then, "ord", &token, 100).await.unwrap() {
            let (date, counter) = date_and_counter(&id);
            assert_eq!(date, in_three_days, "{id}");
            assert!(counter > 501, "{id}: issued in that period before");
        }
    }
}

mod clock_far_off {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        one_clock_far_off_cannot_move_a_period(Kind::Postgres).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mariadb() {
        one_clock_far_off_cannot_move_a_period(Kind::MySql).await;
    }
}
