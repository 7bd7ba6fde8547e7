//! NodePool (karpenter.sh/v1): the template of the nodes Karpenter may launch, the limits on them and how they
//! may be disrupted.
//!
//! Fields the API server defaults (`expireAfter`, `disruption.*`) are optional here and read through accessors
//! that apply the same defaults, so a manifest round-trips through these types without fields appearing.

use std::{collections::BTreeMap, time::Duration};

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    common::{
        Condition, NodeClassReference, NodeSelectorRequirementWithMinValues, ResourceList, Taint,
        validate_requirements, validate_taints,
    },
    duration::{GoDuration, NillableDuration},
    label_policy::{KeyUse, LabelPolicy, key_problems, restricted_label_problem},
    quantity,
    validation::{ValidationErrors, Validator, label_value_problem, qualified_name_problem},
};

/// The default `expireAfter` of NodePools and NodeClaims.
pub const DEFAULT_EXPIRE_AFTER: &str = "720h";
/// The default disruption budget.
pub const DEFAULT_BUDGET_NODES: &str = "10%";
/// The version of [`NodePool::hash`], written to `karpenter.sh/nodepool-hash-version`. Not upstream's `v3`: our
/// hash function differs, and a different version makes NodeClaims launched by upstream Karpenter be re-hashed on
/// migration instead of all drifting at once (the mechanism upstream uses when its own hash changes).
pub const NODEPOOL_HASH_VERSION: &str = "v3-rs1";

/// NodePool is the Schema for the NodePools API.
// The kube derive's repeated `printcolumn(type_ = ..)` entries trip clippy's duplicated-attributes lint.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    plural = "nodepools",
    singular = "nodepool",
    category = "karpenter",
    status = "NodePoolStatus",
    doc = "NodePool is the Schema for the NodePools API",
    scale(spec_replicas_path = ".spec.replicas", status_replicas_path = ".status.nodes"),
    printcolumn(
        name = "NodeClass",
        type_ = "string",
        json_path = ".spec.template.spec.nodeClassRef.name"
    ),
    printcolumn(name = "Nodes", type_ = "string", json_path = ".status.nodes"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Weight", type_ = "integer", json_path = ".spec.weight", priority = 1),
    printcolumn(
        name = "CPU",
        type_ = "string",
        json_path = ".status.resources.cpu",
        priority = 1
    ),
    printcolumn(
        name = "Memory",
        type_ = "string",
        json_path = ".status.resources.memory",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.replicas) == has(oldSelf.replicas)",
     "message": "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes"},
    {"rule": "!has(self.replicas) || !has(self.limits) || self.limits.all(k, k == 'nodes')",
     "message": "only 'limits.nodes' is supported on static NodePools"},
    {"rule": "!has(self.replicas) || !has(self.weight)",
     "message": "'weight' is not supported on static NodePools"}
]))]
pub struct NodePoolSpec {
    /// The template of the NodeClaims this NodePool launches.
    pub template: NodeClaimTemplate,
    /// How Karpenter may disrupt this NodePool's nodes.
    #[serde(default, skip_serializing_if = "Disruption::is_unset")]
    #[schemars(extend("default" = {"consolidateAfter": "0s"}))]
    pub disruption: Disruption,
    /// Bounds on the capacity this NodePool may provision, including the pseudo-resource `nodes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceList>,
    /// Higher weights are tried first when scheduling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
    /// The fixed node count of a static NodePool (StaticCapacity gate). Static pools skip scheduling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
}

/// The template NodeClaims are made from.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplate {
    #[serde(default, skip_serializing_if = "TemplateMetadata::is_empty")]
    pub metadata: TemplateMetadata,
    pub spec: NodeClaimTemplateSpec,
}

/// Labels and annotations copied onto NodeClaims and their Nodes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 100))]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

impl TemplateMetadata {
    fn is_empty(&self) -> bool {
        self.labels.is_none() && self.annotations.is_none()
    }
}

/// The NodeClaim spec of a NodePool template (a NodeClaim spec without resource requests).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    /// Taints applied to the nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Taints expected at startup and removed by a DaemonSet; ignored when provisioning.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    /// Requirements layered with the instance types' and the pods'.
    #[schemars(length(max = 100))]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// The provider-specific node class.
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.group == oldSelf.group", "message": "nodeClassRef.group is immutable"},
        {"rule": "self.kind == oldSelf.kind", "message": "nodeClassRef.kind is immutable"}
    ]))]
    pub node_class_ref: NodeClassReference,
    /// The longest the controller waits for pods to drain before deleting them, from when deletion starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<GoDuration>,
    /// How long a node lives before it is replaced (`Never` to keep it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "720h"))]
    pub expire_after: Option<NillableDuration>,
}

impl NodeClaimTemplateSpec {
    /// `expireAfter` with its default; `None` means never.
    pub fn expire_after(&self) -> Option<Duration> {
        self.expire_after
            .as_ref()
            .map_or(Some(Duration::from_secs(720 * 3600)), NillableDuration::duration)
    }
}

/// Which nodes consolidation may remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
pub enum ConsolidationPolicy {
    WhenEmpty,
    #[default]
    WhenEmptyOrUnderutilized,
    /// Consolidate only moves whose savings are worth their disruption (score ≥ 1/2).
    Balanced,
}

/// A reason a budget applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub enum DisruptionReason {
    Underutilized,
    Empty,
    Drifted,
    /// Node repair (the NodeRepair gate): how many unhealthy nodes may be replaced at once. As upstream's
    /// in-progress "node repair as voluntary disruption" design; a budget without reasons limits it too.
    Unhealthy,
}

impl DisruptionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Underutilized => "Underutilized",
            Self::Empty => "Empty",
            Self::Drifted => "Drifted",
            Self::Unhealthy => "Unhealthy",
        }
    }
}

/// The disruption settings of a NodePool.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// How long after the last pod event a node may be consolidated (`Never` to disable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "0s"))]
    pub consolidate_after: Option<NillableDuration>,
    /// Which nodes consolidation may remove.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "WhenEmptyOrUnderutilized"))]
    pub consolidation_policy: Option<ConsolidationPolicy>,
    /// The most nodes that may be disrupted at once; the most restrictive active budget wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 50),
        extend(
            "default" = [{"nodes": "10%"}],
            "x-kubernetes-validations" = [{"rule": "self.all(x, has(x.schedule) == has(x.duration))",
                                           "message": "'schedule' must be set with 'duration'"}]
        )
    )]
    pub budgets: Option<Vec<Budget>>,
}

impl Disruption {
    fn is_unset(&self) -> bool {
        self.consolidate_after.is_none() && self.consolidation_policy.is_none() && self.budgets.is_none()
    }

    /// `consolidateAfter` with its default (0s); `None` means never.
    pub fn consolidate_after(&self) -> Option<Duration> {
        self.consolidate_after
            .as_ref()
            .map_or(Some(Duration::ZERO), NillableDuration::duration)
    }

    pub fn consolidation_policy(&self) -> ConsolidationPolicy {
        self.consolidation_policy.unwrap_or_default()
    }

    /// The budgets with the default (`nodes: 10%`) when none are set.
    pub fn budgets(&self) -> Vec<Budget> {
        self.budgets.clone().unwrap_or_else(|| vec![Budget::default()])
    }
}

/// A limit on how many nodes may be disrupted at once, optionally only during a cron window and for some reasons.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// Reasons this budget applies to; all reasons when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50), extend("x-kubernetes-list-type" = "set"))]
    pub reasons: Option<Vec<DisruptionReason>>,
    /// A count ("5") or a percentage of the NodePool's nodes ("10%", rounded up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^((100|[0-9]{1,2})%|[0-9]+)$"), extend("default" = "10%"))]
    pub nodes: Option<String>,
    /// When the budget starts being active, in cron syntax, evaluated in UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$"
    ))]
    pub schedule: Option<String>,
    /// How long the budget stays active after each schedule hit (hours and minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$"))]
    pub duration: Option<String>,
}

/// How many nodes a budget allows out of `total`: counts as written, percentages rounded up.
pub fn budget_allowed_nodes(nodes: &str, total: usize) -> Option<usize> {
    if let Some(pct) = nodes.strip_suffix('%') {
        let pct: usize = pct.parse().ok().filter(|p| *p <= 100)?;
        Some((total * pct).div_ceil(100))
    } else {
        nodes.parse().ok()
    }
}

fn budget_duration_ok(d: &str) -> bool {
    // ^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$
    let d = d.strip_suffix("0s").filter(|rest| !rest.is_empty()).unwrap_or(d);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(rest) = d.strip_suffix('m') {
        if let Some((h, m)) = rest.split_once('h') {
            return digits(h) && digits(m);
        }
        return digits(rest);
    }
    d.strip_suffix('h').is_some_and(digits)
}

/// Checks a budget's cron schedule the way the disruption controller will read it.
pub fn parse_budget_schedule(schedule: &str) -> Result<croner::Cron, String> {
    let macro_ok = matches!(
        schedule,
        "@annually" | "@yearly" | "@monthly" | "@weekly" | "@daily" | "@midnight" | "@hourly"
    );
    if !macro_ok && schedule.split_whitespace().count() != 5 {
        return Err(format!(
            "{schedule:?}: must be a cron macro (@daily, ...) or have 5 fields"
        ));
    }
    let expr = if schedule == "@midnight" {
        "@daily"
    } else {
        schedule
    };
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .build()
        .parse(expr)
        .map_err(|e| format!("{schedule:?}: {e}"))
}

/// The observed state of a NodePool.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// The capacity of the NodePool's nodes, including `nodes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceList>,
    /// How many nodes the NodePool has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0))]
    pub nodes: Option<i64>,
    /// The generation of the node class the NodeRegistrationHealthy condition was computed against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    /// ValidationSucceeded, NodeClassReady, NodeRegistrationHealthy and Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

impl NodePool {
    /// Applies every rule of the CRD schema and its CEL rules, and the controller's runtime checks, naming the
    /// NodePool and the field of each problem.
    pub fn validate(&self, policy: LabelPolicy) -> Result<(), ValidationErrors> {
        let mut v = Validator::new("NodePool", self.metadata.name.as_deref());
        v.field("spec", |v| self.spec.validate(v, policy));
        v.finish()
    }

    /// Checks an update against the old object (the immutability rules).
    pub fn validate_update(&self, old: &NodePool, policy: LabelPolicy) -> Result<(), ValidationErrors> {
        let mut v = Validator::new("NodePool", self.metadata.name.as_deref());
        v.field("spec", |v| {
            self.spec.validate(v, policy);
            if self.spec.replicas.is_some() != old.spec.replicas.is_some() {
                v.error("Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes");
            }
            v.field("template", |v| {
                v.field("spec", |v| {
                    v.field("nodeClassRef", |v| {
                        let (new, old) = (&self.spec.template.spec.node_class_ref, &old.spec.template.spec.node_class_ref);
                        v.check(new.group == old.group, "nodeClassRef.group is immutable");
                        v.check(new.kind == old.kind, "nodeClassRef.kind is immutable");
                    })
                })
            });
        });
        v.finish()
    }

    /// True for a static NodePool (`replicas` set).
    pub fn is_static(&self) -> bool {
        self.spec.replicas.is_some()
    }

    /// The drift hash of the template, written to `karpenter.sh/nodepool-hash` on the NodePool and its
    /// NodeClaims. Requirements are left out (they drift through RequirementsDrifted instead), as are the
    /// fields that never require a new node: lists are hashed as sets and unset equals empty.
    pub fn hash(&self) -> String {
        let template = &self.spec.template;
        let mut spec = serde_json::to_value(&template.spec).unwrap_or(serde_json::Value::Null);
        if let Some(map) = spec.as_object_mut() {
            map.remove("requirements");
            // An unset expireAfter and the default are the same template.
            map.entry("expireAfter")
                .or_insert_with(|| serde_json::json!(DEFAULT_EXPIRE_AFTER));
        }
        let metadata = serde_json::to_value(&template.metadata).unwrap_or(serde_json::Value::Null);
        let hashed = serde_json::json!({"metadata": metadata, "spec": spec});
        crate::hash::fnv1a64(crate::hash::canonical_json(&hashed).as_bytes()).to_string()
    }
}

impl NodePoolSpec {
    fn validate(&self, v: &mut Validator, policy: LabelPolicy) {
        v.field("template", |v| {
            v.field("metadata", |v| {
                validate_template_metadata(v, &self.template.metadata, policy)
            });
            v.field("spec", |v| {
                let spec = &self.template.spec;
                validate_taints(v, &spec.taints, &spec.startup_taints);
                v.field("requirements", |v| {
                    validate_requirements(v, &spec.requirements, policy, KeyUse::NodePoolRequirement);
                    validate_requirement_runtime(v, &spec.requirements, policy);
                });
                v.field("nodeClassRef", |v| spec.node_class_ref.validate(v));
            });
        });
        v.field("disruption", |v| validate_disruption(v, &self.disruption));
        if let Some(limits) = &self.limits {
            v.field("limits", |v| {
                for (name, q) in limits {
                    if let Err(e) = quantity::parse_milli(&q.0) {
                        v.key(name, |v| v.error(e.to_string()));
                    }
                }
            });
        }
        if let Some(w) = self.weight {
            v.field("weight", |v| {
                v.check((1..=100).contains(&w), "must be between 1 and 100")
            });
        }
        if let Some(replicas) = self.replicas {
            v.field("replicas", |v| {
                v.check(replicas >= 0, "must be greater than or equal to 0")
            });
            if self
                .limits
                .as_ref()
                .is_some_and(|l| l.keys().any(|k| k != "nodes"))
            {
                v.error("only 'limits.nodes' is supported on static NodePools");
            }
            if self.weight.is_some() {
                v.error("'weight' is not supported on static NodePools");
            }
        }
    }
}

fn validate_template_metadata(v: &mut Validator, metadata: &TemplateMetadata, policy: LabelPolicy) {
    let Some(labels) = &metadata.labels else { return };
    v.field("labels", |v| {
        if labels.len() > 100 {
            v.error(format!("must have at most 100 labels, has {}", labels.len()));
        }
        for (key, value) in labels {
            v.key(key, |v| {
                if let Some(p) = qualified_name_problem(key) {
                    v.error(format!("invalid label key {p}"));
                }
                if let Some(p) = label_value_problem(value) {
                    v.error(format!("invalid label value {p}"));
                }
                let problems = key_problems(policy, KeyUse::NodePoolLabel, key);
                // The controller's run-time check, which the CRD leaves to it; told only when the CRD's own
                // rules pass, so one problem is not reported twice.
                let runtime = restricted_label_problem(key).filter(|_| problems.is_empty());
                for message in problems.into_iter().chain(runtime) {
                    v.error(message);
                }
            });
        }
    });
}

/// The controller's runtime checks on requirements beyond the schema: well-known values must be possible.
fn validate_requirement_runtime(
    v: &mut Validator,
    requirements: &[NodeSelectorRequirementWithMinValues],
    policy: LabelPolicy,
) {
    use crate::{common::Operator, labels};
    for (i, r) in requirements.iter().enumerate() {
        let known: &[&str] = match r.key.as_str() {
            labels::CAPACITY_TYPE_LABEL => &labels::CAPACITY_TYPES,
            labels::AWS_INSTANCE_TENANCY_LABEL if policy == LabelPolicy::Aws => &["default", "dedicated"],
            _ => continue,
        };
        if r.operator == Operator::In && !r.values.iter().any(|value| known.contains(&value.as_str())) {
            v.index(i, |v| {
                v.error(format!(
                    "key {} has no valid values: it may only be {}",
                    r.key,
                    known.join(", ")
                ));
            });
        }
    }
}

fn validate_disruption(v: &mut Validator, d: &Disruption) {
    let Some(budgets) = &d.budgets else { return };
    v.field("budgets", |v| {
        if budgets.len() > 50 {
            v.error(format!("must have at most 50 budgets, has {}", budgets.len()));
        }
        for (i, b) in budgets.iter().enumerate() {
            v.index(i, |v| {
                if b.schedule.is_some() != b.duration.is_some() {
                    v.error("schedule and duration must be set together");
                }
                if let Some(nodes) = &b.nodes {
                    v.field("nodes", |v| {
                        v.check(
                            budget_allowed_nodes(nodes, 0).is_some(),
                            format!("{nodes:?}: must be a count or a percentage from 0% to 100%"),
                        );
                    });
                }
                if let Some(schedule) = &b.schedule
                    && let Err(e) = parse_budget_schedule(schedule)
                {
                    v.error_at("schedule", format!("invalid cron schedule {e}"));
                }
                if let Some(duration) = &b.duration {
                    v.field("duration", |v| {
                        v.check(
                            budget_duration_ok(duration),
                            format!("{duration:?}: must be hours and minutes, for example 1h30m"),
                        );
                    });
                }
                if let Some(reasons) = &b.reasons {
                    let mut sorted = reasons.clone();
                    sorted.sort();
                    sorted.dedup();
                    v.field("reasons", |v| {
                        v.check(sorted.len() == reasons.len(), "must not repeat a reason")
                    });
                }
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(yaml: &str) -> NodePool {
        let value: serde_json::Value = serde_saphyr::from_str(yaml).unwrap();
        serde_json::from_value(value).unwrap()
    }

    const POOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    metadata: {labels: {team: web}}
    spec:
      requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      taints: [{key: a, effect: NoSchedule}, {key: b, effect: NoSchedule}]
"#;

    #[test]
    fn hash_changes_with_the_template_but_not_with_requirements_or_order() {
        let base = pool(POOL);
        let mut other = base.clone();
        other.spec.template.spec.requirements[0].values = vec!["arm64".into()];
        assert_eq!(
            base.hash(),
            other.hash(),
            "requirements drift through RequirementsDrifted, not the hash"
        );
        other.spec.template.spec.taints.reverse();
        assert_eq!(base.hash(), other.hash(), "taints are hashed as a set");
        other.spec.template.spec.expire_after = Some(NillableDuration::parse("720h").unwrap());
        assert_eq!(
            base.hash(),
            other.hash(),
            "the default expireAfter equals an unset one"
        );
        other.spec.template.spec.expire_after = Some(NillableDuration::parse("24h").unwrap());
        assert_ne!(base.hash(), other.hash());
        let mut labelled = base.clone();
        labelled.spec.template.metadata.labels = Some([("team".to_string(), "api".to_string())].into());
        assert_ne!(base.hash(), labelled.hash());
        let mut weighted = base.clone();
        weighted.spec.weight = Some(50);
        assert_eq!(base.hash(), weighted.hash(), "only the template is hashed");
        assert!(base.hash().parse::<u64>().is_ok());
    }

    #[test]
    fn budget_percentages_round_up() {
        assert_eq!(budget_allowed_nodes("10%", 5), Some(1));
        assert_eq!(budget_allowed_nodes("10%", 0), Some(0));
        assert_eq!(budget_allowed_nodes("50%", 3), Some(2));
        assert_eq!(budget_allowed_nodes("3", 100), Some(3));
        assert_eq!(budget_allowed_nodes("101%", 3), None);
    }

    #[test]
    fn budget_durations() {
        for ok in ["1h", "30m", "1h30m", "10h0m0s", "5m0s"] {
            assert!(budget_duration_ok(ok), "{ok}");
        }
        for bad in ["1s", "1h30s", "", "h", "1d"] {
            assert!(!budget_duration_ok(bad), "{bad}");
        }
    }

    #[test]
    fn cron_schedules_with_five_fields_and_macros() {
        assert!(parse_budget_schedule("0 9 * * mon-fri").is_ok());
        assert!(parse_budget_schedule("@daily").is_ok());
        assert!(parse_budget_schedule("@midnight").is_ok());
        assert!(
            parse_budget_schedule("0 0 9 * * *").is_err(),
            "seconds are not allowed"
        );
        assert!(parse_budget_schedule("61 * * * *").is_err());
    }
}
