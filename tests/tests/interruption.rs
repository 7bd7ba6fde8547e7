//! A spot interruption warning: the NodeClaim is deleted at once, its Node drained (within the two-minute notice
//! the instance still runs), the provisioner launches room for the evicted pods, and the instance is gone.

use std::time::Duration;

use karpenter_api::nodeclaim::NodeClaim;
use karpenter_e2e::{Harness, TestResult, apply_deployment, apply_nodepool, until_running};
use karpenter_sim::cloud::InterruptionKind;
use kube::{Api, ResourceExt, api::ListParams};
use serde_json::Value;

#[tokio::test(start_paused = true)]
async fn a_spot_interruption_deletes_the_nodeclaim_at_once_and_the_pods_move() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    apply_nodepool(&client, "spot", &["spot"], Value::Null).await?;
    apply_deployment(&client, "worker", 4, "500m").await?;
    until_running(&client, "app=worker", 4, 300).await?;

    let claims: Api<NodeClaim> = Api::all(client.clone());
    let before = claims.list(&ListParams::default()).await?;
    assert_eq!(before.items.len(), 1);
    let old_name = before.items[0].name_any();
    let old_instance = before.items[0]
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .ok_or("no instance")?;

    let at = h.sim.clock().now();
    h.sim
        .cloud()
        .schedule_interruption(&old_instance, InterruptionKind::SpotInterruption, at);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let deleting = claims.get_opt(&old_name).await?;
    assert!(
        deleting.is_none_or(|c| c.metadata.deletion_timestamp.is_some()),
        "the NodeClaim is deleted as soon as the warning arrives"
    );

    until_running(&client, "app=worker", 4, 600).await?;
    for _ in 0..300 {
        if claims.get_opt(&old_name).await?.is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        claims.get_opt(&old_name).await?.is_none(),
        "the interrupted NodeClaim is gone"
    );
    let after = claims.list(&ListParams::default()).await?;
    assert_eq!(after.items.len(), 1, "one replacement");
    assert!(
        h.sim
            .cloud()
            .running_instances()
            .iter()
            .all(|i| i.provider_id != old_instance),
        "the interrupted instance is gone"
    );
    Ok(())
}
