//! The server's per-biz issuance path (the cache's double buffer, no HTTP) against
//! a bare `AtomicU64` in the same groups, and the whole handling of a request in
//! process (routing, parameters, token check, issuance, response; no socket) against
//! the constant `/healthz`, and snowflake IDs from one worker ID's generator against
//! the same `AtomicU64`:
//!
//! ```sh
//! cargo bench --bench server
//! ```
//!
//! The cache runs on an embedded database with segments of ten million IDs, so
//! what is measured is issuing from memory; the fetches happen in the background.
//! Like the server, each call returns a fresh `Vec` of IDs; the baselines do too.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::AcqRel;
use std::time::Duration;

use actix_web::App;
use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::test::{TestRequest, call_service, init_service};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use segmint::cache::Cache;
use segmint::segment::Residue;
use segmint::shape::{Base, BizShape, Format, IdOrder, Ordering, Periodic, Reset};
use segmint::snowflake::{Generator, LEAF_EPOCH_MS, Layout, SystemClock, SystemPause};
use segmint::store::Store;

mod common;
use common::{bench_app, bench_biz, embedded_config, on_threads};

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = embedded_config(dir.path(), "");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let (biz, cache) = rt.block_on(async {
        let store = Arc::new(Store::connect(&config).expect("embedded store"));
        let (biz, _) = bench_biz(&store).await;
        store.refresh_since(std::time::Instant::now()).await;
        let cache = Cache::new(store, 20, Duration::from_secs(5));
        cache.next_ids(&biz, 1).await.expect("first segment");
        (biz, cache)
    });
    let counter = AtomicU64::new(0);

    let mut single = c.benchmark_group("issue_one");
    single.throughput(Throughput::Elements(1));
    single.bench_function("atomic_fetch_add_into_vec", |b| {
        b.iter(|| black_box(vec![counter.fetch_add(1, AcqRel)]))
    });
    single.bench_function("cache_next_ids_1", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(cache.next_ids(&biz, 1).await.ok()) })
    });
    single.finish();

    // Both HTTP workers issue from the same biz: what they share is written by both.
    let mut two = c.benchmark_group("issue_one_two_threads");
    two.throughput(Throughput::Elements(1));
    two.bench_function("atomic_fetch_add_into_vec", |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, |n| {
                for _ in 0..n {
                    black_box(vec![counter.fetch_add(1, AcqRel)]);
                }
            })
        })
    });
    two.bench_function("cache_next_ids_1", |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, |n| {
                rt.handle().block_on(async {
                    for _ in 0..n {
                        black_box(cache.next_ids(&biz, 1).await.ok());
                    }
                })
            })
        })
    });
    two.finish();

    let mut batch = c.benchmark_group("issue_1000");
    batch.throughput(Throughput::Elements(1000));
    batch.bench_function("atomic_fetch_add_1000_into_vec", |b| {
        b.iter(|| {
            let first = counter.fetch_add(1000, AcqRel);
            black_box((first..first + 1000).collect::<Vec<u64>>())
        })
    });
    batch.bench_function("cache_next_ids_1000", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(cache.next_ids(&biz, 1000).await.ok()) })
    });
    batch.finish();

    // The same issuance with each order applied, as the server applies it after
    // taking IDs from the cache (the sequential order is the plain path): one ID per
    // call, as most requests ask, and 1000.
    for n in [1usize, 1000] {
        let mut ordered = c.benchmark_group(format!("issue_{n}_ordered"));
        ordered.throughput(Throughput::Elements(n as u64));
        for (name, order) in [
            ("sequential", IdOrder::Sequential),
            ("shuffled", IdOrder::Shuffled { block: 1_000_000 }),
            (
                "opaque_i63",
                IdOrder::Opaque {
                    domain: i64::MAX as u64,
                },
            ),
            ("opaque_js", IdOrder::Opaque { domain: 1 << 53 }),
        ] {
            let shape = BizShape {
                ordering: Ordering::new(
                    order,
                    0x5eed_0000_0000_0000_1234_5678_9abc_def0,
                    Residue::ALL,
                ),
                format: Format::default(),
                as_string: false,
                period: None,
                sequence: None,
            };
            ordered.bench_function(name, |b| {
                b.to_async(&rt).iter(|| async {
                    let mut ids = cache.next_ids(&biz, n).await.unwrap_or_default();
                    black_box(shape.order_ids(&mut ids).ok());
                    black_box(ids)
                })
            });
        }
        ordered.finish();
    }
}

/// Writing one ID: the plain decimal string the v1 API writes for `?as=string`, against
/// a prefix with zero padding, base 62, and a check character.
fn formats(c: &mut Criterion) {
    let mut group = c.benchmark_group("format_one");
    group.throughput(Throughput::Elements(1));
    let id = 108_678_123_i64;
    group.bench_function("to_string", |b| {
        b.iter(|| black_box(black_box(id).to_string()))
    });
    for (name, format) in [
        ("prefix_width_12", Format::new("sms_", 12, Base::Ten, false)),
        ("base62", Format::new("", 0, Base::SixtyTwo, false)),
        ("base10_damm", Format::new("", 12, Base::Ten, true)),
        ("base36_luhn", Format::new("o-", 8, Base::ThirtySix, true)),
    ] {
        let format = format.expect("a valid format");
        group.bench_function(name, |b| {
            b.iter(|| black_box(format.encode(black_box(id)).ok()))
        });
    }
    // A counter that restarts each day: the period of the clock's reading in the biz's
    // zone (what every request of such a biz computes), and the ID written with its
    // date.
    let daily = Format::with_pattern("ORD{yyyy}{MM}{dd}{seq:06}", Base::Ten, false)
        .expect("a valid pattern");
    let period = Periodic::new(Reset::Daily, "Asia/Shanghai", 1_000_000, 1).expect("a zone");
    let now_ms = 1_795_622_400_123_i64;
    group.bench_function("period_of_now_shanghai", |b| {
        b.iter(|| black_box(period.code_at(black_box(now_ms))))
    });
    let id = 20_261_125_000_123_i64;
    group.bench_function("daily_pattern", |b| {
        b.iter(|| black_box(daily.encode(black_box(id)).ok()))
    });
    group.finish();
}

/// Snowflake IDs in process: one worker ID's generator behind a mutex, as a server
/// shares it, against `fetch_add`. The layout caps a worker ID at 4096 IDs per
/// millisecond: past that rate the generator spins for the next millisecond, so this
/// measures the cap as much as the arithmetic.
fn snowflake(c: &mut Criterion) {
    let counter = AtomicU64::new(0);
    let generator = parking_lot::Mutex::new(
        Generator::new(SystemClock, LEAF_EPOCH_MS, Layout::LEAF, 1, i64::MIN).expect("worker ID 1"),
    );
    let mut pause = SystemPause::default();
    let mut group = c.benchmark_group("snowflake_one");
    group.throughput(Throughput::Elements(1));
    group.bench_function("atomic_fetch_add", |b| {
        b.iter(|| black_box(counter.fetch_add(1, AcqRel)))
    });
    group.bench_function("generator_next_id", |b| {
        b.iter(|| black_box(generator.lock().next_id(&mut pause).ok()))
    });
    group.finish();
}

/// Sends `req` to `service`; the length of the answer's body, which must be a
/// non-empty 2xx (the Tinyid `Simple` routes answer errors with 200 and no body).
async fn respond<S, R, B>(service: &S, req: R) -> usize
where
    S: Service<R, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let response = call_service(service, req).await;
    let status = response.status();
    let len = actix_web::body::to_bytes(response.into_body())
        .await
        .map_or(0, |b| b.len());
    assert!(status.is_success() && len > 0, "{status}, {len} bytes");
    black_box(len)
}

/// One request through the routes every worker serves, from an `HttpRequest` to the
/// bytes of the answer, on an actix system in this thread: what a worker does per
/// request apart from reading and writing the socket.
fn requests(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = embedded_config(dir.path(), "bind = \"127.0.0.1:0\"");
    let system = actix_web::rt::System::new();
    let (app, service, token) = system.block_on(async {
        let (app, token) = bench_app(config).await;
        let routes = app.routes();
        let service = init_service(App::new().configure(|cfg| routes.configure(cfg))).await;
        (app, service, token)
    });
    let simple = format!("/tinyid/id/nextIdSimple?bizType=bench&token={token}");
    let bearer = format!("Bearer {token}");

    let mut group = c.benchmark_group("request");
    group.throughput(Throughput::Elements(1));
    group.bench_function("healthz", |b| {
        b.iter(|| {
            system.block_on(respond(
                &service,
                TestRequest::get().uri("/healthz").to_request(),
            ))
        })
    });
    group.bench_function("tinyid_next_id_simple", |b| {
        b.iter(|| {
            system.block_on(respond(
                &service,
                TestRequest::get().uri(&simple).to_request(),
            ))
        })
    });
    group.bench_function("v1_ids", |b| {
        b.iter(|| {
            system.block_on(respond(
                &service,
                TestRequest::get()
                    .uri("/v1/ids/bench")
                    .insert_header(("Authorization", bearer.as_str()))
                    .to_request(),
            ))
        })
    });
    group.finish();
    drop(app);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench, formats, snowflake, requests
}
criterion_main!(benches);
