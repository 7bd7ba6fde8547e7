//! A NodePool's status conditions (upstream's nodepool.validation and nodepool.readiness, and the Ready root
//! condition). Pure: the status controller reads the inputs and writes the result.
//!
//! - `ValidationSucceeded`: the NodePool passes the runtime validation (the CRD's rules and the controller's
//!   own checks); False with reason `NodePoolValidationFailed` and the fields at fault otherwise. The
//!   provisioner and the disruption pass skip an invalid NodePool whatever this condition says (core's snapshot
//!   validates each NodePool itself); the condition is how a user finds out.
//! - `NodeClassReady`: the referenced NodeClass's own `Ready` condition, or why it cannot be read (read by
//!   karpenter-nodeclass, the same way for every kind: [`NodeClassReadiness`]).
//! - `Ready`: True when both are True; otherwise False if one is False, else Unknown.
//!
//! Conditions keep their `lastTransitionTime` while their status stays, so the status is only rewritten when
//! something changed. Other conditions (NodeRegistrationHealthy, written by the lifecycle) are kept as found.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::{
    common::{Condition, ConditionStatus},
    validation::ValidationErrors,
};
use karpenter_nodeclass::NodeClassReadiness;

pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
pub const NODE_CLASS_READY: &str = "NodeClassReady";
pub const READY: &str = "Ready";

/// One condition as it should be: status, reason, message (the NodeOverlay status controller writes its
/// conditions through the same [`merge_conditions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WantedCondition {
    pub type_: &'static str,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
}

fn validation(result: &Result<(), ValidationErrors>) -> WantedCondition {
    match result {
        Ok(()) => WantedCondition {
            type_: VALIDATION_SUCCEEDED,
            status: ConditionStatus::True,
            reason: VALIDATION_SUCCEEDED.into(),
            message: String::new(),
        },
        Err(errors) => WantedCondition {
            type_: VALIDATION_SUCCEEDED,
            status: ConditionStatus::False,
            reason: "NodePoolValidationFailed".into(),
            message: errors.fields(),
        },
    }
}

fn node_class(readiness: &NodeClassReadiness) -> WantedCondition {
    let (status, reason, message) = match readiness {
        NodeClassReadiness::Ready => (ConditionStatus::True, NODE_CLASS_READY.to_string(), String::new()),
        NodeClassReadiness::NotReady { reason, message } => (
            ConditionStatus::False,
            "NodeClassNotReady".to_string(),
            if message.is_empty() {
                format!("NodeClass is not ready ({reason})")
            } else {
                format!("NodeClass is not ready ({reason}): {message}")
            },
        ),
        NodeClassReadiness::NotFound => (
            ConditionStatus::False,
            "NodeClassNotFound".to_string(),
            "NodeClass not found on cluster".to_string(),
        ),
        NodeClassReadiness::Terminating => (
            ConditionStatus::False,
            "NodeClassTerminating".to_string(),
            "NodeClass is terminating".to_string(),
        ),
        NodeClassReadiness::ReadinessUnknown => (
            ConditionStatus::Unknown,
            "NodeClassReadinessUnknown".to_string(),
            "NodeClass has no Ready condition yet".to_string(),
        ),
        NodeClassReadiness::UnknownKind { message } => (
            ConditionStatus::Unknown,
            "NodeClassReadinessUnknown".to_string(),
            message.clone(),
        ),
    };
    WantedCondition {
        type_: NODE_CLASS_READY,
        status,
        reason,
        message,
    }
}

/// The `Ready` root condition over `dependents`, as operatorpkg computes it: True when all are True; else False
/// (reason `UnhealthyDependents`, the dependents not True named) when one is False, else Unknown.
pub fn ready(dependents: &[&WantedCondition]) -> WantedCondition {
    let not_true: Vec<String> = dependents
        .iter()
        .filter(|w| w.status != ConditionStatus::True)
        .map(|w| format!("{}={:?}", w.type_, w.status))
        .collect();
    let status = if not_true.is_empty() {
        ConditionStatus::True
    } else if dependents.iter().any(|w| w.status == ConditionStatus::False) {
        ConditionStatus::False
    } else {
        ConditionStatus::Unknown
    };
    let (reason, message) = if not_true.is_empty() {
        (READY.to_string(), String::new())
    } else {
        ("UnhealthyDependents".to_string(), not_true.join(", "))
    };
    WantedCondition {
        type_: READY,
        status,
        reason,
        message,
    }
}

/// The NodePool's conditions given `current` ones: ValidationSucceeded, NodeClassReady and Ready replaced,
/// every other condition kept; a condition whose status did not change keeps its transition time.
pub fn nodepool_conditions(
    current: &[Condition],
    validated: &Result<(), ValidationErrors>,
    readiness: &NodeClassReadiness,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let validation = validation(validated);
    let class = node_class(readiness);
    let root = ready(&[&validation, &class]);
    merge_conditions(current, vec![validation, class, root], generation, now)
}

/// `current` with the conditions of `ours` replaced (every other condition kept), sorted by type; a condition
/// whose status did not change keeps its transition time, so an unchanged status compares equal and is not
/// rewritten.
pub fn merge_conditions(
    current: &[Condition],
    ours: Vec<WantedCondition>,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = current
        .iter()
        .filter(|c| !ours.iter().any(|w| w.type_ == c.type_))
        .cloned()
        .collect();
    for wanted in ours {
        let previous = current.iter().find(|c| c.type_ == wanted.type_);
        let last_transition_time = match previous {
            Some(p) if p.status == wanted.status => p.last_transition_time.clone(),
            _ => Time(now),
        };
        out.push(Condition {
            type_: wanted.type_.to_string(),
            status: wanted.status,
            observed_generation: generation,
            last_transition_time,
            reason: wanted.reason,
            message: wanted.message,
        });
    }
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    out
}

#[cfg(test)]
mod tests {
    use karpenter_api::{label_policy::LabelPolicy, nodepool::NodePool};
    use serde_json::json;

    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn pool(requirements: serde_json::Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {"template": {"spec": {"requirements": requirements,
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
        }))
        .unwrap()
    }

    fn find<'a>(conditions: &'a [Condition], type_: &str) -> &'a Condition {
        conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn a_valid_pool_with_a_ready_node_class_is_ready() {
        let p = pool(json!([]));
        let c = nodepool_conditions(
            &[],
            &p.validate(LabelPolicy::Core),
            &NodeClassReadiness::Ready,
            Some(1),
            at("2026-01-01T00:00:00Z"),
        );
        let types: Vec<(&str, ConditionStatus)> = c.iter().map(|c| (c.type_.as_str(), c.status)).collect();
        assert_eq!(
            types,
            vec![
                ("NodeClassReady", ConditionStatus::True),
                ("Ready", ConditionStatus::True),
                ("ValidationSucceeded", ConditionStatus::True)
            ]
        );
        assert_eq!(find(&c, READY).observed_generation, Some(1));
    }

    #[test]
    fn an_invalid_pool_names_the_field_and_is_not_ready() {
        let p = pool(json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["cheap"]}]));
        let c = nodepool_conditions(
            &[],
            &p.validate(LabelPolicy::Core),
            &NodeClassReadiness::Ready,
            None,
            at("2026-01-01T00:00:00Z"),
        );
        let v = find(&c, VALIDATION_SUCCEEDED);
        assert_eq!(
            (v.status, v.reason.as_str()),
            (ConditionStatus::False, "NodePoolValidationFailed")
        );
        assert!(
            v.message.contains("spec.template.spec.requirements[0]"),
            "{}",
            v.message
        );
        let r = find(&c, READY);
        assert_eq!(
            (r.status, r.message.as_str()),
            (ConditionStatus::False, "ValidationSucceeded=False")
        );
    }

    #[test]
    fn node_class_problems_have_upstreams_reasons() {
        let ok = Ok(());
        let now = at("2026-01-01T00:00:00Z");
        let reason = |r: NodeClassReadiness| {
            let c = nodepool_conditions(&[], &ok, &r, None, now);
            let n = find(&c, NODE_CLASS_READY);
            (n.status, n.reason.clone(), find(&c, READY).status)
        };
        assert_eq!(
            reason(NodeClassReadiness::NotFound),
            (
                ConditionStatus::False,
                "NodeClassNotFound".into(),
                ConditionStatus::False
            )
        );
        assert_eq!(
            reason(NodeClassReadiness::Terminating),
            (
                ConditionStatus::False,
                "NodeClassTerminating".into(),
                ConditionStatus::False
            )
        );
        assert_eq!(
            reason(NodeClassReadiness::ReadinessUnknown),
            (
                ConditionStatus::Unknown,
                "NodeClassReadinessUnknown".into(),
                ConditionStatus::Unknown
            )
        );
        assert_eq!(
            reason(NodeClassReadiness::UnknownKind { message: "x".into() }),
            (
                ConditionStatus::Unknown,
                "NodeClassReadinessUnknown".into(),
                ConditionStatus::Unknown
            )
        );
    }

    #[test]
    fn an_unchanged_status_keeps_its_transition_time_and_other_conditions_stay() {
        let ok = Ok(());
        let first = nodepool_conditions(
            &[],
            &ok,
            &NodeClassReadiness::Ready,
            None,
            at("2026-01-01T00:00:00Z"),
        );
        let mut current = first.clone();
        current.push(Condition {
            type_: "NodeRegistrationHealthy".into(),
            status: ConditionStatus::True,
            observed_generation: None,
            last_transition_time: Time(at("2025-12-31T00:00:00Z")),
            reason: "NodeRegistrationHealthy".into(),
            message: String::new(),
        });
        let again = nodepool_conditions(
            &current,
            &ok,
            &NodeClassReadiness::Ready,
            None,
            at("2026-01-01T01:00:00Z"),
        );
        let mut expected = current.clone();
        expected.sort_by(|a, b| a.type_.cmp(&b.type_));
        assert_eq!(again, expected, "nothing changed, so nothing to write");
        let not_found = nodepool_conditions(
            &again,
            &ok,
            &NodeClassReadiness::NotFound,
            None,
            at("2026-01-01T02:00:00Z"),
        );
        assert_eq!(
            find(&not_found, NODE_CLASS_READY).last_transition_time,
            Time(at("2026-01-01T02:00:00Z"))
        );
        assert_eq!(
            find(&not_found, VALIDATION_SUCCEEDED).last_transition_time,
            Time(at("2026-01-01T00:00:00Z"))
        );
    }
}
