//! Consolidation after a scale-down, end to end: empty nodes go, an underused node is replaced by a cheaper
//! one once the replacement is initialized, the drain honours the PDB, and the cluster ends up cheaper with
//! every pod running.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_e2e::{
    Controllers, Harness, TestResult, apply_deployment, apply_nodepool, apply_pdb, running_pods,
    until_running,
};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn a_scale_down_is_consolidated_within_the_pdb_and_costs_less() -> TestResult {
    let h = Harness::start_with(Controllers { disruption: true })?;
    let client = h.client();
    let disruption = json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "30s",
        "budgets": [{"nodes": "100%"}]});
    apply_nodepool(&client, "default", &["on-demand"], disruption).await?;
    apply_deployment(&client, "web", 12, "500m").await?;
    apply_pdb(&client, "web", 1).await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    until_running(&client, "app=web", 12, 600).await?;
    let peak_cost = h.sim.cloud().cost_per_hour_now();

    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await?;
    until_running(&client, "app=web", 2, 120).await?;

    // Give disruption time to act, watching that at least one of the two pods runs throughout.
    let mut fewest = usize::MAX;
    for _ in 0..900 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        fewest = fewest.min(running_pods(&client, "app=web").await?.len());
    }
    assert!(fewest >= 1, "the PodDisruptionBudget was violated");
    until_running(&client, "app=web", 2, 300).await?;

    let claims = Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    assert_eq!(claims.items.len(), 1, "two 500m pods need one node");
    let cost = h.sim.cloud().cost_per_hour_now();
    assert!(cost < peak_cost, "{cost} is not below {peak_cost}");
    // The node left is the cheapest the two pods fit on: the small type on demand (0.1/h in the test catalog).
    assert!((cost - 0.1).abs() < 1e-9, "{cost}");
    Ok(())
}
