//! The pods the provisioner acts on: those kube-scheduler has tried and could not place.
//!
//! As upstream: unbound, not terminal, not being deleted, not owned by a DaemonSet (the DaemonSet controller
//! places those), and marked `PodScheduled=False` with reason `Unschedulable`. A pod the scheduler has not
//! looked at yet may still fit an existing node, so it waits for the scheduler's verdict.

use karpenter_core::snapshot::CompactPod;

/// Cheapest test first: the provisioner asks this of every pod in the cache whenever pods change, and nearly
/// all of them are bound.
pub fn is_provisionable(pod: &CompactPod) -> bool {
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    if bound || pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    let terminal = matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"));
    let unschedulable = status
        .conditions
        .as_ref()
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
        .is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"));
    let daemon = || {
        pod.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "DaemonSet")
    };
    !terminal && unschedulable && !daemon()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: &str) -> CompactPod {
        match serde_json::from_str(json) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn only_pods_the_scheduler_could_not_place_are_provisionable() {
        let unschedulable = r#"{"metadata": {"name": "a"}, "spec": {"containers": []},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}"#;
        assert!(is_provisionable(&pod(unschedulable)));
        let not_yet_tried =
            r#"{"metadata": {"name": "a"}, "spec": {"containers": []}, "status": {"phase": "Pending"}}"#;
        assert!(!is_provisionable(&pod(not_yet_tried)));
        let bound = unschedulable.replace(r#""containers": []"#, r#""containers": [], "nodeName": "n1""#);
        assert!(!is_provisionable(&pod(&bound)));
        let daemon = unschedulable.replace(
            r#""name": "a""#,
            r#""name": "a", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]"#,
        );
        assert!(!is_provisionable(&pod(&daemon)));
        let deleting = unschedulable.replace(
            r#""name": "a""#,
            r#""name": "a", "deletionTimestamp": "2026-01-01T00:00:00Z""#,
        );
        assert!(!is_provisionable(&pod(&deleting)));
    }
}
