//! Deletion, finalizers and garbage collection (concepts "Finalizers", "Garbage Collection", "Owners and
//! Dependents"; api-conventions "Finalizers").
//!
//! - An object with finalizers, or a pod bound to a node and deleted with a non-zero grace period, is not removed:
//!   it gets `deletionTimestamp` (now + grace period for pods, now otherwise) and `deletionGracePeriodSeconds`,
//!   `generation` moves, and it goes away when the last finalizer is removed (pods: when the kubelet deletes it
//!   again with grace period 0). Pods without `spec.nodeName`, and pods that already Succeeded or Failed, are
//!   removed at once, as the real pod strategy does.
//! - Garbage collection is done synchronously inside the request that removes an owner, so tests see the end
//!   state without waiting. Background (the default): once the owner is gone, each dependent without another
//!   living owner is deleted, a dependent that has one loses the dangling reference. Foreground: the owner gets
//!   the `foregroundDeletion` finalizer, its dependents are deleted (foreground too), and the owner goes when no
//!   dependent with `blockOwnerDeletion: true` remains. Orphan: dependents lose their reference to the owner first.
//! - Deleting a Namespace marks it Terminating, deletes everything in it, and removes it once it is empty.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{
    objects::{WriteOptions, not_found, store_update},
    resources::{ResourceId, ResourceInfo},
    store::{Obj, ObjectKey, State, Stored},
};
use crate::error::ApiStatus;

/// DeleteOptions.propagationPolicy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

impl Propagation {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Background" => Some(Self::Background),
            "Foreground" => Some(Self::Foreground),
            "Orphan" => Some(Self::Orphan),
            _ => None,
        }
    }
}

/// The parts of metav1.DeleteOptions the server honours.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub grace_period: Option<i64>,
    pub propagation: Option<Propagation>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
}

/// What a delete did.
#[derive(Debug, Clone)]
pub enum Deleted {
    /// The object is gone (its last state).
    Gone(Obj),
    /// The object is being deleted (finalizers or a grace period hold it).
    Pending(Obj),
}

const FOREGROUND: &str = "foregroundDeletion";

fn finalizers(object: &Value) -> Vec<String> {
    object["metadata"]["finalizers"]
        .as_array()
        .map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn is_pods(info: &ResourceInfo) -> bool {
    info.group.is_empty() && info.plural == "pods"
}

fn is_namespaces(info: &ResourceInfo) -> bool {
    info.group.is_empty() && info.plural == "namespaces"
}

/// The grace period a delete gets: pods bound to a node wait for their kubelet; nothing else waits.
fn grace_period(info: &ResourceInfo, object: &Value, requested: Option<i64>) -> i64 {
    if !is_pods(info) {
        return 0;
    }
    let unbound = object["spec"]["nodeName"].as_str().is_none_or(str::is_empty);
    let finished = matches!(object["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
    if unbound || finished {
        return 0;
    }
    requested
        .or(object["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(30)
        .max(0)
}

/// DELETE of one object.
pub fn delete(
    state: &mut State,
    info: &Arc<ResourceInfo>,
    key: &ObjectKey,
    opts: &DeleteOptions,
) -> Result<Deleted, ApiStatus> {
    let old = state
        .get(&info.id(), key)
        .ok_or_else(|| not_found(info, &key.name))?;
    let old_value = old.value();
    let meta = &old_value["metadata"];
    if let Some(uid) = &opts.precondition_uid
        && meta["uid"].as_str() != Some(uid)
    {
        let message = format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            meta["uid"].as_str().unwrap_or("")
        );
        return Err(ApiStatus::conflict(
            &info.group,
            &info.plural,
            &key.name,
            &message,
        ));
    }
    if let Some(rv) = &opts.precondition_rv
        && meta["resourceVersion"].as_str() != Some(rv)
    {
        let message = format!(
            "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in meta: {}",
            meta["resourceVersion"].as_str().unwrap_or("")
        );
        return Err(ApiStatus::conflict(
            &info.group,
            &info.plural,
            &key.name,
            &message,
        ));
    }
    let grace = grace_period(info, &old_value, opts.grace_period);
    let uid = meta["uid"].as_str().unwrap_or("").to_string();
    let has_dependents = state.dependents.contains_key(&uid);
    let propagation = opts.propagation.unwrap_or(Propagation::Background);
    let mut held_by = finalizers(&old_value);
    if propagation == Propagation::Foreground && has_dependents && !held_by.iter().any(|f| f == FOREGROUND) {
        held_by.push(FOREGROUND.to_string());
    }
    let namespace = is_namespaces(info);
    if opts.dry_run {
        return Ok(if held_by.is_empty() && grace == 0 && !namespace {
            Deleted::Gone(old)
        } else {
            Deleted::Pending(old)
        });
    }
    if propagation == Propagation::Orphan && has_dependents {
        orphan_dependents(state, &uid);
    }
    if held_by.is_empty() && grace == 0 && !namespace {
        let gone = remove_now(state, info, key).unwrap_or(old);
        return Ok(Deleted::Gone(gone));
    }
    let already = meta["deletionTimestamp"].is_string();
    let current_grace = meta["deletionGracePeriodSeconds"].as_i64().unwrap_or(i64::MAX);
    let mut object = old_value.clone();
    if !already || grace < current_grace {
        let now = state.clock.now();
        let at = now
            .checked_add(jiff::SignedDuration::from_secs(grace))
            .unwrap_or(now);
        object["metadata"]["deletionTimestamp"] = json!(crate::clock::format_time(at));
        object["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        if !already {
            let generation = meta["generation"].as_i64().unwrap_or(0) + 1;
            object["metadata"]["generation"] = json!(generation);
        }
    }
    if !held_by.is_empty() {
        object["metadata"]["finalizers"] = json!(held_by);
    }
    if namespace {
        object["status"]["phase"] = json!("Terminating");
    }
    let mut current = old;
    if object != old_value {
        current = state.commit(&info.id(), object);
    }
    if propagation == Propagation::Foreground && has_dependents && !already {
        let dependent_opts = DeleteOptions {
            propagation: Some(Propagation::Foreground),
            ..DeleteOptions::default()
        };
        for (dep_id, dep_key) in state.dependents.get(&uid).cloned().unwrap_or_default() {
            delete_quietly(state, &dep_id, &dep_key, &dependent_opts);
        }
        finish_foreground(state, &info.id(), key);
    }
    if namespace && !already {
        empty_namespace(state, &key.name);
        finish_namespace(state, &key.name);
    }
    Ok(match state.get(&info.id(), key) {
        Some(still) => Deleted::Pending(still),
        None => Deleted::Gone(current),
    })
}

/// Deletes on the garbage collector's behalf; a dependent that is already gone is fine.
fn delete_quietly(state: &mut State, id: &ResourceId, key: &ObjectKey, opts: &DeleteOptions) {
    if let Some(info) = state.registry.by_id(id) {
        let _ = delete(state, &info, key, opts);
    }
}

/// Removes an object now and lets the garbage collector and waiting owners react.
pub fn remove_now(state: &mut State, info: &Arc<ResourceInfo>, key: &ObjectKey) -> Option<Obj> {
    let removed = state.remove(&info.id(), key)?;
    super::kinds::after_remove(state, info, &removed);
    collect_dependents(state, &removed);
    let owners: Vec<(ResourceId, ObjectKey)> = removed
        .owner_uids()
        .filter_map(|uid| state.uids.get(uid).cloned())
        .collect();
    for (owner_id, owner_key) in owners {
        finish_foreground(state, &owner_id, &owner_key);
    }
    if info.namespaced {
        finish_namespace(state, &key.namespace);
    }
    Some(removed)
}

/// Background garbage collection after `removed` went away.
fn collect_dependents(state: &mut State, removed: &Stored) {
    let Some(uid) = removed.uid() else {
        return;
    };
    for (dep_id, dep_key) in state.dependents.get(uid).cloned().unwrap_or_default() {
        let Some(dependent) = state.get_value(&dep_id, &dep_key) else {
            continue;
        };
        let refs = dependent["metadata"]["ownerReferences"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let living_owner = refs.iter().any(|r| {
            r["uid"]
                .as_str()
                .is_some_and(|other| other != uid && state.exists_uid(other))
        });
        if living_owner {
            strip_owner(state, &dep_id, &dependent, uid);
        } else {
            delete_quietly(state, &dep_id, &dep_key, &DeleteOptions::default());
        }
    }
}

/// Orphan propagation: the dependents forget the owner before it goes.
fn orphan_dependents(state: &mut State, uid: &str) {
    for (dep_id, dep_key) in state.dependents.get(uid).cloned().unwrap_or_default() {
        if let Some(dependent) = state.get_value(&dep_id, &dep_key) {
            strip_owner(state, &dep_id, &dependent, uid);
        }
    }
}

fn strip_owner(state: &mut State, id: &ResourceId, dependent: &Value, owner_uid: &str) {
    let mut updated = dependent.clone();
    if let Some(refs) = updated["metadata"]["ownerReferences"].as_array_mut() {
        refs.retain(|r| r["uid"].as_str() != Some(owner_uid));
        if refs.is_empty()
            && let Some(meta) = updated["metadata"].as_object_mut()
        {
            meta.remove("ownerReferences");
        }
    }
    state.commit(id, updated);
}

/// Removes the foregroundDeletion finalizer once no blocking dependent is left.
fn finish_foreground(state: &mut State, id: &ResourceId, key: &ObjectKey) {
    // Most removals have no owner waiting in the foreground: decided without parsing the owner.
    let Some(owner) = state.get(id, key).filter(|o| o.deleting()) else {
        return;
    };
    let owner = owner.value();
    if !finalizers(&owner).iter().any(|f| f == FOREGROUND) {
        return;
    }
    let uid = owner["metadata"]["uid"].as_str().unwrap_or("");
    let blocked = state.dependents.get(uid).is_some_and(|deps| {
        deps.iter().any(|(dep_id, dep_key)| {
            state.get_value(dep_id, dep_key).is_some_and(|dep| {
                dep["metadata"]["ownerReferences"].as_array().is_some_and(|refs| {
                    refs.iter().any(|r| {
                        r["uid"].as_str() == Some(uid) && r["blockOwnerDeletion"].as_bool() == Some(true)
                    })
                })
            })
        })
    });
    if blocked {
        return;
    }
    let mut updated = owner.clone();
    let rest: Vec<String> = finalizers(&owner)
        .into_iter()
        .filter(|f| f != FOREGROUND)
        .collect();
    updated["metadata"]["finalizers"] = json!(rest);
    if rest.is_empty()
        && let Some(meta) = updated["metadata"].as_object_mut()
    {
        meta.remove("finalizers");
    }
    if let Some(info) = state.registry.by_id(id) {
        store_update(state, &info, updated, WriteOptions::default());
    }
}

fn namespaced_stores(state: &State) -> Vec<ResourceId> {
    state
        .stores
        .iter()
        .filter(|(_, s)| s.info.namespaced)
        .map(|(id, _)| id.clone())
        .collect()
}

/// The namespace controller's first step: delete everything in the namespace.
fn empty_namespace(state: &mut State, namespace: &str) {
    for id in namespaced_stores(state) {
        let keys: Vec<ObjectKey> = state
            .store(&id)
            .map(|s| s.range(Some(namespace)).map(|(k, _)| k.clone()).collect())
            .unwrap_or_default();
        for key in keys {
            delete_quietly(state, &id, &key, &DeleteOptions::default());
        }
    }
}

/// Removes a terminating namespace once nothing is left in it.
fn finish_namespace(state: &mut State, namespace: &str) {
    let namespaces = ResourceId::core("namespaces");
    let ns_key = ObjectKey::new("", namespace);
    let Some(ns) = state.get(&namespaces, &ns_key).filter(|ns| ns.deleting()) else {
        return;
    };
    let occupied = namespaced_stores(state).iter().any(|id| {
        state
            .store(id)
            .is_some_and(|s| s.range(Some(namespace)).next().is_some())
    });
    if occupied {
        return;
    }
    let mut updated = ns.value();
    if let Some(spec) = updated["spec"].as_object_mut() {
        spec.remove("finalizers");
    }
    if let Some(info) = state.registry.by_id(&namespaces) {
        store_update(state, &info, updated, WriteOptions::default());
    }
}
