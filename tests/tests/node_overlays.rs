//! NodeOverlays end to end (the NodeOverlay feature gate): the status controller writes each overlay's
//! ValidationSucceeded and Ready, so two overlays of one weight that price the same offering show which one is
//! left out and why (naming the other); a valid overlay is Ready, and the NodeClaims launched from instance
//! types it priced, or gave capacity, carry upstream's applied markers.

use std::time::Duration;

use karpenter_api::{
    common::{Condition, ConditionStatus, find_condition},
    labels,
    nodeclaim::NodeClaim,
    nodeoverlay::NodeOverlay,
};
use karpenter_e2e::{Controllers, Harness, TestResult, apply_deployment, apply_nodepool, until_running};
use karpenter_operator::Settings;
use kube::{
    Api,
    api::{ListParams, PostParams},
};
use serde_json::{Value, json};

fn gate_on() -> Settings {
    let mut settings = Settings::default();
    settings.feature_gates.node_overlay = true;
    settings
}

/// Creates NodeOverlay `name` of `weight` with `spec` (its other fields).
async fn apply_overlay(client: &kube::Client, name: &str, weight: i32, mut spec: Value) -> TestResult {
    spec["weight"] = json!(weight);
    let overlay: NodeOverlay = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": name},
        "spec": spec
    }))?;
    Api::<NodeOverlay>::all(client.clone())
        .create(&PostParams::default(), &overlay)
        .await?;
    Ok(())
}

fn condition(overlay: &NodeOverlay, type_: &str) -> Option<Condition> {
    find_condition(&overlay.status.as_ref()?.conditions, type_).cloned()
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Waits on virtual time, a second at a time for up to a minute, until overlays `names` (as they are then, in
/// that order) satisfy `done`; returns them.
async fn until_overlays(
    client: &kube::Client,
    names: &[&str],
    done: impl Fn(&[NodeOverlay]) -> bool,
) -> Result<Vec<NodeOverlay>, BoxError> {
    let api: Api<NodeOverlay> = Api::all(client.clone());
    for _ in 0..60 {
        let mut overlays = Vec::new();
        for name in names {
            overlays.push(api.get(name).await?);
        }
        if done(&overlays) {
            return Ok(overlays);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(format!("{names:?} not as expected after 60s").into())
}

fn status_of(overlay: &NodeOverlay, type_: &str) -> Option<ConditionStatus> {
    condition(overlay, type_).map(|c| c.status)
}

#[tokio::test(start_paused = true)]
async fn overlays_of_one_weight_pricing_one_offering_conflict_and_the_one_behind_is_not_ready() -> TestResult
{
    let h = Harness::start_with_settings(Controllers::default(), gate_on())?;
    let client = h.client();
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    // Both change the on-demand price of medium-instance-type at weight 10. Among equal weights the name later
    // in the alphabet takes precedence, so `price-b` stays and `price-a` is left out.
    apply_overlay(
        &client,
        "price-a",
        10,
        json!({"requirements": [{"key": "size", "operator": "In", "values": ["medium"]}], "price": "0.01"}),
    )
    .await?;
    apply_overlay(
        &client,
        "price-b",
        10,
        json!({"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
               "priceAdjustment": "-50%"}),
    )
    .await?;

    let judged = until_overlays(&client, &["price-a", "price-b"], |o| {
        status_of(&o[0], "ValidationSucceeded") == Some(ConditionStatus::False)
            && status_of(&o[1], "Ready").is_some()
    })
    .await?;
    let (a, b) = (&judged[0], &judged[1]);
    let validation = condition(a, "ValidationSucceeded").ok_or("price-a has no ValidationSucceeded")?;
    assert_eq!(validation.status, ConditionStatus::False);
    assert_eq!(validation.reason, "Conflict");
    assert!(
        validation.message.contains("\"price-b\""),
        "{}",
        validation.message
    );
    assert!(
        validation.message.contains("medium-instance-type"),
        "{}",
        validation.message
    );
    assert_eq!(status_of(a, "Ready"), Some(ConditionStatus::False));
    assert_eq!(status_of(b, "ValidationSucceeded"), Some(ConditionStatus::True));
    assert_eq!(status_of(b, "Ready"), Some(ConditionStatus::True));

    // Judged once, the statuses are not rewritten while nothing changes.
    let before = a.metadata.resource_version.clone();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let again = Api::<NodeOverlay>::all(client.clone()).get("price-a").await?;
    assert_eq!(again.metadata.resource_version, before);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_valid_overlay_is_ready_and_the_nodeclaims_it_changed_carry_the_applied_markers() -> TestResult {
    let h = Harness::start_with_settings(Controllers::default(), gate_on())?;
    let client = h.client();
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    apply_overlay(
        &client,
        "discount",
        1,
        json!({"requirements": [], "priceAdjustment": "-10%"}),
    )
    .await?;
    apply_overlay(
        &client,
        "device",
        1,
        json!({"requirements": [], "capacity": {"example.com/device": "1"}}),
    )
    .await?;
    let judged = until_overlays(&client, &["discount", "device"], |o| {
        o.iter().all(|o| status_of(o, "Ready").is_some())
    })
    .await?;
    for overlay in judged {
        assert_eq!(
            status_of(&overlay, "Ready"),
            Some(ConditionStatus::True),
            "{:?}",
            overlay.status
        );
    }

    apply_deployment(&client, "web", 1, "500m").await?;
    until_running(&client, "app=web", 1, 300).await?;
    let claims = Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    assert!(!claims.items.is_empty());
    for claim in &claims.items {
        let annotations = claim.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations
                .get(labels::PRICE_OVERLAY_APPLIED_ANNOTATION)
                .map(String::as_str),
            Some("true"),
            "{annotations:?}"
        );
        assert_eq!(
            annotations
                .get(labels::CAPACITY_OVERLAY_APPLIED_ANNOTATION)
                .map(String::as_str),
            Some("true"),
            "{annotations:?}"
        );
    }
    Ok(())
}
