//! The names of every biz, sorted once per catalog, so that a page by name is a binary
//! search and a walk, not a sort of every biz per request.

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::biz::BizTag;
use crate::store::Catalog;

/// Biz names in order, without duplicates, in one string: a million names take two
/// allocations and are walked in memory order.
#[derive(Debug)]
pub struct NameIndex {
    /// The catalog generation the names were read from (0: none yet).
    generation: u64,
    /// The names, one after the other.
    text: String,
    /// Where each name starts in `text`, and where the last one ends.
    starts: Vec<usize>,
}

impl Default for NameIndex {
    /// No names, of no catalog.
    fn default() -> NameIndex {
        NameIndex::new(0, [])
    }
}

impl NameIndex {
    /// The names of `names`, sorted and without duplicates, read from the catalog of
    /// `generation`.
    pub fn new<'a>(generation: u64, names: impl IntoIterator<Item = &'a str>) -> NameIndex {
        let mut names: Vec<&str> = names.into_iter().collect();
        names.sort_unstable();
        names.dedup();
        let mut text = String::with_capacity(names.iter().map(|n| n.len()).sum());
        let mut starts = Vec::with_capacity(names.len() + 1);
        starts.push(0);
        for name in names {
            text.push_str(name);
            starts.push(text.len());
        }
        NameIndex {
            generation,
            text,
            starts,
        }
    }

    /// The catalog generation the names were read from.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th name; `i` must be below [`NameIndex::len`].
    pub fn name(&self, i: usize) -> &str {
        &self.text[self.starts[i]..self.starts[i + 1]]
    }

    /// The names from the `from`-th on, in order.
    pub fn names_from(&self, from: usize) -> impl Iterator<Item = &str> {
        self.starts[from.min(self.len())..]
            .windows(2)
            .map(|w| &self.text[w[0]..w[1]])
    }

    /// How many names sort at or before `name`: where the names after it start.
    pub fn after(&self, name: &str) -> usize {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let mid = low + (high - low) / 2;
            if self.name(mid) <= name {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        low
    }

    /// Whether `name` is one of the names.
    pub fn contains(&self, name: &str) -> bool {
        let i = self.after(name);
        i > 0 && self.name(i - 1) == name
    }
}

/// The name index of the current catalog, rebuilt when the catalog changes, off the
/// HTTP workers' threads.
#[derive(Default)]
pub struct Names {
    /// The index last built; read without a lock.
    index: ArcSwap<NameIndex>,
    /// Single flight of rebuilds: one at a time, the others wait for it and use it.
    building: tokio::sync::Mutex<()>,
}

impl Names {
    /// The index of `catalog` and of the bizs `in_use` (a biz removed from the
    /// databases while its cache still serves is listed too), rebuilt only when the
    /// catalog is newer than the index's (generations only grow: an index of a newer
    /// catalog than the caller's is as good). A rebuild sorts every name again,
    /// 0.3–0.5 s at a million names on a loaded 2-core machine; checking each name
    /// against the catalog's map instead, to keep the last index when no name
    /// changed, took no less (0.8 s).
    pub async fn of(
        &self,
        catalog: Arc<Catalog>,
        in_use: impl FnOnce() -> Vec<BizTag>,
    ) -> Arc<NameIndex> {
        let current = self.index.load_full();
        if current.generation() >= catalog.generation() {
            return current;
        }
        let _building = self.building.lock().await;
        let current = self.index.load_full();
        if current.generation() >= catalog.generation() {
            return current;
        }
        let in_use = in_use();
        let started = std::time::Instant::now();
        let built = tokio::task::spawn_blocking(move || rebuilt(&catalog, &in_use))
            .await
            // A rebuild that panicked leaves the last index in place.
            .unwrap_or_else(|_| self.index.load_full());
        tracing::debug!(
            bizs = built.len(),
            generation = built.generation(),
            took_ms = started.elapsed().as_millis(),
            "biz names sorted"
        );
        self.index.store(built.clone());
        built
    }
}

/// The index of the names of `catalog` and of the bizs `in_use` it does not list.
fn rebuilt(catalog: &Catalog, in_use: &[BizTag]) -> Arc<NameIndex> {
    let extra = in_use
        .iter()
        .map(BizTag::as_str)
        .filter(|b| catalog.biz(b).is_none());
    Arc::new(NameIndex::new(
        catalog.generation(),
        catalog.biz_names().into_iter().chain(extra),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sorted_once_and_searched() {
        let index = NameIndex::new(7, ["user", "order", "a", "order", "zeta"]);
        assert_eq!(index.generation(), 7);
        assert_eq!(
            index.names_from(0).collect::<Vec<_>>(),
            ["a", "order", "user", "zeta"]
        );
        assert_eq!(index.after(""), 0);
        assert_eq!(index.after("a"), 1);
        assert_eq!(index.after("b"), 1);
        assert_eq!(index.after("user"), 3);
        assert_eq!(index.after("zz"), 4);
        assert_eq!(index.names_from(3).collect::<Vec<_>>(), ["zeta"]);
        assert_eq!(index.names_from(9).count(), 0);
        assert!(index.contains("order") && !index.contains("orde") && !index.contains("zz"));
        assert!(NameIndex::default().is_empty());
    }
}
