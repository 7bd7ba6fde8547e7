//! The `Consolidatable` condition: a NodeClaim may be consolidated (emptiness, under-utilization) once its
//! NodePool's `consolidateAfter` has passed since the node last changed — the last pod bound to or leaving it
//! (`status.lastPodEventTime`), or its initialization, whichever is later.
//!
//! Upstream's rules (`nodeclaim.disruption` consolidation): `consolidateAfter: Never` disables it; a claim that
//! is not Initialized is never consolidatable; otherwise the condition turns True when `consolidateAfter` has
//! elapsed. Upstream counts from `lastPodEventTime` when set and from the Initialized transition otherwise; we
//! count from the later of the two, so pods that bound while the node was still initializing (DaemonSets
//! tolerating startup taints) do not make a just-initialized node consolidatable at once.

use jiff::Timestamp;
use karpenter_api::{
    common::{ConditionStatus, find_condition},
    nodeclaim::{NodeClaim, conditions},
    nodepool::NodePool,
};

use super::expiration::add_saturating;

/// From when the claim is consolidatable: `max(status.lastPodEventTime, Initialized lastTransitionTime) +
/// consolidateAfter`. `None` when the NodePool's `consolidateAfter` is `Never` or the claim is not Initialized.
pub fn consolidatable_since(claim: &NodeClaim, pool: &NodePool) -> Option<Timestamp> {
    let after = pool.spec.disruption.consolidate_after()?;
    let status = claim.status.as_ref()?;
    let initialized = find_condition(&status.conditions, conditions::INITIALIZED)
        .filter(|c| c.status == ConditionStatus::True)?;
    let mut since = initialized.last_transition_time.0;
    if let Some(last_pod_event) = &status.last_pod_event_time {
        since = since.max(last_pod_event.0);
    }
    Some(add_saturating(since, after))
}

/// Whether the claim is consolidatable at `now` (the `Consolidatable` condition is True).
pub fn is_consolidatable(claim: &NodeClaim, pool: &NodePool, now: Timestamp) -> bool {
    consolidatable_since(claim, pool).is_some_and(|since| now >= since)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn pool(consolidate_after: Option<&str>) -> NodePool {
        let mut disruption = json!({});
        if let Some(after) = consolidate_after {
            disruption = json!({"consolidateAfter": after});
        }
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "disruption": disruption,
                "template": {"spec": {
                    "requirements": [],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                }},
            },
        }))
        .unwrap()
    }

    fn claim(initialized: Option<(&str, &str)>, last_pod_event: Option<&str>) -> NodeClaim {
        let mut status = json!({});
        if let Some((s, t)) = initialized {
            status["conditions"] = json!([
                {"type": "Launched", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Launched"},
                {"type": "Initialized", "status": s, "lastTransitionTime": t, "reason": "Initialized"},
            ]);
        }
        if let Some(t) = last_pod_event {
            status["lastPodEventTime"] = Value::from(t);
        }
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "default-abcde", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            },
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn consolidate_after_counts_from_the_last_pod_event() {
        let p = pool(Some("10m"));
        let c = claim(
            Some(("True", "2026-01-01T00:05:00Z")),
            Some("2026-01-01T01:00:00Z"),
        );
        assert_eq!(consolidatable_since(&c, &p), Some(at("2026-01-01T01:10:00Z")));
        assert!(!is_consolidatable(&c, &p, at("2026-01-01T01:09:59Z")));
        assert!(is_consolidatable(&c, &p, at("2026-01-01T01:10:00Z")));
    }

    #[test]
    fn consolidate_after_counts_from_initialization_without_pod_events() {
        let p = pool(Some("10m"));
        let c = claim(Some(("True", "2026-01-01T00:05:00Z")), None);
        assert_eq!(consolidatable_since(&c, &p), Some(at("2026-01-01T00:15:00Z")));
    }

    #[test]
    fn consolidate_after_counts_from_initialization_when_pods_bound_before_it() {
        let p = pool(Some("10m"));
        let c = claim(
            Some(("True", "2026-01-01T00:05:00Z")),
            Some("2026-01-01T00:03:00Z"),
        );
        assert_eq!(consolidatable_since(&c, &p), Some(at("2026-01-01T00:15:00Z")));
    }

    #[test]
    fn consolidate_after_defaults_to_zero() {
        let p = pool(None);
        let c = claim(Some(("True", "2026-01-01T00:05:00Z")), None);
        assert!(is_consolidatable(&c, &p, at("2026-01-01T00:05:00Z")));
    }

    #[test]
    fn consolidate_after_never_disables_consolidation() {
        let p = pool(Some("Never"));
        let c = claim(Some(("True", "2026-01-01T00:05:00Z")), None);
        assert_eq!(consolidatable_since(&c, &p), None);
        assert!(!is_consolidatable(&c, &p, Timestamp::MAX));
    }

    #[test]
    fn an_uninitialized_claim_is_not_consolidatable() {
        let p = pool(Some("0s"));
        assert_eq!(consolidatable_since(&claim(None, None), &p), None);
        let not_ready = claim(
            Some(("False", "2026-01-01T00:05:00Z")),
            Some("2026-01-01T00:06:00Z"),
        );
        assert_eq!(consolidatable_since(&not_ready, &p), None);
    }
}
