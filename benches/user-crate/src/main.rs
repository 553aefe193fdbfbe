//! The client library measured from a user's crate: a real `segmint serve` (the
//! binary given as the first argument, on a fresh embedded store in a new directory,
//! biz `test` of the first start), one client, and on one thread, for `SECS` seconds
//! each (the second argument, default 10) after a second of warm-up, taking turns a second
//! at a time: `AtomicU64::fetch_add`, `try_next_id()` (awaiting `next_id()` when the
//! cache is empty) and `next_id().await`. Prints one JSON object:
//! each run's IDs per second and its ratio to `fetch_add`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How many IDs a run takes between two looks at the clock.
const BLOCK: u64 = 4096;

/// `segmint serve` on a fresh embedded store: the process, its directory, base URL and
/// the token the first start prints.
fn serve(bin: &str) -> (Child, tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = dir.path().join("segmint.toml");
    std::fs::write(
        &config,
        format!(
            "bind = \"127.0.0.1:0\"\n[[databases]]\nname = \"local\"\nurl = \"sqlite://{}\"\n",
            dir.path().join("data/segmint.db").display()
        ),
    )
    .expect("the configuration");
    let mut command = Command::new(bin);
    // The server reads `SEGMINT_*` variables as settings: none of the caller's.
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("SEGMINT_")) {
        command.env_remove(key);
    }
    let mut child = command
        .arg("--config")
        .arg(&config)
        .arg("serve")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("segmint serve starts");
    let stdout = child.stdout.take().expect("its output");
    // The first start prints `curl -H 'Authorization: Bearer TOKEN' 'BASE/v1/ids/…'`.
    let line = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains("Bearer "))
        .expect("a token from the first start");
    let mut parts = line.split('\'');
    let token = parts
        .nth(1)
        .and_then(|h| h.rsplit(' ').next())
        .expect("token");
    let base = parts
        .nth(1)
        .and_then(|u| u.split("/v1/").next())
        .expect("base URL");
    (child, dir, base.to_owned(), token.to_owned())
}

/// IDs per second of `$step` (an expression giving an `i64`, awaited inside if it
/// needs to be), written out in a loop of its own as a user's code would be, in blocks
/// of [`BLOCK`] between two looks at the clock for `$length`.
macro_rules! rate {
    ($length:expr, $step:expr) => {{
        let start = Instant::now();
        let (mut n, mut sink) = (0u64, 0i64);
        while start.elapsed() < $length {
            for _ in 0..BLOCK {
                sink ^= $step;
            }
            n += BLOCK;
        }
        std::hint::black_box(sink);
        n as f64 / start.elapsed().as_secs_f64()
    }};
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bin = args
        .get(1)
        .expect("usage: segmint-client-user SEGMINT_BINARY [SECS]");
    let secs: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let length = Duration::from_secs_f64(secs);
    let (mut server, _dir, base, token) = serve(bin);
    let client = segmint_client::Client::builder()
        .servers([base])
        .token(token)
        .build()
        .expect("a client");
    let biz = client.biz("test").expect("biz test");
    // Warm-up: segments grow from the row's step to what lasts at this rate.
    let _ = rate!(Duration::from_secs(1), biz.next_id().await.unwrap_or(-1));
    // The three runs take turns, a second at a time, so that the machine's other load
    // and its clock speed weigh on each alike; each figure is its total over `secs`.
    let counter = AtomicU64::new(0);
    let (mut atomic, mut try_next, mut next) = (0.0, 0.0, 0.0);
    let rounds = secs.ceil().max(1.0);
    let turn = length.div_f64(rounds);
    for _ in 0..rounds as u32 {
        atomic += rate!(turn, counter.fetch_add(1, Ordering::Relaxed) as i64) / rounds;
        try_next += rate!(
            turn,
            match biz.try_next_id() {
                Some(id) => id,
                None => biz.next_id().await.unwrap_or(-1),
            }
        ) / rounds;
        next += rate!(turn, biz.next_id().await.unwrap_or(-1)) / rounds;
    }
    client.close().await;
    let _ = server.kill();
    let _ = server.wait();
    println!(
        "{{\"secs\": {secs}, \"fetch_add\": {atomic:.0}, \"try_next_id\": {try_next:.0}, \"next_id_await\": {next:.0}, \"try_next_id_ratio\": {:.3}, \"next_id_await_ratio\": {:.3}}}",
        try_next / atomic,
        next / atomic
    );
}
