//! The NodeClaim consistency controller (upstream's nodeclaim.consistency): each launched NodeClaim is checked
//! against its Node at most once per [`SCAN_PERIOD`] (10 minutes, upstream's), with core's checks
//! ([`karpenter_core::consistency`]: the node shape of an initialized claim, and for a claim being deleted the
//! PodDisruptionBudget that blocks its drain). Each issue is a `FailedConsistencyCheck` Warning event on the
//! claim, and the claim's `ConsistentStateFound` condition is False (`ConsistencyCheckFailed`) while issues
//! remain, True once a check finds none.
//!
//! As upstream, the scan time is taken before the Node is looked up: a claim whose Node has not registered yet
//! is checked again a period later. The condition is written with the claim's resourceVersion, so a write
//! racing the lifecycle's fails and the claim is checked again on the next pass instead of losing a condition.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::{api::core::v1::ObjectReference, apimachinery::pkg::apis::meta::v1::Time};
use karpenter_api::{
    common::{Condition, ConditionStatus, find_condition},
    nodeclaim::NodeClaim,
};
use karpenter_core::{
    clock::Clock,
    consistency::{
        CONSISTENCY_CHECK_FAILED, CONSISTENCY_CHECK_FAILED_MESSAGE, CONSISTENT_STATE_FOUND,
        FAILED_CONSISTENCY_CHECK, consistency_issues,
    },
    snapshot::CompactNode,
};
use karpenter_state::api_errors::ignore_not_found;
use karpenter_state::{ControllerContext, events::DedupedRecorder, periodic::run_synced};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::json;

use crate::ProvisionerError;

/// How often one claim is checked.
pub const SCAN_PERIOD: SignedDuration = SignedDuration::from_mins(10);

/// What one pass did, by claim name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsistencyPass {
    /// Claims checked against their Node.
    pub checked: Vec<String>,
    /// Claims a check found issues with.
    pub inconsistent: Vec<String>,
}

/// The consistency controller's context.
pub struct ConsistencyController {
    cx: ControllerContext,
    events: DedupedRecorder,
    /// When each claim (by UID) was last scanned.
    scanned: std::sync::Mutex<HashMap<String, Timestamp>>,
    /// Between passes (tokio time); a claim is still checked only once per [`SCAN_PERIOD`].
    pub interval: Duration,
}

impl ConsistencyController {
    pub fn new(cx: ControllerContext) -> Self {
        Self {
            events: cx.recorder(),
            cx,
            scanned: std::sync::Mutex::new(HashMap::new()),
            interval: Duration::from_secs(10),
        }
    }

    /// Runs passes until the future is dropped.
    pub async fn run(&self) {
        run_synced(&self.cx.state, "nodeclaim.consistency", self.interval, || async {
            self.pass().await;
            true
        })
        .await;
    }

    /// Checks every launched claim whose period is up; errors are logged per claim.
    pub async fn pass(&self) -> ConsistencyPass {
        let now = self.cx.clock.now();
        let mut done = ConsistencyPass::default();
        let nodes: HashMap<String, Arc<CompactNode>> = self
            .cx
            .state
            .nodes
            .filter(|_| true)
            .into_iter()
            .filter_map(|n| Some((n.spec.as_ref()?.provider_id.clone()?, n)))
            .collect();
        let claims = self.cx.state.node_claims.all();
        let mut live = HashSet::new();
        for claim in &claims {
            let uid = claim.uid().unwrap_or_else(|| claim.name_any());
            live.insert(uid.clone());
            let Some(provider_id) = claim.status.as_ref().and_then(|s| s.provider_id.clone()) else {
                continue;
            };
            if !self.due(&uid, now) {
                continue;
            }
            let Some(node) = nodes.get(&provider_id) else {
                continue;
            };
            let name = claim.name_any();
            done.checked.push(name.clone());
            // The pods and budgets matter only to the termination check, for a claim being deleted.
            let (pods, pdbs) = if claim.metadata.deletion_timestamp.is_some() {
                let node_name = node.name_any();
                let pods = self.cx.state.pods.filter(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node_name.as_str())
                });
                (pods, self.cx.state.pdbs.all())
            } else {
                (Vec::new(), Vec::new())
            };
            let issues = consistency_issues(claim, node, &pods, &pdbs);
            if !issues.is_empty() {
                done.inconsistent.push(name.clone());
            }
            if let Err(error) = self.report(claim, &issues, now).await {
                tracing::warn!(nodeclaim = %name, category = error.category(), %error, "consistency condition not written");
                // Checked again on the next pass rather than a period later.
                if let Ok(mut scanned) = self.scanned.lock() {
                    scanned.remove(&uid);
                }
            }
        }
        if let Ok(mut scanned) = self.scanned.lock() {
            scanned.retain(|uid, _| live.contains(uid));
        }
        done
    }

    /// Whether the claim's period is up; if so, it starts a new one at `now`.
    fn due(&self, uid: &str, now: Timestamp) -> bool {
        let Ok(mut scanned) = self.scanned.lock() else {
            return false;
        };
        if !period_up(scanned.get(uid).copied(), now) {
            return false;
        }
        scanned.insert(uid.to_string(), now);
        true
    }

    async fn report(
        &self,
        claim: &NodeClaim,
        issues: &[String],
        now: Timestamp,
    ) -> Result<(), ProvisionerError> {
        let name = claim.name_any();
        let regarding = ObjectReference {
            api_version: Some("karpenter.sh/v1".into()),
            kind: Some("NodeClaim".into()),
            name: Some(name.clone()),
            uid: claim.uid(),
            ..ObjectReference::default()
        };
        for issue in issues {
            tracing::error!(nodeclaim = %name, issue = %issue, "consistency error");
            self.events
                .warn(&regarding, FAILED_CONSISTENCY_CHECK, issue)
                .await;
        }
        let existing = claim
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let Some(conditions) = consistency_condition(&existing, issues.is_empty(), now) else {
            return Ok(());
        };
        let api: Api<NodeClaim> = Api::all(self.cx.client.clone());
        let patch = json!({
            "metadata": {"resourceVersion": claim.resource_version()},
            "status": {"conditions": conditions},
        });
        ignore_not_found(
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await,
        )?;
        Ok(())
    }
}

/// Whether a claim last scanned at `last` (never: `None`) is due at `now`.
pub fn period_up(last: Option<Timestamp>, now: Timestamp) -> bool {
    last.is_none_or(|last| now.duration_since(last) >= SCAN_PERIOD)
}

/// The claim's conditions with `ConsistentStateFound` set for a check that found issues (`consistent` false) or
/// none; `None` when nothing changes (a consistent claim that is already True keeps its condition as it is).
pub fn consistency_condition(
    existing: &[Condition],
    consistent: bool,
    now: Timestamp,
) -> Option<Vec<Condition>> {
    let current = find_condition(existing, CONSISTENT_STATE_FOUND);
    let (status, reason, message) = if consistent {
        if current.is_some_and(|c| c.status == ConditionStatus::True) {
            return None;
        }
        (ConditionStatus::True, CONSISTENT_STATE_FOUND, "")
    } else {
        (
            ConditionStatus::False,
            CONSISTENCY_CHECK_FAILED,
            CONSISTENCY_CHECK_FAILED_MESSAGE,
        )
    };
    if current.is_some_and(|c| c.status == status && c.reason == reason && c.message == message) {
        return None;
    }
    let mut out = existing.to_vec();
    match out.iter_mut().find(|c| c.type_ == CONSISTENT_STATE_FOUND) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = Time(now);
            }
            c.status = status;
            c.reason = reason.to_string();
            c.message = message.to_string();
        }
        None => out.push(Condition {
            type_: CONSISTENT_STATE_FOUND.to_string(),
            status,
            observed_generation: None,
            last_transition_time: Time(now),
            reason: reason.to_string(),
            message: message.to_string(),
        }),
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap_or(Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn the_condition_follows_the_checks_and_is_written_only_when_it_changes() {
        let t0 = at("2026-01-01T00:00:00Z");
        let t1 = at("2026-01-01T00:10:00Z");
        let first = consistency_condition(&[], true, t0).unwrap_or_default();
        assert_eq!(first.len(), 1);
        assert_eq!(
            (first[0].status, first[0].reason.as_str()),
            (ConditionStatus::True, CONSISTENT_STATE_FOUND)
        );
        assert_eq!(consistency_condition(&first, true, t1), None);
        let failed = consistency_condition(&first, false, t1).unwrap_or_default();
        assert_eq!(
            (
                failed[0].status,
                failed[0].reason.as_str(),
                failed[0].message.as_str()
            ),
            (
                ConditionStatus::False,
                "ConsistencyCheckFailed",
                "Consistency Check Failed"
            )
        );
        assert_eq!(failed[0].last_transition_time, Time(t1));
        assert_eq!(consistency_condition(&failed, false, t1), None);
    }

    #[test]
    fn a_claim_is_scanned_once_per_period() {
        let t0 = at("2026-01-01T00:00:00Z");
        assert!(period_up(None, t0));
        assert!(!period_up(Some(t0), at("2026-01-01T00:09:59Z")));
        assert!(period_up(Some(t0), at("2026-01-01T00:10:00Z")));
    }
}
