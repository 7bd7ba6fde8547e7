//! Static NodePools end to end (the StaticCapacity feature gate): a NodePool with `spec.replicas` gets that many
//! NodeClaims and Nodes with no pod asking for them, within `limits.nodes`; scaled down through the scale
//! subresource (what `kubectl scale nodepool` calls) it sheds the surplus, preferring empty nodes; a NodeClaim
//! deleted by hand is replaced; a drifted one is deleted by disruption and replaced from the new template, never
//! going over replicas; with the gate off nothing is created.

use std::{collections::BTreeSet, time::Duration};

use k8s_openapi::api::core::v1::Node;
use karpenter_api::{labels, nodeclaim::NodeClaim, nodepool::NodePool};
use karpenter_e2e::{Controllers, Harness, TestResult, apply_deployment, running_pods};
use karpenter_operator::Settings;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

fn gate(on: bool) -> Settings {
    let mut settings = Settings::default();
    settings.feature_gates.static_capacity = on;
    settings
}

/// Creates static NodePool `name` with `replicas`, and `limits` when not null.
async fn apply_static_pool(client: &kube::Client, name: &str, replicas: i64, limits: Value) -> TestResult {
    let mut pool = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
        "spec": {"replicas": replicas, "template": {
            "metadata": {"labels": {"example.com/pool": name}},
            "spec": {
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
    });
    if !limits.is_null() {
        pool["spec"]["limits"] = limits;
    }
    let pool: NodePool = serde_json::from_value(pool)?;
    Api::<NodePool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await?;
    Ok(())
}

/// The NodeClaims of NodePool `pool` that are not being deleted, by name.
async fn active_claims(client: &kube::Client, pool: &str) -> Result<BTreeSet<String>, kube::Error> {
    let claims = Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{}={pool}", labels::NODEPOOL_LABEL)))
        .await?;
    Ok(claims
        .items
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .map(ResourceExt::name_any)
        .collect())
}

/// Every NodeClaim of `pool`, deleting ones included.
async fn all_claims(client: &kube::Client, pool: &str) -> Result<usize, kube::Error> {
    let claims = Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{}={pool}", labels::NODEPOOL_LABEL)))
        .await?;
    Ok(claims.items.len())
}

/// Ready Nodes of `pool`.
async fn ready_nodes(client: &kube::Client, pool: &str) -> Result<Vec<Node>, kube::Error> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{}={pool}", labels::NODEPOOL_LABEL)))
        .await?;
    Ok(nodes
        .items
        .into_iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .collect())
}

/// Waits (virtual seconds) until `pool` has exactly `n` NodeClaims, none being deleted, and `n` Ready Nodes.
async fn until_settled(client: &kube::Client, pool: &str, n: usize, within_secs: u64) -> TestResult {
    for _ in 0..within_secs {
        if active_claims(client, pool).await?.len() == n
            && all_claims(client, pool).await? == n
            && ready_nodes(client, pool).await?.len() == n
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(format!(
        "{pool}: {} active NodeClaims, {} in all, {} Ready Nodes after {within_secs}s; wanted {n}",
        active_claims(client, pool).await?.len(),
        all_claims(client, pool).await?,
        ready_nodes(client, pool).await?.len()
    )
    .into())
}

async fn nodes_in_status(client: &kube::Client, pool: &str) -> Result<Option<i64>, kube::Error> {
    let pool = Api::<NodePool>::all(client.clone()).get(pool).await?;
    Ok(pool.status.and_then(|s| s.nodes))
}

#[tokio::test(start_paused = true)]
async fn a_static_nodepool_keeps_its_replicas_and_scales_down_through_the_scale_subresource() -> TestResult {
    let h = Harness::start_with_settings(Controllers::default(), gate(true))?;
    let client = h.client();
    apply_static_pool(&client, "fixed", 3, Value::Null).await?;
    until_settled(&client, "fixed", 3, 300).await?;

    // No pod asked for them.
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    assert!(
        pods.items
            .iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()),
        "no pod is pending"
    );
    let claims = Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    for claim in &claims.items {
        let claim_labels = claim.labels();
        assert_eq!(
            claim_labels.get("example.com/pool").map(String::as_str),
            Some("fixed")
        );
        assert!(claim.annotations().contains_key(labels::NODEPOOL_HASH_ANNOTATION));
        assert_eq!(
            claim.owner_references().first().map(|o| o.kind.as_str()),
            Some("NodePool")
        );
    }
    // The scale subresource reads status.nodes.
    for _ in 0..30 {
        if nodes_in_status(&client, "fixed").await? == Some(3) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let pools: Api<NodePool> = Api::all(client.clone());
    let scale = pools.get_scale("fixed").await?;
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));
    assert_eq!(scale.status.map(|s| s.replicas), Some(3));

    // A pod on one node: scaling down to 1 removes the two empty nodes and keeps the busy one.
    apply_deployment(&client, "web", 1, "100m").await?;
    let mut busy = None;
    for _ in 0..120 {
        if let Some(pod) = running_pods(&client, "app=web").await?.first() {
            busy = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let busy = busy.ok_or("the pod never ran")?;
    pools
        .patch_scale(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await?;
    until_settled(&client, "fixed", 1, 300).await?;
    let left: Vec<String> = ready_nodes(&client, "fixed")
        .await?
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(left, vec![busy], "the node running a pod is the one kept");
    for _ in 0..30 {
        if nodes_in_status(&client, "fixed").await? == Some(1) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(nodes_in_status(&client, "fixed").await?, Some(1));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_nodeclaim_deleted_by_hand_is_replaced() -> TestResult {
    let h = Harness::start_with_settings(Controllers::default(), gate(true))?;
    let client = h.client();
    apply_static_pool(&client, "fixed", 2, Value::Null).await?;
    until_settled(&client, "fixed", 2, 300).await?;
    let before = active_claims(&client, "fixed").await?;
    let victim = before.iter().next().cloned().ok_or("no NodeClaim")?;
    Api::<NodeClaim>::all(client.clone())
        .delete(&victim, &DeleteParams::default())
        .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    until_settled(&client, "fixed", 2, 600).await?;
    let after = active_claims(&client, "fixed").await?;
    assert!(!after.contains(&victim), "{after:?}");
    assert_eq!(after.intersection(&before).count(), 1, "{before:?} -> {after:?}");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn limits_nodes_caps_a_static_nodepool() -> TestResult {
    let h = Harness::start_with_settings(Controllers::default(), gate(true))?;
    let client = h.client();
    apply_static_pool(&client, "fixed", 4, json!({"nodes": "2"})).await?;
    until_settled(&client, "fixed", 2, 300).await?;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(all_claims(&client, "fixed").await?, 2);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn with_the_gate_off_a_static_nodepool_stays_inert() -> TestResult {
    let h = Harness::start_with_settings(Controllers::default(), gate(false))?;
    let client = h.client();
    apply_static_pool(&client, "fixed", 3, Value::Null).await?;
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(all_claims(&client, "fixed").await?, 0);
    let pool = Api::<NodePool>::all(client.clone()).get("fixed").await?;
    assert_eq!(pool.spec.replicas, Some(3));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_drifted_static_nodepool_is_rolled_over_to_its_new_template() -> TestResult {
    let h = Harness::start_with_settings(Controllers { disruption: true }, gate(true))?;
    let client = h.client();
    apply_static_pool(&client, "fixed", 2, Value::Null).await?;
    until_settled(&client, "fixed", 2, 300).await?;
    let old = active_claims(&client, "fixed").await?;
    // Time passing alone disrupts nothing: no emptiness, no consolidation on a static NodePool.
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(active_claims(&client, "fixed").await?, old);

    Api::<NodePool>::all(client.clone())
        .patch(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"template": {"metadata": {"labels": {"example.com/pool": "renamed"}}}}}),
            ),
        )
        .await?;
    let claims: Api<NodeClaim> = Api::all(client.clone());
    for _ in 0..1800 {
        let list = claims
            .list(&ListParams::default().labels(&format!("{}=fixed", labels::NODEPOOL_LABEL)))
            .await?;
        let renamed = list
            .items
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter(|c| c.labels().get("example.com/pool").map(String::as_str) == Some("renamed"))
            .count();
        assert!(
            list.items.len() <= 2,
            "never more than replicas: {}",
            list.items.len()
        );
        if renamed == 2 && list.items.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    until_settled(&client, "fixed", 2, 300).await?;
    let new = active_claims(&client, "fixed").await?;
    assert!(new.is_disjoint(&old), "{old:?} -> {new:?}");
    for claim in claims.list(&ListParams::default()).await?.items {
        assert_eq!(
            claim.labels().get("example.com/pool").map(String::as_str),
            Some("renamed")
        );
    }
    Ok(())
}
