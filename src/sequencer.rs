//! This server's part in serving sequence bizs: it carries out what the core's holder
//! machines decide (`segmint_core::sequence::holder` for each section,
//! `presence` for the servers taking part) and keeps each key's number in memory.
//!
//! Every change of a section's ownership or bound is one claim, carried out by the
//! store's handle on the cluster
//! ([`Cluster::run_claims`](segmint_store::Cluster::run_claims)): a takeover, a raise,
//! a renewal (a step of 0) and a release. The rules that make every key's numbers go up across owners (a bound
//! written before it is answered, a deadline by this server's clock, a row taken only
//! once seen unchanged for the lease and the grace, one claim of a section at a time)
//! are the machines', in the core, where the model checker runs them too. This module
//! holds the locks and the rounds: a plain mutex per section, held to take numbers or
//! to ask the machine, never across an await; a claim in flight is waited for on the
//! section's `ended` notification.
//!
//! Every quarter lease, a round reads every section row on every member database (one
//! statement each), lets each machine see what it read, and carries out what they
//! decide (presence, renewals, raises, takes, releases) with one batch of writes per
//! database.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use crate::config::SequencesConfig;
use crate::metrics::{SequenceCounters, SequenceHeld, SequenceMetrics};
use crate::sequence::claim::{Claim, Need, Outcome, Read};
use crate::sequence::counters::{Taken, fragment_of};
use crate::sequence::holder::{Answer, Assigned, Plan, Safeguards, Section, Settings, Settled};
use crate::sequence::presence::{Presence, SERVERS, assign};
use crate::sequence::{key_hash, section_of};
use crate::shape::SequenceShape;
use crate::store::{InForce, SectionClaim, SectionRows, Store};

pub use crate::sequence::holder::{Elsewhere, address_of};
pub use crate::sequence::presence::MAX_SERVERS;

/// Claims a request makes before it gives up: a raise or a takeover per pass; more
/// than a few means the section is contested or the databases are failing.
const PASSES: usize = 4;

/// One sequence biz as this server serves it.
pub struct SequenceBiz {
    name: String,
    shape: SequenceShape,
    sections: Vec<SectionCell>,
    /// The servers last seen and which of them should own each section.
    assigned: RwLock<(Arc<Vec<String>>, Vec<String>)>,
    counters: SequenceCounters,
}

impl SequenceBiz {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn shape(&self) -> SequenceShape {
        self.shape
    }

    /// The section of `key` and its fragment there.
    pub fn place(&self, key: &str) -> (u32, u32) {
        let hash = key_hash(key);
        (section_of(hash, self.shape.sections), fragment_of(hash))
    }
}

struct SectionCell {
    /// Plain mutex: held to take numbers or ask the machine, never across an await.
    state: Mutex<Section>,
    /// Told whenever a claim of the section ends.
    ended: tokio::sync::Notify,
}

/// Ends a claim begun on a section if its future is dropped before it settled (a
/// request whose client went away): the section takes claims again.
struct Flight<'a> {
    cell: &'a SectionCell,
    settled: bool,
}

impl Flight<'_> {
    fn settled(mut self) {
        self.settled = true;
    }
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.cell.state.lock().abort();
        }
        self.cell.ended.notify_waiters();
    }
}

/// This server's sequences.
pub struct Sequencer {
    store: Arc<Store>,
    config: SequencesConfig,
    /// Where others reach this server (`http://host:port`).
    address: String,
    /// This process as written in the rows (the address and a nonce, so that a
    /// restarted server waits out the leases of its earlier self), the leases' timing.
    settings: Settings,
    /// The origin of the machines' clock: the store's monotonic clock less this.
    origin: Instant,
    /// Plain lock: read on every request, written when a biz is first seen.
    bizs: RwLock<HashMap<String, Arc<SequenceBiz>>>,
    /// The catalog generation the bizs were last listed from.
    listed: AtomicU64,
    /// The addresses of the live servers, sorted, this one among them.
    members: RwLock<Arc<Vec<String>>>,
    /// This server's presence slot and what it saw of the others'. Plain mutex: held
    /// to ask the machine, never across an await (one round at a time holds a claim).
    presence: Mutex<Presence>,
    /// Whether this server takes part (until its graceful stop).
    joined: AtomicBool,
    metrics: SequenceMetrics,
}

impl Sequencer {
    /// A sequencer that owns nothing yet; [`Sequencer::run`] takes part in the cluster.
    pub fn new(store: Arc<Store>, config: SequencesConfig, address: String) -> Sequencer {
        let holder = format!("{address}#{:08x}", rand::random::<u32>());
        let members = Arc::new(vec![address.clone()]);
        let timing = crate::lease::Timing::new(config.lease, config.grace);
        Sequencer {
            origin: store.now(),
            store: store.clone(),
            config,
            address,
            settings: Settings {
                holder,
                timing,
                safeguards: Safeguards::ALL,
            },
            bizs: RwLock::new(HashMap::new()),
            listed: AtomicU64::new(u64::MAX),
            members: RwLock::new(members),
            presence: Mutex::new(Presence::default()),
            joined: AtomicBool::new(true),
            metrics: store.metrics().sequence().clone(),
        }
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    /// The machines' clock: monotonic, since this sequencer was made.
    fn now(&self) -> Duration {
        self.store.now().saturating_duration_since(self.origin)
    }

    fn lease_ms(&self) -> i64 {
        i64::try_from(self.config.lease.as_millis()).unwrap_or(i64::MAX)
    }

    /// Counts a request of `biz` sent on to the owner of its key's section.
    pub fn note_forwarded(&self, biz: &SequenceBiz) {
        biz.counters.forwarded.inc();
    }

    /// The sequence biz `name` of shape `shape`, as this server serves it.
    pub fn biz(&self, name: &str, shape: SequenceShape) -> Arc<SequenceBiz> {
        if let Some(biz) = self.bizs.read().get(name).filter(|b| b.shape == shape) {
            return biz.clone();
        }
        let mut bizs = self.bizs.write();
        let biz = bizs
            .entry(name.to_owned())
            .or_insert_with(|| new_biz(name, shape, &self.metrics));
        if biz.shape != shape {
            // A biz removed and added again with another shape: start over.
            *biz = new_biz(name, shape, &self.metrics);
        }
        biz.clone()
    }

    /// The next `count` numbers of `key`, if this server owns its section (claiming it
    /// when it should be this server's, raising its bound when the numbers pass it).
    ///
    /// # Errors
    /// [`Elsewhere`]: another server owns the section, a change carries it, or no
    /// claim could be made.
    pub async fn next(&self, biz: &SequenceBiz, key: &str, count: i64) -> Result<Taken, Elsewhere> {
        let (section, fragment) = biz.place(key);
        let taken = self
            .answer(biz, section, |state, now, assigned| {
                state.next(
                    &self.settings,
                    now,
                    (fragment, count),
                    biz.shape.step,
                    assigned,
                )
            })
            .await?;
        biz.counters.numbers.inc_by(count.unsigned_abs());
        Ok(taken)
    }

    /// The number `key` is at: at or above every number answered for it, below every
    /// number answered next.
    ///
    /// # Errors
    /// As [`Sequencer::next`].
    pub async fn current(&self, biz: &SequenceBiz, key: &str) -> Result<i64, Elsewhere> {
        let (section, fragment) = biz.place(key);
        self.answer(biz, section, |state, now, assigned| {
            state.current(&self.settings, now, fragment, assigned)
        })
        .await
    }

    /// Asks `section`'s machine with `ask` until it answers, carrying out the claims
    /// it asks for and waiting for those in flight.
    async fn answer<T>(
        &self,
        biz: &SequenceBiz,
        section: u32,
        ask: impl Fn(&mut Section, Duration, Assigned) -> Answer<T>,
    ) -> Result<T, Elsewhere> {
        let cell = &biz.sections[section as usize];
        for _ in 0..PASSES {
            let ended = cell.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let desired = self.desired(biz, section);
            let answer = ask(&mut cell.state.lock(), self.now(), self.assigned(&desired));
            match answer {
                Answer::Ready(value) => return Ok(value),
                Answer::Elsewhere(e) => return Err(e),
                Answer::Wait => {
                    let _ = tokio::time::timeout(self.config.lease, ended).await;
                }
                Answer::Claim(plan) => self.claim(biz, section, plan).await?,
            }
        }
        Err(Elsewhere::Unavailable { answered: 0 })
    }

    fn assigned<'a>(&self, desired: &'a str) -> Assigned<'a> {
        match desired {
            "" => Assigned::Nobody,
            d if d == self.address => Assigned::Me,
            d => Assigned::Other(d),
        }
    }

    /// Carries out the claim `plan` of `section`, unless one is in flight or the
    /// section changed since the plan was made (the caller looks again).
    async fn claim(&self, biz: &SequenceBiz, section: u32, plan: Plan) -> Result<(), Elsewhere> {
        let layout = self.layout()?;
        let cell = &biz.sections[section as usize];
        let now = self.now();
        let begun = cell
            .state
            .lock()
            .begin(&self.settings, plan, now, &layout.names, layout.epoch);
        let Some(claim) = begun else {
            return Ok(());
        };
        let flight = Flight {
            cell,
            settled: false,
        };
        let mut claims = [SectionClaim {
            biz: biz.name.clone(),
            section,
            claim,
        }];
        self.store
            .cluster()
            .run_claims(&layout, &mut claims, self.lease_ms())
            .await;
        let [done] = claims;
        let settled = self.settle(biz, &layout, done);
        flight.settled();
        match settled {
            Settled::Elsewhere(e) => Err(e),
            _ => Ok(()),
        }
    }

    /// The layout whose members hold the sections.
    fn layout(&self) -> Result<InForce, Elsewhere> {
        self.store
            .cluster()
            .in_force()
            .ok_or(Elsewhere::Unavailable { answered: 0 })
    }

    /// Takes in what a claim of `biz` came to.
    fn settle(&self, biz: &SequenceBiz, layout: &InForce, done: SectionClaim) -> Settled {
        self.note_fenced(layout, &done);
        let cell = &biz.sections[done.section as usize];
        let settled =
            cell.state
                .lock()
                .settle(&self.settings, &done.claim, &layout.names, self.now());
        if settled == (Settled::Held { taken: true }) {
            biz.counters.taken.inc();
        }
        settled
    }

    /// Logs the members whose row a claim found below what this server had written.
    fn note_fenced(&self, layout: &InForce, done: &SectionClaim) {
        if let Need::Done(Outcome::Owned { fenced, .. } | Outcome::Unavailable { fenced, .. }) =
            done.claim.need()
        {
            for m in fenced {
                self.store
                    .cluster()
                    .note_fenced_section(&layout.names[m], &done.biz, done.section);
            }
        }
    }

    /// The server to ask for `key`'s numbers, as last seen: this one while it answers
    /// the key's section, else the owner seen, else the server it is assigned to;
    /// `None` when none is known.
    pub fn owner(&self, biz: &SequenceBiz, key: &str) -> Option<String> {
        let (section, _) = biz.place(key);
        let seen = biz.sections[section as usize]
            .state
            .lock()
            .owner(&self.settings, self.now());
        seen.or_else(|| Some(self.desired(biz, section)).filter(|d| !d.is_empty()))
    }

    /// Each section's owner as last seen (this server's address for its own).
    pub fn owners(&self, biz: &SequenceBiz) -> Vec<Option<String>> {
        let now = self.now();
        biz.sections
            .iter()
            .map(|cell| cell.state.lock().owner(&self.settings, now))
            .collect()
    }

    /// What this server holds of each sequence biz it knows, by name.
    pub fn held(&self) -> Vec<(Arc<SequenceBiz>, SequenceHeld)> {
        let now = self.now();
        let mut bizs: Vec<Arc<SequenceBiz>> = self.bizs.read().values().cloned().collect();
        bizs.sort_by(|a, b| a.name.cmp(&b.name));
        bizs.into_iter()
            .map(|biz| {
                let mut held = SequenceHeld::default();
                for cell in &biz.sections {
                    if let Some((keys, bytes)) = cell.state.lock().held(now) {
                        held.sections += 1;
                        held.keys += keys;
                        held.bytes += bytes;
                    }
                }
                (biz, held)
            })
            .collect()
    }

    /// Sets the gauges of every sequence biz to what this server holds of it (the bizs
    /// listed anew first, so that a biz has its series from the first scrape on).
    pub fn set_gauges(&self) {
        self.list_bizs();
        for (biz, held) in self.held() {
            self.metrics.set_held(&biz.name, held);
        }
    }

    /// The live servers as last read, this one among them.
    pub fn servers(&self) -> Vec<String> {
        self.members.read().as_ref().clone()
    }

    /// The server that should own `section` of `biz`, by [`assign`] over the live
    /// servers (worked out again when they change); empty once this server stopped
    /// taking part.
    fn desired(&self, biz: &SequenceBiz, section: u32) -> String {
        let members = self.members.read().clone();
        {
            let assigned = biz.assigned.read();
            if Arc::ptr_eq(&assigned.0, &members) {
                return assigned
                    .1
                    .get(section as usize)
                    .cloned()
                    .unwrap_or_default();
            }
        }
        let owners = assign(&members, &biz.name, biz.shape.sections);
        let owner = owners.get(section as usize).cloned().unwrap_or_default();
        *biz.assigned.write() = (members, owners);
        owner
    }

    /// Takes part in the cluster until dropped: a round every quarter lease.
    pub async fn run(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.config.renew_every());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.round().await;
        }
    }

    /// One round: every section row read on every member, the presence and every
    /// sequence biz's sections decided on, their claims carried out together. Nothing
    /// before the server's first catalog read: the layout's members are not known yet.
    pub async fn round(&self) {
        if !self.store.with_catalog(|c| c.is_read()) {
            return;
        }
        let Some(layout) = self.store.cluster().in_force() else {
            return;
        };
        // Claims begun this round count their leases from before the read.
        let started = self.now();
        let rows = self.store.cluster().read_sections(&layout).await;
        let now = self.now();
        self.list_bizs();
        let bizs: Vec<Arc<SequenceBiz>> = self.bizs.read().values().cloned().collect();
        let mut claims = Vec::new();
        let slot = self.observe_presence(&layout, &rows, (started, now), &mut claims);
        let joined = self.joined.load(Ordering::SeqCst);
        *self.members.write() = Arc::new(self.presence.lock().members(&self.settings, now, joined));
        let mut flights = Vec::new();
        for biz in &bizs {
            for s in 0..biz.shape.sections {
                let desired = self.desired(biz, s);
                let cell = &biz.sections[s as usize];
                let mut state = cell.state.lock();
                observe(&mut state, &layout, &rows, (&biz.name, s), now);
                let plan = state.decide(
                    &self.settings,
                    now,
                    biz.shape.step,
                    layout.epoch,
                    self.assigned(&desired),
                );
                let claim = plan.and_then(|plan| {
                    state.begin(&self.settings, plan, started, &layout.names, layout.epoch)
                });
                drop(state);
                if let Some(mut claim) = claim {
                    answer_reads(&mut claim, &rows, (&biz.name, s));
                    flights.push((
                        biz.clone(),
                        Flight {
                            cell,
                            settled: false,
                        },
                    ));
                    claims.push(SectionClaim {
                        biz: biz.name.clone(),
                        section: s,
                        claim,
                    });
                }
            }
        }
        self.store
            .cluster()
            .run_claims(&layout, &mut claims, self.lease_ms())
            .await;
        let mut claims = claims.into_iter();
        if let Some(slot) = slot
            && let Some(done) = claims.next()
        {
            self.note_fenced(&layout, &done);
            let settled = self.presence.lock().settle(
                &self.settings,
                slot,
                &done.claim,
                &layout.names,
                self.now(),
            );
            tracing::debug!(slot, ?settled, "presence");
        }
        for (done, (biz, flight)) in claims.zip(flights) {
            self.settle(&biz, &layout, done);
            flight.settled();
        }
    }

    /// Lets the presence see the slots' rows, and begins the claim of its slot the
    /// round makes (pushed first onto `claims`).
    fn observe_presence(
        &self,
        layout: &InForce,
        rows: &[Option<SectionRows>],
        (started, now): (Duration, Duration),
        claims: &mut Vec<SectionClaim>,
    ) -> Option<u32> {
        let mut presence = self.presence.lock();
        for slot in 0..presence.slots() {
            for (m, db) in layout.names.iter().enumerate() {
                if let Some(Some(rows)) = rows.get(m) {
                    presence.observe(db, slot, rows.get(&(SERVERS.to_owned(), slot)), now);
                }
            }
        }
        if !self.joined.load(Ordering::SeqCst) {
            return None;
        }
        let plan = presence.plan(&self.settings, now)?;
        let mut claim =
            presence.begin(&self.settings, plan, started, &layout.names, layout.epoch)?;
        answer_reads(&mut claim, rows, (SERVERS, plan.0));
        claims.push(SectionClaim {
            biz: SERVERS.to_owned(),
            section: plan.0,
            claim,
        });
        Some(plan.0)
    }

    /// Lists the sequence bizs anew when the catalog changed.
    fn list_bizs(&self) {
        let (generation, found) = self.store.with_catalog(|c| {
            let generation = c.generation();
            match self.listed.load(Ordering::Relaxed) == generation {
                true => (generation, None),
                false => (generation, Some(c.sequence_bizs())),
            }
        });
        if let Some(found) = found {
            for (name, shape) in found {
                self.biz(&name, shape);
            }
            self.listed.store(generation, Ordering::Relaxed);
        }
    }

    /// Ends this server's leases (presence first, so that no other server waits for
    /// it), at a graceful stop: its sections are free at once for the others.
    pub async fn release_all(&self) {
        self.joined.store(false, Ordering::SeqCst);
        *self.members.write() = Arc::new(Vec::new());
        let Some(layout) = self.store.cluster().in_force() else {
            return;
        };
        let now = self.now();
        let mut claims = Vec::new();
        {
            let mut presence = self.presence.lock();
            if let Some(leave) = presence.leave()
                && let Some(claim) =
                    presence.begin(&self.settings, leave, now, &layout.names, layout.epoch)
            {
                claims.push(SectionClaim {
                    biz: SERVERS.to_owned(),
                    section: leave.0,
                    claim,
                });
            }
        }
        let bizs: Vec<Arc<SequenceBiz>> = self.bizs.read().values().cloned().collect();
        for biz in &bizs {
            for s in 0..biz.shape.sections {
                let mut state = biz.sections[s as usize].state.lock();
                let plan = state.decide(
                    &self.settings,
                    now,
                    biz.shape.step,
                    layout.epoch,
                    Assigned::Nobody,
                );
                if let Some(claim) = plan.and_then(|plan| {
                    state.begin(&self.settings, plan, now, &layout.names, layout.epoch)
                }) {
                    claims.push(SectionClaim {
                        biz: biz.name.clone(),
                        section: s,
                        claim,
                    });
                }
            }
        }
        self.store
            .cluster()
            .run_claims(&layout, &mut claims, 0)
            .await;
    }
}

/// Lets `state` see its rows of `(biz, section)` in `rows`, read on each member.
fn observe(
    state: &mut Section,
    layout: &InForce,
    rows: &[Option<SectionRows>],
    (biz, section): (&str, u32),
    now: Duration,
) {
    let key = (biz.to_owned(), section);
    for (m, db) in layout.names.iter().enumerate() {
        if let Some(Some(rows)) = rows.get(m) {
            state.observe(db, rows.get(&key), now);
        }
    }
}

/// Answers `claim`'s reads with the round's `rows` of `(biz, section)`: a member that
/// did not answer the round's read is down.
fn answer_reads(claim: &mut Claim, rows: &[Option<SectionRows>], (biz, section): (&str, u32)) {
    let key = (biz.to_owned(), section);
    if let Need::Read(ms) = claim.need() {
        for m in ms {
            let read = match rows.get(m) {
                Some(Some(rows)) => rows.get(&key).cloned().map_or(Read::Absent, Read::Row),
                _ => Read::Down,
            };
            claim.read(m, read);
        }
    }
}

fn new_biz(name: &str, shape: SequenceShape, metrics: &SequenceMetrics) -> Arc<SequenceBiz> {
    Arc::new(SequenceBiz {
        name: name.to_owned(),
        shape,
        counters: metrics.counters(name),
        assigned: RwLock::new((Arc::new(Vec::new()), Vec::new())),
        sections: (0..shape.sections)
            .map(|_| SectionCell {
                state: Mutex::new(Section::default()),
                ended: tokio::sync::Notify::new(),
            })
            .collect(),
    })
}

/// The route table of a biz, with a version that changes whenever an owner does.
pub fn route_version(owners: &[Option<String>]) -> String {
    let joined: String = owners
        .iter()
        .map(|o| o.as_deref().unwrap_or("-"))
        .collect::<Vec<_>>()
        .join("\n");
    format!("{:016x}", key_hash(&joined))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_version_changes_with_an_owner() {
        let a = route_version(&[Some("x".into()), None]);
        assert_eq!(a, route_version(&[Some("x".into()), None]));
        assert_ne!(a, route_version(&[Some("y".into()), None]));
    }
}
