//! ReplicaSets: create pods up to `spec.replicas`, delete the surplus (unscheduled first, then newest).

use std::sync::Arc;

use serde_json::{Value, json};

use super::{deployments::replica_sets, is_active, is_ready, pod_from_template, replicas, update_status};
use crate::{apiserver::ApiServer, objects};

/// Sorts pods so the ones to delete first come first: unscheduled pods, then the newest (creationTimestamp, then
/// name, descending).
fn deletion_order(pods: &mut [&Value]) {
    pods.sort_by(|a, b| {
        objects::node_name(a)
            .is_some()
            .cmp(&objects::node_name(b).is_some())
            .then_with(|| {
                let created =
                    |p: &Value| objects::str_at(p, "/metadata/creationTimestamp").map(str::to_string);
                created(b).cmp(&created(a))
            })
            .then_with(|| objects::name(b).cmp(objects::name(a)))
    });
}

pub(super) fn reconcile(api: &ApiServer) {
    let pods: Vec<Arc<Value>> = api.list_internal(&objects::pods(), None);
    for rs in api.list_internal(&replica_sets(), None) {
        if objects::is_deleting(&rs) {
            continue;
        }
        reconcile_one(api, &rs, &pods);
    }
}

fn reconcile_one(api: &ApiServer, rs: &Value, pods: &[Arc<Value>]) {
    let want = usize::try_from(replicas(rs, 1)).unwrap_or(0);
    let mut active: Vec<&Value> = super::owned(pods, objects::uid(rs))
        .into_iter()
        .filter(|p| is_active(p))
        .collect();
    let ready = active.iter().filter(|p| is_ready(p)).count();
    let prefix = format!("{}-", objects::name(rs));
    if active.len() < want {
        for _ in active.len()..want {
            let pod = pod_from_template(rs, "apps/v1", "ReplicaSet", &prefix);
            if let Err(e) = api.create_internal(&objects::pods(), pod) {
                tracing::debug!("sim replicasets: creating a pod of {}: {e}", objects::name(rs));
            }
        }
    } else if active.len() > want {
        deletion_order(&mut active);
        for pod in active.iter().take(active.len() - want) {
            let (ns, name) = (objects::namespace(pod), objects::name(pod));
            if let Err(e) = api.delete_internal(&objects::pods(), ns, name, None) {
                tracing::debug!("sim replicasets: deleting {ns}/{name}: {e}");
            }
        }
    }
    let count = i64::try_from(active.len()).unwrap_or(0);
    update_status(
        api,
        &replica_sets(),
        rs,
        json!({"replicas": count, "readyReplicas": ready, "availableReplicas": ready,
               "observedGeneration": rs["metadata"]["generation"].clone()}),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_down_deletes_unscheduled_then_newest_pods() {
        let pod = |name: &str, created: &str, node: Option<&str>| json!({"metadata": {"name": name, "creationTimestamp": created}, "spec": {"nodeName": node}});
        let old = pod("old", "2026-01-01T00:00:00Z", Some("n"));
        let new = pod("new", "2026-01-01T00:05:00Z", Some("n"));
        let pending = pod("pending", "2026-01-01T00:00:00Z", None);
        let mut pods = vec![&old, &new, &pending];
        deletion_order(&mut pods);
        let names: Vec<&str> = pods.iter().map(|p| objects::name(p)).collect();
        assert_eq!(names, ["pending", "new", "old"]);
    }
}
