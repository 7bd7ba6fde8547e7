//! Gauges that describe the cluster as the state cache sees it, recomputed just before each scrape: nodes and
//! their allocatable and pod requests, NodePool usage and limits, cluster utilization, cache sync; and one
//! `karpenter_pods_state` series per pod, which the scrape itself reads from the cache (`CachedPods`).

use karpenter_api::labels::{
    ARCH_LABEL, CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, OS_LABEL, ZONE_LABEL,
};
use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::Arc,
};

use karpenter_core::resources::{ResourceId, ResourceTable, Resources};
use karpenter_core::snapshot::pod_requests::pod_requests;
use karpenter_core::snapshot::{CompactNode, CompactPod};
use karpenter_metrics::{
    NodePoolResourceLabels, NodeSeries, PodEntry, PodNodeLabels, PodRows, PodSource, ResourceTypeLabels,
    metrics,
};
use karpenter_state::ClusterState;
use kube::ResourceExt;

/// Upstream's `resource_type` values are the resource names, e.g. `cpu`, `memory`, `pods`.
fn resource_value(table: &ResourceTable, id: ResourceId, milli: i64) -> (String, f64) {
    let name = table.name(id).to_string();
    // cpu in cores, everything else in units (bytes, pods).
    (name, milli as f64 / 1000.0)
}

fn phase(node: &CompactNode) -> &'static str {
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

/// Label values many series repeat (a zone, an instance type, a resource name), held once per refresh.
#[derive(Default)]
struct SharedStrings(HashSet<Arc<str>>);

impl SharedStrings {
    fn get(&mut self, value: &str) -> Arc<str> {
        if let Some(v) = self.0.get(value) {
            return Arc::clone(v);
        }
        let v: Arc<str> = Arc::from(value);
        self.0.insert(Arc::clone(&v));
        v
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
    // Upstream splits a node's pod requests: DaemonSet pods' go to the daemon gauge, the others' to the pod gauge.
    let mut requests: HashMap<std::sync::Arc<str>, Resources> = HashMap::new();
    let mut daemon_requests: HashMap<std::sync::Arc<str>, Resources> = HashMap::new();
    // Sums per node: the order does not matter.
    let pods = state.pods.unordered();
    for pod in &pods {
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
        let daemon = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "DaemonSet");
        let into = if daemon {
            &mut daemon_requests
        } else {
            &mut requests
        };
        if let Ok(r) = pod_requests(spec, &mut table) {
            into.entry(node.clone())
                .or_insert_with(Resources::zero)
                .add_assign(&r);
        }
    }

    // Read from the cache by the scrape itself, a chunk at a time: no table of 150,000 pods is built here.
    m.pods_state.set_source(Arc::new(CachedPods(state.clone())));
    let mut shared = SharedStrings::default();
    let (mut allocatable_series, mut requests_series, mut daemon_series) =
        (Vec::new(), Vec::new(), Vec::new());
    let mut pool_usage: BTreeMap<String, Resources> = BTreeMap::new();
    let (mut managed_allocatable, mut managed_requests) = (Resources::zero(), Resources::zero());
    for node in &nodes {
        let labels = node.labels();
        let nodepool = labels.get(NODEPOOL_LABEL).map_or("", String::as_str);
        let status = node.status.as_ref();
        let read =
            |list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
             table: &mut ResourceTable| {
                list.and_then(|l| Resources::from_resource_list(l, table).ok())
                    .unwrap_or_else(Resources::zero)
            };
        let allocatable = read(status.and_then(|s| s.allocatable.as_deref()), &mut table);
        let capacity = read(status.and_then(|s| s.capacity.as_deref()), &mut table);
        let name = node.name_any();
        let used = requests
            .get(name.as_str())
            .cloned()
            .unwrap_or_else(Resources::zero);
        let daemons = daemon_requests
            .get(name.as_str())
            .cloned()
            .unwrap_or_else(Resources::zero);
        if !nodepool.is_empty() {
            pool_usage
                .entry(nodepool.to_string())
                .or_insert_with(Resources::zero)
                .add_assign(&capacity);
            managed_allocatable.add_assign(&allocatable);
            managed_requests.add_assign(&used);
            managed_requests.add_assign(&daemons);
        }
        let mut label = |key: &str| shared.get(labels.get(key).map_or("", String::as_str));
        let node_labels = Arc::new([
            Arc::<str>::from(name),
            label(NODEPOOL_LABEL),
            label(ZONE_LABEL),
            label(INSTANCE_TYPE_LABEL),
            label(CAPACITY_TYPE_LABEL),
            label(ARCH_LABEL),
            label(OS_LABEL),
            shared.get(phase(node)),
            shared.get(if nodepool.is_empty() { "false" } else { "true" }),
        ]);
        let mut values = |resources: &Resources| -> Vec<(Arc<str>, f64)> {
            resources
                .iter()
                .map(|(id, milli)| {
                    let (name, value) = resource_value(&table, id, milli);
                    (shared.get(&name), value)
                })
                .collect()
        };
        let (allocatable_values, used_values, daemon_values) =
            (values(&allocatable), values(&used), values(&daemons));
        if !daemon_values.is_empty() {
            daemon_series.push(NodeSeries {
                labels: node_labels.clone(),
                values: daemon_values,
            });
        }
        if !allocatable_values.is_empty() {
            allocatable_series.push(NodeSeries {
                labels: node_labels.clone(),
                values: allocatable_values,
            });
        }
        if !used_values.is_empty() {
            requests_series.push(NodeSeries {
                labels: node_labels,
                values: used_values,
            });
        }
    }
    m.nodes_allocatable.replace(allocatable_series);
    m.nodes_total_pod_requests.replace(requests_series);
    m.nodes_total_daemon_requests.replace(daemon_series);

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

/// Upstream's `owner` label: the pod's first owner as the self link it would have,
/// `/apis/<apiVersion>/namespaces/<namespace>/<kind, lower case>s/<name>`; empty without owners.
fn write_owner(out: &mut String, pod: &CompactPod, namespace: &str) {
    use std::fmt::Write as _;
    out.clear();
    if let Some(owner) = pod.metadata.owner_references.as_ref().and_then(|o| o.first()) {
        // Writing into a String cannot fail.
        let _ = write!(
            out,
            "/apis/{}/namespaces/{namespace}/{}s/{}",
            owner.api_version,
            owner.kind.to_ascii_lowercase(),
            owner.name
        );
    }
}

/// `karpenter_pods_state`'s source: every pod in the cache, with the labels of the node it is bound to, read when
/// a scrape starts. Nothing of it is kept between scrapes; a scrape holds the cache's pods (shared, not copied)
/// and a map of node labels until its response is written.
struct CachedPods(ClusterState);

impl PodSource for CachedPods {
    fn rows(&self) -> Arc<dyn PodRows> {
        let nodes = self.0.nodes.all();
        let mut shared = SharedStrings::default();
        let mut node_labels = HashMap::with_capacity(nodes.len());
        for node in &nodes {
            let labels = node.labels();
            let mut label = |key: &str| shared.get(labels.get(key).map_or("", String::as_str));
            let values = [
                label(NODEPOOL_LABEL),
                label(ZONE_LABEL),
                label(ARCH_LABEL),
                label(CAPACITY_TYPE_LABEL),
                label(INSTANCE_TYPE_LABEL),
            ];
            let managed = !values[0].is_empty();
            node_labels.insert(node.name_any(), PodNodeLabels { values, managed });
        }
        Arc::new(CachedPodRows {
            pods: self.0.pods.all(),
            nodes: node_labels,
        })
    }
}

/// One scrape's pods (see [`CachedPods`]), in the cache's key order.
struct CachedPodRows {
    pods: Vec<Arc<CompactPod>>,
    nodes: HashMap<String, PodNodeLabels>,
}

impl PodRows for CachedPodRows {
    fn len(&self) -> usize {
        self.pods.len()
    }

    fn row<'a>(&'a self, i: usize, scratch: &'a mut String) -> (PodEntry<'a>, Option<&'a PodNodeLabels>) {
        let Some(pod) = self.pods.get(i) else {
            return (PodEntry::default(), None);
        };
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        write_owner(scratch, pod, namespace);
        let status = pod.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or_default();
        let entry = PodEntry {
            name: pod.metadata.name.as_deref().unwrap_or_default(),
            namespace,
            owner: scratch.as_str(),
            node,
            phase: status.and_then(|s| s.phase.as_deref()).unwrap_or_default(),
            ready,
        };
        (entry, self.nodes.get(node))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::{Node, Pod};
    use karpenter_sim::{ApiServer, VirtualClock};
    use karpenter_state::Watched;
    use kube::{
        Api,
        api::{DeleteParams, PostParams},
    };
    use serde_json::json;

    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

    /// Waits (5 s at most) until the cache shows `nodes` Nodes and `pods` pods.
    async fn cache_holds(state: &ClusterState, nodes: usize, pods: usize) -> TestResult {
        let holds = || state.synced() && state.nodes.len() == nodes && state.pods.len() == pods;
        tokio::time::timeout(Duration::from_secs(5), async {
            while !holds() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .map_err(|_| format!("the cache never held {nodes} nodes and {pods} pods"))?;
        Ok(())
    }

    #[tokio::test]
    async fn node_gauges_follow_the_cache_and_drop_deleted_nodes() -> TestResult {
        let server = ApiServer::new(VirtualClock::starting_at(jiff::Timestamp::UNIX_EPOCH));
        let client = server.client();
        let nodes: Api<Node> = Api::all(client.clone());
        for (name, pool) in [("managed-1", Some("default")), ("unmanaged-1", None)] {
            let mut labels =
                json!({"topology.kubernetes.io/zone": "us-east-1a", "kubernetes.io/arch": "amd64"});
            if let Some(pool) = pool {
                labels["karpenter.sh/nodepool"] = json!(pool);
            }
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": labels},
                "status": {"allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
                    "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
                    "conditions": [{"type": "Ready", "status": "True"}]},
            }))?;
            nodes.create(&PostParams::default(), &node).await?;
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"nodeName": "managed-1", "containers": [{"name": "app", "resources": {"requests": {"cpu": "500m"}}}]},
            "status": {"phase": "Running"},
        }))?;
        Api::<Pod>::namespaced(client.clone(), "default")
            .create(&PostParams::default(), &pod)
            .await?;
        let daemon: Pod = serde_json::from_value(json!({
            "metadata": {"name": "agent-x1", "namespace": "default",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "d1"}]},
            "spec": {"nodeName": "managed-1", "containers": [{"name": "agent", "resources": {"requests": {"cpu": "100m"}}}]},
            "status": {"phase": "Running"},
        }))?;
        Api::<Pod>::namespaced(client.clone(), "default")
            .create(&PostParams::default(), &daemon)
            .await?;

        let state = ClusterState::new(Watched::default());
        let watching = tokio::spawn({
            let (state, client) = (state.clone(), client.clone());
            async move { state.watch(client).await }
        });
        cache_holds(&state, 2, 2).await?;

        refresh(&state);
        let m = metrics();
        assert_eq!(m.nodes_allocatable.get("managed-1", "cpu"), Some(1.93));
        assert_eq!(m.nodes_allocatable.get("unmanaged-1", "pods"), Some(29.0));
        assert_eq!(
            m.nodes_total_pod_requests.get("managed-1", "cpu"),
            Some(0.5),
            "the DaemonSet pod is not counted with the other pods"
        );
        assert_eq!(m.nodes_total_daemon_requests.get("managed-1", "cpu"), Some(0.1));
        assert_eq!(
            m.nodes_total_pod_requests.get("unmanaged-1", "cpu"),
            None,
            "no pod, no series"
        );
        let text = m.encode();
        assert!(
            text.contains("karpenter_nodes_allocatable{node_name=\"managed-1\",nodepool=\"default\",zone=\"us-east-1a\",instance_type=\"\",capacity_type=\"\",arch=\"amd64\",os=\"\",phase=\"Ready\",managed=\"true\",resource_type=\"cpu\"} 1.93"),
            "{text}"
        );
        assert!(text.contains("node_name=\"unmanaged-1\",nodepool=\"\""), "{text}");
        assert!(text.contains("managed=\"false\""), "{text}");
        assert!(
            text.contains(
                "karpenter_pods_state{name=\"web\",namespace=\"default\",owner=\"\",node=\"managed-1\",\
                 scheduled=\"true\",nodepool=\"default\",zone=\"us-east-1a\",arch=\"amd64\",capacity_type=\"\",\
                 instance_type=\"\",phase=\"Pending\",ready=\"false\",managed=\"true\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "karpenter_pods_state{name=\"agent-x1\",namespace=\"default\",\
                 owner=\"/apis/apps/v1/namespaces/default/daemonsets/agent\",node=\"managed-1\",scheduled=\"true\""
            ),
            "{text}"
        );

        nodes.delete("managed-1", &DeleteParams::default()).await?;
        cache_holds(&state, 1, 2).await?;
        refresh(&state);
        assert_eq!(
            m.nodes_allocatable.get("managed-1", "cpu"),
            None,
            "a deleted node's series go"
        );
        let text = m.encode();
        assert!(!text.contains("node_name=\"managed-1\""));
        assert!(
            text.contains("name=\"web\",namespace=\"default\",owner=\"\",node=\"managed-1\",scheduled=\"true\",nodepool=\"\""),
            "a pod on a node that is gone keeps its node name, without the node's labels: {text}"
        );
        watching.abort();
        Ok(())
    }
}
