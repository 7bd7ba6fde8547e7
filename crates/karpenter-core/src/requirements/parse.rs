//! Converting requirements from and to their Kubernetes form: `NodeSelectorRequirement`, `NodeSelectorTerm`,
//! label maps, and Karpenter's `{key, operator, values, minValues}` (NodePool, NodeClaim and the catalog file).
//!
//! Errors name the key, the operator and the offending value, because they reach users verbatim (a malformed
//! NodePool or snapshot file).

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm};
use karpenter_api::common::NodeSelectorRequirementWithMinValues;
use serde::{Deserialize, Serialize};

use super::{LabelInterner, Requirement, Requirements};

/// The node selector operators, as the API types define them (Kubernetes' six plus Karpenter's Gte and Lte).
pub use karpenter_api::common::{Operator, UnknownOperator};

/// Why a requirement could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    #[error("requirement has an empty key")]
    EmptyKey,
    #[error(
        "requirement on {key:?}: unknown operator {operator:?}; use one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte"
    )]
    UnknownOperator { key: String, operator: String },
    #[error("requirement on {key:?}: operator {operator} needs at least one value")]
    MissingValues { key: String, operator: Operator },
    #[error("requirement on {key:?}: operator {operator} takes no values, but has {values:?}")]
    UnexpectedValues {
        key: String,
        operator: Operator,
        values: Vec<String>,
    },
    #[error(
        "requirement on {key:?}: operator {operator} needs exactly one integer value, but has {values:?}"
    )]
    NeedsOneValue {
        key: String,
        operator: Operator,
        values: Vec<String>,
    },
    #[error("requirement on {key:?}: operator {operator} value {value:?} is not an integer")]
    NotAnInteger {
        key: String,
        operator: Operator,
        value: String,
    },
    #[error("requirement on {key:?}: minValues {min_values} must be at least 1")]
    InvalidMinValues { key: String, min_values: i64 },
}

/// A requirement as Karpenter's APIs and the CLI print it: `{"key", "operator", "values", "minValues"}`.
///
/// `operator` stays a string so that a file with a bad operator still parses and the error names the key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequirementSpec {
    pub key: String,
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<i64>,
}

impl Requirement {
    /// Reads `key operator values` (with optional `minValues`), validating as the API server does: `In`/`NotIn`
    /// need values, `Exists`/`DoesNotExist` take none, `Gt`/`Lt`/`Gte`/`Lte` take exactly one integer.
    pub fn parse<S: AsRef<str>>(
        key: &str,
        operator: &str,
        values: &[S],
        min_values: Option<i64>,
        interner: &mut LabelInterner,
    ) -> Result<Self, RequirementError> {
        if key.is_empty() {
            return Err(RequirementError::EmptyKey);
        }
        let owned_values = || values.iter().map(|v| v.as_ref().to_string()).collect::<Vec<_>>();
        let operator: Operator = operator.parse().map_err(|_| RequirementError::UnknownOperator {
            key: key.to_string(),
            operator: operator.to_string(),
        })?;
        let min_values = match min_values {
            None => None,
            Some(m) => Some(u32::try_from(m).ok().filter(|&m| m >= 1).ok_or(
                RequirementError::InvalidMinValues {
                    key: key.to_string(),
                    min_values: m,
                },
            )?),
        };
        let key_sym = interner.intern_key(key);
        let requirement = match operator {
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    return Err(RequirementError::MissingValues {
                        key: key.to_string(),
                        operator,
                    });
                }
                let symbols = values.iter().map(|v| interner.intern(v.as_ref()));
                if operator == Operator::In {
                    Requirement::in_values(key_sym, symbols)
                } else {
                    Requirement::not_in(key_sym, symbols)
                }
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    return Err(RequirementError::UnexpectedValues {
                        key: key.to_string(),
                        operator,
                        values: owned_values(),
                    });
                }
                if operator == Operator::Exists {
                    Requirement::exists(key_sym)
                } else {
                    Requirement::does_not_exist(key_sym)
                }
            }
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                let [value] = values else {
                    return Err(RequirementError::NeedsOneValue {
                        key: key.to_string(),
                        operator,
                        values: owned_values(),
                    });
                };
                let value = value.as_ref();
                // Kubernetes reads these with ParseInt(v, 10, 64), which also accepts a sign and leading zeros.
                let n: i64 = value.parse().map_err(|_| RequirementError::NotAnInteger {
                    key: key.to_string(),
                    operator,
                    value: value.to_string(),
                })?;
                match operator {
                    Operator::Gt => Requirement::gt(key_sym, n),
                    Operator::Lt => Requirement::lt(key_sym, n),
                    Operator::Gte => Requirement::gte(key_sym, n),
                    _ => Requirement::lte(key_sym, n),
                }
            }
        };
        Ok(requirement.with_min_values(min_values))
    }

    /// Reads a Kubernetes node selector requirement (from node affinity).
    pub fn from_node_selector_requirement(
        requirement: &NodeSelectorRequirement,
        interner: &mut LabelInterner,
    ) -> Result<Self, RequirementError> {
        let values = requirement.values.as_deref().unwrap_or_default();
        Self::parse(&requirement.key, &requirement.operator, values, None, interner)
    }

    /// Reads a NodePool or NodeClaim requirement.
    pub fn from_api(
        requirement: &NodeSelectorRequirementWithMinValues,
        interner: &mut LabelInterner,
    ) -> Result<Self, RequirementError> {
        Self::parse(
            &requirement.key,
            requirement.operator.as_str(),
            &requirement.values,
            requirement.min_values,
            interner,
        )
    }

    /// Reads Karpenter's wire form.
    pub fn from_spec(spec: &RequirementSpec, interner: &mut LabelInterner) -> Result<Self, RequirementError> {
        Self::parse(&spec.key, &spec.operator, &spec.values, spec.min_values, interner)
    }

    /// The wire form: one entry, or several when the constraint needs them (`NotIn` plus bounds, or both bounds,
    /// written as `Gte`/`Lte` like upstream). Values are sorted by name so output is stable.
    pub fn to_specs(&self, interner: &LabelInterner) -> Vec<RequirementSpec> {
        let key = interner.resolve(self.key).to_string();
        let min_values = self.min_values.map(i64::from);
        let spec = |operator: Operator, values: Vec<String>| RequirementSpec {
            key: key.clone(),
            operator: operator.as_str().to_string(),
            values,
            min_values,
        };
        let mut values: Vec<String> = self
            .values()
            .iter()
            .map(|&v| interner.resolve(v).to_string())
            .collect();
        values.sort_unstable();
        if !self.is_complement() {
            let op = if values.is_empty() {
                Operator::DoesNotExist
            } else {
                Operator::In
            };
            return vec![spec(op, values)];
        }
        let mut specs = Vec::with_capacity(1);
        if !values.is_empty() {
            specs.push(spec(Operator::NotIn, values));
        }
        if let Some(g) = self.lower_bound() {
            specs.push(spec(Operator::Gte, vec![g.to_string()]));
        }
        if let Some(l) = self.upper_bound() {
            specs.push(spec(Operator::Lte, vec![l.to_string()]));
        }
        if specs.is_empty() {
            specs.push(spec(Operator::Exists, Vec::new()));
        }
        specs
    }
}

impl Requirements {
    /// Reads node selector requirements, intersecting repeated keys.
    pub fn from_node_selector_requirements(
        requirements: &[NodeSelectorRequirement],
        interner: &mut LabelInterner,
    ) -> Result<Self, RequirementError> {
        requirements
            .iter()
            .map(|r| Requirement::from_node_selector_requirement(r, interner))
            .collect()
    }

    /// Reads one node selector term (its `matchExpressions`; like upstream, `matchFields` are not label
    /// requirements and are ignored).
    pub fn from_node_selector_term(
        term: &NodeSelectorTerm,
        interner: &mut LabelInterner,
    ) -> Result<Self, RequirementError> {
        Self::from_node_selector_requirements(term.match_expressions.as_deref().unwrap_or_default(), interner)
    }

    /// Reads NodePool `spec.template.spec.requirements` or NodeClaim `spec.requirements`.
    pub fn from_api(
        requirements: &[NodeSelectorRequirementWithMinValues],
        interner: &mut LabelInterner,
    ) -> Result<Self, RequirementError> {
        requirements
            .iter()
            .map(|r| Requirement::from_api(r, interner))
            .collect()
    }

    /// Reads Karpenter's wire form (catalog files, CLI output).
    pub fn from_specs(
        specs: &[RequirementSpec],
        interner: &mut LabelInterner,
    ) -> Result<Self, RequirementError> {
        specs
            .iter()
            .map(|s| Requirement::from_spec(s, interner))
            .collect()
    }

    /// `key In [value]` for each label (a pod's `nodeSelector`, a NodePool's template labels, a node's labels).
    pub fn from_labels<'a>(
        labels: impl IntoIterator<Item = (&'a str, &'a str)>,
        interner: &mut LabelInterner,
    ) -> Self {
        labels
            .into_iter()
            .map(|(k, v)| {
                let key = interner.intern_key(k);
                Requirement::in_values(key, [interner.intern(v)])
            })
            .collect()
    }

    /// The wire form, sorted by key name.
    pub fn to_specs(&self, interner: &LabelInterner) -> Vec<RequirementSpec> {
        let mut specs: Vec<RequirementSpec> = self.iter().flat_map(|r| r.to_specs(interner)).collect();
        // A stable sort keeps NotIn, Gte, Lte of one key in that order.
        specs.sort_by(|a, b| a.key.cmp(&b.key));
        specs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nsr(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.to_string(),
            operator: op.to_string(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn operators_parse_case_sensitively() {
        for op in Operator::ALL {
            assert_eq!(op.as_str().parse::<Operator>(), Ok(op));
        }
        assert!("in".parse::<Operator>().is_err());
    }

    #[test]
    fn unknown_operator_error_names_key_and_operator() {
        let mut i = LabelInterner::new();
        let err = Requirement::parse("kubernetes.io/arch", "Within", &["amd64"], None, &mut i).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("\"kubernetes.io/arch\"") && msg.contains("\"Within\""),
            "{msg}"
        );
    }

    #[test]
    fn bound_operators_need_one_integer() {
        let mut i = LabelInterner::new();
        let err = Requirement::parse("cpu", "Gt", &["four"], None, &mut i).unwrap_err();
        assert_eq!(
            err.to_string(),
            "requirement on \"cpu\": operator Gt value \"four\" is not an integer"
        );
        let err = Requirement::parse("cpu", "Lt", &["1", "2"], None, &mut i).unwrap_err();
        assert!(matches!(err, RequirementError::NeedsOneValue { .. }));
        let empty: &[&str] = &[];
        assert!(Requirement::parse("cpu", "Gte", empty, None, &mut i).is_err());
    }

    #[test]
    fn set_operators_validate_their_values() {
        let mut i = LabelInterner::new();
        let empty: &[&str] = &[];
        assert!(matches!(
            Requirement::parse("zone", "In", empty, None, &mut i),
            Err(RequirementError::MissingValues {
                operator: Operator::In,
                ..
            })
        ));
        assert!(matches!(
            Requirement::parse("zone", "Exists", &["a"], None, &mut i),
            Err(RequirementError::UnexpectedValues { .. })
        ));
        assert!(matches!(
            Requirement::parse("", "Exists", empty, None, &mut i),
            Err(RequirementError::EmptyKey)
        ));
        assert!(matches!(
            Requirement::parse("zone", "In", &["a"], Some(0), &mut i),
            Err(RequirementError::InvalidMinValues { min_values: 0, .. })
        ));
    }

    #[test]
    fn gt_and_lt_become_inclusive_bounds() {
        let mut i = LabelInterner::new();
        let gt = Requirement::parse("cpu", "Gt", &["3"], None, &mut i).unwrap();
        assert_eq!(gt.lower_bound(), Some(4));
        let lt = Requirement::parse("cpu", "Lt", &["3"], None, &mut i).unwrap();
        assert_eq!(lt.upper_bound(), Some(2));
        assert!(
            Requirement::parse("cpu", "Gt", &["9223372036854775807"], None, &mut i)
                .unwrap()
                .is_empty()
        );
        assert!(
            Requirement::parse("cpu", "Lt", &["-9223372036854775808"], None, &mut i)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn node_selector_term_reads_match_expressions_and_merges_keys() {
        let mut i = LabelInterner::new();
        let term = NodeSelectorTerm {
            match_expressions: Some(vec![
                nsr("topology.kubernetes.io/zone", "In", &["a", "b"]),
                nsr("failure-domain.beta.kubernetes.io/zone", "NotIn", &["b"]),
                nsr("karpenter.k8s.aws/instance-cpu", "Gt", &["2"]),
            ]),
            match_fields: Some(vec![nsr("metadata.name", "In", &["node-1"])]),
        };
        let reqs = Requirements::from_node_selector_term(&term, &mut i).unwrap();
        assert_eq!(
            reqs.len(),
            2,
            "the beta zone key merges into the GA key; matchFields are ignored"
        );
        let zone = i.lookup_key("topology.kubernetes.io/zone").unwrap();
        assert_eq!(reqs.single_value(zone), i.lookup("a"));
    }

    #[test]
    fn specs_roundtrip_through_the_wire_form() {
        let mut i = LabelInterner::new();
        let specs: Vec<RequirementSpec> = serde_json::from_str(
            r#"[{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64", "amd64"], "minValues": 2},
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["3"]},
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lt", "values": ["17"]},
                {"key": "karpenter.k8s.aws/instance-family", "operator": "NotIn", "values": ["t3"]},
                {"key": "example.com/team", "operator": "Exists"}]"#,
        )
        .unwrap();
        let reqs = Requirements::from_specs(&specs, &mut i).unwrap();
        let out = reqs.to_specs(&i);
        let json = serde_json::to_value(&out).unwrap();
        assert_eq!(
            json,
            serde_json::json!([
                {"key": "example.com/team", "operator": "Exists"},
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gte", "values": ["4"]},
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lte", "values": ["16"]},
                {"key": "karpenter.k8s.aws/instance-family", "operator": "NotIn", "values": ["t3"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"], "minValues": 2},
            ])
        );
        assert_eq!(Requirements::from_specs(&out, &mut i).unwrap(), reqs);
    }

    #[test]
    fn nodepool_requirements_read_with_min_values() {
        let mut i = LabelInterner::new();
        let api = NodeSelectorRequirementWithMinValues {
            key: "karpenter.k8s.aws/instance-family".to_string(),
            operator: karpenter_api::common::Operator::In,
            values: vec!["c5".to_string(), "m5".to_string()],
            min_values: Some(2),
        };
        let reqs = Requirements::from_api(&[api], &mut i).unwrap();
        assert_eq!(reqs.iter().next().and_then(Requirement::min_values), Some(2));
    }

    #[test]
    fn labels_become_single_value_requirements() {
        let mut i = LabelInterner::new();
        let reqs = Requirements::from_labels([("beta.kubernetes.io/arch", "amd64"), ("team", "a")], &mut i);
        let arch = i.lookup_key("kubernetes.io/arch").unwrap();
        assert_eq!(reqs.single_value(arch), i.lookup("amd64"));
        assert_eq!(reqs.labels().count(), 2);
    }
}
