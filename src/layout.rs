//! Layouts: which databases issue IDs, and from which residue class, at each epoch.
//! Pure: no IO. `segmint db add` and `db remove` move the cluster from one layout to
//! the next (see `store/cluster/layout.rs`); servers read the layouts with the catalog.
//!
//! Epoch 0 is the configuration's classes, before any change. A change writes the next
//! epoch as `moving`, moves every biz row and worker ID to it, then marks it `done`.

use crate::segment::Residue;
use crate::store::LayoutRow;

/// How far a layout's change got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    /// The class plain bizs get on it.
    pub class: Residue,
}

/// The databases issuing IDs at one epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub epoch: i64,
    pub members: Vec<Member>,
    pub state: LayoutState,
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
        Ok(Layout {
            epoch,
            members,
            state,
        })
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
        for part in row.members.split(',').filter(|p| !p.is_empty()) {
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
            members.push(member);
        }
        Ok(Layout {
            epoch: row.epoch,
            members,
            state,
        })
    }

    /// The row to store, written at `changed_ms`.
    pub fn row(&self, changed_ms: i64) -> LayoutRow {
        LayoutRow {
            epoch: self.epoch,
            members: self
                .members
                .iter()
                .map(|m| format!("{}={}:{}", m.name, m.class.delta(), m.class.remainder()))
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
            Some(known) if known.members != layout.members => {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn class(d: i64, r: i64) -> Residue {
        Residue::new(d, r).unwrap()
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn spread_classes_partition_every_id() {
        let l = Layout::spread(3, &names(&["a", "b", "c"]), LayoutState::Done).unwrap();
        for id in 0..100 {
            let owners = l.members.iter().filter(|m| m.class.contains(id)).count();
            assert_eq!(owners, 1, "{id}");
        }
        assert_eq!(l.class_of("b"), Some(class(3, 1)));
        assert_eq!(l.class_of("z"), None);
        assert_eq!(l.owner_of(5), Some("c"));
    }

    #[test]
    fn rows_round_trip_and_malformed_rows_are_named() {
        let l = Layout::spread(2, &names(&["a", "b-2"]), LayoutState::Moving).unwrap();
        let row = l.row(1234);
        assert_eq!(row.members, "a=2:0,b-2=2:1");
        assert_eq!(Layout::parse(&row).unwrap(), l);
        for members in ["a=2", "a=2:2", "a", "a=x:0"] {
            let bad = LayoutRow {
                members: members.into(),
                ..row.clone()
            };
            let e = Layout::parse(&bad).unwrap_err();
            assert!(e.contains("epoch 2") && e.contains("malformed"), "{e}");
        }
        let bad = LayoutRow {
            state: "half".into(),
            ..row
        };
        assert!(Layout::parse(&bad).unwrap_err().contains("half"));
    }

    #[test]
    fn merge_keeps_the_furthest_state_and_refuses_disagreement() {
        let one = Layout::spread(1, &names(&["a"]), LayoutState::Done).unwrap();
        let two = Layout::spread(2, &names(&["a", "b"]), LayoutState::Moving).unwrap();
        let two_done = Layout {
            state: LayoutState::Done,
            ..two.clone()
        };
        let rows = [one.row(1), two.row(2), two_done.row(3), one.row(1)];
        let merged = merge(&rows).unwrap();
        assert_eq!(merged, vec![one.clone(), two_done.clone()]);
        assert_eq!(current(&merged), (Some(&two_done), None));
        let merged = merge(&[one.row(1), two.row(2)]).unwrap();
        assert_eq!(current(&merged), (Some(&one), Some(&two)));
        let other = Layout::spread(2, &names(&["a", "c"]), LayoutState::Done).unwrap();
        let e = merge(&[two.row(2), other.row(3)]).unwrap_err();
        assert!(e.contains("epoch 2 differs"), "{e}");
        assert_eq!(current(&[]), (None, None));
    }

    #[test]
    fn restriction_inverts_restrict() {
        for d in 1..7 {
            for r in 0..d {
                let db = class(d, r);
                for m in 1..5 {
                    for p in 0..m {
                        let within = class(m, p);
                        let row = db.restrict(within).unwrap();
                        assert_eq!(restriction(row, db), Some(within), "{db} {within}");
                    }
                }
            }
        }
        // Not a restriction of the database's class.
        assert_eq!(restriction(class(3, 0), class(2, 0)), None);
        assert_eq!(restriction(class(4, 1), class(2, 1)), None);
    }
}
