//! The multi-database store against real PostgreSQL: races, residue checks, admin.

mod common;

use std::time::Instant;

use common::*;
use segmint::biz::BizTag;
use segmint::store::{Store, StoreError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reservations_from_two_processes_get_disjoint_segments() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let config = config(&[&a, &b], "");
    setup_biz(&config, "race", 10, false).await;
    // Two stores stand for two server processes: their reservations really race.
    let stores = [
        shared(Store::connect(&config).unwrap()),
        shared(Store::connect(&config).unwrap()),
    ];
    let biz = BizTag::parse("race").unwrap();
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let (store, biz) = (stores[i % 2].clone(), biz.clone());
            tokio::spawn(async move { store.reserve(&biz, None).await })
        })
        .collect();
    let mut ids = Vec::new();
    for t in tasks {
        let r = t
            .await
            .unwrap()
            .expect("every reservation succeeds under contention");
        assert_eq!(r.range.step(), 10);
        ids.extend(r.range.ids());
    }
    let total = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), total, "overlapping segments");
    assert_eq!(
        total,
        64 * 5,
        "each segment of step 10 on delta 2 holds 5 IDs"
    );
    assert_eq!(
        a.version("race") + b.version("race"),
        64,
        "one row update per reservation"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_edited_overlapping_row_is_refused_before_issuing() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let config = config(&[&a, &b], "");
    setup_biz(&config, "edited", 100, false).await;
    setup_biz(&config, "fine", 100, false).await;
    let store = Store::connect(&config).unwrap();
    store.refresh_since(Instant::now()).await;
    // After the catalog was read, pg1's row is moved onto pg0's class (0 mod 2).
    b.psql("UPDATE tiny_id_info SET remainder = 0 WHERE biz_type = 'edited'");
    let before = (a.row("edited"), b.row("edited"));
    let biz = BizTag::parse("edited").unwrap();
    for _ in 0..8 {
        match store.reserve(&biz, None).await {
            // Reservations that pick pg0 still see pg1's class as 1 mod 2 until the
            // next refresh; those that pick pg1 must be refused.
            Ok(r) => assert_eq!(r.database, 0, "pg1's overlapping row was used"),
            Err(e) => {
                let msg = e.to_string();
                assert!(matches!(e, StoreError::ResidueConflict { .. }), "{msg}");
                assert!(
                    msg.contains("edited") && msg.contains("pg0") && msg.contains("pg1"),
                    "{msg}"
                );
            }
        }
    }
    assert_eq!(
        b.row("edited"),
        before.1,
        "nothing reserved on the refused row"
    );
    store.refresh_since(Instant::now()).await;
    let err = store.reserve(&biz, None).await.unwrap_err();
    assert!(matches!(err, StoreError::ResidueConflict { .. }), "{err}");
    assert!(
        store
            .reserve(&BizTag::parse("fine").unwrap(), None)
            .await
            .is_ok(),
        "other bizs keep working"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_biz_restricts_classes_and_refuses_partial_names() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let config = config(&[&a, &b], "");
    setup_biz(&config, "odd", 8, true).await;
    // Odd-only on (2, 0) and (2, 1): delta 4, remainders 1 and 3.
    assert_eq!(a.row("odd"), "0|0|8|4|1");
    assert_eq!(b.row("odd"), "0|0|8|4|3");
    let store = Store::connect(&config).unwrap();
    let odd = BizTag::parse("odd").unwrap();
    let err = store
        .add_biz(&odd, 8, 1, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("already exists"), "{err}");
    b.psql("DELETE FROM tiny_id_info WHERE biz_type = 'odd'");
    let err = store
        .add_biz(&odd, 8, 1, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"pg0\"") && err.contains("\"pg1\"") && err.contains("nothing changed"),
        "{err}"
    );
    assert_eq!(b.psql("SELECT count(*) FROM tiny_id_info"), "0");
    let err = store
        .add_biz(&BizTag::parse("tiny").unwrap(), 1, 1, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("smaller than"),
        "step below delta is refused: {err}"
    );
    // --start: the first ID is the start itself when it is in the class.
    store
        .add_biz(&BizTag::parse("late").unwrap(), 10, 1000, None)
        .await
        .unwrap();
    let r = store
        .reserve(&BizTag::parse("late").unwrap(), None)
        .await
        .unwrap();
    assert_eq!(r.range.first_id(), Some(1000 + r.database as i64));
}
