//! The sustained run: a real `segmint serve` process (embedded store in a temporary
//! directory, started as the quick start does: biz `test` at step 1000, its token
//! printed on stdout), and a client of it calling `next_id().await` flat out from 1
//! and from 2 threads, each with a fresh client, so that segments start at the row's
//! step and grow as the client sizes them. Reported: IDs/s overall and after the first
//! second, the ratio to `AtomicU64::fetch_add` measured the same way in the same run,
//! and the client's fetches, waits and final step.
//!
//! `SEGMINT_BENCH_SUSTAINED_SECS` sets the length of each client run (10 s; 1.5 s in
//! criterion's test mode: `cargo test`, as `scripts/test` runs the benches once, or
//! `--test`).

use std::cell::Cell;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use segmint::client::Client;

/// How often a measuring thread reads the clock: rarely enough to cost nothing.
const CHECK_EVERY: u64 = 1024;

/// The server process, killed when dropped.
struct Server {
    child: Child,
    _dir: tempfile::TempDir,
    base: String,
    token: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `segmint serve` on a fresh embedded store on a free port; its base URL and the
/// token of biz `test` from the first start's output.
fn start_server() -> Server {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = dir.path().join("segmint.toml");
    std::fs::write(
        &config,
        format!(
            "bind = \"127.0.0.1:0\"\n[[databases]]\nname = \"local\"\nurl = \"sqlite://{}\"\n",
            dir.path().join("data/segmint.db").display()
        ),
    )
    .expect("write the configuration");
    let mut child = Command::new(env!("CARGO_BIN_EXE_segmint"))
        .arg("--config")
        .arg(&config)
        .arg("serve")
        .env("RUST_LOG", "warn")
        .env_remove("SEGMINT_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start segmint serve");
    let stdout = child.stdout.take().expect("piped stdout");
    // The first start prints `curl -H 'Authorization: Bearer TOKEN' 'BASE/v1/ids/…'`.
    let line = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains("Bearer "))
        .expect("segmint printed no token: did the first start fail?");
    let mut parts = line.split('\'');
    let header = parts.nth(1).expect("header in the curl line");
    let url = parts.nth(1).expect("URL in the curl line");
    let token = header.rsplit(' ').next().expect("token").to_string();
    let base = url.split("/v1/").next().expect("base URL").to_string();
    Server {
        child,
        _dir: dir,
        base,
        token,
    }
}

/// IDs counted by `threads` threads running `op` for `length`: the total, and the
/// count after the first second.
fn measure(threads: usize, length: Duration, op: impl Fn(&dyn Fn() -> bool) + Sync) -> (u64, u64) {
    let (total, after_first) = (AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let start = Instant::now();
                let (n, at_one) = (Cell::new(0u64), Cell::new(None));
                // Counts the blocks of CHECK_EVERY started, each after a look at the clock.
                op(&|| {
                    let elapsed = start.elapsed();
                    if at_one.get().is_none() && elapsed >= Duration::from_secs(1) {
                        at_one.set(Some(n.get()));
                    }
                    let go = elapsed < length;
                    if go {
                        n.set(n.get() + CHECK_EVERY);
                    }
                    go
                });
                let n = n.get();
                total.fetch_add(n, Ordering::Relaxed);
                after_first.fetch_add(n - at_one.get().unwrap_or(n), Ordering::Relaxed);
            });
        }
    });
    (total.into_inner(), after_first.into_inner())
}

/// IDs/s overall and after the first second.
fn rates((total, after): (u64, u64), length: Duration) -> (f64, f64) {
    let rest = length.saturating_sub(Duration::from_secs(1)).as_secs_f64();
    (
        total as f64 / length.as_secs_f64(),
        if rest > 0.0 {
            after as f64 / rest
        } else {
            f64::NAN
        },
    )
}

fn length() -> Duration {
    // Criterion's own rule: `cargo bench` passes `--bench`; `cargo test` passes nothing
    // (each routine once), and `--test` asks for that under `cargo bench` too.
    let args: Vec<String> = std::env::args().collect();
    let test_mode = args.iter().any(|a| a == "--test") || !args.iter().any(|a| a == "--bench");
    let secs = std::env::var("SEGMINT_BENCH_SUSTAINED_SECS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(if test_mode { 1.5 } else { 10.0 });
    Duration::from_secs_f64(secs)
}

/// Runs and prints the sustained comparison.
pub fn run() {
    let length = length();
    let server = start_server();
    println!(
        "sustained: `segmint serve` (embedded store, biz `test`, step 1000) at {}, {length:?} per run",
        server.base
    );
    for threads in [1, 2] {
        let counter = AtomicU64::new(0);
        let atomic = rates(
            measure(threads, length, |go| {
                while go() {
                    for _ in 0..CHECK_EVERY {
                        std::hint::black_box(counter.fetch_add(1, Ordering::AcqRel));
                    }
                }
            }),
            length,
        );
        // The client's fetches run on a runtime of their own; each measuring thread
        // awaits `next_id()` on a current-thread runtime.
        let fetches = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("client runtime");
        let client = fetches.block_on(async {
            Client::builder()
                .servers([server.base.clone()])
                .token(server.token.clone())
                .build()
                .expect("client")
        });
        let biz = client.biz("test").expect("biz handle");
        let counted = measure(threads, length, |go| {
            let local = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("thread runtime");
            local.block_on(async {
                while go() {
                    for _ in 0..CHECK_EVERY {
                        std::hint::black_box(biz.next_id().await.expect("an ID"));
                    }
                }
            });
        });
        let client_rates = rates(counted, length);
        let stats = biz.stats();
        let closed = fetches.block_on(client.close());
        println!(
            "sustained/{threads}_thread(s): client {:.1} M IDs/s overall, {:.1} M/s after the first second; \
             atomic {:.1} M/s; client/atomic {:.0} % overall, {:.0} % after the first second; \
             {} fetches, {} waits, final step {}; close gave back {} IDs",
            client_rates.0 / 1e6,
            client_rates.1 / 1e6,
            atomic.1 / 1e6,
            100.0 * client_rates.0 / atomic.1,
            100.0 * client_rates.1 / atomic.1,
            stats.fetches,
            stats.waits,
            stats.last_step.unwrap_or(0),
            closed.given_back,
        );
    }
}
