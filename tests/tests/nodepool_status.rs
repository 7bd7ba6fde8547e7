//! The NodePool status controller end to end: a malformed NodePool is reported on its status (the field at
//! fault named) and left out of provisioning while a valid one launches nodes and counts them; a NodePool
//! naming a NodeClass kind the provider does not serve is Unknown; an unchanged status is not rewritten.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::{
    common::{Condition, ConditionStatus, find_condition},
    labels,
    nodepool::NodePool,
};
use karpenter_e2e::{Harness, TestResult, apply_deployment, apply_node_class, apply_nodepool, until_running};
use karpenter_provisioner::nodepool_status::NodePoolStatusController;
use karpenter_state::ControllerContext;
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

/// Creates EC2NodeClass `default` with a Ready=True status, as the NodeClass controller would leave it.
async fn ready_node_class(client: &kube::Client) -> TestResult {
    // The simulated cluster starts with one (a Ready `default`); this one says so for a cluster without it.
    apply_node_class(client, "default").await?;
    let gvk = GroupVersionKind::gvk(labels::AWS_GROUP, "v1", "EC2NodeClass");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "ec2nodeclasses");
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    api.patch_status("default", &PatchParams::default(), &Patch::Merge(status))
        .await?;
    Ok(())
}

async fn create_pool(client: &kube::Client, pool: Value) -> TestResult {
    let pool: NodePool = serde_json::from_value(pool)?;
    Api::<NodePool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await?;
    Ok(())
}

fn condition(pool: &NodePool, type_: &str) -> Option<Condition> {
    find_condition(&pool.status.as_ref()?.conditions, type_).cloned()
}

fn status_of(pool: &NodePool, type_: &str) -> Option<ConditionStatus> {
    condition(pool, type_).map(|c| c.status)
}

#[tokio::test(start_paused = true)]
async fn a_malformed_nodepool_is_reported_while_another_keeps_provisioning() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    ready_node_class(&client).await?;
    apply_nodepool(&client, "default", &["on-demand"], Value::Null).await?;
    // Heavier than `default`, so the provisioner would prefer it were it valid: a schedule without a duration.
    create_pool(
        &client,
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "bad"},
            "spec": {"weight": 100,
                "disruption": {"budgets": [{"nodes": "10%", "schedule": "@daily"}]},
                "template": {"spec": {
                    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}}),
    )
    .await?;
    create_pool(
        &client,
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "elsewhere"},
            "spec": {"template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "example.com", "kind": "OtherNodeClass", "name": "x"}}}}}),
    )
    .await?;
    let status = NodePoolStatusController::new(
        ControllerContext::new(client.clone(), h.state.clone(), h.sim.clock()),
        h.sim.cloud_provider(),
        karpenter_api::label_policy::LabelPolicy::Core,
    );
    let status_task = tokio::spawn(async move { status.run().await });

    apply_deployment(&client, "web", 2, "500m").await?;
    until_running(&client, "app=web", 2, 300).await?;
    tokio::time::sleep(Duration::from_secs(10)).await;

    let pools: Api<NodePool> = Api::all(client.clone());
    let bad = pools.get("bad").await?;
    let validation = condition(&bad, "ValidationSucceeded").ok_or("bad has no ValidationSucceeded")?;
    assert_eq!(validation.status, ConditionStatus::False);
    assert_eq!(validation.reason, "NodePoolValidationFailed");
    assert!(
        validation.message.contains("spec.disruption.budgets[0]"),
        "{}",
        validation.message
    );
    assert_eq!(status_of(&bad, "Ready"), Some(ConditionStatus::False));
    assert_eq!(bad.status.as_ref().and_then(|s| s.nodes), Some(0));

    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    assert!(!nodes.items.is_empty());
    for node in &nodes.items {
        assert_eq!(
            node.labels().get(labels::NODEPOOL_LABEL).map(String::as_str),
            Some("default"),
            "the invalid NodePool launched nothing"
        );
    }

    let good = pools.get("default").await?;
    for type_ in ["ValidationSucceeded", "NodeClassReady", "Ready"] {
        assert_eq!(status_of(&good, type_), Some(ConditionStatus::True), "{type_}");
    }
    let good_status = good.status.clone().unwrap_or_default();
    assert_eq!(good_status.nodes, Some(nodes.items.len() as i64));
    let resources = good_status.resources.unwrap_or_default();
    assert_eq!(resources.get("nodes").map(|q| q.0.as_str()), Some("1"));
    let node_cpu = nodes.items[0]
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("cpu"))
        .map(|q| q.0.clone());
    assert_eq!(resources.get("cpu").map(|q| q.0.clone()), node_cpu);
    assert!(resources.contains_key("memory") && resources.contains_key("pods"));

    let elsewhere = pools.get("elsewhere").await?;
    let class = condition(&elsewhere, "NodeClassReady").ok_or("elsewhere has no NodeClassReady")?;
    assert_eq!(
        (class.status, class.reason.as_str()),
        (ConditionStatus::Unknown, "NodeClassReadinessUnknown")
    );

    // Nothing changes: nothing is written.
    let version = good.resource_version();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(pools.get("default").await?.resource_version(), version);
    status_task.abort();
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_nodepool_whose_node_class_is_missing_is_not_ready_and_launches_nothing() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    create_pool(
        &client,
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "orphan"},
            "spec": {"template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "missing"}}}}}),
    )
    .await?;
    apply_deployment(&client, "web", 1, "500m").await?;
    tokio::time::sleep(Duration::from_secs(60)).await;

    let pool = Api::<NodePool>::all(client.clone()).get("orphan").await?;
    assert_eq!(status_of(&pool, "Ready"), Some(ConditionStatus::False));
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    assert!(
        nodes.items.is_empty(),
        "a NodePool that is not Ready launched a node"
    );

    // What the provisioner tells the pending pod.
    let provisioner = karpenter_provisioner::provisioner::Provisioner::new(
        h.context(),
        h.sim.cloud_provider(),
        karpenter_provisioner::provisioner::ProvisionerSettings {
            build: karpenter_core::snapshot::BuildOptions {
                label_policy: karpenter_api::label_policy::LabelPolicy::Core,
                unevaluated_nodepools: false,
                ..karpenter_core::snapshot::BuildOptions::default()
            },
            ..Default::default()
        },
    );
    let round = provisioner.provision_once().await?;
    assert!(round.created.is_empty());
    let why = round
        .unschedulable
        .first()
        .ok_or("the pod was not reported unschedulable")?;
    assert!(
        why.contains("NodePool \"orphan\" was skipped: it is not ready (Ready=False"),
        "{why}"
    );
    Ok(())
}
