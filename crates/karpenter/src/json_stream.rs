//! Reading a JSON snapshot object by object.
//!
//! `kubectl get pods,nodes,... -A -o json` prints one `List` whose `items` hold every object; for a large
//! cluster that file is hundreds of megabytes and, parsed whole, a JSON tree several times that. Here each item
//! is parsed, handed to the snapshot (which keeps only what decisions read) and dropped before the next, so
//! memory grows with what is kept, not with the file.

use std::{fmt, io::Read};

use karpenter_core::snapshot::{Snapshot, SnapshotNote};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// How a streamed read ended.
pub struct StreamOutcome {
    /// Objects (list items, or whole top-level objects) handed to the snapshot.
    pub objects: usize,
    /// The JSON error that stopped the read, if any; objects before it were kept.
    pub error: Option<serde_json::Error>,
}

/// Reads one or more JSON values from `reader` into `snapshot`: a value with an `items` array has each item
/// added as it is parsed; any other value is added whole.
pub fn read_json(
    reader: impl Read,
    source: &str,
    snapshot: &mut Snapshot,
    notes: &mut Vec<SnapshotNote>,
) -> StreamOutcome {
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(1 << 16, reader));
    let mut sink = Sink {
        snapshot,
        notes,
        source,
        objects: 0,
    };
    let error = loop {
        if let Err(e) = TopLevel(&mut sink).deserialize(&mut de) {
            break Some(e);
        }
        // Whitespace to the end is a clean finish; anything else is the next value of a JSON stream.
        if de.end().is_ok() {
            break None;
        }
    };
    StreamOutcome {
        objects: sink.objects,
        error,
    }
}

struct Sink<'a> {
    snapshot: &'a mut Snapshot,
    notes: &'a mut Vec<SnapshotNote>,
    source: &'a str,
    objects: usize,
}

impl Sink<'_> {
    fn add(&mut self, value: Value) {
        self.objects += 1;
        let (n, source) = (self.objects, self.source);
        self.snapshot
            .add_value(value, &|| format!("object {n} of {source}"), self.notes);
    }
}

/// A top-level value: a map is read key by key so that `items` can be streamed.
struct TopLevel<'s, 'a>(&'s mut Sink<'a>);

impl<'de> DeserializeSeed<'de> for TopLevel<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TopLevel<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object or list")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut rest = Map::new();
        let mut streamed = false;
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" {
                map.next_value_seed(Items(&mut *self.0))?;
                streamed = true;
            } else {
                let value = map.next_value::<Value>()?;
                rest.insert(key, value);
            }
        }
        if !streamed {
            self.0.add(Value::Object(rest));
        }
        Ok(())
    }

    /// A bare array of objects.
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        Items(self.0).visit_seq(seq)
    }
}

struct Items<'s, 'a>(&'s mut Sink<'a>);

impl<'de> DeserializeSeed<'de> for Items<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Items<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of Kubernetes objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(item) = seq.next_element::<Value>()? {
            self.0.add(item);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> (Snapshot, Vec<SnapshotNote>, StreamOutcome) {
        let mut snapshot = Snapshot::default();
        let mut notes = Vec::new();
        let outcome = read_json(text.as_bytes(), "f.json", &mut snapshot, &mut notes);
        (snapshot, notes, outcome)
    }

    #[test]
    fn list_items_are_read_whatever_the_key_order() {
        let (snap, notes, outcome) = read(
            r#"{"apiVersion": "v1", "items": [
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}},
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"}, "spec": {"containers": []}}
            ], "kind": "List", "metadata": {"resourceVersion": ""}}"#,
        );
        assert!(outcome.error.is_none());
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!((snap.nodes.len(), snap.pods.len()), (1, 1));
        assert_eq!(outcome.objects, 2);
    }

    #[test]
    fn single_objects_streams_and_nested_lists() {
        let (snap, notes, outcome) = read(
            r#"{"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "a"}}
               {"kind": "NodeList", "items": [{"kind": "Node", "metadata": {"name": "n1"}}]}
               [{"kind": "Namespace", "metadata": {"name": "b"}}]"#,
        );
        assert!(outcome.error.is_none(), "{:?}", outcome.error);
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!((snap.namespaces.len(), snap.nodes.len()), (2, 1));
    }

    #[test]
    fn a_broken_file_keeps_what_came_before_the_error() {
        let (snap, notes, outcome) = read(
            r#"{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n1"}}, {"kind": "Node", "metad"#,
        );
        assert_eq!(snap.nodes.len(), 1);
        assert!(notes.is_empty(), "{notes:?}");
        let error = outcome.error.map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("EOF"), "{error}");
    }

    #[test]
    fn a_malformed_item_is_a_note_naming_it() {
        let (snap, notes, _) = read(
            r#"{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "bad", "namespace": "d"},
                "spec": {"containers": [{"name": "c", "ports": [{"containerPort": "x"}]}]}}]}"#,
        );
        assert!(snap.pods.is_empty());
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(notes[0].object, "Pod d/bad");
    }
}
