//! Sequence sections on real databases: `Store::claim_section` carries out the claim
//! (`segmint_core::sequence::claim`) on three PostgreSQL databases (and, for the
//! engines' statements under contention, on MariaDB and an embedded file): a section
//! is owned by one store at a time; a raise starts above the bound; a database down
//! leaves a majority; a row set back (a restore) is not counted by the store that wrote
//! it; another store takes the section only once the lease ran out, above everything
//! the first could answer.

use std::time::Duration;

use crate::by_kind;
use crate::common::*;
use segmint::sequence::claim::Outcome;
use segmint::store::Store;

/// Long enough that a loaded machine does not let a lease run out between two claims
/// the test expects it to hold across; the takeover waits it out.
const LEASE: (Duration, Duration) = (Duration::from_secs(3), Duration::from_secs(1));

async fn migrated(config: &segmint::config::Config) -> Store {
    let store = Store::connect(config).unwrap();
    for (db, r) in store.migrate().await.results() {
        r.unwrap_or_else(|e| panic!("migrate {db}: {e}"));
    }
    store
}

/// The floor, bound and versions of an owned claim; panics on any other outcome.
fn owned(outcome: &Outcome) -> (i64, i64, Vec<Option<i64>>) {
    match outcome {
        Outcome::Owned {
            floor,
            bound,
            versions,
            ..
        } => (*floor, *bound, versions.clone()),
        other => panic!("expected the section owned, got {other:?}"),
    }
}

/// `known` with the versions just written over it.
fn merge(known: &mut Vec<Option<i64>>, written: &[Option<i64>]) {
    known.resize(written.len(), None);
    for (k, w) in known.iter_mut().zip(written) {
        if w.is_some() {
            *k = *w;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_section_is_owned_once_raised_and_taken_over_above_its_bound() {
    let dbs = Databases::start(Kind::Postgres, 3);
    let config = dbs.config("");
    let (a, b) = (migrated(&config).await, migrated(&config).await);
    assert_eq!(a.section_members(), 3);

    let first = a
        .claim_section("chat", 7, "a", 100, LEASE, &[])
        .await
        .unwrap();
    let (floor, bound, versions) = owned(&first.outcome);
    assert_eq!((floor, bound), (0, 100));
    assert_eq!(versions, vec![Some(1); 3]);
    let mut known = versions;
    // Another store is refused while the lease is live.
    let held = b
        .claim_section("chat", 7, "b", 100, LEASE, &[])
        .await
        .unwrap();
    assert_eq!(held.outcome, Outcome::Held { by: "a".into() });
    // A raise: a step above the bound.
    let raised = a
        .claim_section("chat", 7, "a", 100, LEASE, &known)
        .await
        .unwrap();
    let (floor, bound, versions) = owned(&raised.outcome);
    assert_eq!((floor, bound), (100, 200));
    merge(&mut known, &versions);

    // One database down: a majority of three still raises.
    dbs.stop(2);
    let raised = a
        .claim_section("chat", 7, "a", 100, LEASE, &known)
        .await
        .unwrap();
    let (_, bound, versions) = owned(&raised.outcome);
    assert_eq!(bound, 300);
    assert_eq!(versions[2], None, "{versions:?}");
    merge(&mut known, &versions);
    dbs.start_again(2);

    // Database 0's row set back to before (a restore from a backup): the store that
    // wrote it does not count it, and the other two still hold the bound.
    dbs.sql(
        0,
        "UPDATE segmint_sequence_section SET version = 1, bound = 100 WHERE biz_type = 'chat'",
    );
    let raised = eventually_owned(&a, "a", &known).await;
    let (floor, bound, versions) = owned(&raised.outcome);
    assert_eq!((floor, bound), (300, 400), "{raised:?}");
    match &raised.outcome {
        Outcome::Owned { fenced, .. } => assert_eq!(fenced, &vec![0]),
        _ => unreachable!(),
    }
    merge(&mut known, &versions);

    // Store a stops renewing; store b takes the section once a's lease and the grace
    // ran out by the databases' clocks, above every number a could have answered.
    let took = eventually_owned(&b, "b", &[]).await;
    let (floor, bound, _) = owned(&took.outcome);
    assert!(floor >= 400, "b starts at {floor}, below a's bound 400");
    assert_eq!(bound, floor + 100);
    let lost = a
        .claim_section("chat", 7, "a", 100, LEASE, &known)
        .await
        .unwrap();
    assert_eq!(lost.outcome, Outcome::Held { by: "b".into() });
    // Sections and bizs are apart.
    let other = b
        .claim_section("chat", 8, "b", 5, LEASE, &[])
        .await
        .unwrap();
    assert_eq!(owned(&other.outcome).1, 5);
}

/// Claims until the section is owned, for at most 30 s (a lease and its grace to run
/// out, a database to answer again after its restart).
async fn eventually_owned(
    store: &Store,
    holder: &str,
    known: &[Option<i64>],
) -> segmint::store::SectionClaim {
    eventually(
        Duration::from_secs(30),
        &format!("{holder} owns the section"),
        async || {
            let claim = store
                .claim_section("chat", 7, holder, 100, LEASE, known)
                .await
                .map_err(|e| e.to_string())?;
            match claim.outcome {
                Outcome::Owned { .. } => Ok(claim),
                ref other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

/// Two stores claiming one section at once, many times over, on each engine: never both
/// own it from one round of reads, and each bound owned is above the last.
async fn concurrent_claims_never_both_own(kind: Kind) {
    let dbs = Databases::start(kind, 1);
    let config = dbs.config("");
    let stores = [migrated(&config).await, migrated(&config).await];
    let no_lease = (Duration::ZERO, Duration::ZERO);
    let mut last = 0;
    for round in 0..20 {
        let (x, y) = tokio::join!(
            stores[0].claim_section("race", 0, "x", 10, no_lease, &[]),
            stores[1].claim_section("race", 0, "y", 10, no_lease, &[])
        );
        // Both may own in one round only one after the other (no lease to wait out):
        // the later one above the earlier one's bound.
        let mut owned: Vec<(i64, i64)> = [x.unwrap().outcome, y.unwrap().outcome]
            .iter()
            .filter_map(|o| match o {
                Outcome::Owned { floor, bound, .. } => Some((*floor, *bound)),
                _ => None,
            })
            .collect();
        owned.sort_unstable();
        for (floor, bound) in owned {
            assert!(
                floor >= last,
                "round {round}: owned from {floor}, below {last}"
            );
            last = bound;
        }
    }
    assert!(last > 0, "no claim ever won");
}

by_kind!(concurrent_claims_never_both_own);
