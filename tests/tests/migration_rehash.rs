//! Migration from upstream: NodeClaims stamped with upstream's NodePool hash version (`v3`) are re-hashed to
//! this project's version instead of being taken as drifted, and a NodePool change made after the migration
//! drifts them as it drifts NodeClaims this controller launched.

use std::time::Duration;

use karpenter_api::{
    common::find_condition,
    labels::{NODEPOOL_HASH_ANNOTATION, NODEPOOL_HASH_VERSION_ANNOTATION},
    nodeclaim::{NodeClaim, conditions},
    nodepool::{NODEPOOL_HASH_VERSION, NodePool},
};
use karpenter_e2e::{Controllers, Harness, TestResult, apply_deployment, apply_nodepool, until_running};
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;

fn annotation<'a>(claim: &'a NodeClaim, key: &str) -> Option<&'a str> {
    claim.annotations().get(key).map(String::as_str)
}

fn drift_reason(claim: &NodeClaim) -> Option<String> {
    let status = claim.status.as_ref()?;
    find_condition(&status.conditions, conditions::DRIFTED).map(|c| c.reason.clone())
}

#[tokio::test(start_paused = true)]
async fn claims_hashed_by_upstream_are_rehashed_and_drift_after_a_nodepool_change() -> TestResult {
    let h = Harness::start_with(Controllers { disruption: true })?;
    let client = h.client();
    // A budget of zero: drift is recorded on the NodeClaims but no node is replaced, so the test reads the
    // same claims throughout.
    apply_nodepool(
        &client,
        "default",
        &["on-demand"],
        json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never", "budgets": [{"nodes": "0"}]}),
    )
    .await?;
    apply_deployment(&client, "web", 3, "500m").await?;
    until_running(&client, "app=web", 3, 600).await?;

    // What upstream Karpenter left on its NodeClaims: its own hash of the NodePool, under version v3.
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let names: Vec<String> = claims
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert!(!names.is_empty());
    for name in &names {
        claims
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    NODEPOOL_HASH_ANNOTATION: "6043272830079332415",
                    NODEPOOL_HASH_VERSION_ANNOTATION: "v3",
                }}})),
            )
            .await?;
    }

    let pools: Api<NodePool> = Api::all(client.clone());
    let mut rehashed = false;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let pool = pools.get("default").await?;
        let listed = claims.list(&ListParams::default()).await?.items;
        rehashed = listed.len() == names.len()
            && listed.iter().all(|c| {
                annotation(c, NODEPOOL_HASH_VERSION_ANNOTATION) == Some(NODEPOOL_HASH_VERSION)
                    && annotation(c, NODEPOOL_HASH_ANNOTATION) == Some(pool.hash().as_str())
            });
        if rehashed {
            assert_eq!(
                pool.annotations().get(NODEPOOL_HASH_ANNOTATION),
                Some(&pool.hash()),
                "the NodePool carries its hash for comparison"
            );
            break;
        }
    }
    assert!(
        rehashed,
        "the NodeClaims were not re-hashed to {NODEPOOL_HASH_VERSION}"
    );
    // A new hash version alone is no reason to replace nodes.
    tokio::time::sleep(Duration::from_secs(30)).await;
    for claim in claims.list(&ListParams::default()).await?.items {
        assert_eq!(
            drift_reason(&claim),
            None,
            "{} drifted by the migration",
            claim.name_any()
        );
    }

    // A change to the template after the migration drifts the migrated NodeClaims. An annotation, not a label:
    // a label is also a requirement, and requirements drift would not need the hash at all.
    pools
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {"team": "b"}}}}})),
        )
        .await?;
    let mut drifted = Vec::new();
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        drifted = claims
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|c| drift_reason(c).as_deref() == Some("NodePoolDrifted"))
            .map(ResourceExt::name_any)
            .collect();
        if drifted.len() == names.len() {
            break;
        }
    }
    assert_eq!(
        drifted.len(),
        names.len(),
        "drifted after the change: {drifted:?} of {names:?}"
    );
    Ok(())
}
