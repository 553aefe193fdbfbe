//! The `segmint` binary: admin subcommands, environment overrides, graceful stop.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

fn write_config(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

/// Runs `segmint --config FILE args…`; returns (success, stdout, stderr).
fn segmint(config: &tempfile::NamedTempFile, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(segmint_bin())
        .arg("--config")
        .arg(config.path())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn admin_commands_report_per_database() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let cfg = write_config(&config_toml(&[&a, &b], ""));

    let (ok, out, err) = segmint(&cfg, &["migrate"]);
    assert!(ok, "{err}");
    assert_eq!(
        out,
        "\"pg0\": applied 0001_init, 0002_witness, 0003_token_lifecycle\n\"pg1\": applied 0001_init, 0002_witness, 0003_token_lifecycle\n"
    );
    let (ok, out, _) = segmint(&cfg, &["migrate"]);
    assert!(ok);
    assert_eq!(
        out, "\"pg0\": schema up to date\n\"pg1\": schema up to date\n",
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

    a.stop();
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

/// SIGTERM stops accepting, lets the in-flight request finish, and exits 0. The
/// listen address comes from `SEGMINT_BIND`, overriding the file.
#[test]
fn sigterm_finishes_in_flight_requests_and_exits_zero() {
    let pg = PgCluster::start();
    let cfg = write_config(&config_toml(
        &[&pg],
        "fetch_timeout_ms = 5000\nwait_timeout_ms = 8000",
    ));
    let (ok, _, err) = segmint(&cfg, &["migrate"]);
    assert!(ok, "{err}");
    assert!(segmint(&cfg, &["biz", "add", "slow", "--step", "10"]).0);
    let (_, token, _) = segmint(&cfg, &["token", "add", "--biz", "slow"]);
    let port = free_port();
    let mut server = serve_command(cfg.path(), port)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let up = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(child_healthy(&mut server, &base, Duration::from_secs(20)));
    if let Err(e) = up {
        let _ = server.kill();
        let out = server.wait_with_output().unwrap();
        panic!(
            "{e} (SEGMINT_BIND)\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // Hold the biz row locked for 2 s: the first request waits on the reservation.
    let locker = pg.psql_background(
        "BEGIN; SELECT * FROM tiny_id_info WHERE biz_type = 'slow' FOR UPDATE; SELECT pg_sleep(2); COMMIT;",
    );
    std::thread::sleep(Duration::from_millis(300));
    let url = format!(
        "{base}/tinyid/id/nextIdSimple?bizType=slow&token={}",
        token.trim()
    );
    let request = std::thread::spawn(move || reqwest::blocking_get(&url));
    std::thread::sleep(Duration::from_millis(300));
    let kill = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());

    let answer = request.join().unwrap();
    if answer.is_err() {
        let out = server.wait_with_output().unwrap();
        panic!(
            "in-flight request failed: {answer:?}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let answer = answer.unwrap();
    assert_eq!(answer, "1", "the in-flight request got its ID");
    let status = server.wait().unwrap();
    assert_eq!(status.code(), Some(0), "graceful stop exits 0");
    assert!(
        reqwest::blocking_get(&format!("{base}/healthz")).is_err(),
        "no longer accepting"
    );
    drop(locker);
}

mod reqwest {
    //! A minimal blocking GET on top of the async client, for the process tests.
    pub fn blocking_get(url: &str) -> Result<String, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let r = ::reqwest::get(url).await.map_err(|e| format!("{e:?}"))?;
            r.text().await.map_err(|e| e.to_string())
        })
    }
}
