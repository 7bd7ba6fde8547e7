//! What a node class's `Ready` condition says, read the same way for every kind (upstream's nodepool.readiness
//! and its providers' launch checks):
//!
//! - [`condition_readiness`]: the `Ready` condition alone: True is ready, False is not ready with the class's
//!   reason and message, Unknown or missing is unknown. A launch refuses a class that is not ready (the KWOK
//!   provider only then, as upstream's);
//! - [`readiness`]: what a NodePool's `NodeClassReady` reflects: a class being deleted is terminating whatever
//!   its conditions; a class of a kind no controller writes a `Ready` condition for is ready while it exists.
//!
//! [`NodeClassReadiness`] also names what [`crate::lookup`] finds when there is no class to read (not found, a
//! kind the provider or the API server does not serve).

use karpenter_api::common::ConditionStatus;

use crate::object::NodeClassObject;

/// The condition type every node class reports its readiness in.
pub const READY: &str = "Ready";

/// What was found of a NodePool's NodeClass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeClassReadiness {
    /// Its Ready condition is True.
    Ready,
    /// Its Ready condition is False, with the NodeClass's reason and message.
    NotReady { reason: String, message: String },
    /// The kind is served but there is no object of that name.
    NotFound,
    /// The NodeClass is being deleted.
    Terminating,
    /// It has no Ready condition yet, or it is Unknown.
    ReadinessUnknown,
    /// The reference names a kind the provider does not serve, or the API server does not know.
    UnknownKind { message: String },
}

/// The class's `Ready` condition alone: [`NodeClassReadiness::Ready`], [`NodeClassReadiness::NotReady`] or
/// [`NodeClassReadiness::ReadinessUnknown`].
pub fn condition_readiness<C: NodeClassObject>(class: &C) -> NodeClassReadiness {
    match class.status_condition(READY) {
        Some(ready) if ready.status == ConditionStatus::True => NodeClassReadiness::Ready,
        Some(ready) if ready.status == ConditionStatus::False => NodeClassReadiness::NotReady {
            reason: ready.reason.to_string(),
            message: ready.message.to_string(),
        },
        _ => NodeClassReadiness::ReadinessUnknown,
    }
}

/// The class's readiness as a NodePool reflects it: [`NodeClassReadiness::Terminating`] while it is being
/// deleted; otherwise, when its kind reports readiness (`reports_readiness`, the provider's
/// `node_class_reports_readiness`), what its `Ready` condition says, and ready while it exists when its kind
/// has no controller writing one.
pub fn readiness<C: NodeClassObject>(class: &C, reports_readiness: bool) -> NodeClassReadiness {
    if class.meta().deletion_timestamp.is_some() {
        return NodeClassReadiness::Terminating;
    }
    if !reports_readiness {
        return NodeClassReadiness::Ready;
    }
    condition_readiness(class)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use karpenter_api::{ec2nodeclass::EC2NodeClass, kwoknodeclass::KWOKNodeClass};
    use kube::api::DynamicObject;
    use serde_json::{Value, json};

    use super::*;

    fn deleting<C: NodeClassObject>(mut class: C) -> C {
        class.meta_mut().deletion_timestamp = Some(Time("2026-01-01T00:00:00Z".parse().unwrap()));
        class
    }

    fn ready(status: &str) -> Value {
        json!({"conditions": [{"type": "Ready", "status": status, "reason": "Broken", "message": "gone",
            "lastTransitionTime": "2024-01-01T01:01:01Z"}]})
    }

    fn ec2(status: Value) -> EC2NodeClass {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
            "spec": {"role": "KarpenterNodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"k": "v"}}], "securityGroupSelectorTerms": [{"tags": {"k": "v"}}]},
            "status": status
        }))
        .unwrap()
    }

    fn kwok(status: Option<Value>) -> KWOKNodeClass {
        let mut value = json!({"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
            "metadata": {"name": "default"}});
        if let Some(status) = status {
            value["status"] = status;
        }
        KWOKNodeClass::from_value(value).unwrap()
    }

    fn dynamic(status: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"}, "status": status
        }))
        .unwrap()
    }

    fn not_ready() -> NodeClassReadiness {
        NodeClassReadiness::NotReady {
            reason: "Broken".into(),
            message: "gone".into(),
        }
    }

    #[test]
    fn every_kind_is_read_from_its_ready_condition_alike() {
        for (status, expected) in [
            ("True", NodeClassReadiness::Ready),
            ("False", not_ready()),
            ("Unknown", NodeClassReadiness::ReadinessUnknown),
        ] {
            assert_eq!(
                condition_readiness(&ec2(ready(status))),
                expected,
                "EC2NodeClass {status}"
            );
            assert_eq!(
                condition_readiness(&kwok(Some(ready(status)))),
                expected,
                "KWOKNodeClass {status}"
            );
            assert_eq!(
                condition_readiness(&dynamic(ready(status))),
                expected,
                "DynamicObject {status}"
            );
            assert_eq!(readiness(&ec2(ready(status)), true), expected);
            assert_eq!(readiness(&kwok(Some(ready(status))), true), expected);
            assert_eq!(readiness(&dynamic(ready(status)), true), expected);
        }
    }

    #[test]
    fn a_class_without_a_ready_condition_is_unknown() {
        let unknown = NodeClassReadiness::ReadinessUnknown;
        assert_eq!(condition_readiness(&kwok(None)), unknown);
        assert_eq!(
            condition_readiness(&kwok(Some(json!({"conditions": []})))),
            unknown
        );
        assert_eq!(condition_readiness(&ec2(json!({}))), unknown);
        assert_eq!(condition_readiness(&dynamic(json!({}))), unknown);
        let other_condition = json!({"conditions": [{"type": "SubnetsReady", "status": "True"}]});
        assert_eq!(readiness(&dynamic(other_condition), true), unknown);
    }

    #[test]
    fn a_deleted_class_is_terminating_whatever_its_conditions_say() {
        let terminating = NodeClassReadiness::Terminating;
        assert_eq!(readiness(&deleting(ec2(ready("True"))), true), terminating);
        assert_eq!(
            readiness(&deleting(kwok(Some(ready("False")))), true),
            terminating
        );
        assert_eq!(readiness(&deleting(dynamic(ready("True"))), true), terminating);
        assert_eq!(readiness(&deleting(dynamic(json!({}))), false), terminating);
        // A launch reads the condition alone: a deleting class that is Ready still reads Ready there.
        assert_eq!(
            condition_readiness(&deleting(kwok(Some(ready("True"))))),
            NodeClassReadiness::Ready
        );
    }

    #[test]
    fn a_kind_no_controller_writes_readiness_for_is_ready_while_it_exists() {
        // kwok serving EC2NodeClasses: no status at all, and their NodePools must still launch.
        assert_eq!(readiness(&dynamic(json!({})), false), NodeClassReadiness::Ready);
        assert_eq!(readiness(&ec2(ready("False")), false), NodeClassReadiness::Ready);
    }
}
