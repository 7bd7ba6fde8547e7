//! The CustomResourceDefinitions, generated from the types, in the two flavours upstream ships.
//!
//! The derive gives each CRD its structure and the rules that belong to one field. Rules that depend on where a
//! shared type is used (which label keys a NodePool versus a NodeClaim may name, the AWS allow-list of
//! `karpenter.k8s.aws` keys, the syntax of taints and requirements) are injected here, as upstream injects them
//! after controller-gen. The Rust `validate()` functions read the same lists (see `label_policy`).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use crate::{
    label_policy::{KeyUse, LabelPolicy, for_all_keys, key_rules},
    nodeclaim::NodeClaim,
    nodepool::NodePool,
    validation::{LABEL_VALUE_PATTERN, TAINT_VALUE_PATTERN},
};

/// The pattern of a requirement or taint key (upstream's form of a qualified name).
pub const KEY_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";

/// Why a CRD could not be built.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("CRD {crd}: schema has no node at {path}")]
    MissingPath { crd: String, path: String },
    #[error("CRD {crd}: {source}")]
    Json { crd: String, source: serde_json::Error },
}

/// A generated CRD and the file name it is written to.
pub struct GeneratedCrd {
    pub file_name: String,
    pub crd: CustomResourceDefinition,
}

/// Every CRD of a flavour, in a stable order. The AWS flavour also carries the EC2NodeClass.
pub fn all(policy: LabelPolicy) -> Result<Vec<GeneratedCrd>, CrdError> {
    let mut out = vec![
        named(nodepool(policy)?),
        named(nodeclaim(policy)?),
        named(nodeoverlay(policy)?),
        named(capacitybuffer()?),
    ];
    if policy == LabelPolicy::Aws {
        out.push(named(ec2nodeclass()?));
    }
    Ok(out)
}

/// The KWOKNodeClass CRD of the KWOK provider, which its users install beside the provider-neutral CRDs.
pub fn kwok() -> Result<GeneratedCrd, CrdError> {
    Ok(named(edit(crate::kwoknodeclass::crd(), |_, _| Ok(()))?))
}

fn named(crd: CustomResourceDefinition) -> GeneratedCrd {
    let file_name = format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
    GeneratedCrd { file_name, crd }
}

/// The NodePool CRD.
pub fn nodepool(policy: LabelPolicy) -> Result<CustomResourceDefinition, CrdError> {
    edit(NodePool::crd(), |root, crd| {
        let template = path(root, crd, &["spec", "template"])?;
        let labels = path(template, crd, &["metadata", "labels"])?;
        inject_label_map_rules(labels, policy);
        let spec = path(template, crd, &["spec"])?;
        inject_requirements(
            path(spec, crd, &["requirements"])?,
            policy,
            KeyUse::NodePoolRequirement,
        );
        inject_taints(spec, crd)?;
        Ok(())
    })
}

/// The NodeClaim CRD.
pub fn nodeclaim(policy: LabelPolicy) -> Result<CustomResourceDefinition, CrdError> {
    edit(NodeClaim::crd(), |root, crd| {
        let spec = path(root, crd, &["spec"])?;
        inject_requirements(
            path(spec, crd, &["requirements"])?,
            policy,
            KeyUse::NodeClaimRequirement,
        );
        inject_taints(spec, crd)?;
        Ok(())
    })
}

/// The NodeOverlay CRD.
pub fn nodeoverlay(policy: LabelPolicy) -> Result<CustomResourceDefinition, CrdError> {
    edit(crate::nodeoverlay::crd(), |root, crd| {
        inject_requirements(
            path(root, crd, &["spec", "requirements"])?,
            policy,
            KeyUse::NodeOverlayRequirement,
        );
        Ok(())
    })
}

/// The CapacityBuffer CRD (the same in both flavours).
pub fn capacitybuffer() -> Result<CustomResourceDefinition, CrdError> {
    edit(crate::capacitybuffer::crd(), |_, _| Ok(()))
}

/// The EC2NodeClass CRD (AWS only).
pub fn ec2nodeclass() -> Result<CustomResourceDefinition, CrdError> {
    edit(crate::ec2nodeclass::crd(), |_, _| Ok(()))
}

fn edit(
    crd: CustomResourceDefinition,
    f: impl FnOnce(&mut Value, &str) -> Result<(), CrdError>,
) -> Result<CustomResourceDefinition, CrdError> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let json_err = |source| CrdError::Json {
        crd: name.clone(),
        source,
    };
    let mut value = serde_json::to_value(&crd).map_err(json_err)?;
    let root = value
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema")
        .ok_or_else(|| CrdError::MissingPath {
            crd: name.clone(),
            path: "openAPIV3Schema".into(),
        })?;
    f(root, &name)?;
    normalize_quantities(root);
    serde_json::from_value(value).map_err(json_err)
}

/// The pattern of a resource quantity, as the API server checks it.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// Gives every quantity in the schema the shape controller-gen gives it: integer or string, with the quantity
/// pattern, and without k8s-openapi's page-long description. Also drops the `nullable` the derive puts on
/// optional fields: upstream's CRDs have none, so a null is rejected rather than stored.
fn normalize_quantities(node: &mut Value) {
    match node {
        Value::Object(map) => {
            map.remove("nullable");
            let is_quantity = map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
                && map
                    .get("description")
                    .and_then(Value::as_str)
                    .is_some_and(|d| d.starts_with("Quantity is"));
            if is_quantity {
                map.remove("description");
                map.insert("anyOf".into(), json!([{"type": "integer"}, {"type": "string"}]));
                map.insert("pattern".into(), json!(QUANTITY_PATTERN));
            }
            for child in map.values_mut() {
                normalize_quantities(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize_quantities),
        _ => {}
    }
}

/// Walks `properties` (and list `items`) from `node`.
fn path<'a>(node: &'a mut Value, crd: &str, fields: &[&str]) -> Result<&'a mut Value, CrdError> {
    let mut cur = node;
    let mut walked = Vec::new();
    for field in fields {
        walked.push(*field);
        if cur.get("items").is_some() && cur.get("properties").is_none() {
            cur = &mut cur["items"];
        }
        cur = cur
            .get_mut("properties")
            .and_then(|p| p.get_mut(*field))
            .ok_or_else(|| CrdError::MissingPath {
                crd: crd.to_string(),
                path: walked.join("."),
            })?;
    }
    Ok(cur)
}

fn push_rules(node: &mut Value, rules: impl IntoIterator<Item = (String, String)>) {
    let list = node
        .as_object_mut()
        .map(|o| o.entry("x-kubernetes-validations").or_insert_with(|| json!([])));
    if let Some(Value::Array(list)) = list {
        for (rule, message) in rules {
            list.push(json!({"rule": rule, "message": message}));
        }
    }
}

fn inject_label_map_rules(labels: &mut Value, policy: LabelPolicy) {
    labels["additionalProperties"] =
        json!({"type": "string", "maxLength": 63, "pattern": LABEL_VALUE_PATTERN});
    let rules = key_rules(policy, KeyUse::NodePoolLabel)
        .into_iter()
        .map(|r| (for_all_keys(&r.cel), r.message));
    push_rules(labels, rules);
}

fn inject_requirements(list: &mut Value, policy: LabelPolicy, use_: KeyUse) {
    let items = &mut list["items"];
    let key = &mut items["properties"]["key"];
    key["maxLength"] = json!(316);
    key["pattern"] = json!(KEY_PATTERN);
    push_rules(
        key,
        key_rules(policy, use_).into_iter().map(|r| (r.cel, r.message)),
    );
    // Upstream's CRDs put the label-value maxLength and pattern on the `values` array itself, where the API server
    // ignores them (they apply to strings only), so the CRD accepts any value string, `/` included; the controller
    // rejects a value that is not a label value at runtime (`validate()` does too). We leave the no-op keywords out.
    items["properties"]["values"]["items"] = json!({"type": "string"});
    let mut rules = vec![
        (
            "self.all(x, x.operator == 'In' ? (has(x.values) && x.values.size() != 0) : true)".to_string(),
            "requirements with operator 'In' must have a value defined".to_string(),
        ),
        (
            "self.all(x, x.operator in ['Gt', 'Lt', 'Gte', 'Lte'] ? (has(x.values) && x.values.size() == 1 && int(x.values[0]) >= 0) : true)"
                .to_string(),
            "requirements with operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single non-negative integer value".to_string(),
        ),
    ];
    if items["properties"].get("minValues").is_some() {
        rules.push((
            "self.all(x, (x.operator == 'In' && has(x.minValues)) ? (has(x.values) && x.values.size() >= x.minValues) : true)"
                .to_string(),
            "requirements with 'minValues' must have at least that many values specified in the 'values' field".to_string(),
        ));
    }
    push_rules(list, rules);
}

fn inject_taints(spec: &mut Value, crd: &str) -> Result<(), CrdError> {
    for field in ["taints", "startupTaints"] {
        let taint = &mut path(spec, crd, &[field])?["items"]["properties"];
        taint["key"]["pattern"] = json!(KEY_PATTERN);
        // A taint value is a qualified name, as upstream's taint rules have it: `example.com/gpu` is accepted.
        taint["value"]["pattern"] = json!(TAINT_VALUE_PATTERN);
    }
    Ok(())
}

/// Writes a CRD as the YAML `kubectl apply` takes.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::ser::Error> {
    let value = serde_json::to_value(crd).unwrap_or(Value::Null);
    serde_saphyr::to_string(&value)
}
