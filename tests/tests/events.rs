//! The Events a user reads in `kubectl describe`, with upstream's reasons and wording: `FailedScheduling` on a
//! pod no NodePool can take (once per five minutes, however many batches it waits through), `NoCompatibleInstanceTypes`
//! on a NodePool whose requirements leave it nothing, `InsufficientCapacityError` on a NodeClaim whose launch found
//! no capacity, the `Disruption*` family on the NodeClaims and Nodes of a consolidation, and a Balanced NodePool's
//! `ConsolidationCandidate` / `ConsolidationApproved`.

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use karpenter_e2e::{Controllers, Harness, TestResult, apply_deployment, apply_nodepool, until_running};
use karpenter_sim::{OfferingKey, cloud::LaunchOutcome};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

/// (kind, name, type, reason, note, occurrences) of every event.
async fn events(
    client: &kube::Client,
) -> Result<Vec<(String, String, String, String, String, i32)>, kube::Error> {
    Ok(Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|e| {
            let regarding = e.regarding.unwrap_or_default();
            (
                regarding.kind.unwrap_or_default(),
                regarding.name.unwrap_or_default(),
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
                e.series.map_or(1, |s| s.count),
            )
        })
        .collect())
}

/// How often `reason` happened on the pod `name`, and its last message.
async fn on_pod(client: &kube::Client, name: &str, reason: &str) -> Result<(i32, String), kube::Error> {
    let mut count = 0;
    let mut note = String::new();
    for (kind, object, _, r, n, times) in events(client).await? {
        if kind == "Pod" && object == name && r == reason {
            count += times;
            note = n;
        }
    }
    Ok((count, note))
}

/// Scales the `web` Deployment to one replica and waits (up to ten minutes) for a consolidation to delete a
/// NodeClaim; every event then.
async fn scale_web_to_one_until_terminating(
    client: &kube::Client,
) -> Result<Vec<(String, String, String, String, String, i32)>, kube::Error> {
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), "default")
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await?;
    let mut all = Vec::new();
    for _ in 0..120 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        all = events(client).await?;
        if all
            .iter()
            .any(|e| e.3 == "DisruptionTerminating" && e.4 == "Disrupting NodeClaim: Underutilized")
        {
            break;
        }
    }
    Ok(all)
}

#[tokio::test(start_paused = true)]
async fn a_pod_no_node_pool_can_take_is_told_why_once_per_five_minutes() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    apply_nodepool(&client, "default", &["spot", "on-demand"], Value::Null).await?;
    // Larger than the largest instance type of the test catalog.
    apply_deployment(&client, "huge", 1, "1000").await?;
    let pod = || async {
        let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), "default")
            .list(&ListParams::default().labels("app=huge"))
            .await?;
        Ok::<_, kube::Error>(pods.items.into_iter().find_map(|p| p.metadata.name))
    };
    let mut name = None;
    for _ in 0..30 {
        name = pod().await?;
        if name.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let name = name.ok_or("the deployment made no pod")?;

    // Many batches within four minutes: one event.
    tokio::time::sleep(Duration::from_secs(240)).await;
    let (count, note) = on_pod(&client, &name, "FailedScheduling").await?;
    assert_eq!(count, 1, "one FailedScheduling within the dedupe window: {note}");
    assert!(
        note.starts_with("Failed to schedule pod, ") && note.contains("default"),
        "upstream's wording, with the NodePool's reason: {note}"
    );
    let failed = events(&client)
        .await?
        .into_iter()
        .find(|e| e.3 == "FailedScheduling")
        .ok_or("no FailedScheduling")?;
    assert_eq!(failed.2, "Warning");

    // Past five minutes: told again.
    tokio::time::sleep(Duration::from_secs(120)).await;
    let (count, _) = on_pod(&client, &name, "FailedScheduling").await?;
    assert_eq!(count, 2, "told again after the window");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_node_pool_whose_requirements_leave_no_instance_type_is_told() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    let pool: karpenter_api::nodepool::NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "nothing-fits"},
        "spec": {"template": {"spec": {
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["no-such-type"]}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
    }))?;
    Api::<karpenter_api::nodepool::NodePool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await?;
    apply_deployment(&client, "web", 1, "500m").await?;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let told: Vec<_> = events(&client)
        .await?
        .into_iter()
        .filter(|e| e.3 == "NoCompatibleInstanceTypes")
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    let (kind, name, type_, _, note, _) = &told[0];
    assert_eq!(
        (kind.as_str(), name.as_str(), type_.as_str()),
        ("NodePool", "nothing-fits", "Warning")
    );
    assert_eq!(
        note,
        "NodePool requirements filtered out all compatible available instance types"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_launch_without_capacity_leaves_an_event_on_its_node_claim() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    let cloud = h.sim.cloud();
    let exhausted = OfferingKey::new("small-instance-type", "test-zone-1", "spot");
    cloud.set_insufficient_capacity(exhausted.clone(), true);
    apply_nodepool(&client, "default", &["spot", "on-demand"], Value::Null).await?;
    apply_deployment(&client, "web", 1, "500m").await?;
    until_running(&client, "app=web", 1, 300).await?;

    let log = cloud.launch_log();
    let failed = log
        .iter()
        .find(|r| r.outcome == LaunchOutcome::InsufficientCapacity)
        .ok_or("no launch failed for capacity")?;
    let told: Vec<_> = events(&client)
        .await?
        .into_iter()
        .filter(|e| e.3 == "InsufficientCapacityError")
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    let (kind, name, type_, _, note, _) = &told[0];
    assert_eq!(kind, "NodeClaim");
    assert_eq!(name, &failed.node_claim);
    assert_eq!(type_, "Warning");
    assert!(
        note.starts_with(&format!(
            "NodeClaim {} event: insufficient capacity",
            failed.node_claim
        )),
        "{note}"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_consolidation_tells_its_node_claims_and_nodes() -> TestResult {
    let h = Harness::start_with(Controllers { disruption: true })?;
    let client = h.client();
    apply_nodepool(
        &client,
        "default",
        &["on-demand"],
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}),
    )
    .await?;
    // Ten pods make a large node; scaled down to one, a smaller node is cheaper: a replacement.
    apply_deployment(&client, "web", 10, "500m").await?;
    until_running(&client, "app=web", 10, 300).await?;
    let first = h.sim.cloud().running_instances();
    let all = scale_web_to_one_until_terminating(&client).await?;
    let of = |reason: &str| -> Vec<_> { all.iter().filter(|e| e.3 == reason).cloned().collect() };
    let terminating = of("DisruptionTerminating");
    assert!(
        terminating
            .iter()
            .any(|e| e.0 == "Node" && e.4.starts_with("Disrupting Node: Underutilized")),
        "{first:?} {all:#?}"
    );
    assert!(
        terminating
            .iter()
            .any(|e| e.0 == "NodeClaim" && e.4.starts_with("Disrupting NodeClaim: Underutilized")),
        "{all:#?}"
    );
    assert!(terminating.iter().all(|e| e.2 == "Normal"));
    let launching = of("DisruptionLaunching");
    assert!(
        launching
            .iter()
            .any(|e| e.0 == "NodeClaim" && e.4 == "Launching NodeClaim: Underutilized" && e.2 == "Normal"),
        "{all:#?}"
    );
    let waiting = of("DisruptionWaitingReadiness");
    assert!(
        waiting.iter().any(|e| e.0 == "NodeClaim"
            && e.4 == "Waiting on readiness to continue disruption"
            && e.2 == "Normal"),
        "{all:#?}"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_node_pool_whose_budget_blocks_disruption_is_told() -> TestResult {
    let h = Harness::start_with(Controllers { disruption: true })?;
    let client = h.client();
    apply_nodepool(
        &client,
        "frozen",
        &["on-demand"],
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
            "budgets": [{"nodes": "0"}]}),
    )
    .await?;
    apply_deployment(&client, "web", 1, "500m").await?;
    until_running(&client, "app=web", 1, 300).await?;
    tokio::time::sleep(Duration::from_secs(90)).await;
    let told: Vec<_> = events(&client)
        .await?
        .into_iter()
        .filter(|e| e.0 == "NodePool" && e.1 == "frozen" && e.3 == "DisruptionBlocked")
        .collect();
    let expected = "No allowed disruptions for disruption reason Underutilized due to blocking budget";
    let underutilized: Vec<_> = told.iter().filter(|e| e.4 == expected).collect();
    assert_eq!(underutilized.len(), 1, "{told:#?}");
    assert_eq!(underutilized[0].2, "Normal");
    assert!(
        underutilized[0].5 >= 2,
        "told again after a minute, in the same series: {told:#?}"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_balanced_consolidation_tells_its_candidates_and_node_pool_it_was_approved() -> TestResult {
    let h = Harness::start_with(Controllers { disruption: true })?;
    let client = h.client();
    apply_nodepool(
        &client,
        "balanced",
        &["on-demand"],
        json!({"consolidationPolicy": "Balanced", "consolidateAfter": "0s"}),
    )
    .await?;
    // As above: one large node for ten pods, then one pod left; the smaller replacement saves most of the
    // NodePool's price for all of its (one pod's) disruption, a score over Balanced's 1/2.
    apply_deployment(&client, "web", 10, "500m").await?;
    until_running(&client, "app=web", 10, 300).await?;
    let all = scale_web_to_one_until_terminating(&client).await?;
    let of = |kind: &str, reason: &str| -> Vec<_> {
        all.iter()
            .filter(|e| e.0 == kind && e.3 == reason)
            .cloned()
            .collect()
    };
    for kind in ["Node", "NodeClaim"] {
        let told = of(kind, "ConsolidationCandidate");
        assert!(
            told.iter()
                .any(|e| e.2 == "Normal" && e.4.contains("estimated savings $")),
            "{kind}: {all:#?}"
        );
    }
    assert!(!of("Node", "ConsolidationApproved").is_empty(), "{all:#?}");
    let pool = of("NodePool", "ConsolidationApproved");
    assert!(
        pool.iter()
            .any(|e| e.1 == "balanced" && e.4.contains("Balanced consolidation approved")),
        "{all:#?}"
    );
    assert!(of("Node", "ConsolidationRejected").is_empty(), "{all:#?}");
    Ok(())
}
