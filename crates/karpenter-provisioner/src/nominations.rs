//! `Nominated` events: one on each pod the provisioner found a place for, naming where it is going, as upstream's
//! provisioner emits (`kubectl describe pod` shows it): the NodeClaim made for it, or the node (and its NodeClaim)
//! or NodeClaim still launching that it fits on. A pod waiting through many rounds (for a node to start, or a GPU
//! to register) is nominated again at most every [`NOMINATION_DEDUPE`], as upstream's event recorder does.
//!
//! They are written as events.k8s.io/v1 Events directly rather than through kube-runtime's `Recorder`: the
//! recorder keeps a cache for event series and scans all of it on every publish, which made a batch of 10,000
//! nominations quadratic.

use std::{
    collections::{HashMap, hash_map::Entry},
    time::Duration,
};

use jiff::Timestamp;
use k8s_openapi::{
    api::{core::v1::ObjectReference, events::v1::Event},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
};
use karpenter_core::snapshot::Snapshot;
use kube::{Api, Client, api::PostParams};
use tokio::time::Instant;

/// The reporting controller named on the events, as on every other event Karpenter records.
const REPORTER: &str = "karpenter";
pub const NOMINATED: &str = "Nominated";

/// A pod (`namespace/name`) and where it should go: a NodeClaim, a Node, or a Node and its NodeClaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nomination {
    pub pod: String,
    pub node_claim: Option<String>,
    pub node: Option<String>,
}

/// The nominations of pods the simulation placed on existing places: `placed` holds, per index into
/// `place_names` (a Node's name, or an in-flight NodeClaim's), indices into `pod_names`. A Node is named with its
/// NodeClaim, when it has one.
pub fn on_existing(
    snapshot: &Snapshot,
    place_names: &[String],
    pod_names: &[String],
    placed: &[(usize, Vec<usize>)],
) -> Vec<Nomination> {
    if placed.iter().all(|(_, pods)| pods.is_empty()) {
        return Vec::new();
    }
    let node_provider_ids: HashMap<&str, Option<&str>> = snapshot
        .nodes
        .iter()
        .filter_map(|n| {
            let id = n.spec.as_ref().and_then(|s| s.provider_id.as_deref());
            Some((n.metadata.name.as_deref()?, id))
        })
        .collect();
    let mut claims: HashMap<&str, &str> = HashMap::new();
    for claim in &snapshot.node_claims {
        let (Some(name), Some(status)) = (claim.metadata.name.as_deref(), claim.status.as_ref()) else {
            continue;
        };
        for key in [status.node_name.as_deref(), status.provider_id.as_deref()]
            .into_iter()
            .flatten()
        {
            claims.insert(key, name);
        }
    }
    let mut out = Vec::new();
    for (place, pods) in placed {
        let Some(name) = place_names.get(*place) else {
            continue;
        };
        let (node_claim, node) = match node_provider_ids.get(name.as_str()) {
            Some(provider_id) => {
                let claim = claims
                    .get(name.as_str())
                    .or_else(|| provider_id.and_then(|id| claims.get(id)));
                (claim.map(|c| (*c).to_string()), Some(name.clone()))
            }
            None => (Some(name.clone()), None),
        };
        out.extend(
            pods.iter()
                .filter_map(|p| pod_names.get(*p))
                .map(|pod| Nomination {
                    pod: pod.clone(),
                    node_claim: node_claim.clone(),
                    node: node.clone(),
                }),
        );
    }
    out
}

/// How long a pod's nomination is not repeated (upstream's event dedupe window).
pub const NOMINATION_DEDUPE: Duration = Duration::from_secs(120);

/// The pods nominated within the last [`NOMINATION_DEDUPE`], by `namespace/name`.
#[derive(Debug, Default)]
pub struct RecentNominations {
    at: HashMap<String, Instant>,
}

impl RecentNominations {
    /// The nominations of pods not nominated within the window, which are remembered from `now`.
    pub fn admit(&mut self, nominations: Vec<Nomination>, now: Instant) -> Vec<Nomination> {
        // Forgetting expired pods here keeps the map as small as the pods nominated in one window.
        self.at
            .retain(|_, at| now.saturating_duration_since(*at) < NOMINATION_DEDUPE);
        nominations
            .into_iter()
            .filter(|n| match self.at.entry(n.pod.clone()) {
                Entry::Occupied(_) => false,
                Entry::Vacant(v) => {
                    v.insert(now);
                    true
                }
            })
            .collect()
    }
}

/// The Event for one nomination at `now`; None when `pod` is not `namespace/name`.
pub fn nomination_event(nomination: &Nomination, now: Timestamp) -> Option<Event> {
    let (namespace, name) = nomination.pod.split_once('/')?;
    Some(Event {
        metadata: ObjectMeta {
            // The name the Kubernetes event libraries give: the object's name and the time in hex nanoseconds.
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some("Normal".into()),
        reason: Some(NOMINATED.into()),
        action: Some(NOMINATED.into()),
        note: Some(format!("Pod should schedule on: {}", target(nomination))),
        regarding: Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            ..ObjectReference::default()
        }),
        reporting_controller: Some(REPORTER.into()),
        reporting_instance: Some(REPORTER.into()),
        ..Event::default()
    })
}

/// `nodeclaim/<name>, node/<name>`, either part left out when unknown.
fn target(nomination: &Nomination) -> String {
    let claim = nomination.node_claim.iter().map(|c| format!("nodeclaim/{c}"));
    let node = nomination.node.iter().map(|n| format!("node/{n}"));
    claim.chain(node).collect::<Vec<_>>().join(", ")
}

/// Publishes one event per nomination. Events are informational: one that cannot be written is logged at debug
/// level and the rest still go out.
pub async fn publish(client: Client, nominations: Vec<Nomination>) {
    for nomination in &nominations {
        let Some(event) = nomination_event(nomination, Timestamp::now()) else {
            continue;
        };
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
        if let Err(error) = api.create(&PostParams::default(), &event).await {
            tracing::debug!(pod = %nomination.pod, %error, "nomination event not sent");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nomination(pod: &str) -> Nomination {
        Nomination {
            pod: pod.into(),
            node_claim: Some("default-x7k2p".into()),
            node: None,
        }
    }

    #[test]
    fn the_event_names_the_pod_and_its_node_claim() {
        let now: Timestamp = "2026-12-03T10:00:00Z".parse().unwrap();
        let event = nomination_event(&nomination("team-a/web-0"), now).unwrap();
        assert_eq!(event.metadata.namespace.as_deref(), Some("team-a"));
        assert!(event.metadata.name.as_deref().unwrap().starts_with("web-0."));
        assert_eq!(event.reason.as_deref(), Some("Nominated"));
        assert_eq!(event.type_.as_deref(), Some("Normal"));
        assert_eq!(
            event.note.as_deref(),
            Some("Pod should schedule on: nodeclaim/default-x7k2p")
        );
        let regarding = event.regarding.unwrap();
        assert_eq!(regarding.kind.as_deref(), Some("Pod"));
        assert_eq!(regarding.name.as_deref(), Some("web-0"));
        assert_eq!(regarding.namespace.as_deref(), Some("team-a"));
        assert_eq!(event.event_time.map(|t| t.0), Some(now));
        assert_eq!(event.reporting_controller.as_deref(), Some("karpenter"));
    }

    #[test]
    fn a_pod_key_without_namespace_gets_no_event() {
        assert_eq!(nomination_event(&nomination("web-0"), Timestamp::now()), None);
    }

    #[test]
    fn a_pod_on_a_node_is_told_the_node_and_its_node_claim() {
        let on_node = Nomination {
            node: Some("ip-10-0-0-1.sim.internal".into()),
            ..nomination("default/train-1")
        };
        let event = nomination_event(&on_node, Timestamp::UNIX_EPOCH).unwrap();
        assert_eq!(
            event.note.as_deref(),
            Some("Pod should schedule on: nodeclaim/default-x7k2p, node/ip-10-0-0-1.sim.internal")
        );
    }

    #[test]
    fn a_pod_is_nominated_again_only_after_the_dedupe_window() {
        let mut recent = RecentNominations::default();
        let t0 = Instant::now();
        let round = || vec![nomination("default/a"), nomination("default/b")];
        assert_eq!(recent.admit(round(), t0).len(), 2);
        let later = t0 + NOMINATION_DEDUPE - Duration::from_secs(1);
        assert_eq!(
            recent.admit(vec![nomination("default/a"), nomination("default/c")], later),
            vec![nomination("default/c")]
        );
        let pods: Vec<String> = recent
            .admit(round(), t0 + NOMINATION_DEDUPE)
            .into_iter()
            .map(|n| n.pod)
            .collect();
        assert_eq!(pods, ["default/a", "default/b"]);
    }

    #[test]
    fn pods_placed_on_a_node_or_an_in_flight_claim_are_nominated_there() {
        let mut snapshot = Snapshot::default();
        let notes = snapshot.add_text(
            "apiVersion: v1\nkind: Node\nmetadata: {name: gpu-node}\nspec: {providerID: sim:///z/i-1}\n---\n\
             apiVersion: v1\nkind: Node\nmetadata: {name: unmanaged}\n---\n\
             apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {name: gpu-claim}\n\
             spec: {requirements: [], nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n\
             status: {providerID: sim:///z/i-1}\n",
            "test.yaml",
        );
        assert!(notes.is_empty(), "{notes:?}");
        let places = ["gpu-node", "unmanaged", "launching"].map(String::from);
        let pods = ["default/a", "default/b", "default/c", "default/d"].map(String::from);
        let placed = [(0, vec![0, 1]), (1, vec![2]), (2, vec![3])];
        let got = on_existing(&snapshot, &places, &pods, &placed);
        let n = |pod: &str, claim: Option<&str>, node: Option<&str>| Nomination {
            pod: pod.into(),
            node_claim: claim.map(String::from),
            node: node.map(String::from),
        };
        assert_eq!(
            got,
            [
                n("default/a", Some("gpu-claim"), Some("gpu-node")),
                n("default/b", Some("gpu-claim"), Some("gpu-node")),
                n("default/c", None, Some("unmanaged")),
                n("default/d", Some("launching"), None),
            ]
        );
    }
}
