//! The interruption controller. Messages come through core's `InterruptionSource` (on AWS the SQS queue and the
//! instance status poller, the simulated cloud in `karpenter simulate`) and are acted on as upstream does:
//! - a spot interruption warning, a scheduled change or a state change (stopping, terminated) deletes the
//!   instance's NodeClaim at once: the terminator taints and drains the Node within PDBs while the instance
//!   still runs, and the provisioner makes room for the evicted pods straight away (no consolidation wait);
//! - failed instance or system status checks (polled from EC2's DescribeInstanceStatus) terminate the NodeClaim
//!   forcefully: its `karpenter.sh/nodeclaim-termination-timestamp` annotation is set to now (unless it has one)
//!   before it is deleted, so the drain does not wait on disruption budgets for an instance that is broken
//!   anyway, also when the NodeClaim is already being deleted; a scheduled event the poller reports (reboot,
//!   maintenance, retirement, stop) deletes the NodeClaim as a scheduled change does;
//! - a rebalance recommendation deletes nothing (it raises its event only);
//! - a message for an instance no NodeClaim owns is ignored (it is not this cluster's).
//!
//! Kubernetes Events, as upstream raises them ([`events`]): a Warning on the NodeClaim and on its Node for what
//! the message says (`SpotInterrupted`, `InstanceUnhealthy` for a scheduled change and for what the instance
//! status poller reports, `CapacityReservationInstanceInterrupted`; a Normal `SpotRebalanceRecommendation` for
//! a rebalance recommendation), also when the NodeClaim is already being deleted, and
//! `TerminatingOnInterruption` on both when the message deletes the NodeClaim. Identical events within two
//! minutes are published once (the shared recorder's window).
//!
//! Each queue message counts in `karpenter_interruption_received_messages_total{message_type}` (what the
//! instance status poller reports does not: upstream counts it in
//! `karpenter_interruption_instance_status_unhealthy_total`, the poller's), and each NodeClaim deleted in
//! `karpenter_nodeclaims_disrupted_total{reason="interrupted"}`. Marking an interrupted spot offering
//! unavailable is the source's part (it knows the provider's offering cache).

pub mod events;

use k8s_openapi::api::core::v1::ObjectReference;
use std::sync::Arc;

use karpenter_api::{labels, nodeclaim::NodeClaim};
use karpenter_core::clock::Clock;
use karpenter_core::cloudprovider::{InterruptionEvent, InterruptionKind};
use karpenter_state::api_errors::is_not_found;
use karpenter_state::{ClusterState, ControllerContext, events::DedupedRecorder};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};

use crate::events::{InterruptionEventText, TERMINATING_ON_INTERRUPTION, kind_event};

/// What the controller did with one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// The NodeClaim (named) was deleted.
    Deleted(String),
    /// Informational (rebalance recommendation), or the NodeClaim is already being deleted.
    Noted,
    /// No NodeClaim owns the instance.
    NotOurs,
}

/// Upstream's `message_type` label values; None for what is polled rather than received from a queue.
fn message_type(kind: InterruptionKind) -> Option<&'static str> {
    Some(match kind {
        InterruptionKind::SpotInterruption => "spot_interrupted",
        InterruptionKind::Rebalance => "rebalance_recommendation",
        InterruptionKind::ScheduledChange => "scheduled_change",
        InterruptionKind::InstanceStopping | InterruptionKind::InstanceTerminating => "instance_state_change",
        InterruptionKind::CapacityReservationInterruption => "capacity_reservation_interrupted",
        InterruptionKind::InstanceStatusImpaired
        | InterruptionKind::SystemStatusImpaired
        | InterruptionKind::ScheduledEvent => return None,
    })
}

/// Whether `kind` terminates the NodeClaim forcefully (upstream's `ForcefulTermination`): the instance failed
/// its status checks, so waiting on disruption budgets to drain it helps nobody.
fn forceful(kind: InterruptionKind) -> bool {
    matches!(
        kind,
        InterruptionKind::InstanceStatusImpaired | InterruptionKind::SystemStatusImpaired
    )
}

/// Whether a NodeClaim's providerID names the instance a message is about. Messages may carry the full
/// provider ID (the simulated cloud) or only the instance ID (EC2's EventBridge events: `i-0abc...`, while the
/// providerID is `aws:///us-east-1a/i-0abc...`).
fn same_instance(provider_id: &str, event_id: &str) -> bool {
    provider_id == event_id || (!event_id.contains('/') && provider_id.rsplit('/').next() == Some(event_id))
}

/// The controller's context.
pub struct InterruptionController {
    client: Client,
    state: ClusterState,
    events: DedupedRecorder,
    clock: Arc<dyn Clock>,
}

impl InterruptionController {
    /// Messages are fed to [`InterruptionController::handle`] by the operator's loop over the source
    /// (`karpenter_operator::controllers`), which also records what was done. Events are timed, and their
    /// two-minute dedupe window measured, by the context's clock (the simulation's virtual one in `simulate`),
    /// which also dates a forceful termination.
    pub fn new(cx: &ControllerContext) -> Self {
        Self {
            client: cx.client.clone(),
            state: cx.state.clone(),
            events: cx.recorder(),
            clock: Arc::clone(&cx.clock),
        }
    }

    /// Publishes `text` on `claim` and on its Node, when the cache has one.
    async fn publish(&self, claim: &NodeClaim, text: InterruptionEventText) {
        let publish = |regarding: ObjectReference, message: &'static str| async move {
            if text.warning {
                self.events.warn(&regarding, text.reason, message).await
            } else {
                self.events.normal(&regarding, text.reason, message).await
            }
        };
        publish(claim.object_ref(&()), text.node_claim_message).await;
        if let Some(node) = self.node_of(claim) {
            publish(node, text.node_message).await;
        }
    }

    /// The Node `claim` registered as, from the cache (its uid included, when known).
    fn node_of(&self, claim: &NodeClaim) -> Option<ObjectReference> {
        let name = claim.status.as_ref()?.node_name.as_deref()?;
        Some(match self.state.nodes.get(name) {
            Some(node) => node.object_ref(),
            // Not watched yet: the name alone still files the event under the Node.
            None => ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(name.to_string()),
                ..ObjectReference::default()
            },
        })
    }

    pub async fn handle(&self, event: &InterruptionEvent) -> Result<Handled, kube::Error> {
        let metrics = karpenter_metrics::metrics();
        if let Some(message_type) = message_type(event.kind) {
            metrics
                .interruption_received_messages
                .get_or_create(&karpenter_metrics::MessageTypeLabels {
                    message_type: message_type.to_string(),
                })
                .inc();
        }
        let claim = self.state.node_claims.all().into_iter().find(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|p| same_instance(p, &event.provider_id))
        });
        let Some(claim) = claim else {
            return Ok(Handled::NotOurs);
        };
        self.publish(&claim, kind_event(event.kind)).await;
        let name = claim.name_any();
        if forceful(event.kind) && !self.annotate_termination_timestamp(&claim).await? {
            return Ok(Handled::Noted);
        }
        if event.kind == InterruptionKind::Rebalance || claim.metadata.deletion_timestamp.is_some() {
            return Ok(Handled::Noted);
        }
        match Api::<NodeClaim>::all(self.client.clone())
            .delete(&name, &DeleteParams::default())
            .await
        {
            Ok(_) => {
                self.publish(&claim, TERMINATING_ON_INTERRUPTION).await;
                let label = |key: &str| claim.labels().get(key).cloned().unwrap_or_default();
                metrics
                    .nodeclaims_disrupted
                    .get_or_create(&karpenter_metrics::NodeClaimDisruptedLabels {
                        reason: "interrupted".into(),
                        nodepool: label(labels::NODEPOOL_LABEL),
                        capacity_type: label(labels::CAPACITY_TYPE_LABEL),
                    })
                    .inc();
                Ok(Handled::Deleted(name))
            }
            Err(e) if is_not_found(&e) => Ok(Handled::Noted),
            Err(e) => Err(e),
        }
    }

    /// Sets `claim`'s termination timestamp to now unless it has one, so its drain does not wait on
    /// disruption budgets (the terminator drains by the earlier of it and the grace period). False when the
    /// claim is gone.
    async fn annotate_termination_timestamp(&self, claim: &NodeClaim) -> Result<bool, kube::Error> {
        if claim
            .annotations()
            .contains_key(labels::NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION)
        {
            return Ok(true);
        }
        let now = self.clock.now();
        let now = jiff::Timestamp::from_second(now.as_second()).unwrap_or(now);
        let patch = serde_json::json!({"metadata": {"annotations": {
            labels::NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION: now.to_string()
        }}});
        match Api::<NodeClaim>::all(self.client.clone())
            .patch(&claim.name_any(), &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::same_instance;

    #[test]
    fn messages_match_by_full_provider_id_or_bare_instance_id() {
        let id = "aws:///us-east-1a/i-0123456789abcdef0";
        assert!(same_instance(id, id));
        assert!(same_instance(id, "i-0123456789abcdef0"));
        assert!(!same_instance(id, "i-0123456789abcdef1"));
        assert!(!same_instance(id, "aws:///us-east-1b/i-0123456789abcdef0"));
        assert!(!same_instance("sim://a/i-1", "sim://b/i-1"));
    }
}
