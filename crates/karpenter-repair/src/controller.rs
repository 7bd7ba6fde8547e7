//! The repair loop: every pass plans over the state cache and carries the plan out: a replacement deletes the
//! NodeClaim, a reboot is committed on it for the reboot controller ([`crate::reboot`]) to carry out (upstream's
//! `commitReboot`).

use std::{sync::Arc, time::Duration};

use jiff::Timestamp;
use karpenter_api::{
    common::ConditionStatus,
    labels,
    nodeclaim::{NodeClaim, conditions, is_rebooting, reboot_reasons},
    nodepool::NodePool,
};
use karpenter_core::{
    clock::Clock,
    cloudprovider::{CloudProvider, RepairAction},
};
use karpenter_state::api_errors::is_not_found;
use karpenter_state::{ControllerContext, events::DedupedRecorder, periodic::run_synced_untimed};
use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
};
use serde_json::json;

use crate::{
    RepairError,
    history::RebootHistory,
    plan::{BlockedGroup, Policies, Repair, plan_repairs_with},
    reboot::{format_grace, with_condition},
};

/// The event reason upstream uses when the circuit breaker holds repairs back.
pub const NODE_REPAIR_BLOCKED: &str = "NodeRepairBlocked";

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairPass {
    /// NodeClaims deleted to replace their unhealthy nodes.
    pub repaired: Vec<String>,
    /// NodeClaims whose nodes are to be rebooted in place (a reboot committed on them).
    pub rebooted: Vec<String>,
    /// Repairs the circuit breaker held back.
    pub blocked: Vec<BlockedGroup>,
}

/// The node repair controller's context.
pub struct NodeRepairController {
    cx: ControllerContext,
    cloud: Arc<dyn CloudProvider>,
    events: DedupedRecorder,
    /// Reboots committed recently, by NodeClaim UID: the third due reboot within a day replaces instead.
    history: tokio::sync::Mutex<RebootHistory>,
    /// Between passes (tokio time). Tolerations are minutes long, so a pass every 10 seconds is on time.
    pub interval: Duration,
}

impl NodeRepairController {
    pub fn new(cx: ControllerContext, cloud: Arc<dyn CloudProvider>) -> Self {
        Self {
            events: cx.recorder(),
            cx,
            cloud,
            history: tokio::sync::Mutex::new(RebootHistory::default()),
            interval: Duration::from_secs(10),
        }
    }

    /// Runs passes until the future is dropped; a failed pass is logged and the next one retries. Returns at
    /// once when the provider has no repair policies (upstream does not start the controller then).
    pub async fn run(&self) {
        if self.cloud.repair_policies().is_empty() && self.cloud.reboot_policies().is_empty() {
            tracing::info!(
                provider = self.cloud.name(),
                "no repair policies: node repair is off"
            );
            return;
        }
        run_synced_untimed(&self.cx.state, self.interval, || async {
            match self.pass().await {
                Ok(pass) if !pass.repaired.is_empty() || !pass.rebooted.is_empty() => {
                    tracing::info!(repaired = ?pass.repaired, rebooted = ?pass.rebooted, "repairing unhealthy nodes")
                }
                Ok(_) | Err(RepairError::NotSynced) => {}
                Err(error) => tracing::warn!(category = error.category(), %error, "node repair pass failed"),
            }
        })
        .await;
    }

    /// One pass over the cache as it is now.
    pub async fn pass(&self) -> Result<RepairPass, RepairError> {
        if !self.cx.state.synced() {
            return Err(RepairError::NotSynced);
        }
        let now = self.cx.clock.now();
        let nodes = self.cx.state.nodes.all();
        let claims = self.cx.state.node_claims.all();
        let budgets: std::collections::HashMap<String, Option<Vec<karpenter_api::nodepool::Budget>>> = self
            .cx
            .state
            .node_pools
            .all()
            .iter()
            .map(|p| {
                (
                    kube::ResourceExt::name_any(p.as_ref()),
                    p.spec.disruption.budgets.clone(),
                )
            })
            .collect();
        let policies = Policies {
            replace: self.cloud.repair_policies(),
            reboot: self.cloud.reboot_policies(),
        };
        let history = {
            let mut history = self.history.lock().await;
            history.prune(now);
            history.clone()
        };
        let plan = plan_repairs_with(
            nodes.iter().map(|n| &**n),
            claims.iter().map(|c| &**c),
            &budgets,
            &policies,
            &|uid| history.recent(uid, now),
            now,
        );
        let mut pass = RepairPass::default();
        for group in &plan.blocked {
            self.report_blocked(group).await;
        }
        for repair in &plan.repairs {
            match repair.action {
                RepairAction::ReplaceNode => {
                    if repair.escalated {
                        tracing::info!(nodeclaim = %repair.node_claim, "rebooted twice within a day and still unhealthy; replacing it");
                    }
                    if self.repair(repair, now).await? {
                        pass.repaired.push(repair.node_claim.clone());
                    }
                }
                RepairAction::RebootNode => {
                    if self.commit_reboot(repair).await? {
                        self.history.lock().await.record(&repair.node_claim_uid, now);
                        pass.rebooted.push(repair.node_claim.clone());
                    }
                }
            }
        }
        pass.blocked = plan.blocked;
        Ok(pass)
    }

    /// Force-terminates the node's NodeClaim: the termination timestamp is set to now, so the drain does not
    /// wait on PodDisruptionBudgets or do-not-disrupt pods for a node that is broken anyway, then the claim is
    /// deleted. Returns false when the claim was already gone.
    async fn repair(&self, repair: &Repair, now: Timestamp) -> Result<bool, RepairError> {
        tracing::info!(node = %repair.node, nodeclaim = %repair.node_claim, condition = %repair.why.condition,
            since = %repair.why.since, "node unhealthy past its toleration; replacing it");
        let claims: Api<NodeClaim> = Api::all(self.cx.client.clone());
        let deadline = Timestamp::from_second(now.as_second()).unwrap_or(now);
        let patch = json!({"metadata": {"annotations": {
            labels::NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION: deadline.to_string()
        }}});
        match claims
            .patch(&repair.node_claim, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        match claims.delete(&repair.node_claim, &DeleteParams::default()).await {
            Ok(_) => {
                let m = karpenter_metrics::metrics();
                let nodepool = repair.node_pool.clone().unwrap_or_default();
                let capacity_type = self
                    .cx
                    .state
                    .node_claims
                    .get(&repair.node_claim)
                    .and_then(|c| {
                        kube::ResourceExt::labels(c.as_ref())
                            .get(labels::CAPACITY_TYPE_LABEL)
                            .cloned()
                    })
                    .unwrap_or_default();
                m.nodeclaims_unhealthy_disrupted
                    .get_or_create(&karpenter_metrics::UnhealthyLabels {
                        condition: repair.why.condition.clone(),
                        nodepool: nodepool.clone(),
                        capacity_type: capacity_type.clone(),
                        image_id: String::new(),
                    })
                    .inc();
                m.nodeclaims_disrupted
                    .get_or_create(&karpenter_metrics::NodeClaimDisruptedLabels {
                        reason: "unhealthy".into(),
                        nodepool,
                        capacity_type,
                    })
                    .inc();
                Ok(true)
            }
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Hands the node to the reboot controller: the drain bound (the policy's, else the NodeClaim's
    /// terminationGracePeriod, else none) as the `karpenter.sh/reboot-termination-grace-period` annotation, then
    /// `DisruptionReason=True` (Unhealthy) and `Rebooting=True` (RebootRequested, naming the condition), both
    /// written conditional on the claim's resourceVersion. Returns false when the claim, read anew, is gone,
    /// being deleted or already rebooting.
    async fn commit_reboot(&self, repair: &Repair) -> Result<bool, RepairError> {
        let claims: Api<NodeClaim> = Api::all(self.cx.client.clone());
        let Some(claim) = claims.get_opt(&repair.node_claim).await? else {
            return Ok(false);
        };
        if is_rebooting(&claim) || claim.metadata.deletion_timestamp.is_some() {
            return Ok(false);
        }
        let grace = repair
            .termination_grace_period
            .or_else(|| claim.spec.termination_grace_period.as_ref().map(|g| g.duration()));
        let annotation = grace.map(format_grace);
        let current = claim
            .annotations()
            .get(labels::REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION)
            .cloned();
        let mut claim = claim;
        if current != annotation {
            let patch = json!({"metadata": {
                "resourceVersion": claim.resource_version(),
                "annotations": {labels::REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION: annotation},
            }});
            claim = match claims
                .patch(&repair.node_claim, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(c) => c,
                Err(e) if is_not_found(&e) => return Ok(false),
                Err(e) => return Err(e.into()),
            };
        }
        let now = self.cx.clock.now();
        let existing = claim
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let conds = with_condition(
            existing,
            (
                conditions::DISRUPTION_REASON,
                ConditionStatus::True,
                "Unhealthy",
                "Unhealthy",
            ),
            now,
        );
        let reason = repair.why.condition.clone();
        let conds = with_condition(
            &conds,
            (
                conditions::REBOOTING,
                ConditionStatus::True,
                reboot_reasons::REQUESTED,
                &format!("rebooting for {reason}"),
            ),
            now,
        );
        let patch = json!({
            "metadata": {"resourceVersion": claim.resource_version()},
            "status": {"conditions": conds},
        });
        match claims
            .patch_status(&repair.node_claim, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        tracing::info!(node = %repair.node, nodeclaim = %repair.node_claim, condition = %repair.why.condition,
            since = %repair.why.since, "node unhealthy past its toleration; committed a reboot");
        Ok(true)
    }

    /// NodeRepairBlocked on the NodePool (when there is one) and on each held-back node.
    async fn report_blocked(&self, group: &BlockedGroup) {
        let message = group.message();
        tracing::warn!(nodepool = ?group.node_pool, unhealthy = group.unhealthy, total = group.total, "{message}");
        if let Some(pool) = group
            .node_pool
            .as_deref()
            .and_then(|p| self.cx.state.node_pools.get(p))
        {
            let reference = NodePool::object_ref(&pool, &());
            self.events.warn(&reference, NODE_REPAIR_BLOCKED, &message).await;
        }
        for held in &group.held {
            if let Some(node) = self.cx.state.nodes.get(&held.node) {
                let reference = node.object_ref();
                self.events.warn(&reference, NODE_REPAIR_BLOCKED, &message).await;
            }
        }
    }
}
