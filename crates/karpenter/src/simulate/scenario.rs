//! The built-in scenario: a worker-heavy cluster. A queue consumer on a spot NodePool is scaled from 0 to 400
//! replicas beside a small on-demand NodePool for add-ons, under a PDB of maxUnavailable 25%; three spot
//! instances are interrupted during the peak; then the consumer scales back to zero and the cluster is left
//! to consolidate. One simulated hour on the embedded AWS us-east-1 catalog.

use std::time::Duration;

use serde_json::{Value, json};

/// Something that happens at a moment of the scenario.
#[derive(Debug, Clone)]
pub enum Action {
    /// Create objects (NodePools, Deployments, PDBs) through the API.
    Apply(Vec<Value>),
    /// Set a Deployment's replicas.
    Scale { deployment: &'static str, replicas: i32 },
    /// Interrupt this many running spot instances (the oldest first).
    InterruptSpot(usize),
}

/// A scenario: actions at offsets from its start, and how long it runs.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: &'static str,
    pub duration: Duration,
    pub timeline: Vec<(Duration, Action)>,
}

fn nodepool(name: &str, capacity_type: &str, limits_cpu: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
        "spec": {
            "limits": {"cpu": limits_cpu},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "60s",
                "budgets": [{"nodes": "20%"}]},
            "template": {
                "metadata": {"labels": {"pool": name}},
                "spec": {
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity_type]},
                        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]},
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "expireAfter": "720h"
                }
            }
        }
    })
}

fn deployment(name: &str, replicas: i32, pool: &str, cpu: &str, memory: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"nodeSelector": {"pool": pool},
                    "containers": [{"name": "app", "image": "sim",
                        "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}}
    })
}

/// The default scenario (see the module documentation).
pub fn worker_heavy() -> Scenario {
    let minutes = |m: u64| Duration::from_secs(m * 60);
    Scenario {
        name: "worker-heavy",
        duration: minutes(60),
        timeline: vec![
            (
                Duration::ZERO,
                Action::Apply(vec![
                    nodepool("spot", "spot", "2000"),
                    nodepool("on-demand", "on-demand", "64"),
                    deployment("addons", 6, "on-demand", "250m", "256Mi"),
                    deployment("queue-consumer", 0, "spot", "1", "2Gi"),
                    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                        "metadata": {"name": "queue-consumer", "namespace": "default"},
                        "spec": {"maxUnavailable": "25%", "selector": {"matchLabels": {"app": "queue-consumer"}}}}),
                ]),
            ),
            (
                minutes(2),
                Action::Scale {
                    deployment: "queue-consumer",
                    replicas: 400,
                },
            ),
            (minutes(15), Action::InterruptSpot(3)),
            (
                minutes(30),
                Action::Scale {
                    deployment: "queue-consumer",
                    replicas: 0,
                },
            ),
        ],
    }
}
