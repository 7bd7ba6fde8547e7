//! Two controller replicas on one cluster, as the chart runs them: only the holder of the leader Lease
//! provisions; when it crashes (no release) the standby takes over once the Lease has gone unrenewed for its 15
//! seconds and keeps provisioning, and nothing is launched twice; when it shuts down cleanly it releases the
//! Lease and the standby takes over at once.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_e2e::{
    Harness, TestResult, apply_deployment, apply_nodepool,
    replicas::{CreateLog, Replica, invariants, lease_holder, sim},
    until_running,
};
use karpenter_sim::SimCluster;
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};
use tokio::task::LocalSet;

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

/// Waits, one virtual second at a time, until `identity` holds the Lease; returns the seconds waited.
async fn until_holder(
    client: &kube::Client,
    identity: &str,
    within_secs: u64,
) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
    for waited in 0..=within_secs {
        if lease_holder(client).await?.as_deref() == Some(identity) {
            return Ok(waited);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let holder = lease_holder(client).await?;
    Err(format!("{identity} does not hold the Lease after {within_secs}s (holder: {holder:?})").into())
}

fn creates_by(creates: &CreateLog) -> Vec<(String, String)> {
    creates.lock().map(|c| c.clone()).unwrap_or_default()
}

/// Two replicas, "a" started first (so it leads), "b" a second later.
async fn two_replicas(
    sim: &SimCluster,
    creates: &CreateLog,
) -> Result<(Replica, Replica), Box<dyn std::error::Error + Send + Sync>> {
    let a = Replica::start(sim, "a", creates);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let b = Replica::start(sim, "b", creates);
    until_holder(&sim.client(), "a", 10).await?;
    Ok((a, b))
}

/// Replicas of `web` after the scale-up: more than one node's worth.
const PEAK: i32 = 40;

/// What one replica alone launches for the same workload: `web` created with `steps[0]` replicas, then scaled
/// to each next step once every pod runs.
async fn launched_by_one_replica(steps: &[i32]) -> Result<usize, Box<dyn std::error::Error + Send + Sync>> {
    let h = Harness::start()?;
    let client = h.client();
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    for (i, &replicas) in steps.iter().enumerate() {
        if i == 0 {
            apply_deployment(&client, "web", replicas, "500m").await?;
        } else {
            scale(&client, replicas).await?;
        }
        until_running(&client, "app=web", usize::try_from(replicas)?, 300).await?;
    }
    Ok(invariants::instances_launched(&h.sim))
}

#[tokio::test(start_paused = true)]
async fn the_standby_takes_over_a_crashed_leader_and_nothing_is_launched_twice() -> TestResult {
    LocalSet::new()
        .run_until(async {
            let sim = sim()?;
            let client = sim.client();
            let creates = CreateLog::default();
            let (a, b) = two_replicas(&sim, &creates).await?;

            apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
            apply_deployment(&client, "web", 6, "500m").await?;
            until_running(&client, "app=web", 6, 300).await?;
            let before = creates_by(&creates);
            assert!(!before.is_empty(), "nothing was launched");
            assert!(
                before.iter().all(|(who, _)| who == "a"),
                "only the leader launches: {before:?}"
            );

            // A healthy leader keeps the Lease; the standby waits.
            tokio::time::sleep(Duration::from_secs(60)).await;
            assert_eq!(lease_holder(&client).await?.as_deref(), Some("a"));
            assert!(!a.has_exited() && !b.has_exited());

            // The leader crashes while more pods arrive.
            a.crash().await;
            scale(&client, PEAK).await?;
            let mut waited = 0;
            while lease_holder(&client).await?.as_deref() != Some("b") {
                assert!(waited < 30, "b has not taken over {waited}s after the crash");
                if waited < 10 {
                    assert_eq!(
                        lease_holder(&client).await?.as_deref(),
                        Some("a"),
                        "the Lease is not taken before it expires"
                    );
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                waited += 1;
            }
            // 15 s unrenewed, seen within one 2 s retry period, taken on the next one.
            assert!(
                (13..=20).contains(&waited),
                "b took over {waited}s after the crash"
            );
            until_running(&client, "app=web", PEAK as usize, 300).await?;
            assert!(!b.has_exited(), "the new leader keeps running");

            let after: Vec<_> = creates_by(&creates).split_off(before.len());
            assert!(after.len() > 1, "the new leader launched {after:?}");
            assert!(
                after.iter().all(|(who, _)| who == "b"),
                "only the new leader launches: {after:?}"
            );

            // Nothing launched twice: one launch per NodeClaim ever created, no orphan instance, and as many
            // nodes as one replica alone launches for the same workload.
            tokio::time::sleep(Duration::from_secs(180)).await;
            invariants::settle(60, Duration::from_secs(5), || invariants::instance_problems(&sim)).await?;
            let launched = invariants::instances_launched(&sim);
            assert_eq!(launched, invariants::node_claims_created(&sim));
            assert_eq!(launched, sim.cloud().running_instances().len());
            assert_eq!(launched, launched_by_one_replica(&[6, PEAK]).await?);
            until_running(&client, "app=web", PEAK as usize, 1).await?;
            Ok(())
        })
        .await
}

#[tokio::test(start_paused = true)]
async fn a_clean_shutdown_releases_the_lease_and_the_standby_takes_over_at_once() -> TestResult {
    LocalSet::new()
        .run_until(async {
            let sim = sim()?;
            let client = sim.client();
            let creates = CreateLog::default();
            let (a, b) = two_replicas(&sim, &creates).await?;
            apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
            apply_deployment(&client, "web", 2, "500m").await?;
            until_running(&client, "app=web", 2, 300).await?;
            tokio::time::sleep(Duration::from_secs(30)).await;

            a.shutdown().await?;
            assert_eq!(
                lease_holder(&client).await?,
                None,
                "the Lease is released on shutdown"
            );
            // Within one retry period (2 s), far sooner than the 15 s a crash costs.
            let waited = until_holder(&client, "b", 3).await?;
            assert!(waited <= 3);

            scale(&client, 12).await?;
            until_running(&client, "app=web", 12, 300).await?;
            let all = creates_by(&creates);
            let first_b = all
                .iter()
                .position(|(who, _)| who == "b")
                .ok_or("b launched nothing")?;
            assert!(all[..first_b].iter().all(|(who, _)| who == "a"));
            assert!(all[first_b..].iter().all(|(who, _)| who == "b"), "{all:?}");
            assert!(!b.has_exited());
            invariants::settle(60, Duration::from_secs(5), || invariants::instance_problems(&sim)).await?;
            assert_eq!(
                invariants::instances_launched(&sim),
                invariants::node_claims_created(&sim)
            );
            Ok(())
        })
        .await
}

#[tokio::test(start_paused = true)]
async fn a_leader_crashing_between_creating_and_launching_nodeclaims_leaves_them_to_its_successor()
-> TestResult {
    LocalSet::new()
        .run_until(async {
            let sim = sim()?;
            let client = sim.client();
            let creates = CreateLog::default();
            let (a, b) = two_replicas(&sim, &creates).await?;
            apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
            apply_deployment(&client, "web", PEAK, "500m").await?;

            // Crash the leader as soon as its provisioner has written a NodeClaim, before it is launched.
            let claims: Api<NodeClaim> = Api::all(client.clone());
            let mut written = Vec::new();
            for _ in 0..600 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                written = claims.list(&ListParams::default()).await?.items;
                if !written.is_empty() {
                    break;
                }
            }
            assert!(!written.is_empty(), "the leader wrote no NodeClaim");
            assert!(
                written
                    .iter()
                    .all(|c| c.status.as_ref().is_none_or(|s| s.provider_id.is_none())),
                "caught before the launch"
            );
            a.crash().await;
            assert!(
                invariants::instances_launched(&sim) == 0,
                "nothing launched before the crash"
            );

            until_holder(&client, "b", 30).await?;
            until_running(&client, "app=web", PEAK as usize, 300).await?;
            // The successor launched the claims its predecessor wrote rather than writing new ones for the
            // same pods.
            let names: Vec<String> = written.iter().map(ResourceExt::name_any).collect();
            let launched_by_b: Vec<String> = creates_by(&creates)
                .into_iter()
                .filter(|(who, _)| who == "b")
                .map(|(_, claim)| claim)
                .collect();
            assert!(
                names.iter().all(|n| launched_by_b.contains(n)),
                "{names:?} were not all launched by b: {launched_by_b:?}"
            );
            tokio::time::sleep(Duration::from_secs(180)).await;
            invariants::settle(60, Duration::from_secs(5), || invariants::instance_problems(&sim)).await?;
            let launched = invariants::instances_launched(&sim);
            assert_eq!(launched, invariants::node_claims_created(&sim));
            assert_eq!(
                launched,
                launched_by_one_replica(&[PEAK]).await?,
                "no NodeClaim written twice"
            );
            assert!(!b.has_exited());
            Ok(())
        })
        .await
}
