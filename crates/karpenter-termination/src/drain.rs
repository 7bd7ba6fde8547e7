//! Which pods a drain must move off a node, and in what order. Pure: the terminator carries it out.

use std::sync::Arc;

use karpenter_api::labels;
use karpenter_core::snapshot::CompactPod;

/// system-cluster-critical's priority; system-node-critical's is higher.
const CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// What a drain does next on one node.
#[derive(Debug, Clone, Default)]
pub struct DrainPlan {
    /// Pods to evict now: the non-critical ones, or the critical ones once no non-critical pod is left.
    pub evict: Vec<Arc<CompactPod>>,
    /// Pods that must still leave (those being evicted now, and those already terminating).
    pub remaining: usize,
}

fn owned_by(pod: &CompactPod, kind: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == kind)
}

fn tolerates_disrupted(pod: &CompactPod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .any(|t| {
            let key_matches = match t.key.as_deref() {
                None | Some("") => t.operator.as_deref() == Some("Exists"),
                Some(k) => k == labels::DISRUPTED_TAINT_KEY,
            };
            let effect_matches = matches!(t.effect.as_deref(), None | Some("") | Some("NoSchedule"));
            key_matches && effect_matches
        })
}

/// Whether draining the node moves this pod: not a DaemonSet or mirror pod, not finished, not tolerating the
/// disrupted taint.
pub fn must_leave(pod: &CompactPod) -> bool {
    let mirror = owned_by(pod, "Node")
        || pod
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    let finished = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    !owned_by(pod, "DaemonSet") && !mirror && !finished && !tolerates_disrupted(pod)
}

/// The next step of draining a node whose pods are `pods`.
pub fn drain_plan(pods: &[Arc<CompactPod>]) -> DrainPlan {
    let leaving: Vec<&Arc<CompactPod>> = pods.iter().filter(|p| must_leave(p)).collect();
    let waiting = |p: &&&Arc<CompactPod>| p.metadata.deletion_timestamp.is_none();
    let critical =
        |p: &Arc<CompactPod>| p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0) >= CRITICAL_PRIORITY;
    let non_critical: Vec<Arc<CompactPod>> = leaving
        .iter()
        .filter(waiting)
        .filter(|p| !critical(p))
        .map(|p| Arc::clone(p))
        .collect();
    let any_non_critical_left = leaving.iter().any(|p| !critical(p));
    let evict = if any_non_critical_left {
        non_critical
    } else {
        leaving.iter().filter(waiting).map(|p| Arc::clone(p)).collect()
    };
    DrainPlan {
        evict,
        remaining: leaving.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, extra_meta: &str, extra_spec: &str, phase: &str) -> Arc<CompactPod> {
        let text = format!(
            r#"{{"metadata": {{"name": "{name}", "namespace": "default"{extra_meta}}},
                "spec": {{"nodeName": "n1", "containers": []{extra_spec}}}, "status": {{"phase": "{phase}"}}}}"#
        );
        match serde_json::from_str(&text) {
            Ok(p) => Arc::new(p),
            Err(e) => panic!("{e}: {text}"),
        }
    }

    fn names(plan: &DrainPlan) -> Vec<String> {
        plan.evict
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn non_critical_pods_go_first_and_some_pods_stay() {
        let pods = vec![
            pod("web", "", "", "Running"),
            pod("dns", "", r#", "priority": 2000000000"#, "Running"),
            pod(
                "agent",
                r#", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]"#,
                "",
                "Running",
            ),
            pod("done", "", "", "Succeeded"),
            pod(
                "stays",
                "",
                r#", "tolerations": [{"key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoSchedule"}]"#,
                "Running",
            ),
        ];
        let plan = drain_plan(&pods);
        assert_eq!(names(&plan), ["web"]);
        assert_eq!(plan.remaining, 2, "web and dns must still leave");

        // web is on its way out: dns waits until it is gone.
        let leaving = vec![
            pod(
                "web",
                r#", "deletionTimestamp": "2026-01-01T00:00:00Z""#,
                "",
                "Running",
            ),
            pods[1].clone(),
        ];
        let plan = drain_plan(&leaving);
        assert!(plan.evict.is_empty());
        assert_eq!(plan.remaining, 2);

        let plan = drain_plan(&[pods[1].clone(), pods[2].clone()]);
        assert_eq!(names(&plan), ["dns"], "critical pods go once the rest have");
        assert_eq!(drain_plan(&[pods[2].clone(), pods[3].clone()]).remaining, 0);
    }
}
