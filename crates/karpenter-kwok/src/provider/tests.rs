//! The provider against karpenter-sim's API server: both node class modes, the class checks, the delay, reboot.

use super::*;
use crate::catalog::{parse, tests::SMALL_CATALOG};
use karpenter_sim::{ApiServer, VirtualClock};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn aws_catalog() -> CatalogFile {
    CatalogFile::from_json_str(include_str!("../../../karpenter-sim/tests/fixtures/catalog.json")).unwrap()
}

fn provider(api: &ApiServer, clock: Arc<dyn Clock>) -> KwokCloudProvider {
    let types = parse("test.json", SMALL_CATALOG).unwrap();
    KwokCloudProvider::with_kwok_types(api.client(), aws_catalog(), Ok(Arc::new(types)), clock)
}

fn clock() -> Arc<dyn Clock> {
    Arc::new(VirtualClock::starting_at("2026-01-01T00:00:00Z".parse().unwrap()))
}

async fn create_class(api: &ApiServer, name: &str, ready: &str, delay: Option<&str>) -> TestResult {
    // Without a delay the class has no spec at all, as the e2e suites' default class.
    let mut class = serde_json::json!({
        "apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": name},
    });
    if let Some(delay) = delay {
        class["spec"] = serde_json::json!({"nodeRegistrationDelay": delay});
    }
    let resource = ApiResource::erase::<KWOKNodeClass>(&());
    let classes = Api::<DynamicObject>::all_with(api.client(), &resource);
    classes
        .create(&PostParams::default(), &serde_json::from_value(class)?)
        .await?;
    // Status goes through its subresource (a create ignores it, as a real API server's does).
    let status = serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": ready,
        "reason": "Test", "message": "class says so", "lastTransitionTime": "2024-01-01T01:01:01Z"}]}});
    classes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

fn claim(name: &str, class: &str) -> NodeClaim {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-4x-amd64-linux", "m5.2xlarge"]},
                {"key": "karpenter.kwok.sh/instance-size", "operator": "Lt", "values": ["32"]}],
            "resources": {"requests": {"cpu": "1", "pods": "2"}},
            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": class}},
    }))
    .unwrap()
}

fn node_pool(group: &str, kind: &str) -> NodePool {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {"requirements": [],
            "nodeClassRef": {"group": group, "kind": kind, "name": "default"}}}},
    }))
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_kwok_node_class_claim_is_a_node_found_listed_and_deleted_by_its_kwok_provider_id() -> TestResult {
    let api = ApiServer::new(clock());
    create_class(&api, "default", "True", None).await?;
    let kwok = provider(&api, clock());
    let launched = kwok.create(&claim("default-abcde", "default")).await?;
    let status = launched.status.clone().unwrap_or_default();
    let provider_id = status.provider_id.clone().unwrap_or_default();
    let node_name = status.node_name.clone().unwrap_or_default();
    assert_eq!(provider_id, format!("kwok://{node_name}"));
    assert_eq!(
        launched.labels()["node.kubernetes.io/instance-type"],
        "c-4x-amd64-linux"
    );
    let node = Api::<Node>::all(api.client()).get(&node_name).await?;
    assert_eq!(node.labels()["kubernetes.io/hostname"], "default-abcde");
    assert_eq!(node.annotations()["kwok.x-k8s.io/node"], "fake");

    assert_eq!(kwok.get(&provider_id).await?.name_any(), "default-abcde");
    let listed = kwok.list().await?;
    assert_eq!(
        listed.iter().map(|c| c.name_any()).collect::<Vec<_>>(),
        ["default-abcde"]
    );
    let summaries = kwok.list_instances().await?;
    assert_eq!(summaries.len(), 1);
    assert_eq!(summaries[0].node_claim.as_deref(), Some("default-abcde"));
    assert_eq!(summaries[0].provider_id, provider_id);

    kwok.delete(&launched).await?;
    assert!(kwok.get(&provider_id).await.is_err_and(|e| e.is_not_found()));
    assert!(kwok.delete(&launched).await.is_err_and(|e| e.is_not_found()));
    assert!(kwok.list().await?.is_empty());
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_missing_class_is_insufficient_capacity_and_a_class_not_ready_refuses_the_launch() -> TestResult {
    let api = ApiServer::new(clock());
    let kwok = provider(&api, clock());
    let missing = kwok.create(&claim("a", "nowhere")).await.unwrap_err();
    assert_eq!(missing.category(), "InsufficientCapacity");
    assert!(
        missing.to_string().contains("KWOKNodeClass nowhere not found"),
        "{missing}"
    );
    create_class(&api, "broken", "False", None).await?;
    let not_ready = kwok.create(&claim("b", "broken")).await.unwrap_err();
    assert_eq!(not_ready.category(), "NodeClassNotReady");
    assert!(not_ready.to_string().contains("class says so"), "{not_ready}");
    assert!(
        Api::<Node>::all(api.client())
            .list(&ListParams::default())
            .await?
            .items
            .is_empty()
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_node_registers_after_the_class_delay() -> TestResult {
    let api = ApiServer::new(clock());
    create_class(&api, "slow", "True", Some("30s")).await?;
    let kwok = provider(&api, clock());
    let launched = kwok.create(&claim("slow-abcde", "slow")).await?;
    let name = launched.status.and_then(|s| s.node_name).unwrap_or_default();
    let nodes = Api::<Node>::all(api.client());
    tokio::time::sleep(Duration::from_secs(29)).await;
    assert!(nodes.get_opt(&name).await?.is_none(), "not before the delay");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(nodes.get_opt(&name).await?.is_some(), "registered after it");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_reboot_gives_the_node_a_boot_id_of_the_operation() -> TestResult {
    let api = ApiServer::new(clock());
    create_class(&api, "default", "True", None).await?;
    let kwok = provider(&api, clock());
    let launched = kwok.create(&claim("default-abcde", "default")).await?;
    kwok.reboot(&launched, "op-1").await?;
    kwok.reboot(&launched, "op-1").await?;
    let name = launched
        .status
        .clone()
        .and_then(|s| s.node_name)
        .unwrap_or_default();
    let node = Api::<Node>::all(api.client()).get(&name).await?;
    let boot_id = node.status.and_then(|s| s.node_info).map(|i| i.boot_id);
    assert_eq!(boot_id.as_deref(), Some("kwok-op-1"));
    let mut unregistered = launched.clone();
    unregistered.status = None;
    let refused = kwok.reboot(&unregistered, "op-2").await.unwrap_err();
    assert!(refused.is_terminal() && refused.to_string().contains("not registered"));
    // Repair reboots for kwok's simulated fault, and only for it.
    let policies = kwok.reboot_policies();
    assert_eq!(policies.len(), 1);
    assert_eq!(policies[0].policy.condition_type, "KWOKRebootRequired");
    assert_eq!(policies[0].policy.toleration, Duration::from_secs(30));
    assert_eq!(
        policies[0].termination_grace_period,
        Some(Duration::from_secs(60))
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_node_class_kind_picks_the_catalog_and_how_readiness_is_read() -> TestResult {
    let api = ApiServer::new(clock());
    let kwok = provider(&api, clock());
    let kwok_types = kwok
        .instance_types(&node_pool("karpenter.kwok.sh", "KWOKNodeClass"))
        .await?;
    assert_eq!(
        kwok_types.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        ["c-4x-amd64-linux", "m5.2xlarge"]
    );
    let aws_types = kwok
        .instance_types(&node_pool("karpenter.k8s.aws", "EC2NodeClass"))
        .await?;
    assert_eq!(aws_types.len(), aws_catalog().instance_types.len());
    assert!(kwok.node_class_reports_readiness(&KWOK_NODE_CLASS));
    assert!(!kwok.node_class_reports_readiness(&EC2_NODE_CLASS));
    assert_eq!(kwok.supported_node_classes()[0], KWOK_NODE_CLASS);

    let missing = KwokError::ModuleMissing {
        path: "/nowhere/instance_types.json".into(),
        module: crate::UPSTREAM_MODULE.into(),
    };
    let without =
        KwokCloudProvider::with_kwok_types(api.client(), aws_catalog(), Err(Arc::new(missing)), clock());
    let error = without
        .instance_types(&node_pool("karpenter.kwok.sh", "KWOKNodeClass"))
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("go mod download sigs.k8s.io/karpenter@v1.15.0"),
        "{error}"
    );
    assert!(
        without
            .instance_types(&node_pool("karpenter.k8s.aws", "EC2NodeClass"))
            .await
            .is_ok()
    );
    Ok(())
}

#[tokio::test]
async fn repair_policies_are_upstream_kwoks_replacements() {
    let api = ApiServer::new(clock());
    let policies = provider(&api, clock()).repair_policies();
    let summary: Vec<(&str, &str, u64)> = policies
        .iter()
        .map(|p| {
            (
                p.condition_type.as_str(),
                p.condition_status.as_str(),
                p.toleration.as_secs(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("Ready", "False", 600),
            ("Ready", "Unknown", 600),
            ("KWOKUnhealthy", "True", 30)
        ]
    );
}
