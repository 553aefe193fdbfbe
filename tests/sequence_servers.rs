//! Sequence bizs served by real `segmint serve` processes: three servers on three
//! databases, clients sending every key to every server, while an owner is killed
//! (`kill -9`) and restarted, another is frozen past its lease (SIGSTOP), a database is
//! stopped and started, and another is restored to an earlier copy of its sections
//! (and, repaired, makes a majority with the first while the third is stopped again).
//! Every key's numbers strictly increase in real-time order (an answer received
//! before a request was sent is below that request's), none twice; the failover gap
//! after the kill stays within the stated bound. Also: one embedded server, and bad
//! input.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::cli::{config_file, segmint_ok};
use crate::common::http::{Remote, metric, send};
use crate::common::process::send_signal;
use crate::common::sequences::{
    ADD_CHAT, KEYS, Op, assert_linearizable, clients, next, until_every_key_answers,
};
use crate::common::wait::eventually;
use crate::common::*;

/// The databases, the configuration, a sequence biz `chat` with its token, and an ID
/// biz `ids` with its own.
struct Setup {
    dbs: Databases,
    toml: String,
    _file: tempfile::NamedTempFile,
    token: String,
    ids_token: String,
}

impl Setup {
    fn start(kind: Kind, n: usize) -> Setup {
        let dbs = Databases::start(kind, n);
        let toml = config_toml_urls(&dbs.urls(), "");
        let file = config_file(&toml);
        segmint_ok(file.path(), &["migrate"], &[]);
        segmint_ok(file.path(), &ADD_CHAT, &[]);
        segmint_ok(file.path(), &["biz", "add", "ids", "--step", "100"], &[]);
        let token = |biz: &str| {
            segmint_ok(file.path(), &["token", "add", "--biz", biz], &[])
                .trim()
                .to_owned()
        };
        let (chat, ids) = (token("chat"), token("ids"));
        Setup {
            dbs,
            toml,
            _file: file,
            token: chat,
            ids_token: ids,
        }
    }
}

/// The section rows of database `i` as `INSERT` values, to write back later: a restore
/// of the table from a backup taken now.
fn backup(dbs: &Databases, i: usize) -> Vec<String> {
    dbs.sql(
        i,
        "SELECT biz_type, section, holder, version, bound, expires_ms FROM segmint_sequence_section",
    )
    .lines()
    .map(|line| {
        let f: Vec<&str> = line.split('|').collect();
        format!(
            "('{}', {}, '{}', {}, {}, {})",
            f[0], f[1], f[2], f[3], f[4], f[5]
        )
    })
    .collect()
}

/// Writes `rows` back as the whole table of database `i`, in one transaction: a
/// server's insert between the delete and the insert would otherwise collide with a
/// row written back (MariaDB's client commits each statement of its own).
fn restore(dbs: &Databases, i: usize, rows: &[String]) {
    dbs.sql(
        i,
        &format!(
            "START TRANSACTION; \
             DELETE FROM segmint_sequence_section; \
             INSERT INTO segmint_sequence_section \
             (biz_type, section, holder, version, bound, expires_ms) VALUES {}; \
             COMMIT",
            rows.join(", ")
        ),
    );
}

/// Waits until the route table of `base` names each of three servers as an owner of
/// two or three of the 8 sections: the even share, the presence and the assignment
/// settled.
async fn every_server_owns_a_share(base: &str, token: &str) {
    eventually(
        Duration::from_secs(15),
        "an even share of the sections on every server",
        async || {
            let owners = owners(base, token).await;
            let mut share: HashMap<&String, usize> = HashMap::new();
            for o in owners.iter().flatten() {
                *share.entry(o).or_default() += 1;
            }
            match share.len() == 3 && share.values().all(|n| (2..=3).contains(n)) {
                true => Ok(()),
                false => Err(format!("owners {owners:?}")),
            }
        },
    )
    .await;
}

/// The owners `base`'s route table names.
async fn owners(base: &str, token: &str) -> Vec<Option<String>> {
    let r = send(
        reqwest::Client::new()
            .get(format!("{base}/v1/sequences/chat/routes"))
            .bearer_auth(token),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    serde_json::from_value(r.json()["owners"].clone()).unwrap()
}

async fn every_key_goes_up_through_faults(kind: Kind) {
    let setup = Setup::start(kind, 3);
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut servers = Vec::new();
    for &port in &ports {
        servers.push(ServerProcess::start_on(&setup.toml, port, &[]).await);
    }
    let bases: Vec<String> = servers.iter().map(|s| s.base.clone()).collect();
    // The sections spread over the three servers.
    let spread = eventually(
        Duration::from_secs(15),
        "sections on every server",
        async || {
            let owners = owners(&bases[0], &setup.token).await;
            let distinct: std::collections::BTreeSet<_> = owners.iter().flatten().collect();
            match distinct.len() == 3 && owners.iter().all(Option::is_some) {
                true => Ok(owners),
                false => Err(format!("owners {owners:?}")),
            }
        },
    )
    .await;
    assert_eq!(spread.len(), 8);
    let stop = Arc::new(AtomicBool::new(false));
    let load = clients(bases.clone(), setup.token.clone(), stop.clone());
    let token = setup.token.as_str();
    let limit = Duration::from_secs(10);
    let (healthy, mut ops) = until_every_key_answers(&bases[1], token, limit).await;

    // An owner killed: its sections served again (through another server) within the
    // bound: the lease (1.5 s) and grace (0.25 s), a round (0.375 s), and the claim,
    // and the pass over every key that sees them all answered, which takes as long as
    // the healthy pass above on a machine as busy (a loaded machine stretches it, not
    // the failover).
    servers[0].child.kill9();
    let (gap, answered) = until_every_key_answers(&bases[1], token, limit).await;
    ops.extend(answered);
    let bound = Duration::from_secs(3) + healthy;
    assert!(
        gap < bound,
        "failover took {gap:?}, over {bound:?} (3 s and the healthy pass, {healthy:?})"
    );
    eprintln!("failover gap after kill -9: {gap:?}");
    servers[0] = ServerProcess::start_on(&setup.toml, ports[0], &[]).await;

    // Another frozen past its lease, every key answered meanwhile by the others, then
    // thawed and asked at once: it answers nothing it no longer owns from memory.
    send_signal(servers[1].child.0.id(), "STOP").unwrap();
    ops.extend(until_every_key_answers(&bases[2], token, limit).await.1);
    send_signal(servers[1].child.0.id(), "CONT").unwrap();
    ops.extend(until_every_key_answers(&bases[1], token, limit).await.1);

    // The thawed and restarted servers own their share again (before the databases'
    // faults: an owner that has not changed since the restore must repair its rows).
    every_server_owns_a_share(&bases[2], token).await;

    // A database stopped and started again, then another restored to an earlier copy,
    // then the first stopped again.
    let copy = backup(&setup.dbs, 1);
    setup.dbs.stop(2);
    ops.extend(until_every_key_answers(&bases[0], token, limit).await.1);
    setup.dbs.start_again(2);
    ops.extend(until_every_key_answers(&bases[2], token, limit).await.1);
    restore(&setup.dbs, 1, &copy);
    ops.extend(until_every_key_answers(&bases[1], token, limit).await.1);
    // The owners repair the restored rows at their next claims (a renewal within half
    // a lease), so the restored database counts again: with the third stopped now, it
    // and the first still make a majority, and every key goes on answering (a restore
    // left unrepaired would make its sections unavailable until another server took
    // them over).
    eventually(
        Duration::from_secs(5),
        "every restored section row rewritten",
        async || {
            let now = backup(&setup.dbs, 1);
            let behind: Vec<&String> = now
                .iter()
                .filter(|row| row.starts_with("('chat'") && copy.contains(row))
                .collect();
            match behind.is_empty() {
                true => Ok(()),
                false => Err(format!("rows as restored: {behind:?}")),
            }
        },
    )
    .await;
    setup.dbs.stop(2);
    let (answered, refused) = refusals_for(&bases, token, Duration::from_millis(3 * 1_750)).await;
    let asked = answered.len() + refused;
    eprintln!("restored and another stopped: {refused} refused of {asked}");
    assert!(
        refused * 100 <= asked,
        "{refused} of {asked} refused with a repaired restore and another database down"
    );
    ops.extend(answered);
    setup.dbs.start_again(2);
    every_server_owns_a_share(&bases[2], token).await;
    ops.extend(until_every_key_answers(&bases[0], token, limit).await.1);
    stop.store(true, Ordering::Relaxed);
    for task in load {
        ops.extend(task.await.unwrap());
    }
    // Each server counts what it answered and forwarded, and owns its share.
    let mut counted = (0.0, 0.0, 0.0);
    for base in &bases {
        let remote = Remote::new(base, Duration::from_secs(5));
        let numbers = metric(&remote, "segmint_sequence_numbers_total{biz=\"chat\"}").await;
        assert!(numbers > 0.0, "{base} answered none");
        counted.0 += numbers;
        counted.1 += metric(&remote, "segmint_sequence_forwarded_total{biz=\"chat\"}").await;
        let owned = metric(&remote, "segmint_sequence_sections_owned{biz=\"chat\"}").await;
        assert!(
            (2.0..=3.0).contains(&owned),
            "{base} owns {owned} of 8 sections"
        );
        counted.2 += owned;
    }
    // Fewer than the answers: the killed server's count went with it.
    assert!(
        counted.0 <= 2.0 * ops.len() as f64,
        "{counted:?} for {} answers",
        ops.len()
    );
    assert!(counted.1 > 0.0, "{counted:?}");
    assert_eq!(counted.2, 8.0);
    assert!(ops.len() > 500, "{} answers", ops.len());
    assert_linearizable(&ops);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_on_postgres_keep_every_key_going_up_through_faults() {
    every_key_goes_up_through_faults(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_on_mariadb_keep_every_key_going_up_through_faults() {
    every_key_goes_up_through_faults(Kind::MySql).await;
}

/// One embedded server: numbers go up across a kill -9 and a restart, a run of
/// `count` is consecutive, many keys are taken in one request, and reading a key takes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_server_keeps_keys_going_up_across_a_kill() {
    let setup = Setup::start(Kind::Embedded, 1);
    let port = free_port();
    let mut server = ServerProcess::start_on(&setup.toml, port, &[]).await;
    let http = reqwest::Client::new();
    let base = server.base.clone();
    let post = async |body: serde_json::Value| {
        send(
            http.post(format!("{base}/v1/sequences/chat/next"))
                .bearer_auth(&setup.token)
                .json(&body),
        )
        .await
    };
    let one = post(serde_json::json!({"key": "conv:1"})).await;
    assert_eq!(one.status, 200, "{one:?}");
    assert_eq!(one.json()["number"], 1);
    let run = post(serde_json::json!({"key": "conv:1", "count": 5})).await;
    assert_eq!(
        (run.json()["first"].as_i64(), run.json()["number"].as_i64()),
        (Some(2), Some(6))
    );
    let current = send(
        http.get(format!("{base}/v1/sequences/chat/current?key=conv:1"))
            .bearer_auth(&setup.token),
    )
    .await;
    assert_eq!(current.json()["number"], 6, "{current:?}");
    let keys: Vec<serde_json::Value> = (0..500).map(|i| serde_json::json!(i)).collect();
    let many = post(serde_json::json!({"keys": keys})).await;
    let numbers = many.json()["numbers"].as_array().unwrap().clone();
    assert_eq!(numbers.len(), 500);
    assert_eq!(numbers[7]["key"], "7");
    assert!(numbers.iter().all(|n| n["number"] == 1), "{numbers:?}");
    let again = post(serde_json::json!({"key": 7})).await;
    assert_eq!(again.json()["number"], 2);

    // What the server holds, on /v1/bizs (the data of /status) and /metrics.
    let report = send(http.get(format!("{base}/v1/bizs"))).await.json();
    let held = &report["sequences"]["bizs"][0];
    assert_eq!(
        (&held["biz"], &held["sections"], &held["owned"]),
        (
            &serde_json::json!("chat"),
            &serde_json::json!(8),
            &serde_json::json!(8)
        ),
        "{report}"
    );
    assert!(held["keys"].as_u64().unwrap() >= 500, "{report}");
    let remote = Remote::new(&base, Duration::from_secs(5));
    let numbers = metric(&remote, "segmint_sequence_numbers_total{biz=\"chat\"}").await;
    assert_eq!(numbers, 1.0 + 5.0 + 500.0 + 1.0);
    let page = send(http.get(format!("{base}/status"))).await;
    assert!(page.body.contains("<h2>Sequences</h2>"), "{page:?}");

    // Sections taken: the first 8, and any taken again since by this server, after a
    // renewal came past its deadline (a stall of the machine): each skips up to a step.
    let taken = metric(
        &remote,
        "segmint_sequence_sections_taken_total{biz=\"chat\"}",
    )
    .await;
    let again = taken as i64 - 8;
    assert!(again >= 0, "{taken} sections taken");
    server.child.kill9();
    let server = ServerProcess::start_on(&setup.toml, port, &[]).await;
    // The restarted server waits out its earlier self's lease, then starts above the
    // section's bound.
    let after = eventually(
        Duration::from_secs(10),
        "the section served again",
        async || {
            let r = post(serde_json::json!({"key": "conv:1"})).await;
            match r.status {
                200 => Ok(r.json()["number"].as_i64().unwrap()),
                _ => Err(format!("{r:?}")),
            }
        },
    )
    .await;
    assert!(after > 6, "{after} after 6");
    assert!(
        after <= 6 + 50 * (1 + again) + 1,
        "{after}: at most a step skipped a take ({again} taken again before the kill)"
    );
    drop(server);
}

/// Bad input is refused with a 4xx naming the problem, and takes no number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sequence_requests_are_refused_and_change_nothing() {
    let setup = Setup::start(Kind::Embedded, 1);
    let server = ServerProcess::start(&setup.toml).await;
    let http = reqwest::Client::new();
    let base = &server.base;
    let get = async |path: &str, token: &str| {
        send(http.get(format!("{base}{path}")).bearer_auth(token)).await
    };
    let post = async |body: &str| {
        send(
            http.post(format!("{base}/v1/sequences/chat/next"))
                .bearer_auth(&setup.token)
                .header("content-type", "application/json")
                .body(body.to_owned()),
        )
        .await
    };
    let long = format!("/v1/sequences/chat/next?key={}", "x".repeat(256));
    let chat = &setup.token;
    let gets: [(&str, &str, u16, &str); 11] = [
        (
            "/v1/sequences/nope/next?key=a",
            chat,
            404,
            "`nope` does not exist",
        ),
        (&long, chat, 400, "255 bytes"),
        ("/v1/sequences/chat/next?key=", chat, 400, "1 to 255 bytes"),
        ("/v1/sequences/chat/next?key=a%01", chat, 400, "control"),
        ("/v1/sequences/chat/next", chat, 400, "`key` is missing"),
        (
            "/v1/sequences/chat/next?key=a&count=0",
            chat,
            400,
            "`count`",
        ),
        (
            "/v1/sequences/chat/next?key=a&count=10001",
            chat,
            400,
            "`count`",
        ),
        (
            "/v1/sequences/chat/next?key=a&count=x",
            chat,
            400,
            "`count`",
        ),
        (
            "/v1/sequences/ids/next?key=a",
            &setup.ids_token,
            409,
            "not_a_sequence",
        ),
        ("/v1/ids/chat", chat, 409, "sequence_biz"),
        ("/v1/sequences/chat/next?key=a", "wrong", 401, "token"),
    ];
    let mut cases = Vec::new();
    for (path, token, status, says) in gets {
        cases.push((get(path, token).await, status, says));
    }
    cases.push((get("/v1/segments/chat", chat).await, 409, "sequence_biz"));
    for (body, says) in [
        ("{\"keys\": []}", "`keys`"),
        ("{\"key\": \"a\", \"keys\": [\"b\"]}", "one of"),
        ("{\"key\": \"a\", \"extra\": 1}", "the body"),
        ("{\"key\": 1.5}", "the body"),
    ] {
        cases.push((post(body).await, 400, says));
    }
    for (r, status, says) in cases {
        assert_eq!(r.status, status, "{r:?}");
        assert!(r.body.contains(says), "{says:?} not in {r:?}");
    }
    let compat = get(
        &format!("/tinyid/id/nextIdSimple?bizType=chat&token={}", setup.token),
        "",
    )
    .await;
    // Tinyid's own answer to a refusal: an empty body, the reason in a header.
    assert_eq!(
        (compat.status, compat.body.as_str()),
        (200, ""),
        "{compat:?}"
    );
    assert!(
        compat
            .error_header
            .as_deref()
            .unwrap_or_default()
            .contains("sequence"),
        "{compat:?}"
    );
    // Nothing was taken: the first number of `a` is still 1.
    let first = get("/v1/sequences/chat/next?key=a", &setup.token).await;
    assert_eq!(first.json()["number"], 1, "{first:?}");

    // The biz's rows deleted by hand, its section rows left: added again under that
    // name (with other sections, so that keys would fall on rows of lower bounds) is
    // refused, and changes nothing.
    drop(server);
    let dbs = &setup.dbs;
    dbs.sql(0, "DELETE FROM tiny_id_info WHERE biz_type = 'chat'");
    dbs.sql(0, "DELETE FROM segmint_biz_shape WHERE biz_type = 'chat'");
    let file = config_file(&setup.toml);
    let again = [
        "--json",
        "biz",
        "add",
        "chat",
        "--sequence",
        "--step",
        "50",
        "--sections",
        "4",
    ];
    let why = crate::common::cli::segmint_cli(file.path(), &again, &[]).failure();
    assert_eq!(why["reason"], "biz_exists", "{why}");
    let message = why["message"].as_str().unwrap_or_default();
    // As many rows as the server had taken sections by then: its rounds take what is
    // assigned to it, besides the section of `a`.
    assert!(message.contains("section rows of an earlier biz"), "{why}");
    assert_eq!(
        dbs.sql(
            0,
            "SELECT count(*) FROM tiny_id_info WHERE biz_type = 'chat'"
        )
        .trim(),
        "0"
    );
}

/// The client library reads the route table and sends each key's request to its
/// section's owner: no server forwards anything. After an owner is killed it reads the
/// table again and the numbers keep going up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_asks_each_keys_owner_directly() {
    let setup = Setup::start(Kind::Postgres, 1);
    let mut servers = Vec::new();
    for _ in 0..3 {
        servers.push(ServerProcess::start(&setup.toml).await);
    }
    let bases: Vec<String> = servers.iter().map(|s| s.base.clone()).collect();
    // Settled: every server's route table the same, over the three servers (an owner
    // names itself only for the sections it owns).
    eventually(
        Duration::from_secs(15),
        "the same routes on every server",
        async || {
            let mut tables = Vec::new();
            for base in &bases {
                tables.push(owners(base, &setup.token).await);
            }
            let distinct: std::collections::BTreeSet<_> = tables[0].iter().flatten().collect();
            match distinct.len() == 3 && tables.iter().all(|t| *t == tables[0]) {
                true => Ok(()),
                false => Err(format!("routes {tables:?}")),
            }
        },
    )
    .await;
    let client = segmint::client::Client::builder()
        .servers([bases[0].as_str()])
        .token(&setup.token)
        .build()
        .unwrap();
    let chat = client.sequence("chat").unwrap();
    let keys: Vec<String> = (0..60).map(|i| format!("user:{i}")).collect();
    let mut last = HashMap::new();
    for key in &keys {
        let n = chat.next(key).await.unwrap();
        let run = chat.take(key, 3).await.unwrap();
        assert_eq!((*run.start(), *run.end()), (n + 1, n + 3), "{key}");
        assert_eq!(chat.current(key).await.unwrap(), n + 3);
        last.insert(key.clone(), n + 3);
    }
    assert!(chat.route_version().is_some());
    let mut forwarded = 0.0;
    for base in &bases {
        let remote = Remote::new(base, Duration::from_secs(5));
        forwarded += metric(&remote, "segmint_sequence_forwarded_total{biz=\"chat\"}").await;
    }
    assert_eq!(forwarded, 0.0, "every request went to its owner");
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let many = chat.next_many(&refs).await.unwrap();
    for (key, n) in keys.iter().zip(&many) {
        assert!(*n > last[key], "{key}: {n} after {}", last[key]);
        last.insert(key.clone(), *n);
    }

    servers[2].child.kill9();
    for key in &keys {
        let n = eventually(
            Duration::from_secs(10),
            "the key answered again",
            async || chat.next(key).await.map_err(|e| e.to_string()),
        )
        .await;
        assert!(n > last[key], "{key}: {n} after {}", last[key]);
    }
    assert!(
        matches!(
            chat.next("").await.map_err(|e| e.into_kind()),
            Err(segmint::client::ErrorKind::Config(_))
        ),
        "an empty key is refused before any request"
    );
}

/// Sends every key through each of `bases` in turn for `long`, once each: what was
/// answered, and how many were refused (503).
async fn refusals_for(bases: &[String], token: &str, long: Duration) -> (Vec<Op>, usize) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let (mut ops, mut refused) = (Vec::new(), 0);
    for n in 0.. {
        if started.elapsed() >= long {
            break;
        }
        let (key, base) = (n % KEYS, &bases[n / KEYS % bases.len()]);
        let sent = std::time::Instant::now();
        let r = next(&http, base, token, key).await.expect("an answer");
        match r.status {
            200 => ops.push(Op::answered(key, sent, &r)),
            503 => refused += 1,
            _ => panic!("{r:?}"),
        }
    }
    (ops, refused)
}

/// Sends every key through each of `bases` in turn for at least `long`: what was
/// answered.
async fn load_for(bases: &[String], token: &str, long: Duration) -> Vec<Op> {
    let started = std::time::Instant::now();
    let mut ops = Vec::new();
    let mut turn = 0;
    while started.elapsed() < long {
        let base = &bases[turn % bases.len()];
        ops.extend(
            until_every_key_answers(base, token, Duration::from_secs(10))
                .await
                .1,
        );
        turn += 1;
    }
    ops
}

/// A lease is never judged by a clock that can step: two servers on one PostgreSQL
/// whose clock steps forward by 2 s, then 10 s (an NTP step on the database's host),
/// under load through both servers; then two servers on one embedded database, the
/// wall clock of one stepping forward by 10 s (there it is the database's clock).
/// Every key's numbers strictly increase in real-time order. (With leases judged by
/// the database's clock, every section looked lapsed at the step, and the other
/// server took it while its owner still answered from memory: 758 of 154,348 answers
/// went back on 087f5ed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_that_steps_changes_no_lease() {
    let clock = crate::common::clock::ShiftedClock::new("+0");
    let setup = Setup::start(Kind::Postgres, 1);
    tokio::task::block_in_place(|| setup.dbs.shift_clocks(&clock));
    let a = ServerProcess::start(&setup.toml).await;
    let b = ServerProcess::start(&setup.toml).await;
    let bases = vec![a.base.clone(), b.base.clone()];
    let stop = Arc::new(AtomicBool::new(false));
    let load = clients(bases.clone(), setup.token.clone(), stop.clone());
    let lease = Duration::from_millis(1_750);
    let mut ops = load_for(&bases, &setup.token, lease).await;
    for step in ["+2", "+12"] {
        clock.set(step);
        ops.extend(load_for(&bases, &setup.token, 2 * lease).await);
    }
    stop.store(true, Ordering::Relaxed);
    for task in load {
        ops.extend(task.await.unwrap());
    }
    assert_linearizable(&ops);
    let answered = ops.len();

    let setup = Setup::start(Kind::Embedded, 1);
    let stepping = crate::common::clock::ShiftedClock::new("+0");
    let a = stepping.server(&setup.toml).await;
    let b = ServerProcess::start(&setup.toml).await;
    let bases = vec![a.base.clone(), b.base.clone()];
    let stop = Arc::new(AtomicBool::new(false));
    let load = clients(bases.clone(), setup.token.clone(), stop.clone());
    let mut ops = load_for(&bases, &setup.token, lease).await;
    stepping.set("+10");
    ops.extend(load_for(&bases, &setup.token, 2 * lease).await);
    stop.store(true, Ordering::Relaxed);
    for task in load {
        ops.extend(task.await.unwrap());
    }
    assert_linearizable(&ops);
    assert!(
        answered > 500 && ops.len() > 500,
        "{answered}, {} answers",
        ops.len()
    );
    eprintln!(
        "{answered} answers through the database's clock steps, {} through the server's",
        ops.len()
    );
}
