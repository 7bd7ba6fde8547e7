//! End to end on karpenter-sim: a GPU node whose device plugin registers the GPUs only a while after the Node
//! joins (kubelet reports `nvidia.com/gpu: 0` until then). Karpenter must neither call the node initialized early
//! nor launch a second GPU node for pods that fit the first one, and tells those pods where they are going.

use std::time::Duration;

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Node, Pod},
    events::v1::Event,
};
use karpenter_api::{
    common::{ConditionStatus, find_condition},
    labels,
    nodeclaim::{NodeClaim, conditions},
    nodepool::NodePool,
};
use karpenter_core::catalog::CatalogFile;
use karpenter_e2e::{CATALOG, Controllers, Harness, TestResult, apply_nodepool, until_running};
use karpenter_operator::Settings;
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

/// The test catalog plus `gpu-instance-type`: 8 cpu and 4 NVIDIA GPUs.
fn catalog_with_gpus() -> Result<CatalogFile, Box<dyn std::error::Error + Send + Sync>> {
    let mut catalog: Value = serde_json::from_str(CATALOG)?;
    let gpu_type = json!({
        "name": "gpu-instance-type",
        "requirements": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
            {"key": "size", "operator": "In", "values": ["gpu"]}
        ],
        "capacity": {"cpu": "8", "memory": "32Gi", "pods": "20", "nvidia.com/gpu": "4"},
        "overhead": {"kubeReserved": {"cpu": "100m", "memory": "10Mi"}, "systemReserved": {}, "evictionThreshold": {}},
        "offerings": [{"zone": "test-zone-1", "capacityType": "on-demand", "price": 3.0, "available": true,
                       "reservationId": null, "reservationCapacity": null}]
    });
    catalog["instanceTypes"]
        .as_array_mut()
        .ok_or("catalog without instanceTypes")?
        .push(gpu_type);
    Ok(CatalogFile::from_json_str(&catalog.to_string())?)
}

/// Deployment `train`: `replicas` pods labelled `app=train`, each requesting 1 cpu and 1 GPU.
async fn apply_gpu_deployment(client: &kube::Client, replicas: i32) -> TestResult {
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "train"}},
            "template": {"metadata": {"labels": {"app": "train"}},
                "spec": {"containers": [{"name": "c", "image": "sim",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                  "limits": {"nvidia.com/gpu": "1"}}}]}}}
    }))?;
    Api::<Deployment>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment)
        .await?;
    Ok(())
}

async fn node_claims(client: &kube::Client) -> Result<Vec<NodeClaim>, kube::Error> {
    Ok(Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items)
}

/// Sets the GPUs a Node reports in capacity and allocatable, as kubelet does when the device plugin registers.
async fn report_gpus(client: &kube::Client, node: &str, gpus: &str) -> TestResult {
    let patch =
        json!({"status": {"capacity": {"nvidia.com/gpu": gpus}, "allocatable": {"nvidia.com/gpu": gpus}}});
    Api::<Node>::all(client.clone())
        .patch_status(node, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_gpu_node_initializes_once_its_gpus_register_and_takes_a_second_gpu_pod_meanwhile() -> TestResult {
    let h = Harness::start_with_catalog(Controllers::default(), Settings::default(), catalog_with_gpus()?)?;
    let client = h.client();
    let nodes = Api::<Node>::all(client.clone());
    apply_nodepool(&client, "default", &["spot", "on-demand"], Value::Null).await?;
    apply_gpu_deployment(&client, 1).await?;

    // The GPU node joins; its device plugin has not registered the GPUs yet. Caught within a tenth of a second
    // of joining, long before the Node turns Ready (the simulated kubelet takes 10 s).
    let mut node_name = None;
    for _ in 0..3000 {
        if let Some(node) = nodes.list(&ListParams::default()).await?.items.first() {
            node_name = Some(node.name_any());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let node_name = node_name.ok_or("no Node joined within 300 s")?;
    report_gpus(&client, &node_name, "0").await?;

    // Ready, registered, but without its GPUs: not initialized, and the claim says why.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let node = nodes.get(&node_name).await?;
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.clone());
    assert_eq!(ready.as_deref(), Some("True"));
    assert!(!node.labels().contains_key(labels::INITIALIZED_LABEL));
    let claims = node_claims(&client).await?;
    assert_eq!(claims.len(), 1, "one GPU node for one GPU pod");
    let status = claims[0].status.clone().unwrap_or_default();
    assert_eq!(status.node_name.as_deref(), Some(node_name.as_str()));
    let initialized = find_condition(&status.conditions, conditions::INITIALIZED).ok_or("no Initialized")?;
    assert_eq!(initialized.status, ConditionStatus::Unknown);
    assert_eq!(initialized.reason, "ResourceNotRegistered");
    assert!(
        initialized.message.contains("nvidia.com/gpu"),
        "{}",
        initialized.message
    );
    // The GPUs the node was launched with count for the NodePool already (its status and its limits).
    let pool = Api::<NodePool>::all(client.clone()).get("default").await?;
    let pool_gpus = pool
        .status
        .and_then(|s| s.resources)
        .and_then(|r| r.get("nvidia.com/gpu").cloned())
        .map(|q| q.0);
    assert_eq!(pool_gpus.as_deref(), Some("4"));

    // A second GPU pod fits the node still waiting for its GPUs: no second node.
    let first_pod = Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels("app=train"))
        .await?
        .items
        .first()
        .map(ResourceExt::name_any);
    Api::<Deployment>::namespaced(client.clone(), "default")
        .patch(
            "train",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await?;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        node_claims(&client).await?.len(),
        1,
        "no NodeClaim for the second GPU pod"
    );
    assert_eq!(h.sim.cloud().launch_log().len(), 1);
    let pods = Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels("app=train"))
        .await?;
    assert_eq!(pods.items.len(), 2);
    assert!(
        pods.items
            .iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_none()),
        "no pod can bind before the GPUs register"
    );
    // The second pod is told it is going to the node waiting for its GPUs, once however many rounds it waits.
    let claim_name = claims[0].name_any();
    let expected = format!("Pod should schedule on: nodeclaim/{claim_name}, node/{node_name}");
    let events = Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await?;
    let first_pod_events = events.items.iter().filter(|e| {
        e.reason.as_deref() == Some("Nominated")
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == first_pod.as_deref()
    });
    assert!(first_pod_events.count() >= 1);
    let second_pod = pods
        .items
        .iter()
        .map(|p| p.name_any())
        .find(|n| Some(n.as_str()) != first_pod.as_deref())
        .ok_or("no second pod")?;
    let nominated: Vec<String> = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Nominated"))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(second_pod.as_str()))
        .filter_map(|e| e.note.clone())
        .collect();
    assert_eq!(nominated, [expected]);

    // The device plugin registers the GPUs: the node initializes and both pods run on it.
    report_gpus(&client, &node_name, "4").await?;
    until_running(&client, "app=train", 2, 60).await?;
    let node = nodes.get(&node_name).await?;
    assert_eq!(
        node.labels().get(labels::INITIALIZED_LABEL).map(String::as_str),
        Some("true")
    );
    let claims = node_claims(&client).await?;
    assert_eq!(claims.len(), 1);
    let status = claims[0].status.clone().unwrap_or_default();
    let initialized = find_condition(&status.conditions, conditions::INITIALIZED).map(|c| c.status);
    assert_eq!(initialized, Some(ConditionStatus::True));
    let pods = Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels("app=train"))
        .await?;
    assert!(
        pods.items
            .iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node_name.as_str())),
        "both GPU pods on the one GPU node"
    );
    assert_eq!(h.sim.cloud().launch_log().len(), 1);
    Ok(())
}
