//! The snowflake spec (epoch and bit layout) a cluster's servers agree on before any of
//! them leases a worker ID. Two servers with different specs could issue equal IDs
//! (a JavaScript-safe ID of one is a Leaf ID of another), so every database keeps one
//! record of the spec, written once and never changed, and [`agree`] decides from a
//! read of every database of the layout in force:
//!
//! - a database holding another spec refuses the lease for good
//!   ([`Agreement::Differs`]);
//! - a server leases when every database answered and holds its spec; once it has seen
//!   that (it is *confirmed*), also when every database that answered holds it, one at
//!   least, while others are down ([`Agreement::Agreed`]);
//! - a database without the record (new, restored from a backup older than it, or the
//!   whole cluster on its first lease) gets it only from a server that has just read
//!   every database, all answering, each empty or holding its spec
//!   ([`Agreement::Record`]); the server inserts it where absent (insert-if-absent)
//!   and reads every database again, deciding again by these rules (a second
//!   `Record` is not followed: the try ends undecided).
//!
//! Two servers with different specs starting at once on empty databases may then both
//! be refused (each inserted first on one), never both lease. Only a confirmed server
//! leases on a partial read: leasing on any partial read (every database that answered
//! holds the spec) is unsafe, as `tests/model/agreement.rs` finds: a server whose
//! insert was decided before another's lease lands on a database just restored from
//! a backup (its record gone), and with the other database down it reads only its
//! own record.

/// What a read of one database's record found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read<'a> {
    /// The database did not answer.
    Down,
    /// It answered and holds no record.
    Empty,
    /// It holds this spec's record.
    Holds(&'a str),
}

/// What a server does after reading every database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Agreement {
    /// Lease. `every`: every database answered and holds the spec; the server is
    /// confirmed from then on.
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
/// database of the layout in force; `confirmed` once an earlier read of this server
/// found every database holding its spec.
pub fn agree(own: &str, reads: &[Read<'_>], confirmed: bool) -> Agreement {
    if let Some((index, found)) = reads.iter().enumerate().find_map(|(i, r)| match r {
        Read::Holds(s) if *s != own => Some((i, (*s).to_owned())),
        _ => None,
    }) {
        return Agreement::Differs { index, found };
    }
    let holds = reads.iter().filter(|r| matches!(r, Read::Holds(_))).count();
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
        assert_eq!(agree("a", &[Holds("a"), Holds("a")], false), EVERY);
        assert_eq!(agree("a", &[Holds("a"), Down], false), Agreement::Undecided);
        assert_eq!(agree("a", &[Holds("a"), Down], true), PARTIAL);
        assert_eq!(agree("a", &[Down, Down], true), Agreement::Undecided);
        assert_eq!(
            agree("a", &[Down, Holds("b")], true),
            Agreement::Differs {
                index: 1,
                found: "b".into()
            }
        );
    }

    #[test]
    fn records_only_after_reading_every_database() {
        assert_eq!(agree("a", &[Empty, Empty], false), Agreement::Record);
        assert_eq!(agree("a", &[Empty, Holds("a")], true), Agreement::Record);
        assert_eq!(agree("a", &[Empty, Down], true), Agreement::Undecided);
        assert_eq!(agree("a", &[], false), Agreement::Undecided);
    }
}
