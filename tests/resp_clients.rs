//! Every Redis client unchanged, in its default configuration: what clients ask of a
//! server beside `INCR` (`INFO`, `CLIENT`, `CONFIG GET`, `COMMAND`), answered in Redis's
//! format with true figures, over raw sockets on a real `segmint serve`; keys that are
//! not UTF-8 refused, never merged with another key; and Node.js's two clients, ioredis
//! with its default options (its ready check sends `INFO`) and node-redis 5 in RESP2
//! and RESP3, running `tests/resp_clients.js` unchanged. One server on one embedded
//! database each.

use std::collections::HashMap;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::common::http::{Remote, metric, try_v1_ids};
use crate::common::node::node_clients;
use crate::common::python::run_script;
use crate::common::resp::{Connection, Setup, cli, command};
use crate::common::*;

/// The `field:value` lines of an `INFO` reply, and its `# Section` headers in order.
fn info_fields(reply: &str) -> (HashMap<String, String>, Vec<String>) {
    let body = match reply.split_once("\r\n") {
        Some((head, body)) if head.starts_with('$') => body,
        _ => panic!("INFO is a bulk string: {reply:?}"),
    };
    let mut fields = HashMap::new();
    let mut sections = Vec::new();
    for line in body.split("\r\n") {
        if let Some(title) = line.strip_prefix("# ") {
            sections.push(title.to_owned());
        } else if let Some((field, value)) = line.split_once(':') {
            fields.insert(field.to_owned(), value.to_owned());
        }
    }
    (fields, sections)
}

/// A number of an `INFO` reply.
fn count(fields: &HashMap<String, String>, field: &str) -> u64 {
    fields
        .get(field)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{field} in {fields:?}"))
}

/// The `id=` of each line of `CLIENT LIST`.
fn listed(reply: &str) -> Vec<u64> {
    reply
        .lines()
        .filter_map(|l| l.split_once("id=")?.1.split(' ').next()?.parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_reports_the_server_and_its_connections_truly() {
    let setup = Setup::start(Kind::Embedded);
    let (server, port) = setup.server().await;
    let order = &setup.tokens["order"];
    let mut a = Connection::open(port, Some(order)).await;
    let mut b = Connection::open(port, Some(order)).await;
    let (fields, sections) = info_fields(&a.call(&["INFO"]).await);
    let all = [
        "Server",
        "Clients",
        "Persistence",
        "Stats",
        "Replication",
        "Cluster",
        "Keyspace",
    ];
    assert_eq!(sections, all);
    let (pid, port_text) = (server.child.0.id().to_string(), port.to_string());
    for (field, value) in [
        ("redis_version", "7.2.0"),
        ("segmint_version", env!("CARGO_PKG_VERSION")),
        ("redis_mode", "standalone"),
        ("arch_bits", "64"),
        ("process_id", pid.as_str()),
        ("tcp_port", port_text.as_str()),
        ("uptime_in_days", "0"),
        ("connected_clients", "2"),
        ("loading", "0"),
        ("role", "master"),
        ("connected_slaves", "0"),
        ("total_connections_received", "2"),
    ] {
        assert_eq!(
            fields.get(field).map(String::as_str),
            Some(value),
            "{field}"
        );
    }
    assert!(fields["os"].starts_with("Linux "), "{}", fields["os"]);
    assert!(count(&fields, "uptime_in_seconds") < 600);
    for every in ["all", "default", "EVERYTHING"] {
        assert_eq!(
            info_fields(&a.call(&["INFO", every]).await).1,
            all,
            "{every}"
        );
    }
    assert_eq!(
        info_fields(&a.call(&["INFO", "server"]).await).1,
        ["Server"]
    );
    assert_eq!(a.call(&["INFO", "nosuch"]).await, "$0\r\n\r\n");
    let (stats, sections) = info_fields(&a.call(&["INFO", "stats", "CLIENTS"]).await);
    assert_eq!(sections, ["Clients", "Stats"], "in Redis's order");
    // Commands counted as answered: the INFO that read the count, then an INCR, are
    // two more at the next read (b, the only other connection, is idle).
    let before = count(&stats, "total_commands_processed");
    assert!(a.call(&["INCR", "order_id"]).await.starts_with(':'));
    let (stats, _) = info_fields(&a.call(&["INFO", "stats"]).await);
    assert_eq!(count(&stats, "total_commands_processed"), before + 2);
    // A connection that comes and goes: received once, open no more once closed.
    assert_eq!(cli(port, Some(order), &["PING"]), "PONG");
    let stats = eventually(
        Duration::from_secs(10),
        "redis-cli's connection closed",
        async || {
            let (fields, _) = info_fields(&b.call(&["INFO"]).await);
            match fields["connected_clients"].as_str() {
                "2" => Ok(fields),
                other => Err(format!("{other} connected")),
            }
        },
    )
    .await;
    assert_eq!(count(&stats, "total_connections_received"), 3);
    // The rate of commands, sampled as Redis samples it: these INFOs make it positive.
    eventually(Duration::from_secs(10), "a rate of commands", async || {
        let (stats, _) = info_fields(&b.call(&["INFO", "stats"]).await);
        match count(&stats, "instantaneous_ops_per_sec") {
            0 => Err("0 ops/s".into()),
            n => Ok(n),
        }
    })
    .await;
    // What clients read at connect beside INFO.
    let config = a
        .call(&[
            "CONFIG",
            "GET",
            "databases",
            "save",
            "appendonly",
            "timeout",
        ])
        .await;
    assert_eq!(
        config,
        "*8\r\n$9\r\ndatabases\r\n$1\r\n1\r\n$7\r\ntimeout\r\n$1\r\n0\r\n$4\r\nsave\r\n$0\r\n\r\n$10\r\nappendonly\r\n$2\r\nno\r\n"
    );
    assert!(
        a.call(&["CONFIG", "GET", "max*"])
            .await
            .contains("maxclients")
    );
    assert_eq!(a.call(&["CONFIG", "GET", "nosuch"]).await, "*0\r\n");
    let set = a.call(&["CONFIG", "SET", "timeout", "5"]).await;
    assert!(set.starts_with("-ERR CONFIG SET is not supported"), "{set}");
    assert_eq!(a.call(&["COMMAND", "COUNT"]).await, ":16\r\n");
    let info = a.call(&["COMMAND", "INFO", "incr", "set"]).await;
    assert!(
        info.starts_with("*2\r\n*10\r\n$4\r\nincr\r\n:2\r\n"),
        "{info}"
    );
    assert!(info.ends_with("$-1\r\n"), "SET is not answered: {info}");
    let docs = a.call(&["COMMAND", "DOCS", "info"]).await;
    assert!(
        docs.starts_with("*2\r\n$4\r\ninfo\r\n") && docs.contains("summary"),
        "{docs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_lists_and_kills_the_connections_of_its_token_only() {
    let setup = Setup::start(Kind::Embedded);
    let (server, port) = setup.server().await;
    let (order, chat) = (&setup.tokens["order"], &setup.tokens["chat"]);
    let mut a = Connection::open(port, Some(order)).await;
    let mut b = Connection::open(port, Some(order)).await;
    let mut other = Connection::open(port, Some(chat)).await;
    let id = |reply: String| -> u64 {
        reply
            .strip_prefix(':')
            .and_then(|r| r.trim().parse().ok())
            .unwrap_or_else(|| panic!("an id: {reply:?}"))
    };
    let (id_a, id_b, id_other) = (
        id(a.call(&["CLIENT", "ID"]).await),
        id(b.call(&["CLIENT", "ID"]).await),
        id(other.call(&["CLIENT", "ID"]).await),
    );
    assert!(id_a != id_b && id_b != id_other && id_a != id_other);
    let hello = a.call(&["HELLO", "2"]).await;
    assert!(
        hello.contains(&format!("$2\r\nid\r\n:{id_a}\r\n")),
        "{hello}"
    );
    assert_eq!(b.call(&["CLIENT", "SETNAME", "worker"]).await, "+OK\r\n");
    assert!(
        b.call(&["CLIENT", "SETNAME", "two words"])
            .await
            .starts_with("-ERR Client names cannot")
    );
    assert_eq!(
        b.call(&["CLIENT", "SETINFO", "LIB-NAME", "raw"]).await,
        "+OK\r\n"
    );
    // The lines of the connections of the caller's token, in Redis's format.
    let list = a.call(&["CLIENT", "LIST"]).await;
    assert_eq!(listed(&list), [id_a, id_b], "{list}");
    let line_b = list
        .lines()
        .find(|l| l.starts_with(&format!("id={id_b} ")))
        .unwrap();
    for field in [
        format!("addr={} ", b.addr()),
        format!("laddr=127.0.0.1:{port} "),
        "name=worker ".to_owned(),
        "db=0 ".to_owned(),
        "cmd=client ".to_owned(),
        "lib-name=raw ".to_owned(),
    ] {
        assert!(line_b.contains(&field), "{field} not in {line_b}");
    }
    assert!(line_b.contains(" age=") && line_b.contains(" idle=") && line_b.contains(" fd="));
    let info = a.call(&["CLIENT", "INFO"]).await;
    assert_eq!(listed(&info), [id_a], "{info}");
    assert_eq!(listed(&other.call(&["CLIENT", "LIST"]).await), [id_other]);
    // Another token's connection is neither listed nor closed.
    let kill = |id: u64| id.to_string();
    assert_eq!(
        a.call(&["CLIENT", "KILL", "ID", &kill(id_other)]).await,
        ":0\r\n"
    );
    let addr = other.addr();
    assert_eq!(
        a.call(&["CLIENT", "KILL", &addr]).await,
        "-ERR No such client\r\n"
    );
    assert_eq!(other.call(&["PING"]).await, "+PONG\r\n");
    // The caller is spared by the filter form unless SKIPME no.
    assert_eq!(
        a.call(&["CLIENT", "KILL", "ID", &kill(id_a)]).await,
        ":0\r\n"
    );
    assert_eq!(
        a.call(&["CLIENT", "KILL", "ID", "x"]).await,
        "-ERR client-id should be greater than 0\r\n"
    );
    // Its own token's: closed at once, and gone from the list and the count.
    assert_eq!(
        a.call(&["CLIENT", "KILL", "ID", &kill(id_b)]).await,
        ":1\r\n"
    );
    assert!(b.closed().await, "the killed connection is closed");
    assert_eq!(listed(&a.call(&["CLIENT", "LIST"]).await), [id_a]);
    let stats = a.call(&["INFO", "clients"]).await;
    assert!(stats.contains("connected_clients:2\r\n"), "{stats}");
    // By address, the old form.
    let mut c = Connection::open(port, Some(order)).await;
    assert_eq!(a.call(&["CLIENT", "KILL", &c.addr()]).await, "+OK\r\n");
    assert!(c.closed().await);
    let by_addr = ["CLIENT", "KILL", "ADDR", "127.0.0.1:1", "SKIPME", "yes"];
    assert_eq!(a.call(&by_addr).await, ":0\r\n");
    // A client that sends and never reads is closed too, its replies unsent: far more
    // of them than the sockets' buffers hold.
    let one = a.call(&["COMMAND"]).await.len();
    let mut stuck = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut request = command(&["AUTH", order]);
    request.extend(command(&["CLIENT", "SETNAME", "stuck"]));
    request.extend(command(&["COMMAND"]).repeat(64 * 1024 * 1024 / one));
    let sending = tokio::spawn(async move {
        let _ = stuck.write_all(&request).await;
        stuck
    });
    let remote = Remote::new(&server.base, Duration::from_secs(5));
    let open = async || metric(&remote, "segmint_resp_connections").await;
    let stuck_id = eventually(
        Duration::from_secs(10),
        "the stuck client listed",
        async || {
            let list = a.call(&["CLIENT", "LIST"]).await;
            let line = list.lines().find(|l| l.contains(" name=stuck "));
            line.map(|l| listed(l)[0]).ok_or(list)
        },
    )
    .await;
    assert_eq!(open().await, 3.0);
    // Killed once the server has stopped answering it: its replies fill the buffers,
    // and it waits to write them (the count of its commands no longer moves).
    let answered = "segmint_resp_commands_total{command=\"command\",outcome=\"ok\"}";
    let mut last = 0.0;
    eventually_every(
        Duration::from_millis(200),
        Duration::from_secs(20),
        "the server stuck writing",
        async || {
            let now = metric(&remote, answered).await;
            let stalled = now == last && now > 1.0;
            last = now;
            match stalled {
                true => Ok(()),
                false => Err(format!("{now} answered")),
            }
        },
    )
    .await;
    assert_eq!(
        a.call(&["CLIENT", "KILL", "ID", &kill(stuck_id)]).await,
        ":1\r\n"
    );
    eventually(
        Duration::from_secs(10),
        "the stuck client closed",
        async || match open().await {
            2.0 => Ok(()),
            n => Err(format!("{n} open")),
        },
    )
    .await;
    drop(sending);
    // A connection may close itself.
    let me = a.addr();
    assert_eq!(
        a.call(&["CLIENT", "KILL", "ADDR", &me, "SKIPME", "no"])
            .await,
        ":1\r\n"
    );
    assert!(a.closed().await);
    assert_eq!(other.call(&["PING"]).await, "+PONG\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_are_not_utf8_are_refused_and_change_nothing() {
    let setup = Setup::start(Kind::Embedded);
    let (server, port) = setup.server().await;
    let mut chat = Connection::open(port, Some(&setup.tokens["chat"])).await;
    // U+FFFD, what a lossy decoding of `\xff` or `\xfe` would have made of them.
    let replaced: &[u8] = b"msg_seq:\xef\xbf\xbd";
    assert_eq!(chat.call_bytes(&[b"INCR", replaced]).await, ":1\r\n");
    for bad in [&b"msg_seq:\xff"[..], b"msg_seq:\xfe", b"\xffmsg_seq:c"] {
        for command in [
            &[&b"INCR"[..], bad][..],
            &[b"INCRBY", bad, b"5"],
            &[b"GET", bad],
            &[b"IDS", bad, b"2"],
        ] {
            let got = chat.call_bytes(command).await;
            assert!(
                got.starts_with("-ERR key '") && got.contains("is not valid UTF-8"),
                "{:?}: {got}",
                String::from_utf8_lossy(command[0])
            );
        }
    }
    let got = chat.call_bytes(&[b"INCR", b"msg_seq:\xff"]).await;
    assert!(
        got.contains("msg_seq:\\xff") && got.contains("byte 0xff at offset 8"),
        "{got}"
    );
    // Inside MULTI the refusal discards the transaction, as any refused command does.
    assert_eq!(chat.call(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(chat.call_bytes(&[b"INCR", replaced]).await, "+QUEUED\r\n");
    assert!(
        chat.call_bytes(&[b"INCR", b"msg_seq:\xfe"])
            .await
            .starts_with("-ERR key")
    );
    assert!(chat.call(&["EXEC"]).await.starts_with("-EXECABORT"));
    assert_eq!(
        chat.call_bytes(&[b"GET", replaced]).await,
        "$1\r\n1\r\n",
        "unchanged"
    );
    let remote = Remote::new(&server.base, Duration::from_secs(5));
    let taken = metric(&remote, "segmint_sequence_numbers_total{biz=\"chat\"}").await;
    assert_eq!(taken, 1.0, "the refusals took no number");
    // Other arguments are text too; PING's message comes back as it was sent.
    let got = chat.call_bytes(&[b"CLIENT", b"SETNAME", b"n\xff"]).await;
    assert!(
        got.starts_with("-ERR argument 2 of 'client' is not valid UTF-8"),
        "{got}"
    );
    assert_eq!(
        chat.call_bytes(&[b"PING", b"\xff"]).await.as_bytes(),
        b"$1\r\n\xef\xbf\xbd\r\n"
    );
}

/// ioredis and node-redis 5, unchanged, run `tests/resp_clients.js` (see its header);
/// then the server's counts match what the script took, and the next ID is above all it
/// saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ioredis_and_node_redis_run_unchanged_in_their_defaults() {
    let modules = node_clients().await;
    let setup = Setup::start(Kind::Embedded);
    let (server, port) = setup.server().await;
    let report = run_script(
        std::path::Path::new("node"),
        "tests/resp_clients.js",
        |c| {
            c.env("NODE_PATH", &modules)
                .env("SEGMINT_RESP_PORT", port.to_string())
                .env("SEGMINT_ORDER_TOKEN", &setup.tokens["order"])
                .env("SEGMINT_CHAT_TOKEN", &setup.tokens["chat"])
        },
        Duration::from_secs(120),
    )
    .await;
    print!("{report}");
    let summary: serde_json::Value = report
        .lines()
        .find_map(|l| l.strip_prefix("summary: "))
        .map(|s| serde_json::from_str(s).unwrap())
        .unwrap_or_else(|| panic!("no summary line:\n{report}"));
    let remote = Remote::new(&server.base, Duration::from_secs(5));
    for (series, field) in [
        ("segmint_ids_issued_total{biz=\"order\"}", "ids"),
        ("segmint_sequence_numbers_total{biz=\"chat\"}", "numbers"),
    ] {
        let want = summary[field].as_u64().unwrap() as f64;
        assert_eq!(metric(&remote, series).await, want, "{series}");
    }
    assert!(summary["ids"].as_u64().unwrap() > 1_500, "{summary}");
    let next = try_v1_ids(&remote, "order", &setup.tokens["order"], 1)
        .await
        .unwrap()[0];
    let max = summary["max_id"].as_i64().unwrap();
    assert!(
        next > max,
        "HTTP's next ID {next} is not above the script's {max}"
    );
}

/// The limits of one connection: a `MULTI` queue past `resp.max_queued` discards the
/// transaction (nothing of it runs, the queue is dropped), and wrong passwords in a
/// row are answered later and later while a right one still works at once after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_is_held_to_its_queue_and_slowed_after_wrong_passwords() {
    let setup = Setup::start(Kind::Embedded);
    let (server, port) = setup.server_with(", max_queued = 3").await;
    let mut chat = Connection::open(port, Some(&setup.tokens["chat"])).await;
    assert_eq!(chat.call(&["MULTI"]).await, "+OK\r\n");
    for _ in 0..3 {
        assert_eq!(chat.call(&["INCR", "msg_seq:q"]).await, "+QUEUED\r\n");
    }
    let full = chat.call(&["INCR", "msg_seq:q"]).await;
    assert!(
        full.starts_with("-ERR MULTI holds at most 3 commands (resp.max_queued)"),
        "{full}"
    );
    assert_eq!(chat.call(&["INCR", "msg_seq:q"]).await, "+QUEUED\r\n");
    assert!(chat.call(&["EXEC"]).await.starts_with("-EXECABORT"));
    assert_eq!(
        chat.call(&["GET", "msg_seq:q"]).await,
        "$1\r\n0\r\n",
        "none ran"
    );
    // A queue within the bound runs whole.
    assert_eq!(chat.call(&["MULTI"]).await, "+OK\r\n");
    for _ in 0..3 {
        assert_eq!(chat.call(&["INCR", "msg_seq:q"]).await, "+QUEUED\r\n");
    }
    assert_eq!(chat.call(&["EXEC"]).await, "*3\r\n:1\r\n:2\r\n:3\r\n");

    // Four wrong passwords in a row: the second waits 100 ms, the third 200, the
    // fourth 400.
    let mut guess = Connection::open(port, None).await;
    let started = std::time::Instant::now();
    for _ in 0..4 {
        assert!(
            guess
                .call(&["AUTH", "wrong"])
                .await
                .starts_with("-WRONGPASS")
        );
    }
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(700), "4 refusals in {took:?}");
    assert_eq!(
        guess.call(&["AUTH", &setup.tokens["chat"]]).await,
        "+OK\r\n"
    );
    assert_eq!(guess.call(&["INCR", "msg_seq:q"]).await, ":4\r\n");
    drop(server);
}

/// The CPU time the process has used, in clock ticks, from `/proc/PID/stat`.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command's closing parenthesis; utime and stime are the
    // 14th and 15th of the line.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// The server's resident memory in bytes, from `/proc/PID/status`.
fn resident(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in {status}"));
    kb * 1024
}

/// The memory a client can make the server hold: a transaction's IDs are bounded
/// (`resp.max_queued_ids`), and a client that pipelines large `IDS` without reading
/// its replies makes the server wait on the socket instead of holding every reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_asks_much_and_reads_nothing_holds_little_memory() {
    let setup = Setup::start(Kind::Embedded);
    let (server, port) = setup.server_with(", max_queued_ids = 250").await;
    let pid = server.child.0.id();
    let mut order = Connection::open(port, Some(&setup.tokens["order"])).await;
    assert_eq!(order.call(&["MULTI"]).await, "+OK\r\n");
    for _ in 0..2 {
        assert_eq!(order.call(&["IDS", "order_id", "100"]).await, "+QUEUED\r\n");
    }
    let over = order.call(&["IDS", "order_id", "100"]).await;
    assert!(
        over.starts_with("-ERR MULTI asks for at most 250 IDs (resp.max_queued_ids)"),
        "{over}"
    );
    assert!(order.call(&["EXEC"]).await.starts_with("-EXECABORT"));

    // 100 × 100,000 IDs, some 130 MB of replies, never read.
    let before = resident(pid);
    let mut greedy = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut request = command(&["AUTH", &setup.tokens["bulk"]]);
    for _ in 0..100 {
        request.extend(command(&["IDS", "bulk", "100000"]));
    }
    greedy.write_all(&request).await.unwrap();
    // Until the server is at rest (it waits on the full socket: at most 50 ms of CPU
    // over half a second, what its catalog refresh may take), its memory at every look.
    let mut ticks = std::collections::VecDeque::from([cpu_ticks(pid)]);
    let (mut rest, mut peak) = (false, 0);
    let started = std::time::Instant::now();
    while !rest && started.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        peak = peak.max(resident(pid));
        ticks.push_back(cpu_ticks(pid));
        if ticks.len() > 6 {
            ticks.pop_front();
            rest = ticks[5] - ticks[0] <= 5;
        }
    }
    assert!(rest, "the server kept working for 30 s");
    let grown = peak.saturating_sub(before);
    assert!(
        grown < 64 << 20,
        "the server grew by {} MB for a client that reads nothing",
        grown >> 20
    );
    // The others are served meanwhile.
    assert_eq!(order.call(&["PING"]).await, "+PONG\r\n");
    drop(greedy);
    drop(server);
}

/// `resp.max_clients`: a connection past it is answered as by Redis and closed, the
/// others go on, and a place freed is taken again; `INFO` and `CONFIG GET` say the
/// bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_max_clients_are_refused_as_by_redis() {
    let setup = Setup::start(Kind::Embedded);
    let (server, port) = setup.server_with(", max_clients = 2").await;
    let mut first = Connection::open(port, Some(&setup.tokens["chat"])).await;
    let second = Connection::open(port, Some(&setup.tokens["chat"])).await;
    let mut third = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        tokio::io::AsyncReadExt::read_to_end(&mut third, &mut answer),
    )
    .await
    .expect("the third connection is closed")
    .unwrap();
    assert_eq!(answer, b"-ERR max number of clients reached\r\n");
    assert_eq!(first.call(&["INCR", "msg_seq:m"]).await, ":1\r\n");
    let info = first.call(&["INFO", "clients"]).await;
    assert!(info.contains("maxclients:2\r\n"), "{info}");
    let config = first.call(&["CONFIG", "GET", "maxclients"]).await;
    assert!(
        config.contains("$10\r\nmaxclients\r\n$1\r\n2\r\n"),
        "{config}"
    );
    // A place freed is taken again, once the server has seen the close.
    drop(second);
    crate::common::wait::eventually(
        Duration::from_secs(10),
        "a new connection once one closed",
        async || {
            let mut again = Connection::open(port, None).await;
            match again.call(&["AUTH", &setup.tokens["chat"]]).await.as_str() {
                "+OK\r\n" => Ok(()),
                other => Err(other.to_owned()),
            }
        },
    )
    .await;
    drop(server);
}
