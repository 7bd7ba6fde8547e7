//! The disruption controller's bookkeeping end to end: the NodeClaims' Consolidatable and Drifted conditions,
//! DisruptionBlocked events for a node a budget holds (one series per message, not one Event every pass), and
//! the 15-second validation that abandons a consolidation whose candidate changed meanwhile and carries out one
//! that did not.

use std::time::Duration;

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Node, events::v1::Event};
use karpenter_api::{
    common::{ConditionStatus, find_condition},
    label_policy::LabelPolicy,
    labels,
    nodeclaim::NodeClaim,
};
use karpenter_core::{catalog::CatalogFile, disruption::pass::Method, snapshot::BuildOptions};
use karpenter_disruption::{
    DisruptionController, DisruptionSettings, Tick, blocked_events::DISRUPTION_BLOCKED,
};
use karpenter_e2e::{
    CATALOG, Controllers, Harness, TestResult, apply_deployment, apply_nodepool, running_pods, until_running,
};
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;

fn condition(claim: &NodeClaim, type_: &str) -> Option<(ConditionStatus, String)> {
    let c = find_condition(&claim.status.as_ref()?.conditions, type_)?;
    Some((c.status, c.reason.clone()))
}

#[tokio::test(start_paused = true)]
async fn claims_carry_consolidatable_and_drifted_and_a_held_node_says_why_once() -> TestResult {
    let h = Harness::start_with(Controllers { disruption: true })?;
    let client = h.client();
    // A zero budget: nothing may be disrupted, so the drifted node stays and says why.
    let disruption = json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "60s",
        "budgets": [{"nodes": "0"}]});
    apply_nodepool(&client, "default", &["on-demand"], disruption).await?;
    apply_deployment(&client, "web", 2, "500m").await?;
    until_running(&client, "app=web", 2, 300).await?;

    let claims: Api<NodeClaim> = Api::all(client.clone());
    let claim = claims.list(&ListParams::default()).await?.items.remove(0);
    let name = claim.name_any();
    assert_eq!(
        condition(&claim, "Consolidatable"),
        None,
        "consolidateAfter has not passed yet"
    );

    tokio::time::sleep(Duration::from_secs(90)).await;
    let claim = claims.get(&name).await?;
    assert_eq!(
        condition(&claim, "Consolidatable"),
        Some((ConditionStatus::True, "Consolidatable".to_string()))
    );
    assert_eq!(condition(&claim, "Drifted"), None);

    let instance = claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .ok_or("no instance")?;
    h.sim.cloud().set_drifted(&instance, Some("AMIDrift"));
    tokio::time::sleep(Duration::from_secs(20)).await;
    let claim = claims.get(&name).await?;
    assert_eq!(
        condition(&claim, "Drifted"),
        Some((ConditionStatus::True, "AMIDrift".to_string()))
    );
    assert!(claim.metadata.deletion_timestamp.is_none(), "the budget holds it");

    // Five more minutes of 10-second passes: each reason the node is held for is one Event (a series),
    // published every 2 minutes, not 30 times.
    tokio::time::sleep(Duration::from_secs(300)).await;
    let events = Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await?;
    let on_claim: Vec<(String, i32)> = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some(DISRUPTION_BLOCKED))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str()))
        .map(|e| {
            let note = e.note.clone().unwrap_or_default();
            (note, e.series.as_ref().map_or(1, |s| s.count))
        })
        .collect();
    let mut notes: Vec<&str> = on_claim.iter().map(|(note, _)| note.as_str()).collect();
    notes.sort_unstable();
    notes.dedup();
    assert_eq!(notes.len(), on_claim.len(), "one Event per message: {on_claim:?}");
    let (drifted, published) = on_claim
        .iter()
        .find(|(note, _)| note.contains("drifted"))
        .ok_or_else(|| format!("no event says the drifted node is held: {on_claim:?}"))?;
    assert!(drifted.contains("budget"), "{drifted}");
    assert!(*published <= 4, "published {published} times in 5 minutes");

    h.sim.cloud().set_drifted(&instance, None);
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        condition(&claims.get(&name).await?, "Drifted"),
        None,
        "cleared when no longer drifted"
    );
    Ok(())
}

/// A disruption controller the test ticks itself, configured as the harness configures its own.
fn controller(h: &Harness) -> Result<DisruptionController, Box<dyn std::error::Error + Send + Sync>> {
    let catalog = CatalogFile::from_json_str(CATALOG)?;
    Ok(DisruptionController::new(
        h.context(),
        h.sim.cloud_provider(),
        DisruptionSettings {
            build: BuildOptions {
                label_policy: LabelPolicy::Core,
                extra_well_known_labels: catalog.well_known_labels,
                ..BuildOptions::default()
            },
            ..DisruptionSettings::default()
        },
    ))
}

/// Two large nodes (one 5-CPU pod each), then one pod: returns the node left empty.
async fn one_empty_node(h: &Harness) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let client = h.client();
    apply_nodepool(
        &client,
        "default",
        &["on-demand"],
        json!({"consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]}),
    )
    .await?;
    apply_deployment(&client, "big", 2, "5").await?;
    until_running(&client, "app=big", 2, 300).await?;
    Api::<Deployment>::namespaced(client.clone(), "default")
        .patch(
            "big",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await?;
    until_running(&client, "app=big", 1, 120).await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let busy: Vec<String> = running_pods(&client, "app=big")
        .await?
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .find(|n| !busy.contains(n))
        .ok_or_else(|| "no empty node".into())
}

#[tokio::test(start_paused = true)]
async fn a_consolidation_whose_candidate_changes_within_fifteen_seconds_is_abandoned() -> TestResult {
    let h = Harness::start()?;
    let empty = one_empty_node(&h).await?;
    let disruption = controller(&h)?;
    let nodes: Api<Node> = Api::all(h.client());
    let protect = async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let patch = json!({"metadata": {"annotations": {labels::DO_NOT_DISRUPT_ANNOTATION: "true"}}});
        nodes
            .patch(&empty, &PatchParams::default(), &Patch::Merge(patch))
            .await
    };
    let (tick, protected) = tokio::join!(disruption.tick(), protect);
    protected?;
    match tick? {
        Tick::Abandoned { method, why } => {
            assert_eq!(method, Method::Emptiness);
            // Taken again, the protected node is no candidate (the pass may now prefer to move the other
            // node's pod onto it instead, a different command): either way, not what was decided.
            assert!(
                why.starts_with("the decision changed during validation: emptiness delete ["),
                "{why}"
            );
        }
        other => return Err(format!("expected the command to be abandoned, got {other:?}").into()),
    }
    let node = nodes.get(&empty).await?;
    let tainted = node
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .iter()
        .any(|t| t.key == labels::DISRUPTED_TAINT_KEY);
    assert!(!tainted, "nothing was done to the node");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn an_unchanged_consolidation_goes_ahead_after_fifteen_seconds() -> TestResult {
    let h = Harness::start()?;
    let empty = one_empty_node(&h).await?;
    let disruption = controller(&h)?;
    let clock = h.sim.clock();
    let decided = clock.now();
    match disruption.tick().await? {
        Tick::Started(command) => {
            assert_eq!(command.method, Method::Emptiness);
            assert_eq!(
                command
                    .candidates
                    .iter()
                    .map(|(_, n)| n.as_str())
                    .collect::<Vec<_>>(),
                vec![empty.as_str()]
            );
            let waited = command.started.duration_since(decided);
            assert!(
                waited.as_secs() >= 15,
                "carried out after {waited:?}, before the validation delay"
            );
            // The chosen claim says why it is going, as upstream's DisruptionReason condition.
            let (claim, _) = &command.candidates[0];
            let claim = Api::<NodeClaim>::all(h.client()).get(claim).await?;
            assert_eq!(
                condition(&claim, "DisruptionReason"),
                Some((ConditionStatus::True, "Empty".to_string()))
            );
        }
        other => return Err(format!("expected the command to start, got {other:?}").into()),
    }
    Ok(())
}
