//! A launch that fails for a reason other than capacity (a quota, a permission) is retried after a back-off that
//! doubles per claim (1 s, 2 s, 4 s, ...), not on every lifecycle pass; meanwhile the claim's `Launched`
//! condition says why. A claim that cannot launch in 5 minutes is deleted, and two such make the NodePool's
//! NodeRegistrationHealthy False with the launch's reason.

use std::time::Duration;

use karpenter_api::{common::ConditionStatus, nodeclaim::NodeClaim, nodepool::NodePool};
use karpenter_e2e::{Harness, TestResult, apply_deployment, apply_nodepool, until_running};
use kube::{Api, api::ListParams};
use serde_json::Value;

#[tokio::test(start_paused = true)]
async fn failed_launches_back_off_and_show_on_the_claim() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    h.sim.cloud().set_failing_launches(Some((
        "VcpuLimitExceeded",
        "You have requested more vCPU capacity than allowed",
    )));
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    apply_deployment(&client, "web", 1, "500m").await?;
    let claims: Api<NodeClaim> = Api::all(client.clone());
    for _ in 0..120 {
        if !h.sim.cloud().failed_launches().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(70)).await;
    let attempts = h.sim.cloud().failed_launches();
    let gaps: Vec<i64> = attempts
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_secs())
        .collect();
    // 1 + 2 + 4 + 8 + 16 + 32 = 63 s: seven attempts in the first 70 s, where retrying every pass would make 70.
    assert!(
        (6..=8).contains(&attempts.len()),
        "{} attempts, gaps {gaps:?}",
        attempts.len()
    );
    assert!(
        gaps.windows(2).all(|g| g[1] >= 2 * g[0] - 1),
        "the waits double: {gaps:?}"
    );
    let claim = claims.list(&ListParams::default()).await?.items.remove(0);
    let launched = claim
        .status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Launched")
        .ok_or("no Launched condition")?;
    assert_eq!(
        (
            launched.status,
            launched.reason.as_str(),
            launched.message.as_str()
        ),
        (
            ConditionStatus::Unknown,
            "VcpuLimitExceeded",
            "You have requested more vCPU capacity than allowed"
        )
    );

    // Two claims deleted for not launching in 5 minutes: the pool's registration health says why.
    let pools: Api<NodePool> = Api::all(client.clone());
    let mut health = None;
    for _ in 0..15 * 60 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        health = pools
            .get("default")
            .await?
            .status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "NodeRegistrationHealthy" && c.status == ConditionStatus::False);
        if health.is_some() {
            break;
        }
    }
    let health = health.ok_or("NodeRegistrationHealthy never became False")?;
    assert_eq!(health.reason, "VcpuLimitExceeded");

    // Launches work again: the next claim launches and the pods run.
    h.sim.cloud().set_failing_launches(None);
    until_running(&client, "app=web", 1, 15 * 60).await?;
    Ok(())
}
