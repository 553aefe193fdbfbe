//! The pure segment core: residue classes, segments, cursors, the double buffer and the
//! give-back plan.
//!
//! No IO and no async here: the server and the client library both issue IDs with
//! this arithmetic, and it is unit- and property-tested on its own.

mod buffer;
mod chain;
mod give_back;
pub mod judge;
mod range;
pub mod reserve;
mod residue;
mod window;

pub use buffer::DoubleBuffer;
pub use chain::{Chain, MAX_SEGMENT_IDS, MAX_TAKE, SLOTS, Take};
pub use give_back::{GiveBack, Held, plan_give_back};
pub use range::{Cursor, SegmentRange};
pub use residue::Residue;
pub use window::{Window, WindowMiss};

/// Why a residue class or segment is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    #[error("delta must be at least 1, got {0}")]
    Delta(i64),
    #[error("remainder must be in 0..{delta}, got {remainder}")]
    Remainder { delta: i64, remainder: i64 },
    #[error("step must be at least 1, got {0}")]
    Step(i64),
    #[error("residue class too large for a 64-bit ID")]
    TooLarge,
    #[error(
        "ID space exhausted: max_id {max_id} + step {step} exceeds {}",
        i64::MAX
    )]
    Overflow { max_id: i64, step: i64 },
}
