//! Node repair end to end on the simulated cluster: a node NotReady for longer than the provider's toleration
//! (30 minutes in the simulator) has its NodeClaim force-terminated and its pods find room on a new node; when
//! more than 20% of a NodePool's nodes are unhealthy, repair waits and says so with NodeRepairBlocked events.

use std::time::Duration;

use k8s_openapi::api::{core::v1::Node, events::v1::Event};
use karpenter_api::{labels, nodeclaim::NodeClaim};
use karpenter_e2e::{Harness, TestResult, apply_deployment, apply_nodepool, running_pods, until_running};
use karpenter_repair::{NODE_REPAIR_BLOCKED, NodeRepairController};
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};

/// Starts the repair controller beside the harness's controllers; abort the handle to stop it.
fn start_repair(h: &Harness) -> tokio::task::JoinHandle<()> {
    let repair = NodeRepairController::new(h.context(), h.sim.cloud_provider());
    tokio::spawn(async move { repair.run().await })
}

/// Sets the Node's Ready condition to `status` as of now, as a kubelet (or its absence) would.
async fn set_ready(h: &Harness, node: &str, status: &str) -> TestResult {
    let nodes: Api<Node> = Api::all(h.client());
    let now = h.sim.clock().now();
    let current = nodes.get(node).await?;
    let mut conditions: Vec<Value> = current
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.type_ != "Ready")
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    conditions.push(
        json!({"type": "Ready", "status": status, "reason": "Test", "message": "set by the test",
        "lastTransitionTime": api_time(now), "lastHeartbeatTime": api_time(now)}),
    );
    nodes
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": conditions}})),
        )
        .await?;
    Ok(())
}

/// A timestamp as the API writes it.
fn api_time(t: jiff::Timestamp) -> String {
    jiff::Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

async fn claim_of_node(
    claims: &Api<NodeClaim>,
    node: &str,
) -> Result<NodeClaim, Box<dyn std::error::Error + Send + Sync>> {
    claims
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .ok_or_else(|| format!("no NodeClaim for node {node}").into())
}

fn is_deleting(claim: &Option<NodeClaim>) -> bool {
    claim
        .as_ref()
        .is_none_or(|c| c.metadata.deletion_timestamp.is_some())
}

#[tokio::test(start_paused = true)]
async fn a_node_not_ready_past_its_toleration_is_replaced() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    // 5 CPUs: one pod per (large) node.
    apply_deployment(&client, "big", 1, "5").await?;
    until_running(&client, "app=big", 1, 300).await?;
    let repair = start_repair(&h);

    let old_node = running_pods(&client, "app=big").await?[0]
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .ok_or("pod not bound")?;
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let old_claim = claim_of_node(&claims, &old_node).await?.name_any();
    set_ready(&h, &old_node, "False").await?;

    tokio::time::sleep(Duration::from_secs(29 * 60)).await;
    assert!(
        !is_deleting(&claims.get_opt(&old_claim).await?),
        "repaired before its toleration ran out"
    );

    let mut repaired = None;
    for _ in 0..120 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let claim = claims.get_opt(&old_claim).await?;
        if is_deleting(&claim) {
            repaired = Some(claim);
            break;
        }
    }
    let repaired = repaired.ok_or("the NodeClaim was not deleted within 31 minutes")?;
    if let Some(claim) = repaired {
        assert!(
            claim
                .annotations()
                .contains_key(labels::NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION),
            "the repair sets the termination timestamp so the drain does not wait"
        );
    }
    // The pod moves: the drain evicts it and a replacement node is launched for it.
    let mut moved = false;
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let pods = running_pods(&client, "app=big").await?;
        if pods
            .iter()
            .any(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(old_node.as_str()))
        {
            moved = true;
            break;
        }
    }
    assert!(moved, "the pod runs on a replacement node");
    repair.abort();
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn repair_waits_while_more_than_a_fifth_of_the_pool_is_unhealthy() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    apply_deployment(&client, "big", 2, "5").await?;
    until_running(&client, "app=big", 2, 300).await?;
    let repair = start_repair(&h);

    let claims: Api<NodeClaim> = Api::all(client.clone());
    let nodes: Vec<String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(nodes.len(), 2);
    let mut node_claims = Vec::new();
    for node in &nodes {
        node_claims.push(claim_of_node(&claims, node).await?.name_any());
        set_ready(&h, node, "False").await?;
    }

    // Both of two nodes unhealthy is more than 20%: nothing is repaired, and the NodePool says why.
    tokio::time::sleep(Duration::from_secs(40 * 60)).await;
    for claim in &node_claims {
        assert!(
            !is_deleting(&claims.get_opt(claim).await?),
            "{claim} was repaired through the breaker"
        );
    }
    let events = Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await?;
    let blocked: Vec<&Event> = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some(NODE_REPAIR_BLOCKED))
        .collect();
    let on_pool = blocked
        .iter()
        .find(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("NodePool"))
        .ok_or("no NodeRepairBlocked event on the NodePool")?;
    assert_eq!(
        on_pool.note.as_deref(),
        Some("2 of 2 nodes in NodePool default are unhealthy, more than 20%: node repair is paused")
    );
    // One Event per object (the NodePool and its two nodes), repeated as a series every 2 minutes from when
    // the tolerations ran out (minute 30), not once per 10-second pass.
    assert_eq!(blocked.len(), 3);
    let repeats = on_pool.series.as_ref().map_or(1, |s| s.count);
    assert!(
        (5..=6).contains(&repeats),
        "published {repeats} times in 10 minutes"
    );

    // One node recovers: one unhealthy node of two is within the breaker, so the other is repaired.
    set_ready(&h, &nodes[0], "True").await?;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if is_deleting(&claims.get_opt(&node_claims[1]).await?) {
            break;
        }
    }
    assert!(
        is_deleting(&claims.get_opt(&node_claims[1]).await?),
        "the unhealthy node is repaired"
    );
    assert!(
        !is_deleting(&claims.get_opt(&node_claims[0]).await?),
        "the recovered node stays"
    );
    repair.abort();
    Ok(())
}
