//! `status.lastPodEventTime` on NodeClaims (upstream's nodeclaim.podevents controller): when a pod is bound to a
//! claim's Node, or a pod on it goes terminal (Succeeded, Failed), starts terminating or is deleted, the claim
//! records the time, and consolidateAfter counts from it (core's `disruption::consolidatable`), so a node whose
//! pods keep coming and going is not consolidated while they do.
//!
//! DaemonSet pods are left out, as upstream does: they come and go with the node itself. Writes are deduplicated
//! as upstream's were: a claim whose `lastPodEventTime` is less than [`DEDUPE_WINDOW`] old is not written again,
//! which bounds the writes on a busy node to one every 10 seconds (below the disruption's 15-second validation,
//! so a decision taken while events were being deduplicated is still caught by it).
//!
//! [`PodEventTracker`] is the pure part: it remembers, per bound pod, its node and whether it was leaving, and
//! each pass reports the nodes whose pods changed since the last. The first pass only learns the cluster (a
//! restart is no pod event). [`PodEventsController`] runs it over the state cache and writes the claims.

use std::{
    collections::{BTreeSet, HashMap, hash_map::Entry},
    hash::{BuildHasher, RandomState},
    sync::Arc,
    time::Duration,
};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_core::{clock::Clock, snapshot::CompactPod};
use karpenter_state::api_errors::is_not_found;
use karpenter_state::{ControllerContext, periodic::run_synced};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;

use crate::ProvisionerError;

/// How old a claim's `lastPodEventTime` must be before another pod event is written (upstream's dedupeTimeout).
pub const DEDUPE_WINDOW: SignedDuration = SignedDuration::from_secs(10);

/// What the tracker remembers of a bound pod: eight bytes, so that with its key an entry is sixteen (at 150,000
/// pods the map is 4 MiB rather than the 8 MiB of an entry holding the node's name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    /// Index into the tracker's node names.
    node: u32,
    /// The pass that last saw it (31 bits, wrapping), and in the top bit whether it was leaving (terminal or
    /// terminating).
    pass_and_leaving: u32,
}

const LEAVING: u32 = 1 << 31;

impl Seen {
    fn pass(self) -> u32 {
        self.pass_and_leaving & !LEAVING
    }

    fn leaving(self) -> bool {
        self.pass_and_leaving & LEAVING != 0
    }
}

/// The pods bound to nodes as last seen, to tell what changed (see the module documentation).
///
/// Pods are keyed by a 64-bit hash of their namespace and name, and the map is updated in place, so a pass over
/// 150,000 pods allocates nothing per pod (a key string per pod, and a second map each pass, cost tens of MiB at
/// that size). Two pods whose keys collide (odds about 1 in 10^9 at 150,000 pods) would at worst stamp a claim
/// once more or once less.
#[derive(Debug, Default)]
pub struct PodEventTracker {
    seen: HashMap<u64, Seen>,
    /// Node names by index, and the index of each. Names of nodes no pod is on any more are dropped when they
    /// are more than half the table ([`PodEventTracker::compact_nodes`]).
    node_names: Vec<Arc<str>>,
    node_index: HashMap<Arc<str>, u32>,
    hasher: RandomState,
    pass: u32,
    primed: bool,
}

fn is_daemon_pod(pod: &CompactPod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" && o.controller == Some(true))
}

fn is_leaving(pod: &CompactPod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        || matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

impl PodEventTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes in every pod as it is now and returns the nodes a pod was bound to, left (went terminal, started
    /// terminating) or was deleted from since the last call. The first call reports nothing.
    pub fn observe<'a>(&mut self, pods: impl IntoIterator<Item = &'a CompactPod>) -> BTreeSet<Arc<str>> {
        let mut events = BTreeSet::new();
        self.pass = self.pass.wrapping_add(1) & !LEAVING;
        let pass = self.pass;
        for pod in pods {
            let Some(node) = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .filter(|n| !n.is_empty())
            else {
                continue;
            };
            if is_daemon_pod(pod) {
                continue;
            }
            let key = self.hasher.hash_one((
                pod.metadata.namespace.as_deref().unwrap_or_default(),
                pod.metadata.name.as_deref().unwrap_or_default(),
            ));
            let leaving = is_leaving(pod);
            let now = Seen {
                node: self.index_of(node),
                pass_and_leaving: pass | if leaving { LEAVING } else { 0 },
            };
            let changed = match self.seen.entry(key) {
                Entry::Vacant(slot) => {
                    slot.insert(now);
                    true
                }
                Entry::Occupied(mut slot) => {
                    let before = slot.get_mut();
                    let changed = before.node != now.node || (leaving && !before.leaving());
                    *before = now;
                    changed
                }
            };
            if changed && self.primed {
                events.insert(Arc::clone(node));
            }
        }
        // Gone without being seen leaving (deleted at once): an event on the node it was on.
        let (primed, names) = (self.primed, &self.node_names);
        self.seen.retain(|_, s| {
            let gone = s.pass() != pass;
            if gone && primed && !s.leaving() {
                events.insert(Arc::clone(&names[s.node as usize]));
            }
            !gone
        });
        self.primed = true;
        self.compact_nodes();
        events
    }

    fn index_of(&mut self, node: &Arc<str>) -> u32 {
        if let Some(&i) = self.node_index.get(node) {
            return i;
        }
        let i = u32::try_from(self.node_names.len()).unwrap_or(u32::MAX);
        self.node_names.push(Arc::clone(node));
        self.node_index.insert(Arc::clone(node), i);
        i
    }

    /// Drops the names no remembered pod is on, once they are more than half the table, renumbering the rest.
    fn compact_nodes(&mut self) {
        let mut used = vec![false; self.node_names.len()];
        for s in self.seen.values() {
            used[s.node as usize] = true;
        }
        let live = used.iter().filter(|u| **u).count();
        if self.node_names.len() <= 2 * live + 64 {
            return;
        }
        let mut renumbered = vec![0u32; self.node_names.len()];
        let mut names = Vec::with_capacity(live);
        for (i, name) in std::mem::take(&mut self.node_names).into_iter().enumerate() {
            if used[i] {
                renumbered[i] = u32::try_from(names.len()).unwrap_or(u32::MAX);
                names.push(name);
            }
        }
        for s in self.seen.values_mut() {
            s.node = renumbered[s.node as usize];
        }
        self.node_index = names
            .iter()
            .enumerate()
            .map(|(i, n)| (Arc::clone(n), u32::try_from(i).unwrap_or(u32::MAX)))
            .collect();
        self.node_names = names;
    }
}

/// Whether a pod event at `now` is written over the claim's `lastPodEventTime` (`last`).
pub fn should_write(last: Option<Timestamp>, now: Timestamp) -> bool {
    last.is_none_or(|last| now.duration_since(last) >= DEDUPE_WINDOW)
}

/// The podevents controller's context.
pub struct PodEventsController {
    cx: ControllerContext,
    /// How often the pods are looked at (tokio time).
    pub interval: Duration,
    tracker: std::sync::Mutex<(PodEventTracker, Option<u64>)>,
}

impl PodEventsController {
    pub fn new(cx: ControllerContext) -> Self {
        Self {
            cx,
            interval: Duration::from_secs(1),
            tracker: std::sync::Mutex::new((PodEventTracker::new(), None)),
        }
    }

    /// Runs passes until the future is dropped; a failed write is logged and the event is taken at the next.
    pub async fn run(&self) {
        run_synced(&self.cx.state, "nodeclaim.podevents", self.interval, || async {
            if let Err(error) = self.pass().await {
                tracing::debug!(controller = "nodeclaim.podevents", %error, "writing a pod event failed");
            }
            // Not a failed reconcile: the event is simply taken at the next pass.
            true
        })
        .await;
    }

    /// Finds the nodes whose pods changed since the last pass and stamps their claims. Returns the claims written.
    pub async fn pass(&self) -> Result<Vec<String>, ProvisionerError> {
        let nodes = {
            let mut guard = self
                .tracker
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (tracker, version) = &mut *guard;
            // No pod changed since the last pass: nothing to look at (the cost stays with what changed).
            let current = self.cx.state.pods.version();
            if *version == Some(current) {
                return Ok(Vec::new());
            }
            *version = Some(current);
            // The tracker keys pods by name and answers a set of nodes: the order does not matter.
            let pods = self.cx.state.pods.unordered();
            tracker.observe(pods.iter().map(|p| &**p))
        };
        if nodes.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.cx.clock.now();
        let api: Api<NodeClaim> = Api::all(self.cx.client.clone());
        let mut written = Vec::new();
        let claims = self.cx.state.node_claims.filter(|c| {
            c.metadata.deletion_timestamp.is_none()
                && c.status
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_some_and(|n| nodes.contains(n))
        });
        for claim in claims {
            let last = claim
                .status
                .as_ref()
                .and_then(|s| s.last_pod_event_time.as_ref())
                .map(|t| t.0);
            if !should_write(last, now) {
                continue;
            }
            let Some(name) = claim.metadata.name.clone() else {
                continue;
            };
            let patch = json!({"status": {"lastPodEventTime": Time(now)}});
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => written.push(name),
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(name: &str, node: Option<&str>, extra: Value) -> CompactPod {
        let mut v = json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"containers": []}});
        if let Some(node) = node {
            v["spec"]["nodeName"] = json!(node);
        }
        if let Value::Object(extra) = extra {
            for (k, e) in extra {
                match (v.get_mut(&k), e) {
                    (Some(Value::Object(o)), Value::Object(e)) => o.extend(e),
                    (_, e) => v[k] = e,
                }
            }
        }
        serde_json::from_value(v).unwrap()
    }

    fn nodes(set: BTreeSet<Arc<str>>) -> Vec<String> {
        set.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn binds_leaves_and_deletions_are_pod_events_on_their_node() {
        let mut t = PodEventTracker::new();
        let a = pod("a", Some("n1"), Value::Null);
        let pending = pod("b", None, Value::Null);
        // The first pass learns what runs where: a restart is no event.
        assert!(t.observe([&a, &pending]).is_empty());
        assert!(t.observe([&a, &pending]).is_empty());
        // b is bound to n2.
        let b = pod("b", Some("n2"), Value::Null);
        assert_eq!(nodes(t.observe([&a, &b])), ["n2"]);
        // a finishes.
        let done = pod("a", Some("n1"), json!({"status": {"phase": "Succeeded"}}));
        assert_eq!(nodes(t.observe([&done, &b])), ["n1"]);
        // The finished pod is then deleted: it had already left, no second event.
        assert!(t.observe([&b]).is_empty());
        // b starts terminating, then is deleted.
        let terminating = pod(
            "b",
            Some("n2"),
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
        );
        assert_eq!(nodes(t.observe([&terminating])), ["n2"]);
        assert!(t.observe([]).is_empty());
        // A pod deleted at once (never seen terminating) is an event too.
        let c = pod("c", Some("n3"), Value::Null);
        assert_eq!(nodes(t.observe([&c])), ["n3"]);
        assert_eq!(nodes(t.observe([])), ["n3"]);
    }

    #[test]
    fn nodes_that_come_and_go_keep_naming_their_events() {
        let mut t = PodEventTracker::new();
        let stays = pod("stays", Some("n-keep"), json!({}));
        assert!(t.observe([&stays]).is_empty());
        // Every round new pods are bound to a new node (an event on it) and the last round's are deleted at once
        // (an event on theirs).
        for round in 0..300 {
            let moved: Vec<CompactPod> = (0..3)
                .map(|k| pod(&format!("p{round}-{k}"), Some(&format!("n{round}")), json!({})))
                .collect();
            let mut expected = vec![format!("n{round}")];
            if round > 0 {
                expected.insert(0, format!("n{}", round - 1));
                expected.sort();
            }
            let events = t.observe(std::iter::once(&stays).chain(&moved));
            assert_eq!(nodes(events), expected, "round {round}");
            // Names of nodes no pod is on are dropped, so the table stays near the live nodes.
            assert!(
                t.node_names.len() <= 2 * 2 + 64 + 1,
                "round {round}: {}",
                t.node_names.len()
            );
        }
        // The pod that never moved is still on its node, under whatever index the node has now.
        assert_eq!(nodes(t.observe([])), ["n-keep", "n299"]);
    }

    #[test]
    fn daemonset_pods_are_no_pod_events() {
        let mut t = PodEventTracker::new();
        assert!(t.observe([]).is_empty());
        let daemon = pod(
            "d",
            Some("n1"),
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                "name": "ds", "uid": "u", "controller": true}]}}),
        );
        assert!(t.observe([&daemon]).is_empty());
        assert!(t.observe([]).is_empty());
    }

    #[test]
    fn a_claim_is_written_at_most_once_per_dedupe_window() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        assert!(should_write(None, t0));
        assert!(!should_write(Some(t0), t0 + SignedDuration::from_secs(9)));
        assert!(should_write(Some(t0), t0 + SignedDuration::from_secs(10)));
    }
}
