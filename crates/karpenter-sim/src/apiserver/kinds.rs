//! What particular kinds do on top of the generic write path: Namespaces start Active with the "kubernetes"
//! finalizer in spec, and a CustomResourceDefinition written through the API is served at once (its status
//! says Established) and stops being served when it is deleted.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{
    resources,
    resources::ResourceInfo,
    store::{State, Stored},
};
use crate::error::ApiStatus;

fn is(info: &ResourceInfo, group: &str, plural: &str) -> bool {
    info.group == group && info.plural == plural
}

fn crd_status(crd: &Value) -> Value {
    let versions: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter(|v| v["storage"].as_bool() == Some(true))
                .map(|v| v["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    json!({
        "acceptedNames": crd["spec"]["names"],
        "storedVersions": versions,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted"},
        ],
    })
}

/// Fills server-owned fields of a new object of a special kind and validates it.
pub fn on_create(_state: &mut State, info: &ResourceInfo, object: &mut Value) -> Result<(), ApiStatus> {
    if is(info, "", "namespaces") {
        object["spec"]["finalizers"] = json!(["kubernetes"]);
    }
    if is(info, "apiextensions.k8s.io", "customresourcedefinitions") {
        resources::from_crd(object).map_err(|reason| {
            let name = object["metadata"]["name"].as_str().unwrap_or("");
            ApiStatus::invalid(&info.group, &info.kind, name, "spec", &reason)
        })?;
        object["status"] = crd_status(object);
    }
    Ok(())
}

/// Validates an update of a special kind.
pub fn on_update(
    _state: &mut State,
    info: &ResourceInfo,
    _old: &Value,
    new: &Value,
) -> Result<(), ApiStatus> {
    if is(info, "apiextensions.k8s.io", "customresourcedefinitions")
        && !new["metadata"]["deletionTimestamp"].is_string()
    {
        resources::from_crd(new).map_err(|reason| {
            let name = new["metadata"]["name"].as_str().unwrap_or("");
            ApiStatus::invalid(&info.group, &info.kind, name, "spec", &reason)
        })?;
    }
    Ok(())
}

/// Reacts to a stored write: a CRD (re)defines what is served.
pub fn after_write(state: &mut State, info: &Arc<ResourceInfo>, object: &Stored) {
    if is(info, "apiextensions.k8s.io", "customresourcedefinitions")
        && !object.deleting()
        && let Ok(served) = resources::from_crd(&object.value())
    {
        state.serve(served);
    }
}

/// Reacts to an object's removal: a deleted CRD is no longer served.
pub fn after_remove(state: &mut State, info: &ResourceInfo, object: &Stored) {
    if is(info, "apiextensions.k8s.io", "customresourcedefinitions")
        && let Ok(served) = resources::from_crd(&object.value())
    {
        state.unserve(&served.id());
    }
}
