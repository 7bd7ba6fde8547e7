//! events.k8s.io/v1 Events as a second view of the core v1 Events, as kube-apiserver serves them: one store (the
//! core one), converted on the way in and out with the field mapping of k8s.io/kubernetes
//! `pkg/apis/events/v1/conversion.go` (note <-> message, regarding <-> involvedObject, reportingController <->
//! reportingComponent, deprecatedSource/Count/FirstTimestamp/LastTimestamp <-> source/count/firstTimestamp/
//! lastTimestamp). So `kubectl get events` lists what a controller wrote through events.k8s.io/v1, and the reverse.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{
    resources::{ResourceId, ResourceInfo},
    store::{Obj, Stored},
};

/// (events.k8s.io/v1 field, core v1 field); the fields of the same name (metadata, reason, type, action,
/// reportingInstance, eventTime, series, related) are copied as they are.
const RENAMED: &[(&str, &str)] = &[
    ("note", "message"),
    ("regarding", "involvedObject"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedCount", "count"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
];

/// Whether a resource is events.k8s.io's view of the core events.
pub fn is_events_v1(info: &ResourceInfo) -> bool {
    info.group == "events.k8s.io" && info.plural == "events"
}

/// The core v1 events resource every Event is stored in.
pub fn core_id() -> ResourceId {
    ResourceId::core("events")
}

fn rename(object: &Value, api_version: &str, to_core: bool) -> Value {
    let Some(fields) = object.as_object() else {
        return object.clone();
    };
    let mut out = Map::with_capacity(fields.len());
    for (key, value) in fields {
        let renamed = RENAMED.iter().find_map(|(new, core)| {
            let (from, to) = if to_core { (new, core) } else { (core, new) };
            (key == from).then_some(*to)
        });
        // A field of the other version's name is not a field of this one (the real server drops it too).
        let foreign = RENAMED
            .iter()
            .any(|(new, core)| key == if to_core { core } else { new });
        match renamed {
            Some(to) => {
                out.insert(to.to_string(), value.clone());
            }
            None if foreign => {}
            None => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    Value::Object(out)
}

/// An events.k8s.io/v1 Event as the core v1 Event it is stored as. `source` is a struct, not a pointer, in the
/// core type, so the real server always has one (`{}` when the events.k8s.io Event had no deprecatedSource).
pub fn to_core(object: &Value) -> Value {
    let mut core = rename(object, "v1", true);
    if core.get("source").is_none_or(Value::is_null) {
        core["source"] = json!({});
    }
    core
}

/// A stored core v1 Event as events.k8s.io/v1 shows it.
pub fn from_core(object: &Value) -> Value {
    rename(object, "events.k8s.io/v1", false)
}

/// `from_core` for a stored object.
pub fn from_core_stored(object: &Obj) -> Obj {
    Arc::new(Stored::new(&from_core(&object.value()), &[]))
}

/// An events.k8s.io/v1 field selector in core v1 field names (`regarding.name` -> `involvedObject.name`).
pub fn core_field_selector(selector: &str) -> String {
    selector
        .split(',')
        .map(|term| {
            for (new, core) in RENAMED {
                if let Some(rest) = term.strip_prefix(new) {
                    return format!("{core}{rest}");
                }
            }
            term.to_string()
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_round_trips_through_the_core_version() {
        let new = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e", "namespace": "default"},
            "note": "n", "regarding": {"kind": "Pod", "name": "p"}, "reportingController": "c",
            "reportingInstance": "i", "action": "A", "reason": "R", "type": "Normal",
            "deprecatedCount": 2, "deprecatedSource": {"component": "x"}, "series": {"count": 3}
        });
        let core = to_core(&new);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["message"], "n");
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["reportingComponent"], "c");
        assert_eq!(core["count"], 2);
        assert_eq!(core["source"]["component"], "x");
        assert!(core.get("note").is_none());
        assert_eq!(from_core(&core), new);
        assert_eq!(to_core(&json!({"note": "n"}))["source"], json!({}));
        assert_eq!(
            core_field_selector("regarding.name=p,reason=R"),
            "involvedObject.name=p,reason=R"
        );
    }
}
