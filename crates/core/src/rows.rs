//! The rows the databases hold that the pure rules read: a biz's row and a layout row.
//! The store reads and writes them; the core decides from them.

use crate::name::Name;

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
