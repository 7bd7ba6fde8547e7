//! The scale, eviction and binding subresources.
//!
//! Eviction follows the real registry (pkg/registry/core/pod/storage/eviction.go): pods that are Pending,
//! Succeeded, Failed or already terminating are deleted without looking at budgets; a pod matched by no
//! PodDisruptionBudget is deleted; by more than one, the answer is 500; by one, the eviction is allowed when
//! the budget has a disruption left, else 429 TooManyRequests with a `DisruptionBudget` cause. Unhealthy
//! (not Ready) pods follow `unhealthyPodEvictionPolicy` (IfHealthyBudget by default, or AlwaysAllow).
//!
//! The budget is computed at eviction time from the PDB's spec and the live pods it selects rather than read
//! from `status.disruptionsAllowed` (which the simulated disruption controller in `workloads::pdbs` keeps with
//! the same formula, for readers such as Karpenter's disruption decisions): expected = pods selected, healthy = selected
//! pods that are Ready and not terminating, desired = minAvailable (int or percent of expected, rounded up) or
//! expected - maxUnavailable (percent rounded up), 0 when neither is set; disruptions allowed = healthy - desired.
//! Percentages are taken of the selected pods rather than of the owning workloads' replicas.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{
    delete::{self, DeleteOptions},
    objects::{self, Part, WriteOptions, not_found},
    resources::{ResourceId, ResourceInfo},
    selectors::LabelSelector,
    store::{Obj, ObjectKey, State},
};
use crate::error::ApiStatus;

fn get_path<'a>(object: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(object, |v, part| &v[part])
}

fn set_path(object: &mut Value, path: &str, value: Value) {
    let mut current = object;
    for part in path.split('.') {
        if !current.is_object() {
            *current = json!({});
        }
        current = &mut current[part];
    }
    *current = value;
}

/// The autoscaling/v1 Scale view of a scalable object.
pub fn scale_of(info: &ResourceInfo, object: &Value) -> Result<Value, ApiStatus> {
    let paths = info
        .scale
        .as_ref()
        .ok_or_else(|| ApiStatus::not_found(&info.group, &info.plural, "scale"))?;
    let meta = &object["metadata"];
    let selector = match &paths.label_selector {
        Some(path) if paths.selector_is_object => LabelSelector::from_object(get_path(object, path))
            .map(|s| s.to_string())
            .unwrap_or_default(),
        Some(path) => get_path(object, path).as_str().unwrap_or("").to_string(),
        None => String::new(),
    };
    let mut scale = json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": meta["name"], "uid": meta["uid"], "resourceVersion": meta["resourceVersion"],
                     "creationTimestamp": meta["creationTimestamp"]},
        "spec": {"replicas": get_path(object, &paths.spec_replicas).as_i64().unwrap_or(0)},
        "status": {"replicas": get_path(object, &paths.status_replicas).as_i64().unwrap_or(0)},
    });
    if meta["namespace"].is_string() {
        scale["metadata"]["namespace"] = meta["namespace"].clone();
    }
    if !selector.is_empty() {
        scale["status"]["selector"] = json!(selector);
    }
    Ok(scale)
}

/// PUT or PATCH of the scale subresource: `edit` turns the current Scale into the wanted one.
pub fn write_scale(
    state: &mut State,
    info: &Arc<ResourceInfo>,
    key: &ObjectKey,
    opts: WriteOptions,
    edit: impl FnOnce(&mut Value) -> Result<(), ApiStatus>,
) -> Result<Value, ApiStatus> {
    let object = state
        .get_value(&info.id(), key)
        .ok_or_else(|| not_found(info, &key.name))?;
    let paths = info
        .scale
        .clone()
        .ok_or_else(|| ApiStatus::not_found(&info.group, &info.plural, "scale"))?;
    let mut scale = scale_of(info, &object)?;
    edit(&mut scale)?;
    let current_rv = object["metadata"]["resourceVersion"].as_str();
    if let Some(rv) = scale["metadata"]["resourceVersion"].as_str()
        && !rv.is_empty()
        && Some(rv) != current_rv
    {
        return Err(ApiStatus::stale(&info.group, &info.plural, &key.name));
    }
    let replicas = scale["spec"]["replicas"].as_i64().ok_or_else(|| {
        ApiStatus::invalid(
            "autoscaling",
            "Scale",
            &key.name,
            "spec.replicas",
            "Required value",
        )
    })?;
    if replicas < 0 {
        return Err(ApiStatus::invalid(
            "autoscaling",
            "Scale",
            &key.name,
            "spec.replicas",
            &format!("Invalid value: {replicas}: must be greater than or equal to 0"),
        ));
    }
    let mut updated = object;
    set_path(&mut updated, &paths.spec_replicas, json!(replicas));
    let stored = objects::update(state, info, key, updated, Part::Main, opts)?;
    scale_of(info, &stored.value())
}

/// An IntOrString budget value scaled against `total` (percentages rounded up, as upstream).
fn scaled(value: &Value, total: i64) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => {
            let percent: i64 = s.strip_suffix('%')?.trim().parse().ok()?;
            Some((percent * total + 99) / 100)
        }
        _ => None,
    }
}

struct Budget {
    desired: i64,
    healthy: i64,
}

fn budget(state: &State, pdb: &Value, selector: &LabelSelector, namespace: &str) -> Budget {
    let pods = ResourceId::core("pods");
    // Read from the stored pods' indexed labels and flags: a namespace may hold 100,000 pods.
    let selected: Vec<&Obj> = state
        .store(&pods)
        .map(|s| {
            s.range(Some(namespace))
                .map(|(_, p)| p)
                .filter(|p| selector.matches(&***p))
                .collect()
        })
        .unwrap_or_default();
    let expected = selected.len() as i64;
    let healthy = selected.iter().filter(|p| p.ready() && !p.deleting()).count() as i64;
    let desired = pdb_desired_healthy(&pdb["spec"], expected);
    Budget { desired, healthy }
}

/// How many of `expected` selected pods a PDB's spec wants healthy: minAvailable, or expected - maxUnavailable
/// (percentages rounded up); 0 when neither is set. Eviction and the simulated PDB status controller share it.
pub(crate) fn pdb_desired_healthy(spec: &Value, expected: i64) -> i64 {
    match spec.get("maxUnavailable").and_then(|v| scaled(v, expected)) {
        Some(max) => (expected - max).max(0),
        None => spec
            .get("minAvailable")
            .and_then(|v| scaled(v, expected))
            .unwrap_or_default(),
    }
}

/// POST pods/NAME/eviction.
pub fn evict(
    state: &mut State,
    pods: &Arc<ResourceInfo>,
    key: &ObjectKey,
    eviction: &Value,
) -> Result<(), ApiStatus> {
    let stored_pod = state
        .get(&pods.id(), key)
        .ok_or_else(|| not_found(pods, &key.name))?;
    let pod = stored_pod.value();
    let options = &eviction["deleteOptions"];
    let delete_opts = DeleteOptions {
        grace_period: options["gracePeriodSeconds"].as_i64(),
        precondition_uid: options["preconditions"]["uid"].as_str().map(str::to_string),
        precondition_rv: options["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_string),
        dry_run: options["dryRun"]
            .as_array()
            .is_some_and(|d| d.iter().any(|v| v == "All")),
        ..DeleteOptions::default()
    };
    let phase = pod["status"]["phase"].as_str().unwrap_or("");
    let ignore_budgets = matches!(phase, "Pending" | "Succeeded" | "Failed")
        || pod["metadata"]["deletionTimestamp"].is_string();
    if !ignore_budgets {
        let pdbs = ResourceId::new("policy", "poddisruptionbudgets");
        let matching: Vec<(Value, LabelSelector)> = state
            .store(&pdbs)
            .map(|s| {
                s.range(Some(&key.namespace))
                    .filter_map(|(_, pdb)| {
                        let pdb = pdb.value();
                        let selector = pdb["spec"].get("selector").filter(|s| !s.is_null())?;
                        let selector = LabelSelector::from_object(selector)?;
                        selector.matches(&pod).then_some((pdb, selector))
                    })
                    .collect()
            })
            .unwrap_or_default();
        if matching.len() > 1 {
            return Err(ApiStatus::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        if let Some((pdb, selector)) = matching.first() {
            let Budget { desired, healthy } = budget(state, pdb, selector, &key.namespace);
            let always_allow_unhealthy = pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow";
            let unhealthy_may_go = !stored_pod.ready() && (always_allow_unhealthy || healthy >= desired);
            if !unhealthy_may_go && healthy - desired <= 0 {
                let name = pdb["metadata"]["name"].as_str().unwrap_or("");
                return Err(ApiStatus::too_many_requests(
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    Some(
                        json!({"causes": [{"reason": "DisruptionBudget", "message": format!(
                        "The disruption budget {name} needs {desired} healthy pods and has {healthy} currently")}]}),
                    ),
                ));
            }
        }
    }
    delete::delete(state, pods, key, &delete_opts).map(|_| ())
}

/// POST pods/NAME/binding: what the scheduler does to place a pod.
pub fn bind(
    state: &mut State,
    pods: &Arc<ResourceInfo>,
    key: &ObjectKey,
    binding: &Value,
) -> Result<Obj, ApiStatus> {
    let pod = state
        .get_value(&pods.id(), key)
        .ok_or_else(|| not_found(pods, &key.name))?;
    let node = binding["target"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiStatus::invalid("", "Binding", &key.name, "target.name", "Required value"))?;
    if let Some(current) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        return Err(ApiStatus::conflict(
            "",
            "pods",
            &key.name,
            &format!("pod {} is already assigned to node \"{current}\"", key.name),
        ));
    }
    if pod["metadata"]["deletionTimestamp"].is_string() {
        return Err(ApiStatus::conflict(
            "",
            "pods",
            &key.name,
            "pod is being deleted, cannot be assigned to a host",
        ));
    }
    let mut bound = pod;
    bound["spec"]["nodeName"] = json!(node);
    let now = state.now();
    let mut conditions: Vec<Value> = bound["status"]["conditions"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter(|c| c["type"] != "PodScheduled")
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    conditions.push(json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": now}));
    bound["status"]["conditions"] = json!(conditions);
    Ok(state.commit(&pods.id(), bound))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_budgets_round_up() {
        assert_eq!(scaled(&json!("50%"), 3), Some(2));
        assert_eq!(scaled(&json!(2), 10), Some(2));
        assert_eq!(scaled(&json!("bogus"), 3), None);
    }

    #[test]
    fn dotted_paths_set_and_get() {
        let mut obj = json!({});
        set_path(&mut obj, "spec.replicas", json!(3));
        assert_eq!(get_path(&obj, "spec.replicas"), &json!(3));
    }
}
