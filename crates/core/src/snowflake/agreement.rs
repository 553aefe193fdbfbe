//! The snowflake spec (epoch and bit layout) a cluster's servers agree on before any of
//! them leases a worker ID. Two servers with different specs could issue equal IDs
//! (a JavaScript-safe ID of one is a Leaf ID of another), so every database keeps one
//! record of the spec, written once and never changed, and [`agree`] decides from a
//! read of every database of the layout in force:
//!
//! - a database holding another spec refuses the lease for good
//!   ([`Agreement::Differs`]);
//! - a server leases when every database answered and holds its spec, and then marks
//!   each record *confirmed* (a conditional write: only a record of its spec); it also
//!   leases when every database that answered holds its spec and one of them holds it
//!   confirmed, while others are down or not configured here ([`Agreement::Agreed`]);
//! - a database without the record (new, restored from a backup older than it, or the
//!   whole cluster on its first lease) gets it only from a server that has just read
//!   every database, all answering, each empty or holding its spec
//!   ([`Agreement::Record`]); the server inserts it where absent (insert-if-absent)
//!   and reads every database again, deciding again by these rules (a second
//!   `Record` is not followed: the try ends undecided).
//!
//! Two servers with different specs starting at once on empty databases may then both
//! be refused (each inserted first on one), never both lease. A partial read leases
//! only on a confirmed record: leasing on any partial read (every database that
//! answered holds the spec) is unsafe, as the model checker (`crates/model`) finds: a
//! server whose insert was decided before another's lease lands on a database just
//! restored from a backup (its record gone), and with the other database down it reads
//! only its own record. That record is never confirmed: no read can find it on every
//! database while another holds the first spec.

/// What a read of one database's record found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read<'a> {
    /// The database did not answer.
    Down,
    /// It answered and holds no record.
    Empty,
    /// It holds this spec's record, confirmed or not.
    Holds(&'a str, bool),
}

/// What a server does after reading every database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Agreement {
    /// Lease. `every`: every database answered and holds the spec; the caller then
    /// confirms each record it read unconfirmed.
    Agreed {
        /// Whether every database held the spec in this read.
        every: bool,
    },
    /// Insert the spec where absent (insert-if-absent), then read every database again.
    Record,
    /// Database `index` holds `found`, another spec: this server must never lease.
    Differs {
        /// The database's index in the reads.
        index: usize,
        /// The record it holds.
        found: String,
    },
    /// Not now: a database lacks the record or did not answer, and neither rule above
    /// applies. Read again later.
    Undecided,
}

/// The decision of a server whose spec's record is `own`, from `reads` of every
/// database of the layout in force.
pub fn agree(own: &str, reads: &[Read<'_>]) -> Agreement {
    if let Some((index, found)) = reads.iter().enumerate().find_map(|(i, r)| match r {
        Read::Holds(s, _) if *s != own => Some((i, (*s).to_owned())),
        _ => None,
    }) {
        return Agreement::Differs { index, found };
    }
    let holds = reads
        .iter()
        .filter(|r| matches!(r, Read::Holds(..)))
        .count();
    let confirmed = reads.iter().any(|r| matches!(r, Read::Holds(_, true)));
    let empty = reads.iter().any(|r| matches!(r, Read::Empty));
    let down = reads.iter().any(|r| matches!(r, Read::Down));
    if holds > 0 && holds == reads.len() {
        Agreement::Agreed { every: true }
    } else if confirmed && holds > 0 && !empty {
        Agreement::Agreed { every: false }
    } else if empty && !down {
        Agreement::Record
    } else {
        Agreement::Undecided
    }
}

#[cfg(test)]
mod tests {
    use super::Read::{Down, Empty, Holds};
    use super::*;

    const EVERY: Agreement = Agreement::Agreed { every: true };
    const PARTIAL: Agreement = Agreement::Agreed { every: false };

    #[test]
    fn leases_only_on_its_own_record() {
        assert_eq!(agree("a", &[Holds("a", false), Holds("a", false)]), EVERY);
        assert_eq!(agree("a", &[Holds("a", false), Down]), Agreement::Undecided);
        assert_eq!(agree("a", &[Holds("a", true), Down]), PARTIAL);
        assert_eq!(agree("a", &[Down, Down]), Agreement::Undecided);
        assert_eq!(
            agree("a", &[Down, Holds("b", true)]),
            Agreement::Differs {
                index: 1,
                found: "b".into()
            }
        );
    }

    #[test]
    fn records_only_after_reading_every_database() {
        assert_eq!(agree("a", &[Empty, Empty]), Agreement::Record);
        assert_eq!(agree("a", &[Empty, Holds("a", true)]), Agreement::Record);
        assert_eq!(agree("a", &[Empty, Down]), Agreement::Undecided);
        assert_eq!(
            agree("a", &[Empty, Holds("a", true), Down]),
            Agreement::Undecided
        );
        assert_eq!(agree("a", &[]), Agreement::Undecided);
    }
}
