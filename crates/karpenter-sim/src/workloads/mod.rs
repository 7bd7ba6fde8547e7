//! Simulated workload controllers (the parts of kube-controller-manager scenarios need): Deployments make
//! ReplicaSets, ReplicaSets make Pods, DaemonSets put a pod on every matching node, Jobs run pods to completion,
//! and PodDisruptionBudgets get their status (`pdbs`).
//!
//! # Public API
//! - [`Workloads::new`]`(api, clock, options)` and [`Workloads::step`], which reconciles every workload once
//!   (nothing when the API server has not changed and no Job pod is due to finish);
//!   [`crate::cluster::SimCluster`] calls it on every tick.
//! - [`JOB_DURATION_ANNOTATION`]: how long a Job's pods run once Running (a Go duration such as `90s` or `5m`,
//!   on the Job; [`WorkloadOptions::job_duration`] without it).
//!
//! # Behaviour
//! - Deployment: one ReplicaSet per pod template, named `<deployment>-<hash>` with the `pod-template-hash`
//!   label; a template change creates the new ReplicaSet at full size and scales the old ones to 0 (Recreate,
//!   not a rolling update). Status: replicas, updatedReplicas, readyReplicas, availableReplicas.
//! - ReplicaSet: pods `<replicaset>-<5 random>` (the API server's seeded generateName) with a controller
//!   ownerReference; scale-down deletes unscheduled pods first, then the newest, with their grace period.
//!   Terminating and finished pods do not count. Status: replicas, readyReplicas, availableReplicas.
//! - DaemonSet: a pod on every node whose labels match the template's nodeSelector and required node affinity
//!   and whose NoSchedule/NoExecute taints the pod tolerates (with the tolerations the DaemonSet controller
//!   adds: not-ready, unreachable, disk/memory/pid-pressure, unschedulable, and network-unavailable for host
//!   network pods). Pods are created already bound (`spec.nodeName`), as the DaemonSet controller did before
//!   it moved to the default scheduler; pods on nodes that no longer match are deleted.
//! - Job: keeps `min(parallelism, completions - succeeded)` pods active; a pod Running for the Job's duration
//!   becomes `Succeeded`; at `completions` succeeded pods the Job gets `Complete=True` and `completionTime`.
//!
//! # Simplified
//! - No StatefulSets, CronJobs, rolling updates, maxSurge/maxUnavailable, minReadySeconds, pod failure
//!   handling or backoff; `ready` means the pod's Ready condition is True.

mod daemonsets;
mod deployments;
mod jobs;
mod pdbs;
mod replicasets;

use std::{sync::Arc, time::Duration};

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::{apiserver::ApiServer, clock::Clock, objects};

/// The Job annotation giving how long its pods run.
pub const JOB_DURATION_ANNOTATION: &str = "sim.karpenter.sh/duration";

/// Tunables of the workload controllers.
#[derive(Debug, Clone)]
pub struct WorkloadOptions {
    /// How long a Job's pods run when the Job has no [`JOB_DURATION_ANNOTATION`].
    pub job_duration: Duration,
}

impl Default for WorkloadOptions {
    fn default() -> Self {
        Self {
            job_duration: Duration::from_secs(60),
        }
    }
}

/// The workload controllers. See the module documentation.
pub struct Workloads {
    api: ApiServer,
    clock: Arc<dyn Clock>,
    options: WorkloadOptions,
    seen_rv: u64,
    next_due: Option<Timestamp>,
}

impl std::fmt::Debug for Workloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workloads")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Workloads {
    pub fn new(api: ApiServer, clock: Arc<dyn Clock>, options: WorkloadOptions) -> Self {
        Self {
            api,
            clock,
            options,
            seen_rv: u64::MAX,
            next_due: None,
        }
    }

    /// Reconciles every Deployment, ReplicaSet, DaemonSet and Job once.
    pub fn step(&mut self) {
        let now = self.clock.now();
        let rv = self.api.resource_version();
        if rv == self.seen_rv && self.next_due.is_none_or(|d| now < d) {
            return;
        }
        self.seen_rv = rv;
        self.next_due = None;
        deployments::reconcile(&self.api);
        replicasets::reconcile(&self.api);
        daemonsets::reconcile(&self.api);
        pdbs::reconcile(&self.api);
        if let Some(due) = jobs::reconcile(&self.api, now, self.options.job_duration) {
            self.next_due = Some(due);
        }
    }
}

/// A pod from a workload's `spec.template`, owned by `owner`, named `<prefix><random>`.
pub(crate) fn pod_from_template(owner: &Value, api_version: &str, kind: &str, prefix: &str) -> Value {
    let template = &owner["spec"]["template"];
    let mut metadata = template["metadata"].clone();
    if !metadata.is_object() {
        metadata = json!({});
    }
    metadata["generateName"] = json!(prefix);
    metadata["namespace"] = json!(objects::namespace(owner));
    metadata["ownerReferences"] = json!([objects::controller_ref(api_version, kind, owner)]);
    if let Some(m) = metadata.as_object_mut() {
        m.remove("name");
        m.remove("creationTimestamp");
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": metadata,
        "spec": template["spec"].clone(),
        "status": {"phase": "Pending"},
    })
}

/// The pods `owner_uid` controls, in (namespace, name) order, from a pre-fetched list.
pub(crate) fn owned<'a>(pods: &'a [Arc<Value>], owner_uid: &str) -> Vec<&'a Value> {
    pods.iter()
        .map(|p| &**p)
        .filter(|p| objects::is_controlled_by(p, owner_uid))
        .collect()
}

/// Counts as one of the workload's pods: not terminating, not finished.
pub(crate) fn is_active(pod: &Value) -> bool {
    !objects::is_deleting(pod) && !objects::is_terminal(pod)
}

pub(crate) fn is_ready(pod: &Value) -> bool {
    objects::condition_is_true(pod, "Ready")
}

pub(crate) fn replicas(obj: &Value, default: i64) -> i64 {
    obj["spec"]["replicas"].as_i64().unwrap_or(default).max(0)
}

/// Merges `status` into the object's status when it differs.
pub(crate) fn update_status(api: &ApiServer, id: &crate::apiserver::ResourceId, obj: &Value, fields: Value) {
    let mut status = obj["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    let before = status.clone();
    if let (Some(s), Some(f)) = (status.as_object_mut(), fields.as_object()) {
        for (k, v) in f {
            s.insert(k.clone(), v.clone());
        }
    }
    if status == before {
        return;
    }
    let (ns, name) = (objects::namespace(obj), objects::name(obj));
    if let Err(e) = api.update_status_internal(id, ns, name, status) {
        tracing::debug!("sim workloads: status of {} {ns}/{name}: {e}", id.resource);
    }
}
