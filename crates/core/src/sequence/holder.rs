//! A server's part in one section, as a machine (sans-IO): whether it answers a key's
//! next number from memory, and when it takes, raises, renews or releases the section.
//! It takes the time (`now`, the server's monotonic clock) and the answers of the
//! [`Claim`]s it asks for; the server carries out the claims on its databases and the
//! model checker on simulated ones.
//!
//! ```text
//!   a request ──owned, before the deadline──▶ numbers from memory, up to the bound
//!      │         └─past the bound─────────────▶ Raise (a step, at least the count)
//!      ├─not owned, assigned here───────────▶ Take
//!      └─not owned, assigned elsewhere──────▶ Elsewhere (the owner last seen)
//!   a round ──owned, assigned elsewhere─────▶ Release (stop answering first)
//!      │      ├─less than half a step left──▶ Raise (half a step)
//!      │      └─half the lease gone─────────▶ Renew
//!      └─not owned, assigned here, no other holder seen live ──▶ Take
//! ```
//!
//! Rules, each a safeguard the model checker takes out to show what it stops:
//! - **Single flight.** One claim of a section at a time, begun only if the section is
//!   as its caller saw it: a request's take and the round's at once would raise the
//!   bound a second step above every number answered, all of which a later takeover
//!   skips.
//! - **Half a step.** A round raises by half a step once less than half a step is left,
//!   so the bound is never more than a step above the highest number answered: a
//!   takeover skips at most a step.
//! - **A take raises nothing.** A take keeps the bound it reads (a step of 0), and only
//!   an owner raises it: a take cut off partway (a database failing between its
//!   writes) leaves rows no higher than they were, so the next owner skips at most a
//!   step whatever fails.
//! - **Deadline.** An owner answers until [`Timing::deadline`] of its last claim's
//!   start. Its keys' numbers stay in memory after the deadline: a claim that finds the
//!   bound where this server left it (nobody took the section between) answers on from
//!   them, without a skip.

use std::time::Duration;

use super::claim::{
    Ask, Claim, Holder, Kind, Known, Outcome, Read, Safeguards as ClaimSafeguards, SectionRow,
    holder_of,
};
use super::counters::{Counters, Taken};
use crate::lease::{Seen, Timing};

/// The address part of a server's holder (`address#nonce`).
pub fn address_of(holder: &str) -> &str {
    holder.rsplit_once('#').map_or(holder, |(a, _)| a)
}

/// The safeguards of a holder, all on in the servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Safeguards {
    /// One claim at a time, begun only on the section as its caller saw it.
    pub single_flight: bool,
    /// Raise by half a step once less than half is left (off: a whole step).
    pub half_step: bool,
    pub claim: ClaimSafeguards,
}

impl Safeguards {
    pub const ALL: Safeguards = Safeguards {
        single_flight: true,
        half_step: true,
        claim: ClaimSafeguards::ALL,
    };
}

/// What every section of a server shares.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Settings {
    /// This process, as written in the rows (`address#nonce`).
    pub holder: String,
    pub timing: Timing,
    pub safeguards: Safeguards,
}

impl Settings {
    fn address(&self) -> &str {
        address_of(&self.holder)
    }
}

/// Which server should own a section, by the assignment over the live servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assigned<'a> {
    Me,
    Other(&'a str),
    /// This server takes part no more (it is stopping).
    Nobody,
}

/// What a claim is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Take the section, `step` above the bound read (or renew, with a step of 0).
    Hold { step: i64 },
    /// Stop answering and free the rows for the server it is assigned to.
    Release,
}

/// A claim the section asks for: its action, and the bound its caller saw (`None`:
/// not owned here), which it must still be when the claim begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Plan {
    pub action: Action,
    pub seen: Option<i64>,
}

/// Why no number is answered here.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Elsewhere {
    /// Another server owns the section (or should): its address, if known.
    Owner(Option<String>),
    /// A layout change is carrying the section to new databases (this epoch).
    Moving(i64),
    /// No claim could be made: fewer than a majority of the databases answered.
    Unavailable { answered: usize },
    /// The section's bound cannot be raised: its numbers are used up.
    Exhausted,
}

/// The answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<T> {
    /// Answered from memory.
    Ready(T),
    /// Carry out this claim (begin it with [`Section::begin`]), then ask again.
    Claim(Plan),
    /// A claim of this section is in flight: ask again once it ended.
    Wait,
    Elsewhere(Elsewhere),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Owned {
    counters: Counters,
    /// No number is answered from then on, unless a claim moves it.
    deadline: Duration,
}

/// One section as this server holds or watches it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Section {
    /// The keys' numbers, kept past the deadline until another holder is found.
    owned: Option<Owned>,
    /// The address of the server that owns it as last seen, if not this one.
    owner: Option<String>,
    /// The versions this server's claims wrote last, by database name.
    written: Vec<(String, i64)>,
    /// What this server saw of each database's row, by name.
    seen: Vec<(String, Seen)>,
    /// A claim in flight began then.
    flight: Option<Duration>,
}

/// What a claim came to, for the caller's counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// This server holds the section: `taken` when its keys start anew from the
    /// floor read (a takeover, which may skip up to a step), not where it left them.
    Held {
        taken: bool,
    },
    Released,
    /// Another claim came between: ask again.
    Lost,
    Elsewhere(Elsewhere),
}

impl Section {
    /// Whether this server answers the section at `now`.
    pub fn answering(&self, now: Duration) -> bool {
        self.owned.as_ref().is_some_and(|o| now < o.deadline)
    }

    fn live(&self, now: Duration) -> Option<&Owned> {
        self.owned.as_ref().filter(|o| now < o.deadline)
    }

    /// The next `count` numbers of the key of `fragment`, or what to do first: a claim
    /// of the section's `step` (at least `count`) when it passes the bound or is not
    /// taken.
    pub fn next(
        &mut self,
        s: &Settings,
        now: Duration,
        (fragment, count): (u32, i64),
        step: i64,
        assigned: Assigned,
    ) -> Answer<Taken> {
        let step = step.max(count);
        let Some(o) = self.owned.as_mut().filter(|o| now < o.deadline) else {
            return self.unowned(s, assigned);
        };
        if let Some(taken) = o.counters.take(fragment, count) {
            return Answer::Ready(taken);
        }
        let seen = Some(o.counters.bound());
        self.ask(
            Plan {
                action: Action::Hold { step },
                seen,
            },
            s,
        )
    }

    /// The number the key of `fragment` is at, or what to do first.
    pub fn current(
        &mut self,
        s: &Settings,
        now: Duration,
        fragment: u32,
        assigned: Assigned,
    ) -> Answer<i64> {
        match self.live(now) {
            Some(o) => Answer::Ready(o.counters.current(fragment)),
            None => self.unowned(s, assigned),
        }
    }

    /// A request for a section this server does not answer: take it if it is this
    /// server's (the numbers come with the raise after); else say who has it.
    fn unowned<T>(&self, s: &Settings, assigned: Assigned) -> Answer<T> {
        match assigned {
            Assigned::Me => self.ask(
                Plan {
                    action: Action::Hold { step: 0 },
                    seen: None,
                },
                s,
            ),
            Assigned::Other(desired) => {
                Answer::Elsewhere(Elsewhere::Owner(Some(self.hint(s, desired))))
            }
            Assigned::Nobody => Answer::Elsewhere(Elsewhere::Owner(self.owner.clone())),
        }
    }

    fn ask<T>(&self, plan: Plan, s: &Settings) -> Answer<T> {
        match self.flight.is_some() && s.safeguards.single_flight {
            true => Answer::Wait,
            false => Answer::Claim(plan),
        }
    }

    /// Where to send a request: the owner last seen, unless none, else `desired`.
    fn hint(&self, s: &Settings, desired: &str) -> String {
        match &self.owner {
            Some(owner) if owner != s.address() => owner.clone(),
            _ => desired.to_owned(),
        }
    }

    /// The owner to send requests to as last seen: this server while it answers.
    pub fn owner(&self, s: &Settings, now: Duration) -> Option<String> {
        match self.answering(now) {
            true => Some(s.address().to_owned()),
            false => self.owner.clone(),
        }
    }

    /// When this server stops answering, while it answers.
    pub fn deadline(&self, now: Duration) -> Option<Duration> {
        self.live(now).map(|o| o.deadline)
    }

    /// The bound this server answers up to, while it answers.
    pub fn bound(&self, now: Duration) -> Option<i64> {
        self.live(now).map(|o| o.counters.bound())
    }

    /// Keys held, and bytes they take, while answering.
    pub fn held(&self, now: Duration) -> Option<(usize, usize)> {
        self.live(now)
            .map(|o| (o.counters.len(), o.counters.bytes()))
    }

    /// What a round does with the section, its step `step`, in layout `epoch`.
    pub fn decide(
        &mut self,
        s: &Settings,
        now: Duration,
        step: i64,
        epoch: i64,
        assigned: Assigned,
    ) -> Option<Plan> {
        if let Some(o) = self.live(now) {
            let seen = Some(o.counters.bound());
            if assigned != Assigned::Me {
                return Some(Plan {
                    action: Action::Release,
                    seen,
                });
            }
            let half = (step / 2).max(1);
            let c = &o.counters;
            let (low, raise) = match s.safeguards.half_step {
                true => (c.bound() - c.top() < half, half),
                false => (c.bound() - c.top() < half, step),
            };
            let due = o.deadline.saturating_sub(now) < s.timing.lease / 2;
            return match (low, due) {
                (true, _) => Some(Plan {
                    action: Action::Hold { step: raise },
                    seen,
                }),
                (false, true) => Some(Plan {
                    action: Action::Hold { step: 0 },
                    seen,
                }),
                (false, false) => None,
            };
        }
        if assigned != Assigned::Me {
            // Numbers kept past the deadline serve only a claim of this server's.
            self.owned = None;
        }
        let held_by = self.live_holder(s, now, epoch);
        // A server's address, never a change's: requests are not sent to a change.
        self.owner = held_by
            .clone()
            .filter(|h| !matches!(holder_of(h), Holder::Change(_)));
        (assigned == Assigned::Me && held_by.is_none()).then_some(Plan {
            action: Action::Hold { step: 0 },
            seen: None,
        })
    }

    /// The address of another server seen holding the section, not lapsed; or the
    /// change's, as `#layout@E`, when a change holds it that `epoch` does not follow.
    pub(super) fn live_holder(&self, s: &Settings, now: Duration, epoch: i64) -> Option<String> {
        self.seen.iter().find_map(|(_, seen)| {
            if seen.holder == s.holder {
                return None;
            }
            match holder_of(&seen.holder) {
                Holder::Free => None,
                Holder::Change(e) => (e > epoch).then(|| seen.holder.clone()),
                Holder::Server(h) => {
                    (!s.timing.lapsed(seen.since, now)).then(|| address_of(h).to_owned())
                }
            }
        })
    }

    /// Takes in a read of database `db`'s row (`None`: it holds none) at `now`.
    pub fn observe(&mut self, db: &str, row: Option<&SectionRow>, now: Duration) {
        let at = self.seen.iter().position(|(d, _)| d == db);
        match (row, at) {
            (None, Some(i)) => {
                self.seen.swap_remove(i);
            }
            (None, None) => {}
            (Some(r), Some(i)) => {
                let seen = self.seen[i].1.clone();
                self.seen[i].1 = Seen::update(Some(seen), &r.holder, r.version, now);
            }
            (Some(r), None) => self
                .seen
                .push((db.to_owned(), Seen::update(None, &r.holder, r.version, now))),
        }
    }

    /// Begins the claim `plan` asked for, at `now`, on the databases `members` of
    /// layout `epoch`; `None` when a claim is in flight or the section changed since
    /// the plan was made (the caller looks again).
    pub fn begin(
        &mut self,
        s: &Settings,
        plan: Plan,
        now: Duration,
        members: &[String],
        epoch: i64,
    ) -> Option<Claim> {
        let single = s.safeguards.single_flight;
        if single && self.flight.is_some() {
            return None;
        }
        let bound = self.live(now).map(|o| o.counters.bound());
        if single && plan.action != Action::Release && bound != plan.seen {
            return None;
        }
        let (kind, step) = match plan.action {
            Action::Hold { step } => (Kind::Hold, step),
            Action::Release => {
                // Stop answering before the rows say so.
                self.owned = None;
                (Kind::Release, 0)
            }
        };
        self.flight = Some(now);
        let by_name = |d: &String| {
            let version = self.written.iter().find(|(n, _)| n == d).map(|(_, v)| *v);
            let seen = self
                .seen
                .iter()
                .find(|(n, _)| n == d)
                .map(|(_, s)| s.clone());
            (version, seen)
        };
        let (versions, seen) = members.iter().map(by_name).unzip();
        let ask = Ask {
            kind,
            ..Ask::hold(s.holder.clone(), step, epoch)
        };
        let known = Known {
            versions,
            seen,
            now,
            timing: s.timing,
        };
        Some(Claim::new(ask, known, s.safeguards.claim))
    }

    /// Ends a claim that could not be carried out (no layout known yet).
    pub fn abort(&mut self) {
        self.flight = None;
    }

    /// Takes in what `claim`, begun by [`Section::begin`] on `members`, came to, at
    /// `now`.
    ///
    /// # Panics
    /// When the claim is not done.
    pub fn settle(
        &mut self,
        s: &Settings,
        claim: &Claim,
        members: &[String],
        now: Duration,
    ) -> Settled {
        let super::claim::Need::Done(outcome) = claim.need() else {
            panic!("a claim settled before it was done");
        };
        self.flight = None;
        for (d, read) in claim.reads() {
            match read {
                Read::Row(r) => self.observe(&members[d], Some(r), now),
                Read::Absent => self.observe(&members[d], None, now),
                Read::Down => {}
            }
        }
        match outcome {
            Outcome::Owned {
                floor,
                bound,
                versions,
                ..
            } => {
                for (d, v) in versions.iter().enumerate() {
                    if let Some(v) = v {
                        self.wrote(&members[d], *v);
                    }
                }
                match claim.ask().kind {
                    Kind::Hold => self.hold(s, floor, bound, claim.started()),
                    Kind::Release | Kind::Fence => Settled::Released,
                }
            }
            Outcome::Held { by } => {
                self.owned = None;
                self.owner = match holder_of(&by) {
                    Holder::Server(h) => Some(address_of(h).to_owned()),
                    _ => None,
                };
                match holder_of(&by) {
                    Holder::Change(epoch) => Settled::Elsewhere(Elsewhere::Moving(epoch)),
                    _ => Settled::Elsewhere(Elsewhere::Owner(self.owner.clone())),
                }
            }
            Outcome::Unavailable { answered, .. } => {
                Settled::Elsewhere(Elsewhere::Unavailable { answered })
            }
            Outcome::Exhausted { .. } => Settled::Elsewhere(Elsewhere::Exhausted),
            // Another claim came between, or a database failed midway: the lease held
            // (if any) still counts; the caller tries again.
            Outcome::Lost { .. } => Settled::Lost,
        }
    }

    fn wrote(&mut self, db: &str, version: i64) {
        match self.written.iter_mut().find(|(n, _)| n == db) {
            Some((_, v)) => *v = version,
            None => self.written.push((db.to_owned(), version)),
        }
    }

    /// This server holds the section from `floor` to `bound`, by a claim started at
    /// `started`.
    fn hold(&mut self, s: &Settings, floor: i64, bound: i64, started: Duration) -> Settled {
        let deadline = s.timing.deadline(started);
        self.owner = None;
        // The numbers held go on where the bound was left: nobody took the section
        // between (a taker raises it).
        if let Some(o) = self.owned.as_mut()
            && o.counters.bound() == floor
            && o.counters.raise(bound)
        {
            o.deadline = deadline;
            return Settled::Held { taken: false };
        }
        // Taken over, or offsets from the old base cannot reach the bound: every key
        // starts at the highest bound read.
        self.owned = Some(Owned {
            counters: Counters::new(floor, bound),
            deadline,
        });
        Settled::Held { taken: true }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sequence::claim::testing::section_row as row;
    use crate::sequence::claim::{Need, Written};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn settings() -> Settings {
        Settings {
            holder: "http://a:1#01".into(),
            timing: Timing::new(ms(1_000), ms(200)),
            safeguards: Safeguards::ALL,
        }
    }

    const DBS: [&str; 1] = ["db"];

    /// Runs `claim` on one database holding `held`; returns the row it leaves.
    fn run(claim: &mut Claim, held: Option<SectionRow>) -> Option<SectionRow> {
        claim.read(0, held.clone().map_or(Read::Absent, Read::Row));
        if let Need::Write(ws) = claim.need() {
            let (_, w) = ws[0].clone();
            let version = w.expected.unwrap_or(0) + 1;
            claim.written(0, Written::At(version));
            return Some(row(&w.holder, version, w.bound));
        }
        held
    }

    /// Carries out what `answer` asks (one claim on a database holding `db`) and
    /// settles it at `now`.
    fn claim_for<T>(
        section: &mut Section,
        s: &Settings,
        answer: Answer<T>,
        db: &mut Option<SectionRow>,
        now: Duration,
    ) -> Settled {
        let Answer::Claim(plan) = answer else {
            panic!("a claim asked for");
        };
        let names = DBS.map(String::from);
        let mut claim = section.begin(s, plan, now, &names, 0).expect("begun");
        *db = run(&mut claim, db.take());
        section.settle(s, &claim, &names, now)
    }

    /// Answers a request for `count` numbers of `fragment` at `now`, carrying out the
    /// claims it asks for on `db`; the number of claims made with it.
    fn serve(
        sec: &mut Section,
        s: &Settings,
        db: &mut Option<SectionRow>,
        now: Duration,
        (fragment, count): (u32, i64),
    ) -> (Taken, usize) {
        for claims in 0..4 {
            match sec.next(s, now, (fragment, count), 10, Assigned::Me) {
                Answer::Ready(t) => return (t, claims),
                answer => {
                    claim_for(sec, s, answer, db, now);
                }
            }
        }
        panic!("no answer after four claims");
    }

    #[test]
    fn a_request_takes_the_section_then_raises_and_answers_from_memory() {
        let s = settings();
        let (mut sec, mut db) = (Section::default(), None);
        // A take keeps the bound read; the raise after it brings the numbers.
        let take = sec.next(&s, ms(0), (7, 1), 10, Assigned::Me);
        assert_eq!(
            take,
            Answer::Claim(Plan {
                action: Action::Hold { step: 0 },
                seen: None
            })
        );
        let settled = claim_for(&mut sec, &s, take, &mut db, ms(0));
        assert_eq!(settled, Settled::Held { taken: true });
        assert_eq!(db.as_ref().map(|r| r.bound), Some(0));
        assert_eq!(
            serve(&mut sec, &s, &mut db, ms(0), (7, 1)).1,
            1,
            "one raise"
        );
        assert_eq!(db.as_ref().map(|r| r.bound), Some(10));
        for n in 2..=10 {
            assert_eq!(
                serve(&mut sec, &s, &mut db, ms(5), (7, 1)),
                (Taken { first: n, last: n }, 0)
            );
        }
        // Past the bound: a raise of a step (at least the count), seen at 10.
        let answer = sec.next(&s, ms(6), (7, 3), 10, Assigned::Me);
        assert_eq!(
            answer,
            Answer::Claim(Plan {
                action: Action::Hold { step: 10 },
                seen: Some(10)
            })
        );
        claim_for(&mut sec, &s, answer, &mut db, ms(6));
        assert_eq!(
            sec.next(&s, ms(7), (7, 3), 10, Assigned::Me),
            Answer::Ready(Taken {
                first: 11,
                last: 13
            })
        );
        // Past its deadline (900 ms after the raise began) nothing is answered.
        assert!(sec.answering(ms(905)));
        assert!(!sec.answering(ms(906)));
        assert_eq!(
            sec.next(&s, ms(906), (7, 1), 10, Assigned::Other("http://b:1")),
            Answer::Elsewhere(Elsewhere::Owner(Some("http://b:1".into())))
        );
    }

    #[test]
    fn a_round_raises_half_a_step_renews_at_half_the_lease_and_releases() {
        let s = settings();
        let (mut sec, mut db) = (Section::default(), None);
        let take = sec.decide(&s, ms(0), 10, 0, Assigned::Me);
        assert_eq!(
            take,
            Some(Plan {
                action: Action::Hold { step: 0 },
                seen: None
            })
        );
        claim_for(
            &mut sec,
            &s,
            Answer::<()>::Claim(take.unwrap()),
            &mut db,
            ms(0),
        );
        // Nothing answered yet, nothing left: half a step.
        let raise = sec.decide(&s, ms(0), 10, 0, Assigned::Me);
        assert_eq!(raise.map(|p| p.action), Some(Action::Hold { step: 5 }));
        claim_for(
            &mut sec,
            &s,
            Answer::<()>::Claim(raise.unwrap()),
            &mut db,
            ms(0),
        );
        assert_eq!(sec.decide(&s, ms(100), 10, 0, Assigned::Me), None);
        serve(&mut sec, &s, &mut db, ms(100), (1, 1));
        let raise = sec.decide(&s, ms(100), 10, 0, Assigned::Me);
        assert_eq!(raise.map(|p| p.action), Some(Action::Hold { step: 5 }));
        claim_for(
            &mut sec,
            &s,
            Answer::<()>::Claim(raise.unwrap()),
            &mut db,
            ms(100),
        );
        assert_eq!(sec.bound(ms(101)), Some(10));
        // Less than half the lease before the deadline (1000 ms): renewed.
        let renew = sec.decide(&s, ms(501), 10, 0, Assigned::Me);
        assert_eq!(renew.map(|p| p.action), Some(Action::Hold { step: 0 }));
        // Assigned elsewhere: released, answering stops before the rows say so.
        let release = sec.decide(&s, ms(502), 10, 0, Assigned::Other("http://b:1"));
        assert_eq!(release.map(|p| p.action), Some(Action::Release));
        let names = DBS.map(String::from);
        let mut claim = sec
            .begin(&s, release.unwrap(), ms(502), &names, 0)
            .expect("begun");
        assert!(!sec.answering(ms(502)));
        db = run(&mut claim, db);
        assert_eq!(sec.settle(&s, &claim, &names, ms(503)), Settled::Released);
        assert_eq!(db.map(|r| (r.holder, r.bound)), Some((String::new(), 10)));
    }

    #[test]
    fn one_claim_at_a_time_begun_only_on_the_section_as_seen() {
        let s = settings();
        let (mut sec, mut db) = (Section::default(), None);
        serve(&mut sec, &s, &mut db, ms(0), (1, 10));
        let names = DBS.map(String::from);
        // A request's raise and the round's, planned on the same bound.
        let Answer::Claim(request) = sec.next(&s, ms(1), (1, 1), 10, Assigned::Me) else {
            panic!("a raise");
        };
        let round = sec.decide(&s, ms(1), 10, 0, Assigned::Me).expect("a raise");
        let mut first = sec.begin(&s, round, ms(1), &names, 0).expect("begun");
        assert!(
            sec.begin(&s, request, ms(1), &names, 0).is_none(),
            "in flight"
        );
        assert_eq!(sec.next(&s, ms(1), (1, 1), 10, Assigned::Me), Answer::Wait);
        db = run(&mut first, db);
        sec.settle(&s, &first, &names, ms(2));
        // The request's raise, planned before, finds the bound raised: not begun (it
        // would raise a second step above every number answered).
        assert!(sec.begin(&s, request, ms(3), &names, 0).is_none());
        assert_eq!(db.map(|r| r.bound), Some(15));
    }

    #[test]
    fn numbers_held_past_the_deadline_go_on_when_nobody_took_the_section_between() {
        let s = settings();
        let (mut sec, mut db) = (Section::default(), None);
        serve(&mut sec, &s, &mut db, ms(0), (1, 4));
        // A stall past the deadline; the rows still as this server left them.
        let answer = sec.next(&s, ms(2_000), (1, 1), 10, Assigned::Me);
        assert_eq!(
            claim_for(&mut sec, &s, answer, &mut db, ms(2_000)),
            Settled::Held { taken: false }
        );
        assert_eq!(
            serve(&mut sec, &s, &mut db, ms(2_001), (1, 1)).0,
            Taken { first: 5, last: 5 },
            "no skip"
        );
        // Another took it meanwhile (a higher bound): every key starts above it.
        db = Some(row("http://b:1#02", 9, 40));
        let mut sec2 = sec.clone();
        sec2.observe("db", db.as_ref(), ms(5_000));
        let (taken, _) = serve(&mut sec2, &s, &mut db, ms(9_000), (1, 1));
        assert_eq!(
            taken,
            Taken {
                first: 41,
                last: 41
            }
        );
    }

    #[test]
    fn a_section_a_change_holds_is_refused_until_its_layout_is_followed() {
        let s = settings();
        let (mut sec, mut db) = (Section::default(), Some(row("#layout@3", 4, 70)));
        let answer = sec.next(&s, ms(0), (1, 1), 10, Assigned::Me);
        let names = DBS.map(String::from);
        let Answer::Claim(plan) = answer else {
            panic!("a claim");
        };
        let mut claim = sec.begin(&s, plan, ms(0), &names, 2).expect("begun");
        db = run(&mut claim, db);
        assert_eq!(
            sec.settle(&s, &claim, &names, ms(1)),
            Settled::Elsewhere(Elsewhere::Moving(3))
        );
        let mut claim = sec.begin(&s, plan, ms(2), &names, 3).expect("begun");
        db = run(&mut claim, db);
        assert_eq!(
            sec.settle(&s, &claim, &names, ms(3)),
            Settled::Held { taken: true }
        );
        assert_eq!(sec.bound(ms(4)), Some(70));
        assert_eq!(db.map(|r| r.holder), Some(s.holder.clone()));
    }
}
