//! What a store holds a biz at rest, counted by the allocator: its own test binary, so
//! that a global allocator counting every live byte counts this test's alone.
//!
//! Two PostgreSQL databases hold 100,000 bizs with a token each and the witnesses of
//! the other's rows, as `scripts/scale` builds them. A store reads them (its first
//! refresh, then one that looks for lacking witnesses), and the bytes it holds are
//! compared with a bound per biz. `scripts/scale` measures the resident memory of the
//! real server at a million.

#[path = "../common/mod.rs"]
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use segmint::store::Store;

/// The system's allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

fn bytes(layout: Layout) -> isize {
    isize::try_from(layout.size()).unwrap_or(isize::MAX)
}

// SAFETY: every call is passed on to `System` unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(bytes(layout), Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(bytes(layout), Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(bytes(layout), Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let grown = isize::try_from(new_size).unwrap_or(isize::MAX) - bytes(layout);
        LIVE.fetch_add(grown, Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const BIZS: usize = 100_000;

/// The heap a store may hold per biz at rest, in bytes: 736 here once names were held
/// once and the catalog's structures made compact (1,300 before), with a margin.
const MAX_BYTES_PER_BIZ: isize = 800;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_at_rest_holds_less_than_a_kilobyte_a_biz() {
    let dbs = Databases::start(Kind::Postgres, 2);
    let config = dbs.config("");
    {
        let store = Store::connect(&config).unwrap();
        for (db, migrated) in store.cluster().migrate().await.results() {
            migrated.unwrap_or_else(|e| panic!("migrating {db}: {e}"));
        }
    }
    for (i, other) in [(0, "pg1"), (1, "pg0")] {
        dbs.sql(
            i,
            &format!(
                "INSERT INTO tiny_id_info (biz_type, begin_id, max_id, step, delta, remainder) \
                   SELECT 'biz-' || n, 0, 0, 1000, 2, {i} FROM generate_series(1, {BIZS}) AS n; \
                 INSERT INTO tiny_id_token (token, biz_type, remark) \
                   SELECT encode(sha256(convert_to('tok-' || n, 'UTF8')), 'hex'), 'biz-' || n, 'memory' \
                   FROM generate_series(1, {BIZS}) AS n; \
                 INSERT INTO segmint_witness (database, biz_type, version, max_id, high_id) \
                   SELECT '{other}', 'biz-' || n, 0, 0, 0 FROM generate_series(1, {BIZS}) AS n"
            ),
        );
    }

    let before = LIVE.load(Ordering::Relaxed);
    let store = Store::connect(&config).unwrap();
    let catalog = store.first_refresh().await;
    assert_eq!(catalog.biz_count(), BIZS, "every biz in the catalog");
    // The next refresh looks for the witnesses the databases lack (none: every one
    // was written above), which the first leaves to it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    store.refresh_since(Instant::now()).await;
    let held = LIVE.load(Ordering::Relaxed) - before;
    let per_biz = held / isize::try_from(BIZS).unwrap();
    println!("held {held} bytes: {per_biz} a biz");
    assert!(
        per_biz <= MAX_BYTES_PER_BIZ,
        "a store at rest holds {per_biz} bytes a biz, above {MAX_BYTES_PER_BIZ}"
    );
    drop(catalog);
    drop(store);
}
