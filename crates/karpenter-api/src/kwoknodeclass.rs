//! karpenter.kwok.sh/v1alpha1 KWOKNodeClass, the node class of upstream's KWOK provider, and the labels that
//! provider puts on its nodes. Upstream's own e2e suites run against KWOK with a KWOKNodeClass as their default
//! node class, so the type, its CRD (short names, category, the status defaulted to `Ready=True` so a class is
//! ready with no controller writing it) and its labels follow upstream's v1.15 exactly.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{
    common::Condition,
    duration::parse_go_duration,
    validation::{DURATION_PATTERN, ValidationErrors, Validator},
};

/// The API group of KWOKNodeClass and of the KWOK instance labels.
pub const KWOK_GROUP: &str = "karpenter.kwok.sh";
pub const KIND: &str = "KWOKNodeClass";

/// The instance type's size: the AWS-style suffix of its name (`large`, `2xlarge`) or else its CPU count.
pub const INSTANCE_SIZE_LABEL: &str = "karpenter.kwok.sh/instance-size";
/// The instance type's family: its name up to the first `.` or `-`, or else its first character.
pub const INSTANCE_FAMILY_LABEL: &str = "karpenter.kwok.sh/instance-family";
/// The instance type's CPU capacity as a quantity (`4`).
pub const INSTANCE_CPU_LABEL: &str = "karpenter.kwok.sh/instance-cpu";
/// The instance type's memory capacity as a quantity (`16Gi`).
pub const INSTANCE_MEMORY_LABEL: &str = "karpenter.kwok.sh/instance-memory";
/// The KWOK labels a pod may select and a NodePool may require without declaring them: every KWOK instance
/// type defines them, as upstream adds them to its well-known labels.
pub const WELL_KNOWN_LABELS: [&str; 4] = [
    INSTANCE_SIZE_LABEL,
    INSTANCE_FAMILY_LABEL,
    INSTANCE_CPU_LABEL,
    INSTANCE_MEMORY_LABEL,
];

/// The label and annotation that tell kwok to play a Node's kubelet, and their value.
pub const KWOK_NODE_KEY: &str = "kwok.x-k8s.io/node";
pub const KWOK_NODE_VALUE: &str = "fake";
/// The hourly price of the chosen offering, for eks-node-viewer.
pub const NODE_VIEWER_PRICE_LABEL: &str = "eks-node-viewer/instance-price";
/// Which of kwok's pre-created partitions a node belongs to (upstream has one, `a`).
pub const KWOK_PARTITION_LABEL: &str = "kwok-partition";

/// The status an object gets from the CRD when it is created without one (upstream's `+kubebuilder:default`).
pub const DEFAULT_STATUS_TRANSITION_TIME: &str = "2024-01-01T01:01:01Z";

/// KWOKNodeClass is the Schema for the KWOKNodeClass API
#[derive(CustomResource, Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.kwok.sh",
    version = "v1alpha1",
    kind = "KWOKNodeClass",
    plural = "kwoknodeclasses",
    singular = "kwoknodeclass",
    shortname = "kwoknc",
    shortname = "kwokncs",
    category = "karpenter",
    status = "KWOKNodeClassStatus",
    doc = "KWOKNodeClass is the Schema for the KWOKNodeClass API"
)]
#[serde(rename_all = "camelCase")]
pub struct KWOKNodeClassSpec {
    /// NodeRegistrationDelay is a delay for KWOK nodes to register to the cluster.
    /// This is meant to model instance startup time that can happen when hardware
    /// needs to start on providers that are backed by real instances.
    // A string checked by `validate()` rather than a parsed duration, so a bad value is reported with the object
    // and field instead of failing to decode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(s|m|h))+$"))]
    pub node_registration_delay: Option<String>,
}

/// KWOKNodeClassStatus contains the resolved state of the KwokNodeClass
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KWOKNodeClassStatus {
    /// Conditions contains signals for health and readiness
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl KWOKNodeClass {
    /// Reads a KWOKNodeClass as the API server returns it: the derived decoder needs a `spec`, which upstream's
    /// type (and so a class written for it) may leave out.
    pub fn from_value(mut value: Value) -> Result<Self, serde_json::Error> {
        if let Some(object) = value.as_object_mut() {
            object.entry("spec").or_insert_with(|| json!({}));
        }
        serde_json::from_value(value)
    }

    /// Every rule the object breaks, naming it and the field.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let mut v = Validator::new(KIND, self.metadata.name.as_deref());
        v.field("spec", |v| {
            if let Some(delay) = &self.spec.node_registration_delay {
                v.field("nodeRegistrationDelay", |v| {
                    if !matches_duration_pattern(delay) {
                        v.error(format!(
                            "{delay:?} does not match {DURATION_PATTERN} (whole hours, minutes and seconds, \
                             for example 30s or 1m30s)"
                        ));
                    }
                });
            }
        });
        v.finish()
    }

    /// How long a launched node waits before its Node object is created (`spec.nodeRegistrationDelay`, zero
    /// when unset). A value `validate()` rejects counts as zero.
    pub fn registration_delay(&self) -> Duration {
        self.spec
            .node_registration_delay
            .as_deref()
            .filter(|d| matches_duration_pattern(d))
            .and_then(|d| parse_go_duration(d).ok())
            .unwrap_or_default()
    }
}

/// `^([0-9]+(s|m|h))+$` without a regex engine (this crate has none at run time).
fn matches_duration_pattern(text: &str) -> bool {
    let mut digits = 0usize;
    let mut units = 0usize;
    for c in text.chars() {
        match c {
            '0'..='9' => digits += 1,
            's' | 'm' | 'h' if digits > 0 => {
                digits = 0;
                units += 1;
            }
            _ => return false,
        }
    }
    digits == 0 && units > 0
}

/// The KWOKNodeClass CRD, as upstream's `karpenter.kwok.sh_kwoknodeclasses.yaml` has it: the derived schema with
/// the status defaulted to `Ready=True` and the conditions' fields required as metav1.Condition requires them.
pub fn crd() -> CustomResourceDefinition {
    let derived = KWOKNodeClass::crd();
    post_process(&derived).unwrap_or(derived)
}

fn post_process(crd: &CustomResourceDefinition) -> Option<CustomResourceDefinition> {
    let mut value = serde_json::to_value(crd).ok()?;
    let root = value.pointer_mut("/spec/versions/0/schema/openAPIV3Schema")?;
    strip_nullable(root);
    // Upstream's spec is optional (`omitempty`): a class with no spec at all is valid, and the e2e suites'
    // default class has none. The derive requires it.
    if let Some(map) = root.as_object_mut() {
        map.remove("required");
        map.remove("title");
    }
    let properties = root.get_mut("properties")?.as_object_mut()?;
    properties.insert("apiVersion".into(), json!({"type": "string"}));
    properties.insert("kind".into(), json!({"type": "string"}));
    properties.insert("metadata".into(), json!({"type": "object"}));
    // The derive gives the spec its type's doc; upstream's spec has no description.
    properties.get_mut("spec")?.as_object_mut()?.remove("description");
    let status = properties.get_mut("status")?;
    status["default"] = json!({"conditions": [{
        "lastTransitionTime": DEFAULT_STATUS_TRANSITION_TIME,
        "message": "",
        "reason": "Ready",
        "status": "True",
        "type": "Ready",
    }]});
    let condition = status.pointer_mut("/properties/conditions/items")?;
    condition["required"] = json!(["lastTransitionTime", "message", "reason", "status", "type"]);
    // Required fields have no defaults in upstream's schema (and an empty default reason would break its own
    // minLength, which the API server refuses in a structural schema).
    for field in ["reason", "message"] {
        condition
            .pointer_mut(&format!("/properties/{field}"))?
            .as_object_mut()?
            .remove("default");
    }
    // operatorpkg's Condition: a reason is required and not empty.
    let reason = condition.pointer_mut("/properties/reason")?;
    reason["minLength"] = json!(1);
    reason["pattern"] = json!("^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$");
    serde_json::from_value(value).ok()
}

fn strip_nullable(node: &mut Value) {
    match node {
        Value::Object(map) => {
            map.remove("nullable");
            for (key, child) in map.iter_mut() {
                if key != "default" && key != "enum" {
                    strip_nullable(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nullable),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(yaml: &str) -> KWOKNodeClass {
        KWOKNodeClass::from_value(serde_saphyr::from_str(yaml).unwrap()).unwrap()
    }

    #[test]
    fn a_bad_registration_delay_is_named_by_object_and_field() {
        let bad = class(
            "apiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {name: slow}\n\
             spec: {nodeRegistrationDelay: 1.5m}\n",
        );
        let error = bad.validate().unwrap_err().to_string();
        assert!(
            error.starts_with("KWOKNodeClass slow: spec.nodeRegistrationDelay: \"1.5m\" does not match"),
            "{error}"
        );
        assert_eq!(bad.registration_delay(), Duration::ZERO);
        for ok in ["30s", "1m30s", "2h", "0s"] {
            let good = class(&format!(
                "apiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {{name: c}}\n\
                 spec: {{nodeRegistrationDelay: {ok}}}\n"
            ));
            assert!(good.validate().is_ok(), "{ok}");
        }
        for bad in ["", "s", "10", "1ms", "-1s", "1h 2m"] {
            assert!(!matches_duration_pattern(bad), "{bad:?}");
        }
        let delayed = class(
            "apiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {name: c}\n\
             spec: {nodeRegistrationDelay: 1m30s}\n",
        );
        assert_eq!(delayed.registration_delay(), Duration::from_secs(90));
    }

    #[test]
    fn the_crd_has_upstreams_names_default_status_and_condition_rules() {
        let crd = serde_json::to_value(crd()).unwrap();
        assert_eq!(crd["metadata"]["name"], "kwoknodeclasses.karpenter.kwok.sh");
        assert_eq!(crd["spec"]["scope"], "Cluster");
        assert_eq!(crd["spec"]["names"]["shortNames"], json!(["kwoknc", "kwokncs"]));
        assert_eq!(crd["spec"]["names"]["categories"], json!(["karpenter"]));
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], "v1alpha1");
        assert_eq!(version["subresources"], json!({"status": {}}));
        assert!(version.get("additionalPrinterColumns").is_none_or(Value::is_null));
        let schema = &version["schema"]["openAPIV3Schema"];
        assert_eq!(
            schema["properties"]["spec"]["properties"]["nodeRegistrationDelay"],
            json!({"description": "NodeRegistrationDelay is a delay for KWOK nodes to register to the cluster.\nThis is meant to model instance startup time that can happen when hardware\nneeds to start on providers that are backed by real instances.",
                   "pattern": DURATION_PATTERN, "type": "string"})
        );
        let status = &schema["properties"]["status"];
        assert_eq!(status["default"]["conditions"][0]["status"], "True");
        assert_eq!(status["default"]["conditions"][0]["type"], "Ready");
        let condition = &status["properties"]["conditions"]["items"];
        assert_eq!(
            condition["required"],
            json!(["lastTransitionTime", "message", "reason", "status", "type"])
        );
        assert_eq!(condition["properties"]["reason"]["minLength"], 1);
        assert!(!crd.to_string().contains("nullable"));
        assert!(schema.get("required").is_none(), "a class needs no spec");
        assert!(schema["properties"]["spec"].get("description").is_none());
        assert!(condition["properties"]["reason"].get("default").is_none());
    }
}
