//! A page of `/v1/bizs` and `/status` at a million bizs, chosen from the sorted name
//! index in memory (no HTTP, no database), and the index's own rebuild:
//!
//! ```sh
//! cargo bench --bench listing
//! ```
//!
//! 10,000 of the million bizs are in use, with rates and runways; `by_rate` and
//! `by_runway` pick their page from those (every biz in use is looked at once), the
//! others walk the index from a binary search. `q` scans every name. The rebuild
//! sorts a million names given in no order, as the catalog holds them.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use segmint::listing::{DEFAULT_LIMIT, NameIndex, Query, Sort, select};
use segmint::metrics::BizStats;

const BIZS: usize = 1_000_000;
const IN_USE: usize = 10_000;

fn query(sort: Sort, q: Option<&str>) -> Query {
    Query {
        limit: DEFAULT_LIMIT,
        sort,
        after: None,
        q: q.map(str::to_owned),
    }
}

fn bench(c: &mut Criterion) {
    // In no order, as the catalog's map holds them.
    let names: Vec<String> = (0..BIZS)
        .map(|i| format!("tenant-{:07}", (i * 7919) % BIZS))
        .collect();
    let index = NameIndex::new(1, names.iter().map(String::as_str));
    // Every hundredth biz in use, at rates and runways in no order of their names.
    let in_use: Vec<BizStats> = (0..IN_USE)
        .map(|i| {
            let spread = ((i * 7919) % IN_USE) as f64;
            BizStats {
                rate: spread,
                runway_seconds: Some(1.0 + spread * 3.0),
                ..BizStats::idle(&names[i * (BIZS / IN_USE)])
            }
        })
        .collect();

    let mut group = c.benchmark_group("first_page_of_a_million_bizs");
    group.sample_size(20);
    group.bench_function("by_name", |b| {
        let q = query(Sort::Name, None);
        b.iter(|| black_box(select(&index, &q, Vec::new)))
    });
    let middle = select(&index, &query(Sort::Name, Some("tenant-05")), Vec::new);
    group.bench_function("by_name_after_a_cursor", |b| {
        let mut q = query(Sort::Name, None);
        q.after = middle.next.clone();
        b.iter(|| black_box(select(&index, &q, Vec::new)))
    });
    group.bench_function("by_name_matching_q", |b| {
        let q = query(Sort::Name, Some("tenant-09999"));
        b.iter(|| black_box(select(&index, &q, Vec::new)))
    });
    // The figures are copied as the server copies them from the cache per request.
    group.bench_function("by_rate", |b| {
        let q = query(Sort::Rate, None);
        b.iter(|| black_box(select(&index, &q, || in_use.clone())))
    });
    group.bench_function("by_runway", |b| {
        let q = query(Sort::Runway, None);
        b.iter(|| black_box(select(&index, &q, || in_use.clone())))
    });
    group.bench_function("rebuild_the_index", |b| {
        b.iter(|| black_box(NameIndex::new(2, names.iter().map(String::as_str))))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
