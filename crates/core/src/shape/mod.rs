//! How a biz's IDs look: their order ([`order`], keyed bijections of the sequential
//! value) and their format ([`format`](mod@format), prefix, width, base, check character). Pure: no
//! IO, no tokio. Both are applied to IDs after issuance, never inside the store, and
//! both are bijections, so no order or format can make two IDs one.

pub mod clocks;
pub mod format;
pub mod order;
pub mod period;
pub mod permutation;

pub use format::{Base, Format, FormatError};
pub use order::{IdOrder, OrderError, Ordering};
pub use period::{Periodic, Reset};
pub use permutation::Permutation;

/// Everything about how one biz's IDs look.
#[derive(Debug, Clone)]
pub struct BizShape {
    /// The order of its IDs.
    pub ordering: Ordering,
    /// How the v1 API and `segmint id decode` write them.
    pub format: Format,
    /// Whether the v1 API writes them as JSON strings even when the format is plain.
    pub as_string: bool,
    /// When its counter restarts each period: the periods, and the windows of the
    /// rows each one owns (its format's pattern writes the date).
    pub period: Option<Periodic>,
    /// A sequence biz's sections and step: per-key numbers (`crate::sequence`), no
    /// IDs.
    pub sequence: Option<SequenceShape>,
}

/// What a sequence biz is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceShape {
    /// How many sections its keys are spread over (each owned by one server).
    pub sections: u32,
    /// How far each claim raises a section's bound: numbers served per database write.
    pub step: i64,
}

impl BizShape {
    /// Whether the IDs are issued as reserved and written as plain numbers: nothing
    /// to apply.
    pub fn is_plain(&self) -> bool {
        self.ordering.order() == IdOrder::Sequential
            && self.format.is_plain()
            && !self.as_string
            && self.period.is_none()
            && self.sequence.is_none()
    }

    /// Whether the v1 API writes the IDs as strings.
    pub fn writes_strings(&self) -> bool {
        self.as_string || !self.format.is_plain()
    }

    /// Puts sequential values `ids` in the biz's order, in place.
    ///
    /// # Errors
    /// [`OrderError`] when a value has no image (beyond an opaque domain): the batch
    /// is not issued.
    pub fn order_ids(&self, ids: &mut [i64]) -> Result<(), OrderError> {
        self.ordering.apply_all(ids)
    }
}

/// The order named `name` (`sequential`, `shuffled`, `opaque`) with its parameters.
///
/// # Errors
/// A message naming the allowed orders.
pub fn parse_order(name: &str, block: u64, domain: u64) -> Result<IdOrder, String> {
    match name {
        "sequential" => Ok(IdOrder::Sequential),
        "shuffled" => Ok(IdOrder::Shuffled {
            block: block.max(1),
        }),
        "opaque" => Ok(IdOrder::Opaque { domain }),
        other => Err(format!(
            "unknown order `{}`: use sequential, shuffled or opaque",
            other.chars().take(32).collect::<String>()
        )),
    }
}

/// The name of `order`, as stored and shown.
pub fn order_name(order: IdOrder) -> &'static str {
    match order {
        IdOrder::Sequential => "sequential",
        IdOrder::Shuffled { .. } => "shuffled",
        IdOrder::Opaque { .. } => "opaque",
    }
}

/// An opaque domain as written on the command line: `i63` (every positive ID), `js`
/// (2^53, the integers JavaScript's numbers hold exactly) or `digits:N` (10^N, 1 ≤ N ≤ 18).
///
/// # Errors
/// A message naming the forms allowed.
pub fn parse_domain(text: &str) -> Result<u64, String> {
    match text {
        "i63" => Ok(i64::MAX as u64),
        "js" => Ok(1 << 53),
        _ => text
            .strip_prefix("digits:")
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|n| (1..=18).contains(n))
            .map(|n| 10u64.pow(n))
            .ok_or_else(|| {
                format!(
                    "unknown domain `{}`: use i63, js (2^53) or digits:N (N from 1 to 18)",
                    text.chars().take(32).collect::<String>()
                )
            }),
    }
}
