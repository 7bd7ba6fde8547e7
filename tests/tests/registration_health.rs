//! A NodePool's NodeRegistrationHealthy condition: False once half of its recent NodeClaims never registered
//! (each deleted by liveness after 15 minutes), Ready untouched; Unknown again when its spec changes; True when a
//! claim of the changed pool registers.

use std::time::Duration;

use karpenter_api::{common::ConditionStatus, nodepool::NodePool};
use karpenter_e2e::{Harness, TestResult, apply_deployment, apply_nodepool};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};

/// The pool's condition `type_` as (status, reason, message).
async fn condition(
    pools: &Api<NodePool>,
    type_: &str,
) -> Result<Option<(ConditionStatus, String, String)>, kube::Error> {
    let pool = pools.get("default").await?;
    Ok(pool
        .status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason, c.message)))
}

/// Waits (virtual seconds) until the pool's NodeRegistrationHealthy has `status`.
async fn until_health(pools: &Api<NodePool>, status: ConditionStatus, within_secs: u64) -> TestResult {
    for _ in 0..within_secs {
        if condition(pools, "NodeRegistrationHealthy")
            .await?
            .is_some_and(|c| c.0 == status)
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let found = condition(pools, "NodeRegistrationHealthy").await?;
    Err(format!("NodeRegistrationHealthy never became {status:?}: {found:?}").into())
}

#[tokio::test(start_paused = true)]
async fn nodes_that_never_register_make_the_pool_unhealthy_until_its_spec_changes() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    h.sim.cloud().set_never_register(true);
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    let pools: Api<NodePool> = Api::all(client.clone());
    until_health(&pools, ConditionStatus::Unknown, 60).await?;
    apply_deployment(&client, "web", 1, "500m").await?;
    // The first claim is deleted after 15 minutes: one failure in four is not enough.
    tokio::time::sleep(Duration::from_secs(20 * 60)).await;
    assert_eq!(
        condition(&pools, "NodeRegistrationHealthy").await?.map(|c| c.0),
        Some(ConditionStatus::Unknown)
    );
    // The second is: half of the window failed.
    until_health(&pools, ConditionStatus::False, 20 * 60).await?;
    assert_eq!(
        condition(&pools, "NodeRegistrationHealthy").await?,
        Some((
            ConditionStatus::False,
            "RegistrationFailed".to_string(),
            "Failed to register node".to_string()
        ))
    );
    assert_eq!(
        condition(&pools, "Ready").await?.map(|c| c.0),
        Some(ConditionStatus::True),
        "registration health does not gate Ready"
    );

    // The user fixes the cause and edits the pool: the condition starts over, and the next registration
    // makes it True.
    h.sim.cloud().set_never_register(false);
    pools
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"limits": {"cpu": "1000"}}})),
        )
        .await?;
    until_health(&pools, ConditionStatus::Unknown, 60).await?;
    until_health(&pools, ConditionStatus::True, 30 * 60).await?;
    let pool = pools.get("default").await?;
    let healthy = pool
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "NodeRegistrationHealthy"))
        .ok_or("no condition")?;
    assert_eq!(healthy.observed_generation, pool.metadata.generation);
    assert!(
        pool.status
            .as_ref()
            .and_then(|s| s.node_class_observed_generation)
            .is_some()
    );
    Ok(())
}
