//! Whether a Node is unhealthy by the provider's repair policies, and from when it may be repaired. Pure.
//!
//! A node is unhealthy while one of its conditions has the type and status of a [`RepairPolicy`] (for example
//! `Ready=False`); it becomes repairable once that condition has held for the policy's toleration, counted from
//! the condition's `lastTransitionTime` (the moment it entered that status, which a kubelet does not move while
//! the status stays the same).

use jiff::{SignedDuration, Timestamp};
use karpenter_core::cloudprovider::RepairPolicy;
use karpenter_core::snapshot::CompactNode;

/// The condition that makes a node unhealthy, and when its toleration runs out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unhealthy {
    /// The index of the policy it matched, in the list given.
    pub policy: usize,
    /// `Type=Status`, for example `Ready=False`, for messages.
    pub condition: String,
    /// When the condition entered its status.
    pub since: Timestamp,
    /// `since + toleration`: from then on the node is repaired.
    pub repair_at: Timestamp,
}

/// The node's unhealthy condition that runs out of toleration first, if any matches a policy. A matching
/// condition without a parseable transition time counts as having changed now, so the toleration starts over
/// rather than the node being replaced at once on bad data.
pub fn unhealthy(node: &CompactNode, policies: &[RepairPolicy], now: Timestamp) -> Option<Unhealthy> {
    unhealthy_since(node, policies, None, now)
}

/// [`unhealthy`], with no toleration running out before `not_before` + the toleration: after a reboot, a
/// condition that was already there is tolerated anew from the moment the reboot ended (upstream's
/// `notBefore`), so the rebooted node gets its chance to clear it.
pub fn unhealthy_since(
    node: &CompactNode,
    policies: &[RepairPolicy],
    not_before: Option<Timestamp>,
    now: Timestamp,
) -> Option<Unhealthy> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    let mut worst: Option<Unhealthy> = None;
    for condition in conditions {
        for (index, policy) in policies.iter().enumerate() {
            if condition.type_ != policy.condition_type || condition.status != policy.condition_status {
                continue;
            }
            let since = condition.last_transition_time.as_ref().map_or(now, |t| t.0);
            let toleration = SignedDuration::try_from(policy.toleration).unwrap_or(SignedDuration::MAX);
            let from = not_before.map_or(since, |nb| nb.max(since));
            let repair_at = from.checked_add(toleration).unwrap_or(Timestamp::MAX);
            if worst.as_ref().is_none_or(|w| repair_at < w.repair_at) {
                worst = Some(Unhealthy {
                    policy: index,
                    condition: format!("{}={}", condition.type_, condition.status),
                    since,
                    repair_at,
                });
            }
        }
    }
    worst
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn node(conditions: serde_json::Value) -> CompactNode {
        serde_json::from_value::<k8s_openapi::api::core::v1::Node>(
            json!({"metadata": {"name": "n"}, "status": {"conditions": conditions}}),
        )
        .unwrap_or_default()
        .into()
    }

    fn policies() -> Vec<RepairPolicy> {
        vec![
            RepairPolicy {
                condition_type: "Ready".into(),
                condition_status: "False".into(),
                toleration: Duration::from_secs(30 * 60),
            },
            RepairPolicy {
                condition_type: "AcceleratedHardwareReady".into(),
                condition_status: "False".into(),
                toleration: Duration::from_secs(10 * 60),
            },
        ]
    }

    #[test]
    fn a_ready_node_is_healthy() {
        let n =
            node(json!([{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]));
        assert_eq!(unhealthy(&n, &policies(), at("2026-01-02T00:00:00Z")), None);
    }

    #[test]
    fn toleration_counts_from_the_last_transition() {
        let n =
            node(json!([{"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}]));
        let u = unhealthy(&n, &policies(), at("2026-01-01T00:05:00Z"));
        assert_eq!(
            u,
            Some(Unhealthy {
                policy: 0,
                condition: "Ready=False".into(),
                since: at("2026-01-01T00:00:00Z"),
                repair_at: at("2026-01-01T00:30:00Z"),
            })
        );
    }

    #[test]
    fn the_condition_whose_toleration_ends_first_wins() {
        let n = node(json!([
            {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "AcceleratedHardwareReady", "status": "False", "lastTransitionTime": "2026-01-01T00:10:00Z"},
        ]));
        let u = unhealthy(&n, &policies(), at("2026-01-01T00:15:00Z"));
        assert_eq!(
            u.map(|u| (u.condition, u.repair_at)),
            Some((
                "AcceleratedHardwareReady=False".into(),
                at("2026-01-01T00:20:00Z")
            ))
        );
    }

    #[test]
    fn after_a_reboot_the_toleration_starts_over_from_its_end() {
        let n =
            node(json!([{"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}]));
        let u = unhealthy_since(
            &n,
            &policies(),
            Some(at("2026-01-01T02:00:00Z")),
            at("2026-01-01T02:10:00Z"),
        );
        assert_eq!(u.map(|u| u.repair_at), Some(at("2026-01-01T02:30:00Z")));
        // A reboot that ended before the condition appeared changes nothing.
        let u = unhealthy_since(&n, &policies(), Some(at("2025-12-31T00:00:00Z")), at(T0));
        assert_eq!(u.map(|u| u.repair_at), Some(at("2026-01-01T00:30:00Z")));
    }

    const T0: &str = "2026-01-01T00:00:00Z";

    #[test]
    fn a_status_no_policy_names_is_healthy() {
        let n = node(
            json!([{"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-01-01T00:00:00Z"}]),
        );
        assert_eq!(unhealthy(&n, &policies(), at("2026-01-02T00:00:00Z")), None);
    }
}
