//! The provisioning loop: wait for a batch of pending pods, simulate, create the NodeClaims the simulation asks
//! for. Pods that fit on existing nodes or on NodeClaims still launching get no new capacity: the snapshot holds
//! both, and core's simulation places pods there first. Each placed pod is told where it goes
//! ([`nominations`]).

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use futures::{StreamExt, stream};
use karpenter_api::{label_policy::LabelPolicy, nodeclaim::NodeClaim};
use karpenter_core::{
    cloudprovider::CloudProvider,
    provisioning::{ClaimContext, node_claim_object},
    scheduling::schedule,
    snapshot::{BuildOptions, Snapshot, build_schedule_inputs},
};
use karpenter_state::{ClusterState, ControllerContext, events::DedupedRecorder};
use kube::{
    Api,
    api::{PostParams, ResourceExt},
};

use crate::{
    ProvisionerError,
    batcher::BatchWindow,
    capacity_buffer::{BufferSignals, ProvisioningOutcome},
    catalog::{NodePoolCatalog, catalog_by_node_pool},
    nominations::{self, Nomination, RecentNominations},
    pending::is_provisionable,
    scheduling_events::{self, Warning},
};

/// NodeClaims created at once: a batch of 10,000 pods asks for thousands, and one at a time the round would
/// wait out thousands of API round trips (upstream creates them in parallel too).
const CREATE_CONCURRENCY: usize = 16;

/// How the provisioner runs.
#[derive(Debug, Clone)]
pub struct ProvisionerSettings {
    pub batch: BatchWindow,
    /// How often the cache is looked at for pending pods (tokio time).
    pub poll: Duration,
    pub build: BuildOptions,
}

impl Default for ProvisionerSettings {
    fn default() -> Self {
        Self {
            batch: BatchWindow::default(),
            poll: Duration::from_millis(100),
            build: BuildOptions {
                label_policy: LabelPolicy::Aws,
                ..BuildOptions::default()
            },
        }
    }
}

/// What one round did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProvisionRound {
    /// Names of the NodeClaims created.
    pub created: Vec<String>,
    /// Pending pods the round considered.
    pub pending: usize,
    /// `namespace/name: why` for pods left without a place.
    pub unschedulable: Vec<String>,
}

/// The provisioner's context.
pub struct Provisioner {
    cx: ControllerContext,
    cloud: Arc<dyn CloudProvider>,
    settings: ProvisionerSettings,
    /// Pods nominated lately: a pod pending through many rounds is not nominated in every one.
    recent_nominations: std::sync::Mutex<RecentNominations>,
    /// `FailedScheduling` and `NoCompatibleInstanceTypes`, deduplicated as upstream ([`scheduling_events`]).
    events: Arc<DedupedRecorder>,
    /// With the CapacityBuffer gate: the buffer controller's requests for a round, and where each buffer's
    /// placeholder pods went in the last one.
    buffers: Option<Arc<BufferSignals>>,
}

impl Provisioner {
    /// Its events are deduplicated on the context's clock (the virtual one in `simulate` and the tests).
    pub fn new(cx: ControllerContext, cloud: Arc<dyn CloudProvider>, settings: ProvisionerSettings) -> Self {
        Self {
            recent_nominations: std::sync::Mutex::new(RecentNominations::default()),
            events: Arc::new(cx.recorder()),
            cx,
            cloud,
            settings,
            buffers: None,
        }
    }

    /// Runs a round whenever `signals` is triggered (a CapacityBuffer changed, or its 30 s resync), even with no
    /// pod pending, and reports there where each buffer's placeholder pods went.
    pub fn with_buffer_signals(mut self, signals: Arc<BufferSignals>) -> Self {
        self.buffers = Some(signals);
        self
    }

    /// Tells the buffer controller where the round put each buffer's placeholder pods, and disruption which
    /// nodes and NodeClaims hold them (with the CapacityBuffer gate; nothing otherwise).
    fn record_buffers(&self, outcomes: HashMap<String, ProvisioningOutcome>, nodes: HashSet<String>) {
        if let Some(signals) = &self.buffers {
            signals.record(outcomes);
            self.cx.state.capacity_buffer_nodes.set(nodes);
        }
    }

    /// Runs batches until the future is dropped. A failed round is logged and retried with the next batch.
    pub async fn run(&self) {
        let triggered = || self.buffers.as_ref().map_or(0, |b| b.triggered());
        // The buffer controller's requests already answered by a round.
        let mut answered = triggered();
        loop {
            let state = &self.cx.state;
            let mut cache = None;
            // A batch starts with a pending pod or with a buffer's request, and runs its window either way.
            self.settings
                .batch
                .wait(self.settings.poll, || {
                    let pods = pending_signature(state, &mut cache);
                    let requested = triggered();
                    (pods.is_some() || requested != answered).then_some((pods, requested))
                })
                .await;
            answered = triggered();
            let mut timer = karpenter_metrics::metrics().reconcile("provisioner");
            match self.provision_once().await {
                Ok(round) if !round.created.is_empty() => {
                    tracing::info!(controller = "provisioner", created = ?round.created, pending = round.pending, "created NodeClaims");
                }
                Ok(_) => {}
                Err(error) => {
                    timer.failed();
                    tracing::warn!(controller = "provisioner", category = error.category(), %error, "provisioning failed; retrying");
                }
            }
            drop(timer);
            // Give the watch time to deliver what was created before the next batch is measured.
            tokio::time::sleep(self.settings.batch.idle).await;
        }
    }

    /// One round over the cache as it is now.
    pub async fn provision_once(&self) -> Result<ProvisionRound, ProvisionerError> {
        if !self.cx.state.synced() {
            return Err(ProvisionerError::NotSynced);
        }
        let mut snapshot = self.cx.state.snapshot();
        // Unbound pods kube-scheduler has not given up on may still land on a node: leave them out.
        snapshot.pods.retain(|p| {
            let bound = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| !n.is_empty());
            bound || is_provisionable(p)
        });
        let pending = snapshot.pods.iter().filter(|p| is_provisionable(p)).count();
        // CapacityBuffers' placeholder pods need a round with no real pod pending.
        let buffers = self.settings.build.capacity_buffers && !snapshot.capacity_buffers.is_empty();
        if pending == 0 && !buffers {
            self.record_buffers(HashMap::new(), HashSet::new());
            return Ok(ProvisionRound::default());
        }
        let mut pools = managed_pools(&snapshot, self.cloud.as_ref());
        let NodePoolCatalog {
            mut catalog,
            mut failed,
        } = catalog_by_node_pool(self.cloud.as_ref(), &pools).await;
        if failed.len() == pools.len()
            && let Some((_, error)) = failed.pop()
        {
            return Err(error.into());
        }
        // One NodePool whose instance types cannot be listed (its node class, a throttled API) sits this round
        // out; the others provision.
        for (pool, error) in &failed {
            tracing::warn!(controller = "provisioner", nodepool = %pool, category = error.category(), %error, "instance types could not be listed; the NodePool is skipped this round");
        }
        pools.retain(|p| {
            !failed
                .iter()
                .any(|(name, _)| p.metadata.name.as_deref() == Some(name.as_str()))
        });
        catalog.well_known_labels = self.settings.build.extra_well_known_labels.clone();
        snapshot.node_pools = pools;

        let metrics = karpenter_metrics::metrics();
        let controller = karpenter_metrics::ControllerLabels {
            controller: "provisioner".into(),
        };
        let started = std::time::Instant::now();
        let queue_depth = metrics.scheduler_queue_depth.get_or_create(&controller).clone();
        queue_depth.set(i64::try_from(pending).unwrap_or(i64::MAX));
        let mut inputs = build_schedule_inputs(&snapshot, &catalog, &self.settings.build);
        if inputs.input.pods.is_empty() {
            // Only buffers, and none of them resolved to a placeholder pod.
            queue_depth.set(0);
            self.record_buffers(HashMap::new(), HashSet::new());
            return Ok(ProvisionRound::default());
        }
        let results = schedule(&inputs.input, &mut inputs.interner, &inputs.table);
        let placements = buffer_outcomes(&inputs, &results);
        // Where placeholders went: existing nodes and in-flight NodeClaims now, the NodeClaims made for them below.
        let mut buffer_nodes: HashSet<String> = results
            .existing_nodes
            .iter()
            .filter(|(_, pods)| pods.iter().any(|p| inputs.is_buffer_pod(*p)))
            .filter_map(|(node, _)| inputs.node_names.get(*node).cloned())
            .collect();
        // The simulation decides every pod in one call: nothing is left queued once it returns.
        queue_depth.set(0);
        metrics
            .scheduler_scheduling_duration_seconds
            .get_or_create(&controller)
            .observe(started.elapsed().as_secs_f64());
        metrics
            .scheduler_unschedulable_pods_count
            .get_or_create(&controller)
            .set(
                i64::try_from(
                    results
                        .pod_errors
                        .iter()
                        .filter(|(p, _)| !inputs.is_buffer_pod(*p))
                        .count(),
                )
                .unwrap_or(i64::MAX),
            );
        // As upstream's scheduler: each NodePool left no instance type, each pod left no place, is told.
        let mut warnings: Vec<Warning> = inputs
            .input
            .templates
            .iter()
            .filter(|t| t.instance_types.is_empty())
            .filter_map(|t| {
                let pool = snapshot
                    .node_pools
                    .iter()
                    .find(|p| p.metadata.name.as_deref() == Some(t.name.as_str()))?;
                Some(scheduling_events::no_compatible_instance_types(pool))
            })
            .collect();
        // Placeholder pods (CapacityBuffers) are no pods of the cluster: nothing to send an event about.
        warnings.extend(
            results
                .pod_errors
                .iter()
                .filter(|(p, _)| !inputs.is_buffer_pod(*p))
                .filter_map(|(p, why)| {
                    let name = inputs.pod_names.get(*p)?;
                    let uid = self
                        .cx
                        .state
                        .pods
                        .get(name)
                        .map(|pod| pod.metadata.uid)
                        .unwrap_or_default();
                    scheduling_events::failed_scheduling(name, uid, why)
                }),
        );
        if !warnings.is_empty() {
            // Informational, as the nominations: sent beside the round, never slowing it down.
            let events = Arc::clone(&self.events);
            tokio::spawn(async move {
                for w in &warnings {
                    events
                        .warn_deduped(&w.regarding, w.reason, &w.message, w.dedupe())
                        .await;
                }
            });
        }
        let mut round = ProvisionRound {
            pending,
            unschedulable: results
                .pod_errors
                .iter()
                .map(|(p, why)| format!("{}: {why}", inputs.pod_names.get(*p).map_or("?", String::as_str)))
                .collect(),
            ..ProvisionRound::default()
        };
        let by_name: HashMap<&str, _> = snapshot
            .node_pools
            .iter()
            .filter_map(|p| Some((p.metadata.name.as_deref()?, p)))
            .collect();
        // Build every object first, then create them concurrently; results come back in order.
        let mut planned = Vec::with_capacity(results.new_node_claims.len());
        for claim in &results.new_node_claims {
            let Some(template) = inputs.input.templates.get(claim.template) else {
                continue;
            };
            let pool = by_name.get(template.name.as_str());
            let hash = pool.map(|p| p.hash());
            let object = node_claim_object(
                &ClaimContext {
                    interner: &inputs.interner,
                    table: &inputs.table,
                    template,
                    nodepool_hash: hash.as_deref(),
                    nodepool_uid: pool.and_then(|p| p.metadata.uid.as_deref()),
                },
                claim,
            );
            planned.push((object, template.name.as_str(), claim));
        }
        let api: Api<NodeClaim> = Api::all(self.cx.client.clone());
        let params = PostParams::default();
        // Collected first: a closure inside the stream would make this future's Send-ness depend on
        // higher-ranked lifetimes the compiler cannot prove.
        let creates: Vec<_> = planned
            .iter()
            .map(|(object, ..)| api.create(&params, object))
            .collect();
        let outcomes: Vec<_> = stream::iter(creates).buffered(CREATE_CONCURRENCY).collect().await;
        let mut nominations = Vec::new();
        let mut first_error = None;
        for ((_, pool, claim), outcome) in planned.iter().zip(outcomes) {
            let created = match outcome {
                Ok(created) => created,
                Err(error) => {
                    tracing::warn!(controller = "provisioner", nodepool = %pool, %error, "creating a NodeClaim failed");
                    first_error.get_or_insert(error);
                    continue;
                }
            };
            metrics
                .nodeclaims_created
                .get_or_create(&karpenter_metrics::NodeClaimCreatedLabels {
                    reason: "provisioning".into(),
                    nodepool: (*pool).to_string(),
                    min_values_relaxed: claim.min_values_relaxed.to_string(),
                })
                .inc();
            let name = created.name_any();
            if claim.pods.iter().any(|p| inputs.is_buffer_pod(*p)) {
                buffer_nodes.insert(name.clone());
            }
            nominations.extend(
                claim
                    .pods
                    .iter()
                    .filter(|p| !inputs.is_buffer_pod(**p))
                    .filter_map(|p| inputs.pod_names.get(*p).cloned())
                    .map(|pod| Nomination {
                        pod,
                        node_claim: Some(name.clone()),
                        node: None,
                    }),
            );
            round.created.push(name);
        }
        let placed_real: Vec<(usize, Vec<usize>)> = results
            .existing_nodes
            .iter()
            .map(|(node, pods)| {
                let real = pods.iter().copied().filter(|p| !inputs.is_buffer_pod(*p));
                (*node, real.collect())
            })
            .collect();
        nominations.extend(nominations::on_existing(
            &snapshot,
            &inputs.node_names,
            &inputs.pod_names,
            &placed_real,
        ));
        // When Karpenter first knew where each pod goes (`karpenter_pods_provisioning_bound_duration_seconds`).
        self.cx
            .state
            .pod_timing
            .mark_schedulable(nominations.iter().map(|n| n.pod.as_str()));
        if let Ok(mut recent) = self.recent_nominations.lock() {
            nominations = recent.admit(nominations, tokio::time::Instant::now());
        }
        if !nominations.is_empty() {
            // Events are informational: sent beside the next round, never slowing this one down.
            tokio::spawn(nominations::publish(self.cx.client.clone(), nominations));
        }
        self.record_buffers(placements, buffer_nodes);
        // The NodeClaims that were created stand (their pods are nominated); the next round retries the rest.
        if let Some(error) = first_error {
            return Err(error.into());
        }
        Ok(round)
    }
}

/// Where each buffer's placeholder pods went: any on a new NodeClaim or left without a place means the buffer
/// needs new capacity; all on existing nodes or in-flight NodeClaims means it fits what is there.
fn buffer_outcomes(
    inputs: &karpenter_core::snapshot::ScheduleInputs,
    results: &karpenter_core::scheduling::SchedulingResults,
) -> HashMap<String, ProvisioningOutcome> {
    #[derive(Clone, Copy, PartialEq)]
    enum Placed {
        Existing,
        New,
        Nowhere,
    }
    if inputs.buffer_pods.is_empty() {
        return HashMap::new();
    }
    let mut placed = vec![Placed::Existing; inputs.input.pods.len()];
    let mut mark = |p: usize, how: Placed| {
        if let Some(slot) = placed.get_mut(p) {
            *slot = how;
        }
    };
    for (p, _) in &results.pod_errors {
        mark(*p, Placed::Nowhere);
    }
    for claim in &results.new_node_claims {
        for p in &claim.pods {
            mark(*p, Placed::New);
        }
    }
    inputs
        .buffer_pods
        .iter()
        .map(|b| {
            let of = b.pods.len();
            let mine = placed.get(b.pods.clone()).unwrap_or_default();
            let count = |how: Placed| mine.iter().filter(|p| **p == how).count();
            let (new, failed) = (count(Placed::New), count(Placed::Nowhere));
            let outcome = if new + failed == 0 {
                ProvisioningOutcome::FitsExistingCapacity { of }
            } else {
                ProvisioningOutcome::RequiresNewCapacity { new, failed, of }
            };
            (b.buffer.clone(), outcome)
        })
        .collect()
}

/// The NodePools this provider launches for: a node class kind it serves, not being deleted, valid.
pub(crate) fn managed_pools(
    snapshot: &Snapshot,
    cloud: &dyn CloudProvider,
) -> Vec<karpenter_api::nodepool::NodePool> {
    let kinds = cloud.supported_node_classes();
    snapshot
        .node_pools
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            let r = &p.spec.template.spec.node_class_ref;
            kinds.iter().any(|k| k.group == r.group && k.kind == r.kind)
        })
        .cloned()
        .collect()
}

/// Which pods are pending, as a value that changes when one arrives or leaves.
/// Which pods are pending, as an order-independent digest (count and a sum of their keys' hashes): the batch
/// window only needs to see it change when a pod arrives or leaves. Recomputed only when the pod store
/// changed since `cache` was taken, so polling every 100 ms costs nothing on a quiet cluster of 150,000 pods.
fn pending_signature(
    state: &ClusterState,
    cache: &mut Option<(u64, Option<(usize, u64)>)>,
) -> Option<(usize, u64)> {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let version = state.pods.version();
    if let Some((seen, signature)) = cache
        && *seen == version
    {
        return *signature;
    }
    let hasher = BuildHasherDefault::<DefaultHasher>::default();
    let mut count = 0usize;
    let mut digest = 0u64;
    for pod in state.pods.filter(is_provisionable) {
        count += 1;
        let key = (pod.metadata.namespace.as_deref(), pod.metadata.name.as_deref());
        digest = digest.wrapping_add(hasher.hash_one(key));
    }
    let signature = (count > 0).then_some((count, digest));
    *cache = Some((version, signature));
    signature
}
