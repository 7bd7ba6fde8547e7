//! Create, update and patch: the write semantics of api-conventions "Metadata", "Spec and Status" and
//! "Concurrency Control and Consistency".
//!
//! - The server assigns uid, creationTimestamp, resourceVersion and `generation` (1 on create, +1 when anything
//!   outside metadata and status changes).
//! - A write whose resourceVersion is not the current one fails with 409 Conflict. PUT without resourceVersion
//!   is an unconditional update for built-in kinds and 422 for custom resources, as upstream.
//! - For kinds with a status subresource, writes to the main resource keep the stored status and writes to
//!   `/status` change only status. Create drops status too, except for Nodes (upstream lets node status be set
//!   on create) and Pods (which start as `{"phase": "Pending"}`).
//! - A write that changes nothing is a no-op: no new resourceVersion, no watch event.
//! - Finalizers cannot be added to an object that is being deleted; removing the last finalizer of such an
//!   object removes it (see `delete.rs`).

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{
    patch::{self, PatchKind},
    resources::ResourceInfo,
    store::{Obj, ObjectKey, State, Stored},
};
use crate::error::ApiStatus;

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Main,
    Status,
}

/// Options shared by the writes.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: validate and answer, store nothing.
    pub dry_run: bool,
}

pub fn not_found(info: &ResourceInfo, name: &str) -> ApiStatus {
    ApiStatus::not_found(&info.group, &info.plural, name)
}

/// `metadata` as a map, created if absent (the caller has checked that `object` is an object).
fn metadata_mut(object: &mut Value) -> Option<&mut Map<String, Value>> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object.as_object_mut()?.insert("metadata".into(), json!({}));
    }
    object.get_mut("metadata").and_then(Value::as_object_mut)
}

/// Everything except metadata and status: what a change of bumps `generation`.
fn spec_part(object: &Value) -> Value {
    match object {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The namespace from the URL must exist and not be terminating (the NamespaceLifecycle admission rule).
fn check_namespace(state: &State, namespace: &str) -> Result<(), ApiStatus> {
    let namespaces = super::resources::ResourceId::core("namespaces");
    match state.get(&namespaces, &ObjectKey::new("", namespace)) {
        None => Err(ApiStatus::not_found("", "namespaces", namespace)),
        Some(ns) if ns.deleting() => Err(ApiStatus::forbidden(format!(
            "unable to create new content in namespace {namespace} because it is being terminated"
        ))),
        Some(_) => Ok(()),
    }
}

fn set_type_meta(info: &ResourceInfo, object: &mut Value) {
    if !object["apiVersion"].is_string() {
        object["apiVersion"] = json!(info.api_version());
    }
    object["kind"] = json!(info.kind);
}

/// Status a new object starts with.
fn status_on_create(info: &ResourceInfo, object: &mut Value) {
    if !info.status_subresource {
        return;
    }
    let Value::Object(map) = object else { return };
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "nodes") => {}
        ("", "pods") => {
            map.insert("status".into(), json!({"phase": "Pending"}));
        }
        ("", "namespaces") => {
            map.insert("status".into(), json!({"phase": "Active"}));
        }
        _ => {
            map.remove("status");
        }
    }
}

/// Validates and stores a new object (POST). `namespace` comes from the URL ("" for cluster-scoped).
pub fn create(
    state: &mut State,
    info: &Arc<ResourceInfo>,
    namespace: &str,
    mut object: Value,
    opts: WriteOptions,
) -> Result<Obj, ApiStatus> {
    if !object.is_object() {
        return Err(ApiStatus::bad_request("the request body must be a JSON object"));
    }
    set_type_meta(info, &mut object);
    let body_ns = object["metadata"]["namespace"].as_str().unwrap_or("").to_string();
    if info.namespaced {
        if !body_ns.is_empty() && body_ns != namespace {
            return Err(ApiStatus::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        check_namespace(state, namespace)?;
    }
    let mut name = object["metadata"]["name"].as_str().unwrap_or("").to_string();
    if name.is_empty() {
        match object["metadata"]["generateName"].as_str() {
            Some(prefix) if !prefix.is_empty() => name = format!("{prefix}{}", state.rng.name_suffix()),
            _ => {
                return Err(ApiStatus::invalid(
                    &info.group,
                    &info.kind,
                    "",
                    "metadata.name",
                    "Required value: name or generateName is required",
                ));
            }
        }
    }
    let key = ObjectKey::new(if info.namespaced { namespace } else { "" }, &name);
    if state.contains(&info.id(), &key) {
        return Err(ApiStatus::already_exists(&info.group, &info.plural, &name));
    }
    let now = state.now();
    let uid = state.rng.uuid();
    let meta =
        metadata_mut(&mut object).ok_or_else(|| ApiStatus::bad_request("metadata must be an object"))?;
    meta.insert("name".into(), json!(name));
    if info.namespaced {
        meta.insert("namespace".into(), json!(namespace));
    } else {
        meta.remove("namespace");
    }
    meta.insert("uid".into(), json!(uid));
    meta.insert("creationTimestamp".into(), json!(now));
    meta.insert("generation".into(), json!(1));
    for server_owned in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        meta.remove(server_owned);
    }
    status_on_create(info, &mut object);
    super::kinds::on_create(state, info, &mut object)?;
    if opts.dry_run {
        return Ok(Arc::new(Stored::new(&object, &info.selectable_fields)));
    }
    let stored = state.commit(&info.id(), object);
    super::kinds::after_write(state, info, &stored);
    Ok(stored)
}

/// Builds the object a write to `part` produces from the stored `old` and the client's `new`, applying the
/// server-owned fields; `None` means "nothing changed".
fn merge_write(
    info: &ResourceInfo,
    old: &Value,
    mut new: Value,
    part: Part,
) -> Result<Option<Value>, ApiStatus> {
    if !new.is_object() {
        return Err(ApiStatus::bad_request("the request body must be a JSON object"));
    }
    let name = old["metadata"]["name"].as_str().unwrap_or("");
    if part == Part::Status {
        // Only status changes; metadata and spec come from the stored object.
        let status = new.get("status").cloned();
        new = old.clone();
        match status {
            Some(status) => new["status"] = status,
            None => {
                if let Value::Object(map) = &mut new {
                    map.remove("status");
                }
            }
        }
    } else if info.status_subresource {
        match old.get("status") {
            Some(status) => new["status"] = status.clone(),
            None => {
                if let Value::Object(map) = &mut new {
                    map.remove("status");
                }
            }
        }
    }
    set_type_meta(info, &mut new);
    let old_meta = &old["metadata"];
    let deleting = old_meta["deletionTimestamp"].is_string();
    if deleting {
        let before = strings(&old_meta["finalizers"]);
        if strings(&new["metadata"]["finalizers"])
            .iter()
            .any(|f| !before.contains(f))
        {
            return Err(ApiStatus::invalid(
                &info.group,
                &info.kind,
                name,
                "metadata.finalizers",
                "Forbidden: no new finalizers can be added if the object is being deleted",
            ));
        }
    }
    let bump = part == Part::Main && spec_part(old) != spec_part(&new);
    let meta = metadata_mut(&mut new).ok_or_else(|| ApiStatus::bad_request("metadata must be an object"))?;
    for server_owned in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match old_meta.get(server_owned) {
            Some(value) => meta.insert(server_owned.into(), value.clone()),
            None => meta.remove(server_owned),
        };
    }
    meta.insert("resourceVersion".into(), old_meta["resourceVersion"].clone());
    if bump {
        let generation = old_meta["generation"].as_i64().unwrap_or(0) + 1;
        meta.insert("generation".into(), json!(generation));
    }
    if meta
        .get("finalizers")
        .is_some_and(|f| f.as_array().is_some_and(Vec::is_empty))
    {
        meta.remove("finalizers");
    }
    Ok((new != *old).then_some(new))
}

/// Whether something still holds a deleted object: finalizers, a pod's unexpired grace period (the kubelet
/// finishes it), or a namespace's spec.finalizers (the namespace controller does).
pub fn held(info: &ResourceInfo, object: &Value) -> bool {
    let meta = &object["metadata"];
    meta["finalizers"].as_array().is_some_and(|f| !f.is_empty())
        || meta["deletionGracePeriodSeconds"].as_i64().is_some_and(|g| g > 0)
        || info.group.is_empty()
            && info.plural == "namespaces"
            && object["spec"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty())
}

/// Stores an updated object, or removes it when it is being deleted and has no finalizers left.
pub fn store_update(state: &mut State, info: &Arc<ResourceInfo>, object: Value, opts: WriteOptions) -> Obj {
    if opts.dry_run {
        return Arc::new(Stored::new(&object, &info.selectable_fields));
    }
    if object["metadata"]["deletionTimestamp"].is_string() && !held(info, &object) {
        let key = ObjectKey::of(&object);
        return super::delete::remove_now(state, info, &key)
            .unwrap_or_else(|| Arc::new(Stored::new(&object, &info.selectable_fields)));
    }
    let stored = state.commit(&info.id(), object);
    super::kinds::after_write(state, info, &stored);
    stored
}

fn check_version(info: &ResourceInfo, old: &Value, new: &Value) -> Result<(), ApiStatus> {
    let name = old["metadata"]["name"].as_str().unwrap_or("");
    match new["metadata"]["resourceVersion"].as_str() {
        Some(rv) if !rv.is_empty() && Some(rv) != old["metadata"]["resourceVersion"].as_str() => {
            Err(ApiStatus::stale(&info.group, &info.plural, name))
        }
        Some(rv) if !rv.is_empty() => Ok(()),
        _ if info.builtin => Ok(()),
        _ => Err(ApiStatus::invalid(
            &info.group,
            &info.kind,
            name,
            "metadata.resourceVersion",
            "Invalid value: 0x0: must be specified for an update",
        )),
    }
}

/// PUT: replaces the object (or its status).
pub fn update(
    state: &mut State,
    info: &Arc<ResourceInfo>,
    key: &ObjectKey,
    new: Value,
    part: Part,
    opts: WriteOptions,
) -> Result<Obj, ApiStatus> {
    let stored = state
        .get(&info.id(), key)
        .ok_or_else(|| not_found(info, &key.name))?;
    let old = stored.value();
    let body_name = new["metadata"]["name"].as_str().unwrap_or("");
    if body_name != key.name {
        return Err(ApiStatus::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({})",
            key.name
        )));
    }
    check_version(info, &old, &new)?;
    match merge_write(info, &old, new, part)? {
        None => Ok(stored),
        Some(object) => {
            super::kinds::on_update(state, info, &old, &object)?;
            Ok(store_update(state, info, object, opts))
        }
    }
}

/// PATCH (all patch types) of the object or its status; server-side apply creates an absent object.
/// Returns the object and whether it was created.
#[allow(clippy::too_many_arguments)]
pub fn patch(
    state: &mut State,
    info: &Arc<ResourceInfo>,
    key: &ObjectKey,
    kind: PatchKind,
    body: &[u8],
    part: Part,
    opts: WriteOptions,
) -> Result<(Obj, bool), ApiStatus> {
    if kind == PatchKind::Strategic && !info.builtin {
        return Err(ApiStatus::unsupported_media_type(
            "the body of the request was in an unknown format - accepted media types include: \
             application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ));
    }
    let Some(stored) = state.get(&info.id(), key) else {
        if kind == PatchKind::Apply && part == Part::Main {
            let mut object = patch::parse_apply(body)?;
            if !object.is_object() {
                return Err(ApiStatus::bad_request("the apply body must be an object"));
            }
            metadata_mut(&mut object)
                .ok_or_else(|| ApiStatus::bad_request("metadata must be an object"))?
                .insert("name".into(), json!(key.name));
            let created = create(state, info, &key.namespace, object, opts)?;
            return Ok((created, true));
        }
        return Err(not_found(info, &key.name));
    };
    let old = stored.value();
    let mut working = old.clone();
    patch::apply_patch(kind, &mut working, body)?;
    check_version(info, &old, &working)?;
    if working["metadata"]["name"].as_str() != Some(key.name.as_str()) {
        return Err(ApiStatus::bad_request(
            "metadata.name cannot be changed by a patch",
        ));
    }
    match merge_write(info, &old, working, part)? {
        None => Ok((stored, false)),
        Some(object) => {
            super::kinds::on_update(state, info, &old, &object)?;
            Ok((store_update(state, info, object, opts), false))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{apiserver::resources::ResourceId, clock::SystemClock};

    fn state() -> State {
        let mut state = State::new(Arc::new(SystemClock), 100, 1);
        let namespaces = ResourceId::core("namespaces");
        state.commit(&namespaces, json!({"metadata": {"name": "default"}}));
        state
    }

    fn info(state: &State, group: &str, plural: &str) -> Result<Arc<ResourceInfo>, ApiStatus> {
        state
            .registry
            .by_id(&ResourceId::new(group, plural))
            .ok_or_else(|| ApiStatus::bad_request("no resource"))
    }

    // api-conventions "Metadata": generation starts at 1 and moves only with the spec.
    #[test]
    fn generation_bumps_on_spec_changes_only() -> Result<(), ApiStatus> {
        let mut state = state();
        let deployments = info(&state, "apps", "deployments")?;
        let key = ObjectKey::new("default", "web");
        let created = create(
            &mut state,
            &deployments,
            "default",
            json!({"metadata": {"name": "web"}, "spec": {"replicas": 1}, "status": {"replicas": 9}}),
            WriteOptions::default(),
        )?
        .value();
        assert_eq!(created["metadata"]["generation"], 1);
        assert!(
            created.get("status").is_none(),
            "create drops status of a kind with a status subresource"
        );
        let (labelled, _) = patch(
            &mut state,
            &deployments,
            &key,
            PatchKind::Merge,
            br#"{"metadata":{"labels":{"a":"b"}}}"#,
            Part::Main,
            WriteOptions::default(),
        )?;
        assert_eq!(labelled.value()["metadata"]["generation"], 1);
        let (status, _) = patch(
            &mut state,
            &deployments,
            &key,
            PatchKind::Merge,
            br#"{"status":{"replicas":1}}"#,
            Part::Status,
            WriteOptions::default(),
        )?;
        let status = status.value();
        assert_eq!(
            (
                status["metadata"]["generation"].clone(),
                status["status"]["replicas"].clone()
            ),
            (json!(1), json!(1))
        );
        let (scaled, _) = patch(
            &mut state,
            &deployments,
            &key,
            PatchKind::Merge,
            br#"{"spec":{"replicas":3},"status":{"replicas":7}}"#,
            Part::Main,
            WriteOptions::default(),
        )?;
        let scaled = scaled.value();
        assert_eq!(scaled["metadata"]["generation"], 2);
        assert_eq!(
            scaled["status"]["replicas"], 1,
            "main resource writes ignore status"
        );
        Ok(())
    }

    // api-conventions "Concurrency Control and Consistency".
    #[test]
    fn stale_resource_version_conflicts() -> Result<(), ApiStatus> {
        let mut state = state();
        let cms = info(&state, "", "configmaps")?;
        let key = ObjectKey::new("default", "c");
        let v1 = create(
            &mut state,
            &cms,
            "default",
            json!({"metadata": {"name": "c"}, "data": {"a": "1"}}),
            WriteOptions::default(),
        )?;
        let mut edit = v1.value();
        edit["data"]["a"] = json!("2");
        update(
            &mut state,
            &cms,
            &key,
            edit.clone(),
            Part::Main,
            WriteOptions::default(),
        )?;
        edit["data"]["a"] = json!("3");
        let conflict = update(&mut state, &cms, &key, edit, Part::Main, WriteOptions::default());
        assert!(matches!(conflict, Err(s) if s.code == 409 && s.reason == "Conflict"));
        Ok(())
    }

    #[test]
    fn no_op_update_keeps_resource_version() -> Result<(), ApiStatus> {
        let mut state = state();
        let cms = info(&state, "", "configmaps")?;
        let key = ObjectKey::new("default", "c");
        let v1 = create(
            &mut state,
            &cms,
            "default",
            json!({"metadata": {"name": "c"}}),
            WriteOptions::default(),
        )?;
        let v2 = update(
            &mut state,
            &cms,
            &key,
            v1.value(),
            Part::Main,
            WriteOptions::default(),
        )?;
        assert_eq!(v1.rv(), v2.rv());
        Ok(())
    }

    #[test]
    fn generate_name_and_missing_namespace() -> Result<(), ApiStatus> {
        let mut state = state();
        let pods = info(&state, "", "pods")?;
        let pod = create(
            &mut state,
            &pods,
            "default",
            json!({"metadata": {"generateName": "web-"}}),
            WriteOptions::default(),
        )?;
        let pod = pod.value();
        let name = pod["metadata"]["name"].as_str().unwrap_or("");
        assert!(name.starts_with("web-") && name.len() == 9, "{name}");
        assert_eq!(pod["status"]["phase"], "Pending");
        let missing = create(
            &mut state,
            &pods,
            "nope",
            json!({"metadata": {"name": "p"}}),
            WriteOptions::default(),
        );
        assert!(matches!(missing, Err(s) if s.code == 404));
        Ok(())
    }
}
