//! The Redis protocol on real processes: `segmint serve` with `[resp] bind`, driven by
//! Debian's `redis-cli` and `redis-benchmark`, by raw sockets, and by redis-py 8.1.0
//! unchanged (`tests/resp_client.py`, in `target/redis-venv`: RESP2 and RESP3, its
//! pipelines and MULTI/EXEC, a pool shared by threads). Authentication, every command,
//! the key table, pipelining, bad input, a connection cut mid-command; and no ID twice
//! across Redis and HTTP clients of one biz on two servers while one is killed.

use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::http::{Remote, metric, try_v1_ids};
use crate::common::python::{redis_python, run_script};
use crate::common::resp::{RESP_THREADS, Setup, cli, command, exchange};
use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_takes_ids_and_numbers_by_the_key_table() {
    let setup = Setup::start(Kind::Postgres);
    let (server, port) = setup.server().await;
    let (order, chat) = (
        Some(setup.tokens["order"].as_str()),
        Some(setup.tokens["chat"].as_str()),
    );
    assert_eq!(
        cli(port, None, &["PING"]),
        "NOAUTH Authentication required."
    );
    assert_eq!(cli(port, order, &["PING"]), "PONG");
    let first: i64 = cli(port, order, &["INCR", "order_id"]).parse().unwrap();
    let second: i64 = cli(port, order, &["INCR", "order"]).parse().unwrap();
    assert!(second > first, "{first} then {second}");
    let ids: Vec<i64> = cli(port, order, &["IDS", "order_id", "3"])
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.iter().all(|&id| id > second));
    // `INCRBY key 1` (what client libraries send for `incr`) is an ID's worth.
    let by_one: i64 = cli(port, order, &["INCRBY", "order_id", "1"])
        .parse()
        .unwrap();
    assert_eq!(by_one, ids[2] + 1);
    // A sequence key, through the table's prefix and by the biz's own name.
    assert_eq!(cli(port, chat, &["INCR", "msg_seq:c1"]), "1");
    assert_eq!(cli(port, chat, &["INCRBY", "msg_seq:c1", "5"]), "6");
    assert_eq!(cli(port, chat, &["GET", "msg_seq:c1"]), "6");
    assert_eq!(cli(port, chat, &["INCR", "chat:c1"]), "7", "the same key");
    assert_eq!(cli(port, chat, &["GET", "msg_seq:c2"]), "0");
    // Refusals name the problem and take nothing.
    for (token, args, says) in [
        (order, &["INCRBY", "order_id", "2"][..], "WRONGTYPE"),
        (order, &["GET", "order_id"], "WRONGTYPE"),
        (chat, &["IDS", "msg_seq:c1", "2"], "WRONGTYPE"),
        (chat, &["INCR", "order_id"], "NOPERM"),
        (
            chat,
            &["INCRBY", "msg_seq:c1", "0"],
            "ERR value is not an integer",
        ),
        (
            chat,
            &["INCRBY", "msg_seq:c1", "x"],
            "ERR value is not an integer",
        ),
        (order, &["INCR", "nope:1"], "does not exist"),
        (order, &["IDS", "order_id", "0"], "ERR"),
        (order, &["SET", "a", "1"], "ERR unknown command 'SET'"),
        (order, &["INCR"], "ERR wrong number of arguments for 'incr'"),
        (order, &["SELECT", "1"], "ERR DB index is out of range"),
    ] {
        let got = cli(port, token, args);
        assert!(got.contains(says), "{args:?}: {got}");
    }
    assert_eq!(
        cli(port, chat, &["GET", "msg_seq:c1"]),
        "7",
        "nothing taken"
    );
    let next: i64 = cli(port, order, &["INCR", "order_id"]).parse().unwrap();
    assert_eq!(next, by_one + 1, "the refusals took no ID");
    assert!(cli(port, Some("wrong"), &["INCR", "order_id"]).contains("NOAUTH"));
    assert_eq!(cli(port, order, &["SELECT", "0"]), "OK");
    assert_eq!(cli(port, order, &["CLIENT", "SETNAME", "app"]), "OK");
    let hello = cli(
        port,
        None,
        &["HELLO", "3", "AUTH", "default", &setup.tokens["order"]],
    );
    assert!(hello.contains("segmint") && hello.contains('3'), "{hello}");
    let remote = Remote::new(&server.base, Duration::from_secs(5));
    let errors = metric(
        &remote,
        "segmint_resp_commands_total{command=\"incrby\",outcome=\"error\"}",
    )
    .await;
    assert_eq!(errors, 3.0);
    // The listener's threads, each serving the connections dealt to it.
    let pid = server.child.0.id();
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("segmint-resp-"))
        .count();
    assert_eq!(threads, RESP_THREADS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_commands_are_answered_in_order_and_bad_input_keeps_the_connection() {
    let setup = Setup::start(Kind::Postgres);
    let (_server, port) = setup.server().await;
    let token = &setup.tokens["chat"];
    let mut request = command(&["AUTH", token]);
    for _ in 0..1_000 {
        request.extend(command(&["INCR", "msg_seq:p"]));
    }
    request.extend(command(&["GET", "msg_seq:p"]));
    let got = exchange(port, &request, 1_002).await;
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(lines[0], "+OK");
    let expected: Vec<String> = (1..=1_000).map(|n| format!(":{n}")).collect();
    assert_eq!(&lines[1..1_001], &expected[..]);
    assert_eq!(&lines[1_001..], &["$4", "1000"]);
    // Inline commands (telnet), an unknown command, then a good one: one connection.
    let got = exchange(
        port,
        format!("AUTH {token}\r\nFLUSHALL\r\nINCR msg_seq:p\r\n").as_bytes(),
        3,
    )
    .await;
    assert_eq!(
        got,
        "+OK\r\n-ERR unknown command 'FLUSHALL', with args beginning with: \r\n:1001\r\n"
    );
    // What cannot be framed closes the connection after an error.
    let got = exchange(port, b"*1\r\n$x\r\nINCR msg_seq:p\r\n", 2).await;
    assert!(got.starts_with("-ERR Protocol error"), "{got}");
    // A connection cut in the middle of a command: the command never runs.
    let mut cut = command(&["AUTH", token]);
    cut.extend(b"*2\r\n$4\r\nINCR\r\n$9\r\nmsg_s");
    exchange(port, &cut, 1).await;
    assert_eq!(cli(port, Some(token), &["GET", "msg_seq:p"]), "1001");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_benchmark_runs_against_segmint() {
    let setup = Setup::start(Kind::Postgres);
    let (server, port) = setup.server().await;
    // Its INCR is of `counter:__rand_int__`: keys of the sequence biz `counter`.
    for pipeline in ["1", "16"] {
        let out = Command::new("redis-benchmark")
            .args(["-p", &port.to_string(), "-a", &setup.tokens["counter"]])
            .args([
                "-t", "incr", "-n", "5000", "-r", "1000", "-c", "8", "-q", "-P", pipeline,
            ])
            .output()
            .expect("redis-benchmark (Debian's redis-tools)");
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("INCR:") && text.contains("requests per second"),
            "{text}"
        );
    }
    let remote = Remote::new(&server.base, Duration::from_secs(5));
    let ok = metric(
        &remote,
        "segmint_resp_commands_total{command=\"incr\",outcome=\"ok\"}",
    )
    .await;
    let errors = metric(
        &remote,
        "segmint_resp_commands_total{command=\"incr\",outcome=\"error\"}",
    )
    .await;
    // redis-benchmark sends a few INCRs of its own beside the 10,000 it times.
    assert!(
        (10_000.0..10_100.0).contains(&ok) && errors == 0.0,
        "{ok} ok, {errors} errors"
    );
    let counted = metric(&remote, "segmint_sequence_numbers_total{biz=\"counter\"}").await;
    assert_eq!(counted, ok, "each INCR took one number");
}

/// redis-py, unchanged, runs `tests/resp_client.py` (see its doc): RESP2 and RESP3,
/// authentication, every command, errors as its exceptions, pipelines, threads sharing
/// a pool, `pipeline()`'s MULTI/EXEC. Then the server's own counts match what the
/// script took, and the next ID is above all it saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_runs_unchanged_against_segmint() {
    let python = redis_python().await;
    let setup = Setup::start(Kind::Postgres);
    let (server, port) = setup.server().await;
    // A few seconds on an idle machine.
    let report = run_script(
        &python,
        "tests/resp_client.py",
        |c| {
            c.args(["--port", &port.to_string()])
                .env("SEGMINT_ORDER_TOKEN", &setup.tokens["order"])
                .env("SEGMINT_CHAT_TOKEN", &setup.tokens["chat"])
        },
        Duration::from_secs(180),
    )
    .await;
    let summary: serde_json::Value = report
        .lines()
        .find_map(|l| l.strip_prefix("summary: "))
        .map(|s| serde_json::from_str(s).unwrap())
        .unwrap_or_else(|| panic!("no summary line:\n{report}"));
    let count = |field: &str| summary[field].as_u64().unwrap() as f64;
    let remote = Remote::new(&server.base, Duration::from_secs(5));
    // The server counted what the script took: each ID, each number, each INCR and
    // INCRBY (redis-py's `incr(key)` sends `INCRBY key 1`).
    for (series, field) in [
        ("segmint_ids_issued_total{biz=\"order\"}", "ids"),
        ("segmint_sequence_numbers_total{biz=\"chat\"}", "numbers"),
    ] {
        assert_eq!(metric(&remote, series).await, count(field), "{series}");
    }
    let ok = |command: &str| {
        format!("segmint_resp_commands_total{{command=\"{command}\",outcome=\"ok\"}}")
    };
    let increments = metric(&remote, &ok("incr")).await + metric(&remote, &ok("incrby")).await;
    // A command between MULTI and EXEC counts once, as it runs: not as it is queued
    // (nor when DISCARD or EXECABORT drops it), as Redis's command statistics.
    assert_eq!(
        increments,
        count("increments"),
        "INCR and INCRBY answered ({} of them queued in MULTI)",
        count("queued")
    );
    assert!(count("ids") > 5_000.0, "{summary}");
    let next = try_v1_ids(&remote, "order", &setup.tokens["order"], 1)
        .await
        .unwrap()[0];
    let max = summary["max_id"].as_i64().unwrap();
    assert!(
        next > max,
        "HTTP's next ID {next} is not above the script's {max}"
    );
}

/// Redis and HTTP clients of one biz on two servers, one server killed midway: every ID
/// unique.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_id_twice_across_redis_and_http_clients_with_a_server_killed() {
    let setup = Setup::start(Kind::Postgres);
    let (mut a, port_a) = setup.server().await;
    let (b, port_b) = setup.server().await;
    let token = setup.tokens["order"].clone();
    let mut tasks = Vec::new();
    for (port, base) in [(port_a, a.base.clone()), (port_b, b.base.clone())] {
        let token = token.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..40 {
                let mut request = command(&["AUTH", &token]);
                for _ in 0..25 {
                    request.extend(command(&["INCR", "order_id"]));
                }
                request.extend(command(&["QUIT"]));
                let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)).await else {
                    break;
                };
                if stream.write_all(&request).await.is_err() {
                    break;
                }
                let mut got = String::new();
                let _ =
                    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut got))
                        .await;
                ids.extend(
                    got.lines()
                        .filter_map(|l| l.strip_prefix(':')?.parse::<i64>().ok()),
                );
                let http = Remote::new(&base, Duration::from_secs(5));
                if let Ok(r) = try_v1_ids(&http, "order", &token, 25).await {
                    ids.extend(r);
                }
            }
            ids
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.child.kill9();
    let mut all = HashSet::new();
    let mut count = 0;
    for task in tasks {
        for id in task.await.unwrap() {
            count += 1;
            assert!(all.insert(id), "ID {id} issued twice");
        }
    }
    assert!(count > 1_000, "{count} IDs");
}
