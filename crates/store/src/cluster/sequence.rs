//! Sequence sections on the databases: one claim ([`Claim`]) carried out on the members
//! of the layout in force, its reads sent to every member at once, then its writes.
//! A member not configured here, backed off after a failure, or not answering within
//! the fetch timeout counts as down; a write whose outcome is unknown counts as failed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use segmint_core::sequence::claim::{Claim, Need, Outcome, Read, Safeguards, SectionRow, Written};

use super::Store;
use crate::store::{SectionWrite, StoreError};

/// What a claim of a section came to, and when it began: the lease it gives runs from
/// then (by this server's clock), not from its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionClaim {
    pub outcome: Outcome,
    pub started: Instant,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Store {
    /// The number of members of the layout in force, as sections count them; 0 before
    /// a layout done was read.
    pub fn section_members(&self) -> usize {
        self.members_in_force().len()
    }

    /// Claims section `section` of `biz` for `holder`: reads its row on every member,
    /// then, unless another holder's lease is live or fewer than a majority answered,
    /// writes each row read to `step` above the highest bound read, with a lease of
    /// `lease` from each database's clock ([`Claim`]). `known` holds the versions this
    /// server wrote last, one per member (empty: none known).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] before a layout done was read: the members are not
    /// known.
    pub async fn claim_section(
        &self,
        biz: &str,
        section: u32,
        holder: &str,
        step: i64,
        (lease, grace): (Duration, Duration),
        known: &[Option<i64>],
    ) -> Result<SectionClaim, StoreError> {
        if !self.catalog().is_read() {
            self.refresh_since(self.clock.now()).await;
        }
        let members = self.members_in_force();
        if members.is_empty() {
            return Err(StoreError::Unavailable(
                "no sequence section can be claimed: no layout done was read (the cluster's membership is recorded by `segmint migrate`)".into(),
            ));
        }
        let known = match known.len() == members.len() {
            true => known.to_vec(),
            false => vec![None; members.len()],
        };
        let started = self.clock.now();
        let mut claim = Claim::new(holder, step, millis(grace), known, Safeguards::ALL);
        loop {
            match claim.need() {
                Need::Read(ds) => {
                    let reads = join_all(
                        ds.iter()
                            .map(|&m| self.read_section(members[m], biz, section)),
                    );
                    for (m, read) in ds.into_iter().zip(reads.await) {
                        claim.read(m, read);
                    }
                }
                Need::Write(ws) => {
                    let writes = ws.iter().map(|(m, w)| {
                        let write = SectionWrite {
                            biz: biz.to_owned(),
                            section,
                            expected: w.expected,
                            holder: holder.to_owned(),
                            bound: w.bound,
                            lease_ms: millis(lease),
                        };
                        let i = members[*m];
                        async move { self.write_section(i, &write).await }
                    });
                    let written = join_all(writes).await;
                    for ((m, _), answer) in ws.into_iter().zip(written) {
                        claim.written(m, answer);
                    }
                }
                Need::Done(outcome) => {
                    self.note_fenced_sections(biz, section, &members, &outcome);
                    return Ok(SectionClaim { outcome, started });
                }
            }
        }
    }

    /// Every section row of `biz` on the members that answer, each section's at its
    /// highest version: who holds what, as a hint for routes and balancing (a claim
    /// reads the rows again). Empty when no member answers.
    pub async fn section_rows(&self, biz: &str) -> BTreeMap<u32, SectionRow> {
        let members = self.members_in_force();
        let reads = members.iter().map(|&i| async move {
            let i = i.filter(|&i| self.is_reachable(i))?;
            self.call(i, self.dbs.list[i].store.sections(biz))
                .await
                .ok()
        });
        let mut merged: BTreeMap<u32, SectionRow> = BTreeMap::new();
        for (section, row) in join_all(reads).await.into_iter().flatten().flatten() {
            match merged.get(&section) {
                Some(held) if held.version >= row.version => {}
                _ => {
                    merged.insert(section, row);
                }
            }
        }
        merged
    }

    /// Member database `i`'s row of the section, or down.
    async fn read_section(&self, i: Option<usize>, biz: &str, section: u32) -> Read {
        let Some(i) = i.filter(|&i| self.is_reachable(i)) else {
            return Read::Down;
        };
        let db = &self.dbs.list[i];
        match self.call(i, db.store.section(biz, section)).await {
            Ok(Some(row)) => Read::Row(row),
            Ok(None) => Read::Absent,
            Err(_) => Read::Down,
        }
    }

    /// A write of member database `i`'s row: an error or a timeout is an unknown
    /// outcome, never a success.
    async fn write_section(&self, i: Option<usize>, write: &SectionWrite) -> Written {
        let Some(i) = i else {
            return Written::Down;
        };
        let db = &self.dbs.list[i];
        match self.call(i, db.store.write_section(write)).await {
            Ok(Some(row)) => Written::At(row.version),
            Ok(None) => Written::Lost,
            Err(_) => Written::Down,
        }
    }

    /// Logs the members whose row of the section lay below the version this server had
    /// written: restored from a backup. The claim did not count them, and its writes
    /// repair them on the next claim that reads them.
    fn note_fenced_sections(
        &self,
        biz: &str,
        section: u32,
        members: &[Option<usize>],
        outcome: &Outcome,
    ) {
        let fenced = match outcome {
            Outcome::Owned { fenced, .. } | Outcome::Unavailable { fenced, .. } => fenced,
            _ => return,
        };
        for &m in fenced {
            if let Some(i) = members[m] {
                tracing::error!(database = %self.dbs.names[i], biz, section, "a sequence section's row went back in time (restored from a backup?); not counted");
            }
        }
    }
}
