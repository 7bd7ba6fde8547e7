//! Expiration with a terminationGracePeriod: a node past its NodePool's `expireAfter` is deleted whatever its
//! pods' PodDisruptionBudgets say; the drain honours a PDB that blocks every eviction only until the
//! pods' own grace period would overrun the NodeClaim's `terminationGracePeriod`, then the blocking pods are
//! deleted (to be gone by the deadline) and the node goes; the provisioner gives the pods a new node.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::{nodeclaim::NodeClaim, nodepool::NodePool};
use karpenter_e2e::{
    Controllers, Harness, TestResult, apply_deployment, apply_pdb, drift_nodepool, replicas::invariants,
    running_pods, until_running,
};
use kube::{
    Api, ResourceExt,
    api::{ListParams, PostParams},
};
use serde_json::json;

const EXPIRE_AFTER: Duration = Duration::from_secs(10 * 60);
/// The pods' terminationGracePeriodSeconds (Kubernetes' default).
const POD_GRACE_SECONDS: i64 = 30;
const GRACE: Duration = Duration::from_secs(5 * 60);

fn seconds_between(from: jiff::Timestamp, to: jiff::Timestamp) -> i64 {
    to.duration_since(from).as_secs()
}

/// Answers to evictions refused (429) so far.
fn evictions_refused(h: &Harness) -> usize {
    h.sim
        .api()
        .audit()
        .iter()
        .filter(|r| r.resource == "pods" && r.subresource.as_deref() == Some("eviction") && r.code == 429)
        .count()
}

/// The cluster's one NodeClaim and when it was created.
async fn only_claim(
    claims: &Api<NodeClaim>,
) -> Result<(NodeClaim, jiff::Timestamp), Box<dyn std::error::Error + Send + Sync>> {
    let mut list = claims.list(&ListParams::default()).await?.items;
    assert_eq!(list.len(), 1);
    let claim = list.remove(0);
    let created = claim
        .metadata
        .creation_timestamp
        .as_ref()
        .ok_or("no creation time")?
        .0;
    Ok((claim, created))
}

#[tokio::test(start_paused = true)]
async fn an_expired_node_is_drained_past_a_blocking_pdb_once_its_grace_period_ends() -> TestResult {
    let h = Harness::start_with(Controllers { disruption: true })?;
    let client = h.client();
    let pool: NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "expireAfter": "10m", "terminationGracePeriod": "5m"}}}
    }))?;
    Api::<NodePool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await?;
    apply_deployment(&client, "web", 2, "500m").await?;
    // No pod of `web` may ever be evicted.
    apply_pdb(&client, "web", 0).await?;
    until_running(&client, "app=web", 2, 300).await?;

    let claims: Api<NodeClaim> = Api::all(client.clone());
    let (old, created) = only_claim(&claims).await?;
    let old_name = old.name_any();
    let status = old.status.clone().unwrap_or_default();
    let (old_node, old_instance) = (
        status.node_name.ok_or("no node")?,
        status.provider_id.ok_or("no instance")?,
    );

    // Expired: deleted once expireAfter has passed (within a disruption pass of 10 s), not before.
    let mut deleted_at = None;
    for _ in 0..(15 * 60) {
        let claim = claims.get_opt(&old_name).await?.ok_or("the NodeClaim vanished")?;
        if let Some(t) = &claim.metadata.deletion_timestamp {
            deleted_at = Some(t.0);
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let deleted_at = deleted_at.ok_or("the NodeClaim did not expire")?;
    let expired_after = seconds_between(created, deleted_at);
    let expire_after = i64::try_from(EXPIRE_AFTER.as_secs())?;
    assert!(
        (expire_after..=expire_after + 15).contains(&expired_after),
        "deleted {expired_after}s after its creation"
    );

    // The drain: evictions refused by the PDB, the pods stay on the node until their own grace period (the
    // default 30 s) would overrun the node's; then they are deleted so that they are gone by the deadline.
    let grace = i64::try_from(GRACE.as_secs())? - POD_GRACE_SECONDS;
    let mut forced_at = None;
    for _ in 0..(10 * 60) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let since = seconds_between(deleted_at, h.sim.clock().now());
        if invariants::pod_deletes_bypassing_eviction(&h.sim) > 0 {
            forced_at = Some(since);
            break;
        }
        assert!(
            since <= grace + 15,
            "{since}s after the deletion, the pods are still not removed"
        );
        let on_old_node = running_pods(&client, "app=web")
            .await?
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(old_node.as_str()))
            .count();
        assert!(
            on_old_node == 2 || since >= grace,
            "{since}s after the deletion, a pod left before the grace period ended"
        );
    }
    let forced_at = forced_at.ok_or("the blocking pods were never removed")?;
    assert!(
        (grace..=grace + 15).contains(&forced_at),
        "the blocking pods were removed {forced_at}s after the deletion, expected from {grace}s (deadline minus their grace)"
    );
    assert!(evictions_refused(&h) > 0, "the drain asked for evictions first");

    // The node goes, and the pods get a new one.
    until_running(&client, "app=web", 2, 300).await?;
    for _ in 0..120 {
        if claims.get_opt(&old_name).await?.is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        claims.get_opt(&old_name).await?.is_none(),
        "the expired NodeClaim is gone"
    );
    assert!(
        Api::<Node>::all(client.clone())
            .get_opt(&old_node)
            .await?
            .is_none(),
        "its Node is gone"
    );
    assert!(
        h.sim
            .cloud()
            .instance(&old_instance)
            .is_some_and(|i| !i.is_running()),
        "its instance is terminated"
    );
    for pod in running_pods(&client, "app=web").await? {
        assert_ne!(
            pod.spec.and_then(|s| s.node_name).as_deref(),
            Some(old_node.as_str())
        );
    }
    let now = claims.list(&ListParams::default()).await?;
    assert_eq!(now.items.len(), 1, "one replacement");
    invariants::settle(60, Duration::from_secs(5), || {
        invariants::instance_problems(&h.sim)
    })
    .await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn expiration_does_not_wait_for_a_disruption_command_in_flight() -> TestResult {
    let h = Harness::start_with(Controllers { disruption: true })?;
    let client = h.client();
    let pool = |team: &str| -> Result<NodePool, serde_json::Error> {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"metadata": {"labels": {"team": team}}, "spec": {
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "expireAfter": "10m"}},
                "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never",
                    "budgets": [{"nodes": "1"}]}}
        }))
    };
    let pools: Api<NodePool> = Api::all(client.clone());
    pools.create(&PostParams::default(), &pool("a")?).await?;
    apply_deployment(&client, "web", 1, "500m").await?;
    until_running(&client, "app=web", 1, 300).await?;
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let (old, created) = only_claim(&claims).await?;
    let old_name = old.name_any();

    // Four minutes in, the template changes and the node drifts; its replacement never registers, so the drift
    // command waits on it (up to the 10-minute replacement timeout, past the old node's expiry).
    tokio::time::sleep(Duration::from_secs(240)).await;
    h.sim.cloud().set_never_register(true);
    drift_nodepool(&client, "default").await?;
    let mut command_seen = false;
    let mut deleted_at = None;
    for _ in 0..(15 * 60) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        command_seen |= claims.list(&ListParams::default()).await?.items.len() > 1;
        let claim = claims.get_opt(&old_name).await?.ok_or("the NodeClaim vanished")?;
        if let Some(t) = &claim.metadata.deletion_timestamp {
            deleted_at = Some(t.0);
            break;
        }
    }
    assert!(command_seen, "the drift command launched a replacement");
    let deleted_at = deleted_at.ok_or("the NodeClaim did not expire")?;
    let expired_after = seconds_between(created, deleted_at);
    let expire_after = i64::try_from(EXPIRE_AFTER.as_secs())?;
    assert!(
        (expire_after..=expire_after + 15).contains(&expired_after),
        "deleted {expired_after}s after its creation, while the drift command waited"
    );
    Ok(())
}
