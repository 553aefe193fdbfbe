//! Timing logic against the in-memory store, without PostgreSQL: the fetch guard, the
//! wait timeout, retried lost races, the contention deadline, hedging and back-off,
//! each under paused tokio time (the store reads the runtime's clock), so that counts
//! and times are exact and no test waits in real time.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::memory::{self, Injected, MemoryStore};
use segmint::biz::BizTag;
use segmint::cache::Cache;
use segmint::segment::Residue;
use segmint::store::{Store, StoreError, Timing};

const BIZ: &str = "order";

/// Timeouts long enough never to fire unless a test means them to; hedging off.
fn timing() -> Timing {
    Timing {
        fetch_timeout: Duration::from_secs(30),
        backoff_initial: Duration::from_secs(1),
        backoff_max: Duration::from_secs(1),
        hedge_after: None,
    }
}

fn biz() -> BizTag {
    BizTag::parse(BIZ).unwrap()
}

/// One database holding every ID of [`BIZ`], segments of 100.
fn one_db() -> MemoryStore {
    MemoryStore::with_biz(BIZ, 100, Residue::new(1, 0).unwrap())
}

/// Two databases sharing [`BIZ`]: even IDs on `db0`, odd ones on `db1`.
fn two_dbs() -> [MemoryStore; 2] {
    [0, 1].map(|r| MemoryStore::with_biz(BIZ, 100, Residue::new(2, r).unwrap()))
}

/// A store over `dbs` with its catalog read, so that the calls a test counts are
/// reservations only.
async fn ready_store(dbs: &[MemoryStore], timing: Timing) -> Arc<Store> {
    let store = memory::store(dbs, timing);
    let catalog = store
        .refresh_since(tokio::time::Instant::now().into_std())
        .await;
    assert!(catalog.biz(BIZ).is_some(), "the catalog lacks `{BIZ}`");
    store
}

/// An ID cache (preload at 20%) over one database whose every call from now on takes
/// `latency`.
async fn slow_cache(latency: Duration, wait_timeout: Duration) -> (MemoryStore, Cache) {
    let db = one_db();
    let store = ready_store(std::slice::from_ref(&db), timing()).await;
    db.set_latency(latency);
    (db, Cache::new(store, 20, wait_timeout))
}

#[tokio::test(start_paused = true)]
async fn concurrent_requests_on_an_empty_cache_share_one_fetch() {
    let (db, cache) = slow_cache(Duration::from_millis(50), Duration::from_secs(3)).await;
    let start = tokio::time::Instant::now();
    let biz = biz();
    let answers = futures_util::future::join_all((0..10).map(|_| cache.next_ids(&biz, 1))).await;
    // One read and one compare-and-set of 50 ms each, for all ten requests.
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    assert_eq!((db.calls("biz"), db.calls("write_row")), (1, 1));
    let mut ids: Vec<i64> = answers.into_iter().flat_map(Result::unwrap).collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=10).collect::<Vec<_>>());
    assert_eq!(db.row(BIZ).max_id, 100);
}

#[tokio::test(start_paused = true)]
async fn a_request_waiting_on_a_stalled_fetch_gives_up_after_the_wait_timeout() {
    let (db, cache) = slow_cache(Duration::from_secs(10), Duration::from_secs(1)).await;
    let start = tokio::time::Instant::now();
    let biz = biz();
    match cache.next_ids(&biz, 1).await {
        Err(StoreError::Unavailable(message)) => {
            assert!(message.contains("within 1s"), "{message}");
        }
        other => panic!("expected the wait timeout, got {other:?}"),
    }
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert_eq!((db.calls("biz"), db.calls("write_row")), (1, 0));
    // The fetch goes on in the background: once its read and compare-and-set have
    // answered, the next request is served from memory without waiting.
    tokio::time::sleep_until(start + Duration::from_secs(20)).await;
    assert_eq!(db.calls("write_row"), 1);
    assert_eq!(cache.next_ids(&biz, 1).await.unwrap(), [1]);
    assert_eq!(start.elapsed(), Duration::from_secs(20));
    assert_eq!(db.calls("write_row"), 1);
}

#[tokio::test(start_paused = true)]
async fn lost_races_are_retried_on_the_same_database_then_in_another_pass() {
    for (lost, advances, passes) in [(0, 1, 1), (2, 3, 1), (3, 4, 2), (7, 8, 3)] {
        let db = one_db();
        let store = ready_store(std::slice::from_ref(&db), timing()).await;
        db.lose_races(lost);
        let start = tokio::time::Instant::now();
        let r = store.reserve(&biz(), None, None).await.unwrap();
        assert_eq!(r.range.max_id(), 100, "{lost} races lost");
        assert_eq!(r.version, 1, "{lost} races lost");
        // Each compare-and-set follows a fresh read of the row.
        assert_eq!(
            (db.calls("biz"), db.calls("write_row")),
            (advances, advances),
            "{lost} races lost"
        );
        // Passes are 1 to 5 ms apart: three lost races end a pass.
        let paused = start.elapsed();
        let (least, most) = (passes - 1, 5 * (passes - 1));
        assert!(
            paused >= Duration::from_millis(least) && paused <= Duration::from_millis(most),
            "{lost} races lost: {paused:?} between passes"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_reservation_that_loses_every_race_ends_in_contention_at_the_fetch_timeout() {
    let dbs = two_dbs();
    let fetch_timeout = Duration::from_millis(200);
    let store = ready_store(
        &dbs,
        Timing {
            fetch_timeout,
            ..timing()
        },
    )
    .await;
    for db in &dbs {
        db.lose_races(u32::MAX);
    }
    let start = tokio::time::Instant::now();
    match store.reserve(&biz(), None, None).await {
        Err(StoreError::Contention(biz)) => assert_eq!(biz, BIZ),
        other => panic!("expected contention, got {other:?}"),
    }
    // Passes go on until the fetch timeout, then the pass under way finishes: its pause
    // between passes is at most 5 ms.
    let took = start.elapsed();
    assert!(
        took >= fetch_timeout && took <= fetch_timeout + Duration::from_millis(5),
        "gave up after {took:?}"
    );
    // Every pass tries both databases, three compare-and-sets each.
    let advances = dbs[0].calls("write_row");
    assert!(
        advances >= 3 && advances.is_multiple_of(3),
        "{advances} attempts"
    );
    for db in &dbs {
        assert_eq!(
            (db.calls("biz"), db.calls("write_row")),
            (advances, advances)
        );
        assert_eq!(db.row(BIZ).version, 0);
    }
    // Lost races are no failure: both databases are still in use.
    assert!(store.cluster().is_live(0) && store.cluster().is_live(1));
}

#[tokio::test(start_paused = true)]
async fn a_stalled_reservation_is_hedged_on_another_database_after_the_hedge_delay() {
    let hedge = Duration::from_millis(100);
    // The order of the databases is random: try until the stalled one comes first.
    for _ in 0..40 {
        let dbs = two_dbs();
        let store = ready_store(
            &dbs,
            Timing {
                fetch_timeout: Duration::from_secs(5),
                hedge_after: Some(hedge),
                ..timing()
            },
        )
        .await;
        dbs[0].set_latency(Duration::from_secs(10));
        let start = tokio::time::Instant::now();
        let r = store.reserve(&biz(), None, None).await.unwrap();
        let took = start.elapsed();
        assert_eq!(r.database, 1);
        assert_eq!(dbs[1].calls("write_row"), 1);
        if dbs[0].calls("biz") == 0 {
            continue;
        }
        // Hedged after the delay (checked every quarter of it), not before, and long
        // before the stall or the fetch timeout ends.
        assert!(
            took >= hedge && took <= hedge * 5 / 4,
            "the reservation took {took:?}"
        );
        assert_eq!(dbs[0].calls("write_row"), 0);
        // The stalled database is backed off.
        assert!(!store.cluster().is_live(0));
        assert!(store.cluster().status()[0].last_error.is_some());
        return;
    }
    panic!("the stalled database never came first");
}

/// A transaction that lost to another's (a serialization failure, a deadlock) is no
/// failure of its database: the reservation tries again at once, the database is not
/// backed off, and the attempt counts as a conflict, not an error.
#[tokio::test(start_paused = true)]
async fn a_transaction_lost_to_another_is_retried_without_backing_the_database_off() {
    let db = one_db();
    let store = ready_store(std::slice::from_ref(&db), timing()).await;
    for code in ["40001", "40P01"] {
        let before = db.calls("biz");
        db.fail_next(3, Some(Injected::Query(code)));
        let started = tokio::time::Instant::now();
        store.reserve(&biz(), None, None).await.unwrap();
        assert!(
            db.calls("biz") > before + 1,
            "{code}: the reservation was retried"
        );
        assert!(
            store.cluster().is_live(0),
            "{code}: the database is not backed off"
        );
        assert!(
            started.elapsed() < timing().backoff_initial,
            "{code}: no back-off was waited out ({:?})",
            started.elapsed()
        );
        assert!(store.cluster().status()[0].last_error.is_none(), "{code}");
    }
    let metrics = store
        .metrics()
        .render(&segmint::metrics::BizView::default(), &[]);
    assert!(
        metrics.contains("segmint_segment_fetches_total{database=\"db0\",outcome=\"error\"} 0"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("segmint_segment_fetches_total{database=\"db0\",outcome=\"conflict\"} 0"),
        "{metrics}"
    );
    // Any other query error is a failure of the database: backed off.
    db.fail_next(1, Some(Injected::Query("57P01")));
    assert!(store.reserve(&biz(), None, None).await.is_err());
    assert!(!store.cluster().is_live(0));
}

/// A database that answers but may not be used as it is (a durability setting, a
/// missing file) is backed off for the longest back-off at once: no retry soon finds it
/// changed.
#[tokio::test(start_paused = true)]
async fn a_database_unusable_as_it_is_is_backed_off_for_the_longest_back_off_at_once() {
    let db = one_db();
    let store = ready_store(
        std::slice::from_ref(&db),
        Timing {
            backoff_initial: Duration::from_millis(400),
            backoff_max: Duration::from_millis(5000),
            ..timing()
        },
    )
    .await;
    db.fail_next(u32::MAX, Some(Injected::Refused));
    assert!(matches!(
        store.reserve(&biz(), None, None).await,
        Err(StoreError::Unavailable(_))
    ));
    let failed = tokio::time::Instant::now();
    assert!(
        !live_at(&store, failed + Duration::from_millis(4990)).await,
        "still backed off just before the longest back-off ends"
    );
    assert!(live_at(&store, failed + Duration::from_millis(5000)).await);
}

/// Sleeps until `at`, then says whether database 0 is in use.
async fn live_at(store: &Store, at: tokio::time::Instant) -> bool {
    tokio::time::sleep_until(at).await;
    store.cluster().is_live(0)
}

#[tokio::test(start_paused = true)]
async fn a_failing_database_is_skipped_for_a_back_off_that_doubles_up_to_its_cap() {
    let db = one_db();
    let store = ready_store(
        std::slice::from_ref(&db),
        Timing {
            backoff_initial: Duration::from_millis(400),
            backoff_max: Duration::from_millis(1000),
            ..timing()
        },
    )
    .await;
    db.set_failing(true);
    let mut calls = 0;
    // After a success, the back-off starts over.
    for (backoff, then_succeed) in [(400, false), (800, false), (1000, true), (400, false)] {
        let backoff = Duration::from_millis(backoff);
        assert!(matches!(
            store.reserve(&biz(), None, None).await,
            Err(StoreError::Unavailable(_))
        ));
        let failed = tokio::time::Instant::now();
        calls += 1;
        assert_eq!(db.calls("biz"), calls);
        // Still backed off past the previous back-off: a request is refused without
        // calling the database.
        assert!(
            !live_at(&store, failed + backoff * 3 / 4).await,
            "{backoff:?}"
        );
        match store.reserve(&biz(), None, None).await {
            Err(StoreError::Unavailable(message)) => {
                assert!(message.contains("backing off"), "{message}");
            }
            other => panic!("expected a back-off, got {other:?}"),
        }
        assert_eq!(db.calls("biz"), calls);
        // Still backed off just before the back-off ends (tokio's timers tick in
        // milliseconds), used again at its end (not a longer one).
        assert!(
            !live_at(&store, failed + backoff - Duration::from_millis(2)).await,
            "{backoff:?}"
        );
        assert!(live_at(&store, failed + backoff).await, "{backoff:?}");
        if then_succeed {
            db.set_failing(false);
            store.reserve(&biz(), None, None).await.unwrap();
            calls += 1;
            db.set_failing(true);
        }
    }
}
