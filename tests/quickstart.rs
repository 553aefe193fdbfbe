//! The README's quick start, run exactly as written where a fresh clone's root would
//! run it: one command, no database server, and the curl command it prints works.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::*;

/// The first ```sh block after the `## Quick start` heading.
fn quick_start_command(readme: &str) -> String {
    let section = &readme[readme
        .find("## Quick start")
        .expect("README has a Quick start")..];
    let block = &section[section.find("```sh\n").expect("a sh code block") + 6..];
    let command = block[..block.find("\n```").unwrap()].trim();
    assert!(
        !command.contains('\n'),
        "the quick start is one command: {command:?}"
    );
    command.to_string()
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Runs a `curl` line printed by segmint: an optional `-H 'Name: value'`, then the URL.
fn run_curl_line(line: &str) -> (u16, String) {
    let quoted: Vec<&str> = line.split('\'').skip(1).step_by(2).collect();
    let (header, url) = match quoted.as_slice() {
        [url] => (None, *url),
        [header, url] => (header.split_once(": "), *url),
        _ => panic!("unexpected curl line: {line}"),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut req = reqwest::Client::new().get(url);
        if let Some((name, value)) = header {
            req = req.header(name, value);
        }
        let r = req.send().await.expect("the printed URL answers");
        (r.status().as_u16(), r.text().await.unwrap())
    })
}

#[test]
fn readme_quick_start_serves_ids_on_a_fresh_checkout() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let command = quick_start_command(&std::fs::read_to_string(root.join("README.md")).unwrap());
    // The command runs where a fresh clone's root would have it run from: a directory
    // with the clone's `config/` and no `data/`. It is an empty directory inside this
    // repository (cargo finds the workspace above it), so that the release build is this
    // repository's own, which `scripts/bench` uses next rather than building it again:
    // a copy of the sources elsewhere is another workspace to cargo, built a second
    // time (minutes of a CI run).
    let quickstart_dir = root.join("target").join("quickstart");
    std::fs::create_dir_all(&quickstart_dir).unwrap();
    let checkout = tempfile::Builder::new()
        .prefix("fresh-")
        .tempdir_in(&quickstart_dir)
        .unwrap();
    copy_tree(&root.join("config"), &checkout.path().join("config"));
    assert!(
        !checkout.path().join("data").exists(),
        "a fresh checkout has no data/"
    );

    let port = free_port();
    let mut quick_start = Command::new("sh");
    // A user's shell, not this test's environment: the variables cargo and nextest set
    // for a test (CARGO_PKG_*, CARGO_MANIFEST_DIR, LD_LIBRARY_PATH, NEXTEST_*, …) would
    // make cargo build segmint again rather than use the build `scripts/bench` uses.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let tool = (name.starts_with("CARGO") && name != "CARGO_HOME")
            || name.starts_with("NEXTEST")
            || name.starts_with("__NEXTEST")
            || name.starts_with("RUST_TEST")
            || name == "LD_LIBRARY_PATH"
            || name == "OUT_DIR";
        if tool {
            quick_start.env_remove(&*name);
        }
    }
    let mut server = ChildGuard(
        quick_start
            // `exec`: the shell becomes cargo, and `cargo run` in turn becomes segmint,
            // so the child is the server itself and SIGTERM reaches it directly.
            .args(["-c", &format!("exec {command}")])
            .current_dir(checkout.path())
            // This repository's build directory, as cargo would choose it here.
            .env("CARGO_TARGET_DIR", root.join("target"))
            .env("SEGMINT_BIND", format!("127.0.0.1:{port}"))
            .env_remove("SEGMINT_CONFIG")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run the quick start"),
    );
    let stdout = server.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut curls = Vec::new();
    // The bound catches a quick start that hangs, not a slow one: the release build it
    // starts competes with the whole test suite for the cores (about 870 s of the
    // suite's 1,120 s on a 2-core machine), so it is left far above that.
    while curls.len() < 2 {
        let line = rx
            .recv_timeout(Duration::from_secs(1800))
            .expect("the quick start printed its curl commands");
        if line.starts_with("curl ") {
            curls.push(line);
        }
    }

    let (status, body) = run_curl_line(&curls[0]);
    assert_eq!(status, 200);
    let id: i64 = body
        .parse()
        .unwrap_or_else(|_| panic!("an ID, got `{body}`"));
    assert!(id > 0);
    let (status, body) = run_curl_line(&curls[1]);
    assert_eq!(status, 200, "{body}");
    let ids: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ids["ids"].as_array().map(Vec::len), Some(3), "{body}");
    assert!(
        checkout.path().join("data").is_dir(),
        "the embedded store lives in data/"
    );

    assert_eq!(
        server.terminate(),
        Some(0),
        "SIGTERM stops the quick start cleanly"
    );
}
