//! The whole simulated cluster in one handle: the API server, the cloud, kubelets, kube-scheduler and the
//! workload controllers, driven on one clock.
//!
//! # Public API
//! - [`SimOptions::new`]`(catalog, clock)` with every delay at its default (see [`KubeletOptions`],
//!   [`SimCloudOptions`], [`WorkloadOptions`]); [`SimCluster::start`] spawns the simulation on the current tokio
//!   runtime.
//! - [`SimCluster::api`] (the [`ApiServer`]), [`SimCluster::client`] (a `kube::Client` on it),
//!   [`SimCluster::cloud`] (the [`SimCloudProvider`], for faults, interruptions, cost),
//!   [`SimCluster::cloud_provider`] (the same as `Arc<dyn CloudProvider>`, what controllers hold),
//!   [`SimCluster::clock`], [`SimCluster::shutdown`].
//!
//! # Determinism
//! Every [`SimOptions::tick`] of the clock one task runs the workload controllers, then the scheduler, then the
//! kubelets, in that fixed order, each reading the API server in (namespace, name) order. Names come from
//! seeded generators (the API server's, the cloud's). So under `#[tokio::test(start_paused = true)]` the same
//! scenario, with the same controller calls, gives the same cluster every run. The components run in one task
//! rather than one task each so that their interleaving never depends on the runtime's scheduling.
//!
//! # Simplified
//! Components poll every tick (skipping the work when nothing changed) instead of watching; an action is
//! therefore up to one tick late.

use std::{sync::Arc, time::Duration};

use karpenter_core::{catalog::CatalogFile, cloudprovider::CloudProvider};
use tokio::{sync::watch, task::JoinHandle};

use crate::{
    apiserver::{ApiServer, ApiServerOptions},
    clock::Clock,
    cloud::{SimCloudOptions, SimCloudProvider},
    kubelet::{KubeletOptions, Kubelets},
    scheduler::KubeScheduler,
    workloads::{WorkloadOptions, Workloads},
};

/// How to build a [`SimCluster`].
#[derive(Clone)]
pub struct SimOptions {
    pub catalog: CatalogFile,
    pub clock: Arc<dyn Clock>,
    /// How often the simulated components look at the cluster.
    pub tick: Duration,
    pub api: ApiServerOptions,
    pub cloud: SimCloudOptions,
    pub kubelet: KubeletOptions,
    pub workloads: WorkloadOptions,
    /// Whether the simulated kube-scheduler runs (off to test something else binding pods).
    pub scheduler: bool,
}

impl std::fmt::Debug for SimOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimOptions")
            .field("instance_types", &self.catalog.instance_types.len())
            .field("now", &self.clock.now())
            .field("tick", &self.tick)
            .field("cloud", &self.cloud)
            .field("kubelet", &self.kubelet)
            .field("workloads", &self.workloads)
            .field("scheduler", &self.scheduler)
            .finish_non_exhaustive()
    }
}

/// EC2NodeClass `default`, Ready, as the AWS provider's NodeClass controller leaves it in a working cluster: the
/// NodePools of scenarios and tests refer to it, and a NodePool whose NodeClass is missing or not ready is not
/// Ready and launches nothing (as upstream).
fn seed_default_node_class(api: &ApiServer, now: jiff::Timestamp) {
    let id = crate::apiserver::ResourceId::new(karpenter_api::labels::AWS_GROUP, "ec2nodeclasses");
    let object = serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
        "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "KarpenterNodeRole"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
            "lastTransitionTime": now.to_string()}]}
    });
    if let Err(error) = api.apply_internal(&id, object) {
        tracing::warn!(%error, "seeding EC2NodeClass default failed");
    }
}

impl SimOptions {
    /// Defaults for everything but the catalog and the clock.
    pub fn new(catalog: CatalogFile, clock: Arc<dyn Clock>) -> Self {
        Self {
            catalog,
            clock,
            tick: Duration::from_secs(1),
            api: ApiServerOptions::default(),
            cloud: SimCloudOptions::default(),
            kubelet: KubeletOptions::default(),
            workloads: WorkloadOptions::default(),
            scheduler: true,
        }
    }
}

/// A running simulated cluster. Dropping it stops the simulation; [`SimCluster::shutdown`] waits for it.
pub struct SimCluster {
    api: ApiServer,
    cloud: SimCloudProvider,
    clock: Arc<dyn Clock>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCluster")
            .field("api", &self.api)
            .field("cloud", &self.cloud)
            .finish_non_exhaustive()
    }
}

impl SimCluster {
    /// Builds the cluster and spawns its loop on the current tokio runtime.
    pub fn start(options: SimOptions) -> Self {
        let clock = Arc::clone(&options.clock);
        let api = ApiServer::with_options(Arc::clone(&clock), options.api.clone());
        seed_default_node_class(&api, clock.now());
        let cloud = SimCloudProvider::new(options.catalog, Arc::clone(&clock), options.cloud);
        let mut workloads = Workloads::new(api.clone(), Arc::clone(&clock), options.workloads);
        let mut scheduler = options.scheduler.then(|| KubeScheduler::new(api.clone()));
        let mut kubelets = Kubelets::new(api.clone(), cloud.clone(), Arc::clone(&clock), options.kubelet);
        let (stop, mut stopped) = watch::channel(false);
        let tick = options.tick.max(Duration::from_millis(1));
        let task = tokio::spawn(async move {
            loop {
                workloads.step();
                if let Some(s) = scheduler.as_mut() {
                    s.step();
                }
                kubelets.step();
                tokio::select! {
                    _ = tokio::time::sleep(tick) => {}
                    _ = stopped.changed() => return,
                }
            }
        });
        Self {
            api,
            cloud,
            clock,
            stop,
            task: Some(task),
        }
    }

    pub fn api(&self) -> &ApiServer {
        &self.api
    }

    /// A kube client on the simulated API server (default namespace "default").
    pub fn client(&self) -> kube::Client {
        self.api.client()
    }

    pub fn cloud(&self) -> &SimCloudProvider {
        &self.cloud
    }

    /// The cloud as the controllers hold it.
    pub fn cloud_provider(&self) -> Arc<dyn CloudProvider> {
        self.cloud.as_dyn()
    }

    pub fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.clock)
    }

    /// Stops the simulation loop and waits for it to end.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
