//! Node lifetimes: when a NodeClaim expires (`spec.expireAfter`, counted from its creation), and the
//! `terminationGracePeriod` deadline by which a node being deleted is gone whatever its pods say.
//!
//! Upstream's rules (`nodeclaim.expiration`, `nodeclaim.lifecycle` finalize, the terminator's eviction queue):
//! - a NodeClaim expires at `creationTimestamp + expireAfter` and is deleted from then on (`now >= expiry`);
//!   expiration is forceful and not budgeted, and `expireAfter: Never` keeps the node forever;
//! - once deletion starts, a claim with `terminationGracePeriod` gets a deadline `deletion start + grace`;
//! - a pod whose own `terminationGracePeriodSeconds` would run past that deadline is deleted (not evicted) at
//!   `deadline − its grace`, with its grace clamped to the time left, so it still finishes by the deadline.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use karpenter_api::nodeclaim::NodeClaim;

/// `t + d`, saturating at [`Timestamp::MAX`] (a duration too long to represent means "never").
pub(crate) fn add_saturating(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

/// When the claim expires: `creationTimestamp + spec.expireAfter` (720h when unset, as the API server
/// defaults it). `None` for `expireAfter: Never`, or a claim without a creation timestamp (not yet created).
pub fn expiry(claim: &NodeClaim) -> Option<Timestamp> {
    let created = claim.metadata.creation_timestamp.as_ref()?.0;
    let expire_after = claim.spec.expire_after()?;
    Some(add_saturating(created, expire_after))
}

/// Whether the claim has reached its expiry at `now` (and is to be deleted).
pub fn is_expired(claim: &NodeClaim, now: Timestamp) -> bool {
    expiry(claim).is_some_and(|at| now >= at)
}

/// The moment a claim being deleted is terminated whatever its pods say: `deletion_started` (the claim's
/// deletionTimestamp) plus `spec.terminationGracePeriod`; `None` when the claim has no grace period (draining
/// then waits for every pod). This is what `karpenter.sh/nodeclaim-termination-timestamp` records.
pub fn termination_deadline(claim: &NodeClaim, deletion_started: Timestamp) -> Option<Timestamp> {
    let grace = claim.spec.termination_grace_period.as_ref()?.duration();
    Some(add_saturating(deletion_started, grace))
}

/// When a pod on a node with termination `deadline` must be deleted so that its own
/// `terminationGracePeriodSeconds` (`pod_grace_seconds`) still ends by the deadline: `deadline − grace`. A pod
/// whose grace fits in the time left is evicted normally until then; from then on it is deleted directly.
pub fn pod_delete_at(deadline: Timestamp, pod_grace_seconds: i64) -> Timestamp {
    let grace = SignedDuration::from_secs(pod_grace_seconds);
    deadline.checked_sub(grace).unwrap_or(if pod_grace_seconds >= 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

/// The grace period (whole seconds, at least 0) to delete such a pod with at `now`: its own grace clamped to
/// the time left before the node's deadline, as upstream's terminator does.
pub fn clamped_pod_grace_seconds(deadline: Timestamp, now: Timestamp, pod_grace_seconds: i64) -> i64 {
    let left = deadline.duration_since(now).as_secs().max(0);
    pod_grace_seconds.clamp(0, left)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn claim(extra_spec: serde_json::Value) -> NodeClaim {
        let mut spec = serde_json::json!({
            "requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
            spec.extend(extra.clone());
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "default-abcde", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn expire_after_counts_from_creation() {
        let c = claim(serde_json::json!({"expireAfter": "24h"}));
        assert_eq!(expiry(&c), Some(at("2026-01-02T00:00:00Z")));
        assert!(!is_expired(&c, at("2026-01-01T23:59:59Z")));
        assert!(
            is_expired(&c, at("2026-01-02T00:00:00Z")),
            "expired at the expiry itself"
        );
    }

    #[test]
    fn expire_after_defaults_to_720h() {
        let c = claim(serde_json::json!({}));
        assert_eq!(expiry(&c), Some(at("2026-01-31T00:00:00Z")));
    }

    #[test]
    fn expire_after_never_never_expires() {
        let c = claim(serde_json::json!({"expireAfter": "Never"}));
        assert_eq!(expiry(&c), None);
        assert!(!is_expired(&c, Timestamp::MAX));
    }

    #[test]
    fn a_claim_without_creation_time_does_not_expire() {
        let mut c = claim(serde_json::json!({"expireAfter": "1h"}));
        c.metadata.creation_timestamp = None;
        assert_eq!(expiry(&c), None);
    }

    #[test]
    fn termination_deadline_is_deletion_plus_grace() {
        let c = claim(serde_json::json!({"terminationGracePeriod": "1h30m"}));
        assert_eq!(
            termination_deadline(&c, at("2026-02-01T10:00:00Z")),
            Some(at("2026-02-01T11:30:00Z"))
        );
        let without = claim(serde_json::json!({}));
        assert_eq!(termination_deadline(&without, at("2026-02-01T10:00:00Z")), None);
    }

    #[test]
    fn pods_are_deleted_their_grace_before_the_deadline() {
        let deadline = at("2026-02-01T11:30:00Z");
        assert_eq!(pod_delete_at(deadline, 2700), at("2026-02-01T10:45:00Z"));
        assert_eq!(pod_delete_at(deadline, 0), deadline);
        assert_eq!(pod_delete_at(Timestamp::MIN, 30), Timestamp::MIN, "saturates");
    }

    #[test]
    fn deleted_pods_get_the_time_left_at_most() {
        let deadline = at("2026-02-01T11:30:00Z");
        assert_eq!(
            clamped_pod_grace_seconds(deadline, at("2026-02-01T11:00:00Z"), 2700),
            1800
        );
        assert_eq!(
            clamped_pod_grace_seconds(deadline, at("2026-02-01T11:00:00Z"), 30),
            30
        );
        assert_eq!(
            clamped_pod_grace_seconds(deadline, at("2026-02-01T12:00:00Z"), 30),
            0
        );
    }
}
