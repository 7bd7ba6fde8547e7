//! `Nominated` events: one on each pod the provisioner made a NodeClaim for, naming that NodeClaim, as
//! upstream's provisioner emits (`kubectl describe pod` shows where the pod is going).
//!
//! They are written as events.k8s.io/v1 Events directly rather than through kube-runtime's `Recorder`: the
//! recorder keeps a cache for event series and scans all of it on every publish, which made a batch of 10,000
//! nominations quadratic. A nomination never repeats (each names a NodeClaim just created), so it never needs a
//! series.

use jiff::Timestamp;
use k8s_openapi::{
    api::{core::v1::ObjectReference, events::v1::Event},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
};
use kube::{Api, Client, api::PostParams};

/// The reporting controller named on the events, as on every other event Karpenter records.
const REPORTER: &str = "karpenter";
pub const NOMINATED: &str = "Nominated";

/// A pod (`namespace/name`) and the NodeClaim made for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nomination {
    pub pod: String,
    pub node_claim: String,
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
        note: Some(format!(
            "Pod should schedule on: nodeclaim/{}",
            nomination.node_claim
        )),
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
            node_claim: "default-x7k2p".into(),
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
}
