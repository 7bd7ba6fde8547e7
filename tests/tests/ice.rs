//! Insufficient capacity: when the cheapest offerings have none, each launch that picks one fails, its NodeClaim
//! is deleted, the offering is cached unavailable, and the next NodeClaim lands on another offering; the pods
//! run, and no launch tries an offering again while it is cached unavailable (three minutes). Once the capacity
//! is back and the cache has expired, the cheap offering is used again.

use std::{collections::BTreeSet, time::Duration};

use k8s_openapi::api::apps::v1::Deployment;
use karpenter_e2e::{
    Harness, TestResult, apply_deployment, apply_nodepool, replicas::invariants, until_running,
};
use karpenter_sim::{OfferingKey, cloud::LaunchOutcome};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};

/// The sim cloud's unavailable-offerings cache (`SimCloudOptions::unavailable_offering_ttl`'s default).
const UNAVAILABLE_TTL: Duration = Duration::from_secs(180);

async fn scale(client: &kube::Client, replicas: i32) -> TestResult {
    Api::<Deployment>::namespaced(client.clone(), "default")
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn launches_fall_back_from_offerings_without_capacity_and_do_not_retry_them() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    let cloud = h.sim.cloud();
    // The two cheapest offerings in the test catalog: small (0.04/h) and medium (0.08/h) spot in test-zone-1.
    let exhausted = [
        OfferingKey::new("small-instance-type", "test-zone-1", "spot"),
        OfferingKey::new("medium-instance-type", "test-zone-1", "spot"),
    ];
    for offering in &exhausted {
        cloud.set_insufficient_capacity(offering.clone(), true);
    }
    apply_nodepool(&client, "default", &["spot", "on-demand"], Value::Null).await?;
    apply_deployment(&client, "web", 2, "500m").await?;
    until_running(&client, "app=web", 2, 300).await?;

    let log = cloud.launch_log();
    let first_ice = log.first().ok_or("nothing was launched")?;
    assert_eq!(
        first_ice.outcome,
        LaunchOutcome::InsufficientCapacity,
        "the cheapest offering is tried first: {log:?}"
    );
    assert_eq!(first_ice.offering.as_ref(), Some(&exhausted[0]));
    let launched: Vec<_> = log
        .iter()
        .filter(|r| matches!(r.outcome, LaunchOutcome::Launched { .. }))
        .collect();
    assert_eq!(launched.len(), 1, "{log:?}");
    let success = log
        .iter()
        .position(|r| matches!(r.outcome, LaunchOutcome::Launched { .. }))
        .ok_or("no launch succeeded")?;
    assert!(
        log[..success]
            .iter()
            .all(|r| r.outcome == LaunchOutcome::InsufficientCapacity),
        "the failures come before the success: {log:?}"
    );
    assert_eq!(
        log[..success]
            .iter()
            .filter_map(|r| r.offering.clone())
            .collect::<BTreeSet<_>>(),
        exhausted.iter().cloned().collect(),
        "each cheaper offering without capacity was tried once: {log:?}"
    );
    // The pods run on the cheapest offering left: small on demand.
    let instance = cloud.running_instances().pop().ok_or("no instance running")?;
    assert!(!exhausted.contains(&instance.offering));
    assert_eq!(instance.offering.instance_type, "small-instance-type");
    assert_eq!(instance.offering.capacity_type, "on-demand");

    // More pods while the offerings are cached unavailable: new nodes, and no launch tries them again.
    scale(&client, 6).await?;
    until_running(&client, "app=web", 6, 120).await?;
    scale(&client, 12).await?;
    until_running(&client, "app=web", 12, 120).await?;
    let within_ttl = h.sim.clock().now().duration_since(first_ice.at).as_secs();
    assert!(
        within_ttl < i64::try_from(UNAVAILABLE_TTL.as_secs())?,
        "the scale-up took {within_ttl}s"
    );
    let log = cloud.launch_log();
    assert!(
        invariants::instances_launched(&h.sim) > 1,
        "the scale-up launched: {log:?}"
    );
    for offering in &exhausted {
        let tries = log
            .iter()
            .filter(|r| r.offering.as_ref() == Some(offering))
            .count();
        assert_eq!(tries, 1, "{offering} was tried again while unavailable: {log:?}");
    }
    invariants::settle(60, Duration::from_secs(5), || {
        invariants::instance_problems(&h.sim)
    })
    .await?;

    // Capacity back, the cache expired: the next launch takes the cheap spot offering again.
    for offering in &exhausted {
        cloud.set_insufficient_capacity(offering.clone(), false);
    }
    tokio::time::sleep(UNAVAILABLE_TTL).await;
    let before = cloud.launch_log().len();
    scale(&client, 40).await?;
    until_running(&client, "app=web", 40, 120).await?;
    let later = cloud.launch_log().split_off(before);
    assert!(
        later
            .iter()
            .any(|r| matches!(r.outcome, LaunchOutcome::Launched { .. })
                && r.offering.as_ref().is_some_and(|o| o.capacity_type == "spot")),
        "spot is used again once available: {later:?}"
    );
    Ok(())
}
