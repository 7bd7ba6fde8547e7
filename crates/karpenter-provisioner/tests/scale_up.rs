//! End to end on karpenter-sim, on a virtual clock: a Deployment scaled from zero gets NodeClaims from the
//! provisioner, the lifecycle launches, registers and initializes them, the simulated kube-scheduler binds the
//! pods and the simulated kubelets run them.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Node, Pod},
};
use karpenter_api::{
    common::{ConditionStatus, find_condition},
    label_policy::LabelPolicy,
    labels,
    nodeclaim::{NodeClaim, conditions},
    nodepool::NodePool,
};
use karpenter_core::{catalog::CatalogFile, snapshot::BuildOptions};
use karpenter_provisioner::{
    lifecycle::Lifecycle,
    provisioner::{Provisioner, ProvisionerSettings},
};
use karpenter_sim::{SimCluster, SimOptions, VirtualClock};
use karpenter_state::{ClusterState, Watched};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

const CATALOG: &str = include_str!("../../karpenter-sim/tests/fixtures/catalog.json");

struct Harness {
    sim: SimCluster,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.tasks.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

fn start() -> Result<Harness, Box<dyn std::error::Error + Send + Sync>> {
    let catalog = CatalogFile::from_json_str(CATALOG)?;
    let well_known = catalog.well_known_labels.clone();
    let clock = Arc::new(VirtualClock::starting_at("2026-01-01T00:00:00Z".parse()?));
    let sim = SimCluster::start(SimOptions::new(catalog, clock));
    let client = sim.client();
    let state = ClusterState::new(Watched::default());
    let settings = ProvisionerSettings {
        build: BuildOptions {
            label_policy: LabelPolicy::Core,
            extra_well_known_labels: well_known,
            ..BuildOptions::default()
        },
        ..ProvisionerSettings::default()
    };
    let provisioner = Provisioner::new(client.clone(), state.clone(), sim.cloud_provider(), settings);
    let lifecycle = Lifecycle::new(client.clone(), state.clone(), sim.cloud_provider(), sim.clock());
    let tasks = vec![
        tokio::spawn({
            let state = state.clone();
            async move { state.watch(client).await }
        }),
        tokio::spawn(async move { provisioner.run().await }),
        tokio::spawn(async move { lifecycle.run().await }),
    ];
    Ok(Harness { sim, tasks })
}

async fn apply_pool_and_deployment(client: &kube::Client, replicas: i32) -> TestResult {
    let pool: NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
    }))?;
    Api::<NodePool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await?;
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "sim",
                    "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}}}
    }))?;
    Api::<Deployment>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment)
        .await?;
    Ok(())
}

async fn running_pods(client: &kube::Client) -> Result<usize, kube::Error> {
    let pods = Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels("app=web"))
        .await?;
    Ok(pods
        .items
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count())
}

/// Waits on virtual time, one simulated second at a time, until `n` web pods run.
async fn until_running(client: &kube::Client, n: usize, within_secs: u64) -> TestResult {
    for _ in 0..within_secs {
        if running_pods(client).await? == n {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(format!(
        "{} of {n} pods running after {within_secs}s",
        running_pods(client).await?
    )
    .into())
}

#[tokio::test(start_paused = true)]
async fn a_deployment_scaled_from_zero_gets_nodes_and_runs() -> TestResult {
    let h = start()?;
    let client = h.sim.client();
    apply_pool_and_deployment(&client, 6).await?;
    until_running(&client, 6, 300).await?;

    let claims = Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    assert!(!claims.items.is_empty());
    for claim in &claims.items {
        let status = claim.status.clone().unwrap_or_default();
        for c in [
            conditions::LAUNCHED,
            conditions::REGISTERED,
            conditions::INITIALIZED,
            conditions::READY,
        ] {
            assert_eq!(
                find_condition(&status.conditions, c).map(|c| c.status),
                Some(ConditionStatus::True),
                "{c} on {:?}",
                claim.metadata.name
            );
        }
        assert!(status.provider_id.is_some() && status.node_name.is_some());
        let claim_labels = claim.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            claim_labels.get(labels::NODEPOOL_LABEL).map(String::as_str),
            Some("default")
        );
        assert!(
            claim_labels.contains_key(labels::INSTANCE_TYPE_LABEL),
            "the launch's labels are synced"
        );
        assert!(
            claim
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(labels::NODEPOOL_HASH_ANNOTATION))
        );
    }
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    assert_eq!(nodes.items.len(), claims.items.len());
    for node in &nodes.items {
        let node_labels = node.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            node_labels.get(labels::INITIALIZED_LABEL).map(String::as_str),
            Some("true")
        );
        assert_eq!(
            node_labels.get(labels::REGISTERED_LABEL).map(String::as_str),
            Some("true")
        );
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        assert!(taints.iter().all(|t| t.key != labels::UNREGISTERED_TAINT_KEY));
    }

    // Once every pod runs, time passing launches nothing more: no duplicate launches for pods already placed.
    let launched = h.sim.cloud().launch_log().len();
    assert_eq!(launched, claims.items.len());
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(h.sim.cloud().launch_log().len(), launched);

    // Scaling up again adds capacity for the new pods only.
    Api::<Deployment>::namespaced(client.clone(), "default")
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 12}})),
        )
        .await?;
    until_running(&client, 12, 300).await?;
    let claims_after = Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    assert!(claims_after.items.len() > claims.items.len());
    assert_eq!(h.sim.cloud().launch_log().len(), claims_after.items.len());
    Ok(())
}
