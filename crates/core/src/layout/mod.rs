//! Layouts: which databases issue IDs, and from which residue class, at each epoch.
//! Pure: no IO. `segmint db add` and `db remove` move the cluster from one layout to
//! the next (see `crates/store/src/cluster/layout/`); servers read the layouts with the catalog.
//!
//! Epoch 0 is the membership `segmint migrate` records from the configuration
//! ([`Founding`]); servers use no database before they read a layout done. A change claims the next
//! epoch (inserting its row as `moving` on every database, one at a time in
//! [`claim_order`]: of two changes racing for one epoch only one can win), moves every
//! biz row and worker ID to it, then marks it `done`.
//!
//! The decisions of a change are made here, by pure functions that the store and the
//! model checker (`crates/model`) both call: which databases must answer
//! ([`required`]), what the change does ([`plan`]), in which order it claims
//! ([`claim_order`]), where a biz's new rows start ([`fence`]), and which databases a
//! server may use ([`standing`]).

use crate::rows::LayoutRow;
use crate::segment::Residue;

mod change;
pub mod changing;
mod founding;
pub mod moving;
mod standing;
#[cfg(test)]
mod tests;

pub use change::{
    Heal, LayoutChange, Plan, PlanError, claim_order, fence, frozen_by, healing, overlap, plan,
    required, target, uncovered,
};
pub use changing::{Change, Decision};
pub use founding::{Founding, FoundingError, Need};
pub use moving::{Frame, Move};
pub use standing::{Reading, Standing, read, settled, standing};

/// How far a layout's change got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayoutState {
    /// Being applied: bizs and worker IDs still follow the layout before it.
    Moving,
    /// Every biz row and worker ID follows it.
    Done,
    /// A later change replaced it before it was done.
    Superseded,
}

impl LayoutState {
    pub fn as_str(self) -> &'static str {
        match self {
            LayoutState::Moving => "moving",
            LayoutState::Done => "done",
            LayoutState::Superseded => "superseded",
        }
    }

    fn parse(text: &str) -> Option<LayoutState> {
        match text {
            "moving" => Some(LayoutState::Moving),
            "done" => Some(LayoutState::Done),
            "superseded" => Some(LayoutState::Superseded),
            _ => None,
        }
    }
}

/// One database of a layout.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Member {
    pub name: String,
    /// The class plain bizs get on it.
    pub class: Residue,
}

/// The databases issuing IDs at one epoch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    pub epoch: i64,
    pub members: Vec<Member>,
    pub state: LayoutState,
    /// Databases declared lost (`segmint db remove NAME --lost`), once per class they
    /// held in any layout: a lost database may come back with live rows and leases that
    /// no change could freeze, so no later layout gives any of these classes (nor their
    /// worker IDs) to another database. Carried into every later epoch.
    pub lost: Vec<Member>,
}

impl Layout {
    /// The layout of `names`, in that order, each database `i` of `n` with the class
    /// `i mod n`: pairwise disjoint, and covering every ID (every worker ID has a home).
    pub fn spread(epoch: i64, names: &[String], state: LayoutState) -> Result<Layout, String> {
        let n = i64::try_from(names.len()).map_err(|e| e.to_string())?;
        let members = names
            .iter()
            .zip(0..)
            .map(|(name, i)| {
                Ok(Member {
                    name: name.clone(),
                    class: Residue::new(n, i).map_err(|e| e.to_string())?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let layout = Layout {
            epoch,
            members,
            state,
            lost: Vec::new(),
        };
        layout.assert_disjoint();
        Ok(layout)
    }

    /// The postcondition of a new layout's classes: pairwise disjoint, and disjoint
    /// from every lost database's (else two databases could issue one ID).
    fn assert_disjoint(&self) {
        let classes: Vec<(usize, Residue)> =
            self.members.iter().map(|m| m.class).enumerate().collect();
        assert!(
            crate::segment::judge::first_overlap(&classes).is_none()
                && !self
                    .members
                    .iter()
                    .any(|m| self.lost.iter().any(|l| l.class.overlaps(m.class))),
            "a new layout's classes are disjoint: {}",
            self.describe()
        );
    }

    /// The layout of `names` that gives no database a class of a `lost` one: database
    /// `i` of `n` gets `f + m·i mod m·n`, where `m` is the least common multiple of the
    /// lost classes' moduli and `f` the least residue mod `m` that no lost class holds.
    /// With nothing lost it is [`Layout::spread`]. The classes then cover only `f mod m`
    /// of the IDs (and of the worker IDs): what a lost database held is never reused.
    ///
    /// # Errors
    /// A message when the lost classes leave no residue free.
    pub fn allocate(
        epoch: i64,
        names: &[String],
        lost: Vec<Member>,
        state: LayoutState,
    ) -> Result<Layout, String> {
        let mut layout = Layout::spread(epoch, names, state)?;
        if lost.is_empty() {
            return Ok(layout);
        }
        let m = lost.iter().try_fold(1i64, |m, l| {
            let d = l.class.delta();
            (m / gcd(m, d))
                .checked_mul(d)
                .filter(|&m| m <= MAX_MODULUS)
                .ok_or_else(|| "the lost databases' classes are too many to keep apart".to_owned())
        })?;
        let free = (0..m)
            .find(|&r| !lost.iter().any(|l| l.class.contains(r)))
            .ok_or_else(|| {
                "the lost databases' classes hold every ID: no class is left for a new layout"
                    .to_owned()
            })?;
        let n = i64::try_from(names.len()).map_err(|e| e.to_string())?;
        let modulus = m
            .checked_mul(n)
            .filter(|&x| x <= MAX_MODULUS)
            .ok_or_else(|| "too many databases for the classes the lost ones left".to_owned())?;
        for (member, i) in layout.members.iter_mut().zip(0..) {
            member.class = Residue::new(modulus, free + m * i).map_err(|e| e.to_string())?;
        }
        layout.lost = lost;
        layout.assert_disjoint();
        Ok(layout)
    }

    /// Reads a stored row.
    ///
    /// # Errors
    /// A message naming what is malformed.
    pub fn parse(row: &LayoutRow) -> Result<Layout, String> {
        let bad = |what: String| format!("layout epoch {}: {what}", row.epoch);
        let state = LayoutState::parse(&row.state)
            .ok_or_else(|| bad(format!("unknown state `{}`", row.state)))?;
        let mut members = Vec::new();
        let mut lost = Vec::new();
        for part in row.members.split(',').filter(|p| !p.is_empty()) {
            let (list, part) = match part.strip_prefix('!') {
                Some(rest) => (&mut lost, rest),
                None => (&mut members, part),
            };
            let member = (|| {
                let (name, class) = part.split_once('=')?;
                let (delta, remainder) = class.split_once(':')?;
                let class = Residue::new(delta.parse().ok()?, remainder.parse().ok()?).ok()?;
                Some(Member {
                    name: name.to_owned(),
                    class,
                })
            })()
            .ok_or_else(|| bad(format!("malformed member `{part}`")))?;
            list.push(member);
        }
        Ok(Layout {
            epoch: row.epoch,
            members,
            state,
            lost,
        })
    }

    /// The row to store, written at `changed_ms`. A lost database is written as a
    /// member with a leading `!`.
    pub fn row(&self, changed_ms: i64) -> LayoutRow {
        let member = |m: &Member| format!("{}={}:{}", m.name, m.class.delta(), m.class.remainder());
        LayoutRow {
            epoch: self.epoch,
            members: self
                .members
                .iter()
                .map(member)
                .chain(self.lost.iter().map(|m| format!("!{}", member(m))))
                .collect::<Vec<_>>()
                .join(","),
            state: self.state.as_str().to_owned(),
            changed_ms,
        }
    }

    /// The class of the database `name`; `None` when it is not a member.
    pub fn class_of(&self, name: &str) -> Option<Residue> {
        self.members
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.class)
    }

    pub fn names(&self) -> Vec<String> {
        self.members.iter().map(|m| m.name.clone()).collect()
    }

    /// Whether the database `name` was declared lost at or before this epoch.
    pub fn is_lost(&self, name: &str) -> bool {
        self.lost.iter().any(|m| m.name == name)
    }

    /// The names of the lost databases, each once.
    pub fn lost_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.lost.iter().map(|m| m.name.clone()).collect();
        names.dedup();
        names
    }

    /// The member whose class holds the worker ID `w`, if any.
    pub fn owner_of(&self, w: u16) -> Option<&str> {
        self.members
            .iter()
            .find(|m| m.class.contains(i64::from(w)))
            .map(|m| m.name.as_str())
    }

    /// `name=class` for each member, for messages.
    pub fn describe(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{} ({})", m.name, m.class))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The largest modulus a layout may give: far below where arithmetic could overflow,
/// and far above any real cluster (a thousand databases, a few of them lost).
const MAX_MODULUS: i64 = 1 << 30;

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The layouts as read from every database: each epoch once, the furthest state
/// found for it (a database missed by a write lags behind), sorted by epoch.
///
/// # Errors
/// A message naming a malformed row, or an epoch whose members differ between
/// databases.
pub fn merge(rows: &[LayoutRow]) -> Result<Vec<Layout>, String> {
    let mut merged: Vec<Layout> = Vec::new();
    for row in rows {
        let layout = Layout::parse(row)?;
        match merged.iter_mut().find(|l| l.epoch == layout.epoch) {
            Some(known) if known.members != layout.members || known.lost != layout.lost => {
                return Err(format!(
                    "layout epoch {} differs between databases: {} and {}",
                    layout.epoch,
                    known.describe(),
                    layout.describe()
                ));
            }
            Some(known) => {
                if rank(layout.state) > rank(known.state) {
                    known.state = layout.state;
                }
            }
            None => merged.push(layout),
        }
    }
    merged.sort_by_key(|l| l.epoch);
    Ok(merged)
}

fn rank(state: LayoutState) -> u8 {
    match state {
        LayoutState::Moving => 0,
        LayoutState::Done | LayoutState::Superseded => 1,
    }
}

/// The layout in force (the latest done; `None` before any change) and the change
/// under way above it, if any.
pub fn current(layouts: &[Layout]) -> (Option<&Layout>, Option<&Layout>) {
    let done = layouts.iter().rev().find(|l| l.state == LayoutState::Done);
    let pending = layouts
        .iter()
        .rev()
        .find(|l| l.state == LayoutState::Moving && done.is_none_or(|d| l.epoch > d.epoch));
    (done, pending)
}

/// Whether worker IDs may be leased under the `layouts` read: only the classes of a
/// layout done say which database holds which worker ID. Under a change still moving
/// (a new database that holds nothing else yet), or before any layout is read, a
/// worker ID may be leased on another database this process did not reach.
pub fn leases_allowed(layouts: &[Layout]) -> bool {
    current(layouts).0.is_some()
}

/// The restriction of a biz (odd-only: `1 mod 2`) whose row has the class `row` on a
/// database of class `db`: the inverse of [`Residue::restrict`]. `None` when `row` is
/// not a restriction of `db`.
pub fn restriction(row: Residue, db: Residue) -> Option<Residue> {
    if row.delta() % db.delta() != 0 {
        return None;
    }
    let m = row.delta() / db.delta();
    let within = Residue::new(m, row.remainder() % m).ok()?;
    (db.restrict(within).ok()? == row).then_some(within)
}
