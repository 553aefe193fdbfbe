//! The store contract: one suite, run against PostgreSQL and against the embedded
//! store. Each scenario is a function of the database kind; the macro at the bottom
//! makes one test per scenario and kind.

use crate::by_kind;
use crate::common;

use std::collections::HashSet;
use std::error::Error as _;
use std::time::{Duration, Instant};

use common::*;
use segmint::biz::{BizTag, hash_token, token_digest};
use segmint::segment::Residue;
use segmint::store::sqlite::SqliteStore;
use segmint::store::{DbError, OpenMode, Store, StoreError, unix_now};

fn tag(biz: &str) -> BizTag {
    BizTag::parse(biz).unwrap()
}

/// A store for `config` with every database migrated.
async fn migrated(config: &segmint::config::Config) -> Store {
    let store = Store::connect(config).unwrap();
    for (db, r) in store.migrate().await {
        r.unwrap_or_else(|e| panic!("migrate {db}: {e}"));
    }
    store
}

/// How many of `ids` are distinct.
fn distinct(ids: &[i64]) -> usize {
    ids.iter().collect::<HashSet<_>>().len()
}

/// Two databases of `kind`, migrated, with `bizs` added (step 10, plain).
async fn setup(kind: Kind, bizs: &[&str]) -> (Databases, segmint::config::Config, Store) {
    let dbs = Databases::start(kind, 2);
    let config = dbs.config("");
    let store = migrated(&config).await;
    for biz in bizs {
        store.add_biz(&tag(biz), 10, 1, None).await.unwrap();
    }
    (dbs, config, store)
}

async fn migrations_are_idempotent(kind: Kind) {
    let (_dbs, _config, store) = setup(kind, &[]).await;
    for (db, r) in store.migrate().await {
        assert_eq!(
            r.unwrap(),
            Vec::<String>::new(),
            "{db}: nothing left to apply"
        );
    }
}

async fn reservations_advance_each_row_by_its_step(kind: Kind) {
    let (dbs, _config, store) = setup(kind, &["order"]).await;
    let mut ids = Vec::new();
    let mut per_db = [0i64; 2];
    for _ in 0..12 {
        let r = store.reserve(&tag("order"), None, None).await.unwrap();
        let class = Residue::new(2, r.database as i64).unwrap();
        assert_eq!(
            r.range.residue(),
            class,
            "a segment carries its row's class"
        );
        assert!(r.range.ids().all(|id| class.contains(id)));
        per_db[r.database] += 1;
        assert_eq!(
            r.range.max_id(),
            10 * per_db[r.database],
            "row advanced by its step"
        );
        ids.extend(r.range.ids());
    }
    for (i, n) in per_db.iter().enumerate() {
        assert_eq!(
            dbs.version(i, "order"),
            *n,
            "one version bump per reservation"
        );
    }
    assert_eq!(distinct(&ids), ids.len(), "segments overlap");
    assert_eq!(ids.len(), 12 * 5);
}

async fn concurrent_reservations_from_two_processes_are_disjoint(kind: Kind) {
    let (dbs, _config, _store) = setup(kind, &["race"]).await;
    // Two stores stand for two server processes: their reservations really race. No
    // hedging: a hedged attempt on a loaded machine writes a second row whose segment
    // is dropped (wasted by design), and this test counts one write per reservation.
    let config = dbs.config("hedge_after_ms = 0");
    let stores = [
        shared(Store::connect(&config).unwrap()),
        shared(Store::connect(&config).unwrap()),
    ];
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let store = stores[i % 2].clone();
            tokio::spawn(async move { store.reserve(&tag("race"), None, None).await })
        })
        .collect();
    let mut ids = Vec::new();
    for t in tasks {
        let r = t
            .await
            .unwrap()
            .expect("every reservation succeeds under contention");
        ids.extend(r.range.ids());
    }
    assert_eq!(distinct(&ids), ids.len(), "overlapping segments");
    assert_eq!(
        ids.len(),
        64 * 5,
        "each segment of step 10 on delta 2 holds 5 IDs"
    );
    assert_eq!(
        dbs.version(0, "race") + dbs.version(1, "race"),
        64,
        "one row update per reservation"
    );
}

async fn overflow_is_refused_and_changes_nothing(kind: Kind) {
    let (dbs, _config, store) = setup(kind, &["top", "fine"]).await;
    for i in 0..2 {
        dbs.sql(
            i,
            &format!(
                "UPDATE tiny_id_info SET max_id = {} WHERE biz_type = 'top'",
                i64::MAX - 5
            ),
        );
    }
    let before = [dbs.row(0, "top"), dbs.row(1, "top")];
    let err = store.reserve(&tag("top"), None, None).await.unwrap_err();
    assert!(matches!(err, StoreError::Overflow { .. }), "{err}");
    assert!(err.to_string().contains("`top`"), "{err}");
    assert_eq!(
        [dbs.row(0, "top"), dbs.row(1, "top")],
        before,
        "nothing reserved"
    );
    // The very last IDs are issued exactly, with no wrap. Lowering max_id goes with a
    // new version, as a give-back does: a row rewritten at a version the store has seen
    // fences its database.
    dbs.sql(
        0,
        &format!(
            "UPDATE tiny_id_info SET max_id = {}, version = version + 1 WHERE biz_type = 'top'",
            i64::MAX - 10
        ),
    );
    let r = store.reserve(&tag("top"), None, None).await.unwrap();
    assert_eq!(r.range.max_id(), i64::MAX);
    assert!(
        store.reserve(&tag("fine"), None, None).await.is_ok(),
        "other bizs keep working"
    );
}

async fn unknown_biz_is_not_found_and_creates_nothing(kind: Kind) {
    let (dbs, _config, store) = setup(kind, &["known"]).await;
    let err = store
        .reserve(&tag("unknown"), None, None)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err}");
    for i in 0..2 {
        assert_eq!(dbs.sql(i, "SELECT count(*) FROM tiny_id_info"), "1");
    }
}

async fn overlapping_rows_refuse_only_that_biz(kind: Kind) {
    let (dbs, _config, store) = setup(kind, &["edited", "fine"]).await;
    store.refresh_since(Instant::now()).await;
    // After the catalog was read, pg1's row is moved onto pg0's class (0 mod 2).
    dbs.sql(
        1,
        "UPDATE tiny_id_info SET remainder = 0 WHERE biz_type = 'edited'",
    );
    let before = dbs.row(1, "edited");
    for _ in 0..8 {
        match store.reserve(&tag("edited"), None, None).await {
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
        dbs.row(1, "edited"),
        before,
        "nothing reserved on the refused row"
    );
    store.refresh_since(Instant::now()).await;
    let err = store.reserve(&tag("edited"), None, None).await.unwrap_err();
    assert!(matches!(err, StoreError::ResidueConflict { .. }), "{err}");
    assert!(
        store.reserve(&tag("fine"), None, None).await.is_ok(),
        "other bizs keep working"
    );
}

async fn add_biz_restricts_classes_and_refuses_partial_names(kind: Kind) {
    let (dbs, _config, store) = setup(kind, &[]).await;
    store
        .add_biz(&tag("odd"), 8, 1, Some(Residue::new(2, 1).unwrap()))
        .await
        .unwrap();
    // Odd-only on (2, 0) and (2, 1): delta 4, remainders 1 and 3.
    assert_eq!(dbs.row(0, "odd"), "0|0|8|4|1");
    assert_eq!(dbs.row(1, "odd"), "0|0|8|4|3");
    let err = store
        .add_biz(&tag("odd"), 8, 1, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("already exists"), "{err}");
    dbs.sql(1, "DELETE FROM tiny_id_info WHERE biz_type = 'odd'");
    let err = store
        .add_biz(&tag("odd"), 8, 1, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"pg0\"") && err.contains("\"pg1\"") && err.contains("nothing changed"),
        "{err}"
    );
    assert_eq!(dbs.sql(1, "SELECT count(*) FROM tiny_id_info"), "0");
    let err = store
        .add_biz(&tag("tiny"), 1, 1, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("smaller than"),
        "step below delta is refused: {err}"
    );
    // --start: the first ID is the start itself when it is in the class.
    store.add_biz(&tag("late"), 10, 1000, None).await.unwrap();
    let r = store.reserve(&tag("late"), None, None).await.unwrap();
    assert_eq!(r.range.first_id(), Some(1000 + r.database as i64));
}

async fn tokens_are_stored_hashed_and_granted_everywhere(kind: Kind) {
    let (dbs, _config, store) = setup(kind, &["order", "other"]).await;
    let (token, report) = store.add_token(&tag("order"), "svc").await.unwrap();
    assert_eq!(report.len(), 2);
    for i in 0..2 {
        assert_eq!(
            dbs.sql(i, "SELECT token, biz_type, remark FROM tiny_id_token"),
            format!("{}|order|svc", hash_token(&token))
        );
    }
    let catalog = store.refresh_since(Instant::now()).await;
    let granted = |token: &str, biz: &str| {
        catalog
            .grant(&token_digest(token), unix_now())
            .map(|g| g.allows(biz))
    };
    assert_eq!(granted(&token, "order"), Some(true));
    assert_eq!(granted(&token, "other"), Some(false));
    assert_eq!(
        granted(&hash_token(&token), "order"),
        None,
        "the stored hash, presented as a token, is no token"
    );
    assert!(matches!(
        store.add_token(&tag("missing"), "").await,
        Err(StoreError::NotFound(_))
    ));
}

/// A statement that fails is a query error keeping the engine's own error as its
/// source, and PostgreSQL's SQLSTATE; the text reads as the engine put it.
async fn a_failed_statement_keeps_the_engines_error(kind: Kind) {
    let (dbs, config, _store) = setup(kind, &[]).await;
    dbs.sql(0, "DROP TABLE segmint_biz_shape");
    let err = raw_store(&config, 0).shapes().await.unwrap_err();
    assert!(matches!(err, DbError::Query { .. }), "{err:?}");
    let source = err.source().expect("the engine's error is kept");
    match kind {
        Kind::Postgres => {
            assert_eq!(err.sqlstate(), Some("42P01"), "{err}");
            assert_eq!(
                err.to_string(),
                "42P01: relation \"segmint_biz_shape\" does not exist"
            );
            let pg = source
                .downcast_ref::<tokio_postgres::Error>()
                .expect("a tokio-postgres error");
            assert_eq!(
                pg.code(),
                Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE)
            );
        }
        Kind::Embedded => {
            assert_eq!(err.sqlstate(), None);
            assert!(
                err.to_string().contains("no such table: segmint_biz_shape"),
                "{err}"
            );
            assert!(
                source.downcast_ref::<rusqlite::Error>().is_some(),
                "{source:?}"
            );
        }
    }
}

/// A database that cannot be reached is a connect error that keeps its cause: the
/// pool's error for PostgreSQL, the file system's for an embedded file.
async fn an_unreachable_database_is_a_connect_error_with_its_cause(kind: Kind) {
    let (dbs, config, _store) = setup(kind, &[]).await;
    let err = match kind {
        Kind::Postgres => {
            dbs.stop(0);
            raw_store(&config, 0).ping().await.unwrap_err()
        }
        Kind::Embedded => {
            let file = tempfile::NamedTempFile::new().unwrap();
            let below_a_file = file.path().join("db.sqlite");
            match SqliteStore::open(&below_a_file, Duration::from_secs(5), OpenMode::Create) {
                Ok(_) => panic!("a store below a plain file opened"),
                Err(e) => e,
            }
        }
    };
    assert!(matches!(err, DbError::Connect { .. }), "{err:?}");
    let source = err.source().expect("the cause is kept");
    match kind {
        Kind::Postgres => {
            assert!(err.to_string().contains("Connection refused"), "{err}");
            assert!(
                source
                    .downcast_ref::<deadpool_postgres::PoolError>()
                    .is_some(),
                "{source:?}"
            );
        }
        Kind::Embedded => {
            assert!(err.to_string().starts_with("cannot look for "), "{err}");
            assert!(
                source.downcast_ref::<std::io::Error>().is_some(),
                "{source:?}"
            );
        }
    }
}

by_kind!(
    migrations_are_idempotent,
    reservations_advance_each_row_by_its_step,
    concurrent_reservations_from_two_processes_are_disjoint,
    overflow_is_refused_and_changes_nothing,
    unknown_biz_is_not_found_and_creates_nothing,
    overlapping_rows_refuse_only_that_biz,
    add_biz_restricts_classes_and_refuses_partial_names,
    tokens_are_stored_hashed_and_granted_everywhere,
    a_failed_statement_keeps_the_engines_error,
    an_unreachable_database_is_a_connect_error_with_its_cause,
);

/// PostgreSQL and an embedded file in one configuration: each keeps its own class.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_kinds_share_a_biz_without_overlap() {
    let (pg, files) = (
        Databases::start(Kind::Postgres, 1),
        Databases::start(Kind::Embedded, 1),
    );
    let urls = [pg.urls()[0].clone(), files.urls()[0].clone()];
    let config = segmint::config::Config::from_toml(&config_toml_urls(&urls, "")).unwrap();
    let store = migrated(&config).await;
    store.add_biz(&tag("mixed"), 10, 1, None).await.unwrap();
    let mut ids = Vec::new();
    let mut seen = [false; 2];
    for _ in 0..20 {
        let r = store.reserve(&tag("mixed"), None, None).await.unwrap();
        seen[r.database] = true;
        assert!(r.range.ids().all(|id| id % 2 == r.database as i64));
        ids.extend(r.range.ids());
    }
    assert_eq!(seen, [true, true], "both kinds serve");
    assert_eq!(distinct(&ids), ids.len());
    assert_eq!(pg.version(0, "mixed") + files.version(0, "mixed"), 20);
}
