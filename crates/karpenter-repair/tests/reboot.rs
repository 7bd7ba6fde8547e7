//! A node through a reboot, on karpenter-sim's API server: repair commits it for a reboot-clearable fault, the
//! reboot controller fences, drains, reboots (a new boot ID) and unfences it, and the lifecycle initializes it
//! anew: the same NodeClaim and Node, nothing launched, `Rebooting=False` with reason `RebootSucceeded`.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_api::{
    common::ConditionStatus,
    labels,
    nodeclaim::{NodeClaim, conditions, reboot_reasons},
    nodepool::NodePool,
};
use karpenter_core::{
    catalog::CatalogInstanceType,
    clock::Clock,
    cloudprovider::{
        CloudProvider, CloudProviderError, NodeClassKind, RebootError, RebootPolicy, RepairPolicy,
    },
    disruption::drift::DriftProvider,
};
use karpenter_provisioner::lifecycle::Lifecycle;
use karpenter_repair::{NodeRepairController, reboot::RebootController};
use karpenter_sim::{ApiServer, VirtualClock};
use karpenter_state::{ClusterState, ControllerContext};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

const FAULT: &str = "NeedsReboot";

/// A cloud that reboots as kwok does (a new boot ID on the Node) and counts its launches and reboots.
struct RebootingCloud {
    client: Client,
    launched: AtomicUsize,
    reboots: AtomicUsize,
}

impl DriftProvider for RebootingCloud {
    fn is_drifted(&self, _claim: &NodeClaim) -> Option<String> {
        None
    }
}

#[async_trait]
impl CloudProvider for RebootingCloud {
    fn name(&self) -> &'static str {
        "test"
    }
    async fn create(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        self.launched.fetch_add(1, Ordering::SeqCst);
        Ok(claim.clone())
    }
    async fn delete(&self, _claim: &NodeClaim) -> Result<(), CloudProviderError> {
        Ok(())
    }
    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        Err(CloudProviderError::NodeClaimNotFound(provider_id.into()))
    }
    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        Ok(Vec::new())
    }
    async fn instance_types(&self, _: &NodePool) -> Result<Vec<CatalogInstanceType>, CloudProviderError> {
        Ok(Vec::new())
    }
    fn repair_policies(&self) -> Vec<RepairPolicy> {
        Vec::new()
    }
    fn reboot_policies(&self) -> Vec<RebootPolicy> {
        vec![RebootPolicy {
            policy: RepairPolicy {
                condition_type: FAULT.into(),
                condition_status: "True".into(),
                toleration: Duration::from_secs(30),
            },
            termination_grace_period: Some(Duration::from_secs(60)),
        }]
    }
    async fn reboot(&self, claim: &NodeClaim, operation_id: &str) -> Result<(), RebootError> {
        self.reboots.fetch_add(1, Ordering::SeqCst);
        let node = claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let patch = json!({"status": {"nodeInfo": {"bootID": format!("boot-{operation_id}")}}});
        Api::<Node>::all(self.client.clone())
            .patch_status(&node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| CloudProviderError::Transient(e.to_string()))?;
        Ok(())
    }
    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        vec![NodeClassKind {
            group: "karpenter.kwok.sh",
            kind: "KWOKNodeClass",
        }]
    }
}

fn synced_state() -> ClusterState {
    let state = ClusterState::default();
    state.pods.relist_done();
    state.nodes.relist_done();
    state.node_claims.relist_done();
    state.node_pools.relist_done();
    state.daemon_sets.relist_done();
    state.pdbs.relist_done();
    state.pvcs.relist_done();
    state.pvs.relist_done();
    state.storage_classes.relist_done();
    state.csi_nodes.relist_done();
    state.volume_attachments.relist_done();
    state.namespaces.relist_done();
    state
}

/// The cache catches up with the API server.
async fn refresh(client: &Client, state: &ClusterState) -> TestResult {
    for n in Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await?
        .items
    {
        state.nodes.apply(n.into());
    }
    for c in Api::<NodeClaim>::all(client.clone())
        .list(&Default::default())
        .await?
        .items
    {
        state.node_claims.apply(c);
    }
    let pods = Api::<Pod>::all(client.clone())
        .list(&Default::default())
        .await?
        .items;
    for p in state.pods.all() {
        let name = p.metadata.name.clone().unwrap_or_default();
        if !pods
            .iter()
            .any(|q| q.metadata.name.as_deref() == Some(name.as_str()))
        {
            state.pods.delete(&format!("default/{name}"));
        }
    }
    for p in pods {
        state.pods.apply(p.into());
    }
    Ok(())
}

fn condition<'a>(claim: &'a NodeClaim, type_: &str) -> Option<&'a karpenter_api::common::Condition> {
    claim
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

#[tokio::test(start_paused = true)]
async fn a_node_reboots_in_place_fenced_drained_and_back_with_a_new_boot() -> TestResult {
    let clock: Arc<dyn Clock> = Arc::new(VirtualClock::starting_at("2026-01-01T00:00:00Z".parse()?));
    let api = ApiServer::new(Arc::clone(&clock));
    let client = api.client();
    let state = synced_state();
    let cloud = Arc::new(RebootingCloud {
        client: client.clone(),
        launched: AtomicUsize::new(0),
        reboots: AtomicUsize::new(0),
    });
    let cx = ControllerContext::new(client.clone(), state.clone(), Arc::clone(&clock));
    let dyn_cloud: Arc<dyn CloudProvider> = cloud.clone();

    let t0 = "2026-01-01T00:00:00Z";
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let claim: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "default-abc", "labels": {labels::NODEPOOL_LABEL: "default"},
            "finalizers": [labels::TERMINATION_FINALIZER]},
        "spec": {"requirements": [],
            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}},
    }))?;
    claims.create(&PostParams::default(), &claim).await?;
    let ok = |t: &str| json!({"status": "True", "lastTransitionTime": t0, "reason": t});
    let mut status = json!({"status": {"providerID": "test:///n1", "nodeName": "n1", "conditions": []}});
    for t in ["Launched", "Registered", "Initialized", "Ready"] {
        let mut c = ok(t);
        c["type"] = json!(t);
        status["status"]["conditions"]
            .as_array_mut()
            .ok_or("conditions")?
            .push(c);
    }
    claims
        .patch_status("default-abc", &PatchParams::default(), &Patch::Merge(status))
        .await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "finalizers": [labels::TERMINATION_FINALIZER],
            "labels": {labels::NODEPOOL_LABEL: "default", labels::INITIALIZED_LABEL: "true",
                labels::REGISTERED_LABEL: "true"}},
        "spec": {"providerID": "test:///n1"},
    }))?;
    nodes.create(&PostParams::default(), &node).await?;
    // The fault appeared 11 minutes ago: past the reboot policy's 30 seconds.
    let node_status = json!({"status": {"nodeInfo": {"bootID": "boot-0"}, "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2025-12-31T23:00:00Z", "reason": "KubeletReady"},
        {"type": FAULT, "status": "True", "lastTransitionTime": "2025-12-31T23:49:00Z", "reason": "E2ETest"},
    ]}});
    nodes
        .patch_status("n1", &PatchParams::default(), &Patch::Merge(node_status))
        .await?;
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running"},
    }))?;
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &pod)
        .await?;
    refresh(&client, &state).await?;

    // Repair commits a reboot: nothing is deleted.
    let repair = NodeRepairController::new(cx.clone(), Arc::clone(&dyn_cloud));
    let pass = repair.pass().await?;
    assert_eq!(pass.rebooted, ["default-abc"]);
    assert!(pass.repaired.is_empty());
    let committed = claims.get("default-abc").await?;
    let rebooting = condition(&committed, conditions::REBOOTING).ok_or("no Rebooting")?;
    assert_eq!(
        (rebooting.status, rebooting.reason.as_str()),
        (ConditionStatus::True, reboot_reasons::REQUESTED)
    );
    assert!(rebooting.message.contains(FAULT), "{}", rebooting.message);
    assert_eq!(
        committed
            .annotations()
            .get(labels::REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION)
            .map(String::as_str),
        Some("1m0s")
    );
    assert_eq!(
        condition(&committed, conditions::DISRUPTION_REASON).map(|c| c.status),
        Some(ConditionStatus::True)
    );
    refresh(&client, &state).await?;
    // A reboot under way is not committed again.
    assert!(repair.pass().await?.rebooted.is_empty());

    // The reboot controller fences the node and evicts its pod, then waits out the shortest drain.
    let reboot = RebootController::new(cx.clone(), Arc::clone(&dyn_cloud));
    assert!(reboot.pass().await.is_empty());
    let fenced = nodes.get("n1").await?;
    let taints = fenced.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == labels::REBOOTING_TAINT_KEY && t.effect == "NoSchedule")
    );
    assert!(
        Api::<Pod>::namespaced(client.clone(), "default")
            .get_opt("web")
            .await?
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
        "the pod is evicted"
    );
    assert_eq!(
        cloud.reboots.load(Ordering::SeqCst),
        0,
        "not before the drain is over"
    );
    // The kubelet finishes the evicted pod.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    if pods.get_opt("web").await?.is_some() {
        pods.delete("web", &DeleteParams::default().grace_period(0))
            .await?;
    }
    refresh(&client, &state).await?;

    // Drained and past the 5 seconds: rebooted, back with a new boot, unfenced, succeeded.
    tokio::time::advance(Duration::from_secs(6)).await;
    assert_eq!(reboot.pass().await, ["default-abc"]);
    assert_eq!(cloud.reboots.load(Ordering::SeqCst), 1);
    let back = nodes.get("n1").await?;
    let boot = back
        .status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.boot_id.clone());
    assert_ne!(boot.as_deref(), Some("boot-0"));
    let taints = back.spec.clone().and_then(|s| s.taints).unwrap_or_default();
    assert!(!taints.iter().any(|t| t.key == labels::REBOOTING_TAINT_KEY));
    assert!(
        !back.labels().contains_key(labels::INITIALIZED_LABEL),
        "initialized anew"
    );
    let done = claims.get("default-abc").await?;
    let rebooting = condition(&done, conditions::REBOOTING).ok_or("no Rebooting")?;
    assert_eq!(
        (rebooting.status, rebooting.reason.as_str()),
        (ConditionStatus::False, reboot_reasons::SUCCEEDED)
    );
    assert!(
        !done
            .annotations()
            .contains_key(labels::REBOOT_PRE_BOOT_ID_ANNOTATION)
    );
    assert_eq!(
        condition(&done, conditions::INITIALIZED).map(|c| (c.status, c.reason.as_str())),
        Some((ConditionStatus::Unknown, reboot_reasons::REBOOTING))
    );

    // The lifecycle initializes the node for its new boot.
    refresh(&client, &state).await?;
    let lifecycle = Lifecycle::new(cx.clone(), Arc::clone(&dyn_cloud));
    lifecycle.pass().await;
    let node = nodes.get("n1").await?;
    assert_eq!(
        node.labels().get(labels::INITIALIZED_LABEL).map(String::as_str),
        Some("true")
    );
    let claim = claims.get("default-abc").await?;
    assert_eq!(
        condition(&claim, conditions::INITIALIZED).map(|c| c.status),
        Some(ConditionStatus::True)
    );
    // The same NodeClaim and Node, nothing launched.
    assert_eq!(claims.list(&Default::default()).await?.items.len(), 1);
    assert!(claim.metadata.deletion_timestamp.is_none());
    assert_eq!(claim.uid(), committed.uid());
    assert_eq!(node.uid(), fenced.metadata.uid);
    assert_eq!(cloud.launched.load(Ordering::SeqCst), 0);
    Ok(())
}
