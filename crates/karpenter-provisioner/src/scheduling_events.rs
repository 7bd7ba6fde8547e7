//! The provisioner's Warning events, as upstream's scheduler writes them:
//! - `FailedScheduling` on each pod a round could place nowhere, saying why ("Failed to schedule pod, <why>").
//!   A pod stays pending through many rounds, so it is told at most once per [`FAILED_SCHEDULING_DEDUPE`]
//!   (upstream's five minutes, per pod, whatever the reason says by then);
//! - `NoCompatibleInstanceTypes` on each NodePool whose requirements leave it no instance type with an available
//!   offering, at most once a minute.
//!
//! Pure: the messages and the objects they are about; the provisioner publishes them.

use jiff::SignedDuration;
use k8s_openapi::api::core::v1::ObjectReference;
use karpenter_api::nodepool::NodePool;
use karpenter_core::snapshot::compact_pod::PodUid;
use karpenter_state::events::Dedupe;
use kube::Resource;

pub const FAILED_SCHEDULING: &str = "FailedScheduling";
pub const NO_COMPATIBLE_INSTANCE_TYPES: &str = "NoCompatibleInstanceTypes";

/// How long a pod is not told again that it cannot be scheduled.
pub const FAILED_SCHEDULING_DEDUPE: SignedDuration = SignedDuration::from_secs(5 * 60);
/// How long a NodePool is not told again that no instance type is left to it.
pub const NO_COMPATIBLE_DEDUPE: SignedDuration = SignedDuration::from_secs(60);

/// What a NodePool with no instance type left is told.
pub const NO_COMPATIBLE_MESSAGE: &str =
    "NodePool requirements filtered out all compatible available instance types";

/// One Warning to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Warning {
    pub regarding: ObjectReference,
    pub reason: &'static str,
    pub message: String,
    /// What identifies a repeat (the object's UID, as upstream's dedupe values).
    pub dedupe_key: String,
    pub window: SignedDuration,
}

impl Warning {
    pub fn dedupe(&self) -> Dedupe<'_> {
        Dedupe {
            key: Some(&self.dedupe_key),
            window: self.window,
        }
    }
}

/// The message of a pod the simulation could not place, `why` being the simulation's reason.
pub fn failed_scheduling_message(why: &str) -> String {
    format!("Failed to schedule pod, {why}")
}

/// The `FailedScheduling` Warning on the pod `namespace/name` whose UID is `uid`; None when `pod` is not
/// `namespace/name`. A repeat is the same pod, as upstream's dedupe on the UID: a later pod of the same name (a
/// StatefulSet's replacement) is told at once.
pub fn failed_scheduling(pod: &str, uid: PodUid, why: &str) -> Option<Warning> {
    let (namespace, name) = pod.split_once('/')?;
    Some(Warning {
        regarding: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            ..ObjectReference::default()
        },
        reason: FAILED_SCHEDULING,
        message: failed_scheduling_message(why),
        dedupe_key: if uid.is_unknown() {
            pod.to_string()
        } else {
            format!("{pod}/{uid}")
        },
        window: FAILED_SCHEDULING_DEDUPE,
    })
}

/// The `NoCompatibleInstanceTypes` Warning on `pool`.
pub fn no_compatible_instance_types(pool: &NodePool) -> Warning {
    let regarding = NodePool::object_ref(pool, &());
    let dedupe_key = regarding
        .uid
        .clone()
        .or_else(|| regarding.name.clone())
        .unwrap_or_default();
    Warning {
        regarding,
        reason: NO_COMPATIBLE_INSTANCE_TYPES,
        message: NO_COMPATIBLE_MESSAGE.to_string(),
        dedupe_key,
        window: NO_COMPATIBLE_DEDUPE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_without_a_place_is_told_why_once_per_five_minutes() {
        let why =
            "incompatible with nodepool \"default\", no instance type satisfied resources {\"cpu\":\"100\"}";
        let uid = PodUid::new(Some("0b8c5b0e-2f6e-4c1a-9d3e-5a7b9c1d2e3f"));
        let w = failed_scheduling("team-a/web-0", uid, why).unwrap();
        assert_eq!(w.reason, "FailedScheduling");
        assert_eq!(
            w.message,
            format!("Failed to schedule pod, {why}"),
            "upstream's wording"
        );
        assert_eq!(w.regarding.kind.as_deref(), Some("Pod"));
        assert_eq!(w.regarding.namespace.as_deref(), Some("team-a"));
        assert_eq!(w.regarding.name.as_deref(), Some("web-0"));
        assert_eq!(
            w.dedupe().key,
            Some("team-a/web-0/0b8c5b0e2f6e4c1a9d3e5a7b9c1d2e3f"),
            "per pod, not per message"
        );
        assert_eq!(w.dedupe().window, SignedDuration::from_secs(300));
        assert_eq!(failed_scheduling("web-0", uid, why), None, "no namespace");
    }

    #[test]
    fn a_later_pod_of_the_same_name_is_a_new_pod() {
        let why = "no nodepool";
        let first = failed_scheduling(
            "db/db-0",
            PodUid::new(Some("11111111-1111-1111-1111-111111111111")),
            why,
        );
        let again = failed_scheduling(
            "db/db-0",
            PodUid::new(Some("11111111-1111-1111-1111-111111111111")),
            why,
        );
        let recreated = failed_scheduling(
            "db/db-0",
            PodUid::new(Some("22222222-2222-2222-2222-222222222222")),
            why,
        );
        let key = |w: Option<Warning>| w.map(|w| w.dedupe_key).unwrap_or_default();
        let first = key(first);
        assert_eq!(first, key(again), "the same pod is deduplicated");
        assert_ne!(
            first,
            key(recreated),
            "a StatefulSet's replacement is told at once"
        );
        // A pod without a UID (a hand-written snapshot) is known by its name.
        assert_eq!(
            key(failed_scheduling("db/db-0", PodUid::default(), why)),
            "db/db-0"
        );
    }

    #[test]
    fn a_node_pool_without_instance_types_is_told_once_a_minute() {
        let mut pool: NodePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "gpu", "uid": "pool-uid"},
            "spec": {"template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
        }))
        .unwrap();
        pool.metadata.uid = Some("pool-uid".into());
        let w = no_compatible_instance_types(&pool);
        assert_eq!(w.reason, "NoCompatibleInstanceTypes");
        assert_eq!(
            w.message,
            "NodePool requirements filtered out all compatible available instance types"
        );
        assert_eq!(w.regarding.kind.as_deref(), Some("NodePool"));
        assert_eq!(w.regarding.name.as_deref(), Some("gpu"));
        assert_eq!(w.dedupe().key, Some("pool-uid"));
        assert_eq!(w.dedupe().window, SignedDuration::from_secs(60));
    }
}
