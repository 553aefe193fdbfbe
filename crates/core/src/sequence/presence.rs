//! Which servers take part in serving sequences, and which of them should own each
//! section: every server holds a presence slot, a section of the pseudo-biz
//! [`SERVERS`] claimed like any other but never raised, and sections are assigned over
//! the servers whose slots are live ([`assign`]). A machine (sans-IO), like the
//! sections' holder ([`super::holder`]), that the server runs and the model checker
//! drives.

use std::time::Duration;

use super::claim::{Claim, SectionRow};
use super::holder::{Action, Plan, Section, Settings, Settled};
use super::key_hash;

/// The pseudo-biz whose sections are the servers' presence slots: not a valid biz
/// name, so no biz's sections share its rows.
pub const SERVERS: &str = "#servers";

/// How many servers may serve sequences at once (presence slots).
pub const MAX_SERVERS: u32 = 64;

/// This server's presence and what it saw of the others'.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Presence {
    /// The slot this server holds or last took.
    slot: Option<u32>,
    slots: Vec<Section>,
}

impl Default for Presence {
    fn default() -> Presence {
        Presence::new(MAX_SERVERS)
    }
}

impl Presence {
    /// A presence among `slots` slots (the model checker's are few).
    pub fn new(slots: u32) -> Presence {
        Presence {
            slot: None,
            slots: vec![Section::default(); slots as usize],
        }
    }

    pub fn slot(&self) -> Option<u32> {
        self.slot
    }

    /// Takes in a read of database `db`'s row of `slot` (`None`: it holds none).
    pub fn observe(&mut self, db: &str, slot: u32, row: Option<&SectionRow>, now: Duration) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.observe(db, row, now);
        }
    }

    /// The slots there are.
    pub fn slots(&self) -> u32 {
        self.slots.len() as u32
    }

    /// The claim this round makes: renew the slot held once half its lease is gone,
    /// take it again when its deadline passed, or take the first slot nobody holds.
    pub fn plan(&self, s: &Settings, now: Duration) -> Option<(u32, Plan)> {
        let take = Plan {
            action: Action::Hold { step: 0 },
            seen: None,
        };
        if let Some(k) = self.slot {
            let section = &self.slots[k as usize];
            return match section.deadline(now) {
                Some(d) if d.saturating_sub(now) < s.timing.lease / 2 => Some((
                    k,
                    Plan {
                        seen: section.bound(now),
                        ..take
                    },
                )),
                Some(_) => None,
                None => Some((k, take)),
            };
        }
        (0..self.slots())
            .find(|&k| {
                self.slots[k as usize]
                    .live_holder(s, now, i64::MAX)
                    .is_none()
            })
            .map(|k| (k, take))
    }

    /// Begins the claim of `slot` that [`Presence::plan`] asked for.
    pub fn begin(
        &mut self,
        s: &Settings,
        (slot, plan): (u32, Plan),
        now: Duration,
        members: &[String],
        epoch: i64,
    ) -> Option<Claim> {
        self.slots[slot as usize].begin(s, plan, now, members, epoch)
    }

    /// Takes in what the claim of `slot` came to.
    pub fn settle(
        &mut self,
        s: &Settings,
        slot: u32,
        claim: &Claim,
        members: &[String],
        now: Duration,
    ) -> Settled {
        let settled = self.slots[slot as usize].settle(s, claim, members, now);
        match &settled {
            Settled::Held { .. } => self.slot = Some(slot),
            Settled::Elsewhere(super::holder::Elsewhere::Owner(_)) => self.slot = None,
            _ => {}
        }
        settled
    }

    /// The claim that ends this server's presence at a graceful stop.
    pub fn leave(&mut self) -> Option<(u32, Plan)> {
        let slot = self.slot.take()?;
        // A renewal cut off by the stop never settles.
        self.slots[slot as usize].abort();
        Some((
            slot,
            Plan {
                action: Action::Release,
                seen: None,
            },
        ))
    }

    /// Ends a claim that could not be carried out.
    pub fn abort(&mut self, slot: u32) {
        self.slots[slot as usize].abort();
    }

    /// The servers taking part, sorted: those seen holding a slot and not lapsed, and
    /// this one while it takes part (`joined`).
    pub fn members(&self, s: &Settings, now: Duration, joined: bool) -> Vec<String> {
        let me = super::holder::address_of(&s.holder);
        let mut members: Vec<String> = self
            .slots
            .iter()
            .filter_map(|slot| slot.live_holder(s, now, i64::MAX))
            .filter(|a| !a.starts_with('#'))
            .chain(joined.then(|| me.to_owned()))
            .collect();
        members.sort_unstable();
        members.dedup();
        members
    }
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

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
}
