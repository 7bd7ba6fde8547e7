//! CapacityBuffer (autoscaling.x-k8s.io/v1beta1, behind the `CapacityBuffer` feature gate): spare capacity kept
//! ready for a workload, the API Cluster Autoscaler defines. Karpenter realises a buffer as in-memory placeholder
//! pods that the provisioner schedules like real ones, so nodes exist before the real pods arrive.
//!
//! A buffer takes its pod shape from a PodTemplate (`podTemplateRef`) or from a Deployment, StatefulSet or
//! ReplicaSet (`scalableRef`), and its size from `replicas`, `percentage` (of the scalable's replicas) and
//! `limits` — see [`desired_replicas`].

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    common::{Condition, ResourceList},
    quantity::{self, QuantityError},
    validation::{ValidationErrors, Validator},
};

/// The only provisioning strategy Karpenter acts on, and the default: placeholder pods that scale the cluster up.
pub const ACTIVE_CAPACITY_STRATEGY: &str = "buffer.x-k8s.io/active-capacity";

/// Condition types of a CapacityBuffer.
pub mod conditions {
    /// The buffer's pod shape and size were resolved (set by the buffer controller).
    pub const READY_FOR_PROVISIONING: &str = "ReadyForProvisioning";
    /// Whether the buffer's placeholder pods are being provisioned for (set by the provisioner).
    pub const PROVISIONING: &str = "Provisioning";
    /// Reserved for ResourceQuota integration.
    pub const LIMITED_BY_QUOTAS: &str = "LimitedByQuotas";
}

/// Condition reasons of a CapacityBuffer.
pub mod reasons {
    // ReadyForProvisioning, written by the buffer controller.
    /// The pod shape and size were resolved.
    pub const RESOLVED: &str = "Resolved";
    /// The referenced Deployment, StatefulSet or ReplicaSet does not exist.
    pub const SCALABLE_REF_NOT_FOUND: &str = "ScalableRefNotFound";
    /// The referenced PodTemplate does not exist.
    pub const POD_TEMPLATE_NOT_FOUND: &str = "PodTemplateNotFound";
    /// Any other resolution failure (no reference, unsupported kind or group, API errors).
    pub const RESOLUTION_FAILED: &str = "ResolutionFailed";
    // Provisioning, written by the provisioner.
    /// The buffer is not ReadyForProvisioning, so no placeholder pods were made.
    pub const NOT_READY_FOR_PROVISIONING: &str = "NotReadyForProvisioning";
    /// The buffer resolved to zero replicas.
    pub const BUFFER_EMPTY: &str = "BufferEmpty";
    /// The placeholder pods need new nodes.
    pub const REQUIRES_NEW_CAPACITY: &str = "RequiresNewCapacity";
    /// The placeholder pods fit on existing nodes.
    pub const FITS_EXISTING_CAPACITY: &str = "FitsExistingCapacity";
}

/// The kinds a `scalableRef` may name (all in the `apps` group).
pub const SUPPORTED_SCALABLE_KINDS: [&str; 3] = ["Deployment", "StatefulSet", "ReplicaSet"];
/// The API group of the supported scalable kinds; an empty `apiGroup` means this group.
pub const SCALABLE_API_GROUP: &str = "apps";

const POD_TEMPLATE_NEEDS_SIZE: &str = "'podTemplateRef' needs 'replicas' or 'limits' to size the buffer";
const REFS_EXCLUSIVE: &str = "'podTemplateRef' and 'scalableRef' are mutually exclusive";
const REF_REQUIRED: &str = "one of 'podTemplateRef' or 'scalableRef' must be set";

/// CapacityBuffer keeps spare capacity in the cluster, shaped like a pod template or an existing workload.
#[allow(
    clippy::duplicated_attributes,
    reason = "clippy reads the repeated `type_ = \"string\"` of separate printcolumns as duplicates"
)]
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "autoscaling.x-k8s.io",
    version = "v1beta1",
    kind = "CapacityBuffer",
    plural = "capacitybuffers",
    singular = "capacitybuffer",
    namespaced,
    shortname = "cb",
    category = "autoscaling",
    status = "CapacityBufferStatus",
    doc = "CapacityBuffer keeps spare capacity in the cluster, shaped like a pod template or an existing workload",
    printcolumn(
        name = "Strategy",
        type_ = "string",
        json_path = ".spec.provisioningStrategy",
        description = "How the buffer is provisioned."
    ),
    printcolumn(
        name = "PodTemplate",
        type_ = "string",
        json_path = ".status.podTemplateRef.name",
        description = "The PodTemplate the buffer resolved to."
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "How many buffer chunks are kept."
    ),
    printcolumn(
        name = "ConditionsType",
        type_ = "string",
        json_path = ".status.conditions[*].type",
        description = "The types of the conditions."
    ),
    printcolumn(
        name = "ConditionsStatus",
        type_ = "string",
        json_path = ".status.conditions[*].status",
        description = "The statuses of the conditions."
    ),
    printcolumn(
        name = "ConditionsReason",
        type_ = "string",
        json_path = ".status.conditions[*].reason",
        description = "The reasons of the conditions."
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "When the buffer was created."
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.replicas) || has(self.limits) || !has(self.podTemplateRef)",
     "message": POD_TEMPLATE_NEEDS_SIZE},
    {"rule": "!has(self.podTemplateRef) || !has(self.scalableRef)",
     "message": REFS_EXCLUSIVE}
]))]
pub struct CapacityBufferSpec {
    /// How the buffer is used; `buffer.x-k8s.io/active-capacity` (the default) scales the cluster up with
    /// placeholder pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = ACTIVE_CAPACITY_STRATEGY))]
    pub provisioning_strategy: Option<String>,
    /// A PodTemplate in the buffer's namespace giving the shape of one buffer chunk. Exclusive with
    /// `scalableRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// A Deployment, StatefulSet or ReplicaSet whose pod template gives the chunk shape and whose replicas
    /// `percentage` is taken of. Exclusive with `podTemplateRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalable_ref: Option<ScalableRef>,
    /// A fixed number of chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// A percentage of the scalable's replicas, rounded up, at least 1 (only with `scalableRef`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub percentage: Option<i32>,
    /// The most resources all chunks together may request; alone, as many chunks as fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceList>,
}

/// A reference to an object in the buffer's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalObjectRef {
    /// The referent's name.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// A reference to an object with a scale subresource in the buffer's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalableRef {
    /// The referent's API group; empty or unset for the core group (Karpenter reads it as `apps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// The referent's kind.
    #[schemars(length(min = 1))]
    pub kind: String,
    /// The referent's name.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// The observed state of a CapacityBuffer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferStatus {
    /// The PodTemplate the buffer resolved to (podTemplateRef buffers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// How many chunks the buffer keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The generation of the PodTemplate the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_generation: Option<i64>,
    /// ReadyForProvisioning, Provisioning and LimitedByQuotas.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The provisioning strategy the status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
}

/// The chunks a percentage of a workload's replicas asks for: rounded up, and at least 1 when both are positive.
pub fn percentage_replicas(scalable_replicas: i64, percentage: i64) -> i64 {
    let (s, p) = (
        i128::from(scalable_replicas.max(0)),
        i128::from(percentage.max(0)),
    );
    let n = (s * p + 99) / 100;
    let n = if n < 1 && s > 0 && p > 0 { 1 } else { n };
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// How many chunks fit in `limits`: for every resource both in the limits and requested (non-zero) by one chunk,
/// floor(limit / request), and the smallest of those. `None` when no resource is in both, so the limits do not
/// constrain the count. Amounts are milli-units.
pub fn limit_replicas(
    limits_milli: &BTreeMap<String, i64>,
    requests_milli: &BTreeMap<String, i64>,
) -> Option<i64> {
    limits_milli
        .iter()
        .filter_map(|(name, limit)| {
            let request = *requests_milli.get(name)?;
            (request > 0).then(|| limit.div_euclid(request))
        })
        .min()
}

/// The number of chunks a buffer keeps, as Cluster Autoscaler computes it: the larger of `replicas` and the
/// percentage-derived count, capped by what fits in the limits; with neither, as many as fit in the limits (0
/// when the limits constrain nothing). The result is clamped to `0..=i32::MAX`, the range of `status.replicas`.
///
/// `percentage_of` is the scalable's replica count when the percentage applies (a `scalableRef` with a positive
/// replica count), `None` otherwise.
pub fn desired_replicas(
    replicas: Option<i64>,
    percentage: Option<i64>,
    percentage_of: Option<i64>,
    limits_milli: Option<&BTreeMap<String, i64>>,
    requests_milli: &BTreeMap<String, i64>,
) -> i64 {
    let mut candidates = Vec::with_capacity(2);
    if let (Some(p), Some(s)) = (percentage, percentage_of.filter(|s| *s > 0)) {
        candidates.push(percentage_replicas(s, p));
    }
    candidates.extend(replicas);
    let size = candidates.into_iter().max();
    let fit = limits_milli.and_then(|l| limit_replicas(l, requests_milli));
    let n = match (size, fit) {
        (Some(size), Some(fit)) => size.min(fit),
        (Some(size), None) => size,
        (None, Some(fit)) => fit,
        (None, None) => 0,
    };
    n.clamp(0, i64::from(i32::MAX))
}

impl CapacityBufferSpec {
    /// The provisioning strategy with its default.
    pub fn provisioning_strategy(&self) -> &str {
        self.provisioning_strategy
            .as_deref()
            .unwrap_or(ACTIVE_CAPACITY_STRATEGY)
    }

    /// The limits in milli-units.
    pub fn limits_milli(&self) -> Result<Option<BTreeMap<String, i64>>, QuantityError> {
        self.limits
            .as_ref()
            .map(|limits| {
                limits
                    .iter()
                    .map(|(name, q)| Ok((name.clone(), quantity::parse_milli(&q.0)?)))
                    .collect()
            })
            .transpose()
    }

    /// The number of chunks this buffer keeps (see [`desired_replicas`]). `scalable_replicas` is the
    /// `scalableRef` workload's replica count (ignored for `podTemplateRef` buffers: `percentage` only applies to
    /// a scalable); `per_pod_requests_milli` is what one chunk requests, in milli-units.
    pub fn desired_replicas(
        &self,
        scalable_replicas: Option<i64>,
        per_pod_requests_milli: &BTreeMap<String, i64>,
    ) -> Result<i64, QuantityError> {
        let limits = self.limits_milli()?;
        let percentage_of = scalable_replicas.filter(|_| self.scalable_ref.is_some());
        Ok(desired_replicas(
            self.replicas.map(i64::from),
            self.percentage.map(i64::from),
            percentage_of,
            limits.as_ref(),
            per_pod_requests_milli,
        ))
    }

    fn validate(&self, v: &mut Validator) {
        if let Some(r) = &self.pod_template_ref {
            v.field("podTemplateRef", |v| {
                v.field("name", |v| v.check(!r.name.is_empty(), "must not be empty"))
            });
        }
        if let Some(r) = &self.scalable_ref {
            v.field("scalableRef", |v| {
                v.field("kind", |v| {
                    if r.kind.is_empty() {
                        v.error("must not be empty");
                    } else if !SUPPORTED_SCALABLE_KINDS.contains(&r.kind.as_str()) {
                        // Runtime: the buffer controller resolves only these kinds.
                        v.error(format!(
                            "unsupported kind {:?}: must be one of {}",
                            r.kind,
                            SUPPORTED_SCALABLE_KINDS.join(", ")
                        ));
                    }
                });
                v.field("name", |v| v.check(!r.name.is_empty(), "must not be empty"));
                if let Some(group) = r
                    .api_group
                    .as_deref()
                    .filter(|g| !g.is_empty() && *g != SCALABLE_API_GROUP)
                {
                    // Runtime: only the apps group is resolved.
                    v.error_at(
                        "apiGroup",
                        format!("unsupported API group {group:?}: must be {SCALABLE_API_GROUP:?} or empty"),
                    );
                }
            });
        }
        if let Some(n) = self.replicas {
            v.field("replicas", |v| {
                v.check(n >= 0, "must be greater than or equal to 0")
            });
        }
        if let Some(n) = self.percentage {
            v.field("percentage", |v| {
                v.check(n >= 0, "must be greater than or equal to 0")
            });
        }
        if let Some(limits) = &self.limits {
            v.field("limits", |v| {
                for (name, q) in limits {
                    if let Err(e) = quantity::parse_milli(&q.0) {
                        v.key(name, |v| v.error(e.to_string()));
                    }
                }
            });
        }
        if self.pod_template_ref.is_some() && self.replicas.is_none() && self.limits.is_none() {
            v.error(POD_TEMPLATE_NEEDS_SIZE);
        }
        match (&self.pod_template_ref, &self.scalable_ref) {
            (Some(_), Some(_)) => v.error(REFS_EXCLUSIVE),
            // Runtime: the controller marks such a buffer ReadyForProvisioning=False (ResolutionFailed).
            (None, None) => v.error(REF_REQUIRED),
            _ => {}
        }
    }
}

impl CapacityBuffer {
    /// Applies every rule of the CRD schema and its CEL rules, and the buffer controller's runtime checks (a
    /// reference is set; the scalable is a Deployment, StatefulSet or ReplicaSet of the apps group), naming the
    /// buffer and the field of each problem.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let name = match (&self.metadata.namespace, &self.metadata.name) {
            (Some(ns), Some(name)) if !ns.is_empty() => Some(format!("{ns}/{name}")),
            (_, name) => name.clone(),
        };
        let mut v = Validator::new("CapacityBuffer", name.as_deref());
        v.field("spec", |v| self.spec.validate(v));
        v.finish()
    }
}

/// The CapacityBuffer CRD.
pub fn crd() -> CustomResourceDefinition {
    CapacityBuffer::crd()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn milli(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
        pairs.iter().map(|(k, v)| ((*k).to_string(), *v)).collect()
    }

    fn buffer(spec: serde_json::Value) -> CapacityBuffer {
        serde_json::from_value(json!({
            "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
            "metadata": {"name": "spare", "namespace": "team"}, "spec": spec
        }))
        .unwrap()
    }

    fn errors(b: &CapacityBuffer) -> Vec<String> {
        b.validate()
            .err()
            .map(|e| e.0.iter().map(|e| format!("{}: {}", e.path, e.message)).collect())
            .unwrap_or_default()
    }

    #[test]
    fn percentage_rounds_up_with_a_minimum_of_one() {
        assert_eq!(percentage_replicas(10, 20), 2);
        assert_eq!(percentage_replicas(10, 25), 3);
        assert_eq!(percentage_replicas(1, 1), 1);
        assert_eq!(percentage_replicas(3, 0), 0);
        assert_eq!(percentage_replicas(0, 50), 0);
        assert_eq!(percentage_replicas(4, 250), 10);
    }

    #[test]
    fn limits_floor_per_resource_and_take_the_smallest() {
        let req = milli(&[("cpu", 500), ("memory", 1024 * 1000)]);
        assert_eq!(limit_replicas(&milli(&[("cpu", 2000)]), &req), Some(4));
        assert_eq!(
            limit_replicas(&milli(&[("cpu", 2200), ("memory", 3 * 1024 * 1000)]), &req),
            Some(3)
        );
        assert_eq!(
            limit_replicas(&milli(&[("nvidia.com/gpu", 1000)]), &req),
            None,
            "no overlap constrains nothing"
        );
        assert_eq!(
            limit_replicas(&milli(&[("cpu", 100)]), &milli(&[("cpu", 0)])),
            None,
            "zero requests are skipped"
        );
    }

    #[test]
    fn replica_maths_max_of_sizes_capped_by_limits() {
        let req = milli(&[("cpu", 1000)]);
        let lim = milli(&[("cpu", 4000)]);
        // max(replicas, percentage)
        assert_eq!(desired_replicas(Some(2), Some(50), Some(10), None, &req), 5);
        assert_eq!(desired_replicas(Some(7), Some(50), Some(10), None, &req), 7);
        // capped by limits
        assert_eq!(desired_replicas(Some(7), None, None, Some(&lim), &req), 4);
        // limits alone
        assert_eq!(desired_replicas(None, None, None, Some(&lim), &req), 4);
        // nothing set
        assert_eq!(desired_replicas(None, None, None, None, &req), 0);
        // percentage of a scaled-to-zero workload does not count
        assert_eq!(desired_replicas(None, Some(50), Some(0), None, &req), 0);
        // limits that constrain nothing leave the size alone
        assert_eq!(
            desired_replicas(Some(3), None, None, Some(&milli(&[("memory", 1)])), &req),
            3
        );
        // clamped to the int32 range of status.replicas
        assert_eq!(
            desired_replicas(
                None,
                None,
                None,
                Some(&milli(&[("cpu", i64::MAX)])),
                &milli(&[("cpu", 1)])
            ),
            i64::from(i32::MAX)
        );
    }

    #[test]
    fn spec_desired_replicas_ignores_percentage_without_scalable_ref() {
        let b = buffer(json!({"podTemplateRef": {"name": "t"}, "replicas": 1, "percentage": 100}));
        assert_eq!(
            b.spec
                .desired_replicas(Some(10), &milli(&[("cpu", 1000)]))
                .unwrap(),
            1
        );
        let b = buffer(
            json!({"scalableRef": {"kind": "Deployment", "name": "web"}, "percentage": 30, "limits": {"cpu": "2"}}),
        );
        assert_eq!(
            b.spec
                .desired_replicas(Some(10), &milli(&[("cpu", 1000)]))
                .unwrap(),
            2
        );
        assert_eq!(
            b.spec
                .desired_replicas(Some(5), &milli(&[("cpu", 1000)]))
                .unwrap(),
            2
        );
        assert_eq!(
            b.spec
                .desired_replicas(Some(3), &milli(&[("cpu", 1000)]))
                .unwrap(),
            1
        );
    }

    #[test]
    fn pod_template_ref_requires_replicas_or_limits() {
        let b = buffer(json!({"podTemplateRef": {"name": "t"}}));
        assert_eq!(errors(&b), vec![format!("spec: {POD_TEMPLATE_NEEDS_SIZE}")]);
        assert!(
            errors(&buffer(
                json!({"podTemplateRef": {"name": "t"}, "limits": {"cpu": "4"}})
            ))
            .is_empty()
        );
    }

    #[test]
    fn refs_are_mutually_exclusive_and_one_is_required() {
        let b = buffer(
            json!({"podTemplateRef": {"name": "t"}, "replicas": 1, "scalableRef": {"kind": "Deployment", "name": "w"}}),
        );
        assert_eq!(errors(&b), vec![format!("spec: {REFS_EXCLUSIVE}")]);
        assert_eq!(
            errors(&buffer(json!({"replicas": 1}))),
            vec![format!("spec: {REF_REQUIRED}")]
        );
    }

    #[test]
    fn scalable_ref_kind_and_group_are_supported_ones() {
        let b = buffer(json!({"scalableRef": {"kind": "DaemonSet", "name": "w"}, "replicas": 1}));
        assert_eq!(errors(&b).len(), 1);
        assert!(errors(&b)[0].starts_with("spec.scalableRef.kind: unsupported kind"));
        let b =
            buffer(json!({"scalableRef": {"apiGroup": "example.com", "kind": "Deployment", "name": "w"}}));
        assert!(errors(&b)[0].starts_with("spec.scalableRef.apiGroup: "));
        assert!(
            errors(&buffer(
                json!({"scalableRef": {"apiGroup": "apps", "kind": "StatefulSet", "name": "w"}})
            ))
            .is_empty()
        );
    }

    #[test]
    fn messages_name_namespace_and_name() {
        let e = buffer(json!({"replicas": -1, "podTemplateRef": {"name": "t"}}))
            .validate()
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "CapacityBuffer team/spare: spec.replicas: must be greater than or equal to 0"
        );
    }

    #[test]
    fn crd_is_namespaced_and_round_trips() {
        let crd = serde_json::to_value(crd()).unwrap();
        assert_eq!(crd.pointer("/spec/scope").unwrap(), "Namespaced");
        assert_eq!(crd.pointer("/spec/names/shortNames/0").unwrap(), "cb");
        assert_eq!(crd.pointer("/spec/names/categories/0").unwrap(), "autoscaling");
        let manifest = json!({"apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
                              "metadata": {"name": "x", "namespace": "y"},
                              "spec": {"scalableRef": {"kind": "Deployment", "name": "web"}, "percentage": 10}});
        let b: CapacityBuffer = serde_json::from_value(manifest.clone()).unwrap();
        assert_eq!(serde_json::to_value(&b).unwrap(), manifest);
        assert_eq!(b.spec.provisioning_strategy(), ACTIVE_CAPACITY_STRATEGY);
    }
}
