//! This server's part in serving sequence bizs: the sections it owns, each key's number
//! in memory, and the round that keeps the sections owned, spread and moving.
//!
//! Every change of a section's ownership or bound is one claim
//! ([`Store::claim_section`], the core's `sequence::claim` machine): a takeover, a
//! raise, a renewal (a step of 0) and a release (a lease of 0). Three rules make every
//! key's numbers go up across owners:
//! - **Bound.** An owner answers a number only at or below a bound its own claim wrote
//!   to the databases; a claim starts above the highest bound it read.
//! - **Deadline.** An owner answers only until its lease, counted from the start of
//!   the claim that gave it (before its reads) less a tenth, has run out by its own
//!   clock; another server takes the section only once the lease ran out, plus the
//!   grace, by the database's clock, which began counting later.
//! - **Single flight.** A section's claims run one at a time (its `claiming` lock), so
//!   a raise is never sent twice and a renewal never races a release.
//!
//! Which server should own a section is decided by rendezvous hashing over the live
//! servers: each server holds a presence slot, a section of the pseudo-biz
//! [`SERVERS`] claimed like any other. A server that sees a section it owns assigned to
//! another live server stops answering it and releases it; the other takes it once the
//! grace has passed. So sections spread evenly, and move back when a server joins.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use parking_lot::{Mutex, RwLock};

use crate::config::SequencesConfig;
use crate::metrics::{SequenceCounters, SequenceHeld, SequenceMetrics};
use crate::sequence::claim::{Outcome, SectionRow};
use crate::sequence::counters::{Counters, Taken, fragment_of};
use crate::sequence::{key_hash, section_of};
use crate::shape::SequenceShape;
use crate::store::{SectionClaim, Store};

/// The pseudo-biz whose sections are the servers' presence slots: not a valid biz
/// name, so no biz's sections share its rows.
pub const SERVERS: &str = "#servers";

/// How many servers may serve sequences at once (presence slots).
pub const MAX_SERVERS: u32 = 64;

/// Why a number was not answered here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Elsewhere {
    /// Another server owns the section (or should): its address, if known.
    Owner(Option<String>),
    /// No claim could be made: fewer than a majority of the databases answered.
    Unavailable(String),
    /// The section's bound cannot be raised: its numbers are used up.
    Exhausted,
}

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
    /// Plain mutex: held to take numbers or change the state, never across an await.
    state: Mutex<Section>,
    /// Held across a claim of the section: one at a time.
    claiming: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Section {
    owned: Option<Owned>,
    /// The address of the server that owns the section, as last seen.
    owner: Option<String>,
    /// The versions this server's claims wrote last, one per member database.
    known: Vec<Option<i64>>,
}

struct Owned {
    counters: Counters,
    /// No number is answered from then on, unless a renewal moved it.
    deadline: Instant,
}

/// What a round decided for one section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Claim it with this step (0: renew the lease only).
    Claim(i64),
    /// Stop answering it and end its lease: another server should own it.
    Release,
}

/// This server's sequences.
pub struct Sequencer {
    store: Arc<Store>,
    config: SequencesConfig,
    /// Where others reach this server (`http://host:port`).
    address: String,
    /// This process, as written in the rows: the address and a nonce, so that a
    /// restarted server waits out the leases of its earlier self.
    holder: String,
    /// Plain lock: read on every request, written when a biz is first seen.
    bizs: RwLock<HashMap<String, Arc<SequenceBiz>>>,
    /// The catalog generation the bizs were last listed from.
    listed: AtomicU64,
    /// The addresses of the live servers, sorted, this one among them.
    members: RwLock<Arc<Vec<String>>>,
    /// This server's presence slot and the versions its claims wrote.
    presence: tokio::sync::Mutex<Presence>,
    metrics: SequenceMetrics,
}

#[derive(Default)]
struct Presence {
    slot: Option<u32>,
    known: Vec<Option<i64>>,
}

/// The address part of a holder (`address#nonce`).
pub fn address_of(holder: &str) -> &str {
    holder.rsplit_once('#').map_or(holder, |(a, _)| a)
}

impl Sequencer {
    /// A sequencer that owns nothing yet; [`Sequencer::run`] takes part in the cluster.
    pub fn new(store: Arc<Store>, config: SequencesConfig, address: String) -> Sequencer {
        let holder = format!("{address}#{:08x}", rand::random::<u32>());
        let members = Arc::new(vec![address.clone()]);
        Sequencer {
            store: store.clone(),
            config,
            address,
            holder,
            bizs: RwLock::new(HashMap::new()),
            listed: AtomicU64::new(u64::MAX),
            members: RwLock::new(members),
            presence: tokio::sync::Mutex::new(Presence::default()),
            metrics: store.metrics().sequence().clone(),
        }
    }

    pub fn address(&self) -> &str {
        &self.address
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

    /// The next `count` numbers of `key`, if this server owns its section. Waits for a
    /// raise of the section's bound when the numbers pass it, and claims a section that
    /// should be this server's and is free.
    ///
    /// # Errors
    /// [`Elsewhere`]: another server owns the section, or no claim could be made.
    pub async fn next(&self, biz: &SequenceBiz, key: &str, count: i64) -> Result<Taken, Elsewhere> {
        let (section, fragment) = biz.place(key);
        let cell = &biz.sections[section as usize];
        // A raise or a takeover per pass; more than a few means the section is
        // contested or the databases are failing.
        for _ in 0..4 {
            let seen = {
                let mut state = cell.state.lock();
                let now = self.store.now();
                match &mut state.owned {
                    Some(o) if now < o.deadline => match o.counters.take(fragment, count) {
                        Some(taken) => {
                            biz.counters.numbers.inc_by(count.unsigned_abs());
                            return Ok(taken);
                        }
                        None => Some(o.counters.bound()),
                    },
                    _ => {
                        state.owned = None;
                        let desired = self.desired(biz, section);
                        if desired != self.address {
                            return Err(Elsewhere::Owner(self.hint(&state, desired)));
                        }
                        None
                    }
                }
            };
            let step = biz.shape.step.max(count);
            self.claim(biz, section, seen, Action::Claim(step)).await?;
        }
        Err(Elsewhere::Unavailable(format!(
            "section {section} of `{}` could not be claimed or raised; try again",
            biz.name
        )))
    }

    /// The number `key` is at: at or above every number answered for it, below every
    /// number answered next.
    ///
    /// # Errors
    /// As [`Sequencer::next`].
    pub async fn current(&self, biz: &SequenceBiz, key: &str) -> Result<i64, Elsewhere> {
        let (section, fragment) = biz.place(key);
        let cell = &biz.sections[section as usize];
        for _ in 0..2 {
            {
                let mut state = cell.state.lock();
                let now = self.store.now();
                match &state.owned {
                    Some(o) if now < o.deadline => return Ok(o.counters.current(fragment)),
                    _ => {
                        state.owned = None;
                        let desired = self.desired(biz, section);
                        if desired != self.address {
                            return Err(Elsewhere::Owner(self.hint(&state, desired)));
                        }
                    }
                }
            }
            self.claim(biz, section, None, Action::Claim(biz.shape.step))
                .await?;
        }
        Err(Elsewhere::Unavailable(format!(
            "section {section} of `{}` could not be claimed; try again",
            biz.name
        )))
    }

    /// Each section's owner as last seen (this server's address for its own).
    pub fn owners(&self, biz: &SequenceBiz) -> Vec<Option<String>> {
        let now = self.store.now();
        biz.sections
            .iter()
            .map(|cell| {
                let state = cell.state.lock();
                match &state.owned {
                    Some(o) if now < o.deadline => Some(self.address.clone()),
                    _ => state.owner.clone(),
                }
            })
            .collect()
    }

    /// What this server holds of each sequence biz it knows, by name.
    pub fn held(&self) -> Vec<(Arc<SequenceBiz>, SequenceHeld)> {
        let now = self.store.now();
        let mut bizs: Vec<Arc<SequenceBiz>> = self.bizs.read().values().cloned().collect();
        bizs.sort_by(|a, b| a.name.cmp(&b.name));
        bizs.into_iter()
            .map(|biz| {
                let mut held = SequenceHeld::default();
                for cell in &biz.sections {
                    if let Some(o) = &cell.state.lock().owned
                        && now < o.deadline
                    {
                        held.sections += 1;
                        held.keys += o.counters.len();
                        held.bytes += o.counters.bytes();
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

    /// Where to send a request for a section this server does not own: the owner last
    /// seen, unless that is this server (it released the section), else `desired`.
    fn hint(&self, state: &Section, desired: String) -> Option<String> {
        match &state.owner {
            Some(owner) if *owner != self.address => Some(owner.clone()),
            _ => Some(desired).filter(|d| !d.is_empty()),
        }
    }

    /// The server that should own `section` of `biz`, by [`assign`] over the live
    /// servers (worked out again when they change).
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
        // None at all once this server stopped taking part (`release_all`).
        let owner = owners.get(section as usize).cloned().unwrap_or_default();
        *biz.assigned.write() = (members, owners);
        owner
    }

    /// Runs `action` on `section` as one claim, unless the section changed since the
    /// caller looked (`seen`: the bound it saw, `None` if it was not owned here). A take
    /// that finds the section taken meanwhile (a request's and the round's at once)
    /// would raise the bound a second step above every number answered, all of which
    /// a later takeover skips.
    async fn claim(
        &self,
        biz: &SequenceBiz,
        section: u32,
        seen: Option<i64>,
        action: Action,
    ) -> Result<(), Elsewhere> {
        let cell = &biz.sections[section as usize];
        let _single = cell.claiming.lock().await;
        let known = {
            let mut state = cell.state.lock();
            let now = self.store.now();
            let bound = state
                .owned
                .as_ref()
                .filter(|o| now < o.deadline)
                .map(|o| o.counters.bound());
            if action != Action::Release && bound != seen {
                // Raised (or lost) meanwhile: the caller looks again.
                return Ok(());
            }
            if action == Action::Release {
                // Stop answering before the lease is ended.
                state.owned = None;
            }
            state.known.clone()
        };
        let (step, lease) = match action {
            Action::Claim(step) => (step, self.config.lease),
            Action::Release => (0, Duration::ZERO),
        };
        let claimed = self
            .store
            .claim_section(
                &biz.name,
                section,
                &self.holder,
                step,
                (lease, self.config.grace),
                &known,
            )
            .await
            .map_err(|e| Elsewhere::Unavailable(e.to_string()))?;
        self.settle(biz, section, claimed, action)
    }

    /// Takes in what a claim of `section` came to.
    fn settle(
        &self,
        biz: &SequenceBiz,
        section: u32,
        claimed: SectionClaim,
        action: Action,
    ) -> Result<(), Elsewhere> {
        let cell = &biz.sections[section as usize];
        let mut state = cell.state.lock();
        match claimed.outcome {
            Outcome::Owned {
                floor,
                bound,
                versions,
                ..
            } => {
                state.known = merge_known(&state.known, &versions);
                if action == Action::Release {
                    return Ok(());
                }
                let lease = self.config.lease;
                let deadline = claimed.started + lease - lease / 10;
                let kept = match &mut state.owned {
                    Some(o) if o.counters.bound() == floor => {
                        o.deadline = deadline;
                        o.counters.raise(bound)
                    }
                    _ => false,
                };
                if !kept {
                    if state.owned.is_none() {
                        biz.counters.taken.inc();
                    }
                    // Taken over, or offsets from the old base cannot reach the bound:
                    // every key starts at the highest bound read.
                    state.owned = Some(Owned {
                        counters: Counters::new(floor, bound),
                        deadline,
                    });
                }
                state.owner = Some(self.address.clone());
                Ok(())
            }
            Outcome::Held { by } => {
                state.owned = None;
                state.owner = Some(address_of(&by).to_owned());
                Err(Elsewhere::Owner(state.owner.clone()))
            }
            Outcome::Unavailable { answered, .. } => Err(Elsewhere::Unavailable(format!(
                "section {section} of `{}`: {answered} database(s) answered, fewer than a majority",
                biz.name
            ))),
            Outcome::Exhausted { .. } => Err(Elsewhere::Exhausted),
            // Another claim came between, or a database failed midway: the lease held
            // (if any) still counts; the caller tries again.
            Outcome::Lost { .. } => Ok(()),
        }
    }

    /// Takes part in the cluster until dropped: every quarter lease, keeps this
    /// server's presence, then renews, raises, takes and releases sections.
    pub async fn run(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.config.renew_every());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.round().await;
        }
    }

    /// One round: presence, the servers, every sequence biz's sections. Nothing before
    /// the server's first catalog read (its own, which leaves the witnesses to later):
    /// the layout's members are not known yet.
    pub async fn round(&self) {
        if !self.store.with_catalog(|c| c.is_read()) {
            return;
        }
        self.keep_presence().await;
        self.list_bizs();
        let bizs: Vec<Arc<SequenceBiz>> = self.bizs.read().values().cloned().collect();
        for biz in bizs {
            let rows = self.store.section_rows(&biz.name).await;
            let actions: Vec<(u32, Option<i64>, Action)> = (0..biz.shape.sections)
                .filter_map(|s| {
                    let (seen, action) = self.decide(&biz, s, rows.get(&s))?;
                    Some((s, seen, action))
                })
                .collect();
            join_all(
                actions
                    .into_iter()
                    .map(|(s, seen, action)| self.claim(&biz, s, seen, action)),
            )
            .await;
        }
    }

    /// What this round does with `section`, its row as read (`row`), and the bound it
    /// saw (`None`: not owned here), for [`Sequencer::claim`] to find it unchanged.
    fn decide(
        &self,
        biz: &SequenceBiz,
        section: u32,
        row: Option<&SectionRow>,
    ) -> Option<(Option<i64>, Action)> {
        let desired = self.desired(biz, section);
        let grace = millis(self.config.grace);
        let mut state = biz.sections[section as usize].state.lock();
        let now = self.store.now();
        if let Some(o) = state.owned.as_ref().filter(|o| now < o.deadline) {
            if desired != self.address {
                return Some((None, Action::Release));
            }
            // Raised half a step once less than half a step is left: never more than
            // a step above the highest number answered, which is all a takeover skips.
            let c = &o.counters;
            let half = (biz.shape.step / 2).max(1);
            let low = c.bound() - c.top() < half;
            let due = o.deadline.saturating_duration_since(now) < self.config.lease / 2;
            let seen = Some(c.bound());
            return match (low, due) {
                (true, _) => Some((seen, Action::Claim(half))),
                (false, true) => Some((seen, Action::Claim(0))),
                (false, false) => None,
            };
        }
        state.owned = None;
        let live = row.filter(|r| !r.lapsed(grace));
        // A row still held by this server (released, its grace running) names the
        // server that takes it next.
        let holder = live
            .map(|r| address_of(&r.holder))
            .filter(|&a| a != self.address);
        state.owner = Some(holder.map_or(desired.clone(), str::to_owned));
        let free = live.is_none_or(|r| r.holder == self.holder);
        (desired == self.address && free).then_some((None, Action::Claim(biz.shape.step)))
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

    /// Holds (claims or renews) this server's presence slot, and reads which servers
    /// are live.
    async fn keep_presence(&self) {
        let rows = self.store.section_rows(SERVERS).await;
        let grace = millis(self.config.grace);
        let mut presence = self.presence.lock().await;
        let slot = presence.slot.or_else(|| {
            (0..MAX_SERVERS).find(|s| {
                rows.get(s)
                    .is_none_or(|r| r.lapsed(grace) || r.holder == self.holder)
            })
        });
        if let Some(slot) = slot {
            let claimed = self
                .store
                .claim_section(
                    SERVERS,
                    slot,
                    &self.holder,
                    0,
                    (self.config.lease, self.config.grace),
                    &presence.known,
                )
                .await;
            match claimed.map(|c| c.outcome) {
                Ok(Outcome::Owned { versions, .. }) => {
                    presence.known = merge_known(&presence.known, &versions);
                    presence.slot = Some(slot);
                }
                Ok(Outcome::Held { .. }) => presence.slot = None,
                _ => {}
            }
        }
        let mut members: Vec<String> = rows
            .values()
            .filter(|r| !r.lapsed(grace))
            .map(|r| address_of(&r.holder).to_owned())
            .chain([self.address.clone()])
            .collect();
        members.sort_unstable();
        members.dedup();
        *self.members.write() = Arc::new(members);
    }

    /// Ends this server's leases (presence first, so that no other server waits for
    /// it), at a graceful stop: its sections are taken over after the grace alone.
    pub async fn release_all(&self) {
        let bizs: Vec<Arc<SequenceBiz>> = self.bizs.read().values().cloned().collect();
        *self.members.write() = Arc::new(Vec::new());
        let mut presence = self.presence.lock().await;
        if let Some(slot) = presence.slot.take() {
            let _ = self
                .store
                .claim_section(
                    SERVERS,
                    slot,
                    &self.holder,
                    0,
                    (Duration::ZERO, self.config.grace),
                    &presence.known,
                )
                .await;
        }
        for biz in bizs {
            let owned: Vec<u32> = (0..biz.shape.sections)
                .filter(|&s| biz.sections[s as usize].state.lock().owned.is_some())
                .collect();
            join_all(
                owned
                    .into_iter()
                    .map(|s| self.claim(&biz, s, None, Action::Release)),
            )
            .await;
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
                claiming: tokio::sync::Mutex::new(()),
            })
            .collect(),
    })
}

/// Which of `members` should own each of the `sections` of `biz`: each section, in
/// order, goes to the server whose hash with it ranks highest among those holding
/// fewer than their even share (rendezvous hashing with a bound on the load). Every
/// server that sees the same servers agrees; a server joining or leaving moves about
/// its share, and no server gets more than one section above another.
pub fn assign(members: &[String], biz: &str, sections: u32) -> Vec<String> {
    if members.is_empty() {
        return Vec::new();
    }
    // Every server gets `least` sections, and `extra` of them one more.
    let (least, mut extra) = (
        sections as usize / members.len(),
        sections as usize % members.len(),
    );
    let mut load = vec![0usize; members.len()];
    (0..sections)
        .map(|s| {
            let mut ranked: Vec<(u64, usize)> = members
                .iter()
                .enumerate()
                .map(|(i, m)| (key_hash(&format!("{m}\u{0}{biz}\u{0}{s}")), i))
                .collect();
            ranked.sort_unstable_by(|a, b| b.cmp(a));
            let chosen = ranked
                .iter()
                .map(|&(_, i)| i)
                .find(|&i| load[i] < least || load[i] == least && extra > 0)
                .unwrap_or(ranked[0].1);
            if load[chosen] == least {
                extra = extra.saturating_sub(1);
            }
            load[chosen] += 1;
            members[chosen].clone()
        })
        .collect()
}

/// The versions known after a claim wrote `written`: a database not written keeps
/// the version known before.
fn merge_known(known: &[Option<i64>], written: &[Option<i64>]) -> Vec<Option<i64>> {
    written
        .iter()
        .enumerate()
        .map(|(d, w)| w.or(known.get(d).copied().flatten()))
        .collect()
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
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

    fn servers(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("http://10.0.0.{i}:9999")).collect()
    }

    #[test]
    fn sections_spread_evenly_and_mostly_stay_when_a_server_goes() {
        for n in 1..=5 {
            let members = servers(n);
            let owners = assign(&members, "chat", 64);
            let mut load: HashMap<&String, usize> = HashMap::new();
            owners.iter().for_each(|o| *load.entry(o).or_default() += 1);
            assert_eq!(load.len(), n.min(64));
            let (lo, hi) = (load.values().min(), load.values().max());
            assert!(hi.unwrap() - lo.unwrap() <= 1, "{n} servers: {load:?}");
            assert_eq!(assign(&members, "chat", 64), owners, "deterministic");
        }
        let before = assign(&servers(4), "chat", 64);
        let after = assign(&servers(3), "chat", 64);
        let moved = before.iter().zip(&after).filter(|(a, b)| a != b).count();
        // The leaving server's 16 move, and a few more to keep the shares even.
        assert!((16..=32).contains(&moved), "{moved} moved");
        assert!(assign(&[], "chat", 8).is_empty());
    }

    #[test]
    fn a_holder_names_its_address() {
        assert_eq!(address_of("http://h:1#00ff00ff"), "http://h:1");
        assert_eq!(address_of("http://h:1"), "http://h:1");
    }
}
