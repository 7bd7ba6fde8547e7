//! The terminator's loop: one step per deleted NodeClaim per pass (see the crate documentation).

use std::{collections::HashMap, sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::{
    api::core::v1::{Node, ObjectReference, Pod},
    apimachinery::pkg::apis::meta::v1::Time,
};
use karpenter_api::{
    common::{Condition, ConditionStatus},
    labels,
    nodeclaim::{NodeClaim, conditions},
};
use karpenter_core::{
    clock::Clock, cloudprovider::CloudProvider, disruption::expiration::termination_deadline,
    snapshot::CompactPod,
};
use karpenter_state::api_errors::{ignore_not_found, is_conflict, is_not_found};
use karpenter_state::{
    ControllerContext, events::DedupedRecorder, finalizers::remove_finalizer, periodic::run_synced,
};
use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, EvictParams, Patch, PatchParams},
};
use serde_json::json;

use crate::{
    TerminationError, claim_conditions,
    drain::{DEFAULT_POD_GRACE_SECONDS, PodDeletion, drain_plan},
    events,
    node_finalizer::{has_finalizer, remove_node_finalizer},
    taint::add_disrupted_taint,
    volumes::blocking_attachments,
};

/// `karpenter_pods_drained_total`'s reason for pods drained without a disruption decision behind it.
const FORCEFUL_TERMINATION: &str = "Forceful Termination";

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
    /// NodeClaims deleted because someone deleted their Node (`kubectl delete node`).
    pub deleted_for_node: Vec<String>,
    /// Nodes whose finalizer was removed: their instance is gone, or no NodeClaim of theirs is left to
    /// terminate it.
    pub released_nodes: Vec<String>,
}

impl TerminationPass {
    /// Appends what the steps did, in the order they were started (each numbered), whichever finished first.
    fn merge_in_order(&mut self, mut finished: Vec<(usize, TerminationPass)>) {
        finished.sort_unstable_by_key(|(at, _)| *at);
        for (_, one) in finished {
            self.merge(one);
        }
    }

    /// Appends what another step did.
    fn merge(&mut self, other: TerminationPass) {
        self.evicted.extend(other.evicted);
        self.blocked.extend(other.blocked);
        self.terminated.extend(other.terminated);
        self.awaiting_volumes.extend(other.awaiting_volumes);
        self.deleted_for_node.extend(other.deleted_for_node);
        self.released_nodes.extend(other.released_nodes);
    }
}

/// How many objects a pass works on at once unless told otherwise (`CPU_REQUESTS` scales it in the controller).
pub const DEFAULT_CONCURRENCY: usize = 64;

/// The terminator's context.
pub struct Terminator {
    cx: ControllerContext,
    cloud: Arc<dyn CloudProvider>,
    events: DedupedRecorder,
    /// How often deleted NodeClaims are looked at (tokio time).
    pub interval: Duration,
    /// How many Nodes or NodeClaims a pass steps at once.
    pub concurrency: usize,
}

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
    let (nodepool, zone) = (label(labels::NODEPOOL_LABEL), label(labels::ZONE_LABEL));
    m.nodeclaims_terminated
        .get_or_create(&karpenter_metrics::NodeClaimTerminatedLabels {
            nodepool: nodepool.clone(),
            capacity_type: label(labels::CAPACITY_TYPE_LABEL),
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

/// `karpenter_nodes_termination_duration_seconds`, once a Node's finalizer is gone: from the Node's deletion, or
/// for a Node deleted only once drained (its NodeClaim was deleted, not the Node), from the claim's.
/// Also `karpenter_nodes_lifetime_duration_seconds`: from the Node's creation to now.
fn record_node_termination(node: &Node, claim_deleted: Option<&Time>, now: jiff::Timestamp) {
    let nodepool = node
        .labels()
        .get(labels::NODEPOOL_LABEL)
        .cloned()
        .unwrap_or_default();
    let m = karpenter_metrics::metrics();
    if let Some(created) = node.metadata.creation_timestamp.as_ref() {
        m.nodes_lifetime_duration_seconds
            .get_or_create(&karpenter_metrics::NodePoolLabels {
                nodepool: nodepool.clone(),
            })
            .observe(now.duration_since(created.0).as_secs_f64().max(0.0));
    }
    let Some(deleted) = node.metadata.deletion_timestamp.as_ref().or(claim_deleted) else {
        return;
    };
    m.nodes_termination_duration_seconds
        .observe(&nodepool, now.duration_since(deleted.0).as_secs_f64().max(0.0));
}

fn key(pod: &CompactPod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

impl Terminator {
    pub fn new(cx: ControllerContext, cloud: Arc<dyn CloudProvider>) -> Self {
        Self {
            events: cx.recorder(),
            cx,
            cloud,
            interval: Duration::from_secs(1),
            concurrency: DEFAULT_CONCURRENCY,
        }
    }

    /// Runs passes until the future is dropped.
    pub async fn run(&self) {
        run_synced(&self.cx.state, "nodeclaim.termination", self.interval, || async {
            self.pass().await;
            true
        })
        .await;
    }

    /// One step for every Node being deleted that carries the finalizer, then for every NodeClaim being
    /// deleted that still carries it. Each object's step runs on its own, up to [`Terminator::concurrency`] at
    /// once (upstream reconciles objects concurrently too): one node whose drain waits on a slow eviction or
    /// whose instance takes long to terminate does not hold up the others. Results are merged in the objects'
    /// (name) order.
    pub async fn pass(&self) -> TerminationPass {
        let mut done = TerminationPass::default();
        let deleted_nodes = self
            .cx
            .state
            .nodes
            .filter(|n| n.metadata.deletion_timestamp.is_some() && has_finalizer(n.finalizers()));
        if !deleted_nodes.is_empty() {
            let by_provider_id: HashMap<String, Arc<NodeClaim>> = self
                .cx
                .state
                .node_claims
                .all()
                .into_iter()
                .filter_map(|c| Some((c.status.as_ref()?.provider_id.clone()?, c)))
                .collect();
            let by_provider_id = &by_provider_id;
            let steps = deleted_nodes.into_iter().enumerate().map(|(at, node)| async move {
                // The Node as written back: a few per pass, so the copy is cheap.
                let node = node.to_node();
                let mut one = TerminationPass::default();
                if let Err(error) = self.node_step(&node, by_provider_id, &mut one).await {
                    tracing::warn!(node = %node.name_any(), category = error.category(), %error, "node termination step failed");
                }
                (at, one)
            });
            let finished = futures::stream::iter(steps)
                .buffer_unordered(self.concurrency.max(1))
                .collect()
                .await;
            done.merge_in_order(finished);
        }
        let deleting = self.cx.state.node_claims.all().into_iter().filter(|claim| {
            claim.metadata.deletion_timestamp.is_some()
                && claim
                    .finalizers()
                    .iter()
                    .any(|f| f == labels::TERMINATION_FINALIZER)
        });
        let steps = deleting.enumerate().map(|(at, claim)| async move {
            let mut one = TerminationPass::default();
            if let Err(error) = self.step(&claim, &mut one).await {
                tracing::warn!(nodeclaim = %claim.name_any(), category = error.category(), %error, "termination step failed");
            }
            (at, one)
        });
        let finished = futures::stream::iter(steps)
            .buffer_unordered(self.concurrency.max(1))
            .collect()
            .await;
        done.merge_in_order(finished);
        done
    }

    /// A Node deleted while it carries the finalizer (`kubectl delete node`): its NodeClaim is deleted, and the
    /// claim's termination (drain, volumes, instance) releases the Node at its end. A Node whose NodeClaim is
    /// gone, or is being deleted without the finalizer (so no termination of ours will run), is released now:
    /// otherwise nothing ever would.
    async fn node_step(
        &self,
        node: &Node,
        by_provider_id: &HashMap<String, Arc<NodeClaim>>,
        done: &mut TerminationPass,
    ) -> Result<(), TerminationError> {
        let cached = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_ref())
            .and_then(|id| by_provider_id.get(id))
            .cloned();
        let claim = match cached {
            Some(claim) => Some(claim),
            None => self.owning_claim(node).await?,
        };
        match claim {
            Some(claim) if claim.metadata.deletion_timestamp.is_none() => {
                let claims: Api<NodeClaim> = Api::all(self.cx.client.clone());
                if ignore_not_found(claims.delete(&claim.name_any(), &DeleteParams::default()).await)?
                    .is_some()
                {
                    done.deleted_for_node.push(claim.name_any());
                }
            }
            Some(claim)
                if claim
                    .finalizers()
                    .iter()
                    .any(|f| f == labels::TERMINATION_FINALIZER) => {}
            _ => {
                if remove_node_finalizer(&self.cx.client, node).await? {
                    record_node_termination(node, None, self.cx.clock.now());
                    done.released_nodes.push(node.name_any());
                }
            }
        }
        Ok(())
    }

    /// The NodeClaim the Node's owner reference names, read from the API server: the cache has no claim with
    /// the Node's provider ID, and releasing the Node while its claim still exists would leave the instance
    /// running behind an already deleted Node.
    async fn owning_claim(&self, node: &Node) -> Result<Option<Arc<NodeClaim>>, TerminationError> {
        let Some(owner) = node.owner_references().iter().find(|o| {
            o.kind == "NodeClaim"
                && o.api_version
                    .strip_prefix(labels::GROUP)
                    .is_some_and(|v| v.starts_with('/'))
        }) else {
            return Ok(None);
        };
        let claims: Api<NodeClaim> = Api::all(self.cx.client.clone());
        Ok(claims
            .get_opt(&owner.name)
            .await?
            .filter(|c| c.metadata.uid.as_deref() == Some(owner.uid.as_str()))
            .map(Arc::new))
    }

    async fn step(&self, claim: &NodeClaim, done: &mut TerminationPass) -> Result<(), TerminationError> {
        let node_name = claim.status.as_ref().and_then(|s| s.node_name.clone());
        let node = node_name
            .as_deref()
            .and_then(|n| self.cx.state.nodes.get(n))
            .map(|n| n.to_node());
        // A Node whose kubelet stopped reporting and whose instance the provider no longer has cannot be
        // drained (no kubelet will finish its pods' deletions): it goes without draining, its pods then removed
        // by the pod garbage collector, as upstream does and kube-controller-manager's node lifecycle would.
        let drainable = match &node {
            Some(node) => !self.instance_gone(claim, node).await?,
            None => false,
        };
        let mut claim = claim.clone();
        if let Some(node) = node.as_ref().filter(|_| drainable) {
            match self.drain(&claim, node, done).await? {
                Some(drained) => claim = drained,
                None => return Ok(()),
            }
        }
        // Drained (or never had a Node): the instance goes, and only once it is gone does the claim.
        let deleted = match self.cloud.delete(&claim).await {
            Ok(()) => false,
            Err(e) if e.is_not_found() => true,
            Err(e) => return Err(e.into()),
        };
        // The provider took the deletion (or the instance is gone already).
        let has_instance = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_ref())
            .is_some();
        if has_instance
            && self
                .set_condition(&mut claim, &claim_conditions::INSTANCE_TERMINATING)
                .await?
        {
            return Ok(());
        }
        if !deleted {
            return Ok(());
        }
        if let Some(node) = &node {
            let nodes: Api<Node> = Api::all(self.cx.client.clone());
            ignore_not_found(nodes.delete(&node.name_any(), &DeleteParams::default()).await)?;
            // The instance is gone, so the Node may go too. Before the claim's own finalizer: were that removed
            // first and this patch then failed, the Node would wait for the node pass's fallback instead.
            if remove_node_finalizer(&self.cx.client, node).await? {
                record_node_termination(
                    node,
                    claim.metadata.deletion_timestamp.as_ref(),
                    self.cx.clock.now(),
                );
                done.released_nodes.push(node.name_any());
            }
            // As upstream's, the NodeClaim outlives its Node: a Node another finalizer still holds keeps its
            // claim (InstanceTerminating, its instance gone), so whoever looks finds the Node's instance
            // terminated and the disruption budgets leave it out, rather than a tainted Node with no claim.
            // The claim's finalizer goes on a later pass, once the Node is gone.
            if node
                .finalizers()
                .iter()
                .any(|f| f != labels::TERMINATION_FINALIZER)
            {
                return Ok(());
            }
        }
        // Locked to the version read, so a finalizer another controller still holds the claim with is kept.
        let claims: Api<NodeClaim> = Api::all(self.cx.client.clone());
        if !remove_finalizer(&claims, &claim, labels::TERMINATION_FINALIZER)
            .await?
            .written()
        {
            // Gone, or someone else took the finalizer off meanwhile: this termination is not ours to record.
            return Ok(());
        }
        record_termination(&claim, node.is_some(), self.cx.clock.now());
        done.terminated.push(claim.name_any());
        Ok(())
    }

    /// Taints and drains the Node, then waits for its volumes to detach; the claim as last written once both
    /// are done, `None` while either is still under way (or a condition write lost a race: the next pass
    /// retries).
    async fn drain(
        &self,
        claim: &NodeClaim,
        node: &Node,
        done: &mut TerminationPass,
    ) -> Result<Option<NodeClaim>, TerminationError> {
        add_disrupted_taint(&self.cx.client, node).await?;
        let node_ref = node.object_ref(&());
        let node_name = node.name_any();
        let deadline = drain_deadline(claim);
        let now = self.cx.clock.now();
        if let Some(deadline) = deadline {
            let message = format!("All pods will be deleted by {deadline}");
            self.events
                .warn(&node_ref, events::TERMINATION_GRACE_PERIOD_EXPIRING, &message)
                .await;
            // Upstream tells the NodeClaim too.
            self.events
                .warn(
                    &claim.object_ref(&()),
                    events::TERMINATION_GRACE_PERIOD_EXPIRING,
                    &message,
                )
                .await;
        }
        let mut pods: Vec<Arc<CompactPod>> = self
            .cx
            .state
            .pods
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node_name.as_str()));
        // In name order, so evictions go out in the same order every run.
        pods.sort_unstable_by_key(|p| key(p));
        let plan = drain_plan(&pods, now, deadline);
        let mut claim = claim.clone();
        if !plan.drained() {
            for deletion in &plan.delete {
                self.delete_for_deadline(deletion, deadline.unwrap_or(now), done)
                    .await?;
            }
            let reason = drain_reason(&claim);
            for pod in &plan.evict {
                self.evict(pod, &node_ref, &reason, done).await?;
            }
            let message = format!(
                "Failed to drain node, {} pods are waiting to be evicted",
                plan.waiting
            );
            self.events
                .warn(&node_ref, events::FAILED_DRAINING, &message)
                .await;
            self.set_condition(&mut claim, &claim_conditions::DRAINING)
                .await?;
            return Ok(None);
        }
        let was_drained = claim_conditions::holds(status_conditions(&claim), &claim_conditions::DRAINED);
        if !was_drained {
            if self.set_condition(&mut claim, &claim_conditions::DRAINED).await? {
                return Ok(None);
            }
            karpenter_metrics::metrics()
                .nodes_drained
                .get_or_create(&karpenter_metrics::NodePoolLabels {
                    nodepool: node
                        .labels()
                        .get(labels::NODEPOOL_LABEL)
                        .cloned()
                        .unwrap_or_default(),
                })
                .inc();
        }
        // Volumes detach before the instance goes (so a StatefulSet's volume can attach elsewhere), unless the
        // node's deadline has passed.
        let attached = self.attached_volumes(&node_name, &pods, now);
        let volumes = if attached.is_empty() {
            &claim_conditions::VOLUMES_DETACHED
        } else if deadline.is_some_and(|d| now >= d) {
            &claim_conditions::VOLUMES_LEFT_AT_DEADLINE
        } else {
            let message = format!(
                "Awaiting deletion of {} VolumeAttachments bound to node",
                attached.len()
            );
            // Normal, as upstream's: waiting for volumes to detach is part of a healthy termination.
            self.events
                .normal(&node_ref, events::AWAITING_VOLUME_DETACHMENT, &message)
                .await;
            done.awaiting_volumes
                .push(format!("{}: {}", claim.name_any(), attached.join(", ")));
            self.set_condition(&mut claim, &claim_conditions::AWAITING_VOLUME_DETACHMENT)
                .await?;
            return Ok(None);
        };
        if self.set_condition(&mut claim, volumes).await? {
            return Ok(None);
        }
        Ok(Some(claim))
    }

    /// One drain step for a node that stays (a reboot; karpenter-repair's reboot controller): the node's pods are
    /// evicted by the same rules and in the same order as for a termination, with `reason` in
    /// `karpenter_pods_drained_total`, but nothing is ever deleted: PodDisruptionBudgets and do-not-disrupt hold
    /// their pods for as long as the caller keeps draining, and what is left when it stops rides the reboot. The
    /// caller fences the node itself. Returns how many pods the drain still waits for (0: drained).
    pub async fn drain_in_place(&self, node: &Node, reason: &str) -> Result<usize, TerminationError> {
        let node_ref = node.object_ref(&());
        let node_name = node.name_any();
        let mut pods: Vec<Arc<CompactPod>> = self
            .cx
            .state
            .pods
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node_name.as_str()));
        pods.sort_unstable_by_key(|p| key(p));
        let plan = drain_plan(&pods, self.cx.clock.now(), None);
        let mut done = TerminationPass::default();
        for pod in &plan.evict {
            self.evict(pod, &node_ref, reason, &mut done).await?;
        }
        Ok(plan.waiting)
    }

    /// The VolumeAttachments still naming `node` (their CSI driver has not detached the volume yet) that the
    /// instance waits for: not those of the pods the drain leaves on the node. Read from the state cache, which
    /// watches them (a cluster-wide list per draining claim per pass cost the API server a list of every
    /// attachment in the cluster each time).
    fn attached_volumes(&self, node: &str, pods: &[Arc<CompactPod>], now: jiff::Timestamp) -> Vec<String> {
        let attachments = self
            .cx
            .state
            .volume_attachments
            .filter(|va| va.spec.node_name == node);
        let volume_of_claim = |namespace: &str, claim: &str| {
            self.cx
                .state
                .pvcs
                .get(&format!("{namespace}/{claim}"))
                .and_then(|pvc| pvc.spec.as_ref()?.volume_name.clone())
        };
        blocking_attachments(
            attachments.iter().map(|va| &**va),
            node,
            pods,
            volume_of_claim,
            now,
        )
    }

    /// Writes `wanted` into the claim's status unless it holds already, conditional on the claim's
    /// resourceVersion so that a condition another controller wrote meanwhile is not overwritten. `claim`
    /// becomes the written claim. `true` when the write lost that race (409) or the claim is gone (404): the
    /// caller stops for this pass and the next one works from a fresh read.
    async fn set_condition(
        &self,
        claim: &mut NodeClaim,
        wanted: &claim_conditions::TerminationCondition,
    ) -> Result<bool, TerminationError> {
        let Some(conditions) =
            claim_conditions::with_condition(status_conditions(claim), wanted, self.cx.clock.now())
        else {
            return Ok(false);
        };
        let patch = json!({
            "metadata": {"resourceVersion": claim.resource_version()},
            "status": {"conditions": conditions},
        });
        let claims: Api<NodeClaim> = Api::all(self.cx.client.clone());
        match claims
            .patch_status(&claim.name_any(), &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(written) => {
                *claim = written;
                Ok(false)
            }
            Err(e) if is_conflict(&e) || is_not_found(&e) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    /// The Node is not Ready and the cloud provider reports its instance gone. A Ready Node's kubelet still
    /// runs whatever the provider says, so the provider is asked only about Nodes that are not Ready.
    async fn instance_gone(&self, claim: &NodeClaim, node: &Node) -> Result<bool, TerminationError> {
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True");
        let Some(provider_id) = claim.status.as_ref().and_then(|s| s.provider_id.as_deref()) else {
            return Ok(false);
        };
        if ready {
            return Ok(false);
        }
        match self.cloud.get(provider_id).await {
            Ok(_) => Ok(false),
            Err(e) if e.is_not_found() => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes a pod whose own grace period would otherwise end after the node's `deadline`, with its grace
    /// clamped to the time left; PodDisruptionBudgets and do-not-disrupt no longer hold it.
    async fn delete_for_deadline(
        &self,
        deletion: &PodDeletion,
        deadline: jiff::Timestamp,
        done: &mut TerminationPass,
    ) -> Result<(), TerminationError> {
        let pod = &deletion.pod;
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.cx.client.clone(), namespace);
        let grace = u32::try_from(deletion.grace_seconds.max(0)).unwrap_or(u32::MAX);
        match pods
            .delete(name, &DeleteParams::default().grace_period(grace))
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let own = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(DEFAULT_POD_GRACE_SECONDS);
        let message = format!(
            "Deleting the pod to accommodate the terminationTime {deadline} of the node. The pod was granted {grace} seconds of grace-period of its {own} terminationGracePeriodSeconds. This bypasses the PDB of the pod and the do-not-disrupt annotation."
        );
        self.events
            .normal(&pod_ref(pod), events::DISRUPTED, &message)
            .await;
        done.evicted.push(key(pod));
        Ok(())
    }

    /// Asks the Eviction API to evict a pod; a refusal because of a PodDisruptionBudget (429) is recorded and
    /// retried on the next pass. A successful eviction counts in `karpenter_pods_drained_total` under `reason`.
    async fn evict(
        &self,
        pod: &CompactPod,
        node: &ObjectReference,
        reason: &str,
        done: &mut TerminationPass,
    ) -> Result<(), TerminationError> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.cx.client.clone(), namespace);
        let result = pods.evict(name, &EvictParams::default()).await.map(|_| ());
        let code = match &result {
            Ok(()) => "200".to_string(),
            Err(kube::Error::Api(s)) => s.code.to_string(),
            Err(_) => "error".to_string(),
        };
        let metrics = karpenter_metrics::metrics();
        metrics
            .pods_eviction_requests
            .get_or_create(&karpenter_metrics::CodeLabels { code })
            .inc();
        match result {
            Ok(()) => {
                metrics
                    .pods_drained
                    .get_or_create(&karpenter_metrics::ReasonLabels {
                        reason: reason.to_string(),
                    })
                    .inc();
                self.events
                    .normal(&pod_ref(pod), events::EVICTED, "Evicted pod")
                    .await;
                done.evicted.push(key(pod));
            }
            // Gone already, or a different pod of that name by now.
            Err(e) if is_not_found(&e) || is_conflict(&e) => {}
            Err(kube::Error::Api(s)) if s.code == 429 => {
                let message = format!("Failed to drain node, evicting pod {} violates a PDB", key(pod));
                self.events.warn(node, events::FAILED_DRAINING, &message).await;
                done.blocked.push(format!("{}: {}", key(pod), s.message));
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }
}

/// The claim's status conditions.
fn status_conditions(claim: &NodeClaim) -> &[Condition] {
    claim
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default()
}

/// The `reason` of `karpenter_pods_drained_total` for pods evicted from `claim`'s node: the reason of its
/// DisruptionReason condition when that is True (the disruption that chose it), else upstream's
/// `Forceful Termination` (an expiration, an interruption, a `kubectl delete`).
fn drain_reason(claim: &NodeClaim) -> String {
    status_conditions(claim)
        .iter()
        .find(|c| c.type_ == conditions::DISRUPTION_REASON && c.status == ConditionStatus::True)
        .map(|c| {
            if c.reason.is_empty() {
                c.message.clone()
            } else {
                c.reason.clone()
            }
        })
        .unwrap_or_else(|| FORCEFUL_TERMINATION.to_string())
}

fn pod_ref(pod: &CompactPod) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(pod.metadata.namespace.clone().unwrap_or_else(|| "default".into())),
        name: pod.metadata.name.clone(),
        ..ObjectReference::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::catalog::CatalogFile;
    use karpenter_sim::{ApiServer, SimCloudOptions, SimCloudProvider, SystemClock};
    use karpenter_state::ClusterState;
    use kube::Client;
    use kube::api::PostParams;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    const CATALOG: &str = include_str!("../../karpenter-sim/tests/fixtures/catalog.json");

    struct Fixture {
        _server: ApiServer,
        client: Client,
        state: ClusterState,
        cloud: SimCloudProvider,
        terminator: Terminator,
    }

    fn fixture() -> Result<Fixture, Box<dyn std::error::Error>> {
        let server = ApiServer::new(SystemClock);
        let client = server.client();
        let state = ClusterState::default();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let cloud = SimCloudProvider::new(
            CatalogFile::from_json_str(CATALOG)?,
            clock.clone(),
            SimCloudOptions::default(),
        );
        let terminator = Terminator::new(
            ControllerContext::new(client.clone(), state.clone(), clock),
            cloud.as_dyn(),
        );
        Ok(Fixture {
            _server: server,
            client,
            state,
            cloud,
            terminator,
        })
    }

    impl Fixture {
        /// A NodeClaim `name` with the finalizer, launched at the simulated cloud; in the API server only.
        async fn launched_claim(&self, name: &str) -> Result<NodeClaim, Box<dyn std::error::Error>> {
            let claim: NodeClaim = serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name, "finalizers": [labels::TERMINATION_FINALIZER]},
                "spec": {"requirements": [],
                         "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
            }))?;
            let claims: Api<NodeClaim> = Api::all(self.client.clone());
            let created = claims.create(&PostParams::default(), &claim).await?;
            let launched = self.cloud.create(&created).await?;
            let provider_id = launched.status.and_then(|s| s.provider_id);
            let status = json!({"status": {"providerID": provider_id, "nodeName": format!("node-{name}")}});
            Ok(claims
                .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
                .await?)
        }

        /// Node `name` with the finalizer, owned by `owner` when given, then deleted as `kubectl delete node`
        /// does; in the API server only.
        async fn deleted_node(
            &self,
            name: &str,
            provider_id: &str,
            owner: Option<&NodeClaim>,
        ) -> Result<Node, Box<dyn std::error::Error>> {
            let owners: Vec<_> = owner
                .map(|c| {
                    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                                "name": c.name_any(), "uid": c.uid().unwrap_or_default()})
                })
                .into_iter()
                .collect();
            let node: Node = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "finalizers": [labels::TERMINATION_FINALIZER], "ownerReferences": owners},
                "spec": {"providerID": provider_id}
            }))?;
            let nodes: Api<Node> = Api::all(self.client.clone());
            nodes.create(&PostParams::default(), &node).await?;
            nodes.delete(name, &DeleteParams::default()).await?;
            Ok(nodes.get(name).await?)
        }

        /// The cache catches up with the API server on these objects.
        async fn refresh(&self, node: &str, claim: &str) -> Result<(), kube::Error> {
            match Api::<Node>::all(self.client.clone()).get_opt(node).await? {
                Some(n) => self.state.nodes.apply(n.into()),
                None => self.state.nodes.delete(node),
            }
            match Api::<NodeClaim>::all(self.client.clone()).get_opt(claim).await? {
                Some(c) => self.state.node_claims.apply(c),
                None => self.state.node_claims.delete(claim),
            }
            Ok(())
        }
    }

    #[test]
    fn a_terminated_node_records_its_lifetime_by_nodepool() -> Result<(), Box<dyn std::error::Error>> {
        let created: jiff::Timestamp = "2026-01-01T00:00:00Z".parse()?;
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "creationTimestamp": "2026-01-01T00:00:00Z",
                "deletionTimestamp": "2026-01-01T05:00:00Z",
                "labels": {"karpenter.sh/nodepool": "lifetime-pool"}},
        }))?;
        // Five hours and a minute old when its finalizer goes.
        record_node_termination(
            &node,
            None,
            created + jiff::SignedDuration::from_secs(5 * 3600 + 60),
        );
        let text = karpenter_metrics::metrics().encode();
        let bucket = |le: &str| {
            format!(
                "karpenter_nodes_lifetime_duration_seconds_bucket{{le=\"{le}\",nodepool=\"lifetime-pool\"}}"
            )
        };
        let count = |le: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&bucket(le)))
                .map(str::trim)
                .map(str::to_string)
        };
        assert_eq!(count("14400.0").as_deref(), Some("0"), "{text}");
        assert_eq!(count("21600.0").as_deref(), Some("1"), "{text}");
        assert!(
            text.contains(
                "karpenter_nodes_lifetime_duration_seconds_sum{nodepool=\"lifetime-pool\"} 18060.0"
            ),
            "{text}"
        );
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_deleted_node_has_its_claim_deleted_and_goes_only_after_the_instance() -> TestResult {
        let f = fixture()?;
        let claim = f.launched_claim("a").await?;
        let provider_id = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .ok_or("no instance")?;
        f.deleted_node("node-a", &provider_id, Some(&claim)).await?;
        f.refresh("node-a", "a").await?;

        let first = f.terminator.pass().await;
        assert_eq!(first.deleted_for_node, ["a"]);
        let claims: Api<NodeClaim> = Api::all(f.client.clone());
        let nodes: Api<Node> = Api::all(f.client.clone());
        let deleting = claims.get("a").await?;
        assert!(deleting.metadata.deletion_timestamp.is_some());

        // The claim's termination: the instance is asked to go; the Node waits for it.
        f.refresh("node-a", "a").await?;
        let second = f.terminator.pass().await;
        assert!(second.deleted_for_node.is_empty(), "{second:?}");
        assert!(second.released_nodes.is_empty(), "{second:?}");
        assert!(f.cloud.instance(&provider_id).is_some_and(|i| !i.is_running()));
        assert!(nodes.get_opt("node-a").await?.is_some());
        // Each step shows on the claim: drained (it had no pods), no volumes attached, instance going.
        let terminating = claims.get("a").await?;
        for wanted in [
            claim_conditions::DRAINED,
            claim_conditions::VOLUMES_DETACHED,
            claim_conditions::INSTANCE_TERMINATING,
        ] {
            assert!(
                claim_conditions::holds(status_conditions(&terminating), &wanted),
                "{wanted:?} missing: {:?}",
                terminating.status
            );
        }

        // The provider reports the instance gone: the Node is released, then the claim.
        f.refresh("node-a", "a").await?;
        let third = f.terminator.pass().await;
        assert_eq!(third.released_nodes, ["node-a"]);
        assert_eq!(third.terminated, ["a"]);
        assert!(nodes.get_opt("node-a").await?.is_none());
        assert!(claims.get_opt("a").await?.is_none());
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_drained_node_waits_for_the_volume_attachments_the_cache_holds() -> TestResult {
        use k8s_openapi::api::storage::v1::VolumeAttachment;
        let f = fixture()?;
        let claim = f.launched_claim("v").await?;
        let provider_id = claim.status.as_ref().and_then(|s| s.provider_id.clone());
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-v"},
            "spec": {"providerID": provider_id},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))?;
        Api::<Node>::all(f.client.clone())
            .create(&PostParams::default(), &node)
            .await?;
        let claims: Api<NodeClaim> = Api::all(f.client.clone());
        claims.delete("v", &DeleteParams::default()).await?;
        f.refresh("node-v", "v").await?;
        // The attachment is in the cache (the watch's), not asked of the API server on every pass.
        let va: VolumeAttachment = serde_json::from_value(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": "va-1"},
            "spec": {"attacher": "ebs.csi.aws.com", "nodeName": "node-v",
                     "source": {"persistentVolumeName": "pv-1"}}
        }))?;
        f.state.volume_attachments.apply(va);
        let pass = f.terminator.pass().await;
        assert_eq!(pass.awaiting_volumes, ["v: va-1"]);
        assert!(
            f.cloud
                .list()
                .await?
                .iter()
                .any(|c| c.metadata.name.as_deref() == Some("v"))
        );

        f.state.volume_attachments.delete("va-1");
        f.refresh("node-v", "v").await?;
        let pass = f.terminator.pass().await;
        assert!(pass.awaiting_volumes.is_empty(), "{pass:?}");
        assert!(f.cloud.list().await?.is_empty());
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn the_claim_finalizer_goes_even_when_the_cached_list_is_stale() -> TestResult {
        let f = fixture()?;
        f.launched_claim("s").await?;
        let claims: Api<NodeClaim> = Api::all(f.client.clone());
        claims
            .patch(
                "s",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"finalizers": [labels::TERMINATION_FINALIZER, "example.com/other"]}}),
                ),
            )
            .await?;
        claims.delete("s", &DeleteParams::default()).await?;
        // The instance is asked to go.
        f.refresh("node-s", "s").await?;
        assert!(f.terminator.pass().await.terminated.is_empty());
        f.refresh("node-s", "s").await?;
        // The other controller lets go of the claim after the cache read it: writing the rest of the cached
        // list would put its finalizer back, which the API server refuses on an object being deleted.
        claims
            .patch(
                "s",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": [labels::TERMINATION_FINALIZER]}})),
            )
            .await?;
        assert_eq!(f.terminator.pass().await.terminated, ["s"]);
        assert!(claims.get_opt("s").await?.is_none());
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_deleted_node_whose_claim_is_gone_or_never_was_is_released() -> TestResult {
        let f = fixture()?;
        let nodes: Api<Node> = Api::all(f.client.clone());
        f.deleted_node("orphan", "sim:///test-zone-1/i-orphan", None)
            .await?;
        f.refresh("orphan", "none").await?;
        // Owned by a claim the API server no longer has.
        let gone = f.launched_claim("gone").await?;
        let gone_id = gone
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default();
        f.deleted_node("node-gone", &gone_id, Some(&gone)).await?;
        let claims: Api<NodeClaim> = Api::all(f.client.clone());
        claims
            .patch(
                "gone",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await?;
        claims.delete("gone", &DeleteParams::default()).await?;
        f.refresh("node-gone", "gone").await?;

        let mut pass = f.terminator.pass().await;
        pass.released_nodes.sort();
        assert_eq!(pass.released_nodes, ["node-gone", "orphan"]);
        assert!(pass.deleted_for_node.is_empty());
        assert!(nodes.get_opt("orphan").await?.is_none());
        assert!(nodes.get_opt("node-gone").await?.is_none());
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_deleted_node_whose_claim_the_cache_has_not_seen_is_held_for_it() -> TestResult {
        let f = fixture()?;
        let claim = f.launched_claim("unseen").await?;
        let provider_id = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default();
        f.deleted_node("node-unseen", &provider_id, Some(&claim)).await?;
        // Only the Node is in the cache: the owner reference leads to the claim in the API server.
        f.state.nodes.apply(
            Api::<Node>::all(f.client.clone())
                .get("node-unseen")
                .await?
                .into(),
        );

        let pass = f.terminator.pass().await;
        assert_eq!(pass.deleted_for_node, ["unseen"]);
        assert!(pass.released_nodes.is_empty());
        let node = Api::<Node>::all(f.client.clone()).get("node-unseen").await?;
        assert!(has_finalizer(node.finalizers()));
        Ok(())
    }

    /// The simulated cloud, with deletes that take a second each and are counted while under way.
    struct SlowDeletes {
        inner: Arc<dyn CloudProvider>,
        running: std::sync::atomic::AtomicUsize,
        peak: std::sync::atomic::AtomicUsize,
    }

    impl karpenter_core::disruption::drift::DriftProvider for SlowDeletes {
        fn is_drifted(&self, claim: &NodeClaim) -> Option<String> {
            self.inner.is_drifted(claim)
        }
    }

    #[async_trait::async_trait]
    impl CloudProvider for SlowDeletes {
        fn name(&self) -> &'static str {
            "slow-deletes"
        }
        async fn create(
            &self,
            claim: &NodeClaim,
        ) -> Result<NodeClaim, karpenter_core::cloudprovider::CloudProviderError> {
            self.inner.create(claim).await
        }
        async fn delete(
            &self,
            claim: &NodeClaim,
        ) -> Result<(), karpenter_core::cloudprovider::CloudProviderError> {
            use std::sync::atomic::Ordering::SeqCst;
            let now = self.running.fetch_add(1, SeqCst) + 1;
            self.peak.fetch_max(now, SeqCst);
            tokio::time::sleep(Duration::from_secs(1)).await;
            self.running.fetch_sub(1, SeqCst);
            self.inner.delete(claim).await
        }
        async fn get(
            &self,
            provider_id: &str,
        ) -> Result<NodeClaim, karpenter_core::cloudprovider::CloudProviderError> {
            self.inner.get(provider_id).await
        }
        async fn list(&self) -> Result<Vec<NodeClaim>, karpenter_core::cloudprovider::CloudProviderError> {
            self.inner.list().await
        }
        async fn instance_types(
            &self,
            node_pool: &karpenter_api::nodepool::NodePool,
        ) -> Result<
            Vec<karpenter_core::catalog::CatalogInstanceType>,
            karpenter_core::cloudprovider::CloudProviderError,
        > {
            self.inner.instance_types(node_pool).await
        }
        fn repair_policies(&self) -> Vec<karpenter_core::cloudprovider::RepairPolicy> {
            self.inner.repair_policies()
        }
        fn supported_node_classes(&self) -> Vec<karpenter_core::cloudprovider::NodeClassKind> {
            self.inner.supported_node_classes()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_pass_terminates_its_claims_together_up_to_its_concurrency() -> TestResult {
        let f = fixture()?;
        let slow = Arc::new(SlowDeletes {
            inner: f.cloud.as_dyn(),
            running: Default::default(),
            peak: Default::default(),
        });
        let mut terminator = Terminator::new(
            ControllerContext::new(f.client.clone(), f.state.clone(), Arc::new(SystemClock)),
            slow.clone(),
        );
        terminator.concurrency = 4;
        let claims: Api<NodeClaim> = Api::all(f.client.clone());
        let names: Vec<String> = (0..6).map(|i| format!("claim-{i}")).collect();
        for name in &names {
            f.launched_claim(name).await?;
            claims.delete(name, &DeleteParams::default()).await?;
            f.state.node_claims.apply(claims.get(name).await?);
        }
        let started = tokio::time::Instant::now();
        terminator.pass().await;
        // Each instance's termination waits on its own: 4 at once, not one after another (one at a time would
        // never overlap, and six would take six seconds).
        assert_eq!(slow.peak.load(std::sync::atomic::Ordering::SeqCst), 4);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        // Every instance is terminating after the one pass.
        for name in &names {
            let claim = claims.get(name).await?;
            assert!(
                status_conditions(&claim)
                    .iter()
                    .any(|c| c.type_ == conditions::INSTANCE_TERMINATING && c.status == ConditionStatus::True),
                "{name}"
            );
        }
        Ok(())
    }
}
