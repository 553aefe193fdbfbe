//! The client's local issuance against a bare `AtomicU64::fetch_add`, measured in the
//! same groups so the ratio is read off one run:
//!
//! ```sh
//! cargo bench --bench client
//! ```
//!
//! A segmint server runs in this process on an embedded database with segments of ten
//! million IDs, so the measured path is the cached one (a fetch every ten million IDs,
//! in the background). Then the sustained run ([`sustained`]): a real server process,
//! a biz at the default step 1000, and a client that sizes its own segments.
//!
//! Every routine returns a plain integer (`unwrap_or(-1)` on the client's `Result`):
//! criterion reads the returned value back through a volatile load per word, which
//! for a 40-byte `Result` would cost more than the `fetch_add` being compared.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group};
use segmint::client::blocking::{BlockingBiz, BlockingClient};

mod common;
mod sustained;
use common::{bench_app, embedded_config, on_threads};

/// A server in a runtime of its own, a client of it, and the handle of biz `bench`.
struct Fixture {
    biz: BlockingBiz,
    _client: BlockingClient,
    _server: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = embedded_config(dir.path(), "bind = \"127.0.0.1:0\"\nworkers = 1");
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("server runtime");
    let (port, token) = server.block_on(async {
        let (app, token) = bench_app(config).await;
        let port = app.port();
        tokio::spawn(app.run_until(std::future::pending()));
        (port, token)
    });
    let client = BlockingClient::builder()
        .servers([format!("http://127.0.0.1:{port}")])
        .token(token)
        .build()
        .expect("client");
    let biz = client.biz("bench").expect("biz handle");
    biz.next_id().expect("first segment");
    Fixture {
        biz,
        _client: client,
        _server: server,
        _dir: dir,
    }
}

fn bench(c: &mut Criterion) {
    let f = fixture();
    let counter = Arc::new(AtomicU64::new(0));

    let mut single = c.benchmark_group("single_thread");
    single.throughput(Throughput::Elements(1));
    single.bench_function("atomic_fetch_add", |b| {
        b.iter(|| counter.fetch_add(1, Ordering::AcqRel))
    });
    single.bench_function("client_next_id", |b| {
        b.iter(|| f.biz.next_id().unwrap_or(-1))
    });
    let chain = segmint::segment::Chain::new();
    chain.advance(
        0,
        &segmint::segment::SegmentRange::after(0, 1 << 30, segmint::segment::Residue::ALL).unwrap(),
        20,
    );
    single.bench_function("chain_next", |b| b.iter(|| chain.next().unwrap_or(-1)));
    single.finish();

    let mut two = c.benchmark_group("two_threads");
    two.throughput(Throughput::Elements(1));
    two.bench_function("atomic_fetch_add", |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, |n| {
                for _ in 0..n {
                    black_box(counter.fetch_add(1, Ordering::AcqRel));
                }
            })
        })
    });
    two.bench_function("client_next_id", |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, |n| {
                for _ in 0..n {
                    let _ = black_box(f.biz.next_id());
                }
            })
        })
    });
    two.finish();

    let mut batch = c.benchmark_group("batch_1000");
    batch.throughput(Throughput::Elements(1000));
    batch.bench_function("atomic_fetch_add_1000_into_vec", |b| {
        b.iter(|| {
            let first = counter.fetch_add(1000, Ordering::AcqRel);
            black_box((first..first + 1000).collect::<Vec<u64>>())
        })
    });
    batch.bench_function("client_next_ids_1000", |b| {
        b.iter(|| black_box(f.biz.next_ids(1000)))
    });
    batch.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
/// criterion's groups, then the sustained run unless a name filter excludes it.
fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if filters.is_empty() || filters.iter().any(|f| "sustained".contains(f.as_str())) {
        sustained::run();
    }
}
