//! The interruption controller. Messages come through core's `InterruptionSource` (the SQS queue on AWS, the
//! simulated cloud in `karpenter simulate`) and are acted on as upstream does:
//! - a spot interruption warning, a scheduled change or a state change (stopping, terminated) deletes the
//!   instance's NodeClaim at once: the terminator taints and drains the Node within PDBs while the instance
//!   still runs, and the provisioner makes room for the evicted pods straight away (no consolidation wait);
//! - a rebalance recommendation deletes nothing (it raises its event only);
//! - a message for an instance no NodeClaim owns is ignored (it is not this cluster's).
//!
//! Kubernetes Events, as upstream raises them ([`events`]): a Warning on the NodeClaim and on its Node for what
//! the message says (`SpotInterrupted`, `InstanceUnhealthy` for a scheduled change,
//! `CapacityReservationInstanceInterrupted`; a Normal `SpotRebalanceRecommendation` for a rebalance
//! recommendation), also when the NodeClaim is already being deleted, and
//! `TerminatingOnInterruption` on both when the message deletes the NodeClaim. Identical events within two
//! minutes are published once (the shared recorder's window).
//!
//! Each message counts in `karpenter_interruption_received_messages_total{message_type}`, and each NodeClaim
//! deleted in `karpenter_nodeclaims_disrupted_total{reason="interrupted"}`. Marking an interrupted spot offering
//! unavailable is the source's part (it knows the provider's offering cache).

pub mod events;

use k8s_openapi::api::core::v1::ObjectReference;
use karpenter_api::{labels, nodeclaim::NodeClaim};
use karpenter_core::cloudprovider::{InterruptionEvent, InterruptionKind};
use karpenter_state::api_errors::is_not_found;
use karpenter_state::{ClusterState, ControllerContext, events::DedupedRecorder};
use kube::{Api, Client, Resource, ResourceExt, api::DeleteParams};

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

/// Upstream's `message_type` label values.
fn message_type(kind: InterruptionKind) -> &'static str {
    match kind {
        InterruptionKind::SpotInterruption => "spot_interrupted",
        InterruptionKind::Rebalance => "rebalance_recommendation",
        InterruptionKind::ScheduledChange => "scheduled_change",
        InterruptionKind::InstanceStopping | InterruptionKind::InstanceTerminating => "instance_state_change",
        InterruptionKind::CapacityReservationInterruption => "capacity_reservation_interrupted",
    }
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
}

impl InterruptionController {
    /// Messages are fed to [`InterruptionController::handle`] by the operator's loop over the source
    /// (`karpenter_operator::controllers`), which also records what was done. Events are timed, and their
    /// two-minute dedupe window measured, by the context's clock (the simulation's virtual one in `simulate`).
    pub fn new(cx: &ControllerContext) -> Self {
        Self {
            client: cx.client.clone(),
            state: cx.state.clone(),
            events: cx.recorder(),
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
        metrics
            .interruption_received_messages
            .get_or_create(&karpenter_metrics::MessageTypeLabels {
                message_type: message_type(event.kind).to_string(),
            })
            .inc();
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
        if event.kind == InterruptionKind::Rebalance || claim.metadata.deletion_timestamp.is_some() {
            return Ok(Handled::Noted);
        }
        let name = claim.name_any();
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
