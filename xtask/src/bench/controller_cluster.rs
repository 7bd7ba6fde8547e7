//! The clusters of `bench controller`, written straight into a karpenter-sim [`ApiServer`] through its
//! in-process `*_internal` accessors (the same write path as HTTP requests: resourceVersions, watch history,
//! owner references), since creating 150,000 pods over HTTP would take minutes.
//!
//! [`steady`]: a cluster as `karpenter controller --cloud-provider kwok` would have left it after launching
//! `nodes` nodes and seeing `pods_per_node` pods bound to each, drawn from [`SplitMix64`] seeded with [`SEED`]:
//! - one NodePool `default` (instance family m5, amd64, linux, on-demand; WhenEmptyOrUnderutilized after 30s,
//!   a 10% node budget) whose hash the NodeClaims carry, so nothing is drifted;
//! - per node, the type (m5.xlarge two times in three, else m5.2xlarge) and the zone (us-east-1a/b/c); a
//!   NodeClaim `default-xxxxx` (Launched, Registered, Initialized, Ready and Consolidatable True an hour ago,
//!   the termination finalizer, owned by the NodePool) and its Node `i-<17 hex>` (providerID
//!   `sim:///<zone>/i-...`, the kwok, nodeclaim, nodepool, registered and initialized labels, the catalog's
//!   instance labels, capacity and allocatable from the embedded AWS us-east-1 catalog, Ready, owned by the
//!   claim, with the termination finalizer the controller gives every Node it registers);
//! - two DaemonSets in kube-system (kube-proxy 100m/128Mi, node-exporter 50m/64Mi) with one pod on every node;
//! - 50 Deployments (25 for each node type) over 5 namespaces `team-0..4`, each with its ReplicaSet and a
//!   PodDisruptionBudget (maxUnavailable 10% or minAvailable 80%); the other `pods_per_node - 2` pods of a node
//!   come round-robin from the Deployments of its type, Running, with the fields a real pod has (see
//!   `disrupt_workloads::kubectl_pod`). A Deployment's pods all request the same CPU, sized so a node's pods
//!   use its whole allocatable CPU: no node can be emptied or replaced by a cheaper one of its own, so a
//!   disruption pass evaluates every node and usually changes nothing (a steady cluster). Multi-node
//!   consolidation may still, depending on the order of candidates of equal cost, find a group whose pods fit
//!   one larger node once their DaemonSet pods and reserved capacity are no longer counted per node.
//!
//! [`pending`]: NodePools and pods that kube-scheduler has marked `PodScheduled=False`, `Unschedulable`, for
//! the provisioning latency rows.

use std::collections::BTreeMap;

use anyhow::{Context, Result, anyhow, bail};
use jiff::Timestamp;
use karpenter_api::nodepool::{NODEPOOL_HASH_VERSION, NodePool};
use karpenter_core::catalog::{CatalogFile, RequirementOperator};
use karpenter_sim::{ApiServer, apiserver::ResourceId};
use serde_json::{Map, Value, json};

use super::{
    catalogs::MIB,
    disrupt_workloads::kubectl_pod,
    workloads::{SEED, SplitMix64},
};

const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
/// Node types: the first two times in three.
const TYPES: [&str; 2] = ["m5.xlarge", "m5.2xlarge"];
const NAMESPACES: usize = 5;
const DEPLOYMENTS_PER_TYPE: usize = 25;
const SERVICES: [&str; 10] = [
    "api", "web", "worker", "checkout", "search", "auth", "billing", "catalog", "orders", "notify",
];
/// (name, CPU millicores, memory MiB) of the DaemonSets, each with a pod on every node.
const DAEMONSETS: [(&str, i64, i64); 2] = [("kube-proxy", 100, 128), ("node-exporter", 50, 64)];
/// Memory requests of a Deployment's pods on an m5.xlarge (twice these on an m5.2xlarge), capped to fit.
const MEMORY_MIB: [i64; 3] = [256, 384, 512];
const NODEPOOL: &str = "default";
const TEMPLATE_HASH: &str = "7c9d6f5b8d";
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
const ZONE: &str = "topology.kubernetes.io/zone";
const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";
const HOSTNAME: &str = "kubernetes.io/hostname";

fn pods_id() -> ResourceId {
    ResourceId::core("pods")
}

fn claims_id() -> ResourceId {
    ResourceId::new("karpenter.sh", "nodeclaims")
}

/// What was written.
#[derive(Debug, Clone, Copy, Default)]
pub struct Written {
    pub nodes: usize,
    pub pods: usize,
    pub objects: usize,
}

/// A five-character name suffix, as the API server's generateName makes (distinct for `n` below 27^5).
fn suffix(mut n: usize) -> String {
    let mut out = String::with_capacity(5);
    for _ in 0..5 {
        out.push(char::from(SUFFIX_ALPHABET[n % SUFFIX_ALPHABET.len()]));
        n /= SUFFIX_ALPHABET.len();
    }
    out
}

/// A milli-unit amount as a Kubernetes quantity (whole units when exact; CPU always in millicores).
fn quantity(resource: &str, milli: i64) -> Value {
    if resource != "cpu" && milli % 1000 == 0 {
        json!((milli / 1000).to_string())
    } else {
        json!(format!("{milli}m"))
    }
}

fn uid_of(object: &Value) -> String {
    object["metadata"]["uid"].as_str().unwrap_or_default().to_string()
}

fn owner(api_version: &str, kind: &str, object: &Value, controller: bool) -> Value {
    json!({
        "apiVersion": api_version, "kind": kind,
        "name": object["metadata"]["name"], "uid": uid_of(object),
        "controller": controller, "blockOwnerDeletion": true,
    })
}

/// Creates `object`, then writes the status it was given (a create drops the status of most kinds, as
/// kube-apiserver does).
fn create(api: &ApiServer, id: &ResourceId, mut object: Value, written: &mut Written) -> Result<Value> {
    let status = object.as_object_mut().and_then(|o| o.remove("status"));
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut stored = api
        .create_internal(id, object)
        .map_err(|e| anyhow!("creating {} {namespace}/{name}: {e}", id.resource))?;
    if let Some(status) = status {
        stored = api
            .update_status_internal(id, &namespace, &name, status)
            .map_err(|e| anyhow!("writing the status of {} {namespace}/{name}: {e}", id.resource))?;
    }
    written.objects += 1;
    Ok((*stored).clone())
}

/// What a node of one instance type looks like.
struct Shape {
    name: &'static str,
    labels: BTreeMap<String, String>,
    capacity: Map<String, Value>,
    allocatable: Map<String, Value>,
    cpu_milli: i64,
    memory_mib: i64,
}

fn shape(catalog: &CatalogFile, name: &'static str) -> Result<Shape> {
    let it = catalog
        .instance_types
        .iter()
        .find(|t| t.name == name)
        .with_context(|| format!("instance type {name} is not in the catalog"))?;
    let overhead = it.overhead.total();
    let (mut capacity, mut allocatable, mut left) = (Map::new(), Map::new(), BTreeMap::new());
    for (resource, &amount) in &it.capacity {
        let rest = amount - overhead.get(resource).copied().unwrap_or(0);
        capacity.insert(resource.clone(), quantity(resource, amount));
        allocatable.insert(resource.clone(), quantity(resource, rest));
        left.insert(resource.as_str(), rest);
    }
    let labels = it
        .requirements
        .iter()
        .filter(|r| r.operator == RequirementOperator::In && r.values.len() == 1 && r.key != ZONE)
        .map(|r| (r.key.clone(), r.values[0].clone()))
        .collect();
    let (Some(&cpu_milli), Some(&memory_milli)) = (left.get("cpu"), left.get("memory")) else {
        bail!("instance type {name} lacks cpu or memory capacity");
    };
    Ok(Shape {
        name,
        labels,
        capacity,
        allocatable,
        cpu_milli,
        memory_mib: memory_milli / 1000 / MIB,
    })
}

fn namespace(api: &ApiServer, name: &str, written: &mut Written) -> Result<()> {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}});
    create(api, &ResourceId::core("namespaces"), ns, written).map(|_| ())
}

/// The steady cluster's NodePool.
fn steady_nodepool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": NODEPOOL},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "platform"}},
                "spec": {
                    "requirements": [
                        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]},
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                        {"key": CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "expireAfter": "720h",
                },
            },
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "30s",
                "budgets": [{"nodes": "10%"}],
            },
            "limits": {"cpu": "100000", "memory": "400000Gi"},
        },
    })
}

/// One Deployment of the steady cluster.
struct Deployment {
    name: String,
    namespace: String,
    type_index: usize,
    cpu_milli: i64,
    memory_mib: i64,
    replicas: usize,
    /// The ReplicaSet's owner reference for its pods (filled once created).
    owner: Value,
    /// Pods created so far (their names' suffixes).
    created: usize,
}

impl Deployment {
    fn replica_set(&self) -> String {
        format!("{}-{TEMPLATE_HASH}", self.name)
    }

    fn labels(&self) -> Value {
        json!({
            "app.kubernetes.io/name": self.name,
            "app.kubernetes.io/part-of": self.namespace,
            "app": self.name,
            "tier": if self.type_index == 0 { "frontend" } else { "backend" },
        })
    }

    fn container(&self) -> Value {
        json!([{
            "name": "app", "image": format!("registry.example.com/{}:1.4.2", self.name),
            "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
            "resources": {"requests": {"cpu": format!("{}m", self.cpu_milli), "memory": format!("{}Mi", self.memory_mib)}},
        }])
    }
}

fn create_workloads(api: &ApiServer, deployments: &mut [Deployment], written: &mut Written) -> Result<()> {
    for d in deployments.iter_mut() {
        let labels = d.labels();
        let replicas = d.replicas;
        let deployment = create(
            api,
            &ResourceId::new("apps", "deployments"),
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": d.name, "namespace": d.namespace, "labels": labels,
                             "annotations": {"deployment.kubernetes.io/revision": "1"}},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": d.name}},
                    "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                    "template": {"metadata": {"labels": labels}, "spec": {"containers": d.container()}},
                },
                "status": {"observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas,
                           "readyReplicas": replicas, "availableReplicas": replicas},
            }),
            written,
        )?;
        let mut rs_labels = labels.clone();
        rs_labels["pod-template-hash"] = json!(TEMPLATE_HASH);
        let replica_set = create(
            api,
            &ResourceId::new("apps", "replicasets"),
            json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": d.replica_set(), "namespace": d.namespace, "labels": rs_labels,
                             "ownerReferences": [owner("apps/v1", "Deployment", &deployment, true)]},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": d.name, "pod-template-hash": TEMPLATE_HASH}},
                    "template": {"metadata": {"labels": rs_labels}, "spec": {"containers": d.container()}},
                },
                "status": {"observedGeneration": 1, "replicas": replicas, "fullyLabeledReplicas": replicas,
                           "readyReplicas": replicas, "availableReplicas": replicas},
            }),
            written,
        )?;
        d.owner = owner("apps/v1", "ReplicaSet", &replica_set, true);
        // Every other Deployment by percentage of unavailable pods, the rest by percentage available.
        let (spec_budget, desired) = if d.type_index == 0 {
            (json!({"maxUnavailable": "10%"}), replicas - replicas.div_ceil(10))
        } else {
            (json!({"minAvailable": "80%"}), (replicas * 8).div_ceil(10))
        };
        let mut spec = json!({"selector": {"matchLabels": {"app": d.name}}});
        if let (Some(spec), Value::Object(budget)) = (spec.as_object_mut(), spec_budget) {
            spec.extend(budget);
        }
        create(
            api,
            &ResourceId::new("policy", "poddisruptionbudgets"),
            json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": d.name, "namespace": d.namespace},
                "spec": spec,
                "status": {
                    "observedGeneration": 1, "expectedPods": replicas, "currentHealthy": replicas,
                    "desiredHealthy": desired, "disruptionsAllowed": replicas - desired,
                    "conditions": [{"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods",
                                    "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}],
                },
            }),
            written,
        )?;
    }
    Ok(())
}

fn create_daemonsets(api: &ApiServer, nodes: usize, written: &mut Written) -> Result<Vec<Value>> {
    DAEMONSETS
        .iter()
        .map(|(name, cpu, mem)| {
            let ds = create(
                api,
                &ResourceId::new("apps", "daemonsets"),
                json!({
                    "apiVersion": "apps/v1", "kind": "DaemonSet",
                    "metadata": {"name": name, "namespace": "kube-system", "labels": {"k8s-app": name}},
                    "spec": {
                        "selector": {"matchLabels": {"k8s-app": name}},
                        "template": {
                            "metadata": {"labels": {"k8s-app": name}},
                            "spec": {
                                "priorityClassName": "system-node-critical",
                                "tolerations": [{"operator": "Exists"}],
                                "containers": [{"name": name, "image": format!("registry.k8s.io/{name}:v1.33.0"),
                                    "resources": {"requests": {"cpu": format!("{cpu}m"), "memory": format!("{mem}Mi")}}}],
                            },
                        },
                        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                    },
                    "status": {"currentNumberScheduled": nodes, "desiredNumberScheduled": nodes,
                               "numberAvailable": nodes, "numberReady": nodes, "updatedNumberScheduled": nodes,
                               "numberMisscheduled": 0, "observedGeneration": 1},
                }),
                written,
            )?;
            Ok(owner("apps/v1", "DaemonSet", &ds, true))
        })
        .collect()
}

/// The condition list of a NodeClaim initialized at `at`.
fn claim_conditions(at: &str) -> Value {
    let c = |kind: &str| json!({"type": kind, "status": "True", "reason": kind, "message": "", "lastTransitionTime": at});
    json!([
        c("Launched"),
        c("Registered"),
        c("Initialized"),
        c("Ready"),
        c("Consolidatable"),
        c("ConsistentStateFound")
    ])
}

/// Writes the steady cluster of `nodes` nodes with `pods_per_node` pods each (two of them DaemonSet pods).
pub fn steady(api: &ApiServer, catalog: &CatalogFile, nodes: usize, pods_per_node: usize) -> Result<Written> {
    let apps_per_node = pods_per_node
        .checked_sub(DAEMONSETS.len())
        .filter(|n| *n > 0)
        .with_context(|| format!("at least {} pods per node", DAEMONSETS.len() + 1))?;
    let shapes = TYPES
        .iter()
        .map(|t| shape(catalog, t))
        .collect::<Result<Vec<_>>>()?;
    let mut written = Written::default();
    let mut rng = SplitMix64::new(SEED);
    // An hour ago, whole seconds: when every node was launched and initialized.
    let launched = Timestamp::from_second(api.now().as_second() - 3600)
        .map_err(|e| anyhow!("{e}"))?
        .to_string();

    // Node types and zones first, so the Deployments' replica counts are known before their pods.
    let drawn: Vec<(usize, &str)> = (0..nodes)
        .map(|_| {
            let t = usize::from(rng.below(3) == 2);
            (t, *rng.pick(&ZONES))
        })
        .collect();
    let (ds_cpu, ds_mem) = DAEMONSETS
        .iter()
        .fold((0, 0), |(c, m), (_, cpu, mem)| (c + cpu, m + mem));
    let mut deployments: Vec<Deployment> = Vec::new();
    for (t, s) in shapes.iter().enumerate() {
        let apps = apps_per_node as i64;
        let cpu_milli = (s.cpu_milli - ds_cpu) / apps;
        let memory_cap = (s.memory_mib - ds_mem) / apps;
        if cpu_milli <= 0 || memory_cap <= 0 {
            bail!("{pods_per_node} pods do not fit an {}", s.name);
        }
        for k in 0..DEPLOYMENTS_PER_TYPE {
            let d = t * DEPLOYMENTS_PER_TYPE + k;
            let memory_mib = (MEMORY_MIB[k % MEMORY_MIB.len()] * (t as i64 + 1)).min(memory_cap);
            deployments.push(Deployment {
                name: format!("{}-{}", SERVICES[d % SERVICES.len()], d / SERVICES.len()),
                namespace: format!("team-{}", d % NAMESPACES),
                type_index: t,
                cpu_milli,
                memory_mib,
                replicas: 0,
                owner: Value::Null,
                created: 0,
            });
        }
    }
    // Pods of a type's Deployments are dealt round-robin over that type's nodes.
    let mut dealt = [0usize; TYPES.len()];
    for &(t, _) in &drawn {
        for _ in 0..apps_per_node {
            deployments[t * DEPLOYMENTS_PER_TYPE + dealt[t] % DEPLOYMENTS_PER_TYPE].replicas += 1;
            dealt[t] += 1;
        }
    }

    for n in 0..NAMESPACES {
        namespace(api, &format!("team-{n}"), &mut written)?;
    }
    let pool_json = steady_nodepool();
    let pool: NodePool = serde_json::from_value(pool_json.clone()).context("the benchmark's NodePool")?;
    let hash = pool.hash();
    let requirements = pool_json["spec"]["template"]["spec"]["requirements"].clone();
    let pool = create(
        api,
        &ResourceId::new("karpenter.sh", "nodepools"),
        pool_json,
        &mut written,
    )?;
    let pool_owner = owner("karpenter.sh/v1", "NodePool", &pool, false);
    let ds_owners = create_daemonsets(api, nodes, &mut written)?;
    create_workloads(api, &mut deployments, &mut written)?;

    let mut dealt = [0usize; TYPES.len()];
    let mut pod_index = 0;
    for (i, &(t, zone)) in drawn.iter().enumerate() {
        let s = &shapes[t];
        let instance = format!("i-{:017x}", rng.next_u64() >> 4);
        let provider_id = format!("sim:///{zone}/{instance}");
        let claim_name = format!("{NODEPOOL}-{}", suffix(i));
        let ip = format!("10.{}.{}.{}", 16 + (i >> 16) % 16, (i >> 8) & 255, i & 255);

        let mut claim_labels = s.labels.clone();
        claim_labels.insert(ZONE.into(), zone.into());
        claim_labels.insert(CAPACITY_TYPE.into(), "on-demand".into());
        claim_labels.insert(NODEPOOL_LABEL.into(), NODEPOOL.into());
        claim_labels.insert("team".into(), "platform".into());
        let annotations = json!({
            "karpenter.sh/nodepool-hash": hash,
            "karpenter.sh/nodepool-hash-version": NODEPOOL_HASH_VERSION,
        });
        let mut claim_requirements = requirements.as_array().cloned().unwrap_or_default();
        claim_requirements.push(json!({"key": NODEPOOL_LABEL, "operator": "In", "values": [NODEPOOL]}));
        claim_requirements.push(json!({"key": INSTANCE_TYPE, "operator": "In", "values": [s.name]}));
        let claim = create(
            api,
            &claims_id(),
            json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {
                    "name": claim_name, "labels": claim_labels, "annotations": annotations,
                    "finalizers": ["karpenter.sh/termination"],
                    "ownerReferences": [pool_owner],
                },
                "spec": {
                    "requirements": claim_requirements,
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "expireAfter": "720h",
                    "resources": {"requests": {"cpu": format!("{}m", s.cpu_milli), "pods": pods_per_node.to_string()}},
                },
                "status": {
                    "providerID": provider_id, "nodeName": instance, "imageID": "ami-0123456789abcdef0",
                    "capacity": s.capacity, "allocatable": s.allocatable,
                    "conditions": claim_conditions(&launched),
                },
            }),
            &mut written,
        )?;

        let mut node_labels = claim_labels.clone();
        node_labels.insert(HOSTNAME.into(), instance.clone());
        node_labels.insert("kubernetes.io/os".into(), "linux".into());
        node_labels.insert("karpenter.sh/kwok".into(), "true".into());
        node_labels.insert("karpenter.sh/nodeclaim".into(), claim_name.clone());
        node_labels.insert("karpenter.sh/registered".into(), "true".into());
        node_labels.insert("karpenter.sh/initialized".into(), "true".into());
        node_labels.insert("beta.kubernetes.io/instance-type".into(), s.name.into());
        node_labels.insert("failure-domain.beta.kubernetes.io/zone".into(), zone.into());
        let condition = |kind: &str, status: &str, reason: &str| {
            json!({"type": kind, "status": status, "reason": reason, "message": "",
                   "lastHeartbeatTime": launched, "lastTransitionTime": launched})
        };
        create(
            api,
            &ResourceId::core("nodes"),
            json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {
                    "name": instance, "labels": node_labels,
                    "annotations": {
                        "kwok.x-k8s.io/node": "fake",
                        "karpenter.sh/nodepool-hash": hash,
                        "karpenter.sh/nodepool-hash-version": NODEPOOL_HASH_VERSION,
                        "node.alpha.kubernetes.io/ttl": "0",
                        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                    },
                    "ownerReferences": [owner("karpenter.sh/v1", "NodeClaim", &claim, false)],
                    "finalizers": ["karpenter.sh/termination"],
                },
                "spec": {"providerID": provider_id},
                "status": {
                    "capacity": s.capacity, "allocatable": s.allocatable,
                    "conditions": [
                        condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                        condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                        condition("PIDPressure", "False", "KubeletHasSufficientPID"),
                        condition("Ready", "True", "KubeletReady"),
                    ],
                    "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": instance}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                    "nodeInfo": {
                        "architecture": "amd64", "bootID": "", "containerRuntimeVersion": "containerd://1.7.27",
                        "kernelVersion": "6.1.132", "kubeProxyVersion": "", "kubeletVersion": "v1.33.0",
                        "machineID": "", "operatingSystem": "linux", "osImage": "Amazon Linux 2023", "systemUUID": "",
                    },
                    "images": [
                        {"names": ["registry.k8s.io/pause:3.9"], "sizeBytes": 321_520},
                        {"names": ["registry.k8s.io/kube-proxy:v1.33.0"], "sizeBytes": 30_474_536},
                    ],
                },
            }),
            &mut written,
        )?;
        written.nodes += 1;

        let node_spec = || json!({"nodeName": instance});
        for (k, (ds, cpu, mem)) in DAEMONSETS.iter().enumerate() {
            let name = format!("{ds}-{}", suffix(i));
            let mut pod = kubectl_pod(&name, pod_index, ds, node_spec(), (*cpu, mem * MIB));
            pod["metadata"]["namespace"] = json!("kube-system");
            pod["metadata"]["generateName"] = json!(format!("{ds}-"));
            pod["metadata"]["labels"] = json!({"k8s-app": ds, "controller-revision-hash": "6b7f8c9d5d", "pod-template-generation": "1"});
            pod["metadata"]["ownerReferences"] = json!([ds_owners[k]]);
            pod["spec"]["priority"] = json!(2_000_001_000);
            pod["spec"]["priorityClassName"] = json!("system-node-critical");
            pod["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
            pod["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [instance]}]}]}}});
            pod["status"]["hostIP"] = json!(ip);
            pod["status"]["hostIPs"] = json!([{"ip": ip}]);
            create(api, &pods_id(), pod, &mut written)?;
            written.pods += 1;
            pod_index += 1;
        }
        for _ in 0..apps_per_node {
            let d = &mut deployments[t * DEPLOYMENTS_PER_TYPE + dealt[t] % DEPLOYMENTS_PER_TYPE];
            dealt[t] += 1;
            let name = format!("{}-{}", d.replica_set(), suffix(d.created));
            d.created += 1;
            let requests = (d.cpu_milli, d.memory_mib * MIB);
            let mut pod = kubectl_pod(&name, pod_index, &d.name, node_spec(), requests);
            let mut labels = d.labels();
            labels["pod-template-hash"] = json!(TEMPLATE_HASH);
            pod["metadata"]["namespace"] = json!(d.namespace);
            pod["metadata"]["generateName"] = json!(format!("{}-", d.replica_set()));
            pod["metadata"]["labels"] = labels;
            pod["metadata"]["ownerReferences"] = json!([d.owner]);
            pod["spec"]["containers"][0]["image"] = json!(format!("registry.example.com/{}:1.4.2", d.name));
            pod["status"]["hostIP"] = json!(ip);
            pod["status"]["hostIPs"] = json!([{"ip": ip}]);
            create(api, &pods_id(), pod, &mut written)?;
            written.pods += 1;
            pod_index += 1;
        }
    }
    Ok(written)
}

/// The provisioning rows' NodePool: the usual general-purpose pool (c, m and r families of generation 5 and
/// later, amd64, linux, spot or on-demand).
fn pending_nodepool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": NODEPOOL},
        "spec": {
            "template": {"spec": {
                "requirements": [
                    {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                    {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                    {"key": CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]},
                ],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "expireAfter": "720h",
            }},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "30s"},
        },
    })
}

/// Writes the provisioning rows' NodePool and `pods` (pending pod objects, any status) as pods kube-scheduler
/// could not place. Returns how many pods were written.
pub fn pending(api: &ApiServer, pods: Vec<Value>) -> Result<Written> {
    let mut written = Written::default();
    create(
        api,
        &ResourceId::new("karpenter.sh", "nodepools"),
        pending_nodepool(),
        &mut written,
    )?;
    let now = Timestamp::from_second(api.now().as_second())
        .map_err(|e| anyhow!("{e}"))?
        .to_string();
    let status = json!({
        "phase": "Pending",
        "qosClass": "Burstable",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                        "message": "0/0 nodes are available: no nodes available to schedule pods.",
                        "lastProbeTime": null, "lastTransitionTime": now}],
    });
    for mut pod in pods {
        if let Some(meta) = pod["metadata"].as_object_mut() {
            meta.remove("uid");
        }
        pod["status"] = status.clone();
        create(api, &pods_id(), pod, &mut written)?;
        written.pods += 1;
    }
    Ok(written)
}

/// `n` pending pods of 40 Deployments (250 replicas each unless `n` says otherwise) over the five team
/// namespaces, without scheduling constraints; each Deployment's requests drawn once, CPU uniform over
/// {100, 250, 500, 1000, 2000}m and memory over {128, 256, 512, 1024, 2048, 4096}Mi.
pub fn deployment_pods(n: usize) -> Vec<Value> {
    const DEPLOYMENTS: usize = 40;
    const CPU: [i64; 5] = [100, 250, 500, 1000, 2000];
    const MEMORY: [i64; 6] = [128, 256, 512, 1024, 2048, 4096];
    let mut rng = SplitMix64::new(SEED);
    let shapes: Vec<(i64, i64)> = (0..DEPLOYMENTS)
        .map(|_| (*rng.pick(&CPU), *rng.pick(&MEMORY)))
        .collect();
    (0..n)
        .map(|i| {
            let d = i % DEPLOYMENTS;
            let (cpu, mem) = shapes[d];
            let app = format!("{}-{}", SERVICES[d % SERVICES.len()], d / SERVICES.len());
            let rs = format!("{app}-{TEMPLATE_HASH}");
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": format!("{rs}-{}", suffix(i / DEPLOYMENTS)),
                    "namespace": format!("team-{}", d % NAMESPACES),
                    "generateName": format!("{rs}-"),
                    "labels": {"app": app, "pod-template-hash": TEMPLATE_HASH},
                },
                "spec": {
                    "containers": [{"name": "app", "image": format!("registry.example.com/{app}:1.4.2"),
                        "resources": {"requests": {"cpu": format!("{cpu}m"), "memory": format!("{mem}Mi")}}}],
                    "tolerations": [
                        {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
                        {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300},
                    ],
                },
            })
        })
        .collect()
}

/// Creates the five team namespaces (for [`deployment_pods`]).
pub fn team_namespaces(api: &ApiServer) -> Result<()> {
    let mut written = Written::default();
    for n in 0..NAMESPACES {
        namespace(api, &format!("team-{n}"), &mut written)?;
    }
    Ok(())
}
