//! The rows the databases hold that the pure rules read: a biz's row and a layout row.
//! The store reads and writes them; the core decides from them.

use crate::evidence::Mark;
use crate::name::Name;
use crate::segment::{Residue, SegmentError};

/// One `tiny_id_info` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BizRow {
    /// Held once in the process ([`Name`]): a million rows of two databases hold each
    /// name once, not twice.
    pub biz_type: Name,
    pub begin_id: i64,
    pub max_id: i64,
    pub step: i64,
    pub delta: i64,
    pub remainder: i64,
    pub version: i64,
    /// The operator's note on the biz (Leaf's `description`); empty when none (no
    /// allocation).
    pub description: Box<str>,
    /// The layout epoch the row's class was set in (0: before any layout change).
    pub epoch: i64,
    /// A frozen row gives out no segment: a layout change is moving it, or its database
    /// was removed from the layout.
    pub frozen: bool,
    /// The layout epoch of the last change that wrote the row (0: none): a change to an
    /// earlier epoch never writes it again.
    pub claimed_by: i64,
}

/// One `segmint_layout` row: which databases issue IDs from which class at `epoch`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LayoutRow {
    pub epoch: i64,
    /// `name=delta:remainder`, joined by commas (see [`crate::layout::Layout`]).
    pub members: String,
    /// `moving`, `done` or `superseded`.
    pub state: String,
    /// When the row was last written, by the writer's clock (Unix milliseconds).
    pub changed_ms: i64,
}

/// A layout change's compare-and-set on one biz row: from `version` and `max_id` to
/// these values. It is also all a change reads of a row: the machine of a biz's move
/// ([`crate::layout::Move`]) works on these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reclass {
    pub version: i64,
    pub max_id: i64,
    pub delta: i64,
    pub remainder: i64,
    pub epoch: i64,
    pub frozen: bool,
    pub claimed_by: i64,
}

impl Reclass {
    /// The fields of `row` a layout change reads and writes.
    pub fn of(row: &BizRow) -> Reclass {
        Reclass {
            version: row.version,
            max_id: row.max_id,
            delta: row.delta,
            remainder: row.remainder,
            epoch: row.epoch,
            frozen: row.frozen,
            claimed_by: row.claimed_by,
        }
    }

    /// `row` as it is, frozen or thawed by the change to layout epoch `by`, its version
    /// bumped.
    pub fn freezing(row: &BizRow, frozen: bool, by: i64) -> Reclass {
        Reclass::of(row).frozen_by(frozen, by)
    }

    /// This row frozen or thawed by the change to layout epoch `by`, its version bumped.
    #[must_use]
    pub fn frozen_by(self, frozen: bool, by: i64) -> Reclass {
        Reclass {
            version: self.version + 1,
            frozen,
            claimed_by: by,
            ..self
        }
    }

    /// The row's class.
    ///
    /// # Errors
    /// When `delta` and `remainder` make no class.
    pub fn class(&self) -> Result<Residue, SegmentError> {
        Residue::new(self.delta, self.remainder)
    }

    /// What a row at these values says of its progress ([`Mark::of`]).
    pub fn mark(&self) -> Mark {
        Mark {
            version: self.version,
            max_id: self.max_id,
            high_id: self.max_id,
        }
    }

    /// Whether a row read as `self` lies behind `known` ([`Mark::is_ahead_of`]).
    pub fn is_behind(&self, known: &Mark) -> bool {
        self.version < known.version
            || (self.version == known.version && self.max_id != known.max_id)
    }
}

/// The holder name of a worker ID blocked on a database it moved away from.
pub const MOVED_HOLDER: &str = "segmint-layout";

/// One `segmint_worker_lease` row: a snowflake worker ID and who holds it, with the
/// database's clock when the row was read or written. Times are Unix milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseRow {
    /// The worker ID (0 to 1023).
    pub worker_id: u16,
    /// The process that holds (or last held) it.
    pub holder: String,
    /// Grows with every take, renewal and release: the compare-and-set of the lease.
    pub version: i64,
    /// When the lease runs out, by the database's clock.
    pub expires_ms: i64,
    /// The last timestamp the holder had issued at its last renewal.
    pub last_ms: i64,
    /// The highest timestamp the holder may issue; a later holder issues only above it.
    pub bound_ms: i64,
    /// The database's clock when the statement ran.
    pub db_now_ms: i64,
}

/// One lease row as a layout change sets it (the store's `set_leases_while`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseSet {
    pub worker_id: u16,
    pub holder: String,
    /// Absolute, by the database's clock (Unix milliseconds).
    pub expires_ms: i64,
    /// At least these (the row's only grow).
    pub last_ms: i64,
    pub bound_ms: i64,
}
