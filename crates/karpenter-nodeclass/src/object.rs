//! A node class's status conditions, whatever its kind. Every node class carries operatorpkg's
//! `status.conditions` with a `Ready` root; [`NodeClassObject`] reads one condition of the typed kinds
//! (EC2NodeClass, KWOKNodeClass) and of a `DynamicObject`, the form a class of a kind known only at run time
//! (a NodePool's reference resolved through discovery) comes in. Readers get a [`ConditionRef`] either way, so
//! one code path judges every kind.

use karpenter_api::{
    common::{Condition, ConditionStatus, find_condition},
    ec2nodeclass::EC2NodeClass,
    kwoknodeclass::KWOKNodeClass,
};
use kube::{Resource, api::DynamicObject};

/// One status condition as read from a class: its status, reason and message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConditionRef<'a> {
    pub status: ConditionStatus,
    pub reason: &'a str,
    pub message: &'a str,
}

impl<'a> From<&'a Condition> for ConditionRef<'a> {
    fn from(c: &'a Condition) -> Self {
        Self {
            status: c.status,
            reason: &c.reason,
            message: &c.message,
        }
    }
}

/// A node class object: its metadata (through [`Resource`]) and its status conditions.
pub trait NodeClassObject: Resource {
    /// The status condition of type `type_`, if the class has one.
    fn status_condition(&self, type_: &str) -> Option<ConditionRef<'_>>;
}

impl NodeClassObject for EC2NodeClass {
    fn status_condition(&self, type_: &str) -> Option<ConditionRef<'_>> {
        let status = self.status.as_ref()?;
        find_condition(&status.conditions, type_).map(ConditionRef::from)
    }
}

impl NodeClassObject for KWOKNodeClass {
    fn status_condition(&self, type_: &str) -> Option<ConditionRef<'_>> {
        let status = self.status.as_ref()?;
        find_condition(&status.conditions, type_).map(ConditionRef::from)
    }
}

/// Read leniently, field by field: a condition some other writer left without a reason or a transition time
/// still says what its status is. A status other than `True` or `False` is Unknown.
impl NodeClassObject for DynamicObject {
    fn status_condition(&self, type_: &str) -> Option<ConditionRef<'_>> {
        let condition = self.data["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == type_)?;
        let text = |field: &str| condition[field].as_str().unwrap_or_default();
        let status = match condition["status"].as_str() {
            Some("True") => ConditionStatus::True,
            Some("False") => ConditionStatus::False,
            _ => ConditionStatus::Unknown,
        };
        Some(ConditionRef {
            status,
            reason: text("reason"),
            message: text("message"),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_dynamic_objects_condition_is_read_field_by_field() {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "OtherNodeClass", "metadata": {"name": "c"},
            "status": {"conditions": [
                {"type": "Ready", "status": "False", "reason": "Broken"},
                {"type": "Other", "status": "Maybe"}]}
        }))
        .unwrap();
        assert_eq!(
            object.status_condition("Ready"),
            Some(ConditionRef {
                status: ConditionStatus::False,
                reason: "Broken",
                message: ""
            })
        );
        assert_eq!(
            object.status_condition("Other").map(|c| c.status),
            Some(ConditionStatus::Unknown)
        );
        assert_eq!(object.status_condition("Missing"), None);
        let bare: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "OtherNodeClass", "metadata": {"name": "c"}
        }))
        .unwrap();
        assert_eq!(bare.status_condition("Ready"), None);
    }
}
