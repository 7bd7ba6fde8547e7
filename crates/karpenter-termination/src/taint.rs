//! The `karpenter.sh/disrupted:NoSchedule` taint: put on a Node before it is drained (by the terminator, and by
//! the disruption controller as soon as it picks the Node), taken off when a disruption is rolled back.

use k8s_openapi::api::core::v1::{Node, Taint};
use karpenter_api::labels;
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::json;

fn node_taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

async fn set_taints(client: &Client, node: &Node, taints: Vec<Taint>) -> Result<(), kube::Error> {
    Api::<Node>::all(client.clone())
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": taints}})),
        )
        .await
        .map(|_| ())
}

/// Adds the taint unless the Node has it.
pub async fn add_disrupted_taint(client: &Client, node: &Node) -> Result<(), kube::Error> {
    let mut taints = node_taints(node);
    if taints.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY) {
        return Ok(());
    }
    taints.push(Taint {
        key: labels::DISRUPTED_TAINT_KEY.to_string(),
        effect: "NoSchedule".to_string(),
        ..Taint::default()
    });
    set_taints(client, node, taints).await
}

/// Removes the taint if the Node has it.
pub async fn remove_disrupted_taint(client: &Client, node: &Node) -> Result<(), kube::Error> {
    let taints = node_taints(node);
    if !taints.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY) {
        return Ok(());
    }
    let kept = taints
        .into_iter()
        .filter(|t| t.key != labels::DISRUPTED_TAINT_KEY)
        .collect();
    set_taints(client, node, kept).await
}
