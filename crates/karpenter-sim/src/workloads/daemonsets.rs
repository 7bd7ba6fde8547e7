//! DaemonSets: a pod bound to every node the template selects and whose taints it tolerates; a pod already
//! running stays through a NoSchedule taint added later (only an untolerated NoExecute taint removes it).

use std::{collections::BTreeMap, sync::Arc};

use serde_json::{Value, json};

use super::{is_active, is_ready, pod_from_template, update_status};
use crate::{
    apiserver::{ApiServer, ResourceId},
    objects,
};

fn daemon_sets() -> ResourceId {
    ResourceId::new("apps", "daemonsets")
}

/// The tolerations the DaemonSet controller adds to every daemon pod (host-network pods also tolerate
/// network-unavailable).
fn default_tolerations(host_network: bool) -> Vec<Value> {
    let mut t = vec![
        json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}),
        json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}),
        json!({"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}),
    ];
    if host_network {
        t.push(json!({"key": "node.kubernetes.io/network-unavailable", "operator": "Exists", "effect": "NoSchedule"}));
    }
    t
}

/// Kubernetes' toleration matching.
pub(crate) fn tolerates(toleration: &Value, taint: &Value) -> bool {
    let effect = toleration["effect"].as_str().unwrap_or_default();
    if !effect.is_empty() && taint["effect"] != effect {
        return false;
    }
    let key = toleration["key"].as_str().unwrap_or_default();
    let exists = toleration["operator"] == "Exists";
    if key.is_empty() {
        return exists;
    }
    if taint["key"] != key {
        return false;
    }
    exists || toleration["value"].as_str().unwrap_or_default() == taint["value"].as_str().unwrap_or_default()
}

/// One node selector requirement against a node's labels (and `metadata.name` for matchFields).
fn requirement_matches(req: &Value, value: Option<&str>) -> bool {
    let values: Vec<&str> = req["values"]
        .as_array()
        .map(|v| v.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let int = |s: &str| s.parse::<i64>().ok();
    match req["operator"].as_str().unwrap_or_default() {
        "In" => value.is_some_and(|v| values.contains(&v)),
        "NotIn" => value.is_none_or(|v| !values.contains(&v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => {
            matches!((value.and_then(int), values.first().and_then(|v| int(v))), (Some(a), Some(b)) if a > b)
        }
        "Lt" => {
            matches!((value.and_then(int), values.first().and_then(|v| int(v))), (Some(a), Some(b)) if a < b)
        }
        _ => false,
    }
}

/// Whether a pod spec's nodeSelector and required node affinity select the node.
pub(crate) fn selects(spec: &Value, node: &Value) -> bool {
    let labels: BTreeMap<&str, &str> = node["metadata"]["labels"]
        .as_object()
        .map(|l| {
            l.iter()
                .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
                .collect()
        })
        .unwrap_or_default();
    let selector_ok = spec["nodeSelector"].as_object().is_none_or(|s| {
        s.iter()
            .all(|(k, v)| labels.get(k.as_str()).copied() == v.as_str())
    });
    if !selector_ok {
        return false;
    }
    let Some(terms) = spec
        .pointer("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)
    else {
        return true;
    };
    let node_name = objects::name(node);
    terms.iter().any(|term| {
        let exprs = term["matchExpressions"].as_array().cloned().unwrap_or_default();
        let fields = term["matchFields"].as_array().cloned().unwrap_or_default();
        (!exprs.is_empty() || !fields.is_empty())
            && exprs
                .iter()
                .all(|r| requirement_matches(r, r["key"].as_str().and_then(|k| labels.get(k).copied())))
            && fields.iter().all(|r| {
                let value = (r["key"] == "metadata.name").then_some(node_name);
                requirement_matches(r, value)
            })
    })
}

pub(super) fn reconcile(api: &ApiServer) {
    let nodes: Vec<Arc<Value>> = api.list_internal(&objects::nodes(), None);
    let pods: Vec<Arc<Value>> = api.list_internal(&objects::pods(), None);
    for ds in api.list_internal(&daemon_sets(), None) {
        if objects::is_deleting(&ds) {
            continue;
        }
        reconcile_one(api, &ds, &nodes, &pods);
    }
}

fn reconcile_one(api: &ApiServer, ds: &Value, nodes: &[Arc<Value>], pods: &[Arc<Value>]) {
    let spec = &ds["spec"]["template"]["spec"];
    let host_network = spec["hostNetwork"] == true;
    let mut tolerations: Vec<Value> = spec["tolerations"].as_array().cloned().unwrap_or_default();
    tolerations.extend(default_tolerations(host_network));
    let owned: Vec<&Value> = super::owned(pods, objects::uid(ds))
        .into_iter()
        .filter(|p| is_active(p))
        .collect();
    let (mut desired, mut scheduled, mut ready) = (0, 0, 0);
    let prefix = format!("{}-", objects::name(ds));
    for node in nodes.iter().filter(|n| !objects::is_deleting(n)) {
        let node_name = objects::name(node);
        let taints = node["spec"]["taints"].as_array().cloned().unwrap_or_default();
        let tolerated = |effects: &[&str]| {
            taints
                .iter()
                .filter(|t| t["effect"].as_str().is_some_and(|e| effects.contains(&e)))
                .all(|t| tolerations.iter().any(|tol| tolerates(tol, t)))
        };
        // As the DaemonSet controller: a new pod only where every NoSchedule and NoExecute taint is tolerated,
        // but a running pod stays unless a NoExecute taint is not (a NoSchedule taint, such as
        // karpenter.sh/disrupted, leaves it to the drain).
        let selected = selects(spec, node);
        let should_run = selected && tolerated(&["NoSchedule", "NoExecute"]);
        let here: Vec<&&Value> = owned
            .iter()
            .filter(|p| objects::node_name(p) == Some(node_name))
            .collect();
        let should_continue = selected && tolerated(&["NoExecute"]) && !here.is_empty();
        if should_continue && !should_run {
            desired += 1;
            scheduled += 1;
            ready += here.iter().filter(|p| is_ready(p)).count();
        } else if should_run {
            desired += 1;
            if here.is_empty() {
                let mut pod = pod_from_template(ds, "apps/v1", "DaemonSet", &prefix);
                pod["spec"]["nodeName"] = json!(node_name);
                pod["spec"]["tolerations"] = json!(tolerations);
                if let Err(e) = api.create_internal(&objects::pods(), pod) {
                    tracing::debug!(
                        "sim daemonsets: creating a pod of {} on {node_name}: {e}",
                        objects::name(ds)
                    );
                }
            } else {
                scheduled += 1;
                ready += here.iter().filter(|p| is_ready(p)).count();
            }
        } else {
            for pod in here {
                let (ns, name) = (objects::namespace(pod), objects::name(pod));
                if let Err(e) = api.delete_internal(&objects::pods(), ns, name, None) {
                    tracing::debug!("sim daemonsets: deleting {ns}/{name}: {e}");
                }
            }
        }
    }
    update_status(
        api,
        &daemon_sets(),
        ds,
        json!({"desiredNumberScheduled": desired, "currentNumberScheduled": scheduled,
               "numberReady": ready, "numberAvailable": ready, "numberMisscheduled": 0,
               "observedGeneration": ds["metadata"]["generation"].clone()}),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerations_match_like_kubernetes() {
        let taint = json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"});
        assert!(tolerates(
            &json!({"key": "dedicated", "operator": "Equal", "value": "gpu"}),
            &taint
        ));
        assert!(tolerates(
            &json!({"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}),
            &taint
        ));
        assert!(tolerates(&json!({"operator": "Exists"}), &taint));
        assert!(!tolerates(&json!({"key": "dedicated", "value": "cpu"}), &taint));
        assert!(!tolerates(
            &json!({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}),
            &taint
        ));
    }

    #[test]
    fn node_selection_reads_selector_affinity_and_fields() {
        let node = json!({"metadata": {"name": "n1", "labels": {"zone": "a", "cpus": "8"}}});
        assert!(selects(&json!({"nodeSelector": {"zone": "a"}}), &node));
        assert!(!selects(&json!({"nodeSelector": {"zone": "b"}}), &node));
        let affinity = |exprs: Value, fields: Value| {
            json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": exprs, "matchFields": fields}]}}}})
        };
        assert!(selects(
            &affinity(
                json!([{"key": "cpus", "operator": "Gt", "values": ["4"]}]),
                json!([])
            ),
            &node
        ));
        assert!(!selects(
            &affinity(
                json!([{"key": "cpus", "operator": "Lt", "values": ["4"]}]),
                json!([])
            ),
            &node
        ));
        assert!(selects(
            &affinity(
                json!([]),
                json!([{"key": "metadata.name", "operator": "In", "values": ["n1"]}])
            ),
            &node
        ));
        assert!(selects(
            &affinity(json!([{"key": "gpu", "operator": "DoesNotExist"}]), json!([])),
            &node
        ));
    }
}
