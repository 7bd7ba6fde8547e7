//! The disruption benchmark clusters as Kubernetes objects (JSON documents, as `kubectl get -o json` would
//! print them), so they go through the same snapshot loader `karpenter disrupt` uses.
//!
//! Every cluster starts its own [`SplitMix64`] from [`SEED`] (42) and draws, node by node:
//! - the instance type, uniform over [`INSTANCE_TYPES`] (m5.xlarge, m5.2xlarge, c5.2xlarge, r5.xlarge of the
//!   embedded AWS us-east-1 catalog), then the zone, uniform over [`ZONES`] (us-east-1a/b/c); capacity type
//!   on-demand; the NodePool is `np-{i % pools}` (round-robin);
//! - the pod count, uniform over 10..=30 (or a fixed count), capped by the type's pod capacity;
//! - per pod, CPU uniform over {100, 250, 500}m and memory over {256, 512, 1024}Mi, then an `app` label
//!   uniform over `app-0`..`app-9` (used by pods not in a hostname spread). A drawn shape that would leave too little
//!   of the node's allocatable for the node's remaining pods at the smallest shape (100m, 256Mi) is replaced by
//!   the smallest shape, so no node is ever over-committed. The `app` draw is made for every pod, so clusters
//!   that differ only in spread or NodePools have the same nodes and pod shapes.
//!
//! Hostname spread: pod `j` of a node is in a spread when `(j * spread) % 100 < spread` (every pod at 100%,
//! every other pod at 50%). The `s`-th spread pod of a node is labelled `app=spread-{s}` and carries a
//! `topologySpreadConstraints` entry (maxSkew 1, `kubernetes.io/hostname`, DoNotSchedule, selecting its own
//! `app`), so every spread app has at most one pod per node and the cluster as generated satisfies its
//! constraints.
//!
//! Every node is a managed, registered, initialized and Ready Node with a NodeClaim (Launched, Registered and
//! Initialized True), both labelled with the type's single-valued catalog requirements (instance type, arch,
//! OS, region, `karpenter.k8s.aws/instance-*`) plus zone, capacity type and NodePool; both were created
//! [`CREATED`], a day before the pass's time [`NOW`]. Capacity is the catalog's; allocatable is capacity minus
//! the catalog's overhead. NodePools require instance-category In [c, m, r], arch amd64 and capacity type
//! on-demand, and consolidate WhenEmptyOrUnderutilized after 0s with a 100% node budget.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use karpenter_core::catalog::{CatalogFile, RequirementOperator};
use serde_json::{Map, Value, json};

use super::{
    catalogs::MIB,
    workloads::{SEED, SplitMix64},
};

/// The time of every pass.
pub const NOW: &str = "2026-12-02T10:00:00Z";
/// When every Node and NodeClaim was created and initialized: a day before [`NOW`].
pub const CREATED: &str = "2026-12-01T10:00:00Z";

pub const INSTANCE_TYPES: [&str; 4] = ["m5.xlarge", "m5.2xlarge", "c5.2xlarge", "r5.xlarge"];
pub const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
const CPU_MILLI: [i64; 3] = [100, 250, 500];
const MEMORY_MIB: [i64; 3] = [256, 512, 1024];
const APPS: usize = 10;

const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";
const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
const NODEPOOL: &str = "karpenter.sh/nodepool";

/// How many pods each node gets.
#[derive(Debug, Clone, Copy)]
pub enum PodsPerNode {
    /// Uniform over `min..=max`.
    Uniform(usize, usize),
    Fixed(usize),
}

/// One benchmark cluster.
#[derive(Debug, Clone, Copy)]
pub struct ClusterSpec {
    pub nodes: usize,
    pub pools: usize,
    /// Percentage of pods in a hostname spread (0..=100).
    pub spread: u32,
    pub pods_per_node: PodsPerNode,
    /// Full coverage: every node an m5.xlarge filled to the brim and NodePools limited to m5.xlarge, so no
    /// node can be deleted or replaced more cheaply and single-node consolidation evaluates every candidate.
    pub full_coverage: bool,
}

impl ClusterSpec {
    pub fn name(&self) -> String {
        let mut name = format!("disrupt-{}n-{}p-{}s", self.nodes, self.pools, self.spread);
        if let PodsPerNode::Fixed(n) = self.pods_per_node {
            name.push_str(&format!("-{n}ppn"));
        }
        if self.full_coverage {
            name.push_str("-full");
        }
        name
    }
}

/// What a node of one instance type looks like.
struct Shape {
    name: &'static str,
    labels: BTreeMap<String, String>,
    capacity: Map<String, Value>,
    allocatable: Map<String, Value>,
    cpu_milli: i64,
    memory_bytes: i64,
    max_pods: usize,
}

/// A milli-unit amount as a Kubernetes quantity (whole units when exact; CPU always in millicores).
fn quantity(resource: &str, milli: i64) -> Value {
    if resource != "cpu" && milli % 1000 == 0 {
        json!((milli / 1000).to_string())
    } else {
        json!(format!("{milli}m"))
    }
}

fn shape(catalog: &CatalogFile, name: &'static str) -> Result<Shape> {
    let it = catalog
        .instance_types
        .iter()
        .find(|t| t.name == name)
        .with_context(|| format!("instance type {name} is not in the catalog"))?;
    let overhead = it.overhead.total();
    let mut capacity = Map::new();
    let mut allocatable = Map::new();
    let mut alloc = BTreeMap::new();
    for (resource, &amount) in &it.capacity {
        let left = amount - overhead.get(resource).copied().unwrap_or(0);
        capacity.insert(resource.clone(), quantity(resource, amount));
        allocatable.insert(resource.clone(), quantity(resource, left));
        alloc.insert(resource.as_str(), left);
    }
    let labels = it
        .requirements
        .iter()
        .filter(|r| r.operator == RequirementOperator::In && r.values.len() == 1 && r.key != ZONE)
        .map(|r| (r.key.clone(), r.values[0].clone()))
        .collect();
    let (Some(&cpu_milli), Some(&memory_milli), Some(&pods_milli)) =
        (alloc.get("cpu"), alloc.get("memory"), alloc.get("pods"))
    else {
        bail!("instance type {name} lacks cpu, memory or pods capacity");
    };
    Ok(Shape {
        name,
        labels,
        capacity,
        allocatable,
        cpu_milli,
        memory_bytes: memory_milli / 1000,
        max_pods: usize::try_from(pods_milli / 1000).unwrap_or(0),
    })
}

fn nodepool(name: &str, full_coverage: bool) -> Value {
    let mut pool = json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {
                "requirements": [
                    {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                ],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            }},
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "0s",
                "budgets": [{"nodes": "100%"}],
            },
        },
    });
    if full_coverage
        && let Some(reqs) = pool
            .pointer_mut("/spec/template/spec/requirements")
            .and_then(Value::as_array_mut)
    {
        reqs.push(json!({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [FULL_COVERAGE_TYPE]}));
    }
    pool
}

/// The one instance type of the full-coverage clusters.
const FULL_COVERAGE_TYPE: &str = "m5.xlarge";

fn condition(kind: &str) -> Value {
    json!({"type": kind, "status": "True", "lastTransitionTime": CREATED, "reason": kind, "message": ""})
}

/// Pod `j` of a node: in the hostname spread when `(j * spread) % 100 < spread` (labelled `spread-{s}` for the
/// `s`-th such pod of its node, with a maxSkew 1 DoNotSchedule constraint on its own label), else `plain_app`.
/// Returns the `app` label and the pod's spec so far.
fn spread_pod(spread: u32, j: usize, plain_app: &str, node_name: &str) -> (String, Value) {
    let mut pod_spec = json!({"nodeName": node_name});
    let in_spread = (j as u64 * u64::from(spread)) % 100 < u64::from(spread);
    if !in_spread {
        return (plain_app.to_string(), pod_spec);
    }
    // The s-th spread pod of a node: pods before j in the spread, counted with the same rule.
    let s = (0..j)
        .filter(|&k| (k as u64 * u64::from(spread)) % 100 < u64::from(spread))
        .count();
    let app = format!("spread-{s}");
    pod_spec["topologySpreadConstraints"] = json!([{
        "maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": app}},
    }]);
    (app, pod_spec)
}

/// A running pod as `kubectl get pod -o json` prints one made by a Deployment: `spec` (node name, spread) is
/// completed with the fields the API server and kubelet fill in (service-account volume and mount, default
/// tolerations, probes, env, container statuses, conditions, ...), so the snapshot loader is measured on
/// objects of a real pod's size (about 3 KB of JSON), not on the few fields decisions read.
/// `requests` is (CPU in millicores, memory in bytes).
pub(super) fn kubectl_pod(name: &str, n: usize, app: &str, mut spec: Value, requests: (i64, i64)) -> Value {
    let (cpu, mem) = requests;
    let requests = json!({"cpu": format!("{cpu}m"), "memory": format!("{}Mi", mem / MIB)});
    let replica_set = format!("{app}-5d8f7b9c4");
    let container_id = format!("containerd://{n:064x}");
    let fields = json!({
        "containers": [{
            "name": "app",
            "image": "registry.k8s.io/pause:3.9",
            "imagePullPolicy": "IfNotPresent",
            "env": [
                {"name": "APP", "value": app},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                {"name": "LOG_LEVEL", "value": "info"},
            ],
            "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
            "readinessProbe": {
                "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                "failureThreshold": 3, "periodSeconds": 10, "successThreshold": 1, "timeoutSeconds": 1,
            },
            "resources": {"requests": requests},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "volumeMounts": [{
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "name": "kube-api-access-x7k2p", "readOnly": true,
            }],
        }],
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": true,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [
            {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
            {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300},
        ],
        "volumes": [{
            "name": "kube-api-access-x7k2p",
            "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
                {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}]}},
            ]},
        }],
    });
    if let (Some(spec), Value::Object(fields)) = (spec.as_object_mut(), fields) {
        spec.extend(fields);
    }
    let condition = |kind: &str| json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": CREATED});
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "generateName": format!("{replica_set}-"),
            "namespace": "default",
            "uid": format!("00000000-0000-4000-8000-{n:012x}"),
            "resourceVersion": (1000 + n).to_string(),
            "labels": {"app": app, "pod-template-hash": "5d8f7b9c4"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": replica_set,
                "uid": "11111111-0000-4000-8000-000000000000", "controller": true, "blockOwnerDeletion": true,
            }],
            "creationTimestamp": CREATED,
        },
        "spec": spec,
        "status": {
            "phase": "Running",
            "conditions": [
                condition("PodReadyToStartContainers"), condition("Initialized"), condition("Ready"),
                condition("ContainersReady"), condition("PodScheduled"),
            ],
            "containerStatuses": [{
                "containerID": container_id,
                "image": "registry.k8s.io/pause:3.9",
                "imageID": "registry.k8s.io/pause@sha256:7031c1b283388d2c2e09b57badb803c05ebed362dc88d84b480cc47f72a21097",
                "lastState": {}, "name": "app", "ready": true, "restartCount": 0, "started": true,
                "state": {"running": {"startedAt": CREATED}},
            }],
            "hostIP": "10.0.12.34",
            "hostIPs": [{"ip": "10.0.12.34"}],
            "podIP": format!("10.1.{}.{}", (n / 250) % 250, n % 250),
            "podIPs": [{"ip": format!("10.1.{}.{}", (n / 250) % 250, n % 250)}],
            "qosClass": "Burstable",
            "startTime": CREATED,
        },
    })
}

/// Generates the cluster of `spec` on `catalog` (the embedded AWS us-east-1 catalog), handing each document to
/// `each` as it is made (a 20,000-node cluster held whole as JSON values is tens of GiB); returns the number of
/// pods. The same spec gives the same documents every time.
pub fn cluster(
    spec: &ClusterSpec,
    catalog: &CatalogFile,
    mut each: impl FnMut(Value) -> Result<()>,
) -> Result<usize> {
    let shapes = INSTANCE_TYPES
        .iter()
        .map(|name| shape(catalog, name))
        .collect::<Result<Vec<_>>>()?;
    let mut rng = SplitMix64::new(SEED);
    for p in 0..spec.pools {
        each(nodepool(&format!("np-{p}"), spec.full_coverage))?;
    }
    let full = shape(catalog, FULL_COVERAGE_TYPE)?;
    let mut pods = 0;
    for i in 0..spec.nodes {
        let drawn = rng.pick(&shapes);
        let shape = if spec.full_coverage { &full } else { drawn };
        let zone = *rng.pick(&ZONES);
        let pool = format!("np-{}", i % spec.pools.max(1));
        let node_name = format!("node-{i:05}");
        let claim_name = format!("{pool}-{i:05}");
        let provider_id = format!("aws:///{zone}/i-{i:017x}");

        let mut labels = shape.labels.clone();
        labels.insert(ZONE.into(), zone.into());
        labels.insert(CAPACITY_TYPE.into(), "on-demand".into());
        labels.insert(NODEPOOL.into(), pool.clone());
        let claim_labels = labels.clone();
        labels.insert(HOSTNAME.into(), node_name.clone());
        labels.insert("karpenter.sh/registered".into(), "true".into());
        labels.insert("karpenter.sh/initialized".into(), "true".into());

        each(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node_name, "labels": labels, "creationTimestamp": CREATED},
            "spec": {"providerID": provider_id},
            "status": {
                "capacity": shape.capacity,
                "allocatable": shape.allocatable,
                "conditions": [{
                    "type": "Ready", "status": "True", "reason": "KubeletReady",
                    "lastHeartbeatTime": NOW, "lastTransitionTime": CREATED,
                }],
            },
        }))?;
        each(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": claim_name, "labels": claim_labels, "creationTimestamp": CREATED},
            "spec": {
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [shape.name]},
                ],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            },
            "status": {
                "nodeName": node_name,
                "providerID": provider_id,
                "capacity": shape.capacity,
                "allocatable": shape.allocatable,
                "conditions": [condition("Launched"), condition("Registered"), condition("Initialized")],
            },
        }))?;

        let count = match spec.pods_per_node {
            PodsPerNode::Uniform(lo, hi) => lo + rng.below(hi - lo + 1),
            PodsPerNode::Fixed(n) => n,
        }
        .min(shape.max_pods);
        if spec.full_coverage {
            // Fill the node: pods of a fixed shape until the CPU is used up, so nothing fits elsewhere (with a
            // fixed count per node, that many pods sharing the CPU).
            let cpu = match spec.pods_per_node {
                PodsPerNode::Fixed(n) if n > 0 => shape.cpu_milli / i64::try_from(n).unwrap_or(i64::MAX),
                _ => CPU_MILLI[1],
            };
            let mem = MEMORY_MIB[0] * MIB;
            let fitting = usize::try_from(shape.cpu_milli / cpu)
                .unwrap_or(0)
                .min(shape.max_pods);
            for j in 0..fitting {
                let (app, pod_spec) = spread_pod(spec.spread, j, &format!("app-{}", j % APPS), &node_name);
                let name = format!("pod-{i:05}-{j:02}");
                each(kubectl_pod(&name, pods, &app, pod_spec, (cpu, mem)))?;
                pods += 1;
            }
            continue;
        }
        let (min_cpu, min_mem) = (CPU_MILLI[0], MEMORY_MIB[0] * MIB);
        let (mut cpu_left, mut mem_left) = (shape.cpu_milli, shape.memory_bytes);
        for j in 0..count {
            let mut cpu = *rng.pick(&CPU_MILLI);
            let mut mem = rng.pick(&MEMORY_MIB) * MIB;
            let rest = (count - j - 1) as i64;
            if cpu + rest * min_cpu > cpu_left || mem + rest * min_mem > mem_left {
                (cpu, mem) = (min_cpu, min_mem);
            }
            if cpu > cpu_left || mem > mem_left {
                break;
            }
            cpu_left -= cpu;
            mem_left -= mem;
            // Drawn for every pod, so clusters differing only in spread have the same nodes and pods.
            let plain_app = format!("app-{}", rng.below(APPS));
            let (app, pod_spec) = spread_pod(spec.spread, j, &plain_app, &node_name);
            let name = format!("pod-{i:05}-{j:02}");
            each(kubectl_pod(&name, pods, &app, pod_spec, (cpu, mem)))?;
            pods += 1;
        }
    }
    Ok(pods)
}
