//! The server's per-biz issuance path (the generator's double buffer, no HTTP) against
//! a bare `AtomicU64` in the same groups:
//!
//! ```sh
//! cargo bench --bench server
//! ```
//!
//! The generator runs on an embedded database with segments of ten million IDs, so
//! what is measured is issuing from memory; the fetches happen in the background.
//! Like the server, each call returns a fresh `Vec` of IDs; the baselines do too.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use segmint::biz::BizTag;
use segmint::config::Config;
use segmint::generator::Generator;
use segmint::store::Store;

const STEP: i64 = 10_000_000;

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let toml = format!(
        "[[databases]]\nname = \"local\"\nurl = \"sqlite://{}\"\n",
        dir.path().join("bench.db").display()
    );
    let config = Config::from_toml(&toml).expect("bench configuration");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let biz = BizTag::parse("bench").expect("biz name");
    let generator = rt.block_on(async {
        let store = Arc::new(Store::connect(&config).expect("embedded store"));
        store.add_biz(&biz, STEP, 1, None).await.expect("biz");
        store.refresh_since(std::time::Instant::now()).await;
        let generator = Generator::new(store, 20, Duration::from_secs(5));
        generator.next_ids(&biz, 1).await.expect("first segment");
        generator
    });
    let counter = AtomicU64::new(0);

    let mut single = c.benchmark_group("issue_one");
    single.throughput(Throughput::Elements(1));
    single.bench_function("atomic_fetch_add_into_vec", |b| {
        b.iter(|| black_box(vec![counter.fetch_add(1, Ordering::AcqRel)]))
    });
    single.bench_function("generator_next_ids_1", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(generator.next_ids(&biz, 1).await.ok()) })
    });
    single.finish();

    let mut batch = c.benchmark_group("issue_1000");
    batch.throughput(Throughput::Elements(1000));
    batch.bench_function("atomic_fetch_add_1000_into_vec", |b| {
        b.iter(|| {
            let first = counter.fetch_add(1000, Ordering::AcqRel);
            black_box((first..first + 1000).collect::<Vec<u64>>())
        })
    });
    batch.bench_function("generator_next_ids_1000", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(generator.next_ids(&biz, 1000).await.ok()) })
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
criterion_main!(benches);
