//! What the benches share: a scratch embedded database with the biz `bench`.
//! Each bench uses part of it.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use segmint::biz::BizTag;
use segmint::config::Config;
use segmint::server::Application;
use segmint::store::Store;

/// Segments of ten million IDs: what is measured is issuing from memory; a fetch
/// happens every ten million IDs, in the background.
pub const STEP: i64 = 10_000_000;

/// A configuration with the top-level keys `keys` and one embedded database in `dir`.
pub fn embedded_config(dir: &Path, keys: &str) -> Config {
    let toml = format!(
        "{keys}\n[[databases]]\nname = \"local\"\nurl = \"sqlite://{}\"\n",
        dir.join("bench.db").display()
    );
    Config::from_toml(&toml).expect("bench configuration")
}

/// Creates the biz `bench` (step [`STEP`]) and a token for it; returns both.
pub async fn bench_biz(store: &Store) -> (BizTag, String) {
    let biz = BizTag::parse("bench").expect("biz name");
    store
        .cluster()
        .add_biz(&biz, STEP, 1, None)
        .await
        .expect("biz");
    let token = store.add_token(&biz, "bench").await.expect("token").0;
    (biz, token)
}

/// A server application with the biz `bench` on a loopback port, not yet running; and
/// the token of the biz.
pub async fn bench_app(config: Config) -> (Application, String) {
    let store = Store::connect(&config).expect("embedded store");
    let (_, token) = bench_biz(&store).await;
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let app = Application::with_listener(config, listener)
        .await
        .expect("server");
    (app, token)
}

/// Runs `op(iters / threads)` on each of `threads` threads at once; the wall time of all.
pub fn on_threads(threads: u64, iters: u64, op: impl Fn(u64) + Sync) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| op(iters / threads));
        }
    });
    start.elapsed()
}
