//! The end-to-end harness: a simulated cluster (karpenter-sim) with the controllers running against it through
//! kube-runtime, all on one virtual clock (`#[tokio::test(start_paused = true)]`), so minutes of cluster life
//! take milliseconds and every run is the same.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::{apps::v1::Deployment, policy::v1::PodDisruptionBudget};
use karpenter_api::label_policy::LabelPolicy;
use karpenter_api::nodepool::NodePool;
use karpenter_core::{catalog::CatalogFile, snapshot::BuildOptions};
use karpenter_operator::{ControllerParts, Settings, controller_tasks};
use karpenter_sim::{SimCluster, SimOptions, VirtualClock};
use karpenter_state::api_errors::is_conflict;
use karpenter_state::{ClusterState, ControllerContext, Watched};
use kube::{
    Api,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

pub type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// The 3-type test catalog (small, medium, large; spot and on-demand in test-zone-1..3).
pub const CATALOG: &str = include_str!("../../crates/karpenter-sim/tests/fixtures/catalog.json");

/// A simulated cluster with the state cache, the provisioner, the NodeClaim lifecycle, the terminator, the
/// interruption controller and garbage collection running (and disruption when asked). Dropping it stops them.
pub struct Harness {
    pub sim: SimCluster,
    pub state: ClusterState,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.tasks.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

/// Which controllers a harness runs besides the state cache, the provisioner, the lifecycle and the terminator.
#[derive(Debug, Clone, Copy, Default)]
pub struct Controllers {
    pub disruption: bool,
}

impl Harness {
    /// The provisioner, the lifecycle and the terminator, without disruption.
    pub fn start() -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Self::start_with(Controllers::default())
    }

    pub fn start_with(controllers: Controllers) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Self::start_with_settings(controllers, Settings::default())
    }

    /// With the controller settings (feature gates, batch windows) a test needs.
    pub fn start_with_settings(
        controllers: Controllers,
        settings: Settings,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Self::start_with_catalog(controllers, settings, CatalogFile::from_json_str(CATALOG)?)
    }

    /// With instance types other than [`CATALOG`]'s (GPU types, say).
    pub fn start_with_catalog(
        controllers: Controllers,
        settings: Settings,
        catalog: CatalogFile,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let well_known = catalog.well_known_labels.clone();
        let clock = Arc::new(VirtualClock::starting_at("2026-01-01T00:00:00Z".parse()?));
        let sim = SimCluster::start(SimOptions::new(catalog, clock));
        let client = sim.client();
        // As `karpenter controller`: the gated kinds are watched only with their gates on.
        let state = ClusterState::new(Watched {
            node_overlays: settings.feature_gates.node_overlay,
            capacity_buffers: settings.feature_gates.capacity_buffer,
            ..Watched::default()
        });
        let parts = ControllerParts {
            client: client.clone(),
            state: state.clone(),
            cloud: sim.cloud_provider(),
            clock: sim.clock(),
            interruption: Some(sim.cloud().interruption_source()),
            build: BuildOptions {
                label_policy: LabelPolicy::Core,
                extra_well_known_labels: well_known,
                ..BuildOptions::default()
            },
            settings,
            observer: None,
        };
        let mut tasks = vec![tokio::spawn({
            let state = state.clone();
            async move { state.watch(client).await }
        })];
        tasks.extend(
            controller_tasks(&parts)
                .into_iter()
                .filter(|(name, _)| controllers.disruption || *name != "disruption")
                .map(|(_, task)| tokio::spawn(task)),
        );
        Ok(Self { sim, state, tasks })
    }

    pub fn client(&self) -> kube::Client {
        self.sim.client()
    }

    /// A controller's context on the simulated cluster: its client, this harness's cache and its clock.
    pub fn context(&self) -> ControllerContext {
        ControllerContext::new(self.client(), self.state.clone(), self.sim.clock())
    }
}

/// Pods labelled `selector` in `default` whose phase is Running and that are not being deleted.
pub async fn running_pods(client: &kube::Client, selector: &str) -> Result<Vec<Pod>, kube::Error> {
    let pods = Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels(selector))
        .await?;
    Ok(pods
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .collect())
}

/// Waits on virtual time, one simulated second at a time, until `n` pods matching `selector` run.
pub async fn until_running(client: &kube::Client, selector: &str, n: usize, within_secs: u64) -> TestResult {
    for _ in 0..within_secs {
        if running_pods(client, selector).await?.len() == n {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let now = running_pods(client, selector).await?.len();
    Err(format!("{now} of {n} pods running after {within_secs}s").into())
}

/// Creates NodePool `name` allowing `capacity_types`, with `disruption` as its `spec.disruption` (`null` for
/// the defaults).
pub async fn apply_nodepool(
    client: &kube::Client,
    name: &str,
    capacity_types: &[&str],
    disruption: Value,
) -> TestResult {
    let mut pool = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
    });
    if !disruption.is_null() {
        pool["spec"]["disruption"] = disruption;
    }
    let pool: NodePool = serde_json::from_value(pool)?;
    Api::<NodePool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await?;
    Ok(())
}

/// Changes NodePool `name`'s template (a label every node lacks), so every node it launched so far drifts.
pub async fn drift_nodepool(client: &kube::Client, name: &str) -> TestResult {
    Api::<NodePool>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}})),
        )
        .await?;
    Ok(())
}

/// Creates EC2NodeClass `name` without a status, as a user applies it (the NodePools of these tests name
/// `default`); one that exists already (the simulated cluster starts with a Ready `default`) is left as it is.
pub async fn apply_node_class(client: &kube::Client, name: &str) -> TestResult {
    let gvk = GroupVersionKind::gvk(karpenter_api::labels::AWS_GROUP, "v1", "EC2NodeClass");
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "ec2nodeclasses"),
    );
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name},
        "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "KarpenterNodeRole"}
    }))?;
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(e) if is_conflict(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Creates Deployment `name` in `default` (pods labelled `app=<name>`, each requesting `cpu` and 256Mi).
pub async fn apply_deployment(client: &kube::Client, name: &str, replicas: i32, cpu: &str) -> TestResult {
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "sim",
                    "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]}}}
    }))?;
    Api::<Deployment>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment)
        .await?;
    Ok(())
}

/// Creates a PodDisruptionBudget over `app=<app>` allowing `max_unavailable` pods down.
pub async fn apply_pdb(client: &kube::Client, app: &str, max_unavailable: i32) -> TestResult {
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": app, "namespace": "default"},
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": {"app": app}}}
    }))?;
    Api::<PodDisruptionBudget>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &pdb)
        .await?;
    Ok(())
}

pub mod control_plane;
pub mod python_venv;
pub mod replicas;
