//! The `karpenter.sh/termination` finalizer on Nodes. The lifecycle controller puts it on a Node when the Node
//! registers for a NodeClaim, so `kubectl delete node` only marks the Node: the terminator then deletes the
//! NodeClaim, whose termination drains the Node, deletes the instance and only then releases the Node (see
//! [`crate::Terminator`]). Without it the Node would vanish at once while its instance ran on, and pending pods
//! would be counted against capacity that no longer takes pods.
//!
//! The finalizer is removed with a JSON patch that first tests the list it read, so a finalizer another
//! controller added or removed meanwhile is never overwritten from a stale copy: the patch fails and the next
//! pass reads the list again.

use k8s_openapi::api::core::v1::Node;
use karpenter_api::labels;
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};

/// Whether the Node carries the finalizer.
pub fn has_finalizer(node: &Node) -> bool {
    node.finalizers()
        .iter()
        .any(|f| f == labels::TERMINATION_FINALIZER)
}

/// The JSON patch that takes the finalizer out of `current` (the list as read), or `None` when it is not there.
/// It tests `current` first and then writes the rest: applied to a list that has changed since, it fails.
pub fn finalizer_removal(current: &[String]) -> Option<Value> {
    if !current.iter().any(|f| f == labels::TERMINATION_FINALIZER) {
        return None;
    }
    let rest: Vec<&String> = current
        .iter()
        .filter(|f| *f != labels::TERMINATION_FINALIZER)
        .collect();
    let write = if rest.is_empty() {
        json!({"op": "remove", "path": "/metadata/finalizers"})
    } else {
        json!({"op": "replace", "path": "/metadata/finalizers", "value": rest})
    };
    Some(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": current},
        write,
    ]))
}

/// Removes the finalizer from `node` (as read from the cache); `true` when a patch was sent. A Node already gone
/// is fine. On a Node being deleted with no other finalizer, this lets the API server remove it.
pub async fn remove_node_finalizer(client: &Client, node: &Node) -> Result<bool, kube::Error> {
    let Some(ops) = finalizer_removal(node.finalizers()) else {
        return Ok(false);
    };
    // The json-patch type is inferred: kube does not re-export the crate.
    let patch = Patch::Json::<()>(serde_json::from_value(ops).map_err(kube::Error::SerdeError)?);
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes
        .patch(&node.name_any(), &PatchParams::default(), &patch)
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn removal_tests_the_list_it_read_and_keeps_the_other_finalizers() {
        let current = strings(&["example.com/keep", labels::TERMINATION_FINALIZER]);
        assert_eq!(
            finalizer_removal(&current),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": current},
                {"op": "replace", "path": "/metadata/finalizers", "value": ["example.com/keep"]},
            ]))
        );
        let only_ours = strings(&[labels::TERMINATION_FINALIZER]);
        assert_eq!(
            finalizer_removal(&only_ours),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": only_ours},
                {"op": "remove", "path": "/metadata/finalizers"},
            ]))
        );
        assert_eq!(finalizer_removal(&strings(&["example.com/keep"])), None);
        assert_eq!(finalizer_removal(&[]), None);
    }
}
