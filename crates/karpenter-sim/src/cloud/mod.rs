//! A simulated cloud: [`SimCloudProvider`] implements core's
//! [`CloudProvider`] over a [`CatalogFile`], so the controllers
//! launch and terminate "instances" without AWS.
//!
//! # Public API
//! - [`SimCloudProvider::new`]`(catalog, clock, options)`; cheap to clone (clones share state);
//!   [`SimCloudProvider::as_dyn`] for an `Arc<dyn CloudProvider>`.
//! - The trait: `create` picks the cheapest available compatible offering, waits the launch latency (tokio time,
//!   so virtual under a paused runtime), records an instance with provider ID `sim:///<zone>/i-<17 hex>` and
//!   returns the claim hydrated (`status.providerID`, `capacity`, `allocatable` = catalog capacity minus
//!   overhead, `imageID` "sim-image", labels instance-type, zone, capacity-type and the type's single-valued
//!   requirements such as arch and os); `delete` terminates (then [`CloudProviderError::NodeClaimNotFound`]);
//!   `get`/`list` see running instances; `instance_types` is the catalog with offerings in the unavailable
//!   cache marked unavailable.
//! - Faults: [`SimCloudProvider::set_insufficient_capacity`] (an offering has no capacity: a launch that picks it
//!   fails with `InsufficientCapacity` naming it, and it is cached unavailable for
//!   [`SimCloudOptions::unavailable_offering_ttl`], 3 minutes like upstream's unavailable-offerings cache, so the
//!   next create falls back to the next offering); [`SimCloudProvider::set_never_register`] (instances launched
//!   while set never get a Node); [`SimCloudProvider::set_failing_launches`] (every launch fails with a
//!   provider error that is not about capacity, as a quota or permission problem would; the attempts are in
//!   [`SimCloudProvider::failed_launches`]); [`SimCloudProvider::set_unlistable_node_pool`] (one NodePool's
//!   instance types cannot be listed, as when its node class cannot be read); [`SimCloudProvider::set_drifted`];
//!   [`SimCloudProvider::terminate_instance`] (the instance dies outside Karpenter).
//! - Interruptions: [`SimCloudProvider::schedule_interruption`] delivers an [`InterruptionEvent`] at a virtual
//!   time to every [`SimCloudProvider::interruptions`] receiver; a spot interruption also terminates the instance
//!   [`SimCloudOptions::spot_interruption_notice`] (2 minutes) later, with an `InstanceTerminating` event.
//! - Accounting: [`SimCloudProvider::instances`], [`SimCloudProvider::launch_log`],
//!   [`SimCloudProvider::peak_concurrent_creates`] (the most `create` calls ever under way at once: launches a
//!   controller issues one after another never overlap, so a test can tell them from concurrent ones without
//!   timing anything),
//!   [`SimCloudProvider::cost_so_far`] (price per hour times running time, over virtual time),
//!   [`SimCloudProvider::cost_per_hour_now`].
//!
//! # Simplified
//! - A launch tries exactly one offering (the cheapest), where CreateFleet would try several in one call; an
//!   insufficient-capacity failure therefore surfaces on every ICE'd offering in turn.
//! - `minValues` is not checked at launch (the scheduler that wrote the claim already did); the NodeClass is not
//!   looked up (any `EC2NodeClass` is "ready"); no AMIs, subnets, tags or launch templates.
//! - Reserved offerings draw on `reservationCapacity` (running instances in the reservation count against it);
//!   no other capacity limits exist unless injected.

mod select;

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karpenter_api::{
    common::ResourceList,
    labels,
    nodeclaim::{NodeClaim, NodeClaimStatus},
    nodepool::NodePool,
};
use karpenter_core::{
    catalog::{CatalogFile, CatalogInstanceType, Quantities},
    cloudprovider::{
        CloudProvider, CloudProviderError, InterruptionSource, NodeClassKind, RepairPolicy,
        UnavailableOffering,
    },
    disruption::drift::DriftProvider,
};
use tokio::{sync::broadcast, task::JoinHandle};

use crate::{clock::Clock, rng::Rng};
use select::CompiledCatalog;

/// The image every simulated instance runs.
pub const SIM_IMAGE_ID: &str = "sim-image";

/// Tunables of a [`SimCloudProvider`].
#[derive(Debug, Clone)]
pub struct SimCloudOptions {
    /// How long `create` takes (the CreateFleet call), on tokio's clock.
    pub launch_latency: Duration,
    /// How long an offering that failed with insufficient capacity stays out of launches and instance types.
    pub unavailable_offering_ttl: Duration,
    /// Between a spot interruption warning and the instance's termination.
    pub spot_interruption_notice: Duration,
    /// Seed of instance IDs.
    pub seed: u64,
}

impl Default for SimCloudOptions {
    fn default() -> Self {
        Self {
            launch_latency: Duration::from_secs(1),
            unavailable_offering_ttl: Duration::from_secs(180),
            spot_interruption_notice: Duration::from_secs(120),
            seed: 1,
        }
    }
}

/// Interruption messages are core's (the interruption controller consumes them from any source).
pub use karpenter_core::cloudprovider::{InterruptionEvent, InterruptionKind};

/// An instance type, zone and capacity type.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OfferingKey {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
}

impl OfferingKey {
    pub fn new(instance_type: &str, zone: &str, capacity_type: &str) -> Self {
        Self {
            instance_type: instance_type.to_string(),
            zone: zone.to_string(),
            capacity_type: capacity_type.to_string(),
        }
    }

    fn unavailable(&self) -> UnavailableOffering {
        UnavailableOffering {
            instance_type: self.instance_type.clone(),
            zone: self.zone.clone(),
            capacity_type: self.capacity_type.clone(),
        }
    }
}

impl fmt::Display for OfferingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.instance_type, self.zone, self.capacity_type)
    }
}

/// One simulated instance, running or terminated.
#[derive(Debug, Clone)]
pub struct Instance {
    /// `sim:///<zone>/i-<hex>`.
    pub provider_id: String,
    /// `i-<hex>`.
    pub instance_id: String,
    /// Its private IP, from which the kubelet names the Node `ip-a-b-c-d.sim.internal`.
    pub private_ip: String,
    pub offering: OfferingKey,
    pub price: f64,
    pub reservation_id: Option<String>,
    pub launched_at: Timestamp,
    pub terminated_at: Option<Timestamp>,
    /// `false` when launched under [`SimCloudProvider::set_never_register`]: no kubelet ever starts.
    pub registers: bool,
    /// The NodeClaim as `create` returned it (labels, taints, startup taints, capacity, allocatable).
    pub claim: NodeClaim,
}

impl Instance {
    pub fn is_running(&self) -> bool {
        self.terminated_at.is_none()
    }

    /// What the instance cost up to `now`.
    fn cost_until(&self, now: Timestamp) -> f64 {
        let end = self.terminated_at.map_or(now, |t| t.min(now));
        let seconds = end.duration_since(self.launched_at).as_secs_f64().max(0.0);
        self.price * seconds / 3600.0
    }
}

/// How a launch ended.
#[derive(Debug, Clone, PartialEq)]
pub enum LaunchOutcome {
    Launched { provider_id: String },
    InsufficientCapacity,
    NoCompatibleOffering,
    InvalidRequirements(String),
}

/// One `create` call.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchRecord {
    pub at: Timestamp,
    pub node_claim: String,
    /// The offering tried, if any was.
    pub offering: Option<OfferingKey>,
    pub price: Option<f64>,
    pub outcome: LaunchOutcome,
}

struct CloudState {
    catalog: CompiledCatalog,
    rng: Rng,
    /// Every instance ever launched, in launch order; `by_provider_id` indexes it.
    instances: Vec<Instance>,
    by_provider_id: BTreeMap<String, usize>,
    /// Offering -> until when it is out of launches.
    unavailable: BTreeMap<OfferingKey, Timestamp>,
    /// Offerings with no capacity (fault).
    exhausted: BTreeSet<OfferingKey>,
    never_register: bool,
    /// While set, every launch fails with this (reason, message) (fault).
    failing_launches: Option<(String, String)>,
    /// When each failed launch was attempted.
    failed_launches: Vec<Timestamp>,
    /// NodePools whose instance types cannot be listed (fault).
    unlistable_node_pools: BTreeSet<String>,
    drifted: BTreeMap<String, String>,
    launches: Vec<LaunchRecord>,
    /// `create` calls under way now, and the most ever under way at once.
    creates_in_flight: usize,
    peak_creates_in_flight: usize,
    timers: Vec<JoinHandle<()>>,
    /// Bumped whenever an instance starts or stops, so pollers can skip work.
    version: u64,
}

struct CloudShared {
    source: Arc<CatalogFile>,
    clock: Arc<dyn Clock>,
    options: SimCloudOptions,
    state: Mutex<CloudState>,
    events: broadcast::Sender<InterruptionEvent>,
}

impl CloudShared {
    fn state(&self) -> MutexGuard<'_, CloudState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for CloudShared {
    fn drop(&mut self) {
        for timer in &self.state().timers {
            timer.abort();
        }
    }
}

/// The simulated cloud. See the module documentation.
#[derive(Clone)]
pub struct SimCloudProvider {
    shared: Arc<CloudShared>,
}

impl fmt::Debug for SimCloudProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state();
        f.debug_struct("SimCloudProvider")
            .field("instances", &state.instances.len())
            .field("launches", &state.launches.len())
            .finish_non_exhaustive()
    }
}

fn quantities_to_list(q: &Quantities) -> ResourceList {
    q.iter()
        .map(|(name, milli)| {
            (
                name.clone(),
                Quantity(karpenter_api::quantity::format_milli(name, *milli)),
            )
        })
        .collect()
}

fn requests_of(claim: &NodeClaim) -> Result<Quantities, String> {
    let mut out = Quantities::new();
    for (name, q) in claim.spec.resources.requests.iter().flatten() {
        let milli = karpenter_api::quantity::parse_milli(&q.0)
            .map_err(|e| format!("spec.resources.requests.{name}: {e}"))?;
        out.insert(name.clone(), milli);
    }
    Ok(out)
}

fn claim_name(claim: &NodeClaim) -> String {
    claim.metadata.name.clone().unwrap_or_default()
}

impl SimCloudProvider {
    pub fn new(catalog: CatalogFile, clock: Arc<dyn Clock>, options: SimCloudOptions) -> Self {
        let (events, _) = broadcast::channel(4096);
        let catalog = Arc::new(catalog);
        let state = CloudState {
            catalog: CompiledCatalog::new(Arc::clone(&catalog)),
            rng: Rng::seeded(options.seed),
            instances: Vec::new(),
            by_provider_id: BTreeMap::new(),
            unavailable: BTreeMap::new(),
            exhausted: BTreeSet::new(),
            never_register: false,
            failing_launches: None,
            failed_launches: Vec::new(),
            unlistable_node_pools: BTreeSet::new(),
            drifted: BTreeMap::new(),
            launches: Vec::new(),
            creates_in_flight: 0,
            peak_creates_in_flight: 0,
            timers: Vec::new(),
            version: 0,
        };
        Self {
            shared: Arc::new(CloudShared {
                source: catalog,
                clock,
                options,
                state: Mutex::new(state),
                events,
            }),
        }
    }

    /// The same provider behind the trait object the controllers hold.
    pub fn as_dyn(&self) -> Arc<dyn CloudProvider> {
        Arc::new(self.clone())
    }

    /// The catalog the cloud sells.
    pub fn catalog(&self) -> &CatalogFile {
        &self.shared.source
    }

    fn now(&self) -> Timestamp {
        self.shared.clock.now()
    }

    /// Marks an offering as out of capacity (`true`) or back in (`false`).
    pub fn set_insufficient_capacity(&self, offering: OfferingKey, exhausted: bool) {
        let mut state = self.shared.state();
        if exhausted {
            state.exhausted.insert(offering);
        } else {
            state.exhausted.remove(&offering);
        }
    }

    /// While set, launched instances never start a kubelet, so no Node ever registers for them.
    pub fn set_never_register(&self, never: bool) {
        self.shared.state().never_register = never;
    }

    /// While `Some((reason, message))`, every launch fails with [`CloudProviderError::Create`] carrying them;
    /// `None` lets launches succeed again.
    pub fn set_failing_launches(&self, failure: Option<(&str, &str)>) {
        self.shared.state().failing_launches = failure.map(|(r, m)| (r.to_string(), m.to_string()));
    }

    /// While `unlistable`, listing NodePool `node_pool`'s instance types fails with
    /// [`CloudProviderError::NodeClassNotReady`], as when its node class cannot be read.
    pub fn set_unlistable_node_pool(&self, node_pool: &str, unlistable: bool) {
        let pools = &mut self.shared.state().unlistable_node_pools;
        if unlistable {
            pools.insert(node_pool.to_string());
        } else {
            pools.remove(node_pool);
        }
    }

    /// When each launch that [`SimCloudProvider::set_failing_launches`] failed was attempted.
    pub fn failed_launches(&self) -> Vec<Timestamp> {
        self.shared.state().failed_launches.clone()
    }

    /// Makes [`DriftProvider::is_drifted`] answer `reason` for the instance (`None` clears it).
    pub fn set_drifted(&self, provider_id: &str, reason: Option<&str>) {
        let mut state = self.shared.state();
        match reason {
            Some(r) => state.drifted.insert(provider_id.to_string(), r.to_string()),
            None => state.drifted.remove(provider_id),
        };
    }

    /// Terminates an instance outside Karpenter (a spot reclaim, a user in the console). `false` if it was not
    /// running.
    pub fn terminate_instance(&self, provider_id: &str) -> bool {
        let now = self.now();
        let mut state = self.shared.state();
        let Some(&i) = state.by_provider_id.get(provider_id) else {
            return false;
        };
        let instance = &mut state.instances[i];
        if instance.terminated_at.is_some() {
            return false;
        }
        instance.terminated_at = Some(now);
        state.version += 1;
        true
    }

    /// A counter that changes whenever an instance is launched or terminated.
    pub fn version(&self) -> u64 {
        self.shared.state().version
    }

    /// A receiver of every interruption delivered from now on.
    pub fn interruptions(&self) -> broadcast::Receiver<InterruptionEvent> {
        self.shared.events.subscribe()
    }

    /// The interruption messages as the interruption controller reads them. Subscribe before the events are
    /// sent: a broadcast keeps nothing for later subscribers.
    pub fn interruption_source(&self) -> Arc<dyn InterruptionSource> {
        Arc::new(SimInterruptionSource {
            events: tokio::sync::Mutex::new(self.interruptions()),
        })
    }

    /// Delivers an interruption for `provider_id` at `at` (at once if `at` has passed). A spot interruption
    /// terminates the instance [`SimCloudOptions::spot_interruption_notice`] later and then sends a
    /// an `InstanceTerminating`. Needs a tokio runtime.
    pub fn schedule_interruption(&self, provider_id: &str, kind: InterruptionKind, at: Timestamp) {
        let delay = at.duration_since(self.now()).max(SignedDuration::ZERO);
        let delay = Duration::try_from(delay).unwrap_or_default();
        let weak = Arc::downgrade(&self.shared);
        let provider_id = provider_id.to_string();
        let notice = self.shared.options.spot_interruption_notice;
        let timer = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let Some(shared) = weak.upgrade() else { return };
            let cloud = SimCloudProvider { shared };
            cloud.send(&provider_id, kind);
            if kind != InterruptionKind::SpotInterruption {
                return;
            }
            drop(cloud);
            tokio::time::sleep(notice).await;
            let Some(shared) = weak.upgrade() else { return };
            let cloud = SimCloudProvider { shared };
            if cloud.terminate_instance(&provider_id) {
                cloud.send(&provider_id, InterruptionKind::InstanceTerminating);
            }
        });
        let mut state = self.shared.state();
        state.timers.retain(|t| !t.is_finished());
        state.timers.push(timer);
    }

    fn send(&self, provider_id: &str, kind: InterruptionKind) {
        // No receiver is not an error: nobody consumes interruptions yet.
        let _ = self.shared.events.send(InterruptionEvent {
            provider_id: provider_id.to_string(),
            kind,
            at: self.now(),
        });
    }

    /// Every instance ever launched, in launch order.
    pub fn instances(&self) -> Vec<Instance> {
        self.shared.state().instances.clone()
    }

    /// The instances running now, in launch order.
    pub fn running_instances(&self) -> Vec<Instance> {
        self.shared
            .state()
            .instances
            .iter()
            .filter(|i| i.is_running())
            .cloned()
            .collect()
    }

    /// One instance by provider ID, running or not.
    pub fn instance(&self, provider_id: &str) -> Option<Instance> {
        let state = self.shared.state();
        let &i = state.by_provider_id.get(provider_id)?;
        state.instances.get(i).cloned()
    }

    /// Every `create` call, oldest first.
    pub fn launch_log(&self) -> Vec<LaunchRecord> {
        self.shared.state().launches.clone()
    }

    /// The most `create` calls that were ever under way at the same time (each waits the launch latency).
    pub fn peak_concurrent_creates(&self) -> usize {
        self.shared.state().peak_creates_in_flight
    }

    /// What every instance has cost so far: its hourly price over the (virtual) time it ran.
    pub fn cost_so_far(&self) -> f64 {
        let now = self.now();
        self.shared
            .state()
            .instances
            .iter()
            .map(|i| i.cost_until(now))
            .sum()
    }

    /// The hourly price of the instances running now.
    pub fn cost_per_hour_now(&self) -> f64 {
        self.shared
            .state()
            .instances
            .iter()
            .filter(|i| i.is_running())
            .map(|i| i.price)
            .sum()
    }

    fn is_unavailable(state: &CloudState, key: &OfferingKey, now: Timestamp) -> bool {
        state.unavailable.get(key).is_some_and(|until| *until > now)
    }

    fn reservation_full(state: &CloudState, reservation: &str, capacity: Option<i64>) -> bool {
        let Some(capacity) = capacity else {
            return false;
        };
        let used = state
            .instances
            .iter()
            .filter(|i| i.is_running() && i.reservation_id.as_deref() == Some(reservation))
            .count();
        i64::try_from(used).unwrap_or(i64::MAX) >= capacity
    }

    /// The launch itself, after the latency: everything under one lock so concurrent creates see each other.
    fn launch(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        let now = self.now();
        let name = claim_name(claim);
        let mut guard = self.shared.state();
        let state = &mut *guard;
        let record = |state: &mut CloudState, offering: Option<(&OfferingKey, f64)>, outcome| {
            state.launches.push(LaunchRecord {
                at: now,
                node_claim: name.clone(),
                offering: offering.map(|(k, _)| k.clone()),
                price: offering.map(|(_, p)| p),
                outcome,
            });
        };
        let parsed = state
            .catalog
            .claim_requirements(claim)
            .and_then(|r| Ok((r, requests_of(claim)?)));
        let (requirements, requests) = match parsed {
            Ok(p) => p,
            Err(e) => {
                record(state, None, LaunchOutcome::InvalidRequirements(e.clone()));
                return Err(CloudProviderError::Create {
                    reason: "InvalidRequirements".into(),
                    message: e,
                });
            }
        };
        let candidates = state.catalog.compatible(&requirements, &requests);
        let mut unavailable = Vec::new();
        let mut chosen = None;
        for c in &candidates {
            let ty = state.catalog.source_type(c.type_index);
            let o = state.catalog.offering(c);
            let key = OfferingKey::new(&ty.name, &o.zone, &o.capacity_type);
            let reservation_full = o
                .reservation_id
                .as_deref()
                .is_some_and(|r| Self::reservation_full(state, r, o.reservation_capacity));
            if !o.available || reservation_full || Self::is_unavailable(state, &key, now) {
                unavailable.push(key);
                continue;
            }
            chosen = Some((*c, key));
            break;
        }
        let Some((candidate, key)) = chosen else {
            let outcome = if candidates.is_empty() {
                LaunchOutcome::NoCompatibleOffering
            } else {
                LaunchOutcome::InsufficientCapacity
            };
            record(state, None, outcome);
            let message = if candidates.is_empty() {
                format!(
                    "no instance type offering satisfies the requirements and requests of NodeClaim {name}"
                )
            } else {
                format!(
                    "all {} compatible offerings of NodeClaim {name} are unavailable",
                    candidates.len()
                )
            };
            return Err(CloudProviderError::InsufficientCapacity {
                message,
                offerings: unavailable.iter().map(OfferingKey::unavailable).collect(),
            });
        };
        if state.exhausted.contains(&key) {
            let ttl = SignedDuration::try_from(self.shared.options.unavailable_offering_ttl)
                .unwrap_or(SignedDuration::ZERO);
            let until = now.checked_add(ttl).unwrap_or(Timestamp::MAX);
            state.unavailable.insert(key.clone(), until);
            record(
                state,
                Some((&key, candidate.price)),
                LaunchOutcome::InsufficientCapacity,
            );
            return Err(CloudProviderError::InsufficientCapacity {
                message: format!("InsufficientInstanceCapacity for {key}"),
                offerings: vec![key.unavailable()],
            });
        }

        let offering = state.catalog.offering(&candidate).clone();
        let ty = &state.catalog.types[candidate.type_index];
        let capacity = quantities_to_list(&state.catalog.source_type(candidate.type_index).capacity);
        let allocatable = quantities_to_list(&ty.allocatable);
        let mut node_labels = state.catalog.type_labels(candidate.type_index);
        let seq = state.instances.len() + 1;
        let instance_id = format!("i-{:017x}", state.rng.next_u64() >> 4);
        let provider_id = format!("sim:///{}/{instance_id}", offering.zone);
        node_labels.insert(labels::INSTANCE_TYPE_LABEL.into(), key.instance_type.clone());
        node_labels.insert(labels::ZONE_LABEL.into(), key.zone.clone());
        node_labels.insert(labels::CAPACITY_TYPE_LABEL.into(), key.capacity_type.clone());
        if let Some(r) = &offering.reservation_id {
            node_labels.insert(labels::AWS_CAPACITY_RESERVATION_ID_LABEL.into(), r.clone());
        }

        let mut hydrated = claim.clone();
        let claim_labels = hydrated.metadata.labels.get_or_insert_with(BTreeMap::new);
        claim_labels.extend(node_labels);
        let status = hydrated.status.get_or_insert_with(NodeClaimStatus::default);
        status.provider_id = Some(provider_id.clone());
        status.image_id = Some(SIM_IMAGE_ID.into());
        status.capacity = Some(Arc::new(capacity));
        status.allocatable = Some(Arc::new(allocatable));

        let instance = Instance {
            provider_id: provider_id.clone(),
            instance_id,
            private_ip: format!("10.{}.{}.{}", (seq >> 16) & 255, (seq >> 8) & 255, seq & 255),
            offering: key.clone(),
            price: offering.price,
            reservation_id: offering.reservation_id.clone(),
            launched_at: now,
            terminated_at: None,
            registers: !state.never_register,
            claim: hydrated.clone(),
        };
        state
            .by_provider_id
            .insert(provider_id.clone(), state.instances.len());
        state.instances.push(instance);
        state.version += 1;
        record(
            state,
            Some((&key, offering.price)),
            LaunchOutcome::Launched { provider_id },
        );
        Ok(hydrated)
    }

    fn running_claim(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        let state = self.shared.state();
        state
            .by_provider_id
            .get(provider_id)
            .and_then(|&i| state.instances.get(i))
            .filter(|i| i.is_running())
            .map(|i| i.claim.clone())
            .ok_or_else(|| CloudProviderError::NodeClaimNotFound(provider_id.to_string()))
    }
}

impl DriftProvider for SimCloudProvider {
    fn is_drifted(&self, claim: &NodeClaim) -> Option<String> {
        let provider_id = claim.status.as_ref()?.provider_id.as_deref()?;
        self.shared
            .state()
            .drifted
            .get(provider_id)
            .filter(|r| !r.is_empty())
            .cloned()
    }
}

/// Counts one `create` as under way until it is dropped (a caller may also drop the call before it ends).
struct CreateInFlight<'a>(&'a CloudShared);

impl<'a> CreateInFlight<'a> {
    fn enter(shared: &'a CloudShared) -> Self {
        let mut state = shared.state();
        state.creates_in_flight += 1;
        state.peak_creates_in_flight = state.peak_creates_in_flight.max(state.creates_in_flight);
        Self(shared)
    }
}

impl Drop for CreateInFlight<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.creates_in_flight = state.creates_in_flight.saturating_sub(1);
    }
}

#[async_trait]
impl CloudProvider for SimCloudProvider {
    fn name(&self) -> &'static str {
        "sim"
    }

    async fn create(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        let _in_flight = CreateInFlight::enter(&self.shared);
        tokio::time::sleep(self.shared.options.launch_latency).await;
        let now = self.now();
        {
            let mut state = self.shared.state();
            if let Some((reason, message)) = state.failing_launches.clone() {
                state.failed_launches.push(now);
                return Err(CloudProviderError::Create { reason, message });
            }
        }
        self.launch(claim)
    }

    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudProviderError> {
        let provider_id = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .ok_or_else(|| CloudProviderError::NodeClaimNotFound(claim_name(claim)))?;
        if self.terminate_instance(provider_id) {
            Ok(())
        } else {
            Err(CloudProviderError::NodeClaimNotFound(provider_id.to_string()))
        }
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        self.running_claim(provider_id)
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        Ok(self.running_instances().into_iter().map(|i| i.claim).collect())
    }

    async fn instance_types(
        &self,
        node_pool: &NodePool,
    ) -> Result<Vec<CatalogInstanceType>, CloudProviderError> {
        let now = self.now();
        let state = self.shared.state();
        if let Some(name) = node_pool.metadata.name.as_ref()
            && state.unlistable_node_pools.contains(name)
        {
            return Err(CloudProviderError::NodeClassNotReady {
                name: node_pool.spec.template.spec.node_class_ref.name.clone(),
                reason: format!("instance types of NodePool {name} cannot be listed (fault)"),
            });
        }
        Ok(self
            .shared
            .source
            .instance_types
            .iter()
            .map(|it| {
                let mut it = it.clone();
                for o in &mut it.offerings {
                    let key = OfferingKey::new(&it.name, &o.zone, &o.capacity_type);
                    if Self::is_unavailable(&state, &key, now) {
                        o.available = false;
                    }
                }
                it
            })
            .collect())
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        // Upstream AWS's kubelet policies: a node NotReady or Unknown for 30 minutes is replaced.
        ["False", "Unknown"]
            .into_iter()
            .map(|status| RepairPolicy {
                condition_type: "Ready".into(),
                condition_status: status.into(),
                toleration: Duration::from_secs(30 * 60),
            })
            .collect()
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        vec![NodeClassKind {
            group: labels::AWS_GROUP,
            kind: "EC2NodeClass",
        }]
    }
}

#[cfg(test)]
mod tests;

/// [`SimCloudProvider::interruption_source`]: the cloud's broadcast of interruption events.
struct SimInterruptionSource {
    events: tokio::sync::Mutex<broadcast::Receiver<InterruptionEvent>>,
}

#[async_trait::async_trait]
impl InterruptionSource for SimInterruptionSource {
    async fn receive(&self) -> Option<Vec<InterruptionEvent>> {
        let mut events = self.events.lock().await;
        loop {
            match events.recv().await {
                Ok(event) => return Some(vec![event]),
                // A slow reader missed some; what follows still matters.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}
