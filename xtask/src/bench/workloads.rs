//! The benchmark workloads as Kubernetes objects (JSON documents, as `kubectl get -o json` would print them),
//! so they go through the same snapshot loader the CLI uses.
//!
//! Randomness: every workload starts its own [`SplitMix64`] from [`SEED`] (42, upstream's seed; upstream's Go
//! `math/rand` stream cannot be reproduced, so the pods differ from upstream's but have the same
//! distributions and are the same on every run here). `bench schedule --upstream` runs on upstream's own draws
//! instead, written out by upstream's module (see `upstream.rs`).

use karpenter_api::manifest::DecodeError;
use karpenter_core::{catalog::CatalogFile, scheduling::PreferencePolicy};
use serde_json::{Map, Value, json};

use super::catalogs::{GIB, KWOK_SIZE_LABEL, MIB};

/// The published seed of every benchmark workload.
pub const SEED: u64 = 42;

/// SplitMix64 (Steele, Lea and Flood 2014): tiny, fast and well distributed; enough for drawing pod shapes.
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform index below `n` (Lemire's multiply-shift; the bias is below 2^-58 for the small `n` used
    /// here).
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// A pod's requests, kept numerically for the lower bounds.
#[derive(Debug, Clone, Copy)]
pub struct Requests {
    pub cpu_milli: i64,
    pub memory_bytes: i64,
}

/// One benchmark workload: the catalog, one NodePool and the pending pods.
pub struct Workload {
    pub name: String,
    pub catalog: CatalogFile,
    /// Only the catalog's instance types the NodePool allows count for the bounds.
    pub allowed: fn(&karpenter_core::catalog::CatalogInstanceType) -> bool,
    /// Only offerings of this capacity type count for the bounds (None: any).
    pub capacity_type: Option<&'static str>,
    pub nodepool: Value,
    pub pods: Vec<Value>,
    pub requests: Vec<Requests>,
    /// Nodes the workload's hard constraints force (pairwise hostname anti-affinity, hostname spread).
    pub forced_nodes: usize,
    /// When every allowed offering costs exactly `cpu·a + GiB·b`, the (a, b) for the additive LP bound.
    pub linear_price: Option<(f64, f64)>,
    pub preference_policy: PreferencePolicy,
}

impl Workload {
    /// The NodePool and the pods, for `Snapshot::add_documents`; the pods move out, so their JSON is freed
    /// once the snapshot is built.
    pub fn take_documents(&mut self) -> Vec<Result<Value, DecodeError>> {
        std::iter::once(self.nodepool.clone())
            .chain(std::mem::take(&mut self.pods))
            .map(Ok)
            .collect()
    }
}

/// Builds pods one at a time with names `{prefix}-{i}` in namespace `default`.
struct PodFactory {
    prefix: String,
    next: usize,
    pods: Vec<Value>,
    requests: Vec<Requests>,
}

impl PodFactory {
    fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_string(),
            next: 0,
            pods: Vec::new(),
            requests: Vec::new(),
        }
    }

    /// A pending pod with one container requesting `requests`, these labels, and `spec` merged into its spec.
    fn push(&mut self, requests: Requests, labels: Value, spec: Map<String, Value>) {
        let i = self.next;
        self.next += 1;
        let mut pod_spec = Map::new();
        pod_spec.insert(
            "containers".into(),
            json!([{
                "name": "app",
                "image": "registry.k8s.io/pause:3.9",
                "resources": {"requests": {
                    "cpu": format!("{}m", requests.cpu_milli),
                    "memory": quantity_bytes(requests.memory_bytes),
                }},
            }]),
        );
        pod_spec.extend(spec);
        self.pods.push(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": format!("{}-{i:05}", self.prefix),
                "namespace": "default",
                "uid": format!("00000000-0000-4000-8000-{i:012x}"),
                "labels": labels,
            },
            "spec": pod_spec,
            "status": {"phase": "Pending"},
        }));
        self.requests.push(requests);
    }
}

/// Bytes as a Kubernetes quantity, in Mi when whole.
fn quantity_bytes(bytes: i64) -> String {
    if bytes % MIB == 0 {
        format!("{}Mi", bytes / MIB)
    } else {
        bytes.to_string()
    }
}

fn spec(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

const LABEL_VALUES: [&str; 7] = ["a", "b", "c", "d", "e", "f", "g"];
const CPU_MILLI: [i64; 5] = [100, 250, 500, 1000, 1500];
const MEMORY_MIB: [i64; 6] = [100, 256, 512, 1024, 2048, 4096];
const ZONE: &str = "topology.kubernetes.io/zone";
const HOSTNAME: &str = "kubernetes.io/hostname";

fn random_requests(rng: &mut SplitMix64) -> Requests {
    Requests {
        cpu_milli: *rng.pick(&CPU_MILLI),
        memory_bytes: rng.pick(&MEMORY_MIB) * MIB,
    }
}

/// One NodePool with no requirements and (effectively) unlimited limits, as upstream's `test.NodePool` with
/// the benchmark's limits. Upstream uses 10,000,000Gi of memory; that does not fit our exact milli-byte
/// integers, so memory is 8,000,000Gi, still above twice what even pessimistic limit charging reaches at
/// 20,000 pods (4000 NodeClaims x 800Gi).
pub(super) fn fake_nodepool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {"spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.test.sh", "kind": "TestNodeClass", "name": "default"},
            }},
            "limits": {"cpu": "10000000", "memory": "8000000Gi"},
        },
    })
}

fn fake_workload(
    name: String,
    catalog: &CatalogFile,
    f: PodFactory,
    forced: usize,
    p: PreferencePolicy,
) -> Workload {
    Workload {
        name,
        catalog: catalog.clone(),
        allowed: |_| true,
        capacity_type: None,
        nodepool: fake_nodepool(),
        pods: f.pods,
        requests: f.requests,
        forced_nodes: forced,
        linear_price: None,
        preference_policy: p,
    }
}

/// Upstream's `makeDiversePods(n)` as benchmarks.md §1.1 describes it: five classes of n/5 pods (generic,
/// zone spread, hostname spread, zone self-affinity, hostname anti-affinity), the remainder generic; CPU
/// uniform over {100, 250, 500, 1000, 1500}m and memory over {100, 256, 512, 1024, 2048, 4096}Mi.
pub fn diverse(n: usize, catalog: &CatalogFile) -> Workload {
    let mut rng = SplitMix64::new(SEED);
    let mut f = PodFactory::new("diverse");
    let per_class = n / 5;
    let generic = |rng: &mut SplitMix64, f: &mut PodFactory, count: usize| {
        for _ in 0..count {
            let labels = json!({"my-label": rng.pick(&LABEL_VALUES)});
            f.push(random_requests(rng), labels, Map::new());
        }
    };
    generic(&mut rng, &mut f, per_class);
    for key in [ZONE, HOSTNAME] {
        for _ in 0..per_class {
            // The selector is drawn separately from the pod's own label, so many pods do not select
            // themselves.
            let labels = json!({"my-label": rng.pick(&LABEL_VALUES)});
            let selector = json!({"my-label": rng.pick(&LABEL_VALUES)});
            let s = spec(json!({"topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": selector},
            }]}));
            f.push(random_requests(&mut rng), labels, s);
        }
    }
    for _ in 0..per_class {
        // Zone self-affinity: each of the 7 groups must share one zone. The label key is misspelt upstream.
        let labels = json!({"my-affininity": rng.pick(&LABEL_VALUES)});
        let s = spec(
            json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": labels}, "topologyKey": ZONE,
            }]}}}),
        );
        f.push(random_requests(&mut rng), labels, s);
    }
    for _ in 0..per_class {
        // Pairwise hostname anti-affinity: each pod needs its own node.
        let labels = json!({"app": "nginx"});
        let s = spec(
            json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": labels}, "topologyKey": HOSTNAME,
            }]}}}),
        );
        f.push(random_requests(&mut rng), labels, s);
    }
    let remaining = n - f.pods.len();
    generic(&mut rng, &mut f, remaining);
    fake_workload(
        format!("diverse-{n}"),
        catalog,
        f,
        per_class,
        PreferencePolicy::Respect,
    )
}

/// Upstream's `makePreferencePods(n)`: one shared CPU/memory draw, `app=nginx`, preferred node affinity for
/// test-zone-1, preferred anti-affinity to app=nginx with weight 10 on zone and weight 1 on hostname.
pub fn preferences(n: usize, policy: PreferencePolicy, catalog: &CatalogFile) -> Workload {
    let mut rng = SplitMix64::new(SEED);
    let requests = random_requests(&mut rng);
    let mut f = PodFactory::new("preference");
    let labels = json!({"app": "nginx"});
    let s = spec(json!({"affinity": {
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 1,
            "preference": {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["test-zone-1"]}]},
        }]},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10,
             "podAffinityTerm": {"labelSelector": {"matchLabels": labels}, "topologyKey": ZONE}},
            {"weight": 1,
             "podAffinityTerm": {"labelSelector": {"matchLabels": labels}, "topologyKey": HOSTNAME}},
        ]},
    }}));
    for _ in 0..n {
        f.push(requests, labels.clone(), s.clone());
    }
    let name = match policy {
        PreferencePolicy::Respect => format!("preferences-respect-{n}"),
        PreferencePolicy::Ignore => format!("preferences-ignore-{n}"),
    };
    fake_workload(name, catalog, f, 0, policy)
}

/// The KWOK e2e NodePool: linux, on-demand, instance-size < 32 (30 types), no limits.
fn kwok_nodepool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "requirements": [
                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": KWOK_SIZE_LABEL, "operator": "Lt", "values": ["32"]},
            ],
            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
        }}},
    })
}

/// The types the KWOK NodePool allows (for the bounds): linux, fewer than 32 vCPUs.
fn kwok_allowed(it: &karpenter_core::catalog::CatalogInstanceType) -> bool {
    it.name.ends_with("-linux") && it.capacity.get("cpu").is_some_and(|&c| c < 32_000)
}

fn kwok_workload(name: &str, catalog: &CatalogFile, f: PodFactory, forced: usize) -> Workload {
    Workload {
        name: name.to_string(),
        catalog: catalog.clone(),
        allowed: kwok_allowed,
        capacity_type: Some("on-demand"),
        nodepool: kwok_nodepool(),
        pods: f.pods,
        requests: f.requests,
        forced_nodes: forced,
        linear_price: Some((
            super::catalogs::KWOK_PRICE_PER_VCPU,
            super::catalogs::KWOK_PRICE_PER_GB * GIB as f64 / 1e9,
        )),
        preference_policy: PreferencePolicy::Respect,
    }
}

/// Pods of a deployment `app` (labels `app=<name>` plus `extra`), with `spec` merged into each.
fn deployment(
    f: &mut PodFactory,
    app: &str,
    replicas: usize,
    requests: Requests,
    extra: &[(&str, &str)],
    s: &Value,
) {
    let mut labels = Map::new();
    labels.insert("app".into(), json!(app));
    for (k, v) in extra {
        labels.insert((*k).into(), json!(v));
    }
    for _ in 0..replicas {
        f.push(requests, Value::Object(labels.clone()), spec(s.clone()));
    }
}

fn hostname_spread(app: &str) -> Value {
    json!({"maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule",
           "labelSelector": {"matchLabels": {"app": app}}})
}

const KWOK_SMALL: Requests = Requests {
    cpu_milli: 900,
    memory_bytes: 3100 * MIB,
};
const KWOK_LARGE: Requests = Requests {
    cpu_milli: 3500,
    memory_bytes: 28 * GIB,
};

/// `basic_test.go`: 500 x (900m, 3100Mi) + 500 x (3500m, 28Gi).
pub fn kwok_basic(catalog: &CatalogFile) -> Workload {
    let mut f = PodFactory::new("basic");
    deployment(&mut f, "small-resource-app", 500, KWOK_SMALL, &[], &json!({}));
    deployment(&mut f, "large-resource-app", 500, KWOK_LARGE, &[], &json!({}));
    kwok_workload("kwok-basic", catalog, f, 0)
}

/// `host_name_spreading_test.go`: the small deployment spreads over hostnames (maxSkew 1), the large does
/// not. Karpenter puts at most one spread pod on each new node, so 500 nodes are forced.
pub fn kwok_hostname_spread(catalog: &CatalogFile) -> Workload {
    let mut f = PodFactory::new("hostname-spread");
    let small = "small-resource-app";
    deployment(
        &mut f,
        small,
        500,
        KWOK_SMALL,
        &[],
        &json!({"topologySpreadConstraints": [hostname_spread(small)]}),
    );
    deployment(&mut f, "large-resource-app", 500, KWOK_LARGE, &[], &json!({}));
    kwok_workload("kwok-hostname-spread", catalog, f, 500)
}

/// `wide_deployments_test.go`: 30 deployments, 1000 pods, fixed CPU and memory per deployment, all with a
/// zone spread (maxSkew 1); deployments 1-3 also have hostname anti-affinity, 4-6 a hostname spread.
pub fn kwok_wide(catalog: &CatalogFile) -> Workload {
    const CPU: [i64; 30] = [
        240, 450, 650, 900, 1400, 1900, 2400, 2800, 3300, 3700, 2300, 900, 1300, 2800, 1800, 1850, 3300,
        3800, 225, 450, 700, 900, 1300, 1800, 2400, 2800, 3400, 3800, 3300, 2800,
    ];
    const MEMORY_MIB: [i64; 30] = [
        300, 400, 700, 1024, 2048, 4096, 8192, 4096, 16384, 10240, 65536, 30720, 32768, 32768, 30720, 20480,
        30720, 300, 500, 750, 1024, 2048, 4096, 8192, 16384, 32768, 28672, 65536, 13312, 24576,
    ];
    let mut f = PodFactory::new("wide");
    let mut forced = 0;
    for i in 0..30 {
        let app = format!("wide-deployment-{}", i + 1);
        let replicas = if i < 20 { 35 } else { 30 };
        let index = (i + 1).to_string();
        let mut constraints = vec![
            json!({"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                                          "labelSelector": {"matchLabels": {"app": app}}}),
        ];
        let mut extra = vec![("deployment-index", index.as_str())];
        let mut s = Map::new();
        if (3..6).contains(&i) {
            constraints.push(hostname_spread(&app));
            extra.push(("has-hostname-spread", "true"));
            forced = forced.max(replicas);
        }
        s.insert("topologySpreadConstraints".into(), Value::Array(constraints));
        if i < 3 {
            s.insert(
                "affinity".into(),
                json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchLabels": {"app": app}}, "topologyKey": HOSTNAME,
                }]}}),
            );
            extra.push(("has-anti-affinity", "true"));
            forced = forced.max(replicas);
        }
        let requests = Requests {
            cpu_milli: CPU[i],
            memory_bytes: MEMORY_MIB[i] * MIB,
        };
        deployment(&mut f, &app, replicas, requests, &extra, &Value::Object(s));
    }
    kwok_workload("kwok-wide", catalog, f, forced)
}
