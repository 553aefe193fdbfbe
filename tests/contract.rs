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
use segmint::layout::LayoutState;
use segmint::segment::Residue;
use segmint::store::sqlite::SqliteStore;
use segmint::store::{
    BizRow, DbError, FeedPosition, Inserted, LayoutRow, LeaseRenewal, LeaseSet, Mark, OpenMode,
    RowClass, RowWrite, SectionRow, SectionWrite, SegmentStore, ShapeRow, Store, StoreError,
    Witness,
};

/// The wall clock in Unix seconds, as token times are kept.
fn unix_now() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn tag(biz: &str) -> BizTag {
    BizTag::parse(biz).unwrap()
}

/// A store for `config` with every database migrated and the membership recorded
/// (the layout row of epoch 0).
async fn migrated(config: &segmint::config::Config) -> Store {
    let store = Store::connect(config).unwrap();
    for (db, r) in store.cluster().migrate().await.results() {
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
        store
            .cluster()
            .add_biz(&tag(biz), 10, 1, None)
            .await
            .unwrap();
    }
    (dbs, config, store)
}

async fn migrations_are_idempotent(kind: Kind) {
    let (_dbs, _config, store) = setup(kind, &[]).await;
    for (db, r) in store.cluster().migrate().await.results() {
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
    // 64 reservations of one row at once: each may lose many races before it wins, on a
    // loaded machine for longer than the default fetch timeout.
    let config = dbs.config("hedge_after_ms = 0\nfetch_timeout_ms = 30000");
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
        .cluster()
        .add_biz(&tag("odd"), 8, 1, Some(Residue::new(2, 1).unwrap()))
        .await
        .unwrap();
    // Odd-only on (2, 0) and (2, 1): delta 4, remainders 1 and 3.
    assert_eq!(dbs.row(0, "odd"), "0|0|8|4|1");
    assert_eq!(dbs.row(1, "odd"), "0|0|8|4|3");
    let err = store
        .cluster()
        .add_biz(&tag("odd"), 8, 1, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("already exists"), "{err}");
    dbs.sql(1, "DELETE FROM tiny_id_info WHERE biz_type = 'odd'");
    let err = store
        .cluster()
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
        .cluster()
        .add_biz(&tag("tiny"), 1, 1, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("smaller than"),
        "step below delta is refused: {err}"
    );
    // --start: the first ID is the start itself when it is in the class.
    store
        .cluster()
        .add_biz(&tag("late"), 10, 1000, None)
        .await
        .unwrap();
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
        Kind::MySql => {
            assert_eq!(err.sqlstate(), Some("42S02"), "{err}");
            assert!(
                err.to_string()
                    .contains("Table 'segmint.segmint_biz_shape' doesn't exist"),
                "{err}"
            );
            assert!(
                source.downcast_ref::<mysql_async::Error>().is_some(),
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
        Kind::Postgres | Kind::MySql => {
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
        Kind::MySql => {
            assert!(err.to_string().contains("Connection refused"), "{err}");
            assert!(
                source.downcast_ref::<mysql_async::Error>().is_some(),
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

/// One database of `kind`, migrated, and the engine itself (no cluster above it): the
/// primitives below are checked one by one, so a result that only the cluster's
/// decisions would hide still shows.
async fn engine(kind: Kind) -> (Databases, Box<dyn SegmentStore>) {
    let dbs = Databases::start(kind, 1);
    let config = dbs.config("");
    // The cluster creates an embedded file; the engine then opens it as it exists. The
    // schema alone: the layout rows are the contract's to write.
    let store = Store::connect(&config).unwrap();
    for (db, r) in store.cluster().migrate_schema().await {
        r.unwrap_or_else(|e| panic!("migrate {db}: {e}"));
    }
    let raw = raw_store(&config, 0);
    assert_eq!(raw.migrate().await.unwrap(), Vec::<String>::new());
    raw.ping().await.unwrap();
    (dbs, raw)
}

fn biz_row(biz: &str, epoch: i64) -> BizRow {
    BizRow {
        biz_type: biz.into(),
        begin_id: 0,
        max_id: 0,
        step: 10,
        delta: 2,
        remainder: 1,
        version: 0,
        description: Box::default(),
        epoch,
        frozen: false,
        claimed_by: 0,
    }
}

fn layout_row(epoch: i64, state: LayoutState, changed_ms: i64) -> LayoutRow {
    LayoutRow {
        epoch,
        members: "pg0=1:0".into(),
        state: state.as_str().into(),
        changed_ms,
    }
}

/// `insert_biz`, `biz`, `bizs`, `write_row` and `describe`: an insert never replaces,
/// nor lands below a stored layout; the compare-and-set needs both version and
/// `max_id`, and a write without a class leaves the class as the row has it now.
async fn biz_rows_are_inserted_once_and_moved_only_by_compare_and_set(kind: Kind) {
    let (dbs, raw) = engine(kind).await;
    assert_eq!(
        raw.insert_biz(&biz_row("b", 0)).await.unwrap(),
        Inserted::Yes
    );
    let mut other = biz_row("b", 0);
    other.step = 99;
    assert_eq!(raw.insert_biz(&other).await.unwrap(), Inserted::Exists);
    assert_eq!(
        raw.biz("b").await.unwrap(),
        Some(biz_row("b", 0)),
        "not replaced"
    );
    assert_eq!(raw.biz("none").await.unwrap(), None);
    assert!(
        raw.write_layout(&layout_row(5, LayoutState::Moving, 1), None)
            .await
            .unwrap()
    );
    assert_eq!(
        raw.insert_biz(&biz_row("a", 4)).await.unwrap(),
        Inserted::LayoutAbove(5)
    );
    assert_eq!(
        raw.insert_biz(&biz_row("a", 5)).await.unwrap(),
        Inserted::Yes
    );
    // Many at once: each row unless its biz exists; none below a stored layout.
    assert_eq!(
        raw.insert_bizs(&[biz_row("c", 5), biz_row("b", 5), biz_row("d", 4)])
            .await
            .unwrap(),
        [Inserted::LayoutAbove(5); 3]
    );
    assert_eq!(raw.biz("c").await.unwrap(), None, "nothing of the batch");
    assert_eq!(
        raw.insert_bizs(&[biz_row("c", 5), biz_row("a", 5), biz_row("d", 5)])
            .await
            .unwrap(),
        [Inserted::Yes, Inserted::Exists, Inserted::Yes]
    );
    assert_eq!(raw.insert_bizs(&[]).await.unwrap(), []);
    for biz in ["c", "d"] {
        assert_eq!(raw.biz(biz).await.unwrap(), Some(biz_row(biz, 5)));
    }
    let names: Vec<String> = raw
        .bizs()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.biz_type.to_string())
        .collect();
    assert_eq!(names, ["a", "b", "c", "d"], "every row, by name");

    let to = RowWrite {
        version: 1,
        max_id: 10,
        class: None,
    };
    assert_eq!(
        raw.write_row("b", 1, 0, &to).await.unwrap(),
        None,
        "stale version"
    );
    assert_eq!(
        raw.write_row("b", 0, 5, &to).await.unwrap(),
        None,
        "stale max_id"
    );
    assert_eq!(raw.write_row("none", 0, 0, &to).await.unwrap(), None);
    assert_eq!(
        raw.biz("b").await.unwrap(),
        Some(biz_row("b", 0)),
        "nothing written"
    );
    // A class edited since the read (by hand, no new version) stays: a write without a
    // class never puts back the class the caller read.
    dbs.sql(
        0,
        "UPDATE tiny_id_info SET remainder = 0 WHERE biz_type = 'b'",
    );
    let written = raw.write_row("b", 0, 0, &to).await.unwrap().unwrap();
    assert_eq!(
        (written.version, written.max_id, written.remainder),
        (1, 10, 0)
    );
    assert_eq!(raw.biz("b").await.unwrap(), Some(written.clone()));
    let class = RowClass {
        delta: 4,
        remainder: 3,
        epoch: 6,
        frozen: true,
        claimed_by: 6,
    };
    let to = RowWrite {
        version: 9,
        max_id: 40,
        class: Some(class),
    };
    let moved = raw.write_row("b", 1, 10, &to).await.unwrap().unwrap();
    assert_eq!(
        (
            moved.version,
            moved.max_id,
            moved.delta,
            moved.remainder,
            moved.epoch,
            moved.frozen,
            moved.claimed_by
        ),
        (9, 40, 4, 3, 6, true, 6)
    );
    assert!(raw.describe("b", "orders").await.unwrap());
    assert!(!raw.describe("none", "x").await.unwrap());
    let described = raw.biz("b").await.unwrap().unwrap();
    assert_eq!(&*described.description, "orders");
    assert_eq!(described.version, 9, "a description is no new version");
}

/// `witness` and `witness_rows`: a witness joins as [`Mark::join`] does, whichever
/// order the marks come in; the rows of one biz are read alone.
async fn witnesses_join_as_marks_do(kind: Kind) {
    let (_dbs, raw) = engine(kind).await;
    let w = |biz: &str, version, max_id, high_id| Witness {
        database: "pg1".into(),
        biz: biz.into(),
        mark: Mark {
            version,
            max_id,
            high_id,
        },
    };
    let marks = [(3, 30, 30), (2, 50, 50), (3, 10, 40), (5, 20, 20)];
    let mut joined: Option<Mark> = None;
    for (v, m, h) in marks {
        raw.witness(&[w("x", v, m, h), w("y", 1, 1, 1)])
            .await
            .unwrap();
        let mark = Mark {
            version: v,
            max_id: m,
            high_id: h,
        };
        joined = Some(joined.map_or(mark, |j| j.join(mark)));
        assert_eq!(
            raw.witness_rows(Some("x")).await.unwrap(),
            [w("x", 0, 0, 0)].map(|mut r| {
                r.mark = joined.unwrap();
                r
            })
        );
    }
    assert_eq!(
        joined.unwrap(),
        Mark {
            version: 5,
            max_id: 20,
            high_id: 50
        }
    );
    let mut all = raw.witness_rows(None).await.unwrap();
    all.sort_by(|a, b| a.biz.cmp(&b.biz));
    assert_eq!(all, [w("x", 5, 20, 50), w("y", 1, 1, 1)]);
}

/// `write_layout` and `layouts`: a claim inserts once; a put replaces only a row in the
/// state it names, whatever that state is (the engine takes it from the caller).
async fn layout_rows_are_claimed_once_and_replaced_only_in_the_named_state(kind: Kind) {
    let (_dbs, raw) = engine(kind).await;
    let moving = Some(LayoutState::Moving.as_str());
    assert!(
        raw.write_layout(&layout_row(2, LayoutState::Moving, 1), None)
            .await
            .unwrap()
    );
    assert!(
        !raw.write_layout(&layout_row(2, LayoutState::Moving, 2), None)
            .await
            .unwrap()
    );
    assert!(
        raw.write_layout(&layout_row(2, LayoutState::Moving, 3), moving)
            .await
            .unwrap()
    );
    assert!(
        raw.write_layout(&layout_row(2, LayoutState::Done, 4), moving)
            .await
            .unwrap()
    );
    assert!(
        !raw.write_layout(&layout_row(2, LayoutState::Moving, 5), moving)
            .await
            .unwrap()
    );
    assert!(
        raw.write_layout(&layout_row(1, LayoutState::Superseded, 6), moving)
            .await
            .unwrap()
    );
    let done = Some(LayoutState::Done.as_str());
    assert!(
        raw.write_layout(&layout_row(2, LayoutState::Superseded, 7), done)
            .await
            .unwrap()
    );
    assert_eq!(
        raw.layouts().await.unwrap(),
        [
            layout_row(1, LayoutState::Superseded, 6),
            layout_row(2, LayoutState::Superseded, 7)
        ],
        "every row, by epoch"
    );
}

/// `take_lease`, `renew_lease`, `leases` and `set_leases_while`: a lease is taken only
/// when free past its grace, renewed only at its version (released at any), its bounds
/// only grow, and a change's leases are written only while its layout has the state
/// named.
async fn leases_are_taken_renewed_and_set_by_compare_and_set(kind: Kind) {
    let (_dbs, raw) = engine(kind).await;
    let a = raw
        .take_lease(3, "a", 60_000, 1_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            a.worker_id,
            a.holder.as_str(),
            a.version,
            a.last_ms,
            a.bound_ms
        ),
        (3, "a", 1, 0, 0)
    );
    assert_eq!(
        a.expires_ms - a.db_now_ms,
        60_000,
        "by the database's clock"
    );
    assert!((a.db_now_ms - unix_now() * 1000).abs() < 60_000, "{a:?}");
    assert_eq!(
        raw.take_lease(3, "b", 60_000, 0).await.unwrap(),
        None,
        "held"
    );
    let renew = |version, expires_in_ms, last_ms, bound_ms| LeaseRenewal {
        worker_id: 3,
        holder: "a".into(),
        version,
        expires_in_ms,
        last_ms,
        bound_ms,
    };
    assert_eq!(
        raw.renew_lease(&renew(7, 60_000, 5, 10)).await.unwrap(),
        None,
        "stale version"
    );
    let r = raw
        .renew_lease(&renew(1, 60_000, 5, 10))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((r.version, r.last_ms, r.bound_ms), (2, 5, 10));
    let r = raw
        .renew_lease(&renew(2, 60_000, 3, 8))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (r.version, r.last_ms, r.bound_ms),
        (3, 5, 10),
        "bounds only grow"
    );
    let mut other = renew(3, 60_000, 5, 10);
    other.holder = "b".into();
    assert_eq!(raw.renew_lease(&other).await.unwrap(), None, "not b's");
    let released = raw
        .renew_lease(&renew(1, -1, 6, 12))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (released.version, released.last_ms, released.bound_ms),
        (4, 6, 12)
    );
    assert!(
        released.expires_ms < released.db_now_ms,
        "a release at any version"
    );
    assert_eq!(
        raw.take_lease(3, "b", 60_000, 60_000).await.unwrap(),
        None,
        "within the grace"
    );
    let b = raw.take_lease(3, "b", 60_000, 0).await.unwrap().unwrap();
    assert_eq!(
        (b.holder.as_str(), b.version, b.last_ms, b.bound_ms),
        ("b", 5, 6, 12),
        "the earlier bounds stay"
    );

    let set = |worker_id, last_ms, bound_ms| LeaseSet {
        worker_id,
        holder: "mover".into(),
        expires_ms: 1,
        last_ms,
        bound_ms,
    };
    raw.write_layout(&layout_row(1, LayoutState::Moving, 1), None)
        .await
        .unwrap();
    let rows = [set(3, 1, 20), set(4, 2, 3)];
    assert_eq!(
        raw.set_leases_while(1, LayoutState::Done.as_str(), &rows)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        raw.set_leases_while(2, LayoutState::Moving.as_str(), &rows)
            .await
            .unwrap(),
        None
    );
    assert_eq!(raw.leases().await.unwrap().len(), 1, "nothing written");
    let written = raw
        .set_leases_while(1, LayoutState::Moving.as_str(), &rows)
        .await
        .unwrap()
        .unwrap();
    let got: Vec<_> = written
        .iter()
        .map(|r| {
            (
                r.worker_id,
                r.holder.as_str(),
                r.version,
                r.expires_ms,
                r.last_ms,
                r.bound_ms,
            )
        })
        .collect();
    assert_eq!(got, [(3, "mover", 6, 1, 6, 20), (4, "mover", 1, 1, 2, 3)]);
    let listed: Vec<_> = raw
        .leases()
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.worker_id, r.version))
        .collect();
    assert_eq!(listed, [(3, 6), (4, 1)], "every row, by worker ID");
}

/// `insert_token`, `tokens`, `revoke_tokens`, `expire_token` and `touch_tokens`: a
/// revocation is kept once, an expiry only comes earlier, a last use only later; the
/// hash is matched in lower case.
async fn token_times_move_one_way_only(kind: Kind) {
    let (_dbs, raw) = engine(kind).await;
    // A SHA-256 in hex, in upper case as a hand-made row might hold it.
    let upper = &"ABCDEF0123456789".repeat(4);
    let lower = upper.to_lowercase();
    raw.insert_token(upper, "order", "svc", None).await.unwrap();
    raw.insert_token(upper, "order", "again", Some(9))
        .await
        .unwrap();
    raw.insert_token(upper, "other", "", Some(5_000))
        .await
        .unwrap();
    let rows = raw.tokens().await.unwrap();
    let got: Vec<_> = rows
        .iter()
        .map(|t| {
            (
                t.token_hash.as_str(),
                t.biz_type.as_str(),
                t.remark.as_str(),
                t.expires,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (upper.as_str(), "order", "svc", None),
            (upper.as_str(), "other", "", Some(5_000))
        ],
        "one row per token and biz"
    );
    assert!((rows[0].create_time - unix_now()).abs() < 600, "{rows:?}");
    assert_eq!(raw.revoke_tokens(&lower, 100).await.unwrap(), 2);
    assert_eq!(
        raw.revoke_tokens(&lower, 200).await.unwrap(),
        0,
        "revoked once"
    );
    assert_eq!(raw.expire_token(&lower, 4_000).await.unwrap(), 2);
    assert_eq!(
        raw.expire_token(&lower, 4_500).await.unwrap(),
        0,
        "never later"
    );
    assert_eq!(raw.expire_token(&lower, 3_000).await.unwrap(), 2);
    raw.touch_tokens(&[(lower.clone(), 50)]).await.unwrap();
    raw.touch_tokens(&[(lower.clone(), 40)]).await.unwrap();
    let got: Vec<_> = raw
        .tokens()
        .await
        .unwrap()
        .iter()
        .map(|t| (t.revoked, t.expires, t.last_used))
        .collect();
    assert_eq!(got, [(Some(100), Some(3_000), Some(50)); 2]);
}

/// A token is found by its hash through an index, in either case: recording its uses,
/// revoking it or setting its expiry reads one token's rows, not every token's (a
/// quarter of a second each at a million tokens).
async fn a_token_is_found_through_an_index(kind: Kind) {
    let (dbs, _raw) = engine(kind).await;
    let lookup = "UPDATE tiny_id_token SET last_used_time = NULL WHERE lower(token) = 'abc'";
    let plan = match kind {
        // With sequential scans priced out, as on a large table.
        Kind::Postgres => dbs.sql(0, &format!("SET enable_seqscan = off; EXPLAIN {lookup}")),
        Kind::Embedded => dbs.sql(0, &format!("EXPLAIN QUERY PLAN {lookup}")),
        // MySQL looks a token up by its hash column (Tinyid's rows hold plain tokens).
        Kind::MySql => {
            let plan = dbs.sql(
                0,
                "EXPLAIN UPDATE tiny_id_token SET last_used_time = NULL WHERE token_hash = 'abc'",
            );
            assert!(plan.contains("segmint_token"), "{plan}");
            return;
        }
    };
    assert!(plan.contains("tiny_id_token_lower"), "{plan}");
}

/// `put_shape` and `shapes`: a biz's shape row is replaced whole.
async fn shape_rows_are_replaced_whole(kind: Kind) {
    let (_dbs, raw) = engine(kind).await;
    let shape = |biz: &str, id_order: &str, width| ShapeRow {
        biz_type: biz.into(),
        id_order: id_order.into(),
        block: 64,
        domain: 1 << 40,
        within_delta: 2,
        within_remainder: 1,
        key: "00112233445566778899aabbccddeeff".into(),
        prefix: "ORD-".into(),
        width,
        base: 36,
        check_char: true,
        as_string: false,
        period: format!("daily;Asia/Shanghai;{width};ORD{{yyyy}}{{MM}}{{dd}}{{seq:06}}"),
    };
    raw.put_shape(&shape("o", "shuffled", 8)).await.unwrap();
    raw.put_shape(&shape("a", "sequential", 0)).await.unwrap();
    let mut opaque = shape("o", "opaque", 12);
    opaque.check_char = false;
    opaque.as_string = true;
    raw.put_shape(&opaque).await.unwrap();
    assert_eq!(
        raw.shapes().await.unwrap(),
        [shape("a", "sequential", 0), opaque]
    );
}

fn names(rows: &segmint::store::CatalogRows) -> Vec<String> {
    rows.bizs.iter().map(|r| r.biz_type.to_string()).collect()
}

/// Reads the catalog feed of `raw` from `since`, expecting the rows of `bizs` and so
/// many token and witness rows; returns the feed's new position.
async fn feed(
    raw: &dyn SegmentStore,
    since: &FeedPosition,
    bizs: &[&str],
    tokens: usize,
    witnesses: usize,
) -> FeedPosition {
    let rows = raw.catalog(Some(since)).await.unwrap();
    assert!(!rows.full, "resumes from its own position");
    assert_eq!(names(&rows), bizs);
    assert_eq!(rows.tokens.len(), tokens);
    assert_eq!(rows.witnesses.len(), witnesses);
    assert_eq!(rows.layouts.len(), 1, "layouts in full");
    rows.position.unwrap()
}

/// `catalog`: a read without a position, or with one the feed cannot resume from (of
/// another run of the database, or ahead of the feed: it went back), returns every row;
/// with the position of the last read, exactly the rows written since, whoever wrote
/// them (an edit by hand too), and every row after a deletion; layouts always in full.
async fn the_catalog_feed_returns_the_rows_written_since(kind: Kind) {
    let (dbs, raw) = engine(kind).await;
    for biz in ["a", "b"] {
        raw.insert_biz(&biz_row(biz, 0)).await.unwrap();
    }
    raw.insert_token(&"1".repeat(64), "a", "", None)
        .await
        .unwrap();
    raw.write_layout(&layout_row(1, LayoutState::Done, 5), None)
        .await
        .unwrap();
    let full = raw.catalog(None).await.unwrap();
    assert!(full.full);
    if kind == Kind::MySql {
        // No feed on MySQL yet: every read is a full one, with no position to resume.
        assert_eq!(
            (full.position, full.bizs.len(), full.tokens.len()),
            (None, 2, 1)
        );
        assert_eq!(full.layouts.len(), 1);
        return;
    }
    let mut at = full.position.clone().expect("a feed position");
    at = feed(&*raw, &at, &[], 0, 0).await;
    at = feed(&*raw, &at, &[], 0, 0).await;
    let to = RowWrite {
        version: 1,
        max_id: 10,
        class: None,
    };
    raw.write_row("a", 0, 0, &to).await.unwrap().unwrap();
    at = feed(&*raw, &at, &["a"], 0, 0).await;
    raw.describe("b", "orders").await.unwrap();
    raw.revoke_tokens(&"1".repeat(64), 100).await.unwrap();
    at = feed(&*raw, &at, &["b"], 1, 0).await;
    raw.witness(&[Witness {
        database: "pg1".into(),
        biz: "a".into(),
        mark: Mark {
            version: 1,
            max_id: 10,
            high_id: 10,
        },
    }])
    .await
    .unwrap();
    at = feed(&*raw, &at, &[], 0, 1).await;
    dbs.sql(0, "UPDATE tiny_id_info SET step = 20 WHERE biz_type = 'b'");
    at = feed(&*raw, &at, &["b"], 0, 0).await;
    at = feed(&*raw, &at, &[], 0, 0).await;
    // A row deleted by hand leaves nothing to read: the next read is of every row.
    dbs.sql(0, "DELETE FROM tiny_id_token");
    let rows = raw.catalog(Some(&at)).await.unwrap();
    assert!(rows.full, "a deletion");
    assert_eq!(
        (names(&rows), rows.tokens.len()),
        (vec!["a".into(), "b".into()], 0)
    );
    at = feed(&*raw, &rows.position.unwrap(), &[], 0, 0).await;
    // Another run of the database, or a feed that went back: every row.
    for since in [
        FeedPosition {
            incarnation: "another run".into(),
            ..at.clone()
        },
        FeedPosition {
            next: at.next + 1_000_000,
            ..at.clone()
        },
    ] {
        let rows = raw.catalog(Some(&since)).await.unwrap();
        assert!(rows.full, "{since:?}");
        assert_eq!(names(&rows), ["a", "b"]);
    }
    if kind == Kind::Postgres {
        // A writer that took its transaction ID before a read and commits after it:
        // the next read still returns its row, whatever order writers commit in. The
        // writer waits for an advisory lock a second session holds until the test ends
        // that session: its commit comes after the read however slow the machine.
        let wait = |what: &str, sql: &str, want: &str| {
            let deadline = Instant::now() + Duration::from_secs(60);
            while dbs.sql(0, sql) != want {
                assert!(Instant::now() < deadline, "{what}");
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        let _holder = dbs
            .cluster(0)
            .psql_background("SELECT pg_advisory_lock(4242), pg_sleep(600);");
        wait(
            "the lock holder never ran",
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND granted",
            "1",
        );
        let _slow = dbs.cluster(0).psql_background(
            "BEGIN; UPDATE tiny_id_info SET step = 30 WHERE biz_type = 'a'; SELECT pg_advisory_xact_lock(4242); COMMIT;",
        );
        wait(
            "the slow writer never took its transaction ID",
            "SELECT count(*) FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND query LIKE '%pg_advisory_xact_lock(4242)%' AND pid <> pg_backend_pid()",
            "1",
        );
        // A later writer commits first.
        raw.describe("b", "later").await.unwrap();
        let during = raw.catalog(Some(&at)).await.unwrap();
        assert_eq!(names(&during), ["b"], "a not committed yet");
        let during = during.position.unwrap();
        dbs.sql(
            0,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_advisory_lock(4242), pg_sleep%' AND pid <> pg_backend_pid()",
        );
        wait(
            "the slow writer never committed",
            "SELECT step FROM tiny_id_info WHERE biz_type = 'a'",
            "30",
        );
        let after = raw.catalog(Some(&during)).await.unwrap();
        // b again too: the feed may return a row twice, never miss one.
        assert_eq!(
            names(&after),
            ["a", "b"],
            "a commit after the read is read next"
        );
    }
}

/// `catalog_of`: one biz's rows alone (its row, shape and witnesses of the databases
/// named), the rows of one token whatever biz they grant, and every layout.
async fn one_biz_is_read_alone(kind: Kind) {
    let (_dbs, raw) = engine(kind).await;
    let inserted = raw
        .insert_bizs(&[biz_row("a", 0), biz_row("b", 0)])
        .await
        .unwrap();
    assert_eq!(inserted.len(), 2);
    let hash = "ab".repeat(32);
    raw.insert_token(&hash, "a", "", None).await.unwrap();
    raw.insert_token(&hash, "b", "", None).await.unwrap();
    raw.insert_token(&"cd".repeat(32), "a", "", None)
        .await
        .unwrap();
    let w = |database: &str, biz: &str| Witness {
        database: database.into(),
        biz: biz.into(),
        mark: Mark {
            version: 1,
            max_id: 10,
            high_id: 10,
        },
    };
    raw.witness(&[w("pg1", "a"), w("pg2", "a"), w("pg1", "b")])
        .await
        .unwrap();
    raw.write_layout(&layout_row(1, LayoutState::Done, 5), None)
        .await
        .unwrap();
    let databases = ["pg0".to_owned(), "pg1".to_owned()];
    let rows = raw.catalog_of("a", Some(&hash), &databases).await.unwrap();
    assert!(!rows.full && rows.position.is_none());
    assert_eq!(names(&rows), ["a"]);
    assert!(rows.shapes.is_empty());
    let mut granted: Vec<&str> = rows.tokens.iter().map(|t| t.biz_type.as_str()).collect();
    granted.sort_unstable();
    assert_eq!(
        granted,
        ["a", "b"],
        "every row of the token, and no other token"
    );
    assert!(rows.tokens.iter().all(|t| t.token_hash == hash));
    assert_eq!(rows.witnesses, [w("pg1", "a")], "pg2 is not named");
    assert_eq!(rows.layouts, [layout_row(1, LayoutState::Done, 5)]);
    let none = raw.catalog_of("zz", None, &databases).await.unwrap();
    assert!(none.bizs.is_empty() && none.tokens.is_empty() && none.witnesses.is_empty());
    assert_eq!(none.layouts.len(), 1);
}

/// `snowflake_spec`, `record_snowflake_spec` and `confirm_snowflake_spec`: no record
/// after the migrations, one written if absent and never replaced, confirmed once and
/// only as its own spec.
async fn the_snowflake_spec_is_recorded_once(kind: Kind) {
    let (_dbs, raw) = engine(kind).await;
    spec_recorded_once(raw.as_ref()).await;
}

/// The assertions of [`the_snowflake_spec_is_recorded_once`] on a migrated database.
pub(crate) async fn spec_recorded_once(raw: &dyn SegmentStore) {
    let leaf = segmint::snowflake::Spec::default().record();
    let js = segmint::snowflake::Spec {
        layout: segmint::snowflake::Layout::JS,
        ..Default::default()
    }
    .record();
    assert_eq!(raw.snowflake_spec().await.unwrap(), None);
    assert!(
        !raw.confirm_snowflake_spec(&js).await.unwrap(),
        "nothing to confirm"
    );
    assert!(raw.record_snowflake_spec(&js).await.unwrap(), "written");
    assert_eq!(
        raw.snowflake_spec().await.unwrap(),
        Some((js.clone(), false))
    );
    assert!(!raw.record_snowflake_spec(&leaf).await.unwrap(), "kept");
    assert!(!raw.record_snowflake_spec(&js).await.unwrap(), "kept");
    assert!(
        !raw.confirm_snowflake_spec(&leaf).await.unwrap(),
        "another spec"
    );
    assert_eq!(
        raw.snowflake_spec().await.unwrap(),
        Some((js.clone(), false))
    );
    assert!(raw.confirm_snowflake_spec(&js).await.unwrap(), "confirmed");
    assert!(!raw.confirm_snowflake_spec(&js).await.unwrap(), "once");
    assert_eq!(raw.snowflake_spec().await.unwrap(), Some((js, true)));
}

/// The database's clock reads in Unix milliseconds: on this host, within a second of
/// the test's own clock, and a later read is not earlier.
async fn the_clock_reads_in_unix_milliseconds(kind: Kind) {
    let (_dbs, raw) = engine(kind).await;
    let ms = || {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        since.map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    };
    let before = ms();
    let first = raw.clock_ms().await.unwrap();
    let second = raw.clock_ms().await.unwrap();
    let after = ms();
    assert!(
        (before - 1_000..=after + 1_000).contains(&first),
        "{first} is not between {before} and {after} (Unix ms)"
    );
    assert!(second >= first, "{second} after {first}");
}

/// A section write of `biz` with a lease of 5 s.
fn section_write(
    biz: &str,
    section: u32,
    expected: Option<i64>,
    holder: &str,
    bound: i64,
) -> SectionWrite {
    SectionWrite {
        biz: biz.into(),
        section,
        expected,
        holder: holder.into(),
        bound,
        lease_ms: 5_000,
    }
}

/// What a test compares of a section row: holder, version and bound.
fn held(row: &SectionRow) -> (&str, i64, i64) {
    (row.holder.as_str(), row.version, row.bound)
}

/// `section` and `write_section`: a section's row is absent until inserted once, then
/// written only at the version read, one version up, its lease counted from the
/// database's clock; of two writers from one version, one wins; other sections and
/// bizs are apart.
async fn sections_are_written_only_by_compare_and_set(kind: Kind) {
    let (_dbs, raw) = engine(kind).await;
    let write = |section: u32, expected: Option<i64>, holder: &str, bound: i64| {
        section_write("chat", section, expected, holder, bound)
    };
    assert_eq!(raw.section("chat", 3).await.unwrap(), None);
    assert_eq!(
        raw.write_section(&write(3, Some(1), "a", 10))
            .await
            .unwrap(),
        None,
        "no row at version 1"
    );
    let first = raw
        .write_section(&write(3, None, "a", 10))
        .await
        .unwrap()
        .expect("inserted");
    assert_eq!(
        (first.holder.as_str(), first.version, first.bound),
        ("a", 1, 10)
    );
    assert_eq!(first.expires_ms - first.db_now_ms, 5_000, "{first:?}");
    let clock = raw.clock_ms().await.unwrap();
    assert!(
        (clock - 1_000..=clock).contains(&first.db_now_ms),
        "{first:?} at {clock}"
    );
    assert_eq!(
        raw.write_section(&write(3, None, "b", 99)).await.unwrap(),
        None,
        "inserted once"
    );
    let read = raw.section("chat", 3).await.unwrap().expect("the row");
    assert_eq!(
        (read.version, read.bound, read.expires_ms),
        (1, 10, first.expires_ms)
    );
    assert!(read.db_now_ms >= first.db_now_ms);
    assert_eq!(
        raw.write_section(&write(3, Some(2), "b", 20))
            .await
            .unwrap(),
        None
    );
    let second = raw
        .write_section(&write(3, Some(1), "b", 20))
        .await
        .unwrap()
        .expect("written at the version read");
    assert_eq!(
        (second.holder.as_str(), second.version, second.bound),
        ("b", 2, 20)
    );
    assert_eq!(raw.section("chat", 4).await.unwrap(), None);
    assert_eq!(raw.section("other", 3).await.unwrap(), None);
    // Two writers from version 2 at once: one wins.
    let (x, y) = (write(3, Some(2), "x", 30), write(3, Some(2), "y", 40));
    let (x, y) = tokio::join!(raw.write_section(&x), raw.write_section(&y));
    let won: Vec<SectionRow> = [x.unwrap(), y.unwrap()].into_iter().flatten().collect();
    assert_eq!(won.len(), 1, "{won:?}");
    assert_eq!(
        raw.section("chat", 3).await.unwrap().map(|r| r.version),
        Some(3)
    );
    // All of a biz's rows in one read, in section order, other bizs' left out.
    raw.write_section(&write(1, None, "z", 7)).await.unwrap();
    let mut other = write(0, None, "o", 1);
    other.biz = "other".into();
    raw.write_section(&other).await.unwrap();
    let all = raw.sections("chat").await.unwrap();
    let seen: Vec<(u32, &str, i64)> = all
        .iter()
        .map(|(s, r)| (*s, r.holder.as_str(), r.version))
        .collect();
    assert_eq!(seen.len(), 2, "{all:?}");
    assert_eq!(seen[0], (1, "z", 1));
    assert_eq!(seen[1].0, 3);
    assert!(all.iter().all(|(_, r)| r.db_now_ms >= first.db_now_ms));
    assert_eq!(raw.sections("none").await.unwrap(), vec![]);
}

/// `all_sections` and `write_sections`: every biz's rows in one read, in biz then
/// section order, with the database's clock; a batch of writes answered in its order,
/// each write decided alone by compare-and-set (or insert if absent), versions one up,
/// leases from the database's clock; a batch racing a single write on a row, one wins.
async fn sections_are_read_and_written_in_batches(kind: Kind) {
    let (_dbs, raw) = engine(kind).await;
    let write = section_write;
    assert_eq!(raw.all_sections().await.unwrap(), vec![]);
    assert_eq!(
        raw.write_sections(&[]).await.unwrap(),
        vec![],
        "empty batch"
    );
    for w in [
        write("chat", 10, None, "a", 10),
        write("order", 1, None, "b", 5),
        write("#servers", 0, None, "s", 1),
        write("chat", 2, None, "a", 10),
        write("chat", 0, None, "a", 10),
    ] {
        raw.write_section(&w).await.unwrap().expect("inserted");
    }
    let before = raw.clock_ms().await.unwrap();
    let all = raw.all_sections().await.unwrap();
    let after = raw.clock_ms().await.unwrap();
    let rows: Vec<(&str, u32)> = all.iter().map(|(b, s, _)| (b.as_str(), *s)).collect();
    assert_eq!(
        rows,
        [
            ("#servers", 0),
            ("chat", 0),
            ("chat", 2),
            ("chat", 10),
            ("order", 1)
        ]
    );
    for (biz, section, row) in &all {
        assert!(
            (before..=after).contains(&row.db_now_ms),
            "{row:?} read between {before} and {after}"
        );
        let one = raw.section(biz, *section).await.unwrap().expect("the row");
        assert_eq!(
            (held(row), row.expires_ms),
            (held(&one), one.expires_ms),
            "{biz} {section}"
        );
    }

    // Two winners of each kind and two losers, answered in the order given.
    let batch = [
        write("order", 1, Some(1), "c", 50),
        write("chat", 5, None, "c", 60),
        write("chat", 0, None, "c", 70),
        write("chat", 2, Some(7), "c", 80),
        write("#servers", 0, Some(1), "c", 90),
        write("chat", 3, None, "c", 100),
    ];
    let before = raw.clock_ms().await.unwrap();
    let answers = raw.write_sections(&batch).await.unwrap();
    let after = raw.clock_ms().await.unwrap();
    let seen: Vec<Option<(&str, i64, i64)>> =
        answers.iter().map(|a| a.as_ref().map(held)).collect();
    assert_eq!(
        seen,
        [
            Some(("c", 2, 50)),
            Some(("c", 1, 60)),
            None,
            None,
            Some(("c", 2, 90)),
            Some(("c", 1, 100)),
        ],
        "inserted, stale and absent writes lose alone"
    );
    for row in answers.iter().flatten() {
        assert_eq!(row.expires_ms - row.db_now_ms, 5_000, "{row:?}");
        assert!((before..=after).contains(&row.db_now_ms), "{row:?}");
    }
    let now: Vec<(String, u32, (String, i64, i64))> = raw
        .all_sections()
        .await
        .unwrap()
        .into_iter()
        .map(|(b, s, r)| (b, s, (r.holder, r.version, r.bound)))
        .collect();
    let row =
        |b: &str, s: u32, h: &str, v: i64, bound: i64| (b.to_owned(), s, (h.to_owned(), v, bound));
    assert_eq!(
        now,
        [
            row("#servers", 0, "c", 2, 90),
            row("chat", 0, "a", 1, 10),
            row("chat", 2, "a", 1, 10),
            row("chat", 3, "c", 1, 100),
            row("chat", 5, "c", 1, 60),
            row("chat", 10, "a", 1, 10),
            row("order", 1, "c", 2, 50),
        ],
        "only the winners changed"
    );

    // From the versions answered, one up again.
    let again = raw
        .write_sections(&[
            write("chat", 5, Some(1), "d", 61),
            write("order", 1, Some(2), "d", 51),
        ])
        .await
        .unwrap();
    let versions: Vec<Option<i64>> = again
        .iter()
        .map(|a| a.as_ref().map(|r| r.version))
        .collect();
    assert_eq!(versions, [Some(2), Some(3)]);

    // A batch and a single write from one version of a row, at once: one wins, and the
    // batch's other write is made whichever.
    for round in 0..5 {
        let version = 2 + round;
        let batch = [
            write("chat", 5, Some(version), "x", 1),
            write("chat", 10, Some(1 + round), "x", 1),
        ];
        let single = write("chat", 5, Some(version), "y", 2);
        let (b, s) = tokio::join!(raw.write_sections(&batch), raw.write_section(&single));
        let (b, s) = (b.unwrap(), s.unwrap());
        assert_eq!(
            usize::from(b[0].is_some()) + usize::from(s.is_some()),
            1,
            "round {round}: {b:?} {s:?}"
        );
        assert_eq!(b[1].as_ref().map(|r| r.version), Some(2 + round));
        let row = raw.section("chat", 5).await.unwrap().expect("the row");
        assert_eq!(row.version, version + 1);
    }

    // Two batches writing the same rows at once, given in opposite orders: neither
    // deadlocks (each takes the rows in their order), and each row is written once.
    let shared: Vec<SectionWrite> = (100..300).map(|s| write("chat", s, None, "i", 0)).collect();
    raw.write_sections(&shared).await.unwrap();
    for version in 1..=5 {
        let batch = |holder: &str| -> Vec<SectionWrite> {
            let to = |w: &SectionWrite| write("chat", w.section, Some(version), holder, 0);
            shared.iter().map(to).collect()
        };
        let (a, mut b) = (batch("a"), batch("b"));
        b.reverse();
        let (a, b) = tokio::join!(raw.write_sections(&a), raw.write_sections(&b));
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.iter().chain(&b).flatten().count(), shared.len());
        let all = raw.all_sections().await.unwrap();
        let shared_rows = all.iter().filter(|(b, s, _)| b == "chat" && *s >= 100);
        assert!(
            shared_rows
                .clone()
                .all(|(_, _, r)| r.version == version + 1)
        );
        assert_eq!(shared_rows.count(), shared.len());
    }

    // More rows than one statement of some engines names: each answered in its place.
    let many: Vec<SectionWrite> = (0..1_200).map(|s| write("many", s, None, "m", 1)).collect();
    let inserted = raw.write_sections(&many).await.unwrap();
    assert!(
        inserted
            .iter()
            .all(|a| a.as_ref().is_some_and(|r| r.version == 1))
    );
    let cas: Vec<SectionWrite> = (0..1_200)
        .rev()
        .map(|s| {
            write(
                "many",
                s,
                Some(if s % 3 == 0 { 1 } else { 2 }),
                "n",
                i64::from(s),
            )
        })
        .collect();
    let answers = raw.write_sections(&cas).await.unwrap();
    for (w, a) in cas.iter().zip(&answers) {
        let want = (w.section % 3 == 0).then(|| ("n", 2, i64::from(w.section)));
        assert_eq!(a.as_ref().map(held), want, "section {}", w.section);
    }
    let many = raw.all_sections().await.unwrap();
    let many: Vec<_> = many.iter().filter(|(b, _, _)| b == "many").collect();
    assert_eq!(many.len(), 1_200);
    assert!(many.windows(2).all(|p| p[0].1 < p[1].1), "in section order");
}

by_kind!(
    the_clock_reads_in_unix_milliseconds,
    sections_are_written_only_by_compare_and_set,
    sections_are_read_and_written_in_batches,
    the_snowflake_spec_is_recorded_once,
    the_catalog_feed_returns_the_rows_written_since,
    one_biz_is_read_alone,
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
    biz_rows_are_inserted_once_and_moved_only_by_compare_and_set,
    witnesses_join_as_marks_do,
    layout_rows_are_claimed_once_and_replaced_only_in_the_named_state,
    leases_are_taken_renewed_and_set_by_compare_and_set,
    token_times_move_one_way_only,
    a_token_is_found_through_an_index,
    shape_rows_are_replaced_whole,
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
    store
        .cluster()
        .add_biz(&tag("mixed"), 10, 1, None)
        .await
        .unwrap();
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
