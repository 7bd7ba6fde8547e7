//! Types shared by several kinds: requirements with minValues, taints, the node class reference and status
//! conditions, with their validation.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    label_policy::{KeyUse, LabelPolicy, key_problems, restricted_label_problem},
    validation::{Validator, label_value_problem, qualified_name_problem},
};

/// A resource list: resource name to quantity, as Kubernetes writes it.
pub type ResourceList = BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>;

/// The operators a requirement may use: Kubernetes' six plus Karpenter's inclusive Gte and Lte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    Gte,
    Lte,
}

impl Operator {
    pub const ALL: [Self; 8] = [
        Self::In,
        Self::NotIn,
        Self::Exists,
        Self::DoesNotExist,
        Self::Gt,
        Self::Lt,
        Self::Gte,
        Self::Lte,
    ];

    /// Parses the operator exactly as spelled in the API (case-sensitive).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.as_str() == s)
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::In => "In",
            Self::NotIn => "NotIn",
            Self::Exists => "Exists",
            Self::DoesNotExist => "DoesNotExist",
            Self::Gt => "Gt",
            Self::Lt => "Lt",
            Self::Gte => "Gte",
            Self::Lte => "Lte",
        }
    }

    /// Gt, Lt, Gte and Lte compare one integer.
    pub fn is_numeric(self) -> bool {
        matches!(self, Self::Gt | Self::Lt | Self::Gte | Self::Lte)
    }
}

impl std::fmt::Display for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The operator string is not one of the eight Karpenter accepts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown operator {0:?}; use one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte")]
pub struct UnknownOperator(pub String);

impl std::str::FromStr for Operator {
    type Err = UnknownOperator;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s).ok_or_else(|| UnknownOperator(s.to_string()))
    }
}

/// A node selector requirement with the minimum number of distinct values the launch must keep open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirementWithMinValues {
    /// The label key that the selector applies to.
    #[schemars(length(max = 316))]
    pub key: String,
    /// How the key relates to the values.
    pub operator: Operator,
    /// The values: at least one for In; exactly one non-negative integer for Gt, Lt, Gte and Lte.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub values: Vec<String>,
    /// The minimum number of distinct values of this key the instance types kept for a launch must cover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50))]
    pub min_values: Option<i64>,
}

impl NodeSelectorRequirementWithMinValues {
    pub fn new(key: &str, operator: Operator, values: &[&str]) -> Self {
        Self {
            key: key.to_string(),
            operator,
            values: values.iter().map(|v| (*v).to_string()).collect(),
            min_values: None,
        }
    }
}

/// Validates a list of requirements (`requirements`, already pushed on the path by the caller).
pub fn validate_requirements(
    v: &mut Validator,
    requirements: &[NodeSelectorRequirementWithMinValues],
    policy: LabelPolicy,
    use_: KeyUse,
) {
    if requirements.len() > 100 {
        v.error(format!("must have at most 100 items, has {}", requirements.len()));
    }
    for (i, r) in requirements.iter().enumerate() {
        v.index(i, |v| validate_requirement(v, r, policy, use_));
    }
}

fn validate_requirement(
    v: &mut Validator,
    r: &NodeSelectorRequirementWithMinValues,
    policy: LabelPolicy,
    use_: KeyUse,
) {
    v.field("key", |v| {
        if r.key.len() > 316 {
            v.error("must be at most 316 characters");
        }
        if let Some(p) = qualified_name_problem(&r.key) {
            v.error(format!("invalid label key {p}"));
        }
        let problems = key_problems(policy, use_, &r.key);
        // The controller's run-time check on NodePool and NodeOverlay requirements (upstream's ValidateRequirement
        // normalizes the key first), which the CRD leaves to it; told only when the CRD's own rules pass.
        let runtime = matches!(use_, KeyUse::NodePoolRequirement | KeyUse::NodeOverlayRequirement)
            .then(|| restricted_label_problem(crate::labels::normalize_label_key(&r.key)))
            .flatten()
            .filter(|_| problems.is_empty());
        for message in problems.into_iter().chain(runtime) {
            v.error(message);
        }
    });
    v.field("values", |v| {
        for (i, value) in r.values.iter().enumerate() {
            if let Some(p) = label_value_problem(value) {
                v.index(i, |v| v.error(format!("invalid label value {p}")));
            }
        }
    });
    match r.operator {
        Operator::In if r.values.is_empty() => {
            v.error("requirements with operator 'In' must have a value defined")
        }
        op if op.is_numeric() => {
            let ok = r.values.len() == 1 && r.values[0].parse::<i64>().is_ok_and(|n| n >= 0);
            if !ok {
                v.error(format!(
                    "requirements with operator '{}' must have a single non-negative integer value",
                    op.as_str()
                ));
            }
        }
        _ => {}
    }
    if let Some(min) = r.min_values {
        if !(1..=50).contains(&min) {
            v.error_at("minValues", "must be between 1 and 50");
        }
        if r.operator == Operator::In && (r.values.len() as i64) < min {
            v.error("requirements with 'minValues' must have at least that many values specified in the 'values' field");
        }
    }
}

/// The effect of a taint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

/// A taint, as core/v1 Taint, with the schema rules upstream injects (key and value patterns, effect enum).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// The taint key to be applied to a node.
    #[schemars(length(min = 1))]
    pub key: String,
    /// The taint value corresponding to the taint key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The effect of the taint on pods that do not tolerate it.
    pub effect: TaintEffect,
    /// When the taint was added (NoExecute taints only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<Time>,
}

impl Taint {
    pub fn new(key: &str, value: Option<&str>, effect: TaintEffect) -> Self {
        Self {
            key: key.to_string(),
            value: value.map(str::to_string),
            effect,
            time_added: None,
        }
    }
}

/// Validates `taints` and `startupTaints` together: syntax, and no (key, effect) pair twice across both lists.
pub fn validate_taints(v: &mut Validator, taints: &[Taint], startup_taints: &[Taint]) {
    let mut seen: Vec<(&str, TaintEffect)> = Vec::new();
    for (field, list) in [("taints", taints), ("startupTaints", startup_taints)] {
        v.field(field, |v| {
            for (i, t) in list.iter().enumerate() {
                v.index(i, |v| {
                    if t.key.is_empty() {
                        v.error_at("key", "must not be empty");
                    } else if let Some(p) = qualified_name_problem(&t.key) {
                        v.error_at("key", format!("invalid taint key {p}"));
                    }
                    // A taint value is a qualified name (`example.com/gpu` is valid), as upstream's schema and
                    // runtime checks have it; the schema's pattern also rejects an explicit empty string.
                    match t.value.as_deref() {
                        Some("") => v.error_at(
                            "value",
                            "invalid taint value \"\": must be omitted rather than empty",
                        ),
                        Some(value) => {
                            if let Some(p) = qualified_name_problem(value) {
                                v.error_at("value", format!("invalid taint value {p}"));
                            }
                        }
                        None => {}
                    }
                    if seen.contains(&(t.key.as_str(), t.effect)) {
                        v.error(format!(
                            "duplicate taint {}:{:?} (taints and startupTaints together)",
                            t.key, t.effect
                        ));
                    }
                    seen.push((t.key.as_str(), t.effect));
                });
            }
        });
    }
}

/// A reference to the provider-specific node class (for AWS, an EC2NodeClass).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassReference {
    /// Kind of the referent.
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "kind may not be empty"}]))]
    pub kind: String,
    /// Name of the referent.
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "name may not be empty"}]))]
    pub name: String,
    /// API group of the referent.
    #[schemars(
        regex(pattern = r"^[^/]*$"),
        extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "group may not be empty"}])
    )]
    pub group: String,
}

impl NodeClassReference {
    pub fn validate(&self, v: &mut Validator) {
        v.field("kind", |v| {
            v.check(!self.kind.is_empty(), "kind may not be empty")
        });
        v.field("name", |v| {
            v.check(!self.name.is_empty(), "name may not be empty")
        });
        v.field("group", |v| {
            v.check(!self.group.is_empty(), "group may not be empty");
            v.check(!self.group.contains('/'), "group must not contain '/'");
        });
    }
}

/// A status condition (metav1.Condition), as every Karpenter kind reports them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The type of condition in CamelCase, for example `Ready`.
    #[schemars(
        length(max = 316),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
        )
    )]
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: ConditionStatus,
    /// The generation the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// When the condition last changed status.
    pub last_transition_time: Time,
    /// A programmatic identifier for the last transition, in CamelCase.
    #[serde(default)]
    #[schemars(
        length(max = 1024),
        regex(pattern = r"^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?)?$")
    )]
    pub reason: String,
    /// A human-readable message.
    #[serde(default)]
    #[schemars(length(max = 32768))]
    pub message: String,
}

/// The status of a condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// Conditions keyed by type, as upstream lists them (`x-kubernetes-list-type: map`).
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(r: NodeSelectorRequirementWithMinValues) -> Vec<String> {
        let mut v = Validator::new("NodePool", Some("x"));
        v.field("requirements", |v| {
            validate_requirements(v, &[r], LabelPolicy::Aws, KeyUse::NodePoolRequirement);
        });
        v.finish()
            .err()
            .map(|e| {
                e.0.into_iter()
                    .map(|e| format!("{}: {}", e.path, e.message))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn in_needs_values_and_numeric_ops_one_integer() {
        assert_eq!(
            check(NodeSelectorRequirementWithMinValues::new("a", Operator::In, &[])),
            vec!["requirements[0]: requirements with operator 'In' must have a value defined"]
        );
        assert!(
            check(NodeSelectorRequirementWithMinValues::new(
                "a",
                Operator::Gte,
                &["4"]
            ))
            .is_empty()
        );
        let negative = check(NodeSelectorRequirementWithMinValues::new(
            "a",
            Operator::Lt,
            &["-1"],
        ));
        assert!(
            negative.iter().any(|e| e.contains("single non-negative integer")),
            "{negative:?}"
        );
        assert_eq!(
            check(NodeSelectorRequirementWithMinValues::new(
                "a",
                Operator::Gt,
                &["1", "2"]
            ))
            .len(),
            1
        );
        assert_eq!(
            check(NodeSelectorRequirementWithMinValues::new(
                "a",
                Operator::Lte,
                &["x"]
            ))
            .len(),
            1
        );
    }

    #[test]
    fn min_values_needs_that_many_in_values() {
        let mut r = NodeSelectorRequirementWithMinValues::new("a", Operator::In, &["x", "y"]);
        r.min_values = Some(3);
        assert_eq!(check(r.clone()).len(), 1);
        r.min_values = Some(2);
        assert!(check(r).is_empty());
    }

    #[test]
    fn duplicate_taints_across_lists() {
        let t = Taint::new("a", None, TaintEffect::NoSchedule);
        let mut v = Validator::new("NodePool", Some("x"));
        validate_taints(&mut v, std::slice::from_ref(&t), std::slice::from_ref(&t));
        let e = v.finish().unwrap_err();
        assert_eq!(e.0.len(), 1);
        assert_eq!(e.0[0].path, "startupTaints[0]");
    }
}
