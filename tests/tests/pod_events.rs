//! `status.lastPodEventTime` end to end: a pod leaving a node stamps its NodeClaim, and consolidateAfter counts
//! from that stamp rather than from the node's initialization, so a node whose pods keep changing is not
//! consolidated until they have been still for consolidateAfter.

use std::time::Duration;

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Node, Pod},
};
use karpenter_api::{labels, nodeclaim::NodeClaim};
use karpenter_e2e::{
    Controllers, Harness, TestResult, apply_deployment, apply_nodepool, running_pods, until_running,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

/// The claim of Node `node`.
async fn claim_of(
    client: &kube::Client,
    node: &str,
) -> Result<NodeClaim, Box<dyn std::error::Error + Send + Sync>> {
    Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .ok_or_else(|| format!("no NodeClaim for {node}").into())
}

async fn node_exists(client: &kube::Client, node: &str) -> Result<bool, kube::Error> {
    Ok(Api::<Node>::all(client.clone()).get_opt(node).await?.is_some())
}

/// A bare pod bound straight to `node` (as kube-scheduler would bind it), small enough to fit beside the rest.
async fn bind_pod(client: &kube::Client, name: &str, node: &str) -> TestResult {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "churn"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "sim",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
    }))?;
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &pod)
        .await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_node_whose_pods_keep_changing_waits_consolidate_after_from_the_last_pod_event() -> TestResult {
    let h = Harness::start_with(Controllers { disruption: true })?;
    let client = h.client();
    apply_nodepool(
        &client,
        "default",
        &["on-demand"],
        json!({"consolidateAfter": "120s", "budgets": [{"nodes": "100%"}]}),
    )
    .await?;
    // Two large nodes, one 5-CPU pod each.
    apply_deployment(&client, "big", 2, "5").await?;
    until_running(&client, "app=big", 2, 300).await?;
    // Long past consolidateAfter since the nodes initialized: only pod events can hold them now.
    tokio::time::sleep(Duration::from_secs(240)).await;

    Api::<Deployment>::namespaced(client.clone(), "default")
        .patch(
            "big",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await?;
    until_running(&client, "app=big", 1, 60).await?;
    let busy: Vec<String> = running_pods(&client, "app=big")
        .await?
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    let empty = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .find(|n| !busy.contains(n))
        .ok_or("no node was left empty")?;
    // The busy node stays, so the only move left is deleting the empty one.
    for node in &busy {
        let patch = json!({"metadata": {"annotations": {labels::DO_NOT_DISRUPT_ANNOTATION: "true"}}});
        Api::<Node>::all(client.clone())
            .patch(node, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }

    // For a while, small pods keep landing on the emptied node and leaving it, every 20 seconds.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for i in 0..4 {
        let name = format!("churn-{i}");
        bind_pod(&client, &name, &empty).await?;
        tokio::time::sleep(Duration::from_secs(10)).await;
        pods.delete(&name, &DeleteParams::default().grace_period(0))
            .await?;
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(
            node_exists(&client, &empty).await?,
            "node {empty} was consolidated while its pods kept changing (round {i})"
        );
    }
    // Still there 90 s after the last pod event (without it counted, an empty node goes within 40 s):
    // consolidateAfter (120 s) has not passed.
    tokio::time::sleep(Duration::from_secs(80)).await;
    assert!(
        node_exists(&client, &empty).await?,
        "node {empty} was consolidated before consolidateAfter passed since the last pod event"
    );
    let last_event = claim_of(&client, &empty)
        .await?
        .status
        .and_then(|s| s.last_pod_event_time)
        .ok_or("the NodeClaim has no lastPodEventTime")?
        .0;
    let now = h.sim.clock().now();
    assert!(
        (85..=100).contains(&now.duration_since(last_event).as_secs()),
        "lastPodEventTime {last_event} is not the last pod event (now {now})"
    );

    // Once it has (plus a pass, the 15-second validation and the drain), the empty node goes.
    for _ in 0..150 {
        if !node_exists(&client, &empty).await? {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(format!("node {empty} was not consolidated once its pods had been still for consolidateAfter").into())
}
