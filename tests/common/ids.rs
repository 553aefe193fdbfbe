//! Checks on the IDs a test collected.

use std::collections::HashSet;

/// Panics if any ID of `ids` occurs twice, naming up to ten of them.
pub fn assert_unique(ids: &[i64]) {
    let mut seen = HashSet::with_capacity(ids.len());
    let twice: Vec<i64> = ids
        .iter()
        .copied()
        .filter(|&id| !seen.insert(id))
        .take(10)
        .collect();
    assert!(
        twice.is_empty(),
        "{} IDs issued, and these (at least) were issued twice: {twice:?}",
        ids.len()
    );
}
