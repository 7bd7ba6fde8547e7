//! Deployments: one ReplicaSet per pod template, sized to the Deployment; older ReplicaSets scaled to 0.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{replicas, update_status};
use crate::{
    apiserver::{ApiServer, ResourceId},
    objects,
};

pub(super) fn deployments() -> ResourceId {
    ResourceId::new("apps", "deployments")
}

pub(super) fn replica_sets() -> ResourceId {
    ResourceId::new("apps", "replicasets")
}

/// A stable short hash of a pod template (FNV-1a over its JSON), as the `pod-template-hash` label.
pub(super) fn template_hash(template: &Value) -> String {
    let text = serde_json::to_string(template).unwrap_or_default();
    let mut hash: u32 = 0x811c_9dc5;
    for byte in text.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("{hash:08x}")
}

pub(super) fn reconcile(api: &ApiServer) {
    let replica_sets: Vec<Arc<Value>> = api.list_internal(&replica_sets(), None);
    for deployment in api.list_internal(&deployments(), None) {
        if objects::is_deleting(&deployment) {
            continue;
        }
        reconcile_one(api, &deployment, &replica_sets);
    }
}

fn reconcile_one(api: &ApiServer, deployment: &Value, all: &[Arc<Value>]) {
    let name = objects::name(deployment);
    let namespace = objects::namespace(deployment);
    let template = &deployment["spec"]["template"];
    let hash = template_hash(template);
    let current_name = format!("{name}-{hash}");
    let want = replicas(deployment, 1);
    let owned = super::owned(all, objects::uid(deployment));
    let mut found = false;
    for rs in &owned {
        let target = if objects::name(rs) == current_name {
            found = true;
            want
        } else {
            0
        };
        if replicas(rs, 1) != target {
            let patch = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": objects::name(rs), "namespace": namespace},
                "spec": {"replicas": target}});
            if let Err(e) = api.apply_internal(&replica_sets(), patch) {
                tracing::debug!("sim deployments: scaling {namespace}/{}: {e}", objects::name(rs));
            }
        }
    }
    if !found {
        let mut rs_template = template.clone();
        rs_template["metadata"]["labels"]["pod-template-hash"] = json!(hash);
        let mut selector = deployment["spec"]["selector"].clone();
        selector["matchLabels"]["pod-template-hash"] = json!(hash);
        let rs = json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {
                "name": current_name, "namespace": namespace,
                "labels": rs_template["metadata"]["labels"].clone(),
                "ownerReferences": [objects::controller_ref("apps/v1", "Deployment", deployment)],
            },
            "spec": {"replicas": want, "selector": selector, "template": rs_template},
        });
        if let Err(e) = api.create_internal(&replica_sets(), rs) {
            tracing::debug!("sim deployments: creating {namespace}/{current_name}: {e}");
        }
    }
    let sum = |field: &str| -> i64 {
        owned
            .iter()
            .map(|rs| rs["status"][field].as_i64().unwrap_or(0))
            .sum()
    };
    let updated = owned
        .iter()
        .find(|rs| objects::name(rs) == current_name)
        .map_or(0, |rs| rs["status"]["replicas"].as_i64().unwrap_or(0));
    update_status(
        api,
        &deployments(),
        deployment,
        json!({
            "observedGeneration": deployment["metadata"]["generation"].clone(),
            "replicas": sum("replicas"), "updatedReplicas": updated,
            "readyReplicas": sum("readyReplicas"), "availableReplicas": sum("availableReplicas"),
        }),
    );
}
