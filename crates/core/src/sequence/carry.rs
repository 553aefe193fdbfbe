//! Carrying one section through a layout change, as a machine (sans-IO) that the
//! change's command runs on its databases and the model checker on simulated ones.
//!
//! ```text
//!   Fence: claim the section on the members moved from, overriding every hold, the
//!          rows naming the change ─lost──▶ again (a few times) ─▶ Stopped
//!    │     └─fewer than a majority answered ─▶ Stopped
//!    ▼     floor = the highest bound read
//!   Write: claim it on the members moved to, the floor at least carried, the rows
//!          naming the change ─lost──▶ again ─▶ Stopped
//!    ▼     └─fewer than a majority answered ─▶ Stopped
//!   Wait until the lease and the grace have passed since the fence, by the change's
//!   clock
//!    ▼
//!   Carried { bound }
//! ```
//!
//! Why no number repeats or goes back: the fence is a claim, so its floor is at least
//! every bound an owner wrote, and its writes make every later raise of an owner on
//! the old members fail: the owner answers at most up to the bound it holds, at or
//! below the floor, and only until its deadline, which its last claim (begun before
//! the fence) set. The change waits that out as a server taking a row over would
//! ([`crate::lease`]): only then is the carry done, and the layout with it. The new
//! members' rows start at the floor. Servers take the rows the change holds only once
//! they read its layout done ([`super::claim::Holder::Change`]), which the change
//! writes after it carried every section; until then a server that still follows the
//! old layout finds the section held. A change cut off midway leaves the old rows
//! held: the command run again carries them again, from a fresh read.

use std::time::Duration;

use super::claim::{
    Ask, Claim, Kind, Known, Need as ClaimNeed, Outcome as ClaimOutcome, Read, Safeguards, Write,
    Written, change_holder,
};
use crate::lease::Timing;

/// Claims a carry makes on one side before it gives up on races lost. A race is lost
/// to an owner's renewal or raise written between the carry's read and its write; once
/// a try wrote the change's holder on some rows, the owners' next claims find it and
/// stop, so a race is seldom lost twice. Ten tries: three were lost in a row once, under
/// a full suite on MariaDB (the command then stops, its sections held, to be run again).
const TRIES: u32 = 10;

/// The safeguards of a carry, all on but in the model checker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Carrying {
    /// The change carries sections at all (off: the new members start from nothing).
    pub carry: bool,
    /// The carry writes the old rows (off: it reads them only, and owners go on
    /// raising their bounds there).
    pub fence: bool,
    /// The carry waits out the old owners' leases (off: done once written, while an
    /// old owner may still answer from memory).
    pub wait: bool,
}

impl Carrying {
    pub const ALL: Carrying = Carrying {
        carry: true,
        fence: true,
        wait: true,
    };
}

/// The members a claim of the carry runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The layout moved from.
    From,
    /// The layout moved to.
    To,
}

/// What a carry needs next.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Need {
    /// Read the section's row on these members of `side` ([`Carry::read`]).
    Read(Side, Vec<usize>),
    /// Write these rows of `side` ([`Carry::written`]).
    Write(Side, Vec<(usize, Write)>),
    /// Wait until this time of the change's clock ([`Carry::waited`]).
    Wait(Duration),
    Done(Outcome),
}

/// How a carry ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The new members' rows start at `bound`, the old ones' held by the change.
    Carried {
        bound: i64,
    },
    /// Not carried (without the safeguard).
    Skipped,
    /// Fewer than a majority of `side` answered; or every claim lost a race.
    Unavailable {
        side: Side,
        answered: usize,
    },
    RacesLost {
        side: Side,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    Fence { claim: Claim, tries: u32 },
    Write { claim: Claim, tries: u32 },
    Wait { bound: i64, until: Duration },
    Done(Outcome),
}

/// One section carried by the change to layout `epoch`, from `from` members to `to`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Carry {
    epoch: i64,
    from: usize,
    to: usize,
    carrying: Carrying,
    safeguards: Safeguards,
    /// The servers' leases.
    timing: Timing,
    /// The floor the fence read, once it did.
    floor: i64,
    /// When the fence was written, by the change's clock.
    fenced: Duration,
    phase: Phase,
}

impl Carry {
    /// The carry of a section to layout `epoch`, from `from` members to `to`, past the
    /// servers' leases of `timing`.
    pub fn new(
        epoch: i64,
        (from, to): (usize, usize),
        timing: Timing,
        carrying: Carrying,
    ) -> Carry {
        Carry::with_safeguards(epoch, (from, to), timing, (carrying, Safeguards::ALL))
    }

    /// A carry whose claims have `safeguards` (the model checker's).
    pub fn with_safeguards(
        epoch: i64,
        (from, to): (usize, usize),
        timing: Timing,
        (carrying, safeguards): (Carrying, Safeguards),
    ) -> Carry {
        let mut carry = Carry {
            epoch,
            from,
            to,
            carrying,
            safeguards,
            timing,
            floor: 0,
            fenced: Duration::ZERO,
            phase: Phase::Done(Outcome::Skipped),
        };
        if carrying.carry {
            carry.phase = Phase::Fence {
                claim: carry.claim(from, 0),
                tries: 1,
            };
        }
        carry
    }

    fn claim(&self, members: usize, at_least: i64) -> Claim {
        let ask = Ask {
            holder: change_holder(self.epoch),
            kind: Kind::Fence,
            step: 0,
            at_least,
            epoch: self.epoch,
        };
        // A change's claim overrides every hold: no sight or time is consulted.
        let nothing = Timing::new(Duration::ZERO, Duration::ZERO);
        let known = Known::nothing(members, Duration::ZERO, nothing);
        Claim::new(ask, known, self.safeguards)
    }

    pub fn need(&self) -> Need {
        let (side, claim) = match &self.phase {
            Phase::Fence { claim, .. } => (Side::From, claim),
            Phase::Write { claim, .. } => (Side::To, claim),
            Phase::Wait { until, .. } => return Need::Wait(*until),
            Phase::Done(outcome) => return Need::Done(outcome.clone()),
        };
        match claim.need() {
            ClaimNeed::Read(ds) => Need::Read(side, ds),
            ClaimNeed::Write(ws) => Need::Write(side, ws),
            ClaimNeed::Done(_) => unreachable!("a claim done is advanced past at once"),
        }
    }

    fn current(&mut self) -> &mut Claim {
        match &mut self.phase {
            Phase::Fence { claim, .. } | Phase::Write { claim, .. } => claim,
            Phase::Wait { .. } | Phase::Done(_) => panic!("a carry answered out of turn"),
        }
    }

    /// Member `d`'s answer to the read [`Need::Read`] asked for, at `now` by the
    /// change's clock.
    pub fn read(&mut self, d: usize, read: Read, now: Duration) {
        self.current().read(d, read);
        self.advance(now);
    }

    /// Member `d`'s answer to the write [`Need::Write`] asked for, at `now`.
    pub fn written(&mut self, d: usize, written: Written, now: Duration) {
        self.current().written(d, written);
        self.advance(now);
    }

    /// The wait [`Need::Wait`] asked for, at `now`: done once it has passed.
    pub fn waited(&mut self, now: Duration) {
        if let Phase::Wait { bound, until } = self.phase
            && now >= until
        {
            self.phase = Phase::Done(Outcome::Carried { bound });
        }
    }

    fn advance(&mut self, now: Duration) {
        let (side, claim, tries) = match &self.phase {
            Phase::Fence { claim, tries } => (Side::From, claim, *tries),
            Phase::Write { claim, tries } => (Side::To, claim, *tries),
            Phase::Wait { .. } | Phase::Done(_) => return,
        };
        let outcome = match claim.need() {
            ClaimNeed::Done(outcome) => outcome,
            ClaimNeed::Write(_) if side == Side::From && !self.carrying.fence => {
                // Without the fence: the floor read, nothing written.
                let floor = claim
                    .reads()
                    .filter_map(|(_, r)| match r {
                        Read::Row(r) => Some(r.bound),
                        _ => None,
                    })
                    .max()
                    .unwrap_or(0);
                ClaimOutcome::Owned {
                    floor,
                    bound: floor,
                    versions: Vec::new(),
                    fenced: Vec::new(),
                }
            }
            _ => return,
        };
        let members = match side {
            Side::From => self.from,
            Side::To => self.to,
        };
        self.phase = match (side, outcome) {
            (Side::From, ClaimOutcome::Owned { floor, .. }) => {
                (self.floor, self.fenced) = (floor, now);
                Phase::Write {
                    claim: self.claim(self.to, floor),
                    tries: 1,
                }
            }
            (Side::To, ClaimOutcome::Owned { bound, .. }) => {
                assert!(bound >= self.floor, "a carried bound below the floor read");
                let until = self.fenced + self.timing.wait();
                match self.carrying.wait && now < until {
                    true => Phase::Wait { bound, until },
                    false => Phase::Done(Outcome::Carried { bound }),
                }
            }
            (side, ClaimOutcome::Unavailable { answered, .. }) => {
                Phase::Done(Outcome::Unavailable { side, answered })
            }
            (side, ClaimOutcome::Lost { .. }) if tries < TRIES => {
                let claim = self.claim(members, self.floor);
                match side {
                    Side::From => Phase::Fence {
                        claim,
                        tries: tries + 1,
                    },
                    Side::To => Phase::Write {
                        claim,
                        tries: tries + 1,
                    },
                }
            }
            // Lost every try; a step of 0 is never exhausted, nor a change held.
            (side, _) => Phase::Done(Outcome::RacesLost { side }),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sequence::claim::testing::{TIMING, row};

    fn carry(from: usize, to: usize, carrying: Carrying) -> Carry {
        Carry::new(3, (from, to), TIMING, carrying)
    }

    /// Runs `carry` against rows `from` and `to`, every write succeeding, a
    /// millisecond a step.
    fn run(carry: &mut Carry, from: &[Read], to: &[Read]) -> (Outcome, Vec<(Side, Write)>) {
        let mut writes = Vec::new();
        let mut now = Duration::ZERO;
        loop {
            now += Duration::from_millis(1);
            match carry.need() {
                Need::Read(side, ds) => {
                    for d in ds {
                        let rows = if side == Side::From { from } else { to };
                        carry.read(d, rows[d].clone(), now);
                    }
                }
                Need::Write(side, ws) => {
                    for (d, w) in ws {
                        let v = w.expected.unwrap_or(0) + 1;
                        writes.push((side, w));
                        carry.written(d, Written::At(v), now);
                    }
                }
                Need::Wait(until) => {
                    carry.waited(until - Duration::from_millis(1));
                    assert_eq!(carry.need(), Need::Wait(until), "not before");
                    now = until;
                    carry.waited(now);
                }
                Need::Done(outcome) => return (outcome, writes),
            }
        }
    }

    #[test]
    fn the_old_rows_are_fenced_and_the_new_start_at_the_highest_bound() {
        let mut c = carry(3, 2, Carrying::ALL);
        let from = [row("a#1", 4, 300), row("a#1", 4, 300), Read::Down];
        let to = [Read::Absent, row(&change_holder(2), 1, 900)];
        let (outcome, writes) = run(&mut c, &from, &to);
        // A row left by an earlier change counts too: it was carried from a floor.
        assert_eq!(outcome, Outcome::Carried { bound: 900 });
        assert_eq!(writes.len(), 4);
        assert!(writes.iter().all(|(_, w)| w.holder == "#layout@3"));
        assert!(
            writes
                .iter()
                .filter(|(s, _)| *s == Side::From)
                .all(|(_, w)| w.bound == 300)
        );
        let mut c = carry(3, 2, Carrying::ALL);
        let (outcome, _) = run(&mut c, &from, &[Read::Absent, Read::Absent]);
        assert_eq!(outcome, Outcome::Carried { bound: 300 });
    }

    #[test]
    fn without_a_majority_the_carry_stops_and_without_the_safeguards_it_writes_less() {
        let mut c = carry(3, 1, Carrying::ALL);
        let (outcome, writes) = run(&mut c, &[Read::Down, Read::Down, row("", 1, 5)], &[]);
        assert_eq!(
            outcome,
            Outcome::Unavailable {
                side: Side::From,
                answered: 1
            }
        );
        assert!(writes.is_empty());
        let skipped = Carrying {
            carry: false,
            ..Carrying::ALL
        };
        assert_eq!(carry(1, 1, skipped).need(), Need::Done(Outcome::Skipped));
        let unfenced = Carrying {
            fence: false,
            ..Carrying::ALL
        };
        let mut unfenced = carry(1, 1, unfenced);
        let (outcome, writes) = run(&mut unfenced, &[row("a#1", 2, 40)], &[Read::Absent]);
        assert_eq!(outcome, Outcome::Carried { bound: 40 });
        assert!(writes.iter().all(|(s, _)| *s == Side::To));
    }

    #[test]
    fn races_lost_are_tried_again_up_to_a_bound() {
        // Every write of the fence lost to an owner's renewal: tried again each time,
        // then given up on, nothing carried.
        let mut c = carry(1, 1, Carrying::ALL);
        let mut tries = 0;
        let now = Duration::from_millis(1);
        let outcome = loop {
            match c.need() {
                Need::Read(Side::From, ds) => {
                    for d in ds {
                        c.read(d, row("a#1", 2, 40), now);
                    }
                }
                Need::Write(Side::From, ws) => {
                    tries += 1;
                    for (d, _) in ws {
                        c.written(d, Written::Lost, now);
                    }
                }
                Need::Done(outcome) => break outcome,
                need => panic!("{need:?}"),
            }
        };
        assert_eq!(outcome, Outcome::RacesLost { side: Side::From });
        assert_eq!(tries, TRIES);
        // One race lost, then won: carried.
        let mut c = carry(1, 1, Carrying::ALL);
        let mut lost = false;
        while let Need::Read(Side::From, _) | Need::Write(Side::From, _) = c.need() {
            match c.need() {
                Need::Read(_, ds) => ds.iter().for_each(|&d| c.read(d, row("a#1", 2, 40), now)),
                Need::Write(_, ws) => {
                    for (d, w) in ws {
                        let answer = match lost {
                            false => Written::Lost,
                            true => Written::At(w.expected.unwrap_or(0) + 1),
                        };
                        c.written(d, answer, now);
                    }
                    lost = true;
                }
                _ => unreachable!(),
            }
        }
        assert!(
            matches!(c.need(), Need::Read(Side::To, _)),
            "{:?}",
            c.need()
        );
    }
}
