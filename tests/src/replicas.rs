//! Helpers for the tests that run the controller as a whole process ([`Replica`]: an [`Operator`] with leader
//! election, as `karpenter controller` runs), restart the harness's controllers, and check what a user would
//! notice afterwards ([`invariants`]: no orphan instance, no NodeClaim without one, no node left tainted).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use async_trait::async_trait;
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Node};
use karpenter_api::{label_policy::LabelPolicy, labels, nodeclaim::NodeClaim, nodepool::NodePool};
use karpenter_core::{
    catalog::{CatalogFile, CatalogInstanceType},
    cloudprovider::{CloudProvider, CloudProviderError, NodeClassKind, RepairPolicy},
    disruption::drift::DriftProvider,
    snapshot::BuildOptions,
};
use karpenter_operator::{
    ControllerParts, LeaseTimings, Operator, OperatorError, Settings, controller_tasks,
};
use karpenter_sim::{SimCluster, SimOptions, VirtualClock, cloud::LaunchOutcome};
use karpenter_state::{ClusterState, Watched};
use kube::{Api, ResourceExt, api::ListParams};
use tokio::{sync::oneshot, task::JoinHandle};

use crate::{Controllers, Harness, TestResult};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The Lease the controller elects its leader on (the default `LEADER_ELECTION_NAME` in `kube-system`).
pub const LEASE_NAME: &str = "karpenter-leader-election";
pub const LEASE_NAMESPACE: &str = "kube-system";

/// A simulated cluster on the test catalog, its clock at the harness's start time, no controller running.
pub fn sim() -> Result<SimCluster, BoxError> {
    let catalog = CatalogFile::from_json_str(crate::CATALOG)?;
    let clock = Arc::new(VirtualClock::starting_at("2026-01-01T00:00:00Z".parse()?));
    Ok(SimCluster::start(SimOptions::new(catalog, clock)))
}

/// The controllers' shared parts on `sim`, with a fresh state cache, the test catalog's well-known labels and
/// `cloud` as the cloud provider.
pub fn parts_on(sim: &SimCluster, cloud: Arc<dyn CloudProvider>, settings: Settings) -> ControllerParts {
    ControllerParts {
        client: sim.client(),
        state: ClusterState::new(Watched::default()),
        cloud,
        clock: sim.clock(),
        interruption: Some(sim.cloud().interruption_source()),
        build: BuildOptions {
            label_policy: LabelPolicy::Core,
            extra_well_known_labels: sim.cloud().catalog().well_known_labels.clone(),
            ..BuildOptions::default()
        },
        settings,
        observer: None,
    }
}

/// Which replica called `create`, for which NodeClaim, in call order.
pub type CreateLog = Arc<Mutex<Vec<(String, String)>>>;

/// The simulated cloud as one replica holds it: every `create` is recorded with the replica's identity, so a
/// test can tell which replica launched what.
pub struct Attributed {
    inner: Arc<dyn CloudProvider>,
    identity: String,
    log: CreateLog,
}

impl Attributed {
    pub fn wrap(inner: Arc<dyn CloudProvider>, identity: &str, log: CreateLog) -> Arc<dyn CloudProvider> {
        Arc::new(Self {
            inner,
            identity: identity.to_string(),
            log,
        })
    }
}

impl DriftProvider for Attributed {
    fn is_drifted(&self, claim: &NodeClaim) -> Option<String> {
        self.inner.is_drifted(claim)
    }
}

#[async_trait]
impl CloudProvider for Attributed {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    async fn create(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((self.identity.clone(), claim.name_any()));
        self.inner.create(claim).await
    }

    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudProviderError> {
        self.inner.delete(claim).await
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        self.inner.get(provider_id).await
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        self.inner.list().await
    }

    async fn instance_types(
        &self,
        node_pool: &NodePool,
    ) -> Result<Vec<CatalogInstanceType>, CloudProviderError> {
        self.inner.instance_types(node_pool).await
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        self.inner.repair_policies()
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        self.inner.supported_node_classes()
    }

    fn node_classes_report_readiness(&self) -> bool {
        self.inner.node_classes_report_readiness()
    }
}

/// One controller process on the simulated cluster: [`Operator::run`] with leader election on, no HTTP
/// servers, its own state cache, and a cloud provider that attributes its launches to `identity`.
pub struct Replica {
    pub identity: String,
    pub state: ClusterState,
    task: Option<JoinHandle<Result<(), OperatorError>>>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl Replica {
    /// Starts `identity` (it waits for the Lease before running any controller).
    pub fn start(sim: &SimCluster, identity: &str, creates: &CreateLog) -> Self {
        let settings = Settings {
            identity: identity.to_string(),
            ..Settings::default()
        };
        let cloud = Attributed::wrap(sim.cloud_provider(), identity, Arc::clone(creates));
        let parts = parts_on(sim, cloud, settings);
        let state = parts.state.clone();
        let operator = Operator {
            serve_http: false,
            lease_timings: LeaseTimings::default(),
            ..Operator::new(parts)
        };
        let (tx, rx) = oneshot::channel::<()>();
        // Spawned like the binary runs it: `Operator::run` is Send.
        let task = tokio::spawn(operator.run(async move {
            let _ = rx.await;
        }));
        Self {
            identity: identity.to_string(),
            state,
            task: Some(task),
            shutdown: Some(tx),
        }
    }

    /// Kills the process as a crash would: every task stops at once and the Lease is not released.
    pub async fn crash(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// Stops the process cleanly (the Lease is released) and returns how [`Operator::run`] ended.
    pub async fn shutdown(mut self) -> Result<(), BoxError> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.task.take() {
            Some(task) => Ok(task.await??),
            None => Ok(()),
        }
    }

    /// Whether [`Operator::run`] has returned (it should not, while the test runs).
    pub fn has_exited(&self) -> bool {
        self.task.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Who holds the leader Lease now (`None` when nobody does, or there is no Lease yet).
pub async fn lease_holder(client: &kube::Client) -> Result<Option<String>, kube::Error> {
    let lease = Api::<Lease>::namespaced(client.clone(), LEASE_NAMESPACE)
        .get_opt(LEASE_NAME)
        .await?;
    Ok(lease
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}

impl Harness {
    /// Kills every controller task of the harness (the state cache's watches too) as a crash would, then
    /// starts a fresh set on a fresh state cache: a controller process restarted.
    pub async fn restart_controllers(&mut self, controllers: Controllers) -> TestResult {
        for task in self.tasks.drain(..) {
            task.abort();
            let _ = task.await;
        }
        let parts = parts_on(&self.sim, self.sim.cloud_provider(), Settings::default());
        self.state = parts.state.clone();
        let client = parts.client.clone();
        self.tasks.push(tokio::spawn({
            let state = parts.state.clone();
            async move { state.watch(client).await }
        }));
        self.tasks.extend(
            controller_tasks(&parts)
                .into_iter()
                .filter(|(name, _)| controllers.disruption || *name != "disruption")
                .map(|(_, task)| tokio::spawn(task)),
        );
        Ok(())
    }
}

/// Checks of what a user would notice after the controllers have settled.
pub mod invariants {
    use super::*;

    /// Problems with instances and NodeClaims: a running instance without a NodeClaim of its name and
    /// provider ID (an orphan, paid for and never used), a launched NodeClaim whose instance is not running,
    /// two instances for one NodeClaim, or a NodeClaim launched twice.
    pub async fn instance_problems(sim: &SimCluster) -> Result<Vec<String>, BoxError> {
        let claims = Api::<NodeClaim>::all(sim.client())
            .list(&ListParams::default())
            .await?;
        let by_name: BTreeMap<String, &NodeClaim> = claims.items.iter().map(|c| (c.name_any(), c)).collect();
        let running = sim.cloud().running_instances();
        let mut problems = Vec::new();
        let mut seen = BTreeSet::new();
        for instance in &running {
            let name = instance.claim.name_any();
            if !seen.insert(name.clone()) {
                problems.push(format!("two running instances for NodeClaim {name}"));
            }
            let provider_id = by_name
                .get(&name)
                .and_then(|c| c.status.as_ref())
                .and_then(|s| s.provider_id.as_deref());
            if provider_id != Some(instance.provider_id.as_str()) {
                problems.push(format!(
                    "orphan instance {} (NodeClaim {name}: {provider_id:?})",
                    instance.provider_id
                ));
            }
        }
        let running_ids: BTreeSet<&str> = running.iter().map(|i| i.provider_id.as_str()).collect();
        for claim in &claims.items {
            let Some(id) = claim.status.as_ref().and_then(|s| s.provider_id.as_deref()) else {
                problems.push(format!("NodeClaim {} never launched", claim.name_any()));
                continue;
            };
            if !running_ids.contains(id) {
                problems.push(format!(
                    "NodeClaim {} has no running instance ({id})",
                    claim.name_any()
                ));
            }
        }
        let mut launched = BTreeMap::<String, usize>::new();
        for record in sim.cloud().launch_log() {
            if matches!(record.outcome, LaunchOutcome::Launched { .. }) {
                *launched.entry(record.node_claim).or_default() += 1;
            }
        }
        for (claim, n) in launched.iter().filter(|(_, n)| **n > 1) {
            problems.push(format!("NodeClaim {claim} was launched {n} times"));
        }
        Ok(problems)
    }

    /// Nodes carrying the `karpenter.sh/disrupted` taint now.
    pub async fn disrupted_nodes(client: &kube::Client) -> Result<Vec<Node>, kube::Error> {
        let nodes = Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await?;
        Ok(nodes
            .items
            .into_iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| t.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY))
            })
            .collect())
    }

    /// Nodes tainted `karpenter.sh/disrupted` whose NodeClaim is not being deleted: a disruption left half
    /// done, the node cordoned for good.
    pub async fn stranded_disrupted_nodes(client: &kube::Client) -> Result<Vec<String>, BoxError> {
        let claims = Api::<NodeClaim>::all(client.clone())
            .list(&ListParams::default())
            .await?;
        let deleting: BTreeSet<String> = claims
            .items
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_some())
            .filter_map(|c| c.status.as_ref()?.node_name.clone())
            .collect();
        Ok(disrupted_nodes(client)
            .await?
            .into_iter()
            .filter(|n| n.metadata.deletion_timestamp.is_none())
            .map(|n| n.name_any())
            .filter(|n| !deleting.contains(n))
            .collect())
    }

    /// How many NodeClaims were ever created through the API (the audit log's successful creates).
    pub fn node_claims_created(sim: &SimCluster) -> usize {
        sim.api()
            .audit()
            .iter()
            .filter(|r| r.resource == "nodeclaims" && r.verb == "create" && r.subresource.is_none())
            .filter(|r| (200..300).contains(&r.code))
            .count()
    }

    /// Successful launches in the cloud's log.
    pub fn instances_launched(sim: &SimCluster) -> usize {
        sim.cloud()
            .launch_log()
            .iter()
            .filter(|r| matches!(r.outcome, LaunchOutcome::Launched { .. }))
            .count()
    }

    /// Pods deleted through the API rather than evicted (a delete bypasses PodDisruptionBudgets), as
    /// `karpenter simulate` counts PDB violations.
    pub fn pod_deletes_bypassing_eviction(sim: &SimCluster) -> usize {
        sim.api()
            .audit()
            .iter()
            .filter(|r| r.resource == "pods" && r.verb == "delete" && r.subresource.is_none())
            .filter(|r| (200..300).contains(&r.code))
            .count()
    }

    /// Waits on virtual time, `step` at a time, at most `steps` times, until `check` yields no problem;
    /// returns the last problems otherwise.
    pub async fn settle<F, Fut>(steps: usize, step: Duration, mut check: F) -> TestResult
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Vec<String>, BoxError>>,
    {
        let mut problems = Vec::new();
        for _ in 0..steps {
            problems = check().await?;
            if problems.is_empty() {
                return Ok(());
            }
            tokio::time::sleep(step).await;
        }
        Err(format!("still wrong after {steps} steps of {step:?}: {problems:?}").into())
    }
}
