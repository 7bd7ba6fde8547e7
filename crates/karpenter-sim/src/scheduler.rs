//! A simulated kube-scheduler: binds pending pods to existing nodes they fit, and marks the rest
//! `PodScheduled=False` with reason `Unschedulable`, which is what makes Karpenter provision for them.
//!
//! # Public API
//! - [`KubeScheduler::new`]`(api)` and [`KubeScheduler::step`], which schedules whatever is pending now (and does
//!   nothing when the API server has not changed since the last step); [`crate::cluster::SimCluster`] calls it
//!   on every tick. [`KubeScheduler::step`] returns a [`ScheduleRound`] saying what it did.
//!
//! # How
//! The fit test is core's: the API server's Pods and Nodes (and PVCs, PVs, StorageClasses, CSINodes, Namespaces)
//! become a [`Snapshot`] with no NodePools and no NodeClaims, [`build_schedule_inputs`] and
//! [`karpenter_core::scheduling::schedule`] run on it, and each pod either lands on an existing node (bound
//! through the pods/binding subresource) or gets the simulation's reason in its `PodScheduled` condition. So
//! resources, taints and tolerations, nodeSelector, node affinity, pod (anti-)affinity, topology spread, host
//! ports and volume limits are honoured exactly as Karpenter's own scheduling simulation honours them.
//!
//! # Simplified
//! - A node takes new pods only when Ready=True, not cordoned, not being deleted, and free of the startup-time
//!   taints core ignores (`karpenter.sh/unregistered`, `node.kubernetes.io/not-ready`, `unreachable`,
//!   `node.cloudprovider.kubernetes.io/uninitialized`, `readiness.k8s.io/*`) and of `karpenter.sh/disrupted`,
//!   whether or not the pod tolerates them.
//! - Placement follows core's order (existing nodes in name order, first fit), not kube-scheduler's scoring; no
//!   preemption, no scheduling gates beyond skipping gated pods, no scheduler profiles other than the default.
//! - Only pods with no `schedulerName` or `default-scheduler` are scheduled; DaemonSet pods are expected to be
//!   created already bound (as the simulated DaemonSet controller does).

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::api::{
    core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim},
    storage::v1::{CSINode, StorageClass},
};
use karpenter_api::labels;
use karpenter_core::{
    catalog::CatalogFile,
    scheduling,
    snapshot::{BuildOptions, CompactPod, Snapshot, build_schedule_inputs},
};
use serde::{Deserialize, de::DeserializeOwned};
use serde_json::Value;

use crate::{
    apiserver::{ApiServer, ResourceId},
    objects::{self, set_condition},
};

/// The scheduler name pods must carry (or leave empty) to be scheduled here.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// What one scheduling step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScheduleRound {
    /// `(namespace/name, node)` for each pod bound.
    pub bound: Vec<(String, String)>,
    /// `(namespace/name, message)` for each pod left pending.
    pub unschedulable: Vec<(String, String)>,
}

/// The simulated kube-scheduler. See the module documentation.
#[derive(Debug)]
pub struct KubeScheduler {
    api: ApiServer,
    seen_rv: u64,
}

fn decode<T: DeserializeOwned>(api: &ApiServer, id: &ResourceId) -> Vec<T> {
    api.list_internal(id, None)
        .iter()
        .filter_map(|v| match T::deserialize(&**v) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::debug!(
                    "sim scheduler: skipping {} {}: {e}",
                    id.resource,
                    objects::name(v)
                );
                None
            }
        })
        .collect()
}

/// Whether kube-scheduler would consider this pod: unbound, not terminating, not terminal, ours, not gated.
fn is_pending(pod: &Value) -> bool {
    objects::node_name(pod).is_none()
        && !objects::is_deleting(pod)
        && !objects::is_terminal(pod)
        && objects::str_at(pod, "/spec/schedulerName").is_none_or(|s| s == DEFAULT_SCHEDULER)
        && pod
            .pointer("/spec/schedulingGates")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
}

/// Taints that mark a node as not (yet, or no longer) taking pods; core ignores them, kube-scheduler does not.
fn blocks_scheduling(taint: &Value) -> bool {
    let key = taint["key"].as_str().unwrap_or_default();
    let effect = taint["effect"].as_str().unwrap_or_default();
    matches!(effect, "NoSchedule" | "NoExecute")
        && (labels::KNOWN_EPHEMERAL_TAINT_KEYS.contains(&key)
            || key.starts_with(labels::EPHEMERAL_TAINT_PREFIX)
            || key == labels::DISRUPTED_TAINT_KEY)
}

/// The Node as the fit test should see it: nodes that take no new pods are cordoned (so their pods still count
/// for topology), and the taints and deletion marks core would act on are removed.
fn scheduler_view(node: &Value) -> Option<Node> {
    let mut node = node.clone();
    let taints = node["spec"]["taints"].as_array().cloned().unwrap_or_default();
    let blocked = taints.iter().any(blocks_scheduling);
    let closed = blocked || objects::is_deleting(&node) || !objects::node_is_ready(&node);
    if let Some(meta) = node["metadata"].as_object_mut() {
        meta.remove("deletionTimestamp");
    }
    let kept: Vec<Value> = taints.into_iter().filter(|t| !blocks_scheduling(t)).collect();
    node["spec"]["taints"] = Value::Array(kept);
    if closed {
        node["spec"]["unschedulable"] = Value::Bool(true);
    }
    Node::deserialize(&node).ok()
}

impl KubeScheduler {
    pub fn new(api: ApiServer) -> Self {
        Self {
            api,
            seen_rv: u64::MAX,
        }
    }

    /// Schedules the pending pods; nothing when the server has not changed since the last step.
    pub fn step(&mut self) -> ScheduleRound {
        let rv = self.api.resource_version();
        if rv == self.seen_rv {
            return ScheduleRound::default();
        }
        self.seen_rv = rv;
        let pod_values = self.api.list_internal(&objects::pods(), None);
        let pending: BTreeMap<String, &Value> = pod_values
            .iter()
            .filter(|p| is_pending(p))
            .map(|p| (format!("{}/{}", objects::namespace(p), objects::name(p)), &**p))
            .collect();
        if pending.is_empty() {
            return ScheduleRound::default();
        }
        let pods: Vec<Arc<CompactPod>> = pod_values
            .iter()
            .filter(|p| {
                // Unbound pods of other schedulers are not ours to place.
                objects::node_name(p).is_some() || is_pending(p)
            })
            .filter_map(|p| CompactPod::deserialize(&**p).ok())
            .map(Arc::new)
            .collect();
        let node_values = self.api.list_internal(&objects::nodes(), None);
        let snapshot = Snapshot {
            pods,
            nodes: node_values
                .iter()
                .filter_map(|n| scheduler_view(n))
                .map(|n| Arc::new(n.into()))
                .collect(),
            pvcs: decode::<PersistentVolumeClaim>(&self.api, &ResourceId::core("persistentvolumeclaims")),
            pvs: decode::<PersistentVolume>(&self.api, &ResourceId::core("persistentvolumes")),
            storage_classes: decode::<StorageClass>(
                &self.api,
                &ResourceId::new("storage.k8s.io", "storageclasses"),
            ),
            csi_nodes: decode::<CSINode>(&self.api, &ResourceId::new("storage.k8s.io", "csinodes")),
            namespaces: decode::<Namespace>(&self.api, &ResourceId::core("namespaces")),
            ..Snapshot::default()
        };
        let mut inputs = build_schedule_inputs(&snapshot, &CatalogFile::default(), &BuildOptions::default());
        let results = scheduling::schedule(&inputs.input, &mut inputs.interner, &inputs.table);

        let mut round = ScheduleRound::default();
        for (node, placed) in &results.existing_nodes {
            let Some(node_name) = inputs.node_names.get(*node) else {
                continue;
            };
            for &p in placed {
                let Some(id) = inputs.pod_names.get(p) else {
                    continue;
                };
                if !pending.contains_key(id) {
                    continue;
                }
                let (ns, name) = id.split_once('/').unwrap_or(("default", id));
                match self.api.bind_pod_internal(ns, name, node_name) {
                    Ok(_) => round.bound.push((id.clone(), node_name.clone())),
                    Err(e) => tracing::debug!("sim scheduler: binding {id} to {node_name}: {e}"),
                }
            }
        }
        let total = node_values.len();
        let now = self.api.now();
        for (p, reason) in &results.pod_errors {
            let Some(id) = inputs.pod_names.get(*p) else {
                continue;
            };
            let Some(pod) = pending.get(id) else {
                continue;
            };
            let message = format!("0/{total} nodes are available: {reason}");
            round.unschedulable.push((id.clone(), message.clone()));
            let current = objects::condition(pod, "PodScheduled");
            let same = current.is_some_and(|c| {
                c["status"] == "False" && c["reason"] == "Unschedulable" && c["message"] == message.as_str()
            });
            if same {
                continue;
            }
            let mut status = pod["status"].clone();
            if !status.is_object() {
                status = serde_json::json!({"phase": "Pending"});
            }
            set_condition(
                &mut status["conditions"],
                "PodScheduled",
                "False",
                "Unschedulable",
                &message,
                now,
                false,
            );
            let (ns, name) = id.split_once('/').unwrap_or(("default", id));
            if let Err(e) = self
                .api
                .update_status_internal(&objects::pods(), ns, name, status)
            {
                tracing::debug!("sim scheduler: marking {id} unschedulable: {e}");
            }
        }
        // Pods the simulation skipped (malformed) are neither bound nor explained; they stay as they are.
        round.bound.sort();
        round.unschedulable.sort();
        round
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(ready: &str, taints: Value) -> Value {
        json!({"metadata": {"name": "n"}, "spec": {"taints": taints},
               "status": {"conditions": [{"type": "Ready", "status": ready}]}})
    }

    #[test]
    fn only_ready_untainted_nodes_take_pods_but_all_are_kept_for_topology() -> Result<(), String> {
        let open =
            scheduler_view(&node("True", json!([{"key": "team", "effect": "NoSchedule"}]))).ok_or("node")?;
        let spec = open.spec.unwrap_or_default();
        assert_eq!(spec.unschedulable, None);
        assert_eq!(
            spec.taints.unwrap_or_default().len(),
            1,
            "ordinary taints stay for core to match"
        );

        let joining = node(
            "True",
            json!([{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]),
        );
        let spec = scheduler_view(&joining).ok_or("node")?.spec.unwrap_or_default();
        assert_eq!(spec.unschedulable, Some(true));
        assert!(spec.taints.unwrap_or_default().is_empty());

        let not_ready = scheduler_view(&node("False", json!([]))).ok_or("node")?;
        assert_eq!(not_ready.spec.unwrap_or_default().unschedulable, Some(true));

        let mut deleting = node("True", json!([]));
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let deleting = scheduler_view(&deleting).ok_or("node")?;
        assert!(deleting.metadata.deletion_timestamp.is_none());
        assert_eq!(deleting.spec.unwrap_or_default().unschedulable, Some(true));
        Ok(())
    }

    #[test]
    fn pending_means_unbound_ungated_live_and_ours() {
        assert!(is_pending(&json!({"spec": {}})));
        assert!(is_pending(
            &json!({"spec": {"schedulerName": "default-scheduler"}})
        ));
        assert!(!is_pending(&json!({"spec": {"schedulerName": "other"}})));
        assert!(!is_pending(&json!({"spec": {"nodeName": "n"}})));
        assert!(!is_pending(
            &json!({"spec": {"schedulingGates": [{"name": "g"}]}})
        ));
        assert!(!is_pending(
            &json!({"spec": {}, "status": {"phase": "Succeeded"}})
        ));
        assert!(!is_pending(
            &json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {}})
        ));
    }
}
