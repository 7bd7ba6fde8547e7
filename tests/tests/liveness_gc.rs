//! NodeClaims that never become nodes, and instances that vanish: liveness deletes a claim whose Node does not
//! register within 15 minutes (its instance terminated), garbage collection deletes a claim whose instance was
//! terminated behind Karpenter's back, and in both cases the pods get room elsewhere.

use std::time::Duration;

use karpenter_api::nodeclaim::NodeClaim;
use karpenter_e2e::{Harness, TestResult, apply_deployment, apply_nodepool, until_running};
use kube::{Api, ResourceExt, api::ListParams};
use serde_json::Value;

#[tokio::test(start_paused = true)]
async fn a_node_that_never_registers_is_replaced_after_fifteen_minutes() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    h.sim.cloud().set_never_register(true);
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    apply_deployment(&client, "web", 2, "500m").await?;
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let mut first = None;
    for _ in 0..120 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Launched: its instance runs, and never registers.
        if let Some(c) = claims.list(&ListParams::default()).await?.items.first()
            && c.status.as_ref().is_some_and(|s| s.provider_id.is_some())
        {
            first = Some(c.name_any());
            break;
        }
    }
    let first = first.ok_or("no NodeClaim was launched")?;
    // Instances launched from now on register.
    h.sim.cloud().set_never_register(false);
    tokio::time::sleep(Duration::from_secs(14 * 60)).await;
    assert!(
        claims.get_opt(&first).await?.is_some(),
        "not deleted before the 15 minutes are up"
    );
    until_running(&client, "app=web", 2, 600).await?;
    assert!(
        claims.get_opt(&first).await?.is_none(),
        "the claim that never registered is gone"
    );
    let launched = h.sim.cloud().launch_log().len();
    assert_eq!(
        h.sim.cloud().running_instances().len(),
        1,
        "its instance was terminated ({launched} launches)"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_nodeclaim_whose_instance_vanished_is_collected_and_its_pods_move() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    apply_deployment(&client, "web", 2, "500m").await?;
    until_running(&client, "app=web", 2, 300).await?;
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let claim = claims.list(&ListParams::default()).await?.items.remove(0);
    let instance = claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .ok_or("no instance")?;
    h.sim.cloud().terminate_instance(&instance);
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if claims.get_opt(&claim.name_any()).await?.is_none() {
            break;
        }
    }
    assert!(
        claims.get_opt(&claim.name_any()).await?.is_none(),
        "the orphaned NodeClaim is collected"
    );
    until_running(&client, "app=web", 2, 600).await?;
    Ok(())
}
