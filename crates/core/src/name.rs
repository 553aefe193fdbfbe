//! Biz names held once in the process: a [`Name`] is a number, four bytes, in place of
//! a copy of the name. The structures that hold something of every row of every biz
//! (marks, witnesses, grants, the catalog; millions at a million bizs) key them by
//! `Name`, where each kept a `String` of its own.
//!
//! A name, once held, stays for the life of the process (about 40 bytes and its own
//! length): a biz deleted and never added again leaves its name behind. Reading a
//! name takes no lock; finding one by its text takes a read lock, holding a new one a
//! write lock for a table insert.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::LazyLock;

use hashbrown::HashTable;
use parking_lot::RwLock;

/// Names are copied into chunks of this many bytes, one allocation each.
const CHUNK: usize = 64 * 1024;

/// Every name held, by number.
struct Table {
    /// By number; read without a lock, never moved.
    names: boxcar::Vec<&'static str>,
    /// What a new name takes (written), and a search by text (read).
    writer: RwLock<Writer>,
    hasher: foldhash::fast::RandomState,
}

/// The numbers by the hashes of their names, and the chunk names are copied into.
struct Writer {
    ids: HashTable<u32>,
    /// What is left of the current chunk.
    free: &'static mut [u8],
}

static TABLE: LazyLock<Table> = LazyLock::new(|| Table {
    names: boxcar::Vec::new(),
    writer: RwLock::new(Writer {
        ids: HashTable::new(),
        free: &mut [],
    }),
    hasher: foldhash::fast::RandomState::default(),
});

impl Writer {
    /// A copy of `name` that lives as long as the process.
    fn keep(&mut self, name: &str) -> &'static str {
        if name.len() > CHUNK / 4 {
            return Box::leak(name.into());
        }
        if self.free.len() < name.len() {
            self.free = vec![0; CHUNK].leak();
        }
        let (copy, free) = std::mem::take(&mut self.free).split_at_mut(name.len());
        self.free = free;
        copy.copy_from_slice(name.as_bytes());
        // A copy of a `str`'s bytes: valid UTF-8.
        std::str::from_utf8(copy).unwrap_or_default()
    }
}

/// A biz name held once in the process. Equal names are one number; names order,
/// hash and compare as their text does, so a map keyed by `Name` is looked up by
/// `&str`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Name(u32);

impl Name {
    /// The number of `name`, held from now on if it was not yet.
    ///
    /// # Panics
    /// When more than 4,294,967,295 names were held.
    pub fn new(name: &str) -> Name {
        let table = &*TABLE;
        let hash = table.hasher.hash_one(name);
        if let Some(found) = Name::search(&table.writer.read(), hash, name) {
            return found;
        }
        let mut writer = table.writer.write();
        if let Some(found) = Name::search(&writer, hash, name) {
            return found;
        }
        let names = &table.names;
        let kept = writer.keep(name);
        let id = u32::try_from(names.push(kept)).expect("fewer than 2^32 biz names");
        let hasher = &table.hasher;
        writer.ids.insert_unique(hash, id, |&id| {
            hasher.hash_one(names.get(id as usize).copied().unwrap_or_default())
        });
        Name(id)
    }

    /// The number of `name`, if it is held.
    pub fn find(name: &str) -> Option<Name> {
        let table = &*TABLE;
        Name::search(&table.writer.read(), table.hasher.hash_one(name), name)
    }

    fn search(writer: &Writer, hash: u64, name: &str) -> Option<Name> {
        let names = &TABLE.names;
        writer
            .ids
            .find(hash, |&id| names.get(id as usize) == Some(&name))
            .map(|&id| Name(id))
    }

    /// The name's number: names are numbered from 0 in the order first held, so that
    /// what is kept of every biz can be a vector indexed by it.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The name numbered `index`, if one is.
    pub fn from_index(index: usize) -> Option<Name> {
        let id = u32::try_from(index).ok()?;
        TABLE.names.get(index).map(|_| Name(id))
    }

    /// How many names are held.
    pub fn count() -> usize {
        TABLE.names.count()
    }

    /// The name's text.
    pub fn as_str(self) -> &'static str {
        // Every `Name` was made by `Name::new`, after its text was pushed.
        TABLE
            .names
            .get(self.0 as usize)
            .copied()
            .unwrap_or_default()
    }
}

impl std::ops::Deref for Name {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl Hash for Name {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match self.0 == other.0 {
            true => std::cmp::Ordering::Equal,
            false => self.as_str().cmp(other.as_str()),
        }
    }
}

impl From<&str> for Name {
    fn from(name: &str) -> Name {
        Name::new(name)
    }
}

impl From<&Name> for Name {
    fn from(name: &Name) -> Name {
        *name
    }
}

impl From<String> for Name {
    fn from(name: String) -> Name {
        Name::new(&name)
    }
}

impl From<&String> for Name {
    fn from(name: &String) -> Name {
        Name::new(name)
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl serde::Serialize for Name {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use super::*;

    #[test]
    fn a_name_is_held_once_and_read_back() {
        let a = Name::new("name-test-order");
        assert_eq!(Name::new("name-test-order"), a);
        assert_eq!(Name::new(&String::from("name-test-order")), a);
        assert_ne!(Name::new("name-test-invoice"), a);
        assert_eq!(Name::find("name-test-order"), Some(a));
        assert_eq!(Name::find("name-test-never-held"), None);
        assert_eq!(Name::from_index(a.index()), Some(a));
        assert!(Name::count() > a.index());
        assert_eq!(Name::from_index(u32::MAX as usize), None);
        assert_eq!(a.as_str(), "name-test-order");
        assert_eq!(Name::new("").as_str(), "");
        let long = "x".repeat(CHUNK);
        assert_eq!(Name::new(&long).as_str(), long);
    }

    #[test]
    fn names_order_and_are_found_as_their_text() {
        let names = ["name-test-b", "name-test-a", "name-test-c", "name-test-é"];
        let by_name: BTreeMap<Name, usize> = names.iter().map(|n| (Name::new(n), 0)).collect();
        let order: Vec<&str> = by_name.keys().map(|n| n.as_str()).collect();
        let mut sorted = names.to_vec();
        sorted.sort_unstable();
        assert_eq!(order, sorted);
        assert!(by_name.contains_key("name-test-é"));
        let hashed: HashMap<Name, usize> = names.iter().map(|n| (Name::new(n), 1)).collect();
        assert_eq!(hashed.get("name-test-c"), Some(&1));
        assert_eq!(hashed.get("name-test-d"), None);
    }

    /// Threads holding the same names at once get the same numbers.
    #[test]
    fn names_held_from_many_threads_are_one_number_each() {
        let ids: Vec<Vec<Name>> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (0..5_000)
                            .map(|i| Name::new(&format!("name-test-thread-{i}")))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        for other in &ids[1..] {
            assert_eq!(other, &ids[0]);
        }
        for (i, name) in ids[0].iter().enumerate() {
            assert_eq!(name.as_str(), format!("name-test-thread-{i}"));
        }
    }
}
