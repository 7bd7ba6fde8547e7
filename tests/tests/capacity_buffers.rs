//! CapacityBuffers end to end (the CapacityBuffer feature gate): a buffer on a Deployment scaled to zero gets
//! its spare nodes with no pod pending, no more than it asks for on the rounds that follow, and consolidation
//! leaves those empty-looking nodes be; its status reports its replicas, ReadyForProvisioning and Provisioning; a buffer naming a PodTemplate that does not exist says so on
//! its status and provisions nothing until the template appears; with the gate off a buffer does nothing.

use std::{collections::BTreeSet, time::Duration};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Pod, PodTemplate},
};
use karpenter_api::{
    capacitybuffer::CapacityBuffer,
    common::{Condition, ConditionStatus, find_condition},
    nodeclaim::NodeClaim,
};
use karpenter_e2e::{Controllers, Harness, TestResult, apply_nodepool};
use karpenter_operator::Settings;
use kube::{
    Api, ResourceExt,
    api::{ListParams, PostParams},
};
use serde_json::{Value, json};

fn gate(on: bool) -> Settings {
    let mut settings = Settings::default();
    settings.feature_gates.capacity_buffer = on;
    settings
}

/// A Deployment `name` in `default` with `replicas` pods of `cpu` each.
async fn deployment(client: &kube::Client, name: &str, replicas: i32, cpu: &str) -> TestResult {
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "sim",
                    "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]}}}
    }))?;
    Api::<Deployment>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &d)
        .await?;
    Ok(())
}

async fn pod_template(client: &kube::Client, name: &str, cpu: &str) -> TestResult {
    let t: PodTemplate = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "template": {"metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "c", "image": "sim",
                "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}}}]}}
    }))?;
    Api::<PodTemplate>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &t)
        .await?;
    Ok(())
}

async fn buffer(client: &kube::Client, name: &str, spec: Value) -> TestResult {
    let b: CapacityBuffer = serde_json::from_value(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec
    }))?;
    Api::<CapacityBuffer>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &b)
        .await?;
    Ok(())
}

async fn get_buffer(client: &kube::Client, name: &str) -> Result<CapacityBuffer, kube::Error> {
    Api::<CapacityBuffer>::namespaced(client.clone(), "default")
        .get(name)
        .await
}

fn condition(b: &CapacityBuffer, type_: &str) -> Option<Condition> {
    find_condition(&b.status.as_ref()?.conditions, type_).cloned()
}

async fn claim_names(client: &kube::Client) -> Result<BTreeSet<String>, kube::Error> {
    Ok(Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect())
}

async fn claims(client: &kube::Client) -> Result<usize, kube::Error> {
    Ok(claim_names(client).await?.len())
}

async fn pods(client: &kube::Client) -> Result<usize, kube::Error> {
    Ok(Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .len())
}

/// Waits (virtual seconds) until buffer `name`'s status satisfies `done`.
async fn until_status(
    client: &kube::Client,
    name: &str,
    within_secs: u64,
    done: impl Fn(&CapacityBuffer) -> bool,
) -> Result<CapacityBuffer, Box<dyn std::error::Error + Send + Sync>> {
    for _ in 0..within_secs {
        let b = get_buffer(client, name).await?;
        if done(&b) {
            return Ok(b);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let b = get_buffer(client, name).await?;
    Err(format!("buffer {name} after {within_secs}s: status {:?}", b.status).into())
}

fn is(c: Option<Condition>, status: ConditionStatus, reason: &str) -> bool {
    c.is_some_and(|c| c.status == status && c.reason == reason)
}

#[tokio::test(start_paused = true)]
async fn a_buffer_on_a_deployment_launches_its_spare_nodes_with_no_pod_pending() -> TestResult {
    let h = Harness::start_with_settings(Controllers { disruption: true }, gate(true))?;
    let client = h.client();
    // Consolidation on and quick: the buffer's nodes run no pod, and must not be taken for empty ones.
    apply_nodepool(
        &client,
        "default",
        &["on-demand"],
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "10s"}),
    )
    .await?;
    // Scaled to zero: no real pod will ever ask for a node. 5 CPUs: one pod per node of the test catalog.
    deployment(&client, "big", 0, "5").await?;
    buffer(
        &client,
        "spare",
        json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "big"}, "replicas": 3}),
    )
    .await?;

    let b = until_status(&client, "spare", 120, |b| {
        b.status.as_ref().and_then(|s| s.replicas) == Some(3)
            && is(
                condition(b, "ReadyForProvisioning"),
                ConditionStatus::True,
                "Resolved",
            )
    })
    .await?;
    let status = b.status.clone().unwrap_or_default();
    assert_eq!(
        status.provisioning_strategy.as_deref(),
        Some("buffer.x-k8s.io/active-capacity")
    );
    let ready = condition(&b, "ReadyForProvisioning").ok_or("no ReadyForProvisioning")?;
    assert!(
        ready.message.contains("Deployment default/big"),
        "{}",
        ready.message
    );

    for _ in 0..300 {
        if claims(&client).await? >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(claims(&client).await?, 3, "one node per placeholder pod");
    assert_eq!(pods(&client).await?, 0, "no pod asked for them");
    let kept = claim_names(&client).await?;

    // The rounds that follow (the 30 s resync) find the placeholders a place on those nodes.
    until_status(&client, "spare", 120, |b| {
        is(
            condition(b, "Provisioning"),
            ConditionStatus::True,
            "FitsExistingCapacity",
        )
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(180)).await;
    assert_eq!(
        claim_names(&client).await?,
        kept,
        "no more than the buffer asks for, and not consolidated away"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_buffer_naming_a_missing_pod_template_says_so_until_it_appears() -> TestResult {
    let h = Harness::start_with_settings(Controllers::default(), gate(true))?;
    let client = h.client();
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    buffer(
        &client,
        "lost",
        json!({"podTemplateRef": {"name": "chunk"}, "replicas": 2}),
    )
    .await?;
    let b = until_status(&client, "lost", 120, |b| {
        is(
            condition(b, "ReadyForProvisioning"),
            ConditionStatus::False,
            "PodTemplateNotFound",
        )
    })
    .await?;
    let ready = condition(&b, "ReadyForProvisioning").ok_or("no ReadyForProvisioning")?;
    assert_eq!(ready.message, "PodTemplate default/chunk not found");
    assert!(is(
        condition(&b, "Provisioning"),
        ConditionStatus::False,
        "NotReadyForProvisioning"
    ));
    assert_eq!(b.status.as_ref().and_then(|s| s.replicas), None);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        claims(&client).await?,
        0,
        "a buffer that does not resolve provisions nothing"
    );

    // The template appears: the buffer resolves to it and gets its node.
    pod_template(&client, "chunk", "5").await?;
    let b = until_status(&client, "lost", 120, |b| {
        is(
            condition(b, "ReadyForProvisioning"),
            ConditionStatus::True,
            "Resolved",
        )
    })
    .await?;
    let status = b.status.clone().unwrap_or_default();
    assert_eq!(status.pod_template_ref.map(|r| r.name).as_deref(), Some("chunk"));
    assert_eq!(status.replicas, Some(2));
    assert!(status.pod_template_generation.is_some());
    for _ in 0..300 {
        if claims(&client).await? >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(claims(&client).await?, 2);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn without_the_gate_a_buffer_does_nothing() -> TestResult {
    let h = Harness::start_with_settings(Controllers::default(), gate(false))?;
    let client = h.client();
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    deployment(&client, "big", 0, "5").await?;
    buffer(
        &client,
        "spare",
        json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "big"}, "replicas": 3}),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(claims(&client).await?, 0);
    assert_eq!(get_buffer(&client, "spare").await?.status, None);
    Ok(())
}
