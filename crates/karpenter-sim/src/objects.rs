//! Small helpers the simulated components share for reading and writing Kubernetes objects as JSON: resource
//! ids, conditions, owner references, the Ready check.

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use crate::{apiserver::ResourceId, clock::format_time};

pub(crate) fn pods() -> ResourceId {
    ResourceId::core("pods")
}

pub(crate) fn nodes() -> ResourceId {
    ResourceId::core("nodes")
}

pub(crate) fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

pub(crate) fn name(v: &Value) -> &str {
    str_at(v, "/metadata/name").unwrap_or_default()
}

pub(crate) fn namespace(v: &Value) -> &str {
    str_at(v, "/metadata/namespace").unwrap_or("default")
}

pub(crate) fn uid(v: &Value) -> &str {
    str_at(v, "/metadata/uid").unwrap_or_default()
}

pub(crate) fn node_name(pod: &Value) -> Option<&str> {
    str_at(pod, "/spec/nodeName")
}

pub(crate) fn is_deleting(v: &Value) -> bool {
    v.pointer("/metadata/deletionTimestamp")
        .is_some_and(Value::is_string)
}

pub(crate) fn phase(pod: &Value) -> &str {
    str_at(pod, "/status/phase").unwrap_or("Pending")
}

pub(crate) fn is_terminal(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// A timestamp field such as `metadata.creationTimestamp`.
pub(crate) fn time_at(v: &Value, pointer: &str) -> Option<Timestamp> {
    str_at(v, pointer).and_then(|s| s.parse().ok())
}

/// `t + d` (saturating).
pub(crate) fn after(t: Timestamp, d: std::time::Duration) -> Timestamp {
    let d = SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX);
    t.checked_add(d).unwrap_or(Timestamp::MAX)
}

/// The condition of type `kind`, if present.
pub(crate) fn condition<'a>(v: &'a Value, kind: &str) -> Option<&'a Value> {
    v.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

pub(crate) fn condition_is_true(v: &Value, kind: &str) -> bool {
    condition(v, kind).is_some_and(|c| c["status"] == "True")
}

/// A Node whose Ready condition is True.
pub(crate) fn node_is_ready(node: &Value) -> bool {
    condition_is_true(node, "Ready")
}

/// Sets a condition in `conditions` (a JSON array or null), keeping `lastTransitionTime` when the status does not
/// change.
pub(crate) fn set_condition(
    conditions: &mut Value,
    kind: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
    heartbeat: bool,
) {
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let now = format_time(now);
    let Some(list) = conditions.as_array_mut() else {
        return;
    };
    let mut condition = json!({"type": kind, "status": status, "lastTransitionTime": now});
    if !reason.is_empty() {
        condition["reason"] = json!(reason);
    }
    if !message.is_empty() {
        condition["message"] = json!(message);
    }
    if heartbeat {
        condition["lastHeartbeatTime"] = json!(now);
    }
    match list.iter_mut().find(|c| c["type"] == kind) {
        Some(existing) => {
            if existing["status"] == status
                && let Some(t) = existing.get("lastTransitionTime")
            {
                condition["lastTransitionTime"] = t.clone();
            }
            *existing = condition;
        }
        None => list.push(condition),
    }
}

/// An owner reference with `controller: true`, as controllers set on what they create.
pub(crate) fn controller_ref(api_version: &str, kind: &str, owner: &Value) -> Value {
    json!({
        "apiVersion": api_version, "kind": kind, "name": name(owner), "uid": uid(owner),
        "controller": true, "blockOwnerDeletion": true,
    })
}

/// Whether `v` is controlled by the object with `uid`.
pub(crate) fn is_controlled_by(v: &Value, owner_uid: &str) -> bool {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r["uid"] == owner_uid && r["controller"] == true)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_condition_keeps_the_transition_time_when_status_is_unchanged() -> Result<(), jiff::Error> {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse()?;
        let t1: Timestamp = "2026-01-01T00:01:00Z".parse()?;
        let mut conditions = Value::Null;
        set_condition(&mut conditions, "Ready", "False", "KubeletNotReady", "", t0, true);
        set_condition(&mut conditions, "Ready", "False", "KubeletNotReady", "", t1, true);
        assert_eq!(conditions[0]["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(conditions[0]["lastHeartbeatTime"], "2026-01-01T00:01:00Z");
        set_condition(&mut conditions, "Ready", "True", "KubeletReady", "", t1, true);
        assert_eq!(conditions[0]["lastTransitionTime"], "2026-01-01T00:01:00Z");
        assert_eq!(conditions.as_array().map(Vec::len), Some(1));
        Ok(())
    }
}
