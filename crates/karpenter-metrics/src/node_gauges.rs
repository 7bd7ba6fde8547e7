//! The per-node gauges (`karpenter_nodes_allocatable`, `karpenter_nodes_total_pod_requests`) as one table
//! replaced whole on each refresh, instead of a `Family` with one entry per node and resource.
//!
//! A cluster of 5,000 nodes exports about 25,000 series per gauge. As a `Family`, each series kept its own ten
//! owned label strings and a hash-map slot (about 400 bytes a series, 25 MiB for the two gauges), although
//! nine of the ten labels are the node's and most values repeat across the cluster. Here a node's labels are
//! held once, as shared strings, beside its values; the label set is only spelled out while encoding.

use std::sync::{Arc, RwLock};

use prometheus_client::{
    encoding::{EncodeMetric, MetricEncoder},
    metrics::{MetricType, TypedMetric},
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
/// resource type.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSeries {
    pub labels: [Arc<str>; 9],
    pub values: Vec<(Arc<str>, f64)>,
}

/// A gauge with one series per node and resource type; see the module documentation.
#[derive(Debug, Clone, Default)]
pub struct NodeResourceGauge {
    nodes: Arc<RwLock<Vec<NodeSeries>>>,
}

impl NodeResourceGauge {
    /// Replaces every series: nodes that are gone stop being exported.
    pub fn replace(&self, nodes: Vec<NodeSeries>) {
        // A panic while holding the lock cannot leave the table half-written (it is swapped whole).
        *self.nodes.write().unwrap_or_else(|e| e.into_inner()) = nodes;
    }

    /// The value exported for `node` and `resource_type`, if any.
    pub fn get(&self, node: &str, resource_type: &str) -> Option<f64> {
        let nodes = self.nodes.read().unwrap_or_else(|e| e.into_inner());
        nodes
            .iter()
            .filter(|n| &*n.labels[0] == node)
            .flat_map(|n| n.values.iter())
            .find(|(r, _)| &**r == resource_type)
            .map(|(_, v)| *v)
    }
}

impl TypedMetric for NodeResourceGauge {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for NodeResourceGauge {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        let nodes = self.nodes.read().unwrap_or_else(|e| e.into_inner());
        for node in nodes.iter() {
            for (resource_type, value) in &node.values {
                let mut labels: [(&str, &str); 10] = [("", ""); 10];
                for (i, slot) in labels.iter_mut().enumerate() {
                    let value = node.labels.get(i).map_or(&**resource_type, |v| &**v);
                    *slot = (NODE_LABEL_NAMES[i], value);
                }
                encoder.encode_family(&labels)?.encode_gauge(value)?;
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }

    fn is_empty(&self) -> bool {
        self.nodes.read().unwrap_or_else(|e| e.into_inner()).is_empty()
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::{encoding::text::encode, registry::Registry};

    use super::*;

    fn series(node: &str, values: &[(&str, f64)]) -> NodeSeries {
        let s = |v: &str| Arc::<str>::from(v);
        NodeSeries {
            labels: [
                s(node),
                s("default"),
                s("us-east-1a"),
                s("m5.large"),
                s("spot"),
                s("amd64"),
                s("linux"),
                s("Ready"),
                s("true"),
            ],
            values: values.iter().map(|(r, v)| (s(r), *v)).collect(),
        }
    }

    fn text(gauge: &NodeResourceGauge) -> String {
        let mut registry = Registry::default();
        registry.register("karpenter_nodes_allocatable", "help", gauge.clone());
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
}
