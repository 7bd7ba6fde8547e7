//! The patch types the server accepts (api-concepts "Patch operations" / kubectl's "Update API objects in
//! place"): JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch for built-in kinds, and a
//! pragmatic server-side apply.
//!
//! Strategic merge patch merges the lists the Kubernetes types tag with a patch merge key (containers, env,
//! ports, volumes, volumeMounts, conditions, ownerReferences, ...) element by element, unions `finalizers`, and
//! replaces every other list, as upstream does (tolerations and taints carry no merge key upstream, so they are
//! replaced too). Directives: `$patch: delete|replace|merge`, `$retainKeys`, `$deleteFromPrimitiveList/<f>`;
//! `$setElementOrder/<f>` is accepted and ignored (element order is kept as merged).
//!
//! Server-side apply is create-if-absent, otherwise the same keyed merge (without directives); field ownership
//! (managedFields) and apply conflicts are not modelled.

use serde_json::{Map, Value};

use crate::error::ApiStatus;

/// Which patch a PATCH request carries, from its Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchKind {
    pub fn from_content_type(content_type: &str) -> Option<Self> {
        let base = content_type.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Some(Self::Merge),
            "application/json-patch+json" => Some(Self::Json),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// Applies `patch` (the raw body) to `target` in place.
pub fn apply_patch(kind: PatchKind, target: &mut Value, body: &[u8]) -> Result<(), ApiStatus> {
    match kind {
        PatchKind::Merge => {
            let patch: Value = parse_json(body)?;
            json_patch::merge(target, &patch);
        }
        PatchKind::Json => {
            let patch: json_patch::Patch = serde_json::from_slice(body).map_err(|e| {
                ApiStatus::bad_request(format!(
                    "the server rejected our request due to an error in our request: {e}"
                ))
            })?;
            for op in &patch.0 {
                if missing_null_test(target, op) {
                    continue;
                }
                json_patch::patch(target, std::slice::from_ref(op)).map_err(|e| {
                    ApiStatus::unprocessable(format!(
                        "the server rejected our request due to an error in our request: {e}"
                    ))
                })?;
            }
        }
        PatchKind::Strategic => {
            let patch: Value = parse_json(body)?;
            strategic_merge(target, &patch, "");
        }
        PatchKind::Apply => {
            let patch = parse_apply(body)?;
            strategic_merge(target, &patch, "");
        }
    }
    Ok(())
}

/// The API server's JSON patch library lets `test` with a null value pass on an absent key (whose parent
/// exists); kube-runtime's finalizer helper relies on it (`test /metadata/finalizers null` before adding the
/// first finalizer). The json-patch crate fails such a test, so it is skipped here. The caller patches a copy,
/// so applying the operations one at a time keeps the patch atomic.
fn missing_null_test(target: &Value, op: &json_patch::PatchOperation) -> bool {
    let json_patch::PatchOperation::Test(test) = op else {
        return false;
    };
    let path = test.path.as_str();
    let parent = &path[..path.rfind('/').unwrap_or(0)];
    test.value.is_null() && target.pointer(path).is_none() && target.pointer(parent).is_some()
}

fn parse_json(body: &[u8]) -> Result<Value, ApiStatus> {
    serde_json::from_slice(body).map_err(|e| ApiStatus::bad_request(format!("error decoding patch: {e}")))
}

/// An apply body is YAML (JSON is YAML too).
pub fn parse_apply(body: &[u8]) -> Result<Value, ApiStatus> {
    if let Ok(value) = serde_json::from_slice(body) {
        return Ok(value);
    }
    let text = std::str::from_utf8(body).map_err(|e| ApiStatus::bad_request(format!("apply body: {e}")))?;
    serde_saphyr::from_str(text).map_err(|e| ApiStatus::bad_request(format!("error decoding YAML: {e}")))
}

enum ListStrategy {
    Key(&'static str),
    Union,
    Replace,
}

/// The patch strategy upstream's Go types declare for a list field; `parent` is the field holding the object.
fn list_strategy(field: &str, parent: &str) -> ListStrategy {
    let in_container = matches!(parent, "containers" | "initContainers" | "ephemeralContainers");
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims" => ListStrategy::Key("name"),
        "ports" if in_container => ListStrategy::Key("containerPort"),
        "ports" => ListStrategy::Key("port"),
        "volumeMounts" => ListStrategy::Key("mountPath"),
        "volumeDevices" => ListStrategy::Key("devicePath"),
        "conditions" | "addresses" => ListStrategy::Key("type"),
        "ownerReferences" => ListStrategy::Key("uid"),
        "topologySpreadConstraints" => ListStrategy::Key("topologyKey"),
        "hostAliases" => ListStrategy::Key("ip"),
        "finalizers" => ListStrategy::Union,
        _ => ListStrategy::Replace,
    }
}

fn directive(value: &Value) -> Option<&str> {
    value.get("$patch").and_then(Value::as_str)
}

/// Removes directive keys from a value that is inserted as is.
fn strip_directives(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

/// Strategic merge of `patch` into `target`; `parent` names the field that holds `target`.
pub fn strategic_merge(target: &mut Value, patch: &Value, parent: &str) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if directive(patch) == Some("replace") {
        *target = strip_directives(patch);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target_map) = target else { return };
    for (key, value) in patch_map {
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Some(remove)) = (target_map.get_mut(field), value.as_array()) {
                items.retain(|item| !remove.contains(item));
            }
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        match value {
            Value::Null => {
                target_map.remove(key);
            }
            Value::Object(_) => {
                if directive(value) == Some("delete") {
                    target_map.remove(key);
                } else {
                    strategic_merge(target_map.entry(key.clone()).or_insert(Value::Null), value, key);
                }
            }
            Value::Array(items) => {
                let current = target_map.entry(key.clone()).or_insert(Value::Null);
                merge_list(current, items, key, parent);
            }
            scalar => {
                target_map.insert(key.clone(), scalar.clone());
            }
        }
    }
    if let Some(retain) = patch_map.get("$retainKeys").and_then(Value::as_array) {
        target_map.retain(|k, _| retain.iter().any(|r| r.as_str() == Some(k)));
    }
}

fn merge_list(current: &mut Value, items: &[Value], field: &str, parent: &str) {
    match list_strategy(field, parent) {
        ListStrategy::Replace => *current = strip_directives(&Value::Array(items.to_vec())),
        ListStrategy::Union => {
            let mut merged = current.as_array().cloned().unwrap_or_default();
            for item in items {
                if !merged.contains(item) {
                    merged.push(item.clone());
                }
            }
            *current = Value::Array(merged);
        }
        ListStrategy::Key(key) => {
            if items.iter().any(|i| directive(i) == Some("replace")) {
                let kept = items
                    .iter()
                    .filter(|i| directive(i) != Some("replace"))
                    .map(strip_directives);
                *current = Value::Array(kept.collect());
                return;
            }
            let mut merged = current.as_array().cloned().unwrap_or_default();
            for item in items {
                let id = item.get(key);
                let position = id.and_then(|id| merged.iter().position(|m| m.get(key) == Some(id)));
                match (directive(item), position) {
                    (Some("delete"), Some(pos)) => {
                        merged.remove(pos);
                    }
                    (Some("delete"), None) => {}
                    (_, Some(pos)) => strategic_merge(&mut merged[pos], item, field),
                    (_, None) => merged.push(strip_directives(item)),
                }
            }
            *current = Value::Array(merged);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smp(mut target: Value, patch: Value) -> Value {
        strategic_merge(&mut target, &patch, "");
        target
    }

    #[test]
    fn containers_env_and_ports_merge_by_key() {
        let pod = json!({"spec": {"containers": [
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}], "ports": [{"containerPort": 80}]},
            {"name": "b", "image": "b:1"}]}});
        let patched = smp(
            pod,
            json!({"spec": {"containers": [
            {"name": "a", "env": [{"name": "Y", "value": "2"}], "ports": [{"containerPort": 80, "name": "http"}]}]}}),
        );
        assert_eq!(
            patched,
            json!({"spec": {"containers": [
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}],
             "ports": [{"containerPort": 80, "name": "http"}]},
            {"name": "b", "image": "b:1"}]}})
        );
    }

    #[test]
    fn delete_directive_and_null_remove() {
        let obj = json!({"metadata": {"labels": {"a": "1", "b": "2"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "False"}]}});
        let patched = smp(
            obj,
            json!({"metadata": {"labels": {"a": null}},
            "status": {"conditions": [{"type": "X", "$patch": "delete"}, {"type": "Ready", "status": "False"}]}}),
        );
        assert_eq!(
            patched,
            json!({"metadata": {"labels": {"b": "2"}},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}})
        );
    }

    #[test]
    fn tolerations_are_replaced_finalizers_unioned_and_order_hints_ignored() {
        let obj = json!({"metadata": {"finalizers": ["a"]}, "spec": {"tolerations": [{"key": "x"}]}});
        let patched = smp(
            obj,
            json!({"metadata": {"finalizers": ["b"]},
            "spec": {"$setElementOrder/tolerations": [{"key": "y"}], "tolerations": [{"key": "y"}]}}),
        );
        assert_eq!(
            patched,
            json!({"metadata": {"finalizers": ["a", "b"]}, "spec": {"tolerations": [{"key": "y"}]}})
        );
    }

    #[test]
    fn retain_keys_and_replace_directive() {
        let obj = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        let patched = smp(
            obj,
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
        );
        assert_eq!(patched, json!({"spec": {"strategy": {"type": "Recreate"}}}));
        let patched = smp(patched, json!({"spec": {"$patch": "replace", "paused": true}}));
        assert_eq!(patched, json!({"spec": {"paused": true}}));
    }

    #[test]
    fn json_patch_null_test_on_absent_key_passes_like_upstream() -> Result<(), ApiStatus> {
        let mut obj = json!({"metadata": {"name": "a"}});
        let body = br#"[{"op":"test","path":"/metadata/finalizers","value":null},{"op":"add","path":"/metadata/finalizers","value":["f"]}]"#;
        apply_patch(PatchKind::Json, &mut obj, body)?;
        assert_eq!(obj["metadata"]["finalizers"], json!(["f"]));
        Ok(())
    }

    #[test]
    fn json_patch_test_failure_is_422() {
        let mut obj = json!({"metadata": {"finalizers": ["a"]}});
        let body = br#"[{"op":"test","path":"/metadata/finalizers","value":["b"]},{"op":"remove","path":"/metadata/finalizers/0"}]"#;
        assert!(matches!(apply_patch(PatchKind::Json, &mut obj, body), Err(s) if s.code == 422));
    }
}
