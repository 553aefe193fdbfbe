//! segmint's pure core: the rules every other layer applies, with no IO, no tokio, no
//! SQL and no HTTP (the dependency graph keeps it so: this crate depends on none of
//! them).
//!
//! - [`segment`]: residue classes, segments, the double buffer, give-back plans.
//! - [`step`] and [`rate`]: issue rates and the step sized from them.
//! - [`layout`]: database layouts and the rules of a layout change.
//! - [`rows`]: the database rows those rules read.
//! - [`lease`]: when a lease's holder stops and another may take it over.
//! - [`evidence`]: how far every row has advanced, and what a row behind it means.
//! - [`sequence`]: sequences that only go up: keys, sections, claiming a section, the
//!   holders of sections and presence slots, and carrying sections through a layout
//!   change.
//! - [`shape`]: a biz's ID order (sequential, shuffled, opaque) and format.
//! - [`snowflake`]: snowflake bit layouts (Leaf's, JavaScript-safe), decoding, the clock
//!   guard, and the spec a cluster agrees on.
//! - [`backoff`]: the back-off after failures.
//! - [`biz`]: biz names, batch sizes, tokens and their digests.
//! - [`name`]: biz names held once in the process, each a number.
//! - [`import`]: parsing Tinyid's and Leaf's table exports, and planning the import.
//! - Operator commands planned here and carried out by the store: [`biz_add`],
//!   [`recover`] (a periodic biz whose rows went ahead of the clocks), [`db_fence`].

pub mod backoff;
pub mod biz;
pub mod biz_add;
pub mod db_fence;
pub mod evidence;
pub mod import;
pub mod layout;
pub mod lease;
pub mod name;
pub mod rate;
pub mod recover;
pub mod rows;
pub mod segment;
pub mod sequence;
pub mod shape;
pub mod snowflake;
pub mod step;
