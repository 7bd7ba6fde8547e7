//! NodeClaim consistency: a launched claim is checked against its Node every 10 minutes; a Node reporting far
//! less of a requested resource than the launch promised makes `ConsistentStateFound` False with a
//! `FailedConsistencyCheck` event, and so does a NodeClaim being deleted whose drain a PodDisruptionBudget blocks.

use std::time::Duration;

use k8s_openapi::api::{core::v1::Node, events::v1::Event};
use karpenter_api::{common::ConditionStatus, nodeclaim::NodeClaim};
use karpenter_e2e::{Harness, TestResult, apply_deployment, apply_nodepool, apply_pdb, until_running};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};

/// The claim's ConsistentStateFound as (status, reason, message).
async fn consistent(
    claims: &Api<NodeClaim>,
    name: &str,
) -> Result<Option<(ConditionStatus, String, String)>, kube::Error> {
    let claim = claims.get(name).await?;
    Ok(claim
        .status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "ConsistentStateFound")
        .map(|c| (c.status, c.reason, c.message)))
}

#[tokio::test(start_paused = true)]
async fn a_node_smaller_than_its_claim_is_reported_inconsistent() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    apply_deployment(&client, "web", 1, "500m").await?;
    until_running(&client, "app=web", 1, 300).await?;
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let claim = claims.list(&ListParams::default()).await?.items.remove(0);
    let name = claim.name_any();
    // The first scan came at launch, before the Node registered; the next, 10 minutes on, finds it consistent.
    tokio::time::sleep(Duration::from_secs(11 * 60)).await;
    assert_eq!(
        consistent(&claims, &name).await?.map(|c| c.0),
        Some(ConditionStatus::True)
    );

    // The Node now reports a fraction of the memory the claim was launched with.
    let node_name = claims
        .get(&name)
        .await?
        .status
        .and_then(|s| s.node_name)
        .ok_or("no node")?;
    let nodes: Api<Node> = Api::all(client.clone());
    let expected = claim
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("memory"))
        .map(|q| q.0.clone())
        .ok_or("no memory capacity")?;
    nodes
        .patch_status(
            &node_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"capacity": {"memory": "1Gi"}}})),
        )
        .await?;
    tokio::time::sleep(Duration::from_secs(10 * 60)).await;
    assert_eq!(
        consistent(&claims, &name).await?,
        Some((
            ConditionStatus::False,
            "ConsistencyCheckFailed".to_string(),
            "Consistency Check Failed".to_string()
        ))
    );
    let events = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let event = events
        .items
        .iter()
        .find(|e| e.reason.as_deref() == Some("FailedConsistencyCheck"))
        .ok_or("no FailedConsistencyCheck event")?;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some(name.as_str())
    );
    let note = event.note.clone().unwrap_or_default();
    assert!(
        note.starts_with(&format!(
            "expected {expected} of resource memory, but found 1Gi ("
        )),
        "{note}"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_drain_a_budget_blocks_is_reported_inconsistent() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    apply_deployment(&client, "web", 1, "500m").await?;
    apply_pdb(&client, "web", 0).await?;
    until_running(&client, "app=web", 1, 300).await?;
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let name = claims
        .list(&ListParams::default())
        .await?
        .items
        .remove(0)
        .name_any();
    claims.delete(&name, &DeleteParams::default()).await?;
    let mut found = None;
    for _ in 0..11 * 60 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        found = consistent(&claims, &name).await?;
        if found.as_ref().is_some_and(|c| c.0 == ConditionStatus::False) {
            break;
        }
    }
    assert_eq!(
        found.map(|c| (c.0, c.1)),
        Some((ConditionStatus::False, "ConsistencyCheckFailed".to_string()))
    );
    let events = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("FailedConsistencyCheck")
                && e.note.as_deref() == Some("can't drain node, PDB \"default/web\" is blocking evictions")),
        "no FailedConsistencyCheck event naming the budget"
    );
    Ok(())
}
