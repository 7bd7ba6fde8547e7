//! The repair loop: every pass plans over the state cache and carries the plan out.

use std::{sync::Arc, time::Duration};

use jiff::Timestamp;
use karpenter_api::{labels, nodeclaim::NodeClaim, nodepool::NodePool};
use karpenter_core::{clock::Clock, cloudprovider::CloudProvider};
use karpenter_state::api_errors::is_not_found;
use karpenter_state::{ControllerContext, events::DedupedRecorder, periodic::run_synced_untimed};
use kube::{
    Api, Resource,
    api::{DeleteParams, Patch, PatchParams},
};
use serde_json::json;

use crate::{
    RepairError,
    plan::{BlockedGroup, Repair, plan_repairs},
};

/// The event reason upstream uses when the circuit breaker holds repairs back.
pub const NODE_REPAIR_BLOCKED: &str = "NodeRepairBlocked";

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairPass {
    /// NodeClaims deleted to replace their unhealthy nodes.
    pub repaired: Vec<String>,
    /// Repairs the circuit breaker held back.
    pub blocked: Vec<BlockedGroup>,
}

/// The node repair controller's context.
pub struct NodeRepairController {
    cx: ControllerContext,
    cloud: Arc<dyn CloudProvider>,
    events: DedupedRecorder,
    /// Between passes (tokio time). Tolerations are minutes long, so a pass every 10 seconds is on time.
    pub interval: Duration,
}

impl NodeRepairController {
    pub fn new(cx: ControllerContext, cloud: Arc<dyn CloudProvider>) -> Self {
        Self {
            events: cx.recorder(),
            cx,
            cloud,
            interval: Duration::from_secs(10),
        }
    }

    /// Runs passes until the future is dropped; a failed pass is logged and the next one retries. Returns at
    /// once when the provider has no repair policies (upstream does not start the controller then).
    pub async fn run(&self) {
        if self.cloud.repair_policies().is_empty() {
            tracing::info!(
                provider = self.cloud.name(),
                "no repair policies: node repair is off"
            );
            return;
        }
        run_synced_untimed(&self.cx.state, self.interval, || async {
            match self.pass().await {
                Ok(pass) if !pass.repaired.is_empty() => {
                    tracing::info!(repaired = ?pass.repaired, "repairing unhealthy nodes")
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
        let plan = plan_repairs(
            nodes.iter().map(|n| &**n),
            claims.iter().map(|c| &**c),
            &budgets,
            &self.cloud.repair_policies(),
            now,
        );
        let mut pass = RepairPass::default();
        for group in &plan.blocked {
            self.report_blocked(group).await;
        }
        for repair in &plan.repairs {
            if self.repair(repair, now).await? {
                pass.repaired.push(repair.node_claim.clone());
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
