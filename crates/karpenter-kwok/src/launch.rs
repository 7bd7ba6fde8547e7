//! What a KWOKNodeClass launch makes, decided without I/O as upstream's KWOK provider decides it: of the
//! instance types the NodeClaim allows, the one with the cheapest available offering its requirements allow
//! (ties broken at random), and the Node that stands for the instance: named `kwok-<claim>-<random>-<number>`,
//! provider ID `kwok://<node>`, the `karpenter.sh/unregistered` taint, the labels upstream's nodes carry, capacity
//! = the claim's requests and allocatable = those requests overlaid with the instance type's allocatable.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{Node, NodeSpec, NodeStatus, Taint},
    apimachinery::pkg::api::resource::Quantity,
};
use karpenter_api::{
    common::{NodeSelectorRequirementWithMinValues, Operator},
    kwoknodeclass as kwok, labels,
    nodeclaim::NodeClaim,
    quantity::format_milli,
};
use karpenter_core::{
    catalog::{CatalogInstanceType, CatalogOffering, RequirementOperator},
    cloudprovider::CloudProviderError,
};
use kube::api::ObjectMeta;

/// The provider ID prefix of KWOKNodeClass nodes.
pub const PROVIDER_ID_PREFIX: &str = "kwok://";
/// kwok's pre-created partitions, one of which each node joins (upstream has only `a`).
const PARTITIONS: [&str; 1] = ["a"];
const UNREGISTERED_TAINT: &str = "karpenter.sh/unregistered";

/// A small generator for names and tie-breaks (the simulator's SplitMix64); seeded per process so two
/// controllers do not draw alike.
#[derive(Debug, Clone)]
pub struct Draw(karpenter_sim::rng::Rng);

impl Draw {
    pub fn new(seed: u64) -> Self {
        Self(karpenter_sim::rng::Rng::seeded(seed | 1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    fn alphanumeric(&mut self, len: usize) -> String {
        const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        (0..len).map(|_| CHARS[self.below(CHARS.len())] as char).collect()
    }
}

/// Whether `requirements` allow `key=value` (a key they do not name is allowed).
fn allows(requirements: &[NodeSelectorRequirementWithMinValues], key: &str, value: &str) -> bool {
    requirements.iter().filter(|r| r.key == key).all(|r| {
        let number = || value.parse::<i64>().ok();
        let bound = || r.values.first().and_then(|v| v.parse::<i64>().ok());
        match r.operator {
            Operator::In => r.values.iter().any(|v| v == value),
            Operator::NotIn => !r.values.iter().any(|v| v == value),
            Operator::Exists => true,
            Operator::DoesNotExist => false,
            Operator::Gt => matches!((number(), bound()), (Some(n), Some(b)) if n > b),
            Operator::Lt => matches!((number(), bound()), (Some(n), Some(b)) if n < b),
            Operator::Gte => matches!((number(), bound()), (Some(n), Some(b)) if n >= b),
            Operator::Lte => matches!((number(), bound()), (Some(n), Some(b)) if n <= b),
        }
    })
}

fn offering_allowed(requirements: &[NodeSelectorRequirementWithMinValues], o: &CatalogOffering) -> bool {
    allows(requirements, labels::ZONE_LABEL, &o.zone)
        && allows(requirements, labels::CAPACITY_TYPE_LABEL, &o.capacity_type)
        && o.reservation_id
            .as_deref()
            .is_none_or(|id| allows(requirements, "karpenter.sh/reservation-id", id))
}

/// The instance type and offering a launch of `claim` takes from `catalog`.
pub fn choose<'a>(
    claim: &NodeClaim,
    catalog: &'a [CatalogInstanceType],
    draw: &mut Draw,
) -> Result<(&'a CatalogInstanceType, &'a CatalogOffering), CloudProviderError> {
    let requirements = claim.spec.requirements.as_slice();
    let Some(types) = requirements.iter().find(|r| r.key == labels::INSTANCE_TYPE_LABEL) else {
        return Err(CloudProviderError::Create {
            reason: "InstanceTypeRequirementMissing".into(),
            message: format!(
                "NodeClaim {}: spec.requirements: no {} requirement",
                claim.metadata.name.as_deref().unwrap_or_default(),
                labels::INSTANCE_TYPE_LABEL
            ),
        });
    };
    let mut best: Option<(&CatalogInstanceType, Vec<&CatalogOffering>)> = None;
    for name in &types.values {
        let Some(it) = catalog.iter().find(|t| &t.name == name) else {
            return Err(CloudProviderError::Create {
                reason: "InstanceTypeNotFound".into(),
                message: format!("instance type {name} is not in the KWOK catalog"),
            });
        };
        let allowed: Vec<&CatalogOffering> = it
            .offerings
            .iter()
            .filter(|o| o.available && offering_allowed(requirements, o))
            .collect();
        let Some(cheapest) = allowed.iter().map(|o| o.price).min_by(f64::total_cmp) else {
            continue;
        };
        let at_price: Vec<&CatalogOffering> = allowed.into_iter().filter(|o| o.price == cheapest).collect();
        // Strictly cheaper replaces: of types at the same price the first listed keeps it, as upstream.
        if best.as_ref().is_none_or(|(_, o)| cheapest < o[0].price) {
            best = Some((it, at_price));
        }
    }
    let Some((it, offerings)) = best else {
        return Err(CloudProviderError::InsufficientCapacity {
            message: format!(
                "no available offering of [{}] meets the NodeClaim's requirements",
                types.values.join(", ")
            ),
            offerings: Vec::new(),
        });
    };
    Ok((it, offerings[draw.below(offerings.len())]))
}

/// The Node that stands for `claim` launched as `it` in `offering`.
pub fn node_for(
    claim: &NodeClaim,
    it: &CatalogInstanceType,
    offering: &CatalogOffering,
    draw: &mut Draw,
) -> Node {
    let claim_name = claim.metadata.name.clone().unwrap_or_default();
    let name = format!(
        "kwok-{claim_name}-{}-{}-{}",
        draw.alphanumeric(6),
        draw.below(1_000_000),
        draw.alphanumeric(10)
    );
    let mut node_labels = claim.metadata.labels.clone().unwrap_or_default();
    for r in claim.spec.requirements.iter() {
        if let ([value], Operator::In) = (r.values.as_slice(), r.operator) {
            node_labels.insert(r.key.clone(), value.clone());
        }
    }
    node_labels.insert(labels::INSTANCE_TYPE_LABEL.into(), it.name.clone());
    for r in it.requirements.iter() {
        if let ([value], RequirementOperator::In) = (r.values.as_slice(), r.operator) {
            node_labels.insert(r.key.clone(), value.clone());
        }
    }
    node_labels.insert(labels::ZONE_LABEL.into(), offering.zone.clone());
    node_labels.insert(labels::CAPACITY_TYPE_LABEL.into(), offering.capacity_type.clone());
    if let Some(id) = &offering.reservation_id {
        node_labels.insert("karpenter.sh/reservation-id".into(), id.clone());
    }
    // Go's %f: six decimals.
    node_labels.insert(
        kwok::NODE_VIEWER_PRICE_LABEL.into(),
        format!("{:.6}", offering.price),
    );
    node_labels.insert(
        kwok::KWOK_PARTITION_LABEL.into(),
        PARTITIONS[draw.below(PARTITIONS.len())].into(),
    );
    node_labels.insert(labels::HOSTNAME_LABEL.into(), claim_name);
    node_labels.insert(kwok::KWOK_NODE_KEY.into(), kwok::KWOK_NODE_VALUE.into());
    let mut annotations = claim.metadata.annotations.clone().unwrap_or_default();
    annotations.insert(kwok::KWOK_NODE_KEY.into(), kwok::KWOK_NODE_VALUE.into());
    let requests: BTreeMap<String, Quantity> = claim.spec.resources.requests.clone().unwrap_or_default();
    let mut allocatable = requests.clone();
    for (resource, milli) in it.allocatable() {
        let quantity = Quantity(format_milli(&resource, milli));
        allocatable.insert(resource, quantity);
    }
    Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(node_labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(format!("{PROVIDER_ID_PREFIX}{name}")),
            taints: Some(vec![Taint {
                key: UNREGISTERED_TAINT.into(),
                effect: "NoExecute".into(),
                ..Taint::default()
            }]),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(requests),
            allocatable: Some(allocatable),
            phase: Some("Pending".into()),
            ..NodeStatus::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{parse, tests::SMALL_CATALOG};

    fn claim(requirements: serde_json::Value) -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abcde", "labels": {"karpenter.sh/nodepool": "default", "team": "a"},
                         "annotations": {"karpenter.sh/nodepool-hash": "123"}},
            "spec": {"requirements": requirements,
                     "resources": {"requests": {"cpu": "1500m", "memory": "1Gi", "pods": "3"}},
                     "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}},
        }))
        .unwrap()
    }

    #[test]
    fn the_cheapest_allowed_offering_of_the_allowed_types_is_launched() {
        let catalog = parse("t", SMALL_CATALOG).unwrap();
        let mut draw = Draw::new(7);
        let both = claim(serde_json::json!([
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.2xlarge", "c-4x-amd64-linux"]}
        ]));
        let (it, offering) = choose(&both, &catalog, &mut draw).unwrap();
        assert_eq!(
            (it.name.as_str(), offering.zone.as_str(), offering.price),
            ("c-4x-amd64-linux", "test-zone-a", 0.2)
        );
        // The claim's zone rules the spot offering out; the on-demand one is still cheaper than m5.2xlarge.
        let zone_b = claim(serde_json::json!([
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.2xlarge", "c-4x-amd64-linux"]},
            {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["test-zone-a"]}
        ]));
        let (it, offering) = choose(&zone_b, &catalog, &mut draw).unwrap();
        assert_eq!(
            (it.name.as_str(), offering.capacity_type.as_str()),
            ("c-4x-amd64-linux", "on-demand")
        );
        let nowhere = claim(serde_json::json!([
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.2xlarge"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}
        ]));
        let error = choose(&nowhere, &catalog, &mut draw).unwrap_err();
        assert_eq!(error.category(), "InsufficientCapacity");
        let unknown = claim(serde_json::json!([
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["x9.huge"]}
        ]));
        assert!(
            choose(&unknown, &catalog, &mut draw)
                .unwrap_err()
                .to_string()
                .contains("x9.huge is not in the KWOK catalog")
        );
        assert!(choose(&claim(serde_json::json!([])), &catalog, &mut draw).unwrap_err().to_string().contains("NodeClaim default-abcde: spec.requirements: no node.kubernetes.io/instance-type requirement"));
    }

    #[test]
    fn the_node_carries_upstreams_labels_taint_and_resources() {
        let catalog = parse("t", SMALL_CATALOG).unwrap();
        let mut draw = Draw::new(7);
        let c = claim(serde_json::json!([
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-4x-amd64-linux"]},
            {"key": "karpenter.kwok.sh/instance-size", "operator": "Lt", "values": ["32"]},
            {"key": "example.com/tier", "operator": "In", "values": ["gold"]}
        ]));
        let (it, offering) = choose(&c, &catalog, &mut draw).unwrap();
        let node = node_for(&c, it, offering, &mut draw);
        let name = node.metadata.name.clone().unwrap();
        assert!(name.starts_with("kwok-default-abcde-"), "{name}");
        let spec = node.spec.unwrap();
        assert_eq!(spec.provider_id, Some(format!("kwok://{name}")));
        let taints = spec.taints.unwrap();
        assert_eq!(
            (taints.len(), taints[0].key.as_str(), taints[0].effect.as_str()),
            (1, "karpenter.sh/unregistered", "NoExecute")
        );
        let l = node.metadata.labels.unwrap();
        let label = |k: &str| l.get(k).map(String::as_str);
        assert_eq!(label("team"), Some("a"), "the claim's labels");
        assert_eq!(
            label("example.com/tier"),
            Some("gold"),
            "single-valued In requirements"
        );
        assert_eq!(
            label("node.kubernetes.io/instance-type"),
            Some("c-4x-amd64-linux")
        );
        assert_eq!(label("karpenter.kwok.sh/instance-size"), Some("4"));
        assert_eq!(label("karpenter.kwok.sh/instance-family"), Some("c"));
        assert_eq!(label("karpenter.kwok.sh/instance-cpu"), Some("4"));
        assert_eq!(label("karpenter.kwok.sh/instance-memory"), Some("8Gi"));
        assert_eq!(label("kubernetes.io/arch"), Some("amd64"));
        assert_eq!(label("kubernetes.io/os"), Some("linux"));
        assert_eq!(label("topology.kubernetes.io/zone"), Some("test-zone-a"));
        assert_eq!(label("karpenter.sh/capacity-type"), Some("spot"));
        assert_eq!(label("eks-node-viewer/instance-price"), Some("0.200000"));
        assert_eq!(label("kwok-partition"), Some("a"));
        assert_eq!(label("kubernetes.io/hostname"), Some("default-abcde"));
        assert_eq!(label("kwok.x-k8s.io/node"), Some("fake"));
        let annotations = node.metadata.annotations.unwrap();
        assert_eq!(
            annotations.get("kwok.x-k8s.io/node").map(String::as_str),
            Some("fake")
        );
        assert_eq!(
            annotations.get("karpenter.sh/nodepool-hash").map(String::as_str),
            Some("123")
        );
        let status = node.status.unwrap();
        let capacity = status.capacity.unwrap();
        assert_eq!(capacity["cpu"].0, "1500m", "capacity is the claim's requests");
        assert!(!capacity.contains_key("ephemeral-storage"));
        let allocatable = status.allocatable.unwrap();
        assert_eq!(
            allocatable["cpu"].0,
            format_milli("cpu", 3900),
            "the type's allocatable overlays the requests"
        );
        assert_eq!(allocatable["pods"].0, format_milli("pods", 110_000));
        assert_eq!(
            allocatable["ephemeral-storage"].0,
            format_milli("ephemeral-storage", 20 * 1024 * 1024 * 1024 * 1000)
        );
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        assert!(
            status.conditions.is_none(),
            "kwok plays the kubelet and reports readiness"
        );
    }

    #[test]
    fn numeric_operators_compare_as_upstream() {
        let r = |op: &str, v: &str| -> Vec<NodeSelectorRequirementWithMinValues> {
            serde_json::from_value(serde_json::json!([{"key": "k", "operator": op, "values": [v]}])).unwrap()
        };
        assert!(allows(&r("Lt", "32"), "k", "16"));
        assert!(!allows(&r("Lt", "32"), "k", "32"));
        assert!(!allows(&r("Lt", "32"), "k", "large"));
        assert!(allows(&r("Gt", "2"), "k", "4"));
        assert!(
            allows(&r("Lt", "32"), "other", "x"),
            "another key is not constrained"
        );
    }
}
