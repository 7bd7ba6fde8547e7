//! What a drain does next on one node, by upstream's rules. Pure: the terminator carries it out.
//!
//! - A pod is *waited for* until it is gone or finished, unless it is a mirror pod (the kubelet owns it), it
//!   tolerates `karpenter.sh/disrupted:NoSchedule` (it would come straight back), or it is stuck terminating:
//!   its deletionTimestamp (the deletion plus its grace period) passed more than a minute ago, so its kubelet
//!   is not finishing it and waiting longer would hold the node for nothing.
//! - Of those, a pod not yet terminating is *evicted* through the Eviction API unless a
//!   `karpenter.sh/do-not-disrupt` annotation protects it: such a pod is waited for but only ever deleted at
//!   the node's deadline (below). Evictions go one group at a time, the first group with a pod in it:
//!   non-critical pods, then non-critical DaemonSet pods, then critical pods, then critical DaemonSet pods
//!   (critical: priority class system-cluster-critical or system-node-critical), so the node's own services
//!   outlive the workloads that use them.
//! - With a deadline (the NodeClaim's terminationGracePeriod), a waited-for pod not yet terminating is
//!   *deleted* once its own terminationGracePeriodSeconds would end after the deadline, with its grace clamped
//!   to the time left: PodDisruptionBudgets and do-not-disrupt then no longer hold it.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use karpenter_api::labels;
use karpenter_core::{
    disruption::{
        expiration::{clamped_pod_grace_seconds, pod_delete_at},
        protection::DoNotDisrupt,
    },
    snapshot::CompactPod,
};

/// How long after its deletionTimestamp a pod still there counts as stuck terminating.
pub const STUCK_TERMINATING_AFTER: SignedDuration = SignedDuration::from_secs(60);

/// Kubernetes' default `terminationGracePeriodSeconds`.
pub const DEFAULT_POD_GRACE_SECONDS: i64 = 30;

const CRITICAL_PRIORITY_CLASSES: [&str; 2] = ["system-cluster-critical", "system-node-critical"];

/// A pod to delete directly, and the grace period to delete it with.
#[derive(Debug, Clone)]
pub struct PodDeletion {
    pub pod: Arc<CompactPod>,
    pub grace_seconds: i64,
}

/// What a drain does next on one node.
#[derive(Debug, Clone, Default)]
pub struct DrainPlan {
    /// Pods to evict now: the first group, in eviction order, that has a pod to evict.
    pub evict: Vec<Arc<CompactPod>>,
    /// Pods to delete now so that they are gone by the node's deadline.
    pub delete: Vec<PodDeletion>,
    /// Pods the drain still waits for (being evicted or deleted now, terminating, or protected).
    pub waiting: usize,
    /// Pods waited for that the drain does not evict because `karpenter.sh/do-not-disrupt` protects them, and
    /// that are not deleted this time either.
    pub do_not_disrupt: Vec<Arc<CompactPod>>,
}

impl DrainPlan {
    /// Whether the node is drained: nothing left to wait for.
    pub fn drained(&self) -> bool {
        self.waiting == 0
    }
}

fn owned_by(pod: &CompactPod, api_version: &str, kind: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.api_version == api_version && o.kind == kind)
}

fn is_daemon(pod: &CompactPod) -> bool {
    owned_by(pod, "apps/v1", "DaemonSet")
}

fn is_mirror(pod: &CompactPod) -> bool {
    owned_by(pod, "v1", "Node")
        || pod
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(labels::MIRROR_POD_ANNOTATION))
}

fn is_terminal(pod: &CompactPod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn is_terminating(pod: &CompactPod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Deleted, and still there more than [`STUCK_TERMINATING_AFTER`] past its deletionTimestamp.
pub fn is_stuck_terminating(pod: &CompactPod, now: Timestamp) -> bool {
    pod.metadata
        .deletion_timestamp
        .as_ref()
        .is_some_and(|t| now.duration_since(t.0) > STUCK_TERMINATING_AFTER)
}

fn is_critical(pod: &CompactPod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref())
        .is_some_and(|c| CRITICAL_PRIORITY_CLASSES.contains(&c))
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
            // The taint has no value: Equal matches only an empty one.
            let value_matches =
                t.operator.as_deref() == Some("Exists") || t.value.as_deref().unwrap_or_default().is_empty();
            let effect_matches = matches!(t.effect.as_deref(), None | Some("") | Some("NoSchedule"));
            key_matches && value_matches && effect_matches
        })
}

/// Whether `karpenter.sh/do-not-disrupt` protects the pod at `now` (`"true"`, or a duration not yet over).
fn do_not_disrupt(pod: &CompactPod, now: Timestamp) -> bool {
    let value = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::DO_NOT_DISRUPT_ANNOTATION))
        .map(String::as_str);
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .or(pod.metadata.creation_timestamp.as_ref())
        .map(|t| t.0);
    DoNotDisrupt::for_pod(value, started).blocks(now)
}

/// Whether the drain moves the pod off the node at all: not a mirror pod, not one tolerating the disrupted
/// taint, not one stuck terminating.
pub fn is_drainable(pod: &CompactPod, now: Timestamp) -> bool {
    !tolerates_disrupted(pod) && !is_mirror(pod) && !is_stuck_terminating(pod, now)
}

/// Whether the drain waits for the pod to go: drainable and not finished.
pub fn is_waited_for(pod: &CompactPod, now: Timestamp) -> bool {
    !is_terminal(pod) && is_drainable(pod, now)
}

/// The eviction group of a pod: lower goes first.
fn eviction_group(pod: &CompactPod) -> usize {
    usize::from(is_critical(pod)) * 2 + usize::from(is_daemon(pod))
}

/// The next step of draining a node whose pods are `pods`, at `now`, with the node's termination `deadline`
/// if it has one.
pub fn drain_plan(pods: &[Arc<CompactPod>], now: Timestamp, deadline: Option<Timestamp>) -> DrainPlan {
    let mut plan = DrainPlan::default();
    let mut groups: [Vec<&Arc<CompactPod>>; 4] = Default::default();
    for pod in pods.iter().filter(|p| is_waited_for(p, now)) {
        plan.waiting += 1;
        if is_terminating(pod) {
            continue;
        }
        let own_grace = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(DEFAULT_POD_GRACE_SECONDS);
        let deleted_now = match deadline {
            Some(deadline) if now > pod_delete_at(deadline, own_grace) => {
                plan.delete.push(PodDeletion {
                    pod: Arc::clone(pod),
                    grace_seconds: clamped_pod_grace_seconds(deadline, now, own_grace),
                });
                true
            }
            _ => false,
        };
        if do_not_disrupt(pod, now) {
            if !deleted_now {
                plan.do_not_disrupt.push(Arc::clone(pod));
            }
            continue;
        }
        // A pod deleted now still decides which group goes first, as it would have without the deadline.
        groups[eviction_group(pod)].push(pod);
    }
    if let Some(first) = groups.iter().find(|g| !g.is_empty()) {
        plan.evict = first
            .iter()
            .filter(|p| !plan.delete.iter().any(|d| Arc::ptr_eq(&d.pod, p)))
            .map(|p| Arc::clone(p))
            .collect();
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-01-01T00:10:00Z";

    fn at(s: &str) -> Timestamp {
        match s.parse() {
            Ok(t) => t,
            Err(e) => panic!("{e}: {s}"),
        }
    }

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

    fn running(name: &str) -> Arc<CompactPod> {
        pod(name, "", "", "Running")
    }

    const DAEMON: &str =
        r#", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]"#;
    const CRITICAL: &str = r#", "priorityClassName": "system-node-critical""#;

    fn names(pods: &[Arc<CompactPod>]) -> Vec<String> {
        pods.iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    fn deleted_at(t: &str) -> String {
        format!(r#", "deletionTimestamp": "{t}""#)
    }

    #[test]
    fn evictions_go_by_group_non_critical_then_daemons_then_critical_then_critical_daemons() {
        let now = at(NOW);
        let web = running("web");
        let agent = pod("agent", DAEMON, "", "Running");
        let dns = pod("dns", "", CRITICAL, "Running");
        let cni = pod("cni", DAEMON, CRITICAL, "Running");
        let all = vec![cni.clone(), dns.clone(), agent.clone(), web.clone()];

        let plan = drain_plan(&all, now, None);
        assert_eq!(names(&plan.evict), ["web"]);
        assert_eq!(plan.waiting, 4, "every pod must leave, DaemonSet pods too");

        // web is terminating: the next group goes although web is still there.
        let web_leaving = pod("web", &deleted_at("2026-01-01T00:09:50Z"), "", "Running");
        let plan = drain_plan(&[cni.clone(), dns.clone(), agent.clone(), web_leaving], now, None);
        assert_eq!(names(&plan.evict), ["agent"]);
        assert_eq!(plan.waiting, 4);

        let plan = drain_plan(&[cni.clone(), dns.clone()], now, None);
        assert_eq!(names(&plan.evict), ["dns"]);
        let plan = drain_plan(std::slice::from_ref(&cni), now, None);
        assert_eq!(names(&plan.evict), ["cni"]);
    }

    #[test]
    fn critical_means_a_system_critical_priority_class() {
        let now = at(NOW);
        let high_but_not_system = pod(
            "high",
            "",
            r#", "priorityClassName": "business-critical", "priority": 1000000000"#,
            "Running",
        );
        let dns = pod(
            "dns",
            "",
            r#", "priorityClassName": "system-cluster-critical""#,
            "Running",
        );
        let plan = drain_plan(&[dns, high_but_not_system], now, None);
        assert_eq!(names(&plan.evict), ["high"]);
    }

    #[test]
    fn mirror_finished_and_disrupted_tolerating_pods_are_neither_evicted_nor_waited_for() {
        let now = at(NOW);
        let pods = vec![
            pod(
                "static",
                r#", "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u"}]"#,
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
            pod(
                "tolerates-all",
                DAEMON,
                r#", "tolerations": [{"operator": "Exists"}]"#,
                "Running",
            ),
        ];
        let plan = drain_plan(&pods, now, None);
        assert!(plan.evict.is_empty(), "{:?}", names(&plan.evict));
        assert!(plan.drained());
        // A toleration of another value of the key does not tolerate the (value-less) taint.
        let other_value = pod(
            "other",
            "",
            r#", "tolerations": [{"key": "karpenter.sh/disrupted", "operator": "Equal", "value": "x"}]"#,
            "Running",
        );
        assert_eq!(names(&drain_plan(&[other_value], now, None).evict), ["other"]);
    }

    #[test]
    fn a_pod_stuck_terminating_over_a_minute_past_its_deletion_timestamp_is_not_waited_for() {
        let now = at(NOW);
        // deletionTimestamp is the deletion plus the grace period: 60 s past it the pod is still waited for.
        let just_late = pod("late", &deleted_at("2026-01-01T00:09:00Z"), "", "Running");
        let plan = drain_plan(std::slice::from_ref(&just_late), now, None);
        assert_eq!(plan.waiting, 1);
        assert!(plan.evict.is_empty(), "a terminating pod is not evicted again");
        let stuck = pod("stuck", &deleted_at("2026-01-01T00:08:59Z"), "", "Running");
        let plan = drain_plan(&[stuck, just_late], now, None);
        assert_eq!(plan.waiting, 1, "the stuck pod no longer holds the node");
        let plan = drain_plan(
            &[pod("stuck", &deleted_at("2026-01-01T00:08:00Z"), "", "Running")],
            now,
            None,
        );
        assert!(plan.drained());
        assert!(plan.evict.is_empty() && plan.delete.is_empty());
    }

    #[test]
    fn do_not_disrupt_pods_are_waited_for_but_not_evicted() {
        let now = at(NOW);
        let protected = pod(
            "protected",
            r#", "annotations": {"karpenter.sh/do-not-disrupt": "true"}"#,
            "",
            "Running",
        );
        let critical = pod("dns", "", CRITICAL, "Running");
        let plan = drain_plan(&[protected.clone(), critical.clone()], now, None);
        assert_eq!(
            names(&plan.evict),
            ["dns"],
            "a protected pod does not hold back the next group"
        );
        assert_eq!(names(&plan.do_not_disrupt), ["protected"]);
        assert_eq!(plan.waiting, 2);
        let plan = drain_plan(std::slice::from_ref(&protected), now, None);
        assert!(!plan.drained(), "without a deadline the drain waits for it");
        assert!(plan.evict.is_empty() && plan.delete.is_empty());

        // A duration that has run out no longer protects the pod.
        let expired = pod(
            "expired",
            r#", "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": {"karpenter.sh/do-not-disrupt": "5m"}"#,
            "",
            "Running",
        );
        assert_eq!(names(&drain_plan(&[expired], now, None).evict), ["expired"]);
    }

    #[test]
    fn with_a_deadline_pods_are_deleted_so_their_own_grace_ends_by_it() {
        let now = at(NOW);
        let protected = pod(
            "protected",
            r#", "annotations": {"karpenter.sh/do-not-disrupt": "true"}"#,
            r#", "terminationGracePeriodSeconds": 120"#,
            "Running",
        );
        let short = pod("short", "", r#", "terminationGracePeriodSeconds": 10"#, "Running");
        let dns = pod(
            "dns",
            "",
            r#", "terminationGracePeriodSeconds": 600, "priorityClassName": "system-node-critical""#,
            "Running",
        );
        let pods = vec![protected.clone(), short.clone(), dns.clone()];

        // Deadline in 5 minutes: only dns's 600 s would overrun it; it is deleted with the 300 s left, though
        // its group's turn has not come.
        let plan = drain_plan(&pods, now, Some(at("2026-01-01T00:15:00Z")));
        let deleted: Vec<(String, i64)> = plan
            .delete
            .iter()
            .map(|d| (d.pod.metadata.name.clone().unwrap_or_default(), d.grace_seconds))
            .collect();
        assert_eq!(deleted, [("dns".to_string(), 300)]);
        assert_eq!(names(&plan.evict), ["short"]);
        assert_eq!(names(&plan.do_not_disrupt), ["protected"]);

        // 90 s before the deadline: the protected pod's 120 s would overrun it, so it goes, with 90 s.
        let plan = drain_plan(&pods, now, Some(at("2026-01-01T00:11:30Z")));
        let deleted: Vec<(String, i64)> = plan
            .delete
            .iter()
            .map(|d| (d.pod.metadata.name.clone().unwrap_or_default(), d.grace_seconds))
            .collect();
        assert_eq!(deleted, [("protected".to_string(), 90), ("dns".to_string(), 90)]);
        assert!(plan.do_not_disrupt.is_empty());
        assert_eq!(names(&plan.evict), ["short"], "short's 10 s still fit");

        // Past the deadline: everything left goes at once.
        let plan = drain_plan(&pods, now, Some(at("2026-01-01T00:09:00Z")));
        assert_eq!(plan.delete.len(), 3);
        assert!(plan.delete.iter().all(|d| d.grace_seconds == 0));
        assert!(plan.evict.is_empty());
        assert_eq!(plan.waiting, 3);
    }
}
