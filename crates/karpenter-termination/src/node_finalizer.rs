//! The `karpenter.sh/termination` finalizer on Nodes. The lifecycle controller puts it on a Node when the Node
//! registers for a NodeClaim, so `kubectl delete node` only marks the Node: the terminator then deletes the
//! NodeClaim, whose termination drains the Node, deletes the instance and only then releases the Node (see
//! [`crate::Terminator`]). Without it the Node would vanish at once while its instance ran on, and pending pods
//! would be counted against capacity that no longer takes pods.
//!
//! The finalizer is removed with [`karpenter_state::finalizers`]' optimistically locked patch, so a finalizer
//! another controller added or removed meanwhile is never overwritten from a stale copy: the write conflicts, and
//! the list is read again and the removal recomputed.

use k8s_openapi::api::core::v1::Node;
use karpenter_api::labels;
use karpenter_state::finalizers::remove_finalizer;
use kube::{Api, Client};

/// Whether the Node carries the finalizer.
pub fn has_finalizer(finalizers: &[String]) -> bool {
    finalizers.iter().any(|f| f == labels::TERMINATION_FINALIZER)
}

/// Removes the finalizer from `node` (as read from the cache); `true` when this call took it off. A Node already
/// gone is fine. On a Node being deleted with no other finalizer, this lets the API server remove it.
pub async fn remove_node_finalizer(client: &Client, node: &Node) -> Result<bool, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    Ok(remove_finalizer(&nodes, node, labels::TERMINATION_FINALIZER)
        .await?
        .written())
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_sim::{ApiServer, SystemClock};
    use kube::ResourceExt;
    use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
    use serde_json::json;

    #[tokio::test]
    async fn removal_keeps_a_finalizer_added_after_the_cache_read() -> Result<(), Box<dyn std::error::Error>>
    {
        let server = ApiServer::new(SystemClock);
        let nodes = Api::<Node>::all(server.client());
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n", "finalizers": [labels::TERMINATION_FINALIZER]},
        }))?;
        let cached = nodes.create(&PostParams::default(), &node).await?;
        // Another controller adds its finalizer, then the Node is deleted; the cache still has the first copy.
        nodes
            .patch(
                "n",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"finalizers": [labels::TERMINATION_FINALIZER, "example.com/other"]}}),
                ),
            )
            .await?;
        nodes.delete("n", &DeleteParams::default()).await?;
        assert!(remove_node_finalizer(&server.client(), &cached).await?);
        assert_eq!(nodes.get("n").await?.finalizers(), ["example.com/other"]);
        Ok(())
    }
}
