//! Consistency checks between a NodeClaim and its Node (upstream's nodeclaim.consistency checks): what the
//! controller reports as `FailedConsistencyCheck` events and the claim's `ConsistentStateFound` condition.
//!
//! - **Node shape**: an initialized, not deleting claim whose Node came up with less than
//!   [`NODE_SHAPE_MIN_FRACTION`] (90 %) of the capacity the launch promised, for any resource the claim's pods
//!   requested: the instance is not what the scheduler planned for (a wrong instance type, memory the OS
//!   reserved, a device plugin that registered fewer devices), so pods planned onto it may not fit.
//!
//! Pure: the claim and the Node in, the issues (human-readable, upstream's wording) out.

use k8s_openapi::api::core::v1::Node;
use karpenter_api::{
    common::{ConditionStatus, find_condition},
    nodeclaim::{NodeClaim, conditions},
    quantity::parse_milli,
};

/// The condition the checks set on the NodeClaim.
pub const CONSISTENT_STATE_FOUND: &str = conditions::CONSISTENT_STATE_FOUND;
/// Its reason and message when a check found an issue (upstream's).
pub const CONSISTENCY_CHECK_FAILED: &str = "ConsistencyCheckFailed";
pub const CONSISTENCY_CHECK_FAILED_MESSAGE: &str = "Consistency Check Failed";
/// The event each issue is reported with.
pub const FAILED_CONSISTENCY_CHECK: &str = "FailedConsistencyCheck";

/// The least share of an expected resource a Node may report before its shape is inconsistent.
pub const NODE_SHAPE_MIN_FRACTION: f64 = 0.90;

/// Every issue the checks find between `claim` and its `node`; empty when they agree.
pub fn consistency_issues(claim: &NodeClaim, node: &Node) -> Vec<String> {
    node_shape_issues(claim, node)
}

/// The node-shape check: for each resource the claim requested, the Node's capacity against the capacity the
/// launch recorded on the claim.
pub fn node_shape_issues(claim: &NodeClaim, node: &Node) -> Vec<String> {
    if claim.metadata.deletion_timestamp.is_some() {
        return Vec::new();
    }
    let Some(status) = claim.status.as_ref() else {
        return Vec::new();
    };
    let initialized = find_condition(&status.conditions, conditions::INITIALIZED)
        .is_some_and(|c| c.status == ConditionStatus::True);
    if !initialized {
        return Vec::new();
    }
    let milli = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
        q.and_then(|q| parse_milli(&q.0).ok()).unwrap_or(0)
    };
    let node_capacity = node.status.as_ref().and_then(|s| s.capacity.as_ref());
    let mut issues = Vec::new();
    for (resource, requested) in claim.spec.resources.requests.iter().flatten() {
        let expected = status.capacity.as_ref().and_then(|c| c.get(resource));
        let expected_milli = milli(expected);
        if milli(Some(requested)) == 0 || expected_milli == 0 {
            continue;
        }
        let found = node_capacity.and_then(|c| c.get(resource));
        let fraction = milli(found) as f64 / expected_milli as f64;
        if fraction < NODE_SHAPE_MIN_FRACTION {
            issues.push(format!(
                "expected {} of resource {resource}, but found {} ({:.1}% of expected)",
                expected.map(|q| q.0.as_str()).unwrap_or("0"),
                found.map(|q| q.0.as_str()).unwrap_or("0"),
                fraction * 100.0
            ));
        }
    }
    issues
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(initialized: &str, requests: serde_json::Value, capacity: serde_json::Value) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "a"},
            "spec": {"requirements": [], "resources": {"requests": requests},
                     "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
            "status": {"capacity": capacity, "conditions": [
                {"type": "Initialized", "status": initialized, "reason": "", "message": "",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn node(capacity: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n"}, "status": {"capacity": capacity}}))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_node_with_much_less_than_expected_of_a_requested_resource_is_inconsistent() {
        let c = claim(
            "True",
            json!({"cpu": "1", "memory": "1Gi"}),
            json!({"cpu": "4", "memory": "16Gi", "pods": "110"}),
        );
        let issues = consistency_issues(&c, &node(json!({"cpu": "4", "memory": "8Gi", "pods": "10"})));
        assert_eq!(
            issues,
            ["expected 16Gi of resource memory, but found 8Gi (50.0% of expected)"],
            "pods was not requested, so its shortfall is not an issue"
        );
    }

    #[test]
    fn within_ten_percent_is_consistent() {
        let c = claim("True", json!({"memory": "1Gi"}), json!({"memory": "16Gi"}));
        assert!(consistency_issues(&c, &node(json!({"memory": "15Gi"}))).is_empty());
        assert_eq!(
            consistency_issues(&c, &node(json!({"memory": "14Gi"}))),
            ["expected 16Gi of resource memory, but found 14Gi (87.5% of expected)"]
        );
    }

    #[test]
    fn an_uninitialized_claim_is_not_checked_and_a_missing_resource_counts_as_none() {
        let c = claim("Unknown", json!({"cpu": "1"}), json!({"cpu": "4"}));
        assert!(consistency_issues(&c, &node(json!({}))).is_empty());
        let c = claim(
            "True",
            json!({"nvidia.com/gpu": "1"}),
            json!({"nvidia.com/gpu": "4"}),
        );
        assert_eq!(
            consistency_issues(&c, &node(json!({"cpu": "4"}))),
            ["expected 4 of resource nvidia.com/gpu, but found 0 (0.0% of expected)"]
        );
        // Nothing expected, or nothing requested: nothing to compare.
        let c = claim("True", json!({"cpu": "0"}), json!({"cpu": "4"}));
        assert!(consistency_issues(&c, &node(json!({}))).is_empty());
    }
}
