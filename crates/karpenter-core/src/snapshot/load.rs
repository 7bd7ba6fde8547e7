//! Reading Kubernetes objects into a [`Snapshot`]: YAML or JSON text, several documents or a `kind: List`, each
//! object decoded by its kind. An unknown kind is skipped with a note; a malformed object is reported by name and
//! field and the rest are kept.

use std::sync::Arc;

use karpenter_api::manifest::{self, DecodeError};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{CompactPod, Snapshot, SnapshotNote};

impl Snapshot {
    /// Adds every object of a parsed document list; unknown kinds are skipped with a note, a malformed object is
    /// reported (naming object and field) and the rest kept.
    pub fn add_documents(
        &mut self,
        docs: Vec<Result<Value, DecodeError>>,
        source: &str,
    ) -> Vec<SnapshotNote> {
        let mut notes = Vec::new();
        for (i, doc) in docs.into_iter().enumerate() {
            let position = || format!("document {} of {source}", i + 1);
            match doc {
                Ok(value) => self.add_value(value, &position, &mut notes),
                Err(e) => notes.push(SnapshotNote::new(position(), e.to_string())),
            }
        }
        notes
    }

    /// Reads YAML/JSON text (multi-document streams, `kind: List`) via `karpenter_api::manifest::split_documents`.
    pub fn add_text(&mut self, text: &str, source: &str) -> Vec<SnapshotNote> {
        self.add_documents(manifest::split_documents(text), source)
    }

    /// Adds one parsed object (or every item of a `kind: List`); `position` names it in notes when it has no
    /// name of its own (`document 3 of file.yaml`). A reader that streams a large file object by object calls
    /// this per object, so the whole file is never held as one JSON tree.
    pub fn add_value(
        &mut self,
        mut value: Value,
        position: &dyn Fn() -> String,
        notes: &mut Vec<SnapshotNote>,
    ) {
        let Some(kind) = value.get("kind").and_then(Value::as_str).map(str::to_string) else {
            let message = if value.is_object() {
                "has no kind"
            } else {
                "is not an object"
            };
            notes.push(SnapshotNote::new(position(), message));
            return;
        };
        if kind.ends_with("List")
            && let Some(Value::Array(items)) = value.get_mut("items")
        {
            for item in std::mem::take(items) {
                self.add_value(item, position, notes);
            }
            return;
        }
        // managedFields are often most of an object's size and nothing reads them.
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        let v = &value;
        match kind.as_str() {
            "Pod" => self
                .pods
                .extend(decode::<CompactPod>(v, false, notes).map(Arc::new)),
            "Node" => self.nodes.extend(
                decode::<k8s_openapi::api::core::v1::Node>(v, false, notes).map(|n| Arc::new(n.into())),
            ),
            "NodeClaim" => self.node_claims.extend(decode(v, true, notes).map(Arc::new)),
            "NodePool" => decode_into(v, &mut self.node_pools, true, notes),
            "DaemonSet" => decode_into(v, &mut self.daemon_sets, false, notes),
            "PodDisruptionBudget" => decode_into(v, &mut self.pdbs, false, notes),
            "PersistentVolumeClaim" => decode_into(v, &mut self.pvcs, false, notes),
            "PersistentVolume" => decode_into(v, &mut self.pvs, false, notes),
            "StorageClass" => decode_into(v, &mut self.storage_classes, false, notes),
            "CSINode" => decode_into(v, &mut self.csi_nodes, false, notes),
            "Namespace" => decode_into(v, &mut self.namespaces, false, notes),
            "NodeOverlay" => decode_into(v, &mut self.node_overlays, true, notes),
            "CapacityBuffer" => decode_into(v, &mut self.capacity_buffers, true, notes),
            "EC2NodeClass" => decode_into(v, &mut self.ec2_node_classes, true, notes),
            "ReplicaSet" => decode_into(v, &mut self.replica_sets, false, notes),
            "StatefulSet" => decode_into(v, &mut self.stateful_sets, false, notes),
            "Deployment" => decode_into(v, &mut self.deployments, false, notes),
            "Service" => decode_into(v, &mut self.services, false, notes),
            "ReplicationController" => decode_into(v, &mut self.replication_controllers, false, notes),
            "PodTemplate" => decode_into(v, &mut self.pod_templates, false, notes),
            _ => notes.push(SnapshotNote::new(
                manifest::describe(v),
                format!("kind {kind} is not used by scheduling or disruption; skipped"),
            )),
        }
    }
}

/// Decodes one object and appends it. For Karpenter's own kinds, fields the types do not know are noted (a typo
/// there silently changes a decision); Kubernetes objects from newer API servers carry fields we need not know.
fn decode_into<T: DeserializeOwned>(
    value: &Value,
    list: &mut Vec<T>,
    note_unknown: bool,
    notes: &mut Vec<SnapshotNote>,
) {
    list.extend(decode(value, note_unknown, notes));
}

/// `value` as a `T`, or a note saying why it was skipped (and, with `note_unknown`, which fields were ignored).
fn decode<T: DeserializeOwned>(
    value: &Value,
    note_unknown: bool,
    notes: &mut Vec<SnapshotNote>,
) -> Option<T> {
    // Fast path: most objects are well formed, and tracking paths costs as much as decoding itself.
    if !note_unknown && let Ok(object) = T::deserialize(value) {
        return Some(object);
    }
    match manifest::decode::<T>(value) {
        Ok(decoded) => {
            if note_unknown && !decoded.unknown_fields.is_empty() {
                notes.push(SnapshotNote::new(
                    manifest::describe(value),
                    format!("unknown field(s) ignored: {}", decoded.unknown_fields.join(", ")),
                ));
            }
            Some(decoded.object)
        }
        Err(e) => {
            notes.push(SnapshotNote::new(
                e.object,
                format!("{}: {}; skipped", e.path, e.message),
            ));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_kinds_are_noted_not_fatal() {
        let mut snap = Snapshot::default();
        let notes = snap.add_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm, namespace: default}\n---\n\
             apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n",
            "objs.yaml",
        );
        assert_eq!(snap.namespaces.len(), 1);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(notes[0].object, "ConfigMap default/cm");
        assert!(notes[0].message.contains("ConfigMap"), "{}", notes[0].message);
    }

    #[test]
    fn malformed_object_is_reported_and_the_rest_kept() {
        let mut snap = Snapshot::default();
        let notes = snap.add_text(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: bad, namespace: default}\n\
             spec: {containers: [{name: c, ports: [{containerPort: notaport}]}]}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {name: good, namespace: default}\nspec: {containers: [{name: c}]}\n",
            "pods.yaml",
        );
        assert_eq!(snap.pods.len(), 1);
        assert_eq!(snap.pods[0].metadata.name.as_deref(), Some("good"));
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(notes[0].object, "Pod default/bad");
        assert!(
            notes[0]
                .message
                .contains("spec.containers[0].ports[0].containerPort"),
            "{}",
            notes[0].message
        );
    }

    #[test]
    fn unparseable_documents_are_noted_by_position() {
        let mut snap = Snapshot::default();
        let notes = snap.add_text(
            "kind: Namespace\nmetadata: {name: a}\n---\nkind: [unclosed\n---\nkind: Namespace\nmetadata: {name: b}\n",
            "f.yaml",
        );
        assert_eq!(snap.namespaces.len(), 2);
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].object, "document 2 of f.yaml");
    }

    #[test]
    fn lists_json_and_managed_fields() {
        let mut snap = Snapshot::default();
        let notes = snap.add_text(
            r#"{"apiVersion": "v1", "kind": "List", "items": [
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "managedFields": [{"manager": "x"}]}},
                {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv1", "managedFields": [{"manager": "x"}]}},
                {"apiVersion": "v1", "kind": "NodeList", "items": [{"kind": "Node", "metadata": {"name": "n2"}}]}]}"#,
            "nodes.json",
        );
        assert!(notes.is_empty(), "{notes:?}");
        let names: Vec<_> = snap.nodes.iter().map(|n| n.name_any()).collect();
        assert_eq!(names, ["n1", "n2"]);
        assert!(snap.pvs[0].metadata.managed_fields.is_none());
    }

    #[test]
    fn unknown_fields_of_karpenter_kinds_are_noted() {
        let mut snap = Snapshot::default();
        let notes = snap.add_text(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n\
             \x20     requirment: []\n      requirements: []\n\
             \x20     nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n",
            "pool.yaml",
        );
        assert_eq!(snap.node_pools.len(), 1);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].message.contains("spec.template.spec.requirment"));
    }
}
