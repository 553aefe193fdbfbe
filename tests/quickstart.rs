//! The README's quick start, run exactly as written on a fresh copy of the sources:
//! one command, no database server, and the curl command it prints works.

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
    let checkout = tempfile::Builder::new()
        .prefix("segmint-fresh-")
        .tempdir()
        .unwrap();
    for item in ["Cargo.toml", "Cargo.lock", "README.md"] {
        std::fs::copy(root.join(item), checkout.path().join(item)).unwrap();
    }
    for dir in ["src", "crates", "sql", "config", "benches"] {
        copy_tree(&root.join(dir), &checkout.path().join(dir));
    }

    let port = free_port();
    let mut server = ChildGuard(
        Command::new("sh")
            // `exec`: the shell becomes cargo, and `cargo run` in turn becomes segmint,
            // so the child is the server itself and SIGTERM reaches it directly.
            .args(["-c", &format!("exec {command}")])
            .current_dir(checkout.path())
            // Shares the build cache so that only segmint itself is compiled again.
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
