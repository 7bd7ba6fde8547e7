//! [`CompactNode`]: a Node as the state cache and snapshots keep it. Of its status only what decisions and
//! metrics read (capacity, allocatable, conditions, phase), and its labels split into the part other nodes
//! share and its own.
//!
//! A Karpenter node carries forty-odd labels, nearly all from its instance type, zone and NodePool: the same on
//! every node of that type and zone. Kept per node they were half of each Node in the cache (3.9 KB of 8 at
//! 5,000 nodes). Here a node holds the labels other nodes share once per distinct set ([`NodeSharing`]), and
//! apart only the ones that name the node itself: its hostname, its NodeClaim and any whose value is its name.
//!
//! Field names and types follow the Kubernetes Node's, so reading `metadata.labels`, `spec.taints` or
//! `status.conditions` reads the same; [`CompactNode::to_node`] gives the Node back for code that writes one.

use std::{
    cmp::Ordering,
    collections::BTreeMap,
    fmt,
    iter::Peekable,
    sync::{Arc, LazyLock},
};

use k8s_openapi::{
    Resource,
    api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, ObjectReference},
    apimachinery::pkg::{
        api::resource::Quantity,
        apis::meta::v1::{ObjectMeta, OwnerReference, Time},
    },
};
use karpenter_api::labels::HOSTNAME_LABEL;

use crate::sharing::{ShareCache, repacked};

/// A Node as the cache keeps it; see the module documentation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompactNode {
    pub metadata: CompactNodeMeta,
    pub spec: Option<NodeSpec>,
    pub status: Option<CompactNodeStatus>,
}

/// What is kept of a Node's metadata: everything but its managedFields, generateName, generation and namespace
/// (Nodes have none), with the labels split ([`NodeLabels`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompactNodeMeta {
    pub name: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub creation_timestamp: Option<Time>,
    pub deletion_timestamp: Option<Time>,
    pub labels: Option<NodeLabels>,
    pub annotations: Option<BTreeMap<String, String>>,
    pub owner_references: Option<Vec<OwnerReference>>,
    pub finalizers: Option<Vec<String>>,
}

/// What is kept of a Node's status: its image list, addresses, node info, daemon endpoints and volumes are a
/// kilobyte or more per node that nothing here reads. Capacity and allocatable are shared with the nodes that
/// report the same (those of one instance type, as a rule).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompactNodeStatus {
    pub capacity: Option<Arc<BTreeMap<String, Quantity>>>,
    pub allocatable: Option<Arc<BTreeMap<String, Quantity>>>,
    pub conditions: Option<Vec<NodeCondition>>,
    pub phase: Option<String>,
}

/// A node's labels: the ones other nodes share, held once per distinct set, and its own (see the module
/// documentation). Reads as one map ordered by key, as `BTreeMap` does.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct NodeLabels {
    shared: Arc<BTreeMap<String, String>>,
    /// Sorted by key; no key is also in `shared`.
    own: Box<[(String, String)]>,
}

/// The label some clusters (and kwok) put on a node naming its NodeClaim: one per node.
const NODECLAIM_NAME_LABEL: &str = "karpenter.sh/nodeclaim";

/// Whether a label names the node itself, so no other node has it: kept apart from the shared ones.
fn names_the_node(key: &str, value: &str, node_name: &str) -> bool {
    key == HOSTNAME_LABEL || key == NODECLAIM_NAME_LABEL || (!node_name.is_empty() && value == node_name)
}

impl NodeLabels {
    /// Splits `labels` of the node named `node_name`.
    pub fn new(labels: BTreeMap<String, String>, node_name: &str) -> Self {
        let (own, shared): (Vec<_>, Vec<_>) = labels
            .into_iter()
            .partition(|(k, v)| names_the_node(k, v, node_name));
        Self {
            // Collected from sorted entries, so the tree's nodes are full.
            shared: Arc::new(shared.into_iter().collect()),
            own: own.into_boxed_slice(),
        }
    }

    pub fn get(&self, key: &str) -> Option<&String> {
        match self.own.binary_search_by(|(k, _)| k.as_str().cmp(key)) {
            Ok(i) => Some(&self.own[i].1),
            Err(_) => self.shared.get(key),
        }
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn len(&self) -> usize {
        self.shared.len() + self.own.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every label, ordered by key.
    pub fn iter(&self) -> Labels<'_> {
        Labels {
            shared: self.shared.iter().peekable(),
            own: self.own.iter().peekable(),
        }
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.iter().map(|(k, _)| k)
    }

    /// The labels as one map, for a Node written back.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Replaces the shared part with an equal one other nodes already hold.
    fn share(&mut self, sharing: &mut NodeSharing) {
        self.shared = sharing.labels.share(Arc::clone(&self.shared));
    }
}

impl fmt::Debug for NodeLabels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a NodeLabels {
    type Item = (&'a String, &'a String);
    type IntoIter = Labels<'a>;

    fn into_iter(self) -> Labels<'a> {
        self.iter()
    }
}

/// A node's labels in key order: the shared and the own ones merged.
pub struct Labels<'a> {
    shared: Peekable<std::collections::btree_map::Iter<'a, String, String>>,
    own: Peekable<std::slice::Iter<'a, (String, String)>>,
}

impl<'a> Iterator for Labels<'a> {
    type Item = (&'a String, &'a String);

    fn next(&mut self) -> Option<Self::Item> {
        let take_own = match (self.shared.peek(), self.own.peek()) {
            (Some((shared, _)), Some((own, _))) => own.cmp(shared) == Ordering::Less,
            (None, Some(_)) => true,
            (_, None) => false,
        };
        if take_own {
            self.own.next().map(|(k, v)| (k, v))
        } else {
            self.shared.next()
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.shared.len() + self.own.len();
        (n, Some(n))
    }
}

/// Labels read by key: a NodeClaim's (a `BTreeMap`) or a node's ([`NodeLabels`]).
pub trait LabelLookup {
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelLookup for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl LabelLookup for NodeLabels {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// The value of label `key` in `labels`, if there are labels.
pub fn label_in<'a, L: LabelLookup>(labels: Option<&'a L>, key: &str) -> Option<&'a str> {
    labels.and_then(|l| l.label(key))
}

/// The label sets, capacities and allocatables nodes share (see [`CompactNode::share`]).
#[derive(Debug, Default)]
pub struct NodeSharing {
    labels: ShareCache<BTreeMap<String, String>>,
    resources: ShareCache<BTreeMap<String, Quantity>>,
}

static EMPTY_LABELS: LazyLock<NodeLabels> = LazyLock::new(NodeLabels::default);
static EMPTY_MAP: BTreeMap<String, String> = BTreeMap::new();

impl CompactNode {
    /// Its name, or `""`.
    pub fn name_any(&self) -> String {
        self.metadata.name.clone().unwrap_or_default()
    }

    pub fn labels(&self) -> &NodeLabels {
        self.metadata.labels.as_ref().unwrap_or(&EMPTY_LABELS)
    }

    pub fn annotations(&self) -> &BTreeMap<String, String> {
        self.metadata.annotations.as_ref().unwrap_or(&EMPTY_MAP)
    }

    pub fn finalizers(&self) -> &[String] {
        self.metadata.finalizers.as_deref().unwrap_or_default()
    }

    pub fn uid(&self) -> Option<String> {
        self.metadata.uid.clone()
    }

    pub fn resource_version(&self) -> Option<String> {
        self.metadata.resource_version.clone()
    }

    /// Replaces its shared labels, capacity and allocatable with equal ones already in `sharing`, held by other
    /// nodes.
    pub fn share(&mut self, sharing: &mut NodeSharing) {
        if let Some(labels) = self.metadata.labels.as_mut() {
            labels.share(sharing);
        }
        if let Some(status) = self.status.as_mut() {
            for list in [&mut status.capacity, &mut status.allocatable]
                .into_iter()
                .flatten()
            {
                *list = sharing.resources.share(Arc::clone(list));
            }
        }
    }

    /// The reference an Event about this Node is filed under (what `kube`'s `object_ref` makes of the Node),
    /// without rebuilding the Node.
    pub fn object_ref(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(Node::API_VERSION.to_string()),
            kind: Some(Node::KIND.to_string()),
            name: self.metadata.name.clone(),
            uid: self.metadata.uid.clone(),
            resource_version: self.metadata.resource_version.clone(),
            ..ObjectReference::default()
        }
    }

    /// The Node it was made from, less what is not kept.
    pub fn to_node(&self) -> Node {
        let m = &self.metadata;
        Node {
            metadata: ObjectMeta {
                name: m.name.clone(),
                uid: m.uid.clone(),
                resource_version: m.resource_version.clone(),
                creation_timestamp: m.creation_timestamp.clone(),
                deletion_timestamp: m.deletion_timestamp.clone(),
                labels: m.labels.as_ref().map(NodeLabels::to_map),
                annotations: m.annotations.clone(),
                owner_references: m.owner_references.clone(),
                finalizers: m.finalizers.clone(),
                ..ObjectMeta::default()
            },
            spec: self.spec.clone(),
            status: self.status.as_ref().map(|s| NodeStatus {
                capacity: s.capacity.as_deref().cloned(),
                allocatable: s.allocatable.as_deref().cloned(),
                conditions: s.conditions.clone(),
                phase: s.phase.clone(),
                ..NodeStatus::default()
            }),
        }
    }
}

impl From<Node> for CompactNode {
    fn from(node: Node) -> Self {
        let m = node.metadata;
        let name = m.name.as_deref().unwrap_or_default();
        let labels = m.labels.map(|l| NodeLabels::new(l, name));
        Self {
            metadata: CompactNodeMeta {
                labels,
                annotations: repacked(m.annotations),
                name: m.name,
                uid: m.uid,
                resource_version: m.resource_version,
                creation_timestamp: m.creation_timestamp,
                deletion_timestamp: m.deletion_timestamp,
                owner_references: m.owner_references,
                finalizers: m.finalizers,
            },
            spec: node.spec,
            status: node.status.map(|s| CompactNodeStatus {
                capacity: repacked(s.capacity).map(Arc::new),
                allocatable: repacked(s.allocatable).map(Arc::new),
                conditions: s.conditions,
                phase: s.phase,
            }),
        }
    }
}

impl From<&Node> for CompactNode {
    fn from(node: &Node) -> Self {
        node.clone().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, zone: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "uid": "u-1", "resourceVersion": "7",
                "labels": {
                    "kubernetes.io/hostname": name,
                    "karpenter.sh/nodeclaim": format!("default-{name}"),
                    "node.kubernetes.io/instance-type": "m5.large",
                    "topology.kubernetes.io/zone": zone,
                    "custom/self": name,
                },
                "annotations": {"karpenter.sh/do-not-disrupt": "true"},
                "finalizers": ["karpenter.sh/termination"]},
            "spec": {"providerID": format!("aws:///{zone}/{name}"), "taints": [{"key": "a", "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "2"}, "allocatable": {"cpu": "1930m"},
                "conditions": [{"type": "Ready", "status": "True"}], "phase": "Running",
                "images": [{"names": ["pause"], "sizeBytes": 1}]}
        }))
        .unwrap()
    }

    #[test]
    fn labels_read_as_one_ordered_map() {
        let n = CompactNode::from(node("ip-10-0-0-1", "us-east-1a"));
        let labels = n.labels();
        assert_eq!(labels.len(), 5);
        let keys: Vec<&str> = labels.keys().map(String::as_str).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        assert_eq!(keys, sorted);
        assert_eq!(
            labels.get("kubernetes.io/hostname").map(String::as_str),
            Some("ip-10-0-0-1")
        );
        assert_eq!(
            labels.get("topology.kubernetes.io/zone").map(String::as_str),
            Some("us-east-1a")
        );
        assert_eq!(labels.get("custom/self").map(String::as_str), Some("ip-10-0-0-1"));
        assert!(!labels.contains_key("missing"));
        assert_eq!(format!("{labels:?}"), format!("{:?}", labels.to_map()));
    }

    #[test]
    fn nodes_of_one_type_and_zone_share_their_labels() {
        let mut sharing = NodeSharing::default();
        let mut nodes: Vec<CompactNode> = ["a", "b", "c"]
            .iter()
            .map(|n| CompactNode::from(node(n, "us-east-1a")))
            .collect();
        let mut other = CompactNode::from(node("d", "us-east-1b"));
        for n in &mut nodes {
            n.share(&mut sharing);
        }
        other.share(&mut sharing);
        let shared = |n: &CompactNode| Arc::as_ptr(&n.labels().shared);
        assert_eq!(shared(&nodes[0]), shared(&nodes[1]));
        assert_eq!(shared(&nodes[0]), shared(&nodes[2]));
        assert_ne!(shared(&nodes[0]), shared(&other));
        let capacity = |n: &CompactNode| {
            n.status
                .as_ref()
                .and_then(|s| s.capacity.as_ref())
                .map(Arc::as_ptr)
        };
        assert_eq!(
            capacity(&nodes[0]),
            capacity(&other),
            "one instance type: one capacity"
        );
        // Sharing changes nothing a reader sees.
        assert_eq!(
            nodes[1]
                .labels()
                .get("kubernetes.io/hostname")
                .map(String::as_str),
            Some("b")
        );
    }

    #[test]
    fn events_are_filed_under_the_node_by_name_uid_and_version() {
        let reference = CompactNode::from(node("ip-10-0-0-1", "us-east-1a")).object_ref();
        assert_eq!(
            reference,
            ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some("ip-10-0-0-1".into()),
                uid: Some("u-1".into()),
                resource_version: Some("7".into()),
                ..ObjectReference::default()
            }
        );
    }

    #[test]
    fn the_node_written_back_is_the_one_read_less_what_is_not_kept() {
        let original = node("ip-10-0-0-1", "us-east-1a");
        let back = CompactNode::from(&original).to_node();
        let mut expected = original;
        if let Some(status) = expected.status.as_mut() {
            status.images = None;
        }
        assert_eq!(back, expected);
    }
}
