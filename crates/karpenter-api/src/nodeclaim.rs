//! NodeClaim (karpenter.sh/v1): one node Karpenter launched or is launching, with the requirements it was
//! launched against. Its spec is immutable; its status tracks the instance and the node's lifecycle.

use std::{sync::Arc, time::Duration};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    common::{
        Condition, NodeClassReference, NodeSelectorRequirementWithMinValues, ResourceList, Taint,
        validate_requirements, validate_taints,
    },
    duration::{GoDuration, NillableDuration},
    label_policy::{KeyUse, LabelPolicy},
    quantity,
    validation::{ValidationErrors, Validator},
};

/// Condition types of a NodeClaim.
pub mod conditions {
    pub const LAUNCHED: &str = "Launched";
    pub const REGISTERED: &str = "Registered";
    pub const INITIALIZED: &str = "Initialized";
    pub const READY: &str = "Ready";
    pub const CONSOLIDATABLE: &str = "Consolidatable";
    pub const DRIFTED: &str = "Drifted";
    pub const DRAINED: &str = "Drained";
    pub const VOLUMES_DETACHED: &str = "VolumesDetached";
    pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
    pub const CONSISTENT_STATE_FOUND: &str = "ConsistentStateFound";
    pub const DISRUPTION_REASON: &str = "DisruptionReason";
    /// True while a committed reboot is carried out (reason [`super::reboot_reasons::REQUESTED`] until the
    /// provider accepted it, then [`super::reboot_reasons::ISSUED`]); False once it ended
    /// ([`super::reboot_reasons::SUCCEEDED`] or [`super::reboot_reasons::FAILED`]).
    pub const REBOOTING: &str = "Rebooting";
}

/// The reasons of the [`conditions::REBOOTING`] condition, the phases of a reboot (upstream's `RebootReason*`).
pub mod reboot_reasons {
    /// Committed by repair: the node is fenced and drained before the provider is asked.
    pub const REQUESTED: &str = "RebootRequested";
    /// The provider accepted the reboot; the controller waits for a new boot ID and a Ready node.
    pub const ISSUED: &str = "RebootIssued";
    /// The node came back with a new boot and Ready.
    pub const SUCCEEDED: &str = "RebootSucceeded";
    /// The reboot ended without the node coming back (the NodeClaim is replaced) or was invalid.
    pub const FAILED: &str = "RebootFailed";
    /// The reason of `Initialized=Unknown` while the node reboots: initialization holds for one boot.
    pub const REBOOTING: &str = "Rebooting";
}

/// Whether a reboot of the claim's node is under way: its [`conditions::REBOOTING`] condition is True (upstream's
/// `RebootInProgress`). Such a node is no candidate for another disruption, counts against the disruption
/// budgets, and its capacity is coming back, so scheduling ignores its `karpenter.sh/rebooting` taint.
pub fn is_rebooting(claim: &NodeClaim) -> bool {
    claim.status.as_ref().is_some_and(|s| {
        crate::common::find_condition(&s.conditions, conditions::REBOOTING)
            .is_some_and(|c| c.status == crate::common::ConditionStatus::True)
    })
}

/// NodeClaim is the Schema for the NodeClaims API.
// The kube derive's repeated `printcolumn(type_ = ..)` entries trip clippy's duplicated-attributes lint.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    plural = "nodeclaims",
    singular = "nodeclaim",
    category = "karpenter",
    status = "NodeClaimStatus",
    doc = "NodeClaim is the Schema for the NodeClaims API",
    printcolumn(
        name = "Type",
        type_ = "string",
        json_path = ".metadata.labels.node\\.kubernetes\\.io/instance-type"
    ),
    printcolumn(
        name = "Capacity",
        type_ = "string",
        json_path = ".metadata.labels.karpenter\\.sh/capacity-type"
    ),
    printcolumn(
        name = "Zone",
        type_ = "string",
        json_path = ".metadata.labels.topology\\.kubernetes\\.io/zone"
    ),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.nodeName"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(
        name = "ImageID",
        type_ = "string",
        json_path = ".status.imageID",
        priority = 1
    ),
    printcolumn(name = "ID", type_ = "string", json_path = ".status.providerID", priority = 1),
    printcolumn(
        name = "NodePool",
        type_ = "string",
        json_path = ".metadata.labels.karpenter\\.sh/nodepool",
        priority = 1
    ),
    printcolumn(
        name = "NodeClass",
        type_ = "string",
        json_path = ".spec.nodeClassRef.name",
        priority = 1
    ),
    printcolumn(
        name = "Drifted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Drifted\")].status",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "spec is immutable"}]))]
pub struct NodeClaimSpec {
    /// Taints applied to the node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Taints expected at startup and removed by a DaemonSet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    // Shared (`Arc`): the state cache holds the claims launched alike with one list.
    /// The requirements the launched instance must satisfy.
    #[schemars(length(max = 100))]
    pub requirements: Arc<Vec<NodeSelectorRequirementWithMinValues>>,
    /// The resources the pods scheduled to this claim need.
    #[serde(default, skip_serializing_if = "ResourceRequirements::is_empty")]
    pub resources: ResourceRequirements,
    /// The provider-specific node class.
    pub node_class_ref: NodeClassReference,
    /// The longest the controller waits for pods to drain before deleting them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<GoDuration>,
    /// How long the node lives before it is replaced (`Never` to keep it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "720h"))]
    pub expire_after: Option<NillableDuration>,
}

/// The resource requests of a NodeClaim.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<ResourceList>,
}

impl ResourceRequirements {
    fn is_empty(&self) -> bool {
        self.requests.is_none()
    }
}

/// The observed state of a NodeClaim.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    /// The name of the Node that registered for this claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The cloud provider's ID of the instance.
    #[serde(default, rename = "providerID", skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// The image the instance runs.
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    // Capacity and allocatable are shared (`Arc`): the state cache holds one list per distinct value, not one per
    // claim of an instance type.
    /// The instance's capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<Arc<ResourceList>>,
    /// The capacity left for pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocatable: Option<Arc<ResourceList>>,
    /// Launched, Registered, Initialized, Ready, Consolidatable, Drifted and the termination conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// When a pod last bound to or left the node; consolidateAfter counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<Time>,
}

impl NodeClaimSpec {
    /// `expireAfter` with its default; `None` means never.
    pub fn expire_after(&self) -> Option<Duration> {
        self.expire_after
            .as_ref()
            .map_or(Some(Duration::from_secs(720 * 3600)), NillableDuration::duration)
    }
}

impl NodeClaim {
    /// Applies the schema and CEL rules and the controller's runtime checks.
    pub fn validate(&self, policy: LabelPolicy) -> Result<(), ValidationErrors> {
        let mut v = Validator::new("NodeClaim", self.metadata.name.as_deref());
        v.field("spec", |v| {
            validate_taints(v, &self.spec.taints, &self.spec.startup_taints);
            v.field("requirements", |v| {
                validate_requirements(v, &self.spec.requirements, policy, KeyUse::NodeClaimRequirement);
            });
            if let Some(requests) = &self.spec.resources.requests {
                v.field("resources", |v| {
                    v.field("requests", |v| {
                        for (name, q) in requests {
                            if let Err(e) = quantity::parse_milli(&q.0) {
                                v.key(name, |v| v.error(e.to_string()));
                            }
                        }
                    })
                });
            }
            v.field("nodeClassRef", |v| self.spec.node_class_ref.validate(v));
        });
        v.finish()
    }

    /// Checks an update against the old object: the spec may not change.
    pub fn validate_update(&self, old: &NodeClaim, policy: LabelPolicy) -> Result<(), ValidationErrors> {
        let mut v = Validator::new("NodeClaim", self.metadata.name.as_deref());
        self.validate(policy)?;
        v.field("spec", |v| v.check(self.spec == old.spec, "spec is immutable"));
        v.finish()
    }
}
