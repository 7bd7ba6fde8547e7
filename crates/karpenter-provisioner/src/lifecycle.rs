//! The NodeClaim lifecycle: launch, registration, initialization, and the Ready condition that sums them up.
//!
//! Each pass looks at every NodeClaim in the state cache and moves it one step, as upstream's lifecycle
//! controller does per claim:
//! - **Launch**: a claim without `status.providerID` gets the `karpenter.sh/termination` finalizer and is
//!   created through the cloud provider; the instance's
//!   provider ID, image, capacity and allocatable go to the status and the labels the launch resolved
//!   (instance type, zone, capacity type, ...) to the claim; `Launched=True`. A launch that finds no capacity
//!   deletes the claim (the provider has marked those offerings unavailable, so the next provisioning round
//!   picks others); another failure sets `Launched=Unknown` with the provider's reason and message (upstream's
//!   `LaunchFailed` and the error when it gives none) and is retried after a per-claim exponential back-off
//!   (1 s doubling to 5 minutes, [`crate::launch_backoff`]), not on every pass.
//! - **Registration**: once a Node with the claim's provider ID exists, it gets the claim's labels, annotations,
//!   taints and startup taints (not the taints when it is labelled `karpenter.sh/do-not-sync-taints=true`) and
//!   `karpenter.sh/registered=true`, loses the `karpenter.sh/unregistered` taint, is owned by the claim and
//!   gets the `karpenter.sh/termination` finalizer, so `kubectl delete node` goes through the terminator
//!   (which deletes the claim, drains the Node and deletes the instance before letting the Node go); the
//!   claim records `status.nodeName` and `Registered=True`. A registered claim's Node that lacks the finalizer
//!   (registered by an older version) gets it on a later pass, unless it is already being deleted.
//! - **Initialization**: once that Node is Ready, none of the claim's startup taints nor the known ephemeral
//!   taints remain, and its allocatable has every resource the claim's pods requested (a GPU's device plugin has
//!   registered it), it is labelled `karpenter.sh/initialized=true` and the claim gets `Initialized=True` and
//!   `Ready=True`; until then `Initialized` is Unknown with the reason it waits for ([`crate::initialization`]).
//!   A reboot (karpenter-repair's reboot controller) sets `Initialized` Unknown again; it is completed anew,
//!   label and all, once the reboot has ended.
//!
//! - **Liveness**: a claim not launched 5 minutes after its creation, or whose Node has not registered 15
//!   minutes after the launch, is deleted (the terminator removes any instance) and its pods are provisioned
//!   again.
//!
//! Each registration and each liveness deletion of a claim owned by a NodePool is reported to
//! [`RegistrationHealth`], from which the NodePool status controller writes the pool's
//! `NodeRegistrationHealthy` condition.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::Duration,
};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::{
    api::core::v1::{Node, Taint},
    apimachinery::pkg::apis::meta::v1::{OwnerReference, Time},
};
use karpenter_api::{
    common::{Condition, ConditionStatus, find_condition},
    labels,
    nodeclaim::{NodeClaim, conditions},
};
use karpenter_core::{
    clock::Clock,
    cloudprovider::{CloudProvider, CloudProviderError},
    snapshot::CompactNode,
};
use karpenter_state::api_errors::ignore_not_found;
use karpenter_state::{
    ControllerContext,
    events::DedupedRecorder,
    finalizers::{FinalizerWrite, add_finalizer},
    periodic::run_synced,
};
use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
};
use serde_json::json;

use crate::{
    ProvisionerError,
    initialization::awaiting_initialization,
    launch_backoff::LaunchBackoff,
    lifecycle_events::{self, launch_failure_message, launch_failure_reason},
    registration_health::{Outcome, RegistrationHealth},
};

/// The lifecycle controller's context.
pub struct Lifecycle {
    cx: ControllerContext,
    cloud: Arc<dyn CloudProvider>,
    /// How often every claim is looked at (tokio time).
    pub interval: Duration,
    /// How many claims a pass steps at once ([`PASS_CONCURRENCY`] unless `CPU_REQUESTS` scales it).
    pub concurrency: usize,
    /// Launches whose result is not yet recorded on the claim, by claim UID: if writing the result fails (a
    /// conflict, an API error), the next pass records this instance instead of launching a second one.
    launched: std::sync::Mutex<BTreeMap<String, NodeClaim>>,
    /// Where registrations and liveness deletions are reported, per owning NodePool.
    registration_health: Arc<RegistrationHealth>,
    /// Failed launches by claim UID, and when each may be tried again (on the lifecycle's clock).
    launch_backoff: std::sync::Mutex<LaunchBackoff>,
    /// `InsufficientCapacityError` and `NodeClassNotReady` on claims whose launch failed.
    events: DedupedRecorder,
}

/// What one pass did, by claim name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LifecyclePass {
    pub launched: Vec<String>,
    pub registered: Vec<String>,
    pub initialized: Vec<String>,
    /// Claims deleted because no offering had capacity.
    pub insufficient_capacity: Vec<String>,
    /// Claims deleted because their NodeClass could not launch them.
    pub node_class_not_ready: Vec<String>,
    /// Claims deleted because their launch or registration took too long.
    pub timed_out: Vec<String>,
}

impl LifecyclePass {
    /// Appends what another step did.
    fn merge(&mut self, other: LifecyclePass) {
        self.launched.extend(other.launched);
        self.registered.extend(other.registered);
        self.initialized.extend(other.initialized);
        self.insufficient_capacity.extend(other.insufficient_capacity);
        self.node_class_not_ready.extend(other.node_class_not_ready);
        self.timed_out.extend(other.timed_out);
    }
}

/// How many claims a pass works on at once by default. Concurrent launches are what the AWS provider's CreateFleet batcher
/// merges into one call, so this is also the most launches one batch of a pass can hold; the bound keeps a pass
/// over thousands of claims from opening as many API server requests and cloud calls at the same moment
/// (upstream bounds its lifecycle workers too).
pub const PASS_CONCURRENCY: usize = 64;

/// Upstream's liveness limits: a claim must launch within 5 minutes of its creation and its Node register
/// within 15 minutes of the launch.
pub const LAUNCH_TTL: Duration = Duration::from_secs(5 * 60);
pub const REGISTRATION_TTL: Duration = Duration::from_secs(15 * 60);

/// The `Launched` reason of a launch that failed with an error the provider gave no reason for (upstream's).
pub const LAUNCH_FAILED: &str = "LaunchFailed";

impl Lifecycle {
    pub fn new(cx: ControllerContext, cloud: Arc<dyn CloudProvider>) -> Self {
        Self {
            events: cx.recorder(),
            cx,
            cloud,
            interval: Duration::from_secs(1),
            concurrency: PASS_CONCURRENCY,
            launched: std::sync::Mutex::new(BTreeMap::new()),
            registration_health: Arc::default(),
            launch_backoff: std::sync::Mutex::new(LaunchBackoff::default()),
        }
    }

    /// Reports registrations and liveness deletions to `health` (the NodePool status controller's).
    pub fn with_registration_health(mut self, health: Arc<RegistrationHealth>) -> Self {
        self.registration_health = health;
        self
    }

    /// Reports `outcome` for the NodePool that owns `claim` (as upstream, a claim without a NodePool owner
    /// reference, or whose pool was recreated under the same name, counts for none).
    fn report(&self, claim: &NodeClaim, outcome: Outcome) {
        let pool = claim.labels().get(labels::NODEPOOL_LABEL);
        let owner = claim
            .owner_references()
            .iter()
            .find(|o| o.kind == "NodePool" && Some(&o.name) == pool);
        if let Some(owner) = owner {
            self.registration_health.observe(&owner.uid, outcome);
        }
    }

    /// Runs passes until the future is dropped; a failed step is logged and retried on the next pass.
    pub async fn run(&self) {
        run_synced(&self.cx.state, "nodeclaim.lifecycle", self.interval, || async {
            self.pass().await;
            true
        })
        .await;
    }

    /// Moves every claim one step; errors are logged per claim so one bad claim does not stall the rest.
    pub async fn pass(&self) -> LifecyclePass {
        let mut done = LifecyclePass::default();
        // Nodes by provider ID, once per pass (a lookup per claim over every node would be quadratic).
        let nodes: HashMap<String, Arc<CompactNode>> = self
            .cx
            .state
            .nodes
            .filter(|_| true)
            .into_iter()
            .filter_map(|n| Some((n.spec.as_ref()?.provider_id.clone()?, n)))
            .collect();
        let claims = self.cx.state.node_claims.all();
        if let Ok(mut backoff) = self.launch_backoff.lock()
            && !backoff.is_empty()
        {
            let live = claims.iter().filter_map(|c| c.uid()).collect();
            backoff.retain(&live);
        }
        // Each claim's step on its own (as upstream reconciles claims concurrently), so the launches of a
        // provisioning round reach the cloud provider together and its CreateFleet batcher can merge them.
        let nodes = &nodes;
        let steps = claims
            .into_iter()
            .filter(|claim| claim.metadata.deletion_timestamp.is_none())
            .enumerate()
            .map(|(at, claim)| async move {
                let mut one = LifecyclePass::default();
                if let Err(error) = self.step(&claim, nodes, &mut one).await {
                    let name = claim.name_any();
                    tracing::warn!(nodeclaim = %name, category = error.category(), %error, "lifecycle step failed");
                }
                (at, one)
            });
        let mut finished: Vec<(usize, LifecyclePass)> = futures::stream::iter(steps)
            .buffer_unordered(self.concurrency.max(1))
            .collect()
            .await;
        // In the claims' (name) order, whichever step finished first.
        finished.sort_unstable_by_key(|(at, _)| *at);
        for (_, one) in finished {
            done.merge(one);
        }
        done
    }

    async fn step(
        &self,
        claim: &NodeClaim,
        nodes: &HashMap<String, Arc<CompactNode>>,
        done: &mut LifecyclePass,
    ) -> Result<(), ProvisionerError> {
        let name = claim.name_any();
        let status = claim.status.clone().unwrap_or_default();
        let now = self.cx.clock.now();
        let Some(provider_id) = status.provider_id.clone() else {
            let created = claim.metadata.creation_timestamp.as_ref().map(|t| t.0);
            if created.is_some_and(|c| now.duration_since(c).as_secs() >= LAUNCH_TTL.as_secs() as i64) {
                // As upstream, the pool's condition names what the launch last failed with.
                let launched = find_condition(&status.conditions, conditions::LAUNCHED);
                let outcome = Outcome::Failed {
                    reason: launched
                        .map(|c| c.reason.clone())
                        .unwrap_or_else(|| LAUNCH_FAILED.to_string()),
                    message: launched.map(|c| c.message.clone()).unwrap_or_default(),
                };
                return self.give_up(claim, "launch", outcome, done).await;
            }
            let uid = claim.uid().unwrap_or_else(|| name.clone());
            let waiting = self.launch_backoff.lock().is_ok_and(|b| !b.may_launch(&uid, now));
            if waiting {
                return Ok(());
            }
            return self.launch(claim, done).await;
        };
        let is_true = |t: &str| {
            find_condition(&status.conditions, t).is_some_and(|c| c.status == ConditionStatus::True)
        };
        let Some(node) = nodes.get(&provider_id).cloned() else {
            let launched = find_condition(&status.conditions, conditions::LAUNCHED)
                .filter(|c| c.status == ConditionStatus::True)
                .map(|c| c.last_transition_time.0);
            if !is_true(conditions::REGISTERED)
                && launched
                    .is_some_and(|l| now.duration_since(l).as_secs() >= REGISTRATION_TTL.as_secs() as i64)
            {
                let outcome = Outcome::Failed {
                    reason: "RegistrationFailed".to_string(),
                    message: "Failed to register node".to_string(),
                };
                return self.give_up(claim, "registration", outcome, done).await;
            }
            return Ok(());
        };
        if !is_true(conditions::REGISTERED) {
            // Once per claim: the Node as written back is cheap to make here.
            self.register(claim, &node.to_node()).await?;
            self.report(claim, Outcome::Registered);
            let label = |key: &str| claim.labels().get(key).cloned().unwrap_or_default();
            karpenter_metrics::metrics()
                .nodes_created
                .get_or_create(&karpenter_metrics::NodeLabels {
                    nodepool: label(labels::NODEPOOL_LABEL),
                    zone: label(labels::ZONE_LABEL),
                })
                .inc();
            done.registered.push(name);
            return Ok(());
        }
        if needs_finalizer(node.metadata.deletion_timestamp.is_some(), node.finalizers()) {
            self.add_node_finalizer(&node.to_node()).await?;
        }
        if is_true(conditions::INITIALIZED) {
            return Ok(());
        }
        // Initialization holds for one boot: a reboot takes it away (Initialized=Unknown, reason Rebooting) and,
        // as upstream, it is not completed again until the reboot has ended, or the node as it was before the
        // reboot would pass the checks below.
        if karpenter_api::nodeclaim::is_rebooting(claim) {
            return Ok(());
        }
        if let Some(waiting) = awaiting_initialization(claim, &node.to_node()) {
            let current = find_condition(&status.conditions, conditions::INITIALIZED);
            // Written only when it changes: a node waits through many passes.
            if current.is_none_or(|c| {
                c.status != ConditionStatus::Unknown
                    || c.reason != waiting.reason
                    || c.message != waiting.message
            }) {
                let conditions = with_condition_message(
                    &status.conditions,
                    (conditions::INITIALIZED, ConditionStatus::Unknown, waiting.reason),
                    &waiting.message,
                    now,
                );
                self.patch_status(&name, json!({"status": {"conditions": conditions}}))
                    .await?;
            }
        } else {
            let nodes: Api<Node> = Api::all(self.cx.client.clone());
            nodes
                .patch(
                    &node.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {labels::INITIALIZED_LABEL: "true"}}})),
                )
                .await?;
            let conditions = with_conditions(
                &status.conditions,
                &[
                    (conditions::INITIALIZED, ConditionStatus::True, "Initialized"),
                    (conditions::READY, ConditionStatus::True, "Ready"),
                ],
                self.cx.clock.now(),
            );
            self.patch_status(&name, json!({"status": {"conditions": conditions}}))
                .await?;
            done.initialized.push(name);
        }
        Ok(())
    }

    /// Liveness: a claim that cannot launch, or whose Node never registers, is deleted (the terminator removes
    /// any instance), so the provisioner tries again for its pods.
    async fn give_up(
        &self,
        claim: &NodeClaim,
        what: &str,
        outcome: Outcome,
        done: &mut LifecyclePass,
    ) -> Result<(), ProvisionerError> {
        let name = claim.name_any();
        tracing::warn!(nodeclaim = %name, "{what} did not complete in time; deleting the NodeClaim");
        let api: Api<NodeClaim> = Api::all(self.cx.client.clone());
        if ignore_not_found(api.delete(&name, &DeleteParams::default()).await)?.is_some() {
            self.report(claim, outcome);
        }
        done.timed_out.push(name);
        Ok(())
    }

    async fn launch(&self, claim: &NodeClaim, done: &mut LifecyclePass) -> Result<(), ProvisionerError> {
        let name = claim.name_any();
        let api: Api<NodeClaim> = Api::all(self.cx.client.clone());
        // The finalizer first: from here on, deleting the claim goes through the terminator, which deletes
        // the instance (a launch must never leave one behind). Locked to the version read, so a finalizer
        // another controller added since the cache read the claim is kept.
        let finalizer = add_finalizer(&api, claim, labels::TERMINATION_FINALIZER).await?;
        if matches!(finalizer, FinalizerWrite::Gone) {
            return Ok(());
        }
        let existing = claim
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let uid = claim.metadata.uid.clone().unwrap_or_else(|| name.clone());
        let cached = self.launched.lock().ok().and_then(|c| c.get(&uid).cloned());
        let created = match cached {
            Some(launched) => Ok(launched),
            None => self.cloud.create(claim).await,
        };
        if let Err(error) = &created
            && let Some(reason) = launch_failure_reason(error)
        {
            let message = launch_failure_message(&name, error);
            self.events
                .warn(&NodeClaim::object_ref(claim, &()), reason, &message)
                .await;
        }
        let launched = match created {
            Ok(launched) => {
                if let Ok(mut cache) = self.launched.lock() {
                    cache.insert(uid.clone(), launched.clone());
                }
                launched
            }
            Err(error @ CloudProviderError::InsufficientCapacity { .. }) => {
                self.forget_failures(&uid);
                tracing::info!(nodeclaim = %name, %error, "no capacity; deleting the NodeClaim so another offering is tried");
                delete_ignoring_gone(&api, &name).await?;
                done.insufficient_capacity.push(name);
                return Ok(());
            }
            // As upstream: the claim is deleted rather than retried, so the provisioner decides again; a NodePool
            // whose NodeClass is not ready is not Ready either and launches nothing until it is, so this does not
            // loop. Retrying in place would hold the pods' capacity on a claim that cannot launch.
            Err(error @ CloudProviderError::NodeClassNotReady { .. }) => {
                self.forget_failures(&uid);
                tracing::warn!(nodeclaim = %name, %error, "the NodeClass cannot launch; deleting the NodeClaim");
                delete_ignoring_gone(&api, &name).await?;
                done.node_class_not_ready.push(name);
                return Ok(());
            }
            Err(error) => {
                let now = self.cx.clock.now();
                let wait = self
                    .launch_backoff
                    .lock()
                    .map(|mut b| b.failed(&uid, now))
                    .unwrap_or_default();
                tracing::info!(nodeclaim = %name, %error, retry_in = ?wait, "launch failed; retrying after a back-off");
                let (reason, message) = launch_failure(&error);
                let conditions = with_condition_message(
                    &existing,
                    (conditions::LAUNCHED, ConditionStatus::Unknown, &reason),
                    &message,
                    now,
                );
                self.patch_status(&name, json!({"status": {"conditions": conditions}}))
                    .await?;
                return Err(error.into());
            }
        };
        // The labels the launch resolved (instance type, zone, capacity type, ...).
        let resolved: BTreeMap<String, String> = launched.metadata.labels.clone().unwrap_or_default();
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": resolved}})),
        )
        .await?;
        let launched_status = launched.status.unwrap_or_default();
        let conditions = with_conditions(
            &existing,
            &[
                (conditions::LAUNCHED, ConditionStatus::True, "Launched"),
                (
                    conditions::REGISTERED,
                    ConditionStatus::Unknown,
                    "AwaitingReconciliation",
                ),
                (
                    conditions::INITIALIZED,
                    ConditionStatus::Unknown,
                    "AwaitingReconciliation",
                ),
                (
                    conditions::READY,
                    ConditionStatus::Unknown,
                    "AwaitingReconciliation",
                ),
            ],
            self.cx.clock.now(),
        );
        let status = json!({"status": {
            "providerID": launched_status.provider_id,
            "imageID": launched_status.image_id,
            "capacity": launched_status.capacity,
            "allocatable": launched_status.allocatable,
            "conditions": conditions,
        }});
        self.patch_status(&name, status).await?;
        if let Ok(mut cache) = self.launched.lock() {
            cache.remove(&uid);
        }
        self.forget_failures(&uid);
        done.launched.push(name);
        Ok(())
    }

    fn forget_failures(&self, uid: &str) {
        if let Ok(mut backoff) = self.launch_backoff.lock() {
            backoff.forget(uid);
        }
    }

    async fn register(&self, claim: &NodeClaim, node: &Node) -> Result<(), ProvisionerError> {
        let name = claim.name_any();
        if unregistered_taint_missing(node) {
            // As upstream: registration goes on, but the user is told that pods could land on the node before
            // its labels and taints were synced (the image or the provider should start it with the taint).
            tracing::warn!(nodeclaim = %name, node = %node.name_any(), taint = labels::UNREGISTERED_TAINT_KEY,
                "the Node registered without the taint that keeps pods off it until it is synced");
            self.events
                .warn(
                    &NodeClaim::object_ref(claim, &()),
                    lifecycle_events::UNREGISTERED_TAINT_MISSING,
                    &lifecycle_events::unregistered_taint_missing_message(),
                )
                .await;
        }
        let mut node_labels: BTreeMap<String, String> = claim.labels().clone();
        node_labels.insert(labels::REGISTERED_LABEL.to_string(), "true".to_string());
        let taints = registered_taints(node, claim);
        let owner = OwnerReference {
            api_version: "karpenter.sh/v1".to_string(),
            kind: "NodeClaim".to_string(),
            name: name.clone(),
            uid: claim.uid().unwrap_or_default(),
            block_owner_deletion: Some(true),
            controller: None,
        };
        // A merge patch: the claim's labels and annotations are added to the Node's own, which stay.
        let patch = json!({
            "metadata": {"labels": node_labels, "annotations": claim.annotations(), "ownerReferences": [owner]},
            "spec": {"taints": taints},
        });
        let nodes: Api<Node> = Api::all(self.cx.client.clone());
        nodes
            .patch(&node.name_any(), &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        if needs_finalizer(node.metadata.deletion_timestamp.is_some(), node.finalizers()) {
            self.add_node_finalizer(node).await?;
        }
        let existing = claim
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let conditions = with_conditions(
            &existing,
            &[(conditions::REGISTERED, ConditionStatus::True, "Registered")],
            self.cx.clock.now(),
        );
        self.patch_status(
            &name,
            json!({"status": {"nodeName": node.name_any(), "conditions": conditions}}),
        )
        .await
    }

    /// Adds the finalizer, locked to the version read: a finalizer another controller added meanwhile is kept
    /// (the write conflicts, and the Node is read again).
    async fn add_node_finalizer(&self, node: &Node) -> Result<(), ProvisionerError> {
        let nodes: Api<Node> = Api::all(self.cx.client.clone());
        add_finalizer(&nodes, node, labels::TERMINATION_FINALIZER).await?;
        Ok(())
    }

    async fn patch_status(&self, name: &str, patch: serde_json::Value) -> Result<(), ProvisionerError> {
        let api: Api<NodeClaim> = Api::all(self.cx.client.clone());
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }
}

/// The `Launched` reason and message of a failed launch, as upstream: the provider's own for a create error,
/// else `LaunchFailed` and the error, cut to 300 characters.
fn launch_failure(error: &CloudProviderError) -> (String, String) {
    match error {
        CloudProviderError::Create { reason, message } => (reason.clone(), message.clone()),
        other => {
            let text = other.to_string();
            let message = match text.char_indices().nth(300) {
                Some((cut, _)) => format!("{}...", &text[..cut]),
                None => text,
            };
            (LAUNCH_FAILED.to_string(), message)
        }
    }
}

/// Deletes a claim; one already gone is what was wanted.
async fn delete_ignoring_gone(api: &Api<NodeClaim>, name: &str) -> Result<(), ProvisionerError> {
    ignore_not_found(api.delete(name, &DeleteParams::default()).await)?;
    Ok(())
}

/// The taints `node` keeps once registered, as upstream syncs them: its own less the `karpenter.sh/unregistered`
/// taint, then each of the claim's taints and startup taints it lacks (the same key and effect), unless the Node
/// is labelled `karpenter.sh/do-not-sync-taints=true` (its provider manages its taints). Startup taints stay
/// until whatever they wait for removes them; initialization waits for that.
fn registered_taints(node: &Node, claim: &NodeClaim) -> Vec<Taint> {
    let mut taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != labels::UNREGISTERED_TAINT_KEY)
        .collect();
    if node
        .labels()
        .get(labels::DO_NOT_SYNC_TAINTS_LABEL)
        .map(String::as_str)
        == Some("true")
    {
        return taints;
    }
    for taint in claim.spec.taints.iter().chain(&claim.spec.startup_taints) {
        // The API's taint and the core one have the same JSON form.
        let Ok(taint) = serde_json::to_value(taint).and_then(serde_json::from_value::<Taint>) else {
            continue;
        };
        if !taints
            .iter()
            .any(|t| t.key == taint.key && t.effect == taint.effect)
        {
            taints.push(taint);
        }
    }
    taints
}

/// A Node not yet registered (no `karpenter.sh/registered` label) that came up without the
/// `karpenter.sh/unregistered` taint.
fn unregistered_taint_missing(node: &Node) -> bool {
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|taints| taints.iter().any(|t| t.key == labels::UNREGISTERED_TAINT_KEY));
    !tainted && !node.labels().contains_key(labels::REGISTERED_LABEL)
}

/// A Node (being deleted or not, with these finalizers) lacks the finalizer and can still take it: the API
/// server refuses new finalizers on an object being deleted (such a Node, deleted before it registered, goes
/// without draining, as it would without Karpenter).
fn needs_finalizer(deleted: bool, finalizers: &[String]) -> bool {
    !deleted && !finalizers.iter().any(|f| f == labels::TERMINATION_FINALIZER)
}

/// `existing` with each `(type, status, reason)` set and its message cleared; the transition time moves only
/// when the status does.
fn with_conditions(
    existing: &[Condition],
    updates: &[(&str, ConditionStatus, &str)],
    now: Timestamp,
) -> Vec<Condition> {
    let mut out = existing.to_vec();
    for &update in updates {
        set_condition(&mut out, update, "", now);
    }
    out
}

/// `existing` with one `(type, status, reason)` set, with `message`.
fn with_condition_message(
    existing: &[Condition],
    update: (&str, ConditionStatus, &str),
    message: &str,
    now: Timestamp,
) -> Vec<Condition> {
    let mut out = existing.to_vec();
    set_condition(&mut out, update, message, now);
    out
}

fn set_condition(
    conditions: &mut Vec<Condition>,
    (type_, status, reason): (&str, ConditionStatus, &str),
    message: &str,
    now: Timestamp,
) {
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.status = status;
                c.last_transition_time = Time(now);
            }
            c.reason = reason.to_string();
            c.message = message.to_string();
        }
        None => conditions.push(Condition {
            type_: type_.to_string(),
            status,
            observed_generation: None,
            last_transition_time: Time(now),
            reason: reason.to_string(),
            message: message.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use karpenter_core::catalog::CatalogFile;
    use karpenter_sim::{ApiServer, SimCloudOptions, SimCloudProvider, SystemClock};
    use karpenter_state::ClusterState;
    use kube::api::PostParams;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    const CATALOG: &str = include_str!("../../karpenter-sim/tests/fixtures/catalog.json");

    /// A launched claim `name` (instance `sim:///test-zone-1/i-<name>`) and its Node `node-<name>` with
    /// `node_meta` merged into the Node's metadata, in the API server and the cache; and a lifecycle over them.
    async fn launched_with_node(
        name: &str,
        node_meta: serde_json::Value,
    ) -> Result<(ApiServer, Lifecycle), Box<dyn std::error::Error>> {
        launched_requesting(name, node_meta, json!({})).await
    }

    /// As [`launched_with_node`], the claim's pods requesting `requests`.
    async fn launched_requesting(
        name: &str,
        node_meta: serde_json::Value,
        requests: serde_json::Value,
    ) -> Result<(ApiServer, Lifecycle), Box<dyn std::error::Error>> {
        let server = ApiServer::new(SystemClock);
        let client = server.client();
        let state = ClusterState::default();
        let provider_id = format!("sim:///test-zone-1/i-{name}");
        let claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "finalizers": [labels::TERMINATION_FINALIZER],
                         "labels": {labels::NODEPOOL_LABEL: "default"}},
            "spec": {"requirements": [], "resources": {"requests": requests},
                     "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
        }))?;
        let claims = Api::<NodeClaim>::all(client.clone());
        claims.create(&PostParams::default(), &claim).await?;
        let status = json!({"status": {
            "providerID": provider_id,
            "conditions": [{"type": "Launched", "status": "True", "reason": "Launched",
                            "lastTransitionTime": "2026-01-01T00:00:00Z", "message": ""}]
        }});
        let claim = claims
            .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
            .await?;
        let mut node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("node-{name}")},
                              "spec": {"providerID": provider_id}});
        if let (Some(meta), Some(extra)) = (node["metadata"].as_object_mut(), node_meta.as_object()) {
            meta.extend(extra.clone());
        }
        let node = Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &serde_json::from_value(node)?)
            .await?;
        state.node_claims.apply(claim);
        state.nodes.apply(node.into());
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let cloud = SimCloudProvider::new(
            CatalogFile::from_json_str(CATALOG)?,
            clock.clone(),
            SimCloudOptions::default(),
        );
        let lifecycle = Lifecycle::new(ControllerContext::new(client, state, clock), cloud.as_dyn());
        Ok((server, lifecycle))
    }

    async fn node_finalizers(lifecycle: &Lifecycle, name: &str) -> Result<Vec<String>, kube::Error> {
        let node = Api::<Node>::all(lifecycle.cx.client.clone()).get(name).await?;
        Ok(node.finalizers().to_vec())
    }

    /// The reasons of the events written about `name`.
    async fn event_reasons(lifecycle: &Lifecycle, name: &str) -> Result<Vec<String>, kube::Error> {
        let events = Api::<k8s_openapi::api::events::v1::Event>::all(lifecycle.cx.client.clone())
            .list(&Default::default())
            .await?;
        Ok(events
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .filter_map(|e| e.reason)
            .collect())
    }

    #[tokio::test]
    async fn a_node_registering_without_the_unregistered_taint_is_reported_and_registered() -> TestResult {
        let (_server, lifecycle) = launched_with_node("bare", json!({})).await?;
        assert_eq!(lifecycle.pass().await.registered, ["bare"]);
        assert_eq!(
            event_reasons(&lifecycle, "bare").await?,
            ["UnregisteredTaintMissing"]
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_node_registering_with_the_unregistered_taint_is_not_reported() -> TestResult {
        let (_server, lifecycle) = launched_with_node("tainted", json!({})).await?;
        let nodes = Api::<Node>::all(lifecycle.cx.client.clone());
        let taint =
            json!({"spec": {"taints": [{"key": labels::UNREGISTERED_TAINT_KEY, "effect": "NoExecute"}]}});
        let node = nodes
            .patch("node-tainted", &PatchParams::default(), &Patch::Merge(taint))
            .await?;
        lifecycle.cx.state.nodes.apply(node.into());
        assert_eq!(lifecycle.pass().await.registered, ["tainted"]);
        assert!(event_reasons(&lifecycle, "tainted").await?.is_empty());
        // And the taint is gone once registered.
        let node = nodes.get("node-tainted").await?;
        assert!(node.spec.and_then(|s| s.taints).unwrap_or_default().is_empty());
        Ok(())
    }

    /// Claim `name`'s taints, startup taints and annotations, written to the API server and the cache.
    async fn give_claim(lifecycle: &Lifecycle, name: &str, patch: serde_json::Value) -> TestResult {
        let claims = Api::<NodeClaim>::all(lifecycle.cx.client.clone());
        let claim = claims
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        lifecycle.cx.state.node_claims.apply(claim);
        Ok(())
    }

    fn taint(key: &str, value: &str, effect: &str) -> serde_json::Value {
        json!({"key": key, "value": value, "effect": effect})
    }

    #[tokio::test]
    async fn registration_copies_the_claims_taints_startup_taints_and_annotations_to_the_node() -> TestResult
    {
        let node_meta = json!({"annotations": {"node-own": "kept"}});
        let (_server, lifecycle) = launched_with_node("synced", node_meta).await?;
        let nodes = Api::<Node>::all(lifecycle.cx.client.clone());
        // The Node registers with the unregistered taint and one of the claim's taints already on it.
        let node_taints = json!({"spec": {"taints": [
            taint(labels::UNREGISTERED_TAINT_KEY, "", "NoExecute"),
            taint("custom-taint", "custom-value", "NoSchedule"),
        ]}});
        let node = nodes
            .patch("node-synced", &PatchParams::default(), &Patch::Merge(node_taints))
            .await?;
        lifecycle.cx.state.nodes.apply(node.into());
        let claim = json!({
            "metadata": {"annotations": {"custom-annotation": "custom-value"}},
            "spec": {
                "taints": [taint("custom-taint", "custom-value", "NoSchedule"),
                           taint("other-custom-taint", "other-custom-value", "NoExecute")],
                "startupTaints": [taint("example.com/agent-not-ready", "", "NoSchedule")],
            },
        });
        give_claim(&lifecycle, "synced", claim).await?;
        assert_eq!(lifecycle.pass().await.registered, ["synced"]);
        let node = nodes.get("node-synced").await?;
        let taints: Vec<(String, String)> = node
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .into_iter()
            .map(|t| (t.key, t.effect))
            .collect();
        assert_eq!(
            taints,
            [
                ("custom-taint".into(), "NoSchedule".into()),
                ("other-custom-taint".into(), "NoExecute".into()),
                ("example.com/agent-not-ready".into(), "NoSchedule".into()),
            ]
        );
        let annotations = node.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations.get("custom-annotation").map(String::as_str),
            Some("custom-value")
        );
        assert_eq!(annotations.get("node-own").map(String::as_str), Some("kept"));
        Ok(())
    }

    #[tokio::test]
    async fn a_node_labelled_do_not_sync_taints_keeps_its_own_taints() -> TestResult {
        let node_meta = json!({"labels": {labels::DO_NOT_SYNC_TAINTS_LABEL: "true"}});
        let (_server, lifecycle) = launched_with_node("unsynced", node_meta).await?;
        let claim = json!({"spec": {"taints": [taint("custom-taint", "custom-value", "NoSchedule")]}});
        give_claim(&lifecycle, "unsynced", claim).await?;
        assert_eq!(lifecycle.pass().await.registered, ["unsynced"]);
        let node = Api::<Node>::all(lifecycle.cx.client.clone())
            .get("node-unsynced")
            .await?;
        assert!(node.spec.and_then(|s| s.taints).unwrap_or_default().is_empty());
        Ok(())
    }

    #[tokio::test]
    async fn registration_puts_the_termination_finalizer_on_the_node_keeping_others() -> TestResult {
        let (_server, lifecycle) =
            launched_with_node("a", json!({"finalizers": ["example.com/keep"]})).await?;
        let pass = lifecycle.pass().await;
        assert_eq!(pass.registered, ["a"]);
        assert_eq!(
            node_finalizers(&lifecycle, "node-a").await?,
            ["example.com/keep", labels::TERMINATION_FINALIZER]
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_registered_node_without_the_finalizer_gets_it_on_a_later_pass() -> TestResult {
        let (_server, lifecycle) = launched_with_node("b", json!({})).await?;
        // As an older version left it: registered, the Node without the finalizer.
        let mut claim = (*lifecycle.cx.state.node_claims.get("b").ok_or("no claim")?).clone();
        let status = claim.status.get_or_insert_with(Default::default);
        status.node_name = Some("node-b".to_string());
        status.conditions = with_conditions(
            &status.conditions,
            &[(conditions::REGISTERED, ConditionStatus::True, "Registered")],
            Timestamp::UNIX_EPOCH,
        );
        lifecycle.cx.state.node_claims.apply(claim);
        let pass = lifecycle.pass().await;
        assert!(pass.registered.is_empty());
        assert_eq!(
            node_finalizers(&lifecycle, "node-b").await?,
            [labels::TERMINATION_FINALIZER]
        );
        Ok(())
    }

    #[tokio::test]
    async fn the_node_finalizer_keeps_one_added_after_the_cache_read() -> TestResult {
        let (_server, lifecycle) = launched_with_node("c", json!({})).await?;
        // Another controller adds its finalizer after the cache read the Node: the locked write conflicts, the
        // Node is read again, and the finalizer is added to the list as stored.
        let nodes = Api::<Node>::all(lifecycle.cx.client.clone());
        nodes
            .patch(
                "node-c",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/other"]}})),
            )
            .await?;
        let stale = lifecycle.cx.state.nodes.get("node-c").ok_or("no node")?;
        lifecycle.add_node_finalizer(&stale.to_node()).await?;
        assert_eq!(
            node_finalizers(&lifecycle, "node-c").await?,
            ["example.com/other", labels::TERMINATION_FINALIZER]
        );
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn the_claim_finalizer_keeps_one_added_after_the_cache_read() -> TestResult {
        let (_server, lifecycle, _cloud) = unlaunched(1).await?;
        // The cache holds the claim without finalizers; another controller then adds its own.
        let claims = Api::<NodeClaim>::all(lifecycle.cx.client.clone());
        claims
            .patch(
                "claim-0",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/other"]}})),
            )
            .await?;
        assert_eq!(lifecycle.pass().await.launched, ["claim-0"]);
        assert_eq!(
            claims.get("claim-0").await?.finalizers(),
            ["example.com/other", labels::TERMINATION_FINALIZER]
        );
        Ok(())
    }

    /// The cache as the watch would leave it: claim `name` and Node `node-<name>` read back from the API server.
    async fn refresh(lifecycle: &Lifecycle, name: &str) -> TestResult {
        let client = lifecycle.cx.client.clone();
        let claim = Api::<NodeClaim>::all(client.clone()).get(name).await?;
        lifecycle.cx.state.node_claims.apply(claim);
        let node = Api::<Node>::all(client).get(&format!("node-{name}")).await?;
        lifecycle.cx.state.nodes.apply(node.into());
        Ok(())
    }

    #[tokio::test]
    async fn a_ready_node_is_not_initialized_until_it_reports_the_requested_gpu() -> TestResult {
        let (_server, lifecycle) =
            launched_requesting("g", json!({}), json!({"cpu": "1", "nvidia.com/gpu": "1"})).await?;
        assert_eq!(lifecycle.pass().await.registered, ["g"]);
        let nodes = Api::<Node>::all(lifecycle.cx.client.clone());
        let report = |gpus: &str| {
            json!({"status": {
                "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "20", "nvidia.com/gpu": gpus},
                "conditions": [{"type": "Ready", "status": "True"}]}})
        };
        // Ready, but the device plugin has not registered the GPU: kubelet reports 0.
        nodes
            .patch_status("node-g", &PatchParams::default(), &Patch::Merge(report("0")))
            .await?;
        refresh(&lifecycle, "g").await?;
        assert!(lifecycle.pass().await.initialized.is_empty());
        let claim = Api::<NodeClaim>::all(lifecycle.cx.client.clone())
            .get("g")
            .await?;
        let status = claim.status.unwrap_or_default();
        let initialized =
            find_condition(&status.conditions, conditions::INITIALIZED).ok_or("no Initialized")?;
        assert_eq!(initialized.status, ConditionStatus::Unknown);
        assert_eq!(initialized.reason, "ResourceNotRegistered");
        assert!(
            initialized.message.contains("nvidia.com/gpu"),
            "{}",
            initialized.message
        );
        let node = nodes.get("node-g").await?;
        assert!(!node.labels().contains_key(labels::INITIALIZED_LABEL));

        nodes
            .patch_status("node-g", &PatchParams::default(), &Patch::Merge(report("4")))
            .await?;
        refresh(&lifecycle, "g").await?;
        assert_eq!(lifecycle.pass().await.initialized, ["g"]);
        let claim = Api::<NodeClaim>::all(lifecycle.cx.client.clone())
            .get("g")
            .await?;
        let status = claim.status.unwrap_or_default();
        let initialized =
            find_condition(&status.conditions, conditions::INITIALIZED).ok_or("no Initialized")?;
        assert_eq!(
            (initialized.status, initialized.message.as_str()),
            (ConditionStatus::True, "")
        );
        let node = nodes.get("node-g").await?;
        assert_eq!(
            node.labels().get(labels::INITIALIZED_LABEL).map(String::as_str),
            Some("true")
        );
        Ok(())
    }

    /// `n` claims not yet launched (`claim-0`, ...), in the API server and the cache, and a lifecycle over them
    /// whose cloud takes a second per launch.
    async fn unlaunched(
        n: usize,
    ) -> Result<(ApiServer, Lifecycle, SimCloudProvider), Box<dyn std::error::Error>> {
        let server = ApiServer::new(SystemClock);
        let client = server.client();
        let state = ClusterState::default();
        let claims = Api::<NodeClaim>::all(client.clone());
        for i in 0..n {
            let claim: NodeClaim = serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": format!("claim-{i}"), "labels": {labels::NODEPOOL_LABEL: "default"}},
                "spec": {"requirements": [], "resources": {"requests": {}},
                         "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
            }))?;
            state
                .node_claims
                .apply(claims.create(&PostParams::default(), &claim).await?);
        }
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let cloud = SimCloudProvider::new(
            CatalogFile::from_json_str(CATALOG)?,
            clock.clone(),
            SimCloudOptions {
                launch_latency: Duration::from_secs(1),
                ..SimCloudOptions::default()
            },
        );
        let lifecycle = Lifecycle::new(ControllerContext::new(client, state, clock), cloud.as_dyn());
        Ok((server, lifecycle, cloud))
    }

    /// The simulated cloud, except that every launch fails with the error `fail` makes.
    struct FailingCloud {
        inner: Arc<dyn CloudProvider>,
        fail: fn() -> CloudProviderError,
    }

    impl karpenter_core::disruption::drift::DriftProvider for FailingCloud {
        fn is_drifted(&self, claim: &NodeClaim) -> Option<String> {
            self.inner.is_drifted(claim)
        }
    }

    #[async_trait::async_trait]
    impl CloudProvider for FailingCloud {
        fn name(&self) -> &'static str {
            "failing"
        }
        async fn create(&self, _claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
            Err((self.fail)())
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
            node_pool: &karpenter_api::nodepool::NodePool,
        ) -> Result<Vec<karpenter_core::catalog::CatalogInstanceType>, CloudProviderError> {
            self.inner.instance_types(node_pool).await
        }
        fn repair_policies(&self) -> Vec<karpenter_core::cloudprovider::RepairPolicy> {
            self.inner.repair_policies()
        }
        fn supported_node_classes(&self) -> Vec<karpenter_core::cloudprovider::NodeClassKind> {
            self.inner.supported_node_classes()
        }
    }

    /// One unlaunched claim and a lifecycle whose cloud fails every launch with `fail`.
    async fn failing_launch(
        fail: fn() -> CloudProviderError,
    ) -> Result<(ApiServer, Lifecycle), Box<dyn std::error::Error>> {
        let (server, lifecycle, cloud) = unlaunched(1).await?;
        let failing = FailingCloud {
            inner: cloud.as_dyn(),
            fail,
        };
        let lifecycle = Lifecycle::new(
            ControllerContext::new(
                lifecycle.cx.client.clone(),
                lifecycle.cx.state.clone(),
                Arc::new(SystemClock),
            ),
            Arc::new(failing),
        );
        Ok((server, lifecycle))
    }

    #[tokio::test(start_paused = true)]
    async fn a_claim_whose_node_class_is_not_ready_is_deleted_with_an_event() -> TestResult {
        let (_server, lifecycle) = failing_launch(|| CloudProviderError::NodeClassNotReady {
            name: "default".into(),
            reason: "SubnetsReady=False".into(),
        })
        .await?;
        let pass = lifecycle.pass().await;
        assert_eq!(pass.node_class_not_ready, ["claim-0"]);
        assert!(pass.launched.is_empty());
        // Deleted, as upstream, so the provisioner decides again, rather than retried in place. The finalizer
        // added before the launch holds it for the terminator, which finds no instance.
        let claim = Api::<NodeClaim>::all(lifecycle.cx.client.clone())
            .get("claim-0")
            .await?;
        assert!(claim.metadata.deletion_timestamp.is_some());
        let events = Api::<k8s_openapi::api::events::v1::Event>::all(lifecycle.cx.client.clone())
            .list(&Default::default())
            .await?;
        assert!(
            events
                .items
                .iter()
                .any(|e| e.reason.as_deref() == Some("NodeClassNotReady")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("claim-0")),
            "{:?}",
            events.items.iter().map(|e| &e.reason).collect::<Vec<_>>()
        );
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn any_other_launch_failure_is_retried_in_place() -> TestResult {
        let (_server, lifecycle) = failing_launch(|| CloudProviderError::Create {
            reason: "LaunchTemplateNotFound".into(),
            message: "no template".into(),
        })
        .await?;
        let pass = lifecycle.pass().await;
        assert!(pass.node_class_not_ready.is_empty() && pass.launched.is_empty());
        let claim = Api::<NodeClaim>::all(lifecycle.cx.client.clone())
            .get("claim-0")
            .await?;
        assert!(claim.metadata.deletion_timestamp.is_none());
        let launched = claim
            .status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Launched")
            .ok_or("no Launched condition")?;
        assert_eq!(launched.status, ConditionStatus::Unknown);
        assert_eq!(launched.reason, "LaunchTemplateNotFound");
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn one_pass_launches_its_claims_together() -> TestResult {
        let (_server, lifecycle, cloud) = unlaunched(20).await?;
        let pass = lifecycle.pass().await;
        let names: Vec<String> = (0..20).map(|i| format!("claim-{i}")).collect();
        let mut launched = pass.launched.clone();
        launched.sort();
        let mut expected = names.clone();
        expected.sort();
        assert_eq!(launched, expected);
        // All 20 creates were under way at once (one after another, at most one ever would be), so the pass
        // took about one launch latency and a batching provider sees them as one batch.
        assert_eq!(cloud.peak_concurrent_creates(), 20);
        let claims = Api::<NodeClaim>::all(lifecycle.cx.client.clone());
        for name in &names {
            let claim = claims.get(name).await?;
            assert!(claim.status.and_then(|s| s.provider_id).is_some(), "{name}");
            assert_eq!(
                claim.metadata.finalizers.unwrap_or_default(),
                [labels::TERMINATION_FINALIZER]
            );
        }
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_launches_at_most_its_concurrency_at_once() -> TestResult {
        let n = PASS_CONCURRENCY + 6;
        let (_server, lifecycle, cloud) = unlaunched(n).await?;
        assert_eq!(lifecycle.pass().await.launched.len(), n);
        assert_eq!(cloud.peak_concurrent_creates(), PASS_CONCURRENCY);
        Ok(())
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap_or(Timestamp::UNIX_EPOCH);
        let t1: Timestamp = "2026-01-01T00:05:00Z".parse().unwrap_or(Timestamp::UNIX_EPOCH);
        let first = with_conditions(&[], &[(conditions::LAUNCHED, ConditionStatus::Unknown, "A")], t0);
        let same = with_conditions(
            &first,
            &[(conditions::LAUNCHED, ConditionStatus::Unknown, "B")],
            t1,
        );
        assert_eq!(same[0].last_transition_time, Time(t0));
        assert_eq!(same[0].reason, "B");
        let changed = with_conditions(
            &same,
            &[(conditions::LAUNCHED, ConditionStatus::True, "Launched")],
            t1,
        );
        assert_eq!(changed[0].last_transition_time, Time(t1));
        assert_eq!(changed.len(), 1);
    }
}
