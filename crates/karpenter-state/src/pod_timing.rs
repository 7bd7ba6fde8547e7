//! How long pods take to be bound and to start, observed as the pod watch sees them change:
//! `karpenter_pods_startup_duration_seconds` (creation to Ready), `karpenter_pods_bound_duration_seconds`
//! (creation to PodScheduled) and `karpenter_pods_provisioning_bound_duration_seconds` (from the provisioner's
//! first decision placing the pod to its binding).
//!
//! As upstream, only pods seen Pending count (a pod already running when the controller starts says nothing
//! about how long pods take to start): a pod seen Pending is remembered until it is Ready, terminal or
//! deleted, a pod seen Pending and unbound until it is bound. The first two durations are read from the pod's
//! own timestamps (its Ready or PodScheduled condition's transition time less its creation); the
//! provisioning one runs from the moment the provisioner placed the pod (in memory, as upstream's) to the
//! moment the watch sees it bound.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, PoisonError},
};

use k8s_openapi::{
    api::core::v1::{Pod, PodCondition},
    apimachinery::pkg::apis::meta::v1::Time,
};
use tokio::time::Instant;

#[derive(Debug, Default)]
struct Tracked {
    /// Pods seen Pending, not yet Ready.
    unstarted: HashSet<String>,
    /// Pods seen Pending and unbound, not yet bound.
    unbound: HashSet<String>,
    /// When the provisioner first placed each pod not yet bound.
    schedulable: HashMap<String, Instant>,
}

/// See the module documentation. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct PodTiming {
    tracked: Arc<Mutex<Tracked>>,
}

fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Seconds from `from` to the transition of `condition`, if both are known and in order.
fn since(from: Option<&Time>, condition: Option<&PodCondition>) -> Option<f64> {
    let to = condition?.last_transition_time.as_ref()?;
    let seconds = to.0.duration_since(from?.0).as_secs_f64();
    (seconds >= 0.0).then_some(seconds)
}

impl PodTiming {
    /// Records that the provisioner's simulation placed `pods` (`namespace/name`) now; a pod placed before keeps
    /// its first time.
    pub fn mark_schedulable<'a>(&self, pods: impl IntoIterator<Item = &'a str>) {
        let now = Instant::now();
        let mut tracked = self.tracked.lock().unwrap_or_else(PoisonError::into_inner);
        for pod in pods {
            if !tracked.schedulable.contains_key(pod) {
                tracked.schedulable.insert(pod.to_string(), now);
            }
        }
    }

    /// Looks at one version of a pod the watch delivered.
    pub(crate) fn observe(&self, pod: &Pod) {
        let key = crate::reflect::key_of(pod);
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or_default();
        let pending = phase == "Pending";
        let terminal = phase == "Succeeded" || phase == "Failed";
        let ready = condition(pod, "Ready").filter(|c| c.status == "True");
        let scheduled_condition = condition(pod, "PodScheduled").filter(|c| c.status == "True");
        let bound = scheduled_condition.is_some()
            || pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| !n.is_empty());
        let created = pod.metadata.creation_timestamp.as_ref();
        let m = karpenter_metrics::metrics();
        let mut tracked = self.tracked.lock().unwrap_or_else(PoisonError::into_inner);

        if pending {
            if !tracked.unstarted.contains(&key) {
                tracked.unstarted.insert(key.clone());
            }
        } else if (ready.is_some() || terminal) && tracked.unstarted.remove(&key) {
            // A terminal pod's Ready condition is False: it did not start, nothing is observed.
            if let Some(seconds) = since(created, ready) {
                m.pods_startup_duration_seconds.observe(seconds);
            }
        }

        if pending && !bound {
            if !tracked.unbound.contains(&key) {
                tracked.unbound.insert(key);
            }
        } else if bound {
            let placed = tracked.schedulable.remove(&key);
            if tracked.unbound.remove(&key) {
                if let Some(seconds) = since(created, scheduled_condition) {
                    m.pods_bound_duration_seconds.observe(seconds);
                }
                if let Some(placed) = placed {
                    m.pods_provisioning_bound_duration_seconds
                        .observe(placed.elapsed().as_secs_f64());
                }
            }
        } else if terminal {
            tracked.unbound.remove(&key);
            tracked.schedulable.remove(&key);
        }
    }

    /// Forgets a deleted pod.
    pub(crate) fn forget(&self, key: &str) {
        let mut tracked = self.tracked.lock().unwrap_or_else(PoisonError::into_inner);
        tracked.unstarted.remove(key);
        tracked.unbound.remove(key);
        tracked.schedulable.remove(key);
    }

    /// Forgets every pod `keep` says is gone (after a relist, deletions the watch missed).
    pub(crate) fn retain(&self, mut keep: impl FnMut(&str) -> bool) {
        let mut tracked = self.tracked.lock().unwrap_or_else(PoisonError::into_inner);
        tracked.unstarted.retain(|k| keep(k));
        tracked.unbound.retain(|k| keep(k));
        tracked.schedulable.retain(|k, _| keep(k));
    }

    /// How many pods are remembered (unstarted, unbound, placed).
    pub fn tracked(&self) -> (usize, usize, usize) {
        let tracked = self.tracked.lock().unwrap_or_else(PoisonError::into_inner);
        (
            tracked.unstarted.len(),
            tracked.unbound.len(),
            tracked.schedulable.len(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn pod(phase: &str, node: Option<&str>, conditions: serde_json::Value) -> Pod {
        let mut spec = json!({"containers": []});
        if let Some(node) = node {
            spec["nodeName"] = json!(node);
        }
        serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "timing", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec,
            "status": {"phase": phase, "conditions": conditions},
        }))
        .unwrap_or_default()
    }

    fn counts() -> (u64, u64, u64) {
        let text = karpenter_metrics::metrics().encode();
        let count = |series: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or(0)
        };
        (
            count("karpenter_pods_startup_duration_seconds_count"),
            count("karpenter_pods_bound_duration_seconds_count"),
            count("karpenter_pods_provisioning_bound_duration_seconds_count"),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_seen_pending_records_its_bind_and_start_once() {
        // The counters are process-wide: other tests may add to them, never this pod's key.
        let timing = PodTiming::default();
        let before = counts();
        timing.observe(&pod(
            "Pending",
            None,
            json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]),
        ));
        assert_eq!(timing.tracked(), (1, 1, 0));
        timing.mark_schedulable(["timing/web-1"]);
        tokio::time::advance(Duration::from_secs(40)).await;
        timing.mark_schedulable(["timing/web-1"]);
        tokio::time::advance(Duration::from_secs(5)).await;
        let scheduled =
            json!([{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:01:30Z"}]);
        timing.observe(&pod("Pending", Some("n1"), scheduled.clone()));
        let after_bind = counts();
        assert!(
            after_bind.1 > before.1 && after_bind.2 > before.2,
            "{before:?} {after_bind:?}"
        );
        assert_eq!(timing.tracked(), (1, 0, 0));
        let text = karpenter_metrics::metrics().encode();
        assert!(
            text.contains("karpenter_pods_provisioning_bound_duration_seconds_bucket{le=\"45.0\"}"),
            "{text}"
        );

        let mut running = scheduled.as_array().cloned().unwrap_or_default();
        running
            .push(json!({"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:02:00Z"}));
        timing.observe(&pod("Running", Some("n1"), json!(running)));
        assert_eq!(timing.tracked(), (0, 0, 0));
        let started = counts();
        assert!(started.0 > after_bind.0, "{after_bind:?} {started:?}");
        // Seen again (a later update), nothing more is observed for it.
        timing.observe(&pod("Running", Some("n1"), json!(running)));
        assert_eq!(timing.tracked(), (0, 0, 0));
    }

    #[test]
    fn pods_never_seen_pending_or_gone_are_not_observed_nor_kept() {
        let timing = PodTiming::default();
        let ready =
            json!([{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:02:00Z"}]);
        timing.observe(&pod("Running", Some("n1"), ready));
        assert_eq!(timing.tracked(), (0, 0, 0));
        timing.observe(&pod("Pending", None, json!([])));
        timing.mark_schedulable(["timing/web-1"]);
        assert_eq!(timing.tracked(), (1, 1, 1));
        timing.forget("timing/web-1");
        assert_eq!(timing.tracked(), (0, 0, 0));
        timing.observe(&pod("Pending", None, json!([])));
        timing.observe(&pod("Failed", None, json!([])));
        assert_eq!(timing.tracked(), (0, 0, 0), "a terminal pod is forgotten");
        timing.observe(&pod("Pending", None, json!([])));
        timing.retain(|_| false);
        assert_eq!(timing.tracked(), (0, 0, 0));
    }
}
