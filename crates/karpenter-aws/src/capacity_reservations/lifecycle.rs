//! What happens to nodes in a capacity reservation as the reservation ends (ReservedCapacity gate), checked
//! every [`LIFECYCLE_INTERVAL`]:
//! - a NodeClaim launched into a capacity block is deleted [`CAPACITY_BLOCK_EXPIRATION_WINDOW`] before the
//!   block ends, so its pods move while the instance still runs (EC2 reclaims it at the end);
//! - a NodeClaim labelled `karpenter.sh/capacity-type: reserved` whose reservation is no longer active becomes
//!   `on-demand` (its Node too) and loses the `karpenter.k8s.aws/capacity-reservation-*` labels: the instance
//!   keeps running, now billed as on-demand, and scheduling and consolidation must price it that way.
//!
//! Whether a reservation is active is read from the `status.capacityReservations` of the NodeClaim's
//! EC2NodeClass, which the EC2NodeClass controller refreshes every minute from EC2 (keeping the previous list
//! when EC2 cannot be asked). A NodeClaim whose class is missing or not yet resolved is left alone.
//! [`reservation_actions`] decides, [`reconcile`] carries the decisions out and records a Kubernetes Event on
//! each NodeClaim it changed ([`ReservationAction::event`]). Upstream records none here, so the reasons are
//! this crate's: `CapacityReservationEnded` and `CapacityBlockExpiring`. Both are Warnings: the first changes
//! what the node costs, the second takes it away.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::ec2nodeclass::{
    CapacityReservation, CapacityReservationState, CapacityReservationType, EC2NodeClass,
};
use karpenter_api::labels::{
    AWS_CAPACITY_RESERVATION_ID_LABEL, AWS_CAPACITY_RESERVATION_INTERRUPTIBLE_LABEL,
    AWS_CAPACITY_RESERVATION_TYPE_LABEL, AWS_GROUP, CAPACITY_TYPE_LABEL, CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
};
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_core::clock::Clock;
use karpenter_state::api_errors::ignore_not_found;
use karpenter_state::events::DedupedRecorder;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::CAPACITY_BLOCK_EXPIRATION_WINDOW;
use crate::error::AwsError;

/// How often reserved NodeClaims are checked (upstream: every minute).
pub const LIFECYCLE_INTERVAL: Duration = Duration::from_secs(60);
/// The field manager of the relabelling patches.
pub const FIELD_MANAGER: &str = "karpenter-capacityreservation";

/// Reason of the Event on a NodeClaim relabelled to on-demand.
pub const RESERVATION_ENDED_REASON: &str = "CapacityReservationEnded";
/// Reason of the Event on a NodeClaim deleted before its capacity block ends.
pub const CAPACITY_BLOCK_EXPIRING_REASON: &str = "CapacityBlockExpiring";

/// What the loop works with.
pub struct ReservationLifecycleContext {
    pub client: kube::Client,
    pub clock: Arc<dyn Clock>,
    pub events: DedupedRecorder,
}

impl ReservationLifecycleContext {
    /// A context whose Events are published through `client` and deduplicated on `clock`.
    pub fn new(client: kube::Client, clock: Arc<dyn Clock>) -> Self {
        let events = DedupedRecorder::new(client.clone(), Arc::clone(&clock));
        Self {
            client,
            clock,
            events,
        }
    }
}

/// What to do with one NodeClaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReservationAction {
    /// Its reservation is no longer active: relabel it and its Node (if registered) to on-demand.
    Demote {
        node_claim: String,
        node: Option<String>,
        reservation_id: String,
    },
    /// Its capacity block ends within [`CAPACITY_BLOCK_EXPIRATION_WINDOW`]: delete it.
    Expire {
        node_claim: String,
        reservation_id: String,
        ends_at: Timestamp,
    },
}

impl ReservationAction {
    /// The NodeClaim the action is about.
    pub fn node_claim(&self) -> &str {
        match self {
            Self::Demote { node_claim, .. } | Self::Expire { node_claim, .. } => node_claim,
        }
    }

    /// The Event's reason and message once the action is carried out.
    pub fn event(&self) -> (&'static str, String) {
        match self {
            Self::Demote { reservation_id, .. } => (
                RESERVATION_ENDED_REASON,
                format!(
                    "Capacity reservation {reservation_id} is no longer active; the instance keeps running as \
                     on-demand capacity"
                ),
            ),
            Self::Expire {
                reservation_id,
                ends_at,
                ..
            } => (
                CAPACITY_BLOCK_EXPIRING_REASON,
                format!(
                    "Capacity block {reservation_id} ends at {ends_at}; deleting the NodeClaim so its pods \
                     move before EC2 reclaims the instance"
                ),
            ),
        }
    }
}

fn label<'a>(claim: &'a NodeClaim, key: &str) -> Option<&'a str> {
    claim.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// The actions for `claims` at `now`, given every EC2NodeClass: see the module documentation. NodeClaims being
/// deleted are skipped (an expired one stays until its instance is gone).
pub fn reservation_actions(
    claims: &[NodeClaim],
    classes: &[EC2NodeClass],
    now: Timestamp,
) -> Vec<ReservationAction> {
    let reservations_of: BTreeMap<&str, &[CapacityReservation]> = classes
        .iter()
        .filter_map(|class| {
            let status = class.status.as_ref()?;
            Some((
                class.metadata.name.as_deref()?,
                status.capacity_reservations.as_slice(),
            ))
        })
        .collect();
    let mut actions = Vec::new();
    for claim in claims {
        if claim.metadata.deletion_timestamp.is_some()
            || claim.spec.node_class_ref.group != AWS_GROUP
            || label(claim, CAPACITY_TYPE_LABEL) != Some(CAPACITY_TYPE_RESERVED)
        {
            continue;
        }
        let (Some(reservation_id), Some(reservations)) = (
            label(claim, AWS_CAPACITY_RESERVATION_ID_LABEL),
            reservations_of.get(claim.spec.node_class_ref.name.as_str()),
        ) else {
            continue;
        };
        let reservation = reservations.iter().find(|r| r.id == reservation_id);
        let block_end = reservation
            .filter(|r| r.reservation_type == CapacityReservationType::CapacityBlock)
            .and_then(|r| r.end_time.as_ref())
            .map(|end| end.0);
        if let Some(ends_at) = block_end
            && ends_at.duration_since(now) <= CAPACITY_BLOCK_EXPIRATION_WINDOW
        {
            actions.push(ReservationAction::Expire {
                node_claim: claim.name_any(),
                reservation_id: reservation_id.to_string(),
                ends_at,
            });
        } else if reservation.is_none_or(|r| r.state != CapacityReservationState::Active) {
            actions.push(ReservationAction::Demote {
                node_claim: claim.name_any(),
                node: claim.status.as_ref().and_then(|s| s.node_name.clone()),
                reservation_id: reservation_id.to_string(),
            });
        }
    }
    actions
}

/// The labels of an on-demand instance: capacity type on-demand, no reservation labels.
fn on_demand_labels_patch() -> serde_json::Value {
    json!({"metadata": {"labels": {
        CAPACITY_TYPE_LABEL: CAPACITY_TYPE_ON_DEMAND,
        AWS_CAPACITY_RESERVATION_ID_LABEL: null,
        AWS_CAPACITY_RESERVATION_TYPE_LABEL: null,
        AWS_CAPACITY_RESERVATION_INTERRUPTIBLE_LABEL: null,
    }}})
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LifecycleOutcome {
    /// NodeClaims relabelled to on-demand.
    pub demoted: Vec<String>,
    /// NodeClaims deleted before their capacity block ends.
    pub expired: Vec<String>,
}

/// One pass: reads NodeClaims and EC2NodeClasses and carries out [`reservation_actions`]. An object deleted in
/// the meantime is not an error.
pub async fn reconcile(ctx: &ReservationLifecycleContext) -> Result<LifecycleOutcome, AwsError> {
    let claims_api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let nodes_api: Api<Node> = Api::all(ctx.client.clone());
    let claims = claims_api.list(&ListParams::default()).await?.items;
    let classes = Api::<EC2NodeClass>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let patch = on_demand_labels_patch();
    let params = PatchParams::apply(FIELD_MANAGER);
    let mut outcome = LifecycleOutcome::default();
    for action in reservation_actions(&claims, &classes, ctx.clock.now()) {
        let found = match &action {
            ReservationAction::Demote {
                node_claim,
                node,
                reservation_id,
            } => {
                // The Node first: once the NodeClaim is relabelled it is not picked again, so a Node left
                // behind would stay `reserved`.
                if let Some(node) = node {
                    found(nodes_api.patch(node, &params, &Patch::Merge(&patch)).await)?;
                }
                let found = found(claims_api.patch(node_claim, &params, &Patch::Merge(&patch)).await)?;
                tracing::info!(
                    nodeclaim = %node_claim, reservation = %reservation_id,
                    "capacity reservation no longer active; relabelled the NodeClaim as on-demand"
                );
                outcome.demoted.push(node_claim.clone());
                found
            }
            ReservationAction::Expire {
                node_claim,
                reservation_id,
                ends_at,
            } => {
                let found = found(claims_api.delete(node_claim, &DeleteParams::default()).await)?;
                tracing::info!(
                    nodeclaim = %node_claim, reservation = %reservation_id, ends_at = %ends_at,
                    "capacity block ends soon; deleted its NodeClaim"
                );
                outcome.expired.push(node_claim.clone());
                found
            }
        };
        // A NodeClaim deleted meanwhile has nothing left to explain the change to.
        if found && let Some(claim) = claims.iter().find(|c| c.name_any() == action.node_claim()) {
            let (reason, message) = action.event();
            ctx.events.warn(&claim.object_ref(&()), reason, &message).await;
        }
    }
    Ok(outcome)
}

/// Whether the object was there: a 404 is not an error (it was deleted meanwhile).
fn found<T>(result: Result<T, kube::Error>) -> Result<bool, AwsError> {
    Ok(ignore_not_found(result)?.is_some())
}

/// [`reconcile`] every [`LIFECYCLE_INTERVAL`] until dropped; a failed pass is logged and retried next time.
pub async fn run(ctx: ReservationLifecycleContext) {
    let mut ticks = tokio::time::interval(LIFECYCLE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if let Err(err) = reconcile(&ctx).await {
            tracing::warn!(error = %err, category = err.category(), "capacity reservation lifecycle pass");
        }
    }
}

#[cfg(test)]
mod tests;
