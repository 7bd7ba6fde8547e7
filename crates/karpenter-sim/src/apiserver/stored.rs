//! One stored object: its JSON text, written once when the object is committed and copied as it is into get,
//! list and watch answers, plus the few fields the server reads on every request, parsed out once: namespace,
//! name, resourceVersion, uid, owner uids, labels, the resource's selectable fields, and whether it is being
//! deleted or Ready.
//!
//! Why not a `serde_json::Value`: a Value keeps every map as a BTreeMap and every string in its own allocation,
//! so a 3.4 KB pod takes about 31 KB of heap in some 340 allocations, and a 20,000-node cluster (600,000 pods)
//! did not fit in 24 GiB. As text the same pod takes its 3.4 KB. The whole object is parsed again only where it
//! is changed (update, patch, delete, subresources), shown in another form (Table, events.k8s.io/v1) or handed
//! to in-process callers. Those (the simulated kubelets, scheduler and workload controllers) list the same
//! objects again and again, so the parsed form they read is kept with the object until it is replaced; the
//! HTTP paths never fill it, so a cluster served only over HTTP stays as text.

use std::{
    borrow::Cow,
    sync::{Arc, OnceLock},
};

use serde_json::Value;

use super::selectors::{Selectable, field_value};

/// A stored object; see the module documentation.
#[derive(Debug)]
pub struct Stored {
    json: Box<str>,
    namespace: Box<str>,
    name: Box<str>,
    rv: u64,
    uid: Option<Box<str>>,
    owner_uids: Box<[Box<str>]>,
    /// The label and field pairs, as one table so that a pod's dozen of them take two allocations, not thirty.
    pairs: Pairs,
    /// The first `labels` pairs are `metadata.labels` with string values, sorted by key; the rest are (path, value
    /// as a field selector compares it) of the resource's selectable fields when the object was stored. A path
    /// missing there (a CRD re-served with other selectable fields) is read from the JSON.
    labels: usize,
    deleting: bool,
    ready: bool,
    /// The parsed object, once an in-process reader asked for it (see [`Stored::shared_value`]).
    parsed: OnceLock<Arc<Value>>,
}

fn boxed(value: &Value) -> Option<Box<str>> {
    value.as_str().map(Box::from)
}

/// String pairs in one buffer: `ends[i]` is where the i-th string (key of pair i/2, or its value) ends.
#[derive(Debug)]
struct Pairs {
    text: Box<str>,
    ends: Box<[u32]>,
}

impl Pairs {
    fn new<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> Self {
        let (mut text, mut ends) = (String::new(), Vec::new());
        for (key, value) in pairs {
            for s in [key, value] {
                text.push_str(s);
                // Object JSON is far below 4 GiB, so are the strings drawn from it.
                ends.push(u32::try_from(text.len()).unwrap_or(u32::MAX));
            }
        }
        Self {
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
        }
    }

    fn len(&self) -> usize {
        self.ends.len() / 2
    }

    fn string(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        self.text.get(start..self.ends[i] as usize).unwrap_or("")
    }

    fn key(&self, pair: usize) -> &str {
        self.string(2 * pair)
    }

    fn value(&self, pair: usize) -> &str {
        self.string(2 * pair + 1)
    }
}

impl Stored {
    /// Serializes `object` and extracts its indexed fields, `selectable` being the resource's selectable field
    /// paths (beyond metadata.name and metadata.namespace, which are always kept).
    pub fn new(object: &Value, selectable: &[String]) -> Self {
        let meta = &object["metadata"];
        let mut labels: Vec<(&str, &str)> = meta["labels"]
            .as_object()
            .map(|labels| {
                labels
                    .iter()
                    .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
                    .collect()
            })
            .unwrap_or_default();
        // Sorted for the lookup, whatever order serde_json's map has (insertion order with `preserve_order`).
        labels.sort_unstable();
        let fields: Vec<(&str, String)> = selectable
            .iter()
            .filter(|path| !matches!(path.as_str(), "metadata.name" | "metadata.namespace"))
            .map(|path| (path.as_str(), field_value(object, path)))
            .collect();
        let pairs = Pairs::new(
            labels
                .iter()
                .copied()
                .chain(fields.iter().map(|(p, v)| (*p, v.as_str()))),
        );
        let owner_uids = meta["ownerReferences"]
            .as_array()
            .map(|refs| refs.iter().filter_map(|r| boxed(&r["uid"])).collect())
            .unwrap_or_default();
        let ready = object["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
        Self {
            // Serializing a Value cannot fail: its map keys are strings.
            json: serde_json::to_string(object).unwrap_or_default().into_boxed_str(),
            namespace: boxed(&meta["namespace"]).unwrap_or_default(),
            name: boxed(&meta["name"]).unwrap_or_default(),
            rv: meta["resourceVersion"]
                .as_str()
                .and_then(|rv| rv.parse().ok())
                .unwrap_or(0),
            uid: boxed(&meta["uid"]),
            owner_uids,
            labels: labels.len(),
            pairs,
            deleting: meta["deletionTimestamp"].is_string(),
            ready,
            parsed: OnceLock::new(),
        }
    }

    /// The object as JSON text, exactly as `serde_json` wrote it.
    pub fn json(&self) -> &str {
        &self.json
    }

    /// The whole object, parsed.
    pub fn value(&self) -> Value {
        // The text was written by serde_json from a Value it had parsed (so within its nesting limit); Null is
        // unreachable in practice.
        serde_json::from_str(&self.json).unwrap_or(Value::Null)
    }

    /// The whole object, parsed once and kept: for in-process readers that read the same objects repeatedly.
    pub fn shared_value(&self) -> Arc<Value> {
        Arc::clone(self.parsed.get_or_init(|| Arc::new(self.value())))
    }

    /// "" for cluster-scoped objects.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `metadata.resourceVersion` as a number (0 for an object never committed, as a dry run's).
    pub fn rv(&self) -> u64 {
        self.rv
    }

    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }

    /// The uids of `metadata.ownerReferences`.
    pub fn owner_uids(&self) -> impl Iterator<Item = &str> {
        self.owner_uids.iter().map(|u| &**u)
    }

    /// Whether `metadata.deletionTimestamp` is set.
    pub fn deleting(&self) -> bool {
        self.deleting
    }

    /// Whether `status.conditions` has Ready=True (what eviction counts as a healthy pod).
    pub fn ready(&self) -> bool {
        self.ready
    }
}

impl Selectable for Stored {
    fn label(&self, key: &str) -> Option<&str> {
        let (mut low, mut high) = (0, self.labels);
        while low < high {
            let mid = (low + high) / 2;
            match self.pairs.key(mid).cmp(key) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return Some(self.pairs.value(mid)),
            }
        }
        None
    }

    fn field(&self, path: &str) -> Cow<'_, str> {
        match path {
            "metadata.name" => Cow::Borrowed(self.name()),
            "metadata.namespace" => Cow::Borrowed(self.namespace()),
            _ => match (self.labels..self.pairs.len()).find(|&i| self.pairs.key(i) == path) {
                Some(i) => Cow::Borrowed(self.pairs.value(i)),
                None => Cow::Owned(field_value(&self.value(), path)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_the_json_and_the_indexed_fields() {
        let pod = json!({
            "metadata": {"namespace": "ns", "name": "p", "uid": "u1", "resourceVersion": "7",
                         "labels": {"b": "2", "a": "1"}, "ownerReferences": [{"uid": "o1"}, {"uid": "o2"}],
                         "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": "n1", "priority": 5},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        });
        let stored = Stored::new(&pod, &["spec.nodeName".to_string()]);
        assert_eq!(stored.value(), pod);
        assert_eq!(stored.json(), pod.to_string());
        assert_eq!((stored.namespace(), stored.name(), stored.rv()), ("ns", "p", 7));
        assert_eq!(stored.uid(), Some("u1"));
        assert_eq!(stored.owner_uids().collect::<Vec<_>>(), ["o1", "o2"]);
        assert!(stored.deleting() && stored.ready());
        assert_eq!(
            (stored.label("a"), stored.label("b"), stored.label("c")),
            (Some("1"), Some("2"), None)
        );
        assert_eq!(stored.field("spec.nodeName"), "n1");
        assert_eq!(stored.field("metadata.name"), "p");
        // Not declared selectable when stored: read from the JSON.
        assert_eq!(stored.field("spec.priority"), "5");
        assert_eq!(stored.field("status.phase"), "Running");
    }
}
