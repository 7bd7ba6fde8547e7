//! End to end on karpenter-sim, on a virtual clock: a Deployment scaled from zero gets NodeClaims from the
//! provisioner, the lifecycle launches, registers and initializes them, the simulated kube-scheduler binds the
//! pods and the simulated kubelets run them.

use std::time::Duration;

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Node, events::v1::Event};
use karpenter_api::{
    common::{ConditionStatus, find_condition},
    labels,
    nodeclaim::{NodeClaim, conditions},
};
use karpenter_e2e::{Harness, TestResult, apply_deployment, apply_nodepool, running_pods, until_running};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};

#[tokio::test(start_paused = true)]
async fn a_deployment_scaled_from_zero_gets_nodes_and_runs() -> TestResult {
    let h = Harness::start()?;
    let client = h.sim.client();
    apply_nodepool(&client, "default", &["spot", "on-demand"], Value::Null).await?;
    apply_deployment(&client, "web", 6, "500m").await?;
    until_running(&client, "app=web", 6, 300).await?;

    let claims = Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    assert!(!claims.items.is_empty());
    for claim in &claims.items {
        let status = claim.status.clone().unwrap_or_default();
        for c in [
            conditions::LAUNCHED,
            conditions::REGISTERED,
            conditions::INITIALIZED,
            conditions::READY,
        ] {
            assert_eq!(
                find_condition(&status.conditions, c).map(|c| c.status),
                Some(ConditionStatus::True),
                "{c} on {:?}",
                claim.metadata.name
            );
        }
        assert!(status.provider_id.is_some() && status.node_name.is_some());
        let claim_labels = claim.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            claim_labels.get(labels::NODEPOOL_LABEL).map(String::as_str),
            Some("default")
        );
        assert!(
            claim_labels.contains_key(labels::INSTANCE_TYPE_LABEL),
            "the launch's labels are synced"
        );
        assert!(
            claim
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(labels::NODEPOOL_HASH_ANNOTATION))
        );
    }
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    assert_eq!(nodes.items.len(), claims.items.len());
    for node in &nodes.items {
        let node_labels = node.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            node_labels.get(labels::INITIALIZED_LABEL).map(String::as_str),
            Some("true")
        );
        assert_eq!(
            node_labels.get(labels::REGISTERED_LABEL).map(String::as_str),
            Some("true")
        );
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        assert!(taints.iter().all(|t| t.key != labels::UNREGISTERED_TAINT_KEY));
    }

    // Each pod was told where it was going: one Nominated event naming a NodeClaim that was created.
    let claim_names: Vec<String> = claims
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    let events = Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await?;
    for pod in running_pods(&client, "app=web").await? {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let nominated: Vec<&Event> = events
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some("Nominated"))
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str()))
            .collect();
        assert_eq!(nominated.len(), 1, "one Nominated event on pod {name}");
        let note = nominated[0].note.clone().unwrap_or_default();
        let claim = note.strip_prefix("Pod should schedule on: nodeclaim/");
        assert!(
            claim.is_some_and(|c| claim_names.iter().any(|n| n == c)),
            "pod {name} nominated to an existing NodeClaim: {note}"
        );
    }

    // Once every pod runs, time passing launches nothing more: no duplicate launches for pods already placed.
    let launched = h.sim.cloud().launch_log().len();
    assert_eq!(launched, claims.items.len());
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(h.sim.cloud().launch_log().len(), launched);

    // Scaling up again adds capacity for the new pods only.
    Api::<Deployment>::namespaced(client.clone(), "default")
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 12}})),
        )
        .await?;
    until_running(&client, "app=web", 12, 300).await?;
    let claims_after = Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    assert!(claims_after.items.len() > claims.items.len());
    assert_eq!(h.sim.cloud().launch_log().len(), claims_after.items.len());
    Ok(())
}

/// The NodeClaims of one provisioning round are launched together (issue 24): the lifecycle's creates overlap at
/// the cloud provider, which is what lets the AWS provider's CreateFleet batcher merge them into one call.
#[tokio::test(start_paused = true)]
async fn the_claims_of_one_round_are_launched_together() -> TestResult {
    let h = Harness::start()?;
    let client = h.sim.client();
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    // Five CPUs each: one pod per node, so ten NodeClaims from one round.
    apply_deployment(&client, "big", 10, "5").await?;
    until_running(&client, "app=big", 10, 600).await?;
    let claims = Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    assert_eq!(claims.items.len(), 10);
    // One after another, at most one create would ever be under way.
    assert_eq!(h.sim.cloud().peak_concurrent_creates(), 10);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_node_pool_whose_instance_types_cannot_be_listed_does_not_stop_the_others() -> TestResult {
    let h = Harness::start()?;
    let client = h.sim.client();
    h.sim.cloud().set_unlistable_node_pool("broken", true);
    apply_nodepool(&client, "broken", &["spot", "on-demand"], Value::Null).await?;
    apply_nodepool(&client, "default", &["spot", "on-demand"], Value::Null).await?;
    apply_deployment(&client, "web", 4, "500m").await?;
    until_running(&client, "app=web", 4, 300).await?;

    let claims = Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    assert!(!claims.items.is_empty());
    for claim in &claims.items {
        let pool = claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODEPOOL_LABEL));
        assert_eq!(
            pool.map(String::as_str),
            Some("default"),
            "{:?}",
            claim.metadata.name
        );
    }
    Ok(())
}
