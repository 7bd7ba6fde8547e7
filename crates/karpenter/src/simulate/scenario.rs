//! The built-in scenario: a worker-heavy cluster. A queue consumer on a spot NodePool is scaled from 0 to 400
//! replicas beside a small on-demand NodePool for add-ons, under a PDB of maxUnavailable 25%; three spot
//! instances are interrupted during the peak; then the consumer scales back to zero and the cluster is left
//! to consolidate. One simulated hour on the embedded AWS us-east-1 catalog.
//!
//! Other scenarios come from YAML files (`karpenter simulate --scenario FILE`, format in docs/simulate.md,
//! the built-in one written out in config/scenarios/worker-heavy.yaml).

use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use karpenter_api::duration::parse_go_duration;
use serde::Deserialize;
use serde_json::{Value, json};

/// Something that happens at a moment of the scenario.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create objects (NodePools, Deployments, PDBs) through the API.
    Apply(Vec<Value>),
    /// Set a Deployment's replicas.
    Scale { deployment: String, replicas: i32 },
    /// Interrupt this many running spot instances (the oldest first).
    InterruptSpot(usize),
}

/// A scenario: actions at offsets from its start, and how long it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub name: String,
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
        name: "worker-heavy".into(),
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
                    deployment: "queue-consumer".into(),
                    replicas: 400,
                },
            ),
            (minutes(15), Action::InterruptSpot(3)),
            (
                minutes(30),
                Action::Scale {
                    deployment: "queue-consumer".into(),
                    replicas: 0,
                },
            ),
        ],
    }
}

/// A scenario file, as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ScenarioFile {
    name: String,
    /// How long the scenario runs (`60m`).
    duration: String,
    timeline: Vec<Step>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Step {
    /// When, from the start (`0s`, `2m`, `1h30m`).
    at: String,
    /// Objects to create: NodePools, Deployments (namespace default), PodDisruptionBudgets.
    #[serde(default)]
    apply: Vec<Value>,
    scale: Option<ScaleStep>,
    /// Interrupt this many running spot instances, oldest first.
    interrupt_spot: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScaleStep {
    deployment: String,
    replicas: i32,
}

/// Reads a scenario file; errors name the step and field.
pub fn parse(text: &str) -> Result<Scenario> {
    let file: ScenarioFile = serde_saphyr::from_str(text).map_err(|e| anyhow!("{e}"))?;
    let duration = parse_go_duration(&file.duration).map_err(|e| anyhow!("duration: {e}"))?;
    let mut timeline = Vec::with_capacity(file.timeline.len());
    for (i, step) in file.timeline.into_iter().enumerate() {
        let at = parse_go_duration(&step.at).map_err(|e| anyhow!("timeline[{i}].at: {e}"))?;
        if at > duration {
            bail!(
                "timeline[{i}].at: {} is after the end of the scenario ({})",
                step.at,
                file.duration
            );
        }
        let mut actions = Vec::new();
        if !step.apply.is_empty() {
            for (j, object) in step.apply.iter().enumerate() {
                let kind = object["kind"].as_str().unwrap_or_default();
                if !matches!(kind, "NodePool" | "Deployment" | "PodDisruptionBudget") {
                    bail!(
                        "timeline[{i}].apply[{j}].kind: {kind:?} is not NodePool, Deployment or PodDisruptionBudget"
                    );
                }
            }
            actions.push(Action::Apply(step.apply));
        }
        if let Some(scale) = step.scale {
            actions.push(Action::Scale {
                deployment: scale.deployment,
                replicas: scale.replicas,
            });
        }
        if let Some(n) = step.interrupt_spot {
            actions.push(Action::InterruptSpot(n));
        }
        match actions.len() {
            1 => timeline.extend(actions.into_iter().map(|a| (at, a))),
            0 => bail!("timeline[{i}]: no action (apply, scale or interruptSpot)"),
            _ => bail!("timeline[{i}]: one action per step (apply, scale or interruptSpot)"),
        }
    }
    timeline.sort_by_key(|(at, _)| *at);
    Ok(Scenario {
        name: file.name,
        duration,
        timeline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_worker_heavy_file_is_the_built_in_scenario() -> Result<()> {
        let file = parse(include_str!("../../../../config/scenarios/worker-heavy.yaml"))?;
        assert_eq!(file, worker_heavy());
        Ok(())
    }

    #[test]
    fn bad_steps_are_named() {
        let err = |text: &str| parse(text).err().map(|e| e.to_string()).unwrap_or_default();
        let e = err(
            "name: x\nduration: 10m\ntimeline:\n- at: 1m\n  scale: {deployment: a, replicas: 1}\n- at: soon\n  interruptSpot: 1\n",
        );
        assert!(e.contains("timeline[1].at"), "{e}");
        let e = err("name: x\nduration: 10m\ntimeline:\n- at: 20m\n  interruptSpot: 1\n");
        assert!(e.contains("after the end"), "{e}");
        let e = err("name: x\nduration: 10m\ntimeline:\n- at: 1m\n");
        assert!(e.contains("no action"), "{e}");
        let e = err("name: x\nduration: 10m\ntimeline:\n- at: 1m\n  apply:\n  - kind: Secret\n");
        assert!(e.contains("timeline[0].apply[0].kind"), "{e}");
        let e = err("name: x\nduration: 10m\ntimeline:\n- at: 1m\n  scael: {deployment: a, replicas: 1}\n");
        assert!(e.contains("scael"), "{e}");
    }
}
