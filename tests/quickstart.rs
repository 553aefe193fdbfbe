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

/// The arguments the quick start gives segmint: what follows `--` in `cargo run
/// [--release] -- ARGS`. Anything else is refused, so that running the tests' own build
/// of segmint with these arguments is running the README's command.
fn segmint_args(command: &str) -> Vec<String> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let dashes = words
        .iter()
        .position(|w| *w == "--")
        .unwrap_or_else(|| panic!("the quick start is `cargo run … -- ARGS`: {command:?}"));
    let cargo = &words[..dashes];
    assert!(
        cargo == ["cargo", "run", "--release"] || cargo == ["cargo", "run"],
        "the quick start runs segmint through `cargo run`: {command:?}"
    );
    let args: Vec<String> = words[dashes + 1..].iter().map(|w| w.to_string()).collect();
    assert!(
        args.iter()
            .all(|a| !a.contains(['$', '\'', '"', '`', '|', '&', ';'])),
        "the quick start's arguments are plain words: {command:?}"
    );
    args
}

#[test]
fn the_quick_start_command_is_cargo_run_with_plain_arguments() {
    assert_eq!(segmint_args("cargo run --release -- serve"), ["serve"]);
    assert_eq!(
        segmint_args("cargo run -- serve --config x"),
        ["serve", "--config", "x"]
    );
    for bad in [
        "cargo build --release",
        "cargo run --release serve",
        "sh -c x -- serve",
    ] {
        let refused = std::panic::catch_unwind(|| segmint_args(bad));
        assert!(refused.is_err(), "{bad:?} is not a quick start");
    }
}

/// The README's quick start in a fresh checkout: its arguments given to the segmint
/// these tests built (the ordinary run), or the command itself run by a shell, its
/// release build included (`TEST_DEEP=1`, from `scripts/test --deep`: minutes of one
/// core).
#[test]
fn readme_quick_start_serves_ids_on_a_fresh_checkout() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let command = quick_start_command(&std::fs::read_to_string(root.join("README.md")).unwrap());
    let args = segmint_args(&command);
    // The command runs where a fresh clone's root would have it run from: a directory
    // with the clone's `config/` and no `data/`. It is an empty directory inside this
    // repository (cargo finds the workspace above it), so that the deep run's release
    // build is this repository's own, which `scripts/bench` uses next rather than
    // building it again: a copy of the sources elsewhere is another workspace to cargo,
    // built a second time.
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
    let mut quick_start = if deep() {
        let mut shell = Command::new("sh");
        // `exec`: the shell becomes cargo, and `cargo run` in turn becomes segmint,
        // so the child is the server itself and SIGTERM reaches it directly.
        shell.args(["-c", &format!("exec {command}")]);
        shell
    } else {
        let mut segmint = Command::new(segmint_bin());
        segmint.args(&args);
        segmint
    };
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
    if deep() {
        // This repository's build directory, as cargo would choose it here.
        quick_start.env("CARGO_TARGET_DIR", root.join("target"));
    }
    let mut server = ChildGuard(
        quick_start
            .current_dir(checkout.path())
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
    // The bound catches a quick start that hangs, not a slow one: the deep run's
    // release build competes with the whole test suite for the cores, so it is left far
    // above the minutes that takes.
    let bound = Duration::from_secs(if deep() { 1800 } else { 60 });
    while curls.len() < 2 {
        let line = rx
            .recv_timeout(bound)
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
