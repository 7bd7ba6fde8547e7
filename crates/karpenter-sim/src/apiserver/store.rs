//! The object store: every object as a [`Stored`] (its JSON text and indexed fields), one ordered map per
//! resource, a global resourceVersion counter, a bounded per-resource event history and the open watches.
//!
//! Every change goes through [`State::commit`] or [`State::remove`], which assign the next resourceVersion,
//! record the watch event and hand it to the open watches while the state lock is held, so watchers see changes
//! in commit order and a watch started from a list's resourceVersion misses nothing
//! (api-concepts "Efficient detection of changes").

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, VecDeque},
    sync::Arc,
};

use serde_json::Value;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::resources::{Registry, ResourceId, ResourceInfo};
pub use super::stored::Stored;
use crate::{clock::Clock, error::ApiStatus, rng::Rng};

/// A stored object; shared between the map, the history and the watch streams without copying.
pub type Obj = Arc<Stored>;

/// Where an object lives inside its resource: namespace ("" for cluster-scoped) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    pub fn of(object: &Value) -> Self {
        let meta = &object["metadata"];
        Self::new(
            meta["namespace"].as_str().unwrap_or(""),
            meta["name"].as_str().unwrap_or(""),
        )
    }

    pub fn of_stored(object: &Stored) -> Self {
        Self::new(object.namespace(), object.name())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One change, as it is replayed to watches.
#[derive(Debug)]
pub struct StoredEvent {
    pub rv: u64,
    pub kind: EventType,
    pub object: Obj,
    /// The object before a modification, so a filtered watch can tell "entered" from "left" its selection.
    pub previous: Option<Obj>,
}

/// What a watch stream receives.
#[derive(Debug)]
pub enum WatchMsg {
    Event(Arc<StoredEvent>),
    /// A bookmark at this resourceVersion; `initial_end` marks the end of `sendInitialEvents`.
    Bookmark {
        rv: u64,
        initial_end: bool,
    },
    /// A terminal error event (410 Expired), after which the stream ends.
    Error(ApiStatus),
}

/// One resource's objects, history and watchers.
#[derive(Debug)]
pub struct ResourceStore {
    pub info: Arc<ResourceInfo>,
    pub objects: BTreeMap<ObjectKey, Obj>,
    history: VecDeque<Arc<StoredEvent>>,
    /// The resourceVersion of the newest event dropped from history; watches must start at or after it.
    compacted_rv: u64,
    watchers: HashMap<u64, UnboundedSender<WatchMsg>>,
}

impl ResourceStore {
    fn new(info: Arc<ResourceInfo>) -> Self {
        Self {
            info,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            compacted_rv: 0,
            watchers: HashMap::new(),
        }
    }

    /// Objects in one namespace (or all, for `None`), in key order, without scanning other namespaces.
    pub fn range<'a>(
        &'a self,
        namespace: Option<&'a str>,
    ) -> Box<dyn Iterator<Item = (&'a ObjectKey, &'a Obj)> + 'a> {
        match namespace {
            Some(ns) => Box::new(
                self.objects
                    .range(ObjectKey::new(ns, "")..)
                    .take_while(move |(k, _)| k.namespace == ns),
            ),
            None => Box::new(self.objects.iter()),
        }
    }

    pub fn compacted_rv(&self) -> u64 {
        self.compacted_rv
    }
}

/// Where a new watch starts.
#[derive(Debug, Clone, Copy)]
pub enum WatchStart {
    /// Synthetic ADDED events for every current object first ("Get State and Start at Most Recent"),
    /// optionally closed by an initial-events-end bookmark.
    Now { initial_end_bookmark: bool },
    /// Replay history after this resourceVersion.
    After(u64),
}

/// The whole server state, behind one lock.
pub struct State {
    pub rv: u64,
    pub registry: Registry,
    pub stores: HashMap<ResourceId, ResourceStore>,
    /// owner uid -> its dependents, for garbage collection without scanning.
    pub dependents: HashMap<String, BTreeSet<(ResourceId, ObjectKey)>>,
    /// uid -> where the object lives, to tell whether an owner still exists.
    pub uids: HashMap<String, (ResourceId, ObjectKey)>,
    pub rng: Rng,
    pub clock: Arc<dyn Clock>,
    history_limit: usize,
    next_watcher: u64,
}

impl State {
    pub fn new(clock: Arc<dyn Clock>, history_limit: usize, seed: u64) -> Self {
        let registry = Registry::with_builtins();
        let stores = registry
            .all()
            .iter()
            .map(|info| (info.id(), ResourceStore::new(Arc::clone(info))))
            .collect();
        Self {
            rv: 0,
            registry,
            stores,
            dependents: HashMap::new(),
            uids: HashMap::new(),
            rng: Rng::seeded(seed),
            clock,
            history_limit: history_limit.max(1),
            next_watcher: 0,
        }
    }

    /// Registers (or re-registers) a resource, keeping its objects if it was already served.
    pub fn serve(&mut self, info: super::resources::ResourceInfo) -> Arc<ResourceInfo> {
        let info = self.registry.insert(info);
        match self.stores.get_mut(&info.id()) {
            Some(store) => store.info = Arc::clone(&info),
            None => {
                self.stores
                    .insert(info.id(), ResourceStore::new(Arc::clone(&info)));
            }
        }
        info
    }

    /// Stops serving a resource; its objects are gone and its watches end.
    pub fn unserve(&mut self, id: &ResourceId) {
        self.registry.remove(id);
        if let Some(store) = self.stores.remove(id) {
            for object in store.objects.values() {
                self.unindex(id, object);
            }
        }
    }

    pub fn store(&self, id: &ResourceId) -> Option<&ResourceStore> {
        self.stores.get(id)
    }

    pub fn get(&self, id: &ResourceId, key: &ObjectKey) -> Option<Obj> {
        self.stores.get(id).and_then(|s| s.objects.get(key)).cloned()
    }

    pub fn contains(&self, id: &ResourceId, key: &ObjectKey) -> bool {
        self.stores.get(id).is_some_and(|s| s.objects.contains_key(key))
    }

    /// One object, parsed.
    pub fn get_value(&self, id: &ResourceId, key: &ObjectKey) -> Option<Value> {
        self.stores
            .get(id)
            .and_then(|s| s.objects.get(key))
            .map(|o| o.value())
    }

    pub fn exists_uid(&self, uid: &str) -> bool {
        self.uids.contains_key(uid)
    }

    pub fn now(&self) -> String {
        crate::clock::format_time(self.clock.now())
    }

    /// `object` as resource `id` stores it, with that resource's selectable fields indexed.
    fn stored(&self, id: &ResourceId, object: &Value) -> Stored {
        let selectable = self
            .stores
            .get(id)
            .map(|s| s.info.selectable_fields.as_slice())
            .unwrap_or_default();
        Stored::new(object, selectable)
    }

    fn index(&mut self, id: &ResourceId, object: &Stored) {
        let key = ObjectKey::of_stored(object);
        if let Some(uid) = object.uid() {
            self.uids.insert(uid.to_string(), (id.clone(), key.clone()));
        }
        for owner in object.owner_uids() {
            self.dependents
                .entry(owner.to_string())
                .or_default()
                .insert((id.clone(), key.clone()));
        }
    }

    fn unindex(&mut self, id: &ResourceId, object: &Stored) {
        let key = ObjectKey::of_stored(object);
        if let Some(uid) = object.uid() {
            self.uids.remove(uid);
        }
        for owner in object.owner_uids() {
            if let Some(set) = self.dependents.get_mut(owner) {
                set.remove(&(id.clone(), key.clone()));
                if set.is_empty() {
                    self.dependents.remove(owner);
                }
            }
        }
    }

    fn record(&mut self, id: &ResourceId, event: StoredEvent) {
        let limit = self.history_limit;
        let Some(store) = self.stores.get_mut(id) else {
            return;
        };
        let event = Arc::new(event);
        store.history.push_back(Arc::clone(&event));
        while store.history.len() > limit {
            if let Some(dropped) = store.history.pop_front() {
                store.compacted_rv = dropped.rv;
            }
        }
        // A watcher whose stream is gone is forgotten here.
        store
            .watchers
            .retain(|_, tx| tx.send(WatchMsg::Event(Arc::clone(&event))).is_ok());
    }

    /// Stores `object` (already validated) under the next resourceVersion and tells the watches.
    pub fn commit(&mut self, id: &ResourceId, mut object: Value) -> Obj {
        self.rv += 1;
        let rv = self.rv;
        object["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        let key = ObjectKey::of(&object);
        let object = Arc::new(self.stored(id, &object));
        let previous = self
            .stores
            .get_mut(id)
            .and_then(|s| s.objects.insert(key, Arc::clone(&object)));
        if let Some(previous) = &previous {
            self.unindex(id, previous);
        }
        self.index(id, &object);
        let kind = if previous.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.record(
            id,
            StoredEvent {
                rv,
                kind,
                object: Arc::clone(&object),
                previous,
            },
        );
        object
    }

    /// Removes an object for good (the DELETED event carries the deletion's resourceVersion, as etcd's does).
    pub fn remove(&mut self, id: &ResourceId, key: &ObjectKey) -> Option<Obj> {
        let removed = self.stores.get_mut(id).and_then(|s| s.objects.remove(key))?;
        self.unindex(id, &removed);
        self.rv += 1;
        let rv = self.rv;
        let mut last = removed.value();
        last["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        let last = Arc::new(self.stored(id, &last));
        self.record(
            id,
            StoredEvent {
                rv,
                kind: EventType::Deleted,
                object: Arc::clone(&last),
                previous: None,
            },
        );
        Some(last)
    }

    /// Opens a watch on one resource; the receiver already holds the initial or replayed events.
    pub fn watch(
        &mut self,
        id: &ResourceId,
        start: WatchStart,
    ) -> Option<(u64, UnboundedReceiver<WatchMsg>)> {
        let current_rv = self.rv;
        self.next_watcher += 1;
        let watcher = self.next_watcher;
        let store = self.stores.get_mut(id)?;
        let (tx, rx) = unbounded_channel();
        match start {
            WatchStart::Now { initial_end_bookmark } => {
                for object in store.objects.values() {
                    let event = StoredEvent {
                        rv: object.rv(),
                        kind: EventType::Added,
                        object: Arc::clone(object),
                        previous: None,
                    };
                    let _ = tx.send(WatchMsg::Event(Arc::new(event)));
                }
                if initial_end_bookmark {
                    let _ = tx.send(WatchMsg::Bookmark {
                        rv: current_rv,
                        initial_end: true,
                    });
                }
            }
            WatchStart::After(rv) if rv < store.compacted_rv => {
                let message = format!("too old resource version: {rv} ({})", store.compacted_rv + 1);
                let _ = tx.send(WatchMsg::Error(ApiStatus::expired(message)));
                return Some((watcher, rx));
            }
            WatchStart::After(rv) => {
                let first = store.history.partition_point(|e| e.rv <= rv);
                for event in store.history.range(first..) {
                    let _ = tx.send(WatchMsg::Event(Arc::clone(event)));
                }
            }
        }
        store.watchers.insert(watcher, tx);
        Some((watcher, rx))
    }

    /// Sends a bookmark at the current resourceVersion to one watch; false if that watch was closed.
    pub fn bookmark(&mut self, id: &ResourceId, watcher: u64) -> bool {
        let rv = self.rv;
        self.stores
            .get(id)
            .and_then(|s| s.watchers.get(&watcher))
            .is_some_and(|tx| {
                tx.send(WatchMsg::Bookmark {
                    rv,
                    initial_end: false,
                })
                .is_ok()
            })
    }

    pub fn unwatch(&mut self, id: &ResourceId, watcher: u64) {
        if let Some(store) = self.stores.get_mut(id) {
            store.watchers.remove(&watcher);
        }
    }

    /// Closes every open watch (fault injection: "the connection dropped").
    pub fn close_all_watches(&mut self) {
        for store in self.stores.values_mut() {
            store.watchers.clear();
        }
    }

    pub fn open_watches(&self) -> usize {
        self.stores.values().map(|s| s.watchers.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use serde_json::json;

    #[test]
    fn watch_replays_history_in_order_and_expires_when_compacted() {
        let mut state = State::new(Arc::new(SystemClock), 3, 1);
        let cms = ResourceId::core("configmaps");
        for i in 0..5 {
            state.commit(
                &cms,
                json!({"metadata": {"namespace": "default", "name": format!("c{i}")}}),
            );
        }
        // History keeps rv 3..=5; a watch from rv 2 sees 3, 4, 5.
        let Some((_, mut rx)) = state.watch(&cms, WatchStart::After(2)) else {
            panic!("no store")
        };
        let mut seen = Vec::new();
        while let Ok(WatchMsg::Event(e)) = rx.try_recv() {
            seen.push(e.rv);
        }
        assert_eq!(seen, vec![3, 4, 5]);
        // rv 1 is older than the retained history.
        let Some((_, mut rx)) = state.watch(&cms, WatchStart::After(1)) else {
            panic!("no store")
        };
        assert!(matches!(rx.try_recv(), Ok(WatchMsg::Error(s)) if s.code == 410));
    }
}
