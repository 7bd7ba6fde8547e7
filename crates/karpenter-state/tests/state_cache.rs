//! The state cache against the project's in-memory API server, through the real kube-runtime watcher.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_api::nodepool::NodePool;
use karpenter_sim::{ApiServer, VirtualClock};
use karpenter_state::{ClusterState, Watched};
use kube::{
    Api,
    api::{DeleteParams, PostParams},
};
use serde_json::json;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn server() -> ApiServer {
    ApiServer::new(VirtualClock::starting_at(jiff::Timestamp::UNIX_EPOCH))
}

/// Polls `check` on tokio time until it holds.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) -> Result<(), String> {
    for _ in 0..500 {
        if check() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(format!("{what}: not within 5s"))
}

fn pod(name: &str, node: Option<&str>) -> Result<Pod, serde_json::Error> {
    let mut spec = json!({"containers": [{"name": "app", "image": "nginx", "env": [{"name": "A", "value": "b"}],
        "resources": {"requests": {"cpu": "100m"}}}]});
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "karpenter.sh/do-not-disrupt": "true"}},
        "spec": spec,
    }))
}

#[tokio::test]
async fn the_cache_syncs_follows_changes_and_snapshots_share_pods() -> TestResult {
    let server = server();
    let client = server.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("before", None)?).await?;

    let state = ClusterState::new(Watched::default());
    assert!(!state.synced(), "nothing is listed yet");
    let watching = tokio::spawn({
        let state = state.clone();
        let client = client.clone();
        async move { state.watch(client).await }
    });
    eventually("synced", || state.synced()).await?;
    assert_eq!(state.pods.len(), 1, "the first list fills the store");

    // Later changes arrive through the watch.
    pods.create(&PostParams::default(), &pod("after", Some("n1"))?)
        .await?;
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "n1"}}))?,
        )
        .await?;
    let pools: Api<NodePool> = Api::all(client.clone());
    pools
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
                "spec": {"template": {"spec": {"requirements": [],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
            }))?,
        )
        .await?;
    eventually("two pods, a node, a pool", || {
        state.pods.len() == 2 && state.nodes.len() == 1 && state.node_pools.len() == 1
    })
    .await?;

    // Pods are kept as what decisions read.
    let kept = state.pod("default/after").ok_or("pod missing")?;
    let annotations = kept.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.keys().collect::<Vec<_>>(),
        ["karpenter.sh/do-not-disrupt"]
    );

    // A snapshot shares the cache's pods rather than copying them.
    let snapshot = state.snapshot();
    assert_eq!(snapshot.pods.len(), 2);
    assert!(snapshot.pods.iter().any(|p| std::sync::Arc::ptr_eq(p, &kept)));
    assert_eq!(snapshot.nodes.len(), 1);
    assert_eq!(snapshot.node_pools.len(), 1);

    pods.delete("before", &DeleteParams::default()).await?;
    eventually("deleted pod gone", || state.pod("default/before").is_none()).await?;

    // A dropped watch is resumed: changes made after it still arrive.
    server.faults().drop_watches();
    pods.create(&PostParams::default(), &pod("later", None)?).await?;
    eventually("pod created after the drop", || {
        state.pod("default/later").is_some()
    })
    .await?;

    watching.abort();
    Ok(())
}
