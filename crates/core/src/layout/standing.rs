//! Which databases a server may use under the layouts it read.

use super::{Layout, merge};
use crate::rows::LayoutRow;
use crate::segment::Residue;

/// Whether a server may use a database under the layouts it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Its layout rows disagree with another database's (an epoch with other members):
    /// neither is trusted, and neither is used.
    Disagrees,
    /// Its layout is the newest read: it serves its class (if it is a member).
    Current,
    /// Its newest layout epoch (`None`: it has none while others do) is below
    /// `newest`, another database's: a change it missed may have moved its classes to
    /// others, so its rows and leases are not used until it catches up.
    Behind { own: Option<i64>, newest: i64 },
    /// Declared lost at `epoch`: never used again.
    Lost { epoch: i64 },
}

impl Standing {
    pub fn as_str(&self) -> &'static str {
        match self {
            Standing::Current => "current",
            Standing::Disagrees => "disagrees",
            Standing::Behind { .. } => "behind",
            Standing::Lost { .. } => "lost",
        }
    }
}

/// What a server makes of the layout rows it read: the layouts merged (with those
/// `known` from earlier reads) and the standing of each database read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    pub layouts: Vec<Layout>,
    /// Per database of the read, in its order.
    pub standing: Vec<Standing>,
}

/// Merges the layout rows read from each database (`(name, rows)`) with the layouts
/// `known` before. A database whose rows disagree with what is known, or with another
/// database's, is left out of the merge (both sides of a disagreement are).
///
/// # Errors
/// A message when even the layouts known before cannot be read back (a malformed row).
pub fn read(known: &[Layout], per_db: &[(String, Vec<LayoutRow>)]) -> Result<Reading, String> {
    let known_rows: Vec<LayoutRow> = known.iter().map(|l| l.row(0)).collect();
    let fits = |rows: &[&[LayoutRow]]| {
        let all: Vec<LayoutRow> = rows.iter().flat_map(|r| r.iter().cloned()).collect();
        merge(&all).is_ok()
    };
    let mut out: Vec<bool> = per_db
        .iter()
        .map(|(_, rows)| !fits(&[&known_rows, rows]))
        .collect();
    for a in 0..per_db.len() {
        for b in a + 1..per_db.len() {
            if !out[a] && !out[b] && !fits(&[&per_db[a].1, &per_db[b].1]) {
                out[a] = true;
                out[b] = true;
            }
        }
    }
    let rows: Vec<LayoutRow> = known_rows
        .into_iter()
        .chain(
            per_db
                .iter()
                .zip(&out)
                .filter(|(_, out)| !**out)
                .flat_map(|((_, rows), _)| rows.iter().cloned()),
        )
        .collect();
    let layouts = merge(&rows)?;
    let standing = per_db
        .iter()
        .zip(&out)
        .map(|((name, rows), out)| {
            if *out {
                Standing::Disagrees
            } else {
                standing(name, rows.iter().map(|r| r.epoch).max(), &layouts)
            }
        })
        .collect();
    Ok(Reading { layouts, standing })
}

/// Whether a biz's rows already follow `wanted` (per database, its class in the
/// target layout narrowed to the biz's restriction; `None` for a database out of it):
/// every member's row unfrozen in its class at `epoch`, every other row frozen or
/// absent.
pub fn settled(
    rows: &[Option<crate::rows::Reclass>],
    wanted: &[Option<Residue>],
    epoch: i64,
) -> bool {
    rows.iter()
        .zip(wanted)
        .all(|(row, want)| match (want, row) {
            (Some(class), Some(r)) => {
                !r.frozen
                    && r.epoch == epoch
                    && (r.delta, r.remainder) == (class.delta(), class.remainder())
            }
            (Some(_), None) => false,
            (None, r) => r.is_none_or(|r| r.frozen),
        })
}

/// The standing of database `name`, whose own newest layout epoch is `own`, among
/// `layouts` merged from every database read (whose newest epoch is the newest any
/// database has).
pub fn standing(name: &str, own: Option<i64>, layouts: &[Layout]) -> Standing {
    if let Some(l) = layouts.iter().find(|l| l.is_lost(name)) {
        return Standing::Lost { epoch: l.epoch };
    }
    match layouts.last() {
        Some(newest) if own.is_none_or(|e| e < newest.epoch) => Standing::Behind {
            own,
            newest: newest.epoch,
        },
        _ => Standing::Current,
    }
}
