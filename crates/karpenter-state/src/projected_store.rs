//! A store of projected objects fed by watch events: what kube-runtime's reflector store does, but holding the
//! projection (`P`) of each object rather than the object itself, behind an `Arc` so readers share it.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard},
};

/// `namespace/name` (or `name` for cluster-scoped objects).
pub type ObjectKey = String;

#[derive(Debug)]
struct Inner<P> {
    items: HashMap<ObjectKey, Arc<P>>,
    /// Objects of a relist in progress; swapped in whole when the list completes, so readers never see a
    /// half-relisted kind.
    relisting: Option<HashMap<ObjectKey, Arc<P>>>,
    ready: bool,
    /// Bumped on every change (see [`ProjectedStore::version`]).
    version: u64,
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
                items: HashMap::new(),
                relisting: None,
                ready: false,
                version: 0,
            })),
        }
    }
}

impl<P> ProjectedStore<P> {
    pub fn new() -> Self {
        Self::default()
    }

    // A writer that panicked mid-update leaves a map that is still consistent (each write is one insert or
    // remove), so a poisoned lock is taken over rather than propagated.
    fn read(&self) -> RwLockReadGuard<'_, Inner<P>> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner<P>> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// An object was created or changed.
    pub fn apply(&self, key: ObjectKey, item: P) {
        let mut inner = self.write();
        inner.items.insert(key, Arc::new(item));
        inner.version += 1;
    }

    /// An object was deleted.
    pub fn delete(&self, key: &str) {
        let mut inner = self.write();
        if inner.items.remove(key).is_some() {
            inner.version += 1;
        }
    }

    /// A (re)list started: objects arrive through [`ProjectedStore::relist_item`] until
    /// [`ProjectedStore::relist_done`].
    pub fn relist_start(&self) {
        self.write().relisting = Some(HashMap::new());
    }

    pub fn relist_item(&self, key: ObjectKey, item: P) {
        let mut inner = self.write();
        match inner.relisting.as_mut() {
            Some(buffer) => {
                buffer.insert(key, Arc::new(item));
            }
            // An item outside a relist (should not happen): keep it rather than lose it.
            None => {
                inner.items.insert(key, Arc::new(item));
            }
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
        self.read().items.values().filter(|p| keep(p)).cloned().collect()
    }

    /// Whether the first list has completed.
    pub fn is_ready(&self) -> bool {
        self.read().ready
    }

    pub fn len(&self) -> usize {
        self.read().items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, key: &str) -> Option<Arc<P>> {
        self.read().items.get(key).cloned()
    }

    /// Every object, shared (pointers are copied, objects are not), in key order so decisions are
    /// reproducible.
    pub fn all(&self) -> Vec<Arc<P>> {
        let inner = self.read();
        let mut keyed: Vec<(&ObjectKey, &Arc<P>)> = inner.items.iter().collect();
        keyed.sort_unstable_by(|a, b| a.0.cmp(b.0));
        keyed.into_iter().map(|(_, v)| Arc::clone(v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relist_replaces_the_store_only_when_complete() {
        let store = ProjectedStore::new();
        assert!(!store.is_ready());
        store.relist_start();
        store.relist_item("a".into(), 1);
        store.relist_item("b".into(), 2);
        assert!(store.is_empty(), "a half-done list is not visible");
        store.relist_done();
        assert!(store.is_ready());
        assert_eq!(store.all().iter().map(|v| **v).collect::<Vec<_>>(), [1, 2]);

        // A relist after a watch gap drops what was deleted meanwhile.
        store.relist_start();
        store.relist_item("b".into(), 3);
        assert_eq!(store.len(), 2, "the old view is served until the relist ends");
        store.relist_done();
        assert_eq!(store.all().iter().map(|v| **v).collect::<Vec<_>>(), [3]);

        store.apply("c".into(), 4);
        store.delete("b");
        assert_eq!(store.get("c").map(|v| *v), Some(4));
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn the_version_moves_on_every_change_and_only_then() {
        let store = ProjectedStore::new();
        let v0 = store.version();
        store.apply("a".into(), 1);
        let v1 = store.version();
        assert!(v1 > v0);
        assert_eq!(store.version(), v1, "reading changes nothing");
        store.delete("missing");
        assert_eq!(store.version(), v1, "deleting nothing changes nothing");
        store.delete("a");
        assert!(store.version() > v1);
        store.apply("b".into(), 2);
        store.apply("c".into(), 3);
        let mut odd: Vec<i32> = store.filter(|v| v % 2 == 1).iter().map(|v| **v).collect();
        odd.sort_unstable();
        assert_eq!(odd, [3]);
    }
}
