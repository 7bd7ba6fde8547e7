//! `karpenter_pods_state`: one series of value 1 per pod, labelled with the pod, its owner, its node and the
//! node's NodePool, zone, architecture, capacity type and instance type, its phase and readiness.
//!
//! At 150,000 pods a `Family` would hold 150,000 label structs of thirteen owned strings and a hash-map slot
//! each (well over 100 MB), although all but the pod's name repeat across pods. The gauge holds no series at
//! all: it holds a [`PodSource`], which a scrape asks for a [`PodRows`] view of the pods as they are then (the
//! operator's shares the state cache's pods and builds a map of the nodes' labels), and the label set is only
//! spelled out while the response is written, [`CHUNK_PODS`] pods at a time. Nothing per pod is allocated, and
//! nothing is kept between scrapes. It used to be a table of every pod rebuilt on each refresh (a pod's name
//! and four indices, about 10 MB at 150,000 pods), with the next table built while the last was still
//! exported: reading the cache at scrape time instead took the controller's RSS at ready from 256.0 to 228.7
//! MiB and its peak from 327.0 to 316.4 MiB in `cargo xtask bench controller`. [`PodTable`] remains for a
//! caller that has no cache to read at scrape time (and the tests): [`PodStateGauge::replace`] exports one fixed
//! table.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
};

use crate::node_gauges::write_label_value;

/// The label names, in the order they are exported (upstream's).
pub const POD_LABEL_NAMES: [&str; 13] = [
    "name",
    "namespace",
    "owner",
    "node",
    "scheduled",
    "nodepool",
    "zone",
    "arch",
    "capacity_type",
    "instance_type",
    "phase",
    "ready",
    "managed",
];

/// The labels a pod takes from its node: the node's NodePool, zone, arch, capacity type and instance type (in
/// that order), and whether Karpenter manages it (it has a NodePool).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PodNodeLabels {
    pub values: [Arc<str>; 5],
    pub managed: bool,
}

/// One pod: where its name ends in its table's `names` (it starts where the previous pod's ends), and indices
/// into its table's values (namespace, owner, node name, phase) and nodes.
#[derive(Debug, Clone, PartialEq)]
struct PodRow {
    name_end: u32,
    namespace: u32,
    owner: u32,
    node_name: u32,
    node: u32,
    phase: u32,
    ready: bool,
}

/// The pods of one refresh. Build it with [`PodTable::push`]; values and node labels are stored once.
#[derive(Debug, Default)]
pub struct PodTable {
    values: Vec<Arc<str>>,
    value_index: HashMap<Arc<str>, u32>,
    nodes: Vec<PodNodeLabels>,
    node_index: HashMap<Arc<str>, u32>,
    /// Every pod's name, one after the other.
    names: String,
    pods: Vec<PodRow>,
}

/// One pod as [`PodTable::push`] takes it.
#[derive(Debug, Clone, Copy, Default)]
pub struct PodEntry<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    /// The first owner as upstream writes it (`/apis/<apiVersion>/namespaces/<ns>/<kind>s/<name>`), or empty.
    pub owner: &'a str,
    /// The node the pod is bound to, or empty.
    pub node: &'a str,
    pub phase: &'a str,
    pub ready: bool,
}

impl PodTable {
    /// A table sized for `pods` pods whose names take about `name_bytes` bytes in all.
    pub fn with_capacity(pods: usize, name_bytes: usize) -> Self {
        Self {
            names: String::with_capacity(name_bytes),
            pods: Vec::with_capacity(pods),
            ..Self::default()
        }
    }

    fn value(&mut self, value: &str) -> u32 {
        if let Some(&i) = self.value_index.get(value) {
            return i;
        }
        let i = u32::try_from(self.values.len()).unwrap_or(u32::MAX);
        let shared: Arc<str> = Arc::from(value);
        self.values.push(Arc::clone(&shared));
        self.value_index.insert(shared, i);
        i
    }

    /// Declares the labels of node `name`, for the pods bound to it that are pushed after.
    pub fn add_node(&mut self, name: &str, labels: PodNodeLabels) {
        if self.nodes.is_empty() {
            // Index 0: the labels of no node (an unbound pod, or a node the cache does not have).
            self.nodes.push(PodNodeLabels::default());
        }
        let i = u32::try_from(self.nodes.len()).unwrap_or(u32::MAX);
        self.nodes.push(labels);
        self.node_index.insert(Arc::from(name), i);
    }

    /// Adds one pod's series.
    pub fn push(&mut self, pod: PodEntry<'_>) {
        self.names.push_str(pod.name);
        let row = PodRow {
            name_end: u32::try_from(self.names.len()).unwrap_or(u32::MAX),
            namespace: self.value(pod.namespace),
            owner: self.value(pod.owner),
            node_name: self.value(pod.node),
            node: self.node_index.get(pod.node).copied().unwrap_or(0),
            phase: self.value(pod.phase),
            ready: pod.ready,
        };
        self.pods.push(row);
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// The index only serves building the table: dropped, with spare capacity, once it is published.
    fn finish(mut self) -> Self {
        self.value_index = HashMap::new();
        self.node_index = HashMap::new();
        self.pods.shrink_to_fit();
        self.names.shrink_to_fit();
        self
    }

    fn name(&self, i: usize) -> &str {
        let end = self.pods.get(i).map_or(0, |r| r.name_end as usize);
        let start = i
            .checked_sub(1)
            .and_then(|p| self.pods.get(p))
            .map_or(0, |r| r.name_end as usize);
        self.names.get(start..end).unwrap_or_default()
    }

    fn value_text(&self, i: u32) -> &str {
        self.values.get(i as usize).map_or("", |v| &**v)
    }
}

/// One scrape's view of the pods to export: [`PodStateGauge`] reads it a chunk at a time while the response is
/// written, so it must not change under the writer (hold a snapshot, not a live cache).
pub trait PodRows: Send + Sync {
    /// The number of pods (series).
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Pod `i` (`i < len()`) and the labels of the node it is bound to (`None`: unbound, or a node unknown).
    /// `scratch` is the caller's buffer for a label value the view has to compose, such as the owner.
    fn row<'a>(&'a self, i: usize, scratch: &'a mut String) -> (PodEntry<'a>, Option<&'a PodNodeLabels>);
}

/// Where [`PodStateGauge`] gets its pods from at each scrape (the operator's reads its state cache then).
pub trait PodSource: Send + Sync {
    /// The pods as they are now, in the order they are exported.
    fn rows(&self) -> Arc<dyn PodRows>;
}

impl PodRows for PodTable {
    fn len(&self) -> usize {
        self.pods.len()
    }

    fn row<'a>(&'a self, i: usize, _scratch: &'a mut String) -> (PodEntry<'a>, Option<&'a PodNodeLabels>) {
        let Some(row) = self.pods.get(i) else {
            return (PodEntry::default(), None);
        };
        let entry = PodEntry {
            name: self.name(i),
            namespace: self.value_text(row.namespace),
            owner: self.value_text(row.owner),
            node: self.value_text(row.node_name),
            phase: self.value_text(row.phase),
            ready: row.ready,
        };
        (entry, self.nodes.get(row.node as usize))
    }
}

/// A table set with [`PodStateGauge::replace`]: the same rows at every scrape.
struct Fixed(Arc<PodTable>);

impl PodSource for Fixed {
    fn rows(&self) -> Arc<dyn PodRows> {
        Arc::clone(&self.0) as Arc<dyn PodRows>
    }
}

/// The `karpenter_pods_state` gauge; see the module documentation. Not in the registry:
/// [`crate::Metrics::encode_chunks`] writes it.
#[derive(Default)]
pub struct PodStateGauge {
    source: RwLock<Option<Arc<dyn PodSource>>>,
}

impl std::fmt::Debug for PodStateGauge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodStateGauge").finish_non_exhaustive()
    }
}

impl PodStateGauge {
    /// Exports exactly `table` from now on: pods that are not in it stop being exported.
    pub fn replace(&self, table: PodTable) {
        self.set_source(Arc::new(Fixed(Arc::new(table.finish()))));
    }

    /// Exports what `source` holds at each scrape from now on.
    pub fn set_source(&self, source: Arc<dyn PodSource>) {
        *self.source.write().unwrap_or_else(|e| e.into_inner()) = Some(source);
    }

    /// The pods a scrape starting now would export.
    fn snapshot(&self) -> Option<Arc<dyn PodRows>> {
        let source = self.source.read().unwrap_or_else(|e| e.into_inner()).clone();
        source.map(|s| s.rows())
    }

    /// The number of series a scrape would export now.
    pub fn len(&self) -> usize {
        self.snapshot().map_or(0, |rows| rows.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The gauge's OpenMetrics text in chunks, of the pods as they are when this is called; nothing when there
    /// is no pod.
    pub(crate) fn text(&self, name: &'static str, help: &'static str) -> PodStateText {
        PodStateText {
            name,
            help,
            rows: self.snapshot(),
            next: 0,
            scratch: String::new(),
            last_chunk: 0,
        }
    }
}

/// Pods per chunk of [`PodStateText`]: about 400 KB of text.
const CHUNK_PODS: usize = 1000;

/// See [`PodStateGauge::text`].
pub(crate) struct PodStateText {
    name: &'static str,
    help: &'static str,
    rows: Option<Arc<dyn PodRows>>,
    next: usize,
    scratch: String,
    /// The length of the previous chunk, to size the next one's buffer without growing it by doubling.
    last_chunk: usize,
}

impl Iterator for PodStateText {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let rows = self.rows.as_deref()?;
        let len = rows.len();
        if self.next >= len {
            // Done: let go of the snapshot now rather than when the response is dropped.
            self.rows = None;
            return None;
        }
        let end = (self.next + CHUNK_PODS).min(len);
        let expected = if self.last_chunk > 0 {
            self.last_chunk + self.last_chunk / 8
        } else {
            400 * (end - self.next)
        };
        let mut out = String::with_capacity(expected);
        if self.next == 0 {
            for line in [
                ["# HELP ", self.name, " ", self.help, "\n"],
                ["# TYPE ", self.name, " gauge", "", "\n"],
            ] {
                line.iter().for_each(|part| out.push_str(part));
            }
        }
        let bool_text = |b: bool| if b { "true" } else { "false" };
        let none = PodNodeLabels::default();
        for i in self.next..end {
            let (pod, node) = rows.row(i, &mut self.scratch);
            let node = node.unwrap_or(&none);
            let values: [&str; 13] = [
                pod.name,
                pod.namespace,
                pod.owner,
                pod.node,
                bool_text(!pod.node.is_empty()),
                &node.values[0],
                &node.values[1],
                &node.values[2],
                &node.values[3],
                &node.values[4],
                pod.phase,
                bool_text(pod.ready),
                bool_text(node.managed),
            ];
            out.push_str(self.name);
            out.push('{');
            for (i, (label, value)) in POD_LABEL_NAMES.iter().zip(values).enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(label);
                out.push_str("=\"");
                write_label_value(&mut out, value);
                out.push('"');
            }
            out.push_str("} 1\n");
        }
        self.next = end;
        self.last_chunk = out.len();
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_labels(pool: &str) -> PodNodeLabels {
        let s = |v: &str| Arc::<str>::from(v);
        PodNodeLabels {
            values: [s(pool), s("us-west-2a"), s("amd64"), s("spot"), s("m5.large")],
            managed: !pool.is_empty(),
        }
    }

    fn text(gauge: &PodStateGauge) -> String {
        gauge.text("karpenter_pods_state", "Pod state.").collect()
    }

    fn text_of(gauge: &PodStateGauge) -> String {
        gauge.text("karpenter_pods_state", "h").collect()
    }

    #[test]
    fn each_pod_is_one_series_with_its_nodes_labels() {
        let mut table = PodTable::default();
        table.add_node("n1", node_labels("default"));
        table.push(PodEntry {
            name: "web-1",
            namespace: "default",
            owner: "/apis/apps/v1/namespaces/default/replicasets/web-7f",
            node: "n1",
            phase: "Running",
            ready: true,
        });
        table.push(PodEntry {
            name: "web-2",
            namespace: "default",
            owner: "/apis/apps/v1/namespaces/default/replicasets/web-7f",
            phase: "Pending",
            ..PodEntry::default()
        });
        table.push(PodEntry {
            name: "gone-node\"x",
            namespace: "kube-system",
            node: "n9",
            phase: "Running",
            ..PodEntry::default()
        });
        let gauge = PodStateGauge::default();
        gauge.replace(table);
        let out = text(&gauge);
        assert!(
            out.starts_with("# HELP karpenter_pods_state Pod state.\n# TYPE karpenter_pods_state gauge\n"),
            "{out}"
        );
        assert!(
            out.contains(
                "karpenter_pods_state{name=\"web-1\",namespace=\"default\",\
             owner=\"/apis/apps/v1/namespaces/default/replicasets/web-7f\",node=\"n1\",scheduled=\"true\",\
             nodepool=\"default\",zone=\"us-west-2a\",arch=\"amd64\",capacity_type=\"spot\",\
             instance_type=\"m5.large\",phase=\"Running\",ready=\"true\",managed=\"true\"} 1\n"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "karpenter_pods_state{name=\"web-2\",namespace=\"default\",\
             owner=\"/apis/apps/v1/namespaces/default/replicasets/web-7f\",node=\"\",scheduled=\"false\",\
             nodepool=\"\",zone=\"\",arch=\"\",capacity_type=\"\",instance_type=\"\",phase=\"Pending\",\
             ready=\"false\",managed=\"false\"} 1\n"
            ),
            "{out}"
        );
        assert!(
            out.contains("name=\"gone-node\\\"x\",namespace=\"kube-system\",owner=\"\",node=\"n9\",scheduled=\"true\",nodepool=\"\""),
            "a pod on a node the cache does not have keeps its node name, without node labels: {out}"
        );
        assert_eq!(gauge.len(), 3);
        gauge.replace(PodTable::default());
        assert_eq!(text(&gauge), "", "no pod, no family");
    }

    #[test]
    fn values_are_held_once_and_the_text_comes_in_chunks() {
        let mut table = PodTable::default();
        table.add_node("n1", node_labels("default"));
        for i in 0..CHUNK_PODS * 2 + 1 {
            table.push(PodEntry {
                name: &format!("p{i}"),
                namespace: "default",
                owner: "/apis/apps/v1/namespaces/default/replicasets/web",
                node: "n1",
                phase: "Running",
                ready: true,
            });
        }
        // "default", the owner, "n1", "Running".
        assert_eq!(table.values.len(), 4);
        let gauge = PodStateGauge::default();
        gauge.replace(table);
        let chunks: Vec<String> = gauge.text("karpenter_pods_state", "h").collect();
        assert_eq!(chunks.len(), 3);
        let all = chunks.concat();
        assert_eq!(all.matches("# TYPE").count(), 1);
        assert_eq!(
            all.lines().filter(|l| !l.starts_with('#')).count(),
            CHUNK_PODS * 2 + 1
        );
        // Names come out of the shared string whole, across chunk boundaries.
        for i in [0, 1, CHUNK_PODS - 1, CHUNK_PODS, CHUNK_PODS * 2] {
            assert!(all.contains(&format!("{{name=\"p{i}\",namespace=")), "p{i}");
        }
    }

    /// Pods composed when they are read, as the operator's view of its cache composes them.
    struct Composed {
        pods: usize,
        node: PodNodeLabels,
    }

    impl PodRows for Composed {
        fn len(&self) -> usize {
            self.pods
        }

        fn row<'a>(&'a self, i: usize, scratch: &'a mut String) -> (PodEntry<'a>, Option<&'a PodNodeLabels>) {
            scratch.clear();
            scratch.push_str(&format!("p{i}\"q"));
            let entry = PodEntry {
                name: scratch.as_str(),
                namespace: if i.is_multiple_of(2) {
                    "default"
                } else {
                    "kube-system"
                },
                owner: "",
                node: if i.is_multiple_of(3) { "" } else { "n1" },
                phase: "Running",
                ready: i.is_multiple_of(5),
            };
            (entry, (!i.is_multiple_of(3)).then_some(&self.node))
        }
    }

    impl PodSource for Arc<Composed> {
        fn rows(&self) -> Arc<dyn PodRows> {
            Arc::clone(self) as Arc<dyn PodRows>
        }
    }

    #[test]
    fn a_source_read_at_scrape_time_exports_what_a_table_of_the_same_pods_does() {
        let pods = CHUNK_PODS * 2 + 7;
        let source = Arc::new(Composed {
            pods,
            node: node_labels("default"),
        });
        let mut table = PodTable::default();
        table.add_node("n1", node_labels("default"));
        let mut scratch = String::new();
        for i in 0..pods {
            let (entry, _) = source.row(i, &mut scratch);
            let name = entry.name.to_string();
            table.push(PodEntry { name: &name, ..entry });
        }
        let (live, fixed) = (PodStateGauge::default(), PodStateGauge::default());
        live.set_source(Arc::new(Arc::clone(&source)));
        fixed.replace(table);
        let chunks: Vec<String> = live.text("karpenter_pods_state", "h").collect();
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks.concat(), text_of(&fixed));
        assert_eq!(live.len(), pods);
        assert!(chunks.concat().contains("{name=\"p3\\\"q\",namespace=\"kube-system\",owner=\"\",node=\"\",scheduled=\"false\",nodepool=\"\""));
    }
}
