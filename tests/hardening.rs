//! Hardening: bounded request bodies and request heads, TCP_NODELAY on accepted
//! connections, statement timeouts on PostgreSQL, tokens that never reach the logs, and
//! tokens remembered by the workers only exactly and only while their catalog holds.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::http::{
    Resp, Target, Via, bearer, compat, compat_request, next_id_simple, send, tinyid_params, v1,
    v1_ids,
};
use common::wait::{until_locker_sleeps, until_segmint_waits_on_lock};
use common::*;
use segmint::server::STOP_LIMIT;

const BIZ: &str = "order";

/// `GET /v1/ids/{biz}` (one ID) with `token`.
async fn one_id(app: &impl Target, biz: &str, token: &str) -> Resp {
    v1(app, false, &format!("/v1/ids/{biz}"), bearer(token)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_is_refused_and_changes_nothing() {
    let dbs = Databases::start(Kind::Embedded, 1);
    let config = dbs.config("max_body_bytes = 1024");
    let token = setup_biz(&config, BIZ, 100, false).await;
    let app = spawn_app(config).await;
    let before = dbs.row(0, BIZ);
    let padding = "x".repeat(64 * 1024);
    let mut params = tinyid_params(BIZ, &token, None);
    params.push(("pad", &padding));
    let r = send(compat_request(&app, "nextId", Via::PostForm, &params)).await;
    assert_eq!(r.status, 413);
    assert_eq!(dbs.row(0, BIZ), before, "nothing reserved");
    // A small form still works.
    let params = tinyid_params(BIZ, &token, None);
    let r = compat(&app, "nextIdSimple", Via::PostForm, &params).await;
    assert_eq!(r.body, "1");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_finishes_its_request_is_disconnected() {
    let dbs = Databases::start(Kind::Embedded, 1);
    let app = spawn_app(dbs.config("request_timeout_ms = 300")).await;
    let addr = app.base.trim_start_matches("http://").to_string();
    let started = Instant::now();
    let answer = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // The head of a request, never ended by its blank line.
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: segmint\r\n")
            .unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf)
            .map(|_| String::from_utf8_lossy(&buf).into_owned())
    })
    .await
    .unwrap();
    let waited = started.elapsed();
    let answer = answer.expect("the server closes the connection, not the read timeout");
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer:?}"
    );
    assert!(waited < Duration::from_secs(3), "cut after {waited:?}");
    app.stop().await;
}

/// Accepted connections have Nagle's algorithm off: a response written while an
/// earlier one is still unacknowledged (pipelined requests, a large batch) is sent at
/// once instead of waiting for the client's delayed ACK. The server runs in this
/// process, so its side of the connection is found among this process's descriptors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_connections_send_without_delay() {
    use std::mem::ManuallyDrop;
    use std::os::fd::FromRawFd;

    let dbs = Databases::start(Kind::Embedded, 1);
    let app = spawn_app(dbs.config("")).await;
    let server: std::net::SocketAddr = app.base.trim_start_matches("http://").parse().unwrap();
    let mut client = TcpStream::connect(server).unwrap();
    client
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: segmint\r\n\r\n")
        .unwrap();
    let mut answer = [0u8; 12];
    client.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"HTTP/1.1 200");
    let client_addr = client.local_addr().unwrap();

    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let target = std::fs::read_link(entry.path()).unwrap_or_default();
        if !target.to_string_lossy().starts_with("socket:") {
            continue;
        }
        // Borrowed, never closed: the descriptor belongs to the server.
        let socket = ManuallyDrop::new(unsafe { TcpStream::from_raw_fd(fd) });
        if socket.local_addr().ok() == Some(server) && socket.peer_addr().ok() == Some(client_addr)
        {
            found.push(socket.nodelay().unwrap());
        }
    }
    assert_eq!(
        found,
        [true],
        "TCP_NODELAY of the server's side of the connection"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_statement_is_cancelled_by_postgresql() {
    let pg = PgCluster::start();
    let config = config(&[&pg], "fetch_timeout_ms = 800\nwait_timeout_ms = 1500");
    let token = setup_biz(&config, BIZ, 100, false).await;
    let app = spawn_app(config).await;
    let _locker = pg.psql_background(
        "BEGIN; SELECT * FROM tiny_id_info WHERE biz_type = 'order' FOR UPDATE; SELECT pg_sleep(6); COMMIT;",
    );
    until_locker_sleeps(&pg, "tiny_id_info", Duration::from_secs(10)).await;
    let r = one_id(&app, BIZ, &token).await;
    assert_eq!(r.status, 503, "the row is locked");
    // segmint gave up on the client side; the server side gave up too, so no
    // connection of segmint's is left waiting on the lock, well before the locker
    // lets go (6 s after it took the lock; the request above took 1.5 s).
    until_segmint_waits_on_lock(&pg, 0, Duration::from_secs(2)).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_never_reach_the_logs() {
    let dbs = Databases::start(Kind::Embedded, 1);
    let toml = config_toml_urls(&dbs.urls(), "");
    let config = segmint::config::Config::from_toml(&toml).unwrap();
    let token = setup_biz(&config, BIZ, 100, false).await;
    let mut server = ServerProcess::start_with_env(&toml, &[("RUST_LOG", "debug")]).await;
    let remote = server.remote(Duration::from_secs(30));
    let wrong = "f00dfeedf00dfeedf00dfeedf00dfeed";
    for t in [token.as_str(), wrong] {
        let params = tinyid_params(BIZ, t, None);
        for route in ["nextId", "nextIdSimple", "nextSegmentId"] {
            compat(&remote, route, Via::Get, &params).await;
        }
        compat(&remote, "nextId", Via::PostForm, &params).await;
        one_id(&remote, BIZ, t).await;
        v1(&remote, false, "/v1/ids/no-such-biz?count=0", bearer(t)).await;
    }
    let status = server.sigterm(STOP_LIMIT).await;
    assert_eq!(status.code(), Some(0));
    let log = server.log_text();
    assert!(
        log.contains("route=\"/tinyid/id/nextId\"") && log.contains("status=401"),
        "the requests were logged at debug level:\n{log}"
    );
    for t in [token.as_str(), wrong] {
        assert!(!log.contains(t), "a token reached the log:\n{log}");
        assert!(
            !log.contains(&t[..12]),
            "part of a token reached the log:\n{log}"
        );
    }
}

/// Each HTTP worker remembers the tokens it recently allowed, for as long as the
/// catalog that allowed them is current. Nothing but the exact token and biz passes on
/// that memory, and a token deleted from the database stops working at the next
/// catalog refresh. One client keeps one connection, so one worker serves it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_token_passes_only_exactly_and_only_while_its_catalog_holds() {
    let dbs = Databases::start(Kind::Embedded, 1);
    let config = dbs.config("catalog_refresh_ms = 200");
    let token = setup_biz(&config, BIZ, 100, false).await;
    let pay_token = setup_biz(&config, "pay", 100, false).await;
    let app = spawn_app(config).await;
    for _ in 0..5 {
        assert_eq!(v1_ids(&app, BIZ, &token, 1).await.len(), 1);
        assert!(
            next_id_simple(&app, BIZ, &token)
                .await
                .error_header
                .is_none()
        );
    }
    let last = token.chars().last().unwrap();
    let changed = format!("{}{}", &token[..63], if last == '0' { '1' } else { '0' });
    for (near, status) in [
        (changed.as_str(), 401),
        (&token[..63], 401),
        (&format!("{token}0"), 401),
        (&token.to_uppercase(), 401),
        (pay_token.as_str(), 403),
    ] {
        let r = one_id(&app, BIZ, near).await;
        assert_eq!(r.status, status, "{near}: {r:?}");
        let r = next_id_simple(&app, BIZ, near).await;
        assert!(
            r.body.is_empty() && r.error_header.is_some_and(|e| e.starts_with("5:")),
            "{near}"
        );
    }
    let r = one_id(&app, "pay", &token).await;
    assert_eq!(r.status, 403, "the token of `{BIZ}` for `pay`");
    assert!(
        next_id_simple(&app, BIZ, &token)
            .await
            .error_header
            .is_none(),
        "still allowed"
    );

    dbs.sql(
        0,
        &format!("DELETE FROM tiny_id_token WHERE biz_type = '{BIZ}'"),
    );
    let (app_ref, token_ref) = (&app, &token);
    eventually(
        Duration::from_secs(10),
        "the deleted token refused",
        move || async move {
            match one_id(app_ref, BIZ, token_ref).await.status {
                200 => Err("it still works".to_owned()),
                _ => Ok(()),
            }
        },
    )
    .await;
    for _ in 0..5 {
        assert_eq!(one_id(&app, BIZ, &token).await.status, 401);
        let r = next_id_simple(&app, BIZ, &token).await;
        assert!(
            r.body.is_empty() && r.error_header.is_some(),
            "nextIdSimple after the delete"
        );
    }
    assert_eq!(
        v1_ids(&app, "pay", &pay_token, 1).await.len(),
        1,
        "other tokens work"
    );
    app.stop().await;
}
