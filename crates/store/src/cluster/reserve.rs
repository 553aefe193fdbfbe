//! Reservation of segments: optimistic compare-and-set on a random live database,
//! hedged when one stalls, witnessed in the other databases before use.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use rand::seq::SliceRandom;

use super::Store;
use crate::biz::BizTag;
use crate::metrics::FetchOutcome;
use crate::segment::reserve::{Need, Outcome, Refusal, Reserve, Safeguards};
use crate::segment::{Residue, SegmentRange, Window, WindowMiss};
use crate::step::{StepHint, StepReason, StepRequest};
use crate::store::Clock;
use crate::store::catalog::overlap;
use crate::store::evidence::{self, Mark, Witness};
use crate::store::{DbError, Reclass, StoreError, Verdict};

/// The classes the catalog knows of a biz's rows, their layout epoch, and the window
/// of the row's IDs a reservation keeps to, if any.
type Known<'a> = (&'a [(usize, Residue)], i64, Option<Window>);

/// A segment reserved for a caller, and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    pub range: SegmentRange,
    /// Index of the database in the configuration.
    pub database: usize,
    /// Why the segment has its step.
    pub reason: StepReason,
    /// The row's version after the reservation: still this version later means
    /// nobody reserved from the row since.
    pub version: i64,
}

/// When the current database round trip of an attempt started, if one is under way,
/// by the store's clock.
struct RoundTrip {
    /// Microseconds since `epoch` at the start of the round trip; 0 when idle.
    since: std::sync::atomic::AtomicU64,
    epoch: Instant,
    clock: Arc<dyn Clock>,
}

impl RoundTrip {
    fn new(clock: &Arc<dyn Clock>) -> RoundTrip {
        RoundTrip {
            since: std::sync::atomic::AtomicU64::new(0),
            epoch: clock.now(),
            clock: clock.clone(),
        }
    }

    fn now_us(&self) -> u64 {
        u64::try_from(
            self.clock
                .now()
                .saturating_duration_since(self.epoch)
                .as_micros(),
        )
        .unwrap_or(u64::MAX)
        .max(1)
    }

    /// Runs one round trip, marked as under way meanwhile.
    async fn around<T>(&self, op: impl Future<Output = T>) -> T {
        self.since
            .store(self.now_us(), std::sync::atomic::Ordering::Relaxed);
        let out = op.await;
        self.since.store(0, std::sync::atomic::Ordering::Relaxed);
        out
    }

    /// How long the round trip under way has gone unanswered; zero when none is.
    fn stuck_for(&self) -> Duration {
        match self.since.load(std::sync::atomic::Ordering::Relaxed) {
            0 => Duration::ZERO,
            since => Duration::from_micros(self.now_us().saturating_sub(since)),
        }
    }
}

/// What one database answered to a reservation attempt.
enum Attempt {
    Reserved(Reservation),
    Missing,
    /// Every compare-and-set lost: other writers are busy on this row.
    Contended,
    /// The row is frozen by a layout change, or left in an earlier layout.
    Moving,
    /// The row's class is not the one the catalog knows: the catalog is read again.
    Stale,
    /// The biz cannot be served from this row; trying elsewhere will not help.
    Refused(StoreError),
    /// The row has no ID left in the window asked for: its period's counter is used up
    /// ([`WindowMiss::Full`]) or a later period has begun on it ([`WindowMiss::Passed`]).
    Window(WindowMiss),
}

/// What the attempts of one pass over the databases met, when none reserved.
#[derive(Default)]
struct Misses {
    /// The first refusal of the biz.
    refused: Option<StoreError>,
    /// Databases without the biz's row.
    missing: usize,
    /// Attempts that lost every race on the row.
    contended: usize,
    /// Rows frozen or moved by a layout change, or of a class the catalog does not know.
    moving: usize,
    /// Rows whose window's counter is used up.
    full: usize,
    /// Rows past the window.
    passed: usize,
    /// The failures, each naming its database.
    failed: Vec<String>,
}

/// Why nothing is served before a layout done is read.
pub(crate) const NO_MEMBERSHIP: &str = "no database is used yet: no layout done was read from the databases that answered (the cluster's membership is recorded in them by `segmint migrate`, which needs every configured database to answer)";

impl Store {
    /// Reserves the next segment of `biz` as [`Store::reserve_for`] does: with the
    /// row's own step, or with a `hint`, the step the policy chooses from it.
    ///
    /// # Errors
    /// As [`Store::reserve_for`].
    pub async fn reserve(
        &self,
        biz: &BizTag,
        hint: Option<StepHint>,
        runway: Option<Duration>,
    ) -> Result<Reservation, StoreError> {
        self.reserve_in(biz, hint, runway, None).await
    }

    /// [`Store::reserve`] within `window` of the row's IDs, if given: the one way to
    /// reserve for a biz whose counter restarts each period (one window a period).
    ///
    /// # Errors
    /// As [`Store::reserve_for`]; [`StoreError::PeriodFull`] when no database has an
    /// ID left in the window, [`StoreError::PeriodPassed`] when every database that
    /// answered is past it.
    pub async fn reserve_in(
        &self,
        biz: &BizTag,
        hint: Option<StepHint>,
        runway: Option<Duration>,
        window: Option<Window>,
    ) -> Result<Reservation, StoreError> {
        let request = hint.map_or(StepRequest::Row, StepRequest::Adaptive);
        self.reserve_windowed(biz, request, runway, window).await
    }

    /// Reserves the next segment of `biz` on a random live database, advancing its row
    /// by the step the [`StepPolicy`](crate::step::StepPolicy) gives `request`.
    /// `runway`: how long the caller's cache lasts without this segment, if known; a
    /// stalled database is then hedged in time for the segment to arrive before the
    /// cache runs dry (see `Store::hedge_delay`).
    ///
    /// # Errors
    /// [`StoreError`]: the biz is unknown, refused (overlapping or invalid rows),
    /// would overflow, or no database could be reached.
    pub async fn reserve_for(
        &self,
        biz: &BizTag,
        request: StepRequest,
        runway: Option<Duration>,
    ) -> Result<Reservation, StoreError> {
        self.reserve_windowed(biz, request, runway, None).await
    }

    /// [`Store::reserve_for`] within `window`, if given. A biz whose counter restarts
    /// each period is reserved for within a window only: a segment beyond one would
    /// take IDs of a later period.
    async fn reserve_windowed(
        &self,
        biz: &BizTag,
        request: StepRequest,
        runway: Option<Duration>,
        window: Option<Window>,
    ) -> Result<Reservation, StoreError> {
        let mut catalog = self.catalog();
        if catalog.biz(biz.as_str()).is_none() {
            catalog = self.look_up(biz.as_str(), None).await;
        }
        // Lost races are retried in passes over the databases until the fetch timeout:
        // a busy row slows a reservation down but does not fail it, nor does a layout
        // change moving the biz (the catalog is read again for its new classes).
        let deadline = self.dbs.clock.now() + self.dbs.timing.fetch_timeout;
        let reserved = loop {
            let entry = catalog
                .biz(biz.as_str())
                .ok_or_else(|| StoreError::NotFound(biz.to_string()))?;
            if let Some(refused) = &entry.refused {
                return Err(StoreError::clone(refused));
            }
            let periodic = entry.shape.as_ref().is_some_and(|s| s.period.is_some());
            if periodic && window.is_none() {
                return Err(StoreError::Periodic(biz.to_string()));
            }
            let hedge = self.hedge_delay(runway);
            let started = self.dbs.clock.now();
            match self
                .reserve_pass(
                    biz,
                    request,
                    (&entry.classes, entry.epoch, window),
                    deadline,
                    hedge,
                )
                .await
            {
                Err(StoreError::Contention(_)) if self.dbs.clock.now() < deadline => {
                    let pause = rand::rng().random_range(1..=5);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                Err(StoreError::Moving(_)) if self.dbs.clock.now() < deadline => {
                    catalog = self.refresh_since(started).await;
                }
                result => break result?,
            }
        };
        // A database found gone back in time (by this reservation or another) is
        // recorded as such before another segment is used.
        self.record_fences().await;
        let bound = self
            .hedge_delay(runway)
            .unwrap_or(self.dbs.timing.fetch_timeout);
        self.witness_reservation(biz, &reserved, bound).await;
        Ok(reserved)
    }

    /// Records the reservation `r` in the other reachable databases before its IDs are
    /// used, so that if its database later goes back in time, any server (also one
    /// started afterwards) finds the evidence. One witness is enough: this waits for
    /// the first database that records it, at most `bound` (a stalled database must not
    /// hold the segment back); the databases that miss it get it at a later catalog
    /// refresh.
    async fn witness_reservation(&self, biz: &BizTag, r: &Reservation, bound: Duration) {
        let max_id = r.range.max_id();
        let witness = [Witness {
            database: self.dbs.names[r.database].clone(),
            biz: biz.to_string(),
            mark: Mark {
                version: r.version,
                max_id,
                high_id: max_id,
            },
        }];
        let witness = &witness;
        let writes: Vec<_> = (0..self.dbs.list.len())
            .filter(|&k| k != r.database && self.dbs.is_reachable(k))
            .map(|k| Box::pin(self.dbs.list[k].store.witness(witness)))
            .collect();
        if writes.is_empty() {
            return;
        }
        match tokio::time::timeout(bound, futures_util::future::select_ok(writes)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(%biz, error = %e, "could not witness a reservation; retried at the next catalog refresh");
            }
            Err(_) => {
                tracing::warn!(%biz, ?bound, "no database witnessed a reservation in time; retried at the next catalog refresh");
            }
        }
    }

    /// One pass over the live databases in random order, stopping at the first that
    /// reserves a segment. Attempts run one at a time, except that when one has not
    /// answered within the hedge delay (a few times the usual reservation time) the
    /// next database is tried alongside it: a stalled database costs a request that
    /// delay, not the fetch timeout. The first reservation wins; attempts still running
    /// are dropped, and those that started before the winner count as failed (the
    /// database is backed off). A dropped attempt may still commit later: its segment
    /// is never used, so its IDs are lost, never issued twice.
    async fn reserve_pass(
        &self,
        biz: &BizTag,
        request: StepRequest,
        known: Known<'_>,
        deadline: Instant,
        hedge: Option<Duration>,
    ) -> Result<Reservation, StoreError> {
        use futures_util::StreamExt;
        let mut order: Vec<usize> = (0..self.dbs.list.len())
            .filter(|&i| self.dbs.is_live(i))
            .collect();
        order.shuffle(&mut rand::rng());
        let mut misses = Misses::default();
        // One round-trip tracker per database, declared before the attempts borrow them.
        let trips: Vec<RoundTrip> = (0..self.dbs.list.len())
            .map(|_| RoundTrip::new(&self.dbs.clock))
            .collect();
        let mut running = futures_util::stream::FuturesUnordered::new();
        let mut tried: Vec<usize> = Vec::new();
        let mut queue = order.into_iter();
        loop {
            if running.is_empty() {
                let Some(i) = queue.next() else { break };
                tried.push(i);
                running.push(self.attempt_on(i, biz, request, known, deadline, &trips[i]));
            }
            let outcome = match hedge {
                Some(hedge) if queue.len() > 0 => {
                    tokio::select! {
                        done = running.next() => done,
                        () = tokio::time::sleep(hedge / 4) => {
                            // The newest attempt is stuck in one round trip: try the
                            // next database alongside it.
                            let newest = tried[tried.len() - 1];
                            if trips[newest].stuck_for() >= hedge
                                && let Some(i) = queue.next()
                            {
                                tracing::debug!(biz = %biz, database = %self.dbs.list[i].name, "hedging a stalled reservation");
                                tried.push(i);
                                running.push(self.attempt_on(i, biz, request, known, deadline, &trips[i]));
                            }
                            continue;
                        }
                    }
                }
                _ => running.next().await,
            };
            let Some((i, result)) = outcome else { continue };
            match result {
                Ok(Attempt::Reserved(r)) => {
                    self.back_off_stalled(i, &tried, &trips, hedge);
                    return Ok(r);
                }
                Ok(Attempt::Missing) => misses.missing += 1,
                Ok(Attempt::Contended) => misses.contended += 1,
                Ok(Attempt::Moving | Attempt::Stale) => misses.moving += 1,
                Ok(Attempt::Window(WindowMiss::Full)) => misses.full += 1,
                Ok(Attempt::Window(WindowMiss::Passed)) => misses.passed += 1,
                Ok(Attempt::Refused(e @ StoreError::ResidueConflict { .. })) => return Err(e),
                Ok(Attempt::Refused(e)) => misses.refused = misses.refused.or(Some(e)),
                // A transaction that lost to another is a lost race: retried.
                Err(e) if e.verdict() == Verdict::Transient => misses.contended += 1,
                Err(e) => misses
                    .failed
                    .push(format!("\"{}\": {e}", self.dbs.list[i].name)),
            }
        }
        Err(self.pass_failed(biz, known.2, misses))
    }

    /// After database `i` reserved: backs off each other database of `tried` whose
    /// attempt, left behind and dropped, is stuck in a round trip of at least the
    /// `hedge` delay (its round trip in `trips`): the stalled databases.
    fn back_off_stalled(
        &self,
        i: usize,
        tried: &[usize],
        trips: &[RoundTrip],
        hedge: Option<Duration>,
    ) {
        for &db in tried {
            let stuck = trips[db].stuck_for();
            if db != i && hedge.is_some_and(|h| stuck >= h) {
                self.dbs.failed(
                    db,
                    &format!(
                        "no answer within {stuck:?} while database \"{}\" reserved",
                        self.dbs.list[i].name
                    ),
                );
                self.dbs.list[db].metrics.outcome(FetchOutcome::Error);
            }
        }
    }

    /// Why a pass over the databases reserved nothing of `biz` (within `window`, if
    /// given), from what its attempts met (`misses`): a refusal first, then a row
    /// moving or contended (both retried), then the window passed or used up, the biz
    /// missing, and last the databases unavailable.
    fn pass_failed(&self, biz: &BizTag, window: Option<Window>, misses: Misses) -> StoreError {
        let Misses {
            refused,
            missing,
            contended,
            moving,
            full,
            passed,
            failed,
        } = misses;
        if let Some(e) = refused {
            e
        } else if moving > 0 {
            StoreError::Moving(biz.to_string())
        } else if contended > 0 {
            StoreError::Contention(biz.to_string())
        } else if passed > 0 && failed.is_empty() {
            StoreError::PeriodPassed(biz.to_string())
        } else if full > 0 && failed.is_empty() {
            let (period, modulus) = self.period_named(biz, window);
            StoreError::PeriodFull {
                biz: biz.to_string(),
                period,
                modulus,
            }
        } else if missing > 0 && failed.is_empty() {
            StoreError::NotFound(biz.to_string())
        } else if failed.is_empty() && self.dbs.membership().epoch.is_none() {
            StoreError::Unavailable(NO_MEMBERSHIP.to_owned())
        } else if failed.is_empty() {
            StoreError::Unavailable(format!(
                "every database is backing off after failures ({})",
                self.dbs.last_errors()
            ))
        } else {
            StoreError::Unavailable(failed.join("; "))
        }
    }

    /// How long one round trip may go unanswered before another database is tried
    /// alongside it: four times the recent reservation time, at least the configured
    /// `hedge_after` (`None`: hedging is off), at most half the fetch timeout. When the
    /// caller's cache has less `runway` than that, half the runway instead, so that
    /// the other database's answer still comes before the cache is empty; never less
    /// than twice the recent reservation time or
    /// [`Protocol::min_hedge`](crate::config::Protocol::min_hedge), so that a merely
    /// busy database is not hedged on every fetch.
    fn hedge_delay(&self, runway: Option<Duration>) -> Option<Duration> {
        let least = self.dbs.timing.hedge_after?;
        let usual = self.dbs.usual_fetch();
        let delay = (usual * 4).clamp(least, (self.dbs.timing.fetch_timeout / 2).max(least));
        Some(match runway {
            Some(runway) => delay.min((runway / 2).max(usual * 2).max(self.dbs.protocol.min_hedge)),
            None => delay,
        })
    }

    /// One reservation attempt on database `i`, queued behind this process's other
    /// reservations of `biz` there, measured and counted.
    async fn attempt_on(
        &self,
        i: usize,
        biz: &BizTag,
        request: StepRequest,
        known: Known<'_>,
        deadline: Instant,
        trip: &RoundTrip,
    ) -> (usize, Result<Attempt, DbError>) {
        let lock = self.dbs.list[i]
            .reserving
            .lock()
            .entry(biz.clone())
            .or_default()
            .clone();
        let Ok(_queued) = tokio::time::timeout_at(deadline.into(), lock.lock()).await else {
            return (i, Ok(Attempt::Contended));
        };
        let started = self.dbs.clock.now();
        let result = self
            .dbs
            .call(i, self.attempt(i, biz, request, known, trip))
            .await;
        let took = self.dbs.clock.now().saturating_duration_since(started);
        let db = &self.dbs.list[i].metrics;
        db.observe(took);
        match &result {
            Ok(Attempt::Reserved(_)) => {
                db.outcome(FetchOutcome::Ok);
                self.dbs.note_fetch(took);
            }
            Ok(Attempt::Missing | Attempt::Refused(_) | Attempt::Window(_)) => {
                db.outcome(FetchOutcome::Refused)
            }
            // Each lost compare-and-set was counted as it happened.
            Ok(Attempt::Contended | Attempt::Moving | Attempt::Stale) => {}
            Err(e) if e.verdict() == Verdict::Transient => db.outcome(FetchOutcome::Conflict),
            Err(_) => db.outcome(FetchOutcome::Error),
        }
        (i, result)
    }

    /// One optimistic reservation on database `i`: the core's machine
    /// ([`Reserve`]) carried out on the database's engine.
    async fn attempt(
        &self,
        i: usize,
        biz: &BizTag,
        request: StepRequest,
        (known, epoch, window): Known<'_>,
        trip: &RoundTrip,
    ) -> Result<Attempt, DbError> {
        let db = &self.dbs.list[i];
        let mut machine = Reserve::new(i, known, epoch, window, Safeguards::ALL);
        let outcome = loop {
            match machine.need() {
                Need::Read => {
                    // Against what was known before the read: see `refresh_since`.
                    let seen = self.view.evidence.lock().mark(i, biz.as_str());
                    let row = trip.around(db.store.biz(biz.as_str())).await?;
                    machine.read(row.as_ref().map(|r| (Reclass::of(r), r.step)), seen);
                }
                Need::Learn(mark) => {
                    self.view.evidence.lock().learn(i, biz.as_str(), mark);
                    machine.learned();
                }
                Need::Step {
                    row_step,
                    delta,
                    room,
                } => machine.stepped(self.policy.for_request(row_step, delta, request, room)),
                Need::Advance {
                    version,
                    max_id,
                    to,
                } => {
                    let updated = trip
                        .around(db.store.advance(biz.as_str(), version, max_id, to))
                        .await?;
                    if updated.is_none() {
                        db.metrics.outcome(FetchOutcome::Conflict);
                    }
                    machine.advanced(updated.as_ref().map(Reclass::of));
                }
                Need::Done(outcome) => break outcome,
            }
        };
        let refused = |e| Ok(Attempt::Refused(e));
        let invalid = |reason: String| {
            refused(StoreError::InvalidRow {
                biz: biz.to_string(),
                database: db.name.clone(),
                reason,
            })
        };
        match outcome {
            Outcome::Reserved {
                range,
                version,
                choice,
            } => Ok(Attempt::Reserved(Reservation {
                range,
                database: i,
                reason: choice.reason,
                version,
            })),
            Outcome::Missing => Ok(Attempt::Missing),
            Outcome::Contended => Ok(Attempt::Contended),
            Outcome::Moving => Ok(Attempt::Moving),
            Outcome::Stale => Ok(Attempt::Stale),
            Outcome::Window(miss) => Ok(Attempt::Window(miss)),
            Outcome::Behind { row, known } => {
                let regression = evidence::Regression::at(biz.as_str(), &row, known);
                self.dbs.fence(i, &regression);
                Err(DbError::Fenced {
                    reason: regression.to_string(),
                })
            }
            Outcome::Refused(Refusal::Invalid(e)) => invalid(e.to_string()),
            Outcome::Refused(Refusal::Overlap(a, b)) => {
                refused(overlap(biz.as_str(), &self.dbs.names, (a, b)))
            }
            Outcome::Refused(Refusal::StepBelowDelta { step, delta }) => invalid(format!(
                "step {step} is smaller than delta {delta}: a segment could hold no ID"
            )),
            Outcome::Refused(Refusal::Overflow { max_id, step }) => refused(StoreError::Overflow {
                biz: biz.to_string(),
                database: db.name.clone(),
                max_id,
                step,
            }),
            Outcome::Refused(Refusal::ClassChanged(r)) => {
                invalid(format!("class changed to {r} during a reservation"))
            }
        }
    }
}

impl Store {
    /// The period `window` belongs to, as people write it, and the counter's modulus,
    /// from the biz's shape (a placeholder if the catalog has lost it meanwhile).
    fn period_named(&self, biz: &BizTag, window: Option<Window>) -> (String, i64) {
        let shape = self.with_catalog(|c| c.shape_of(biz.as_str())).flatten();
        match (shape.as_ref().and_then(|s| s.period.as_ref()), window) {
            (Some(p), Some(w)) => (p.label(w.ceiling.div_euclid(p.modulus())), p.modulus()),
            _ => ("(unknown)".into(), 0),
        }
    }
}
