//! Consistency checks between a NodeClaim and its Node (upstream's nodeclaim.consistency checks): what the
//! controller reports as `FailedConsistencyCheck` events and the claim's `ConsistentStateFound` condition.
//!
//! - **Node shape**: an initialized, not deleting claim whose Node came up with less than
//!   [`NODE_SHAPE_MIN_FRACTION`] (90 %) of the capacity the launch promised, for any resource the claim's pods
//!   requested: the instance is not what the scheduler planned for (a wrong instance type, memory the OS
//!   reserved, a device plugin that registered fewer devices), so pods planned onto it may not fit.
//! - **Termination**: a NodeClaim being deleted whose Node still runs an evictable pod that a
//!   PodDisruptionBudget allowing no disruptions covers: the drain is stuck until the budget allows one.
//!
//! Pure: the claim, the Node (and for termination its pods and the budgets) in, the issues (human-readable,
//! upstream's wording) out.

use k8s_openapi::{api::policy::v1::PodDisruptionBudget, apimachinery::pkg::apis::meta::v1::LabelSelector};
use karpenter_api::{
    common::{ConditionStatus, find_condition},
    nodeclaim::{NodeClaim, conditions},
    quantity::parse_milli,
};

use crate::snapshot::{
    CompactNode, CompactPod,
    pods::{is_mirror, is_terminal, is_terminating, node_name},
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

/// Every issue the checks find between `claim` and its `node`, whose pods are among `pods`, under `pdbs`;
/// empty when they agree.
pub fn consistency_issues(
    claim: &NodeClaim,
    node: &CompactNode,
    pods: &[std::sync::Arc<CompactPod>],
    pdbs: &[std::sync::Arc<PodDisruptionBudget>],
) -> Vec<String> {
    let mut issues = termination_issues(claim, node, pods, pdbs);
    issues.extend(node_shape_issues(claim, node));
    issues
}

/// The termination check: for a claim being deleted, the first budget that allows no disruption and covers an
/// evictable pod on its Node.
pub fn termination_issues(
    claim: &NodeClaim,
    node: &CompactNode,
    pods: &[std::sync::Arc<CompactPod>],
    pdbs: &[std::sync::Arc<PodDisruptionBudget>],
) -> Vec<String> {
    if claim.metadata.deletion_timestamp.is_none() {
        return Vec::new();
    }
    let Some(node) = node.metadata.name.as_deref() else {
        return Vec::new();
    };
    for pod in pods.iter().filter(|p| node_name(p) == Some(node)) {
        // A pod eviction would not touch: a blocking budget does not matter for it.
        if is_mirror(pod) || is_terminal(pod) || is_terminating(pod) {
            continue;
        }
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        for pdb in pdbs {
            let pdb_namespace = pdb.metadata.namespace.as_deref().unwrap_or("default");
            let allowed = pdb.status.as_ref().map_or(0, |s| s.disruptions_allowed);
            let selector = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
            if pdb_namespace == namespace && allowed == 0 && selects(selector, &labels) {
                let name = pdb.metadata.name.as_deref().unwrap_or_default();
                return vec![format!(
                    "can't drain node, PDB \"{pdb_namespace}/{name}\" is blocking evictions"
                )];
            }
        }
    }
    Vec::new()
}

/// Whether a budget's selector selects a pod with `labels` (policy/v1: an empty selector selects every pod of
/// the namespace, a missing one none).
fn selects(selector: Option<&LabelSelector>, labels: &std::collections::BTreeMap<String, String>) -> bool {
    let Some(selector) = selector else {
        return false;
    };
    let labels_match = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions_match = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_match && expressions_match
}

/// The node-shape check: for each resource the claim requested, the Node's capacity against the capacity the
/// launch recorded on the claim.
pub fn node_shape_issues(claim: &NodeClaim, node: &CompactNode) -> Vec<String> {
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

    fn node(capacity: serde_json::Value) -> CompactNode {
        serde_json::from_value::<k8s_openapi::api::core::v1::Node>(
            json!({"metadata": {"name": "n"}, "status": {"capacity": capacity}}),
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .into()
    }

    #[test]
    fn a_node_with_much_less_than_expected_of_a_requested_resource_is_inconsistent() {
        let c = claim(
            "True",
            json!({"cpu": "1", "memory": "1Gi"}),
            json!({"cpu": "4", "memory": "16Gi", "pods": "110"}),
        );
        let issues = node_shape_issues(&c, &node(json!({"cpu": "4", "memory": "8Gi", "pods": "10"})));
        assert_eq!(
            issues,
            ["expected 16Gi of resource memory, but found 8Gi (50.0% of expected)"],
            "pods was not requested, so its shortfall is not an issue"
        );
    }

    fn pod(name: &str, node: &str, labels: serde_json::Value) -> std::sync::Arc<CompactPod> {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": "Running"}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        std::sync::Arc::new(CompactPod::from(pod))
    }

    fn pdb(name: &str, selector: serde_json::Value, allowed: i32) -> std::sync::Arc<PodDisruptionBudget> {
        std::sync::Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"selector": selector},
                "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1,
                           "expectedPods": 1}
            }))
            .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    #[test]
    fn a_deleting_claim_whose_pods_a_budget_protects_cannot_drain() {
        let mut c = claim("True", json!({}), json!({}));
        let n = node(json!({}));
        let pods = [
            pod("web-1", "n", json!({"app": "web"})),
            pod("other", "m", json!({"app": "db"})),
        ];
        let pdbs = [
            pdb("db", json!({"matchLabels": {"app": "db"}}), 0),
            pdb(
                "web",
                json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}),
                0,
            ),
        ];
        assert!(
            consistency_issues(&c, &n, &pods, &pdbs).is_empty(),
            "not being deleted"
        );
        c.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ));
        assert_eq!(
            consistency_issues(&c, &n, &pods, &pdbs),
            ["can't drain node, PDB \"default/web\" is blocking evictions"],
            "the db pod runs elsewhere"
        );
        let allowing = [pdb("web", json!({"matchLabels": {"app": "web"}}), 1)];
        assert!(consistency_issues(&c, &n, &pods, &allowing).is_empty());
    }

    #[test]
    fn within_ten_percent_is_consistent() {
        let c = claim("True", json!({"memory": "1Gi"}), json!({"memory": "16Gi"}));
        assert!(node_shape_issues(&c, &node(json!({"memory": "15Gi"}))).is_empty());
        assert_eq!(
            node_shape_issues(&c, &node(json!({"memory": "14Gi"}))),
            ["expected 16Gi of resource memory, but found 14Gi (87.5% of expected)"]
        );
    }

    #[test]
    fn an_uninitialized_claim_is_not_checked_and_a_missing_resource_counts_as_none() {
        let c = claim("Unknown", json!({"cpu": "1"}), json!({"cpu": "4"}));
        assert!(node_shape_issues(&c, &node(json!({}))).is_empty());
        let c = claim(
            "True",
            json!({"nvidia.com/gpu": "1"}),
            json!({"nvidia.com/gpu": "4"}),
        );
        assert_eq!(
            node_shape_issues(&c, &node(json!({"cpu": "4"}))),
            ["expected 4 of resource nvidia.com/gpu, but found 0 (0.0% of expected)"]
        );
        // Nothing expected, or nothing requested: nothing to compare.
        let c = claim("True", json!({"cpu": "0"}), json!({"cpu": "4"}));
        assert!(node_shape_issues(&c, &node(json!({}))).is_empty());
    }
}
