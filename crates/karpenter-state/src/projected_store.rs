//! A store of projected objects fed by watch events: what kube-runtime's reflector store does, but holding the
//! projection (`P`) of each object rather than the object itself, behind an `Arc` so readers share it.
//!
//! Objects are found by `namespace/name`, read from the object itself ([`Keyed`]) rather than kept beside it as
//! a string: at 150,000 pods those strings and their map slots were 10 MiB of the cache.

use std::{
    cmp::Ordering,
    hash::{BuildHasher, RandomState},
    sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard},
};

use hashbrown::HashTable;

/// `namespace/name` (or `name` for cluster-scoped objects).
pub type ObjectKey = String;

/// What a stored object is found by. Kubernetes names never contain `/`, so `namespace/name` splits back
/// into its parts unambiguously.
pub trait Keyed {
    /// `None` for a cluster-scoped object.
    fn key_namespace(&self) -> Option<&str>;
    fn key_name(&self) -> &str;
}

/// A key's parts: `namespace/name` or `name`.
fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((namespace, name)) => (Some(namespace), name),
        None => (None, key),
    }
}

fn parts<P: Keyed>(item: &P) -> (Option<&str>, &str) {
    (item.key_namespace(), item.key_name())
}

/// Orders keys as their `namespace/name` strings order, without building them.
fn key_order(a: (Option<&str>, &str), b: (Option<&str>, &str)) -> Ordering {
    match (a.0, b.0) {
        (Some(x), Some(y)) if x == y => a.1.cmp(b.1),
        (Some(x), Some(y)) => {
            // The namespaces differ: the first differing byte of `x/` and `y/` decides.
            let (x, y) = (x.as_bytes(), y.as_bytes());
            let common = x.len().min(y.len());
            match x[..common].cmp(&y[..common]) {
                Ordering::Equal => {
                    let next = |s: &[u8]| s.get(common).copied().unwrap_or(b'/');
                    next(x).cmp(&next(y))
                }
                other => other,
            }
        }
        (None, None) => a.1.cmp(b.1),
        // A kind is namespaced or not; a mix only orders the cluster-scoped first.
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
    }
}

/// The objects of one kind, by key.
#[derive(Debug)]
struct Table<P> {
    entries: HashTable<Arc<P>>,
}

impl<P> Default for Table<P> {
    fn default() -> Self {
        Self {
            entries: HashTable::new(),
        }
    }
}

impl<P: Keyed> Table<P> {
    fn hash(hasher: &RandomState, key: (Option<&str>, &str)) -> u64 {
        hasher.hash_one(key)
    }

    fn insert(&mut self, hasher: &RandomState, item: Arc<P>) {
        let hash = Self::hash(hasher, parts(&*item));
        let found = self.entries.find_mut(hash, |e| parts(&**e) == parts(&*item));
        match found {
            Some(slot) => *slot = item,
            None => {
                self.entries
                    .insert_unique(hash, item, |e| Self::hash(hasher, parts(&**e)));
            }
        }
    }

    fn get(&self, hasher: &RandomState, key: &str) -> Option<&Arc<P>> {
        let key = split_key(key);
        self.entries.find(Self::hash(hasher, key), |e| parts(&**e) == key)
    }

    fn remove(&mut self, hasher: &RandomState, key: &str) -> bool {
        let key = split_key(key);
        match self
            .entries
            .find_entry(Self::hash(hasher, key), |e| parts(&**e) == key)
        {
            Ok(entry) => {
                entry.remove();
                true
            }
            Err(_) => false,
        }
    }
}

#[derive(Debug)]
struct Inner<P> {
    items: Table<P>,
    /// Objects of a relist in progress; swapped in whole when the list completes, so readers never see a
    /// half-relisted kind.
    relisting: Option<Table<P>>,
    ready: bool,
    /// Bumped on every change (see [`ProjectedStore::version`]).
    version: u64,
    hasher: RandomState,
}

/// A shared, cheaply cloned handle to the store of one kind.
#[derive(Debug)]
pub struct ProjectedStore<P> {
    inner: Arc<RwLock<Inner<P>>>,
}

impl<P> Clone for ProjectedStore<P> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<P> Default for ProjectedStore<P> {
    fn default() -> Self {
        Self {
            inner: Arc::new(RwLock::new(Inner {
                items: Table::default(),
                relisting: None,
                ready: false,
                version: 0,
                hasher: RandomState::new(),
            })),
        }
    }
}

impl<P: Keyed> ProjectedStore<P> {
    pub fn new() -> Self {
        Self::default()
    }

    // A writer that panicked mid-update leaves a table that is still consistent (each write is one insert or
    // remove), so a poisoned lock is taken over rather than propagated.
    fn read(&self) -> RwLockReadGuard<'_, Inner<P>> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner<P>> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// An object was created or changed.
    pub fn apply(&self, item: P) {
        let mut inner = self.write();
        let Inner { items, hasher, .. } = &mut *inner;
        items.insert(hasher, Arc::new(item));
        inner.version += 1;
    }

    /// An object was deleted (`key`: `namespace/name`, or `name`).
    pub fn delete(&self, key: &str) {
        let mut inner = self.write();
        let Inner { items, hasher, .. } = &mut *inner;
        if items.remove(hasher, key) {
            inner.version += 1;
        }
    }

    /// A (re)list started: objects arrive through [`ProjectedStore::relist_item`] until
    /// [`ProjectedStore::relist_done`].
    pub fn relist_start(&self) {
        self.write().relisting = Some(Table::default());
    }

    pub fn relist_item(&self, item: P) {
        let mut inner = self.write();
        let Inner {
            items,
            relisting,
            hasher,
            ..
        } = &mut *inner;
        match relisting.as_mut() {
            Some(buffer) => buffer.insert(hasher, Arc::new(item)),
            // An item outside a relist (should not happen): keep it rather than lose it.
            None => items.insert(hasher, Arc::new(item)),
        }
    }

    /// The (re)list completed: its objects replace the store's, and the store is ready from now on.
    pub fn relist_done(&self) {
        let mut inner = self.write();
        if let Some(buffer) = inner.relisting.take() {
            inner.items = buffer;
        }
        inner.ready = true;
        inner.version += 1;
    }

    /// Changes whenever the contents may have changed (every apply, delete and relist): a loop that derives
    /// something from every object (the provisioner's pending pods) recomputes it only when this moved.
    pub fn version(&self) -> u64 {
        self.read().version
    }

    /// The objects `keep` selects, in no particular order, without sorting the whole store (for lookups in
    /// loops, such as the pods of one node being drained).
    pub fn filter(&self, mut keep: impl FnMut(&P) -> bool) -> Vec<Arc<P>> {
        self.read()
            .items
            .entries
            .iter()
            .filter(|p| keep(p))
            .cloned()
            .collect()
    }

    /// Whether the first list has completed.
    pub fn is_ready(&self) -> bool {
        self.read().ready
    }

    pub fn len(&self) -> usize {
        self.read().items.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The object with `key` (`namespace/name`, or `name`).
    pub fn get(&self, key: &str) -> Option<Arc<P>> {
        let inner = self.read();
        inner.items.get(&inner.hasher, key).cloned()
    }

    /// Every object, shared, in no particular order: for sums and sets whose result does not depend on the
    /// order. Sorting 150,000 pods by key took most of a state-metrics refresh.
    pub fn unordered(&self) -> Vec<Arc<P>> {
        self.read().items.entries.iter().cloned().collect()
    }

    /// Every object, shared (pointers are copied, objects are not), in key order so decisions are
    /// reproducible.
    pub fn all(&self) -> Vec<Arc<P>> {
        let mut all: Vec<Arc<P>> = self.read().items.entries.iter().cloned().collect();
        all.sort_unstable_by(|a, b| key_order(parts(&**a), parts(&**b)));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Item {
        key: &'static str,
        value: i32,
    }

    impl Keyed for Item {
        fn key_namespace(&self) -> Option<&str> {
            split_key(self.key).0
        }

        fn key_name(&self) -> &str {
            split_key(self.key).1
        }
    }

    fn item(key: &'static str, value: i32) -> Item {
        Item { key, value }
    }

    fn values(store: &ProjectedStore<Item>) -> Vec<i32> {
        store.all().iter().map(|v| v.value).collect()
    }

    #[test]
    fn a_relist_replaces_the_store_only_when_complete() {
        let store = ProjectedStore::new();
        assert!(!store.is_ready());
        store.relist_start();
        store.relist_item(item("a", 1));
        store.relist_item(item("b", 2));
        assert!(store.is_empty(), "a half-done list is not visible");
        store.relist_done();
        assert!(store.is_ready());
        assert_eq!(values(&store), [1, 2]);

        // A relist after a watch gap drops what was deleted meanwhile.
        store.relist_start();
        store.relist_item(item("b", 3));
        assert_eq!(store.len(), 2, "the old view is served until the relist ends");
        store.relist_done();
        assert_eq!(values(&store), [3]);

        store.apply(item("c", 4));
        store.delete("b");
        assert_eq!(store.get("c").map(|v| v.value), Some(4));
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn the_version_moves_on_every_change_and_only_then() {
        let store = ProjectedStore::new();
        let v0 = store.version();
        store.apply(item("a", 1));
        let v1 = store.version();
        assert!(v1 > v0);
        assert_eq!(store.version(), v1, "reading changes nothing");
        store.delete("missing");
        assert_eq!(store.version(), v1, "deleting nothing changes nothing");
        store.delete("a");
        assert!(store.version() > v1);
        store.apply(item("b", 2));
        store.apply(item("c", 3));
        let mut odd: Vec<i32> = store
            .filter(|v| v.value % 2 == 1)
            .iter()
            .map(|v| v.value)
            .collect();
        odd.sort_unstable();
        assert_eq!(odd, [3]);
    }

    #[test]
    fn namespaced_objects_are_found_replaced_and_deleted_by_namespace_and_name() {
        let store = ProjectedStore::new();
        store.apply(item("default/web", 1));
        store.apply(item("kube-system/web", 2));
        assert_eq!(store.len(), 2, "the same name in two namespaces is two objects");
        store.apply(item("default/web", 3));
        assert_eq!(store.len(), 2, "an update replaces the object");
        assert_eq!(store.get("default/web").map(|v| v.value), Some(3));
        assert_eq!(store.get("kube-system/web").map(|v| v.value), Some(2));
        assert_eq!(
            store.get("web").map(|v| v.value),
            None,
            "a namespaced object needs its namespace"
        );
        assert_eq!(store.get("other/web").map(|v| v.value), None);
        store.delete("kube-system/web");
        assert_eq!(values(&store), [3]);
    }

    #[test]
    fn objects_are_listed_in_the_order_of_their_key_strings() {
        let keys = [
            "a/x",
            "a-b/y",
            "a/b",
            "ab/a",
            "b/a",
            "a0/z",
            "kube-system/coredns-1",
            "default/web-10",
            "default/web-9",
            "a",
            "a/",
            "aa/a",
        ];
        let store = ProjectedStore::new();
        for (value, key) in (0..).zip(keys) {
            store.apply(item(key, value));
        }
        let listed: Vec<&str> = store.all().iter().map(|v| v.key).collect();
        let mut expected: Vec<&str> = keys.to_vec();
        // Every key here has a namespace but "a", which this store would never mix with namespaced ones:
        // it is listed first.
        expected.retain(|k| *k != "a");
        expected.sort_unstable();
        expected.insert(0, "a");
        assert_eq!(listed, expected);
    }
}
