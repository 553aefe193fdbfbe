//! Sequence bizs through every operator move, on real processes: three servers serve a
//! sequence biz on three databases while clients send every key to every server, and
//! the operator runs `segmint db add` and `db remove` within a second of each other,
//! kills a change after it carried the sections and finishes it with the next command,
//! replaces every member with the servers stopped, and restarts a server on a
//! configuration without the removed databases. Every key's numbers are distinct and
//! strictly increase in real-time order throughout; while a change holds a section, it
//! is refused with 503 and `Retry-After`, never 409. On PostgreSQL and on MariaDB.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::layout::{cli_ok, kill_midway, toml_for};
use crate::common::sequences::{
    ADD_CHAT, Op, assert_linearizable, clients_of, next, until_keys_answer,
};
use crate::common::*;

/// Time for every key to be answered after a change: the change's last step, the
/// servers' next catalog refresh and round.
const SETTLE: Duration = Duration::from_secs(20);

/// The keys the clients send, spread over the biz's 8 sections.
const KEYS: usize = 200;

async fn every_key_goes_up_through_every_layout_change(kind: Kind) {
    let dbs = Databases::start(kind, 5);
    let config = |members: &[usize]| toml_for(&dbs, members);
    let first = config(&[0, 1, 2]);
    cli_ok(&first, &["migrate"]);
    cli_ok(&first, &ADD_CHAT);
    let token = cli_ok(&first, &["token", "add", "--biz", "chat"])
        .trim()
        .to_owned();
    // The servers are configured with every database a change may add: a server does
    // not learn a new member's address by itself.
    let serving = config(&[0, 1, 2, 3, 4]);
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut servers = Vec::new();
    for &port in &ports {
        servers.push(ServerProcess::start_on(&serving, port, &[]).await);
    }
    let bases: Vec<String> = servers.iter().map(|s| s.base.clone()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let load = clients_of(KEYS, bases.clone(), token.clone(), stop.clone());
    let mut ops: Vec<Op> = until_keys_answer(KEYS, &bases[0], &token, SETTLE).await.1;

    // `db add` and `db remove` within a second, under load.
    let four = config(&[0, 1, 2, 3]);
    let out = cli_ok(&four, &["db", "add", "pg3"]);
    assert!(
        out.contains("sequence biz `chat`: sections carried"),
        "{out}"
    );
    cli_ok(&four, &["db", "remove", "pg0"]);
    ops.extend(until_keys_answer(KEYS, &bases[1], &token, SETTLE).await.1);

    // A change killed once it carried the sections: they stay held by it, refused
    // with 503 and Retry-After, until the next command finishes it.
    let five = config(&[1, 2, 3, 4]);
    kill_midway(&five, &["db", "add", "pg4"], "sections carried", 1);
    let held = refused_while_held(&bases[2], &token).await;
    eprintln!("while the change was cut off: {held}");
    let out = cli_ok(&five, &["db", "add", "pg4"]);
    assert!(out.contains("layout epoch 3 is done"), "{out}");
    ops.extend(until_keys_answer(KEYS, &bases[2], &token, SETTLE).await.1);

    // Every member replaced with the servers stopped: pg0 back, the other four out.
    servers.clear();
    let all = config(&[0, 1, 2, 3, 4]);
    cli_ok(&all, &["db", "add", "pg0"]);
    for i in 1..=4 {
        cli_ok(&all, &["db", "remove", &format!("pg{i}")]);
    }
    for &port in &ports {
        servers.push(ServerProcess::start_on(&serving, port, &[]).await);
    }
    ops.extend(until_keys_answer(KEYS, &bases[0], &token, SETTLE).await.1);

    // A server restarted on a configuration without the removed databases.
    // Stopped first: started beside it, the new one may find the port taken and exit
    // while the old one still answers its health check.
    servers[1].child.kill9();
    servers[1] = ServerProcess::start_on(&config(&[0]), ports[1], &[]).await;
    ops.extend(until_keys_answer(KEYS, &bases[1], &token, SETTLE).await.1);

    stop.store(true, Ordering::Relaxed);
    for task in load {
        ops.extend(task.await.unwrap());
    }
    // Five passes over every key, and the clients' answers beside them.
    assert!(ops.len() > 5 * KEYS + 500, "{} answers", ops.len());
    assert_linearizable(&ops);
    eprintln!("{} answers, every key strictly increasing", ops.len());
}

/// A key's request to `base` while a cut-off change holds the sections: refused with
/// 503 `not_owner`, `Retry-After` and a message naming the change. Its body.
async fn refused_while_held(base: &str, token: &str) -> String {
    let http = reqwest::Client::new();
    for key in 0..KEYS {
        let r = next(&http, base, token, key).await.expect("an answer");
        if r.status == 200 {
            continue;
        }
        assert_eq!(r.status, 503, "{r:?}");
        assert!(r.body.contains("layout change"), "{r:?}");
        assert_eq!(r.retry_after.as_deref(), Some("1"), "{r:?}");
        return r.body;
    }
    panic!("every key answered while the change held the sections");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_on_postgres_keep_keys_going_up_through_every_layout_change() {
    every_key_goes_up_through_every_layout_change(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_on_mariadb_keep_keys_going_up_through_every_layout_change() {
    every_key_goes_up_through_every_layout_change(Kind::MySql).await;
}
