//! How a biz's IDs look: their order ([`order`], keyed bijections of the sequential
//! value) and their format ([`format`], prefix, width, base, check character). Pure: no
//! IO, no tokio. Both are applied to IDs after issuance, never inside the store, and
//! both are bijections, so no order or format can make two IDs one.

pub mod format;
pub mod order;
pub mod permutation;

pub use format::{Base, Format, FormatError};
pub use order::{IdOrder, OrderError, Ordering};
pub use permutation::Permutation;
