//! Sequence sections on real databases: `Cluster::run_claims` carries out claims
//! (`segmint_core::sequence::claim`) on three PostgreSQL databases (and, for the
//! engines' statements under contention, on MariaDB and an embedded file): a section
//! is owned by one store at a time; a raise starts above the bound; a database down
//! leaves a majority; a row set back (a restore) is not counted by the store that wrote
//! it, and is written again up to the bound; another store takes the section only once
//! it has seen its row unchanged for the lease and grace, above everything the first
//! could answer.

use std::time::Duration;

use crate::by_kind;
use crate::common::*;
use segmint::lease::{Seen, Timing};
use segmint::sequence::claim::{Ask, Claim, Known, Outcome, Read, Safeguards};
use segmint::store::{SectionClaim, Store};

const TIMING: Timing = Timing {
    lease: Duration::from_secs(3),
    grace: Duration::from_secs(1),
    margin: true,
};

async fn migrated(config: &segmint::config::Config) -> Store {
    let store = Store::connect(config).unwrap();
    for (db, r) in store.cluster().migrate().await.results() {
        r.unwrap_or_else(|e| panic!("migrate {db}: {e}"));
    }
    store
}

/// One store's claims, as a holder machine would make them: what it wrote and saw.
struct Claimer<'a> {
    store: &'a Store,
    holder: &'static str,
    known: Vec<Option<i64>>,
    seen: Vec<Option<Seen>>,
    /// This claimer's clock: moved on by the test, never slept for.
    now: Duration,
    safeguards: Safeguards,
}

impl<'a> Claimer<'a> {
    fn new(store: &'a Store, holder: &'static str) -> Claimer<'a> {
        let members = store
            .cluster()
            .in_force()
            .expect("a layout done")
            .names
            .len();
        Claimer {
            store,
            holder,
            known: vec![None; members],
            seen: vec![None; members],
            now: Duration::ZERO,
            safeguards: Safeguards::ALL,
        }
    }

    /// A claim of `section` of `biz`, `step` above the highest bound read.
    async fn claim(&mut self, (biz, section): (&str, u32), step: i64) -> Outcome {
        let layout = self.store.cluster().in_force().expect("a layout done");
        let known = Known {
            versions: self.known.clone(),
            seen: self.seen.clone(),
            now: self.now,
            timing: TIMING,
        };
        let ask = Ask::hold(self.holder, step, layout.epoch);
        let mut claims = [SectionClaim {
            biz: biz.into(),
            section,
            claim: Claim::new(ask, known, self.safeguards),
        }];
        self.store
            .cluster()
            .run_claims(&layout, &mut claims, 3_000)
            .await;
        let [done] = claims;
        for (m, read) in done.claim.reads() {
            if let Read::Row(r) = read {
                self.seen[m] = Some(Seen::update(
                    self.seen[m].take(),
                    &r.holder,
                    r.version,
                    self.now,
                ));
            }
        }
        let segmint::sequence::claim::Need::Done(outcome) = done.claim.need() else {
            panic!("a claim run to its end");
        };
        if let Outcome::Owned { versions, .. } = &outcome {
            for (k, w) in self.known.iter_mut().zip(versions) {
                if w.is_some() {
                    *k = *w;
                }
            }
        }
        outcome
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_section_is_owned_once_raised_and_taken_over_above_its_bound() {
    let dbs = Databases::start(Kind::Postgres, 3);
    let config = dbs.config("");
    let (sa, sb) = (migrated(&config).await, migrated(&config).await);
    sa.refresh_since(std::time::Instant::now()).await;
    sb.refresh_since(std::time::Instant::now()).await;
    let (mut a, mut b) = (Claimer::new(&sa, "a"), Claimer::new(&sb, "b"));
    let chat = ("chat", 7);

    let (floor, bound, versions) = owned(&a.claim(chat, 100).await);
    assert_eq!((floor, bound), (0, 100));
    assert_eq!(versions, vec![Some(1); 3]);
    // Another store is refused while it has not seen the row unchanged long enough.
    assert_eq!(b.claim(chat, 100).await, Outcome::Held { by: "a".into() });
    b.now += TIMING.wait() - Duration::from_millis(1);
    assert_eq!(b.claim(chat, 100).await, Outcome::Held { by: "a".into() });
    // A raise: a step above the bound.
    let (floor, bound, _) = owned(&a.claim(chat, 100).await);
    assert_eq!((floor, bound), (100, 200));

    // One database down: a majority of three still raises.
    dbs.stop(2);
    let (_, bound, versions) = owned(&a.claim(chat, 100).await);
    assert_eq!(bound, 300);
    assert_eq!(versions[2], None, "{versions:?}");
    dbs.start_again(2);

    // Database 0's row set back to before (a restore from a backup): the store that
    // wrote it does not count it, and writes it up to the bound.
    dbs.sql(
        0,
        "UPDATE segmint_sequence_section SET version = 1, bound = 100 WHERE biz_type = 'chat'",
    );
    let raised = eventually_owned(&mut a).await;
    let (floor, bound, versions) = owned(&raised);
    assert_eq!((floor, bound), (300, 400), "{raised:?}");
    match &raised {
        Outcome::Owned { fenced, .. } => assert_eq!(fenced, &vec![0]),
        _ => unreachable!(),
    }
    assert_eq!(versions[0], Some(2), "the restored row written again");
    assert_eq!(
        dbs.sql(
            0,
            "SELECT bound FROM segmint_sequence_section WHERE biz_type = 'chat'"
        )
        .trim(),
        "400"
    );
    let (_, _, versions) = owned(&a.claim(chat, 0).await);
    assert!(
        versions.iter().all(Option::is_some),
        "counted again: {versions:?}"
    );

    // Store a stops claiming; store b takes the section once it has seen the rows
    // unchanged for the lease and the grace by its own clock, above every number a
    // could have answered.
    assert_eq!(b.claim(chat, 100).await, Outcome::Held { by: "a".into() });
    b.now += TIMING.wait();
    let (floor, bound, _) = owned(&b.claim(chat, 100).await);
    assert!(floor >= 400, "b starts at {floor}, below a's bound 400");
    assert_eq!(bound, floor + 100);
    assert_eq!(a.claim(chat, 100).await, Outcome::Held { by: "b".into() });
    // Sections are apart (what a claimer knows is of one section).
    let mut other = Claimer::new(&sb, "b");
    assert_eq!(owned(&other.claim(("chat", 8), 5).await).1, 5);
}

/// Claims until the section is owned, for at most 30 s (a database to answer again
/// after its restart).
async fn eventually_owned(claimer: &mut Claimer<'_>) -> Outcome {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let outcome = claimer.claim(("chat", 7), 100).await;
        if matches!(outcome, Outcome::Owned { .. }) || std::time::Instant::now() > deadline {
            return outcome;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two stores claiming one section at once, many times over, on each engine: never both
/// own it from one round of reads, and each bound owned is above the last.
async fn concurrent_claims_never_both_own(kind: Kind) {
    let dbs = Databases::start(kind, 1);
    let config = dbs.config("");
    let stores = [migrated(&config).await, migrated(&config).await];
    for store in &stores {
        store.refresh_since(std::time::Instant::now()).await;
    }
    let mut claimers = [Claimer::new(&stores[0], "x"), Claimer::new(&stores[1], "y")];
    // No lease to wait out: each takes the other's row at once.
    for c in &mut claimers {
        c.safeguards.lease = false;
    }
    let [x, y] = &mut claimers;
    let mut last = 0;
    for round in 0..20 {
        let (x, y) = tokio::join!(x.claim(("race", 0), 10), y.claim(("race", 0), 10));
        // Both may own in one round only one after the other: the later one above
        // the earlier one's bound.
        let mut owned: Vec<(i64, i64)> = [x, y]
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
