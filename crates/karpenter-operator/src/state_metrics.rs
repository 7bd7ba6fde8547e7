//! Gauges that describe the cluster as the state cache sees it, recomputed just before each scrape: nodes and
//! their allocatable and pod requests, NodePool usage and limits, cluster utilization, cache sync.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Node;
use karpenter_core::resources::{ResourceId, ResourceTable, Resources, pod_requests};
use karpenter_metrics::{NodePoolResourceLabels, NodeResourceLabels, ResourceTypeLabels, metrics};
use karpenter_state::ClusterState;
use kube::ResourceExt;

/// Upstream's `resource_type` values are the resource names, e.g. `cpu`, `memory`, `pods`.
fn resource_value(table: &ResourceTable, id: ResourceId, milli: i64) -> (String, f64) {
    let name = table.name(id).to_string();
    // cpu in cores, everything else in units (bytes, pods).
    (name, milli as f64 / 1000.0)
}

fn phase(node: &Node) -> &'static str {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str());
    match ready {
        Some("True") => "Ready",
        Some("False") => "NotReady",
        _ => "Unknown",
    }
}

/// Recomputes every state gauge (dropping series of nodes and pools that are gone).
pub fn refresh(state: &ClusterState) {
    let m = metrics();
    m.cluster_state_synced.set(i64::from(state.synced()));
    let nodes = state.nodes.all();
    m.cluster_state_node_count
        .set(i64::try_from(nodes.len()).unwrap_or(i64::MAX));

    let mut table = ResourceTable::new();
    let mut requests: HashMap<std::sync::Arc<str>, Resources> = HashMap::new();
    for pod in state.pods.all() {
        let Some(spec) = pod.spec.as_ref() else { continue };
        let Some(node) = spec.node_name.as_ref() else {
            continue;
        };
        let done = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed");
        if done {
            continue;
        }
        if let Ok(r) = pod_requests(spec, &mut table) {
            requests
                .entry(node.clone())
                .or_insert_with(Resources::zero)
                .add_assign(&r);
        }
    }

    m.nodes_allocatable.clear();
    m.nodes_total_pod_requests.clear();
    let mut pool_usage: BTreeMap<String, Resources> = BTreeMap::new();
    let (mut managed_allocatable, mut managed_requests) = (Resources::zero(), Resources::zero());
    for node in &nodes {
        let labels = node.labels();
        let label = |key: &str| labels.get(key).cloned().unwrap_or_default();
        let nodepool = label("karpenter.sh/nodepool");
        let status = node.status.as_ref();
        let read =
            |list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
             table: &mut ResourceTable| {
                list.and_then(|l| Resources::from_resource_list(l, table).ok())
                    .unwrap_or_else(Resources::zero)
            };
        let allocatable = read(status.and_then(|s| s.allocatable.as_ref()), &mut table);
        let capacity = read(status.and_then(|s| s.capacity.as_ref()), &mut table);
        let used = requests
            .get(node.name_any().as_str())
            .cloned()
            .unwrap_or_else(Resources::zero);
        if !nodepool.is_empty() {
            pool_usage
                .entry(nodepool.clone())
                .or_insert_with(Resources::zero)
                .add_assign(&capacity);
            managed_allocatable.add_assign(&allocatable);
            managed_requests.add_assign(&used);
        }
        let series = |resource_type: String| NodeResourceLabels {
            node_name: node.name_any(),
            nodepool: nodepool.clone(),
            zone: label("topology.kubernetes.io/zone"),
            instance_type: label("node.kubernetes.io/instance-type"),
            capacity_type: label("karpenter.sh/capacity-type"),
            arch: label("kubernetes.io/arch"),
            os: label("kubernetes.io/os"),
            phase: phase(node).into(),
            managed: (!nodepool.is_empty()).to_string(),
            resource_type,
        };
        for (id, milli) in allocatable.iter() {
            let (name, value) = resource_value(&table, id, milli);
            m.nodes_allocatable.get_or_create(&series(name)).set(value);
        }
        for (id, milli) in used.iter() {
            let (name, value) = resource_value(&table, id, milli);
            m.nodes_total_pod_requests.get_or_create(&series(name)).set(value);
        }
    }

    m.nodepools_usage.clear();
    m.nodepools_limit.clear();
    for pool in state.node_pools.all() {
        let name = pool.name_any();
        if let Some(usage) = pool_usage.get(&name) {
            for (id, milli) in usage.iter() {
                let (resource_type, value) = resource_value(&table, id, milli);
                m.nodepools_usage
                    .get_or_create(&NodePoolResourceLabels {
                        nodepool: name.clone(),
                        resource_type,
                    })
                    .set(value);
            }
        }
        if let Some(limits) = pool.spec.limits.as_ref()
            && let Ok(limits) = Resources::from_resource_list(limits, &mut table)
        {
            for (id, milli) in limits.iter() {
                let (resource_type, value) = resource_value(&table, id, milli);
                m.nodepools_limit
                    .get_or_create(&NodePoolResourceLabels {
                        nodepool: name.clone(),
                        resource_type,
                    })
                    .set(value);
            }
        }
    }

    m.cluster_utilization_percent.clear();
    for (id, allocatable) in managed_allocatable.iter() {
        let percent = 100.0 * managed_requests.get(id) as f64 / allocatable as f64;
        m.cluster_utilization_percent
            .get_or_create(&ResourceTypeLabels {
                resource_type: table.name(id).to_string(),
            })
            .set(percent);
    }
}
