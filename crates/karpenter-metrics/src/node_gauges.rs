//! The per-node gauges (`karpenter_nodes_allocatable`, `karpenter_nodes_total_pod_requests`) as one table
//! replaced whole on each refresh, instead of a `Family` with one entry per node and resource.
//!
//! A cluster of 5,000 nodes exports about 40,000 series of the two (25,000 allocatable, 15,000 requests in
//! `cargo xtask bench controller`). As a `Family`, each series kept its own ten owned label strings and a
//! hash-map slot (about 400 bytes a series, 16 MiB of hash tables alone at that size), although
//! nine of the ten labels are the node's and most values repeat across the cluster. Here a node's labels are
//! held once, as shared strings, beside its values; the label set is only spelled out while encoding.
//!
//! They are also what makes a scrape large (about 10 MB of text at 5,000 nodes), so the `/metrics` handler
//! streams them: [`GaugeText`] writes a snapshot of the table a few hundred nodes at a time, in the format the
//! registry's encoder uses, instead of the whole exposition being built in one buffer first.

use std::{
    fmt::Write as _,
    sync::{Arc, RwLock},
};

/// The label names, in the order they are exported (`resource_type` last).
pub const NODE_LABEL_NAMES: [&str; 10] = [
    "node_name",
    "nodepool",
    "zone",
    "instance_type",
    "capacity_type",
    "arch",
    "os",
    "phase",
    "managed",
    "resource_type",
];

/// One node's series: the node's label values (the first nine of [`NODE_LABEL_NAMES`]) and a value per
/// resource type. The label values are shared: a node has the same ones in each of the three node gauges.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSeries {
    pub labels: Arc<[Arc<str>; 9]>,
    pub values: Vec<(Arc<str>, f64)>,
}

/// A gauge with one series per node and resource type; see the module documentation. It is not in the
/// registry: [`crate::Metrics::encode_chunks`] writes it through [`NodeResourceGauge::text`].
#[derive(Debug, Default)]
pub struct NodeResourceGauge {
    nodes: RwLock<Arc<Vec<NodeSeries>>>,
}

impl NodeResourceGauge {
    /// Replaces every series: nodes that are gone stop being exported.
    pub fn replace(&self, nodes: Vec<NodeSeries>) {
        // A panic while holding the lock cannot leave the table half-written (it is swapped whole).
        *self.nodes.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(nodes);
    }

    /// The table as it is now; a scrape writes from it while the next refresh replaces it.
    fn snapshot(&self) -> Arc<Vec<NodeSeries>> {
        Arc::clone(&self.nodes.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The gauge's OpenMetrics text (`# HELP`, `# TYPE`, one line per series), in chunks; nothing when it has
    /// no series, as the registry's encoder leaves out an empty family.
    pub(crate) fn text(&self, name: &'static str, help: &'static str) -> GaugeText {
        GaugeText {
            name,
            help,
            nodes: self.snapshot(),
            next: 0,
        }
    }

    /// The value exported for `node` and `resource_type`, if any.
    pub fn get(&self, node: &str, resource_type: &str) -> Option<f64> {
        let nodes = self.snapshot();
        nodes
            .iter()
            .filter(|n| &*n.labels[0] == node)
            .flat_map(|n| n.values.iter())
            .find(|(r, _)| &**r == resource_type)
            .map(|(_, v)| *v)
    }
}

/// Nodes per chunk of [`GaugeText`]: about 200 KB of text at five resource types a node.
const CHUNK_NODES: usize = 200;

/// See [`NodeResourceGauge::text`].
pub(crate) struct GaugeText {
    name: &'static str,
    help: &'static str,
    nodes: Arc<Vec<NodeSeries>>,
    next: usize,
}

/// Writes `value` as the text encoder writes a label value: `\\`, `"` and newlines escaped.
pub(crate) fn write_label_value(out: &mut String, value: &str) {
    // Nearly every value (names, zones, types) needs no escape: copy it whole rather than char by char, which
    // was the largest cost of a scrape of 150,000 pods.
    if !value.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
        out.push_str(value);
        return;
    }
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

impl Iterator for GaugeText {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        if self.next >= self.nodes.len() {
            return None;
        }
        let end = (self.next + CHUNK_NODES).min(self.nodes.len());
        let mut out = String::with_capacity(256 * 5 * (end - self.next));
        if self.next == 0 {
            // Writing into a String cannot fail.
            let _ = write!(
                out,
                "# HELP {} {}\n# TYPE {} gauge\n",
                self.name, self.help, self.name
            );
        }
        for node in &self.nodes[self.next..end] {
            for (resource_type, value) in &node.values {
                out.push_str(self.name);
                out.push('{');
                for (i, name) in NODE_LABEL_NAMES.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(name);
                    out.push_str("=\"");
                    write_label_value(&mut out, node.labels.get(i).map_or(&**resource_type, |v| &**v));
                    out.push('"');
                }
                out.push_str("} ");
                out.push_str(dtoa::Buffer::new().format(*value));
                out.push('\n');
            }
        }
        self.next = end;
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use prometheus_client::{
        encoding::text::encode,
        metrics::{family::Family, gauge::Gauge},
        registry::Registry,
    };

    use super::*;

    fn series(node: &str, values: &[(&str, f64)]) -> NodeSeries {
        let s = |v: &str| Arc::<str>::from(v);
        NodeSeries {
            labels: Arc::new([
                s(node),
                s("default"),
                s("us-east-1a"),
                s("m5.large"),
                s("spot"),
                s("amd64"),
                s("linux"),
                s("Ready"),
                s("true"),
            ]),
            values: values.iter().map(|(r, v)| (s(r), *v)).collect(),
        }
    }

    /// What a scrape writes for `gauge`.
    fn text(gauge: &NodeResourceGauge) -> String {
        gauge.text("karpenter_nodes_allocatable", "help.").collect()
    }

    /// The same series as prometheus-client's own encoder writes them, from a `Family` holding every label
    /// as an owned pair: the reference the streamed text must match.
    fn registry_text(gauge: &NodeResourceGauge) -> String {
        let family: Family<Vec<(String, String)>, Gauge<f64, AtomicU64>> = Family::default();
        for node in gauge.snapshot().iter() {
            for (resource_type, value) in &node.values {
                let labels = NODE_LABEL_NAMES
                    .iter()
                    .enumerate()
                    .map(|(i, name)| {
                        let value = node.labels.get(i).map_or(&**resource_type, |v| &**v);
                        ((*name).to_string(), value.to_string())
                    })
                    .collect();
                family.get_or_create(&labels).set(*value);
            }
        }
        let mut registry = Registry::default();
        registry.register("karpenter_nodes_allocatable", "help", family);
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn each_node_and_resource_is_one_series_with_every_label() {
        let gauge = NodeResourceGauge::default();
        gauge.replace(vec![series("n1", &[("cpu", 1.93), ("memory", 7.0e9)])]);
        let out = text(&gauge);
        assert!(
            out.contains(
                "karpenter_nodes_allocatable{node_name=\"n1\",nodepool=\"default\",zone=\"us-east-1a\",\
             instance_type=\"m5.large\",capacity_type=\"spot\",arch=\"amd64\",os=\"linux\",phase=\"Ready\",\
             managed=\"true\",resource_type=\"cpu\"} 1.93"
            ),
            "{out}"
        );
        assert!(out.contains("resource_type=\"memory\"} 7000000000"), "{out}");
        assert!(out.contains("# TYPE karpenter_nodes_allocatable gauge"), "{out}");
        assert_eq!(gauge.get("n1", "cpu"), Some(1.93));
    }

    #[test]
    fn label_values_are_escaped_as_the_text_format_requires() {
        let mut out = String::new();
        for value in ["plain-value", "a\"quoted\" \\ path\nline", "ünïcode"] {
            write_label_value(&mut out, value);
            out.push('|');
        }
        assert_eq!(out, "plain-value|a\\\"quoted\\\" \\\\ path\\nline|ünïcode|");
    }

    #[test]
    fn a_refresh_drops_the_nodes_that_are_gone() {
        let gauge = NodeResourceGauge::default();
        gauge.replace(vec![series("n1", &[("cpu", 2.0)]), series("n2", &[("cpu", 4.0)])]);
        gauge.replace(vec![series("n2", &[("cpu", 4.0)])]);
        let out = text(&gauge);
        assert!(!out.contains("node_name=\"n1\""), "{out}");
        assert!(out.contains("node_name=\"n2\""), "{out}");
        assert_eq!(gauge.get("n1", "cpu"), None);
        gauge.replace(Vec::new());
        assert!(
            !text(&gauge).contains("karpenter_nodes_allocatable"),
            "an empty gauge is not exported"
        );
    }

    #[test]
    fn the_streamed_text_is_what_the_registry_encoder_writes() {
        let gauge = NodeResourceGauge::default();
        let mut nodes: Vec<NodeSeries> = (0..CHUNK_NODES * 2 + 3)
            .map(|i| {
                series(
                    &format!("n{i}"),
                    &[("cpu", 1.5 + i as f64), ("memory", 7.0e9), ("pods", 29.0)],
                )
            })
            .collect();
        Arc::make_mut(&mut nodes[1].labels)[2] = Arc::from("quote\" back\\slash new\nline");
        gauge.replace(nodes);
        let chunks: Vec<String> = gauge
            .text("karpenter_nodes_allocatable", "Node allocatable.")
            .collect();
        assert_eq!(
            chunks.len(),
            3,
            "{} nodes, {CHUNK_NODES} a chunk",
            CHUNK_NODES * 2 + 3
        );
        let streamed = chunks.concat();
        assert!(streamed.starts_with(
            "# HELP karpenter_nodes_allocatable Node allocatable.\n# TYPE karpenter_nodes_allocatable gauge\n"
        ));
        assert_eq!(streamed.matches("# HELP").count(), 1, "one header for the family");
        let series_lines = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .map(str::to_string)
                .collect()
        };
        // A Family writes its series in hash order: the same lines, sorted, is the comparison.
        let sorted = |mut lines: Vec<String>| {
            lines.sort_unstable();
            lines
        };
        let registry = registry_text(&gauge);
        assert_eq!(sorted(series_lines(&streamed)), sorted(series_lines(&registry)));
        assert!(
            streamed.contains(r#"zone="quote\" back\\slash new\nline""#),
            "{streamed}"
        );
        assert_eq!(series_lines(&streamed).len(), 3 * (CHUNK_NODES * 2 + 3));

        gauge.replace(Vec::new());
        assert_eq!(
            gauge.text("karpenter_nodes_allocatable", "h").count(),
            0,
            "no series, no family"
        );
    }
}
