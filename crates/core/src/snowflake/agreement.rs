//! The snowflake spec (epoch and bit layout) a cluster's servers agree on before any of
//! them leases a worker ID. Two servers with different specs could issue equal IDs
//! (a JavaScript-safe ID of one is a Leaf ID of another), so every database keeps one
//! record of the spec, written once and never changed, and [`agree`] decides from a
//! read of every database of the layout in force:
//!
//! - a server leases only when every database that answered holds exactly its spec,
//!   and one at least does ([`Agreement::Agreed`]);
//! - a database without the record (new, restored from a backup older than it, or the
//!   whole cluster on its first lease) gets it only from a server that has just read
//!   every database, all answering, each empty or holding its spec
//!   ([`Agreement::Record`]); the server inserts it where absent, reads every database
//!   again, and leases only when all now hold it (`recorded`);
//! - a database holding another spec refuses the lease for good ([`Agreement::Differs`]).
//!
//! Two servers with different specs starting at once on empty databases may then both
//! be refused (each inserted first on one), never both lease: after its re-read, each
//! found its record on every database, and one record per database is kept.
//! `tests/model/agreement.rs` checks this over every interleaving.

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
    /// Lease: every database that answered holds this server's spec, one at least.
    Agreed,
    /// Insert the spec where absent (insert-if-absent), then read every database again.
    Record,
    /// Database `index` holds `found`, another spec: this server must never lease.
    Differs {
        /// The database's index in the reads.
        index: usize,
        /// The record it holds.
        found: String,
    },
    /// Not now: a database that answered lacks the record while another did not
    /// answer, or, after recording, not every database holds it. Read again later.
    Undecided,
}

/// The decision of a server whose spec's record is `own`, from `reads` of every
/// database of the layout in force; `recorded` when this is the read after its own
/// inserts.
pub fn agree(own: &str, reads: &[Read<'_>], recorded: bool) -> Agreement {
    if let Some((index, found)) = reads.iter().enumerate().find_map(|(i, r)| match r {
        Read::Holds(s) if *s != own => Some((i, (*s).to_owned())),
        _ => None,
    }) {
        return Agreement::Differs { index, found };
    }
    let holds = reads.iter().filter(|r| matches!(r, Read::Holds(_))).count();
    let down = reads.iter().any(|r| matches!(r, Read::Down));
    if recorded {
        return if holds == reads.len() && holds > 0 {
            Agreement::Agreed
        } else {
            Agreement::Undecided
        };
    }
    let empty = reads.iter().any(|r| matches!(r, Read::Empty));
    if !empty && holds > 0 {
        Agreement::Agreed
    } else if !down && empty {
        Agreement::Record
    } else {
        Agreement::Undecided
    }
}

#[cfg(test)]
mod tests {
    use super::Read::{Down, Empty, Holds};
    use super::*;

    #[test]
    fn leases_only_on_its_own_record() {
        assert_eq!(
            agree("a", &[Holds("a"), Holds("a")], false),
            Agreement::Agreed
        );
        assert_eq!(agree("a", &[Holds("a"), Down], false), Agreement::Agreed);
        assert_eq!(agree("a", &[Down, Down], false), Agreement::Undecided);
        assert_eq!(
            agree("a", &[Down, Holds("b")], false),
            Agreement::Differs {
                index: 1,
                found: "b".into()
            }
        );
    }

    #[test]
    fn records_only_after_reading_every_database() {
        assert_eq!(agree("a", &[Empty, Empty], false), Agreement::Record);
        assert_eq!(agree("a", &[Empty, Holds("a")], false), Agreement::Record);
        assert_eq!(agree("a", &[Empty, Down], false), Agreement::Undecided);
        assert_eq!(agree("a", &[Empty, Holds("a")], true), Agreement::Undecided);
        assert_eq!(agree("a", &[Holds("a"), Down], true), Agreement::Undecided);
        assert_eq!(
            agree("a", &[Holds("a"), Holds("a")], true),
            Agreement::Agreed
        );
        assert_eq!(agree("a", &[], false), Agreement::Undecided);
    }
}
