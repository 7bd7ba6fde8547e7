//! The terminator's loop: one step per deleted NodeClaim per pass (see the crate documentation).

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::{
    core::v1::{Node, Pod},
    storage::v1::VolumeAttachment,
};
use karpenter_api::{labels, nodeclaim::NodeClaim};
use karpenter_core::{
    clock::Clock,
    cloudprovider::CloudProvider,
    disruption::expiration::{clamped_pod_grace_seconds, pod_delete_at, termination_deadline},
    snapshot::CompactPod,
};
use karpenter_state::ClusterState;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams},
};
use serde_json::json;

use crate::{TerminationError, drain::drain_plan, taint::add_disrupted_taint};

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TerminationPass {
    /// `namespace/name` of pods evicted (or, past the grace period, deleted).
    pub evicted: Vec<String>,
    /// `namespace/name: why` of evictions the API refused this pass (a PodDisruptionBudget).
    pub blocked: Vec<String>,
    /// NodeClaims whose instance is gone and whose finalizer was removed.
    pub terminated: Vec<String>,
    /// `claim: volume attachments` of drained nodes waiting for their volumes to detach.
    pub awaiting_volumes: Vec<String>,
}

/// The VolumeAttachments still naming `node` (their CSI driver has not detached the volume yet).
async fn attached_volumes(client: &Client, node: &str) -> Result<Vec<String>, TerminationError> {
    let attachments: Api<VolumeAttachment> = Api::all(client.clone());
    Ok(attachments
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|va| va.spec.node_name == node && va.metadata.deletion_timestamp.is_none())
        .map(|va| va.name_any())
        .collect())
}

/// The terminator's context.
pub struct Terminator {
    client: Client,
    state: ClusterState,
    cloud: Arc<dyn CloudProvider>,
    clock: Arc<dyn Clock>,
    /// How often deleted NodeClaims are looked at (tokio time).
    pub interval: Duration,
}

/// Kubernetes' default `terminationGracePeriodSeconds`.
const DEFAULT_POD_GRACE_SECONDS: i64 = 30;

/// When the node must be empty: the earlier of deletion + the claim's terminationGracePeriod and the
/// `karpenter.sh/nodeclaim-termination-timestamp` annotation (node repair sets it to "now" to drain at once).
fn drain_deadline(claim: &NodeClaim) -> Option<jiff::Timestamp> {
    let from_grace = claim
        .metadata
        .deletion_timestamp
        .as_ref()
        .and_then(|t| termination_deadline(claim, t.0));
    let annotated = claim
        .annotations()
        .get(labels::NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION)
        .and_then(|v| v.parse::<jiff::Timestamp>().ok());
    match (from_grace, annotated) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `karpenter_nodeclaims_terminated_total`, `karpenter_nodes_terminated_total` and the termination duration,
/// once a claim's finalizer is gone.
fn record_termination(claim: &NodeClaim, had_node: bool, now: jiff::Timestamp) {
    let m = karpenter_metrics::metrics();
    let label = |key: &str| claim.labels().get(key).cloned().unwrap_or_default();
    let (nodepool, zone) = (
        label(labels::NODEPOOL_LABEL),
        label("topology.kubernetes.io/zone"),
    );
    m.nodeclaims_terminated
        .get_or_create(&karpenter_metrics::NodeClaimTerminatedLabels {
            nodepool: nodepool.clone(),
            capacity_type: label("karpenter.sh/capacity-type"),
            zone: zone.clone(),
        })
        .inc();
    if had_node {
        m.nodes_terminated
            .get_or_create(&karpenter_metrics::NodeLabels {
                nodepool: nodepool.clone(),
                zone,
            })
            .inc();
    }
    if let Some(deleted) = claim.metadata.deletion_timestamp.as_ref() {
        m.nodeclaims_termination_duration_seconds
            .get_or_create(&karpenter_metrics::NodePoolLabels { nodepool })
            .observe(now.duration_since(deleted.0).as_secs_f64().max(0.0));
    }
}

fn key(pod: &CompactPod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

impl Terminator {
    pub fn new(
        client: Client,
        state: ClusterState,
        cloud: Arc<dyn CloudProvider>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            client,
            state,
            cloud,
            clock,
            interval: Duration::from_secs(1),
        }
    }

    /// Runs passes until the future is dropped.
    pub async fn run(&self) {
        loop {
            if self.state.synced() {
                let _timer = karpenter_metrics::metrics().reconcile("nodeclaim.termination");
                self.pass().await;
            }
            tokio::time::sleep(self.interval).await;
        }
    }

    /// One step for every NodeClaim being deleted that still carries the finalizer.
    pub async fn pass(&self) -> TerminationPass {
        let mut done = TerminationPass::default();
        for claim in self.state.node_claims.all() {
            let ours = claim
                .finalizers()
                .iter()
                .any(|f| f == labels::TERMINATION_FINALIZER);
            if claim.metadata.deletion_timestamp.is_none() || !ours {
                continue;
            }
            if let Err(error) = self.step(&claim, &mut done).await {
                tracing::warn!(nodeclaim = %claim.name_any(), category = error.category(), %error, "termination step failed");
            }
        }
        done
    }

    async fn step(&self, claim: &NodeClaim, done: &mut TerminationPass) -> Result<(), TerminationError> {
        let node_name = claim.status.as_ref().and_then(|s| s.node_name.clone());
        let node = node_name.as_deref().and_then(|n| self.state.nodes.get(n));
        if let Some(node) = &node {
            add_disrupted_taint(&self.client, node).await?;
            let node_name = node.name_any();
            let mut pods: Vec<Arc<CompactPod>> = self
                .state
                .pods
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node_name.as_str()));
            // In name order, so evictions go out in the same order every run.
            pods.sort_unstable_by_key(|p| key(p));
            let plan = drain_plan(&pods);
            if plan.remaining > 0 {
                let deadline = drain_deadline(claim);
                let now = self.clock.now();
                for pod in &plan.evict {
                    // A pod whose own grace period would overrun the node's deadline is deleted directly, with
                    // its grace clamped to the time left, so it is gone by the deadline whatever its PDB says.
                    let own_grace = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.termination_grace_period_seconds)
                        .unwrap_or(DEFAULT_POD_GRACE_SECONDS);
                    let delete_with = deadline
                        .filter(|d| now >= pod_delete_at(*d, own_grace))
                        .map(|d| clamped_pod_grace_seconds(d, now, own_grace));
                    self.evict(pod, delete_with, done).await?;
                }
                return Ok(());
            }
            // Volumes detach before the instance goes (so a StatefulSet's volume can attach elsewhere), unless
            // the node's deadline has passed.
            let past_deadline = drain_deadline(claim).is_some_and(|d| self.clock.now() >= d);
            if !past_deadline {
                let attached = attached_volumes(&self.client, &node.name_any()).await?;
                if !attached.is_empty() {
                    done.awaiting_volumes
                        .push(format!("{}: {}", claim.name_any(), attached.join(", ")));
                    return Ok(());
                }
            }
        }
        // Drained (or never had a Node): the instance goes, and only once it is gone does the claim.
        match self.cloud.delete(claim).await {
            Ok(()) => return Ok(()),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
        if let Some(node) = &node {
            let nodes: Api<Node> = Api::all(self.client.clone());
            match nodes.delete(&node.name_any(), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        let finalizers: Vec<&String> = claim
            .finalizers()
            .iter()
            .filter(|f| *f != labels::TERMINATION_FINALIZER)
            .collect();
        let claims: Api<NodeClaim> = Api::all(self.client.clone());
        claims
            .patch(
                &claim.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
            )
            .await?;
        record_termination(claim, node.is_some(), self.clock.now());
        done.terminated.push(claim.name_any());
        Ok(())
    }

    /// Evicts a pod (deletes it once the grace period is over); a refusal because of a PodDisruptionBudget is
    /// recorded and retried on the next pass.
    async fn evict(
        &self,
        pod: &CompactPod,
        delete_with_grace: Option<i64>,
        done: &mut TerminationPass,
    ) -> Result<(), TerminationError> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let result = if let Some(grace) = delete_with_grace {
            let grace = u32::try_from(grace.max(0)).unwrap_or(u32::MAX);
            pods.delete(name, &DeleteParams::default().grace_period(grace))
                .await
                .map(|_| ())
        } else {
            pods.evict(name, &EvictParams::default()).await.map(|_| ())
        };
        let code = match &result {
            Ok(()) => "200".to_string(),
            Err(kube::Error::Api(s)) => s.code.to_string(),
            Err(_) => "error".to_string(),
        };
        karpenter_metrics::metrics()
            .pods_eviction_requests
            .get_or_create(&karpenter_metrics::CodeLabels { code })
            .inc();
        match result {
            Ok(()) => done.evicted.push(key(pod)),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(kube::Error::Api(s)) if s.code == 429 => {
                done.blocked.push(format!("{}: {}", key(pod), s.message))
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }
}
