//! Sequence sections on the databases: the claims the holders ask for
//! (`segmint_core::sequence::holder`) and the carries of a layout change
//! (`segmint_core::sequence::carry`), carried out on the engines. Reads go to every
//! database a machine asks at once; writes go out in one batch per database
//! ([`SegmentStore::write_sections`](crate::store::SegmentStore::write_sections)), so a
//! round of any number of renewals costs one statement per database. A member not
//! configured here, backed off after a failure, or not answering within the fetch
//! timeout counts as down; a write whose outcome is unknown counts as failed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use segmint_core::sequence::carry::{Carry, Need as CarryNeed, Side};
use segmint_core::sequence::claim::{Claim, Need, Read, SectionRow, Write, Written};

use super::Cluster;
use super::layout::InForce;
use crate::store::SectionWrite;

/// Every section row one member holds, by biz and section.
pub type SectionRows = BTreeMap<(String, u32), SectionRow>;

/// One claim of a section, carried out by [`Cluster::run_claims`].
#[derive(Debug)]
pub struct SectionClaim {
    pub biz: String,
    pub section: u32,
    pub claim: Claim,
}

/// What a machine needs of the rows of its section, by member position, with each
/// member's database here.
enum Want {
    Read(Vec<(usize, Option<usize>)>),
    Write(Vec<(usize, Option<usize>, Write)>),
    Done,
}

/// A machine whose reads and writes of one section's rows the store carries out.
trait Rows {
    fn key(&self) -> (&str, u32);
    fn want(&self) -> Want;
    /// Member `m`'s answer, at `now` by the executor's clock.
    fn read(&mut self, m: usize, read: Read, now: Duration);
    fn written(&mut self, m: usize, written: Written, now: Duration);
}

/// A claim on the members of `layout`.
struct OnLayout<'a> {
    claim: &'a mut SectionClaim,
    index: &'a [Option<usize>],
}

impl Rows for OnLayout<'_> {
    fn key(&self) -> (&str, u32) {
        (&self.claim.biz, self.claim.section)
    }

    fn want(&self) -> Want {
        let at = |m: usize| self.index.get(m).copied().flatten();
        match self.claim.claim.need() {
            Need::Read(ms) => Want::Read(ms.into_iter().map(|m| (m, at(m))).collect()),
            Need::Write(ws) => Want::Write(ws.into_iter().map(|(m, w)| (m, at(m), w)).collect()),
            Need::Done(_) => Want::Done,
        }
    }

    fn read(&mut self, m: usize, read: Read, _: Duration) {
        self.claim.claim.read(m, read);
    }

    fn written(&mut self, m: usize, written: Written, _: Duration) {
        self.claim.claim.written(m, written);
    }
}

/// A carry between the parts of a layout change: `from` and `to` map each side's
/// members to databases here.
struct Carrying<'a> {
    biz: &'a str,
    section: u32,
    carry: &'a mut Carry,
    from: &'a [Option<usize>],
    to: &'a [Option<usize>],
}

impl Rows for Carrying<'_> {
    fn key(&self) -> (&str, u32) {
        (self.biz, self.section)
    }

    fn want(&self) -> Want {
        let at = |side: Side, m: usize| {
            match side {
                Side::From => self.from,
                Side::To => self.to,
            }
            .get(m)
            .copied()
            .flatten()
        };
        match self.carry.need() {
            CarryNeed::Read(side, ms) => {
                Want::Read(ms.into_iter().map(|m| (m, at(side, m))).collect())
            }
            CarryNeed::Write(side, ws) => {
                Want::Write(ws.into_iter().map(|(m, w)| (m, at(side, m), w)).collect())
            }
            CarryNeed::Wait(_) | CarryNeed::Done(_) => Want::Done,
        }
    }

    fn read(&mut self, m: usize, read: Read, now: Duration) {
        self.carry.read(m, read, now);
    }

    fn written(&mut self, m: usize, written: Written, now: Duration) {
        self.carry.written(m, written, now);
    }
}

impl Cluster {
    /// Every section row of every sequence biz on each member of `layout`, one
    /// statement per member: `None` for a member that did not answer.
    pub async fn read_sections(&self, layout: &InForce) -> Vec<Option<SectionRows>> {
        let reads = layout.index.iter().map(|&i| async move {
            let i = i.filter(|&i| self.is_reachable(i))?;
            let rows = self.call(i, self.list[i].store.all_sections()).await.ok()?;
            Some(
                rows.into_iter()
                    .map(|(biz, section, row)| ((biz, section), row))
                    .collect(),
            )
        });
        join_all(reads).await
    }

    /// Carries out `claims`, begun on the members of `layout`, until each is done;
    /// the reads they still need first (every member at once), then their writes in
    /// one batch per member, each row's expiry (shown, never used to decide)
    /// `lease_ms` after its database's clock.
    pub async fn run_claims(&self, layout: &InForce, claims: &mut [SectionClaim], lease_ms: i64) {
        let mut machines: Vec<OnLayout> = claims
            .iter_mut()
            .map(|claim| OnLayout {
                claim,
                index: &layout.index,
            })
            .collect();
        self.run_rows(&mut machines, self.clock.now(), lease_ms)
            .await;
    }

    /// Carries out the carries of every section of `biz` (the carry of section `s` at
    /// `carries[s]`) between the parts `from` and `to` of a layout change, and waits
    /// out the servers' leases they fenced.
    pub(super) async fn run_carries(
        &self,
        biz: &str,
        carries: &mut [Carry],
        (from, to): (&[Option<usize>], &[Option<usize>]),
    ) {
        let origin = self.clock.now();
        let mut machines: Vec<Carrying> = carries
            .iter_mut()
            .enumerate()
            .map(|(s, carry)| Carrying {
                biz,
                section: s as u32,
                carry,
                from,
                to,
            })
            .collect();
        self.run_rows(&mut machines, origin, 0).await;
        let until = carries
            .iter()
            .filter_map(|c| match c.need() {
                CarryNeed::Wait(until) => Some(until),
                _ => None,
            })
            .max();
        if let Some(until) = until {
            let now = self.clock.now().saturating_duration_since(origin);
            tokio::time::sleep(until.saturating_sub(now)).await;
            let now = self.clock.now().saturating_duration_since(origin);
            for c in carries.iter_mut() {
                c.waited(now.max(until));
            }
        }
    }

    /// Runs `machines` to their ends, their clock counting from `origin`.
    async fn run_rows<M: Rows>(&self, machines: &mut [M], origin: Instant, lease_ms: i64) {
        let now = || self.clock.now().saturating_duration_since(origin);
        loop {
            let wants: Vec<Want> = machines.iter().map(Rows::want).collect();
            if wants.iter().all(|w| matches!(w, Want::Done)) {
                return;
            }
            let reads = wants.iter().enumerate().flat_map(|(k, w)| match w {
                Want::Read(ms) => ms.iter().map(|&(m, i)| (k, m, i)).collect(),
                _ => Vec::new(),
            });
            let reads: Vec<(usize, usize, Read)> = join_all(reads.map(|(k, m, i)| {
                let (biz, section) = machines[k].key();
                let read = self.read_section(i, biz.to_owned(), section);
                async move { (k, m, read.await) }
            }))
            .await;
            for (k, m, read) in reads {
                machines[k].read(m, read, now());
            }
            // The writes of every machine whose reads are all in (this pass's or
            // before), batched per database.
            let mut batches: BTreeMap<Option<usize>, Vec<(usize, usize, SectionWrite)>> =
                BTreeMap::new();
            for (k, machine) in machines.iter().enumerate() {
                if let Want::Write(ws) = machine.want() {
                    let (biz, section) = machine.key();
                    for (m, i, w) in ws {
                        let write = SectionWrite {
                            biz: biz.to_owned(),
                            section,
                            expected: w.expected,
                            holder: w.holder,
                            bound: w.bound,
                            lease_ms,
                        };
                        batches.entry(i).or_default().push((k, m, write));
                    }
                }
            }
            let written = join_all(
                batches
                    .into_iter()
                    .map(|(i, batch)| async move { (self.write_batch(i, &batch).await, batch) }),
            )
            .await;
            for (answers, batch) in written {
                for (answer, (k, m, _)) in answers.into_iter().zip(batch) {
                    machines[k].written(m, answer, now());
                }
            }
        }
    }

    /// Member database `i`'s row of the section, or down.
    async fn read_section(&self, i: Option<usize>, biz: String, section: u32) -> Read {
        let Some(i) = i.filter(|&i| self.is_reachable(i)) else {
            return Read::Down;
        };
        let db = &self.list[i];
        match self.call(i, db.store.section(&biz, section)).await {
            Ok(Some(row)) => Read::Row(row),
            Ok(None) => Read::Absent,
            Err(_) => Read::Down,
        }
    }

    /// Writes `batch` on member database `i` in one transaction: an error or a timeout
    /// is an unknown outcome of every write, never a success.
    async fn write_batch(
        &self,
        i: Option<usize>,
        batch: &[(usize, usize, SectionWrite)],
    ) -> Vec<Written> {
        let down = || vec![Written::Down; batch.len()];
        let Some(i) = i else {
            return down();
        };
        let writes: Vec<SectionWrite> = batch.iter().map(|(_, _, w)| w.clone()).collect();
        match self
            .call(i, self.list[i].store.write_sections(&writes))
            .await
        {
            Ok(rows) if rows.len() == writes.len() => rows
                .into_iter()
                .map(|r| r.map_or(Written::Lost, |r| Written::At(r.version)))
                .collect(),
            _ => down(),
        }
    }

    /// Logs that `db`'s row of a section lay below the version this server had
    /// written: restored from a backup. The claim did not count it, and the next claim
    /// that reads it at its own version writes it again.
    pub fn note_fenced_section(&self, db: &str, biz: &str, section: u32) {
        tracing::error!(
            database = db,
            biz,
            section,
            "a sequence section's row went back in time (restored from a backup?); not counted until rewritten"
        );
    }
}
