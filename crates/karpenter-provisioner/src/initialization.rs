//! When a registered NodeClaim's Node is ready to take its pods, and what it is still waiting for.
//!
//! As upstream's initialization step, in its order: the Node is Ready; none of the claim's startup taints are left;
//! none of the known ephemeral taints (not-ready, unreachable, the cloud provider's uninitialized taint,
//! `karpenter.sh/unregistered`, `readiness.k8s.io/` gates) are left; and every resource the claim's pods requested
//! (`spec.resources.requests`, non-zero) is non-zero in the Node's `status.allocatable`. Kubelet reports an
//! extended resource such as `nvidia.com/gpu` as zero until its device plugin registers it, so without the last
//! check a GPU node would be called initialized (and disruption would weigh it) before it can run a GPU pod.
//! While it waits, the claim's `Initialized` condition stays Unknown with the reason upstream gives.

use k8s_openapi::api::core::v1::{Node, Taint};
use karpenter_api::{
    common::{Taint as ClaimTaint, TaintEffect},
    labels,
    nodeclaim::NodeClaim,
    quantity::parse_milli,
};

/// What a Node is still waiting for: the `Initialized` condition's reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwaitingInitialization {
    pub reason: &'static str,
    pub message: String,
}

/// The Node is not Ready.
pub const NODE_NOT_READY: &str = "NodeNotReady";
/// A startup taint of the claim is still on the Node.
pub const STARTUP_TAINTS_EXIST: &str = "StartupTaintsExist";
/// A taint that goes away while a node starts is still on the Node.
pub const KNOWN_EPHEMERAL_TAINTS_EXIST: &str = "KnownEphemeralTaintsExist";
/// A resource the claim's pods requested is zero or absent in the Node's allocatable.
pub const RESOURCE_NOT_REGISTERED: &str = "ResourceNotRegistered";

/// `None` when the Node is initialized; otherwise the first thing it is waiting for.
pub fn awaiting_initialization(claim: &NodeClaim, node: &Node) -> Option<AwaitingInitialization> {
    let waiting = |reason, message| Some(AwaitingInitialization { reason, message });
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    if !ready {
        return waiting(NODE_NOT_READY, "the Node is not Ready".to_string());
    }
    let node_taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    if let Some(t) = node_taints
        .iter()
        .find(|t| claim.spec.startup_taints.iter().any(|s| is_startup_taint(t, s)))
    {
        return waiting(
            STARTUP_TAINTS_EXIST,
            format!("startup taint {} is still on the Node", describe(t)),
        );
    }
    if let Some(t) = node_taints.iter().find(|t| is_known_ephemeral(&t.key)) {
        return waiting(
            KNOWN_EPHEMERAL_TAINTS_EXIST,
            format!("taint {} is still on the Node", describe(t)),
        );
    }
    if let Some(resource) = unregistered_resource(claim, node) {
        return waiting(
            RESOURCE_NOT_REGISTERED,
            format!("{resource:?} was requested but the Node's allocatable has none yet"),
        );
    }
    None
}

/// The first resource (by name) the claim's pods requested that the Node reports as zero or not at all.
fn unregistered_resource<'c>(claim: &'c NodeClaim, node: &Node) -> Option<&'c str> {
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    claim
        .spec
        .resources
        .requests
        .iter()
        .flatten()
        // A request that does not parse cannot be checked; the API server would not have stored one.
        .filter(|(_, q)| parse_milli(&q.0).is_ok_and(|v| v != 0))
        .find(|(name, _)| {
            // A reported quantity that does not parse is still something reported.
            allocatable
                .and_then(|a| a.get(name.as_str()))
                .is_none_or(|q| parse_milli(&q.0).is_ok_and(|v| v == 0))
        })
        .map(|(name, _)| name.as_str())
}

/// Taints are unique by key and effect on a Node, so that is what identifies a startup taint there (a startup
/// taint whose value an agent changed is still the startup taint).
fn is_startup_taint(node: &Taint, startup: &ClaimTaint) -> bool {
    let effect = match startup.effect {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    };
    node.key == startup.key && node.effect == effect
}

fn is_known_ephemeral(key: &str) -> bool {
    labels::KNOWN_EPHEMERAL_TAINT_KEYS.contains(&key) || key.starts_with(labels::EPHEMERAL_TAINT_PREFIX)
}

/// `key=value:Effect`, or `key:Effect` without a value, as kubectl prints taints.
fn describe(t: &Taint) -> String {
    match t.value.as_deref().filter(|v| !v.is_empty()) {
        Some(v) => format!("{}={v}:{}", t.key, t.effect),
        None => format!("{}:{}", t.key, t.effect),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(requests: serde_json::Value) -> NodeClaim {
        let claim = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "gpu"},
            "spec": {"requirements": [], "resources": {"requests": requests},
                     "startupTaints": [{"key": "example.com/agent", "effect": "NoSchedule"}],
                     "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
        });
        match serde_json::from_value(claim) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    fn node(ready: &str, taints: serde_json::Value, allocatable: serde_json::Value) -> Node {
        let node = json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
            "spec": {"taints": taints},
            "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": ready}]}
        });
        match serde_json::from_value(node) {
            Ok(n) => n,
            Err(e) => panic!("{e}"),
        }
    }

    fn reason(claim: &NodeClaim, node: &Node) -> Option<&'static str> {
        awaiting_initialization(claim, node).map(|w| w.reason)
    }

    #[test]
    fn a_gpu_node_waits_until_its_allocatable_has_the_requested_gpu() {
        let gpu_claim = claim(json!({"cpu": "1", "nvidia.com/gpu": "1"}));
        let without = node("True", json!([]), json!({"cpu": "8", "nvidia.com/gpu": "0"}));
        let waiting = awaiting_initialization(&gpu_claim, &without);
        assert_eq!(
            waiting,
            Some(AwaitingInitialization {
                reason: RESOURCE_NOT_REGISTERED,
                message: "\"nvidia.com/gpu\" was requested but the Node's allocatable has none yet".into(),
            })
        );
        let absent = node("True", json!([]), json!({"cpu": "8"}));
        assert_eq!(reason(&gpu_claim, &absent), Some(RESOURCE_NOT_REGISTERED));
        let with = node("True", json!([]), json!({"cpu": "8", "nvidia.com/gpu": "4"}));
        assert_eq!(reason(&gpu_claim, &with), None);
    }

    #[test]
    fn a_resource_requested_at_zero_or_not_requested_is_not_waited_for() {
        let node = node("True", json!([]), json!({"cpu": "8"}));
        assert_eq!(
            reason(&claim(json!({"cpu": "1", "nvidia.com/gpu": "0"})), &node),
            None
        );
        assert_eq!(reason(&claim(json!({"cpu": "1"})), &node), None);
    }

    #[test]
    fn readiness_then_startup_taints_then_ephemeral_taints_come_first() {
        let gpu_claim = claim(json!({"nvidia.com/gpu": "1"}));
        let no_gpu = json!({"cpu": "8"});
        let startup = json!({"key": "example.com/agent", "effect": "NoSchedule"});
        let not_ready = json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"});
        let gate = json!({"key": "readiness.k8s.io/network", "effect": "NoSchedule"});
        let cases = [
            ("False", json!([startup, not_ready]), NODE_NOT_READY),
            ("True", json!([not_ready, startup]), STARTUP_TAINTS_EXIST),
            ("True", json!([not_ready]), KNOWN_EPHEMERAL_TAINTS_EXIST),
            ("True", json!([gate]), KNOWN_EPHEMERAL_TAINTS_EXIST),
            ("True", json!([]), RESOURCE_NOT_REGISTERED),
        ];
        for (ready, taints, expected) in cases {
            let n = node(ready, taints.clone(), no_gpu.clone());
            assert_eq!(reason(&gpu_claim, &n), Some(expected), "{ready} {taints}");
        }
        let startup_message =
            awaiting_initialization(&gpu_claim, &node("True", json!([startup]), no_gpu.clone()))
                .map(|w| w.message);
        assert_eq!(
            startup_message.as_deref(),
            Some("startup taint example.com/agent:NoSchedule is still on the Node")
        );
        // A taint with the startup taint's key but another effect is not the startup taint; one with another
        // value is (taints are unique by key and effect).
        let gpu = json!({"nvidia.com/gpu": "1"});
        let other_effect = json!([{"key": "example.com/agent", "effect": "NoExecute"}]);
        assert_eq!(reason(&gpu_claim, &node("True", other_effect, gpu.clone())), None);
        let other_value = json!([{"key": "example.com/agent", "value": "x", "effect": "NoSchedule"}]);
        assert_eq!(
            reason(&gpu_claim, &node("True", other_value, gpu)),
            Some(STARTUP_TAINTS_EXIST)
        );
    }
}
