//! The NodeOverlay status controller (upstream's nodeoverlay.controller, feature gate NodeOverlay): every 5
//! seconds, while NodeOverlays exist, it judges them all with core's [`node_overlay_verdicts`] over the NodePools
//! the provisioner launches for and the instance types the cloud provider offers them (the inputs, and the rule,
//! by which the scheduler applies overlays, so an overlay reported in conflict is one the scheduler leaves out),
//! and writes on each overlay
//! - `ValidationSucceeded`: True, or False with reason `RuntimeValidation` (the fields at fault) or `Conflict`
//!   (the overlay of the same weight that takes precedence, and what they both change);
//! - `Ready`: follows it (the root condition over ValidationSucceeded, as the NodePool's);
//!
//! through the status subresource with a merge patch, and only when something changed: a condition whose status
//! stays keeps its lastTransitionTime, and observedGeneration is the overlay's generation.

use std::{sync::Arc, time::Duration};

use jiff::Timestamp;
use karpenter_api::{
    common::{Condition, ConditionStatus},
    label_policy::LabelPolicy,
    nodeoverlay::{NodeOverlay, conditions, reasons},
};
use karpenter_core::{
    clock::Clock,
    cloudprovider::CloudProvider,
    snapshot::{OverlayProblem, OverlayVerdict, node_overlay_verdicts},
};
use karpenter_state::api_errors::is_not_found;
use karpenter_state::{ControllerContext, periodic::run_synced};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::json;

use crate::{
    ProvisionerError,
    catalog::catalog_for,
    nodepool_conditions::{WantedCondition, merge_conditions, ready},
    provisioner::managed_pools,
};

/// The NodeOverlay status controller's context.
pub struct NodeOverlayStatusController {
    cx: ControllerContext,
    cloud: Arc<dyn CloudProvider>,
    /// The label rules validation applies (the provisioner's `BuildOptions::label_policy`).
    label_policy: LabelPolicy,
    /// Between passes (tokio time).
    pub interval: Duration,
}

impl NodeOverlayStatusController {
    pub fn new(cx: ControllerContext, cloud: Arc<dyn CloudProvider>, label_policy: LabelPolicy) -> Self {
        Self {
            cx,
            cloud,
            label_policy,
            interval: Duration::from_secs(5),
        }
    }

    /// Runs passes until the future is dropped; a failed pass is logged and the next one retries.
    pub async fn run(&self) {
        run_synced(&self.cx.state, "nodeoverlay.controller", self.interval, || async {
            match self.pass().await {
                Ok(patched) => {
                    if !patched.is_empty() {
                        tracing::info!(controller = "nodeoverlay.controller", ?patched, "wrote NodeOverlay statuses");
                    }
                    true
                }
                Err(error) => {
                    tracing::warn!(controller = "nodeoverlay.controller", category = error.category(), %error, "NodeOverlay status pass failed");
                    false
                }
            }
        })
        .await;
    }

    /// One pass over every NodeOverlay in the cache; the names of those whose status was written.
    pub async fn pass(&self) -> Result<Vec<String>, ProvisionerError> {
        if !self.cx.state.synced() {
            return Err(ProvisionerError::NotSynced);
        }
        let mut snapshot = self.cx.state.node_overlay_snapshot();
        if snapshot.node_overlays.is_empty() {
            return Ok(Vec::new());
        }
        snapshot.node_pools = managed_pools(&snapshot, self.cloud.as_ref());
        let catalog = catalog_for(self.cloud.as_ref(), &snapshot.node_pools).await?;
        let verdicts = node_overlay_verdicts(&snapshot, &catalog, self.label_policy);

        let now = self.cx.clock.now();
        let now = Timestamp::from_second(now.as_second()).unwrap_or(now);
        let api: Api<NodeOverlay> = Api::all(self.cx.client.clone());
        let mut patched = Vec::new();
        for (overlay, verdict) in snapshot.node_overlays.iter().zip(&verdicts) {
            if overlay.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let current = overlay
                .status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default();
            let wanted = overlay_conditions(&current, verdict, overlay.metadata.generation, now);
            if wanted == current {
                continue;
            }
            let name = overlay.name_any();
            let encoded = serde_json::to_value(&wanted).map_err(|source| ProvisionerError::Encode {
                what: "NodeOverlay conditions".to_string(),
                source,
            })?;
            let patch = json!({"status": {"conditions": encoded}});
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => patched.push(name),
                // Deleted since the cache saw it.
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(patched)
    }
}

/// The overlay's conditions given `current` ones and its verdict: ValidationSucceeded and Ready replaced, every
/// other condition kept.
pub fn overlay_conditions(
    current: &[Condition],
    verdict: &OverlayVerdict,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let failed = |reason: &str, message: &str| WantedCondition {
        type_: conditions::VALIDATION_SUCCEEDED,
        status: ConditionStatus::False,
        reason: reason.to_string(),
        message: message.to_string(),
    };
    let validation = match &verdict.result {
        Ok(()) => WantedCondition {
            type_: conditions::VALIDATION_SUCCEEDED,
            status: ConditionStatus::True,
            reason: conditions::VALIDATION_SUCCEEDED.to_string(),
            message: String::new(),
        },
        Err(OverlayProblem::RuntimeValidation(message)) => failed(reasons::RUNTIME_VALIDATION, message),
        Err(OverlayProblem::Conflict { message, .. }) => failed(reasons::CONFLICT, message),
    };
    let root = ready(&[&validation]);
    merge_conditions(current, vec![validation, root], generation, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn find<'a>(conditions: &'a [Condition], type_: &str) -> &'a Condition {
        conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn a_conflict_is_false_on_both_conditions_and_an_unchanged_verdict_rewrites_nothing() {
        let conflict = OverlayVerdict {
            name: "a".into(),
            result: Err(OverlayProblem::Conflict {
                with: "b".into(),
                message: "conflicts with NodeOverlay \"b\"".into(),
            }),
        };
        let first = overlay_conditions(&[], &conflict, Some(3), at("2026-01-01T00:00:00Z"));
        let v = find(&first, conditions::VALIDATION_SUCCEEDED);
        assert_eq!(
            (v.status, v.reason.as_str(), v.message.as_str()),
            (
                ConditionStatus::False,
                "Conflict",
                "conflicts with NodeOverlay \"b\""
            )
        );
        assert_eq!(v.observed_generation, Some(3));
        assert_eq!(find(&first, conditions::READY).status, ConditionStatus::False);

        let again = overlay_conditions(&first, &conflict, Some(3), at("2026-01-01T01:00:00Z"));
        assert_eq!(again, first, "nothing changed, so nothing to write");

        let fixed = OverlayVerdict {
            name: "a".into(),
            result: Ok(()),
        };
        let after = overlay_conditions(&again, &fixed, Some(4), at("2026-01-01T02:00:00Z"));
        let r = find(&after, conditions::READY);
        assert_eq!(r.status, ConditionStatus::True);
        assert_eq!(r.last_transition_time.0, at("2026-01-01T02:00:00Z"));
    }

    #[test]
    fn a_runtime_validation_failure_names_the_field() {
        let bad = OverlayVerdict {
            name: "a".into(),
            result: Err(OverlayProblem::RuntimeValidation(
                "spec.priceAdjustment: must be a signed amount".into(),
            )),
        };
        let c = overlay_conditions(&[], &bad, None, at("2026-01-01T00:00:00Z"));
        let v = find(&c, conditions::VALIDATION_SUCCEEDED);
        assert_eq!(
            (v.status, v.reason.as_str()),
            (ConditionStatus::False, "RuntimeValidation")
        );
        assert!(v.message.starts_with("spec.priceAdjustment"));
    }
}
