//! The reboot controller, upstream's `nodeclaim.reboot` (pkg/controllers/nodeclaim/reboot): it carries out a reboot
//! that repair committed (a NodeClaim with `Rebooting=True`, reason `RebootRequested`) to its end:
//! 1. **fence**: the Node is tainted `karpenter.sh/rebooting:NoSchedule`, so nothing new lands there;
//! 2. **drain**: its pods are evicted as for a termination (karpenter-termination's drain), but nothing is deleted:
//!    the drain lasts at least 5 seconds (late bindings), and at most the NodeClaim's
//!    `karpenter.sh/reboot-termination-grace-period` from the request, after which the pods still there (a
//!    PodDisruptionBudget or do-not-disrupt holds them) ride the reboot; `0s` skips the drain, no annotation drains
//!    for as long as pods remain;
//! 3. **issue**: the Node's boot ID is recorded on the claim (`karpenter.sh/reboot-pre-boot-id`) and the cloud
//!    provider asked to reboot, with an operation ID that is the same for every retry of this reboot; the claim
//!    moves to `RebootIssued`, its `Initialized` (and `Ready`) become Unknown (reason `Rebooting`) and the Node
//!    loses `karpenter.sh/initialized`;
//! 4. **observe**: once the Node reports a new boot ID the fence is removed (event `RebootObserved`), and once it is
//!    also Ready the reboot has succeeded: `Rebooting=False`, reason `RebootSucceeded`. The lifecycle controller
//!    then initializes the node anew.
//!
//! A reboot the provider cannot do (not implemented, rejected, instance gone), one not accepted within 5 minutes of
//! the first attempt, or a node not back within 20 minutes of the issue, fails: the fence is removed and the
//! NodeClaim deleted, so the node is replaced (its drain bounded by the reboot's). An invalid grace-period
//! annotation fails the reboot without replacing the node (`Rebooting=False`, reason `RebootFailed`). Failures
//! publish `RebootFailed` on the NodeClaim; every end counts in `karpenter_nodes_reboots_total` and
//! `karpenter_nodes_reboot_duration_seconds`, successes in `karpenter_nodes_reboot_recovery_duration_seconds`.
//!
//! [`next_step`] and [`drain_finished`] decide; [`RebootController`] carries the steps out.

use std::{collections::HashMap, sync::Arc, time::Duration};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Taint};
use karpenter_api::{
    common::{Condition, ConditionStatus, find_condition},
    duration::{format_go_duration, parse_go_duration},
    labels,
    nodeclaim::{NodeClaim, conditions, is_rebooting, reboot_reasons},
};
use karpenter_core::cloudprovider::CloudProvider;
use karpenter_state::{
    ControllerContext, api_errors::is_not_found, events::DedupedRecorder, periodic::run_synced,
};
use karpenter_termination::Terminator;
use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
};
use serde_json::json;
use tokio::sync::Mutex;

use crate::RepairError;

/// Event on the NodeClaim when the node's new boot is seen.
pub const REBOOT_OBSERVED: &str = "RebootObserved";
/// Event on the NodeClaim when a reboot fails.
pub const REBOOT_FAILED: &str = "RebootFailed";

/// How long after the issue the node has to come back (new boot ID and Ready).
pub const OBSERVATION_WINDOW: SignedDuration = SignedDuration::from_mins(20);
/// How long the provider has to accept the reboot, from the first attempt.
pub const ISSUANCE_TIMEOUT: SignedDuration = SignedDuration::from_mins(5);
/// The shortest drain, forceful reboots aside: pods bound late still see the fence and go.
pub const MIN_DRAIN_TIME: SignedDuration = SignedDuration::from_secs(5);

/// The terminal results, the `result` label of the reboot metrics.
pub const RESULT_SUCCEEDED: &str = "succeeded";
pub const RESULT_PROVIDER_ERROR: &str = "provider_error";
pub const RESULT_RECOVERY_TIMEOUT: &str = "recovery_timeout";
pub const RESULT_INVALID_REQUEST: &str = "invalid_request";

/// Where a reboot is: before the provider accepted it, or after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Requested,
    Issued,
}

/// The Node as a reboot sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    pub boot_id: String,
    pub ready: bool,
    /// Carries the `karpenter.sh/rebooting` taint.
    pub fenced: bool,
    /// Carries `karpenter.sh/initialized`.
    pub initialized: bool,
}

/// What one reboot's next step depends on.
#[derive(Debug, Clone)]
pub struct RebootFacts {
    pub phase: Phase,
    /// When the reboot was committed (the `Rebooting` condition's transition to True).
    pub requested_at: Timestamp,
    /// When the provider accepted it (`Initialized` went Unknown with reason `Rebooting`).
    pub issued_at: Option<Timestamp>,
    /// When this process first asked the provider (after the drain); `None` before.
    pub issuing_since: Option<Timestamp>,
    /// The drain bound: `Ok(None)` unbounded, `Err` an annotation that does not parse.
    pub grace: Result<Option<Duration>, String>,
    /// The boot ID recorded before the first request to the provider.
    pub pre_boot_id: Option<String>,
    /// `None` when the Node is gone.
    pub node: Option<NodeFacts>,
    pub now: Timestamp,
}

/// What to do next for one reboot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Fence,
    /// Drain the node one step; [`drain_finished`] says whether that is enough.
    Drain {
        floor: Timestamp,
        deadline: Option<Timestamp>,
    },
    /// Record the node's boot ID, then issue.
    RecordPreBootId,
    /// Ask the provider (again).
    Issue,
    /// The provider accepted it, or the node already has a new boot.
    MarkIssued,
    /// The node lost its initialization for the new boot but still carries the label.
    Unlabel,
    /// A new boot is seen: the fence goes.
    Unfence,
    Succeed,
    Fail {
        result: &'static str,
        message: String,
        /// Replace the node (delete the NodeClaim); only an invalid request does not.
        replace: bool,
    },
    /// Nothing to do until something changes.
    Wait,
}

fn add(t: Timestamp, d: SignedDuration) -> Timestamp {
    t.checked_add(d).unwrap_or(Timestamp::MAX)
}

fn fail(result: &'static str, message: &str, replace: bool) -> Step {
    Step::Fail {
        result,
        message: message.to_string(),
        replace,
    }
}

/// The deadline of the phase the reboot is in, if bounded: the observation window from the issue, or the
/// issuance timeout from the first attempt (from the request while the Node is gone and nothing was tried).
fn deadline(f: &RebootFacts) -> Option<(Timestamp, &'static str, &'static str)> {
    match (f.phase, f.issued_at) {
        (Phase::Issued, Some(issued)) => Some((
            add(issued, OBSERVATION_WINDOW),
            RESULT_RECOVERY_TIMEOUT,
            "node did not recover within the observation window",
        )),
        _ => {
            let from = f.issuing_since.or(f.node.is_none().then_some(f.requested_at))?;
            Some((
                add(from, ISSUANCE_TIMEOUT),
                RESULT_PROVIDER_ERROR,
                "reboot was not issued within the issuance timeout",
            ))
        }
    }
}

/// The next step of one reboot (see the module documentation).
pub fn next_step(f: &RebootFacts) -> Step {
    if let Some((deadline, result, message)) = deadline(f)
        && f.now > deadline
    {
        return fail(result, message, true);
    }
    let Some(node) = &f.node else {
        return Step::Wait;
    };
    match f.phase {
        Phase::Requested => {
            let grace = match &f.grace {
                Ok(grace) => *grace,
                Err(e) => {
                    return fail(
                        RESULT_INVALID_REQUEST,
                        &format!("invalid reboot request: {e}"),
                        false,
                    );
                }
            };
            if !node.fenced {
                return Step::Fence;
            }
            match &f.pre_boot_id {
                Some(pre) if *pre != node.boot_id => Step::MarkIssued,
                Some(_) => Step::Issue,
                None if grace == Some(Duration::ZERO) => Step::RecordPreBootId,
                None => {
                    let floor = add(f.requested_at, MIN_DRAIN_TIME);
                    let deadline = grace.map(|g| {
                        let g = SignedDuration::try_from(g).unwrap_or(SignedDuration::MAX);
                        add(f.requested_at, g.max(MIN_DRAIN_TIME))
                    });
                    Step::Drain { floor, deadline }
                }
            }
        }
        Phase::Issued => {
            if node.initialized {
                return Step::Unlabel;
            }
            let new_boot = f.pre_boot_id.as_deref().unwrap_or_default() != node.boot_id;
            match (new_boot, node.fenced, node.ready) {
                (true, true, _) => Step::Unfence,
                (true, false, true) => Step::Succeed,
                _ => Step::Wait,
            }
        }
    }
}

/// Whether the drain has done enough: nothing left to wait for and the shortest drain over, or its deadline
/// passed (what is left rides the reboot).
pub fn drain_finished(waiting: usize, now: Timestamp, floor: Timestamp, deadline: Option<Timestamp>) -> bool {
    (waiting == 0 && now >= floor) || deadline.is_some_and(|d| now >= d)
}

/// The drain bound a claim carries: `Ok(None)` without the annotation.
pub fn reboot_grace(claim: &NodeClaim) -> Result<Option<Duration>, String> {
    match claim
        .annotations()
        .get(labels::REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION)
    {
        None => Ok(None),
        Some(v) => parse_go_duration(v)
            .map(Some)
            .map_err(|e| format!("parsing reboot termination grace period {v:?}: {e}")),
    }
}

/// The same for every call of one reboot: the claim, the moment it was requested, the boot it leaves.
pub fn operation_id(uid: &str, requested_at: Timestamp, pre_boot_id: &str) -> String {
    format!("{uid}-{}-{pre_boot_id}", requested_at.as_nanosecond())
}

fn status_conditions(claim: &NodeClaim) -> &[Condition] {
    claim
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default()
}

/// `existing` with `(type, status, reason, message)` set; the transition time moves only with the status.
pub fn with_condition(
    existing: &[Condition],
    (type_, status, reason, message): (&str, ConditionStatus, &str, &str),
    now: Timestamp,
) -> Vec<Condition> {
    let mut out = existing.to_vec();
    match out.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.status = status;
                c.last_transition_time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now);
            }
            c.reason = reason.to_string();
            c.message = message.to_string();
        }
        None => out.push(Condition {
            type_: type_.to_string(),
            status,
            observed_generation: None,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
            reason: reason.to_string(),
            message: message.to_string(),
        }),
    }
    out
}

/// The facts of one reboot from its claim and Node.
fn facts(
    claim: &NodeClaim,
    node: Option<&Node>,
    issuing_since: Option<Timestamp>,
    now: Timestamp,
) -> RebootFacts {
    let conds = status_conditions(claim);
    let rebooting = find_condition(conds, conditions::REBOOTING);
    let phase = match rebooting.map(|c| c.reason.as_str()) {
        Some(reboot_reasons::ISSUED) => Phase::Issued,
        _ => Phase::Requested,
    };
    let issued_at = find_condition(conds, conditions::INITIALIZED)
        .filter(|c| c.status == ConditionStatus::Unknown && c.reason == reboot_reasons::REBOOTING)
        .map(|c| c.last_transition_time.0);
    let node = node.map(|n| {
        let taints = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or_default();
        NodeFacts {
            boot_id: n
                .status
                .as_ref()
                .and_then(|s| s.node_info.as_ref())
                .map(|i| i.boot_id.clone())
                .unwrap_or_default(),
            ready: n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status == "True"),
            fenced: taints.iter().any(is_fence),
            initialized: n.labels().contains_key(labels::INITIALIZED_LABEL),
        }
    });
    RebootFacts {
        phase,
        requested_at: rebooting.map_or(now, |c| c.last_transition_time.0),
        issued_at,
        issuing_since,
        grace: reboot_grace(claim),
        pre_boot_id: claim
            .annotations()
            .get(labels::REBOOT_PRE_BOOT_ID_ANNOTATION)
            .cloned(),
        node,
        now,
    }
}

fn is_fence(t: &Taint) -> bool {
    t.key == labels::REBOOTING_TAINT_KEY && t.effect == "NoSchedule"
}

/// See the module documentation.
pub struct RebootController {
    cx: ControllerContext,
    cloud: Arc<dyn CloudProvider>,
    drainer: Terminator,
    events: DedupedRecorder,
    /// When this process first asked the provider, by NodeClaim UID (as upstream: process-local; after a
    /// restart the issuance timeout starts over).
    issuing_since: Mutex<HashMap<String, Timestamp>>,
    /// Between passes (tokio time).
    pub interval: Duration,
}

/// How many steps one reconcile of one reboot takes at most before the next pass.
const MAX_STEPS: usize = 8;

impl RebootController {
    pub fn new(cx: ControllerContext, cloud: Arc<dyn CloudProvider>) -> Self {
        Self {
            drainer: Terminator::new(cx.clone(), Arc::clone(&cloud)),
            events: cx.recorder(),
            cx,
            cloud,
            issuing_since: Mutex::new(HashMap::new()),
            interval: Duration::from_secs(1),
        }
    }

    /// Runs passes until the future is dropped.
    pub async fn run(&self) {
        run_synced(&self.cx.state, "nodeclaim.reboot", self.interval, || async {
            self.pass().await;
            true
        })
        .await;
    }

    /// One reconcile of every reboot under way; the names of the claims whose reboot ended.
    pub async fn pass(&self) -> Vec<String> {
        let claims = self
            .cx
            .state
            .node_claims
            .filter(|c| is_rebooting(c) && c.metadata.deletion_timestamp.is_none());
        let mut ended = Vec::new();
        for claim in claims {
            let name = claim.name_any();
            match self.reconcile(&name).await {
                Ok(true) => ended.push(name),
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(controller = "nodeclaim.reboot", nodeclaim = %name, category = error.category(), %error, "reboot step failed")
                }
            }
        }
        ended
    }

    /// Steps one reboot on as far as it goes now, from the claim and Node as the API server has them (the cache
    /// keeps no boot ID). `true` once the reboot has ended.
    async fn reconcile(&self, name: &str) -> Result<bool, RepairError> {
        let claims: Api<NodeClaim> = Api::all(self.cx.client.clone());
        let nodes: Api<Node> = Api::all(self.cx.client.clone());
        for _ in 0..MAX_STEPS {
            let Some(claim) = claims.get_opt(name).await? else {
                return Ok(true);
            };
            if !is_rebooting(&claim) || claim.metadata.deletion_timestamp.is_some() {
                return Ok(true);
            }
            let uid = claim.metadata.uid.clone().unwrap_or_default();
            let node = match claim.status.as_ref().and_then(|s| s.node_name.as_deref()) {
                Some(n) => nodes.get_opt(n).await?,
                None => None,
            };
            let now = self.cx.clock.now();
            let since = self.issuing_since.lock().await.get(&uid).copied();
            let f = facts(&claim, node.as_ref(), since, now);
            let step = next_step(&f);
            tracing::debug!(controller = "nodeclaim.reboot", nodeclaim = %name, ?step, "reboot step");
            match (step, node) {
                (Step::Wait, _) => return Ok(false),
                (
                    Step::Fail {
                        result,
                        message,
                        replace,
                    },
                    node,
                ) => {
                    self.fail(&claim, node.as_ref(), &f, result, &message, replace)
                        .await?;
                    return Ok(true);
                }
                (_, None) => return Ok(false),
                (Step::Fence, Some(node)) => self.set_fence(&node, true).await?,
                (Step::Unfence, Some(node)) => {
                    self.set_fence(&node, false).await?;
                    self.events
                        .normal(
                            &claim.object_ref(&()),
                            REBOOT_OBSERVED,
                            "New boot observed (bootID changed); awaiting node readiness",
                        )
                        .await;
                }
                (Step::Drain { floor, deadline }, Some(node)) => {
                    let waiting = self.drainer.drain_in_place(&node, &drain_reason(&claim)).await?;
                    if !drain_finished(waiting, now, floor, deadline) {
                        return Ok(false);
                    }
                    self.record_pre_boot_id(&claim, &f).await?;
                }
                (Step::RecordPreBootId, Some(_)) => self.record_pre_boot_id(&claim, &f).await?,
                (Step::Issue, Some(node)) => {
                    self.issuing_since.lock().await.entry(uid.clone()).or_insert(now);
                    let pre = f.pre_boot_id.clone().unwrap_or_default();
                    match self
                        .cloud
                        .reboot(&claim, &operation_id(&uid, f.requested_at, &pre))
                        .await
                    {
                        Ok(()) => self.mark_issued(&claim, &node).await?,
                        Err(e) if e.is_terminal() => {
                            let message = format!("reboot rejected by the cloud provider: {e}");
                            self.fail(&claim, Some(&node), &f, RESULT_PROVIDER_ERROR, &message, true)
                                .await?;
                            return Ok(true);
                        }
                        Err(e) => {
                            tracing::warn!(controller = "nodeclaim.reboot", nodeclaim = %name, error = %e, "reboot not accepted yet; retrying");
                            return Ok(false);
                        }
                    }
                }
                (Step::MarkIssued, Some(node)) => self.mark_issued(&claim, &node).await?,
                (Step::Unlabel, Some(node)) => self.remove_initialized_label(&node).await?,
                (Step::Succeed, Some(node)) => {
                    self.succeed(&claim, &node, &f).await?;
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Adds (`true`) or removes the `karpenter.sh/rebooting:NoSchedule` taint, conditional on the Node's
    /// resourceVersion (a conflict is retried on the next step).
    async fn set_fence(&self, node: &Node, fenced: bool) -> Result<(), RepairError> {
        let mut taints: Vec<Taint> = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let had = taints.iter().any(is_fence);
        if had == fenced {
            return Ok(());
        }
        if fenced {
            taints.push(Taint {
                key: labels::REBOOTING_TAINT_KEY.into(),
                effect: "NoSchedule".into(),
                ..Taint::default()
            });
        } else {
            taints.retain(|t| !is_fence(t));
        }
        let patch = json!({
            "metadata": {"resourceVersion": node.resource_version()},
            "spec": {"taints": taints},
        });
        let nodes: Api<Node> = Api::all(self.cx.client.clone());
        nodes
            .patch(&node.name_any(), &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    async fn remove_initialized_label(&self, node: &Node) -> Result<(), RepairError> {
        let nodes: Api<Node> = Api::all(self.cx.client.clone());
        let patch = json!({"metadata": {"labels": {labels::INITIALIZED_LABEL: null}}});
        nodes
            .patch(&node.name_any(), &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    async fn record_pre_boot_id(&self, claim: &NodeClaim, f: &RebootFacts) -> Result<(), RepairError> {
        let boot_id = f.node.as_ref().map(|n| n.boot_id.clone()).unwrap_or_default();
        let patch = json!({"metadata": {
            "resourceVersion": claim.resource_version(),
            "annotations": {labels::REBOOT_PRE_BOOT_ID_ANNOTATION: boot_id},
        }});
        self.patch_claim(claim, patch).await
    }

    async fn patch_claim(&self, claim: &NodeClaim, patch: serde_json::Value) -> Result<(), RepairError> {
        let claims: Api<NodeClaim> = Api::all(self.cx.client.clone());
        claims
            .patch(&claim.name_any(), &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    async fn patch_claim_conditions(
        &self,
        claim: &NodeClaim,
        conds: Vec<Condition>,
    ) -> Result<(), RepairError> {
        let claims: Api<NodeClaim> = Api::all(self.cx.client.clone());
        let patch = json!({
            "metadata": {"resourceVersion": claim.resource_version()},
            "status": {"conditions": conds},
        });
        claims
            .patch_status(&claim.name_any(), &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    /// `RebootIssued`, with the fault's message kept; initialization is Unknown for the new boot.
    async fn mark_issued(&self, claim: &NodeClaim, node: &Node) -> Result<(), RepairError> {
        let now = self.cx.clock.now();
        let conds = status_conditions(claim);
        let message = find_condition(conds, conditions::REBOOTING)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        let conds = with_condition(
            conds,
            (
                conditions::REBOOTING,
                ConditionStatus::True,
                reboot_reasons::ISSUED,
                &message,
            ),
            now,
        );
        let conds = with_condition(
            &conds,
            (
                conditions::INITIALIZED,
                ConditionStatus::Unknown,
                reboot_reasons::REBOOTING,
                "node is rebooting",
            ),
            now,
        );
        let conds = with_condition(
            &conds,
            (
                conditions::READY,
                ConditionStatus::Unknown,
                reboot_reasons::REBOOTING,
                "node is rebooting",
            ),
            now,
        );
        self.patch_claim_conditions(claim, conds).await?;
        self.remove_initialized_label(node).await
    }

    /// The fence goes, the recorded boot ID too, and `Rebooting` becomes False with `reason`.
    async fn end(
        &self,
        claim: &NodeClaim,
        node: Option<&Node>,
        reason: &str,
        message: &str,
    ) -> Result<(), RepairError> {
        if let Some(node) = node {
            self.set_fence(node, false).await?;
        }
        self.issuing_since
            .lock()
            .await
            .remove(claim.metadata.uid.as_deref().unwrap_or_default());
        let conds = with_condition(
            status_conditions(claim),
            (conditions::REBOOTING, ConditionStatus::False, reason, message),
            self.cx.clock.now(),
        );
        self.patch_claim_conditions(claim, conds).await?;
        if claim
            .annotations()
            .contains_key(labels::REBOOT_PRE_BOOT_ID_ANNOTATION)
        {
            let patch = json!({"metadata": {"annotations": {labels::REBOOT_PRE_BOOT_ID_ANNOTATION: null}}});
            self.patch_claim(claim, patch).await?;
        }
        Ok(())
    }

    async fn succeed(&self, claim: &NodeClaim, node: &Node, f: &RebootFacts) -> Result<(), RepairError> {
        self.end(
            claim,
            Some(node),
            reboot_reasons::SUCCEEDED,
            "node rebooted and rejoined the cluster",
        )
        .await?;
        tracing::info!(controller = "nodeclaim.reboot", nodeclaim = %claim.name_any(), "node rebooted and rejoined the cluster");
        record_end(RESULT_SUCCEEDED, f.now.duration_since(f.requested_at));
        if let Some(issued) = f.issued_at {
            karpenter_metrics::metrics()
                .nodes_reboot_recovery_duration_seconds
                .get_or_create(&karpenter_metrics::NoLabels {})
                .observe(seconds(f.now.duration_since(issued)));
        }
        Ok(())
    }

    /// A failed reboot: the node is replaced (its drain bounded by the reboot's), except for an invalid request.
    async fn fail(
        &self,
        claim: &NodeClaim,
        node: Option<&Node>,
        f: &RebootFacts,
        result: &'static str,
        message: &str,
        replace: bool,
    ) -> Result<(), RepairError> {
        if !replace {
            self.end(claim, node, reboot_reasons::FAILED, message).await?;
        } else {
            if let Some(node) = node {
                self.set_fence(node, false).await?;
            }
            if let Ok(Some(grace)) = f.grace {
                let at = self
                    .cx
                    .clock
                    .now()
                    .checked_add(SignedDuration::try_from(grace).unwrap_or(SignedDuration::MAX))
                    .unwrap_or(Timestamp::MAX);
                let at = Timestamp::from_second(at.as_second()).unwrap_or(at);
                let existing = claim
                    .annotations()
                    .get(labels::NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION)
                    .and_then(|v| v.parse::<Timestamp>().ok());
                if existing.is_none_or(|e| at < e) {
                    let patch = json!({"metadata": {"annotations": {
                        labels::NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION: at.to_string()
                    }}});
                    self.patch_claim(claim, patch).await?;
                }
            }
            let claims: Api<NodeClaim> = Api::all(self.cx.client.clone());
            let params = DeleteParams {
                preconditions: claim.metadata.uid.clone().map(|uid| Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match claims.delete(&claim.name_any(), &params).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
            self.issuing_since
                .lock()
                .await
                .remove(claim.metadata.uid.as_deref().unwrap_or_default());
            tracing::info!(controller = "nodeclaim.reboot", nodeclaim = %claim.name_any(), result, "reboot failed, replacing node");
        }
        self.events
            .warn(&claim.object_ref(&()), REBOOT_FAILED, message)
            .await;
        record_end(result, f.now.duration_since(f.requested_at));
        Ok(())
    }
}

/// The reason evictions count under in `karpenter_pods_drained_total`: the claim's DisruptionReason (repair's
/// `Unhealthy`).
fn drain_reason(claim: &NodeClaim) -> String {
    find_condition(status_conditions(claim), conditions::DISRUPTION_REASON)
        .filter(|c| c.status == ConditionStatus::True)
        .map(|c| c.reason.clone())
        .unwrap_or_else(|| "Unhealthy".to_string())
}

fn seconds(d: SignedDuration) -> f64 {
    d.as_secs_f64().max(0.0)
}

fn record_end(result: &str, duration: SignedDuration) {
    let m = karpenter_metrics::metrics();
    let labels = karpenter_metrics::ResultLabels {
        result: result.to_string(),
    };
    m.nodes_reboots.get_or_create(&labels).inc();
    m.nodes_reboot_duration_seconds
        .get_or_create(&labels)
        .observe(seconds(duration));
}

/// The annotation value for a drain bound, as upstream writes it (`1m0s`).
pub fn format_grace(grace: Duration) -> String {
    format_go_duration(grace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    const T0: &str = "2026-01-01T00:00:00Z";

    fn node(boot: &str, ready: bool, fenced: bool, initialized: bool) -> Option<NodeFacts> {
        Some(NodeFacts {
            boot_id: boot.into(),
            ready,
            fenced,
            initialized,
        })
    }

    fn requested(now: &str) -> RebootFacts {
        RebootFacts {
            phase: Phase::Requested,
            requested_at: at(T0),
            issued_at: None,
            issuing_since: None,
            grace: Ok(Some(Duration::from_secs(60))),
            pre_boot_id: None,
            node: node("a", true, false, true),
            now: at(now),
        }
    }

    #[test]
    fn a_requested_reboot_fences_drains_records_the_boot_then_issues() {
        let mut f = requested("2026-01-01T00:00:01Z");
        assert_eq!(next_step(&f), Step::Fence);
        f.node = node("a", true, true, true);
        assert_eq!(
            next_step(&f),
            Step::Drain {
                floor: at("2026-01-01T00:00:05Z"),
                deadline: Some(at("2026-01-01T00:01:00Z")),
            }
        );
        f.pre_boot_id = Some("a".into());
        assert_eq!(next_step(&f), Step::Issue);
        // The provider rebooted it already (a restart between the issue and its record): no second reboot.
        f.node = node("b", true, true, true);
        assert_eq!(next_step(&f), Step::MarkIssued);
    }

    #[test]
    fn the_drain_lasts_at_least_five_seconds_and_at_most_its_bound() {
        let (floor, deadline) = (at("2026-01-01T00:00:05Z"), Some(at("2026-01-01T00:01:00Z")));
        assert!(!drain_finished(0, at("2026-01-01T00:00:02Z"), floor, deadline));
        assert!(drain_finished(0, at("2026-01-01T00:00:05Z"), floor, deadline));
        assert!(!drain_finished(1, at("2026-01-01T00:00:59Z"), floor, deadline));
        assert!(
            drain_finished(1, at("2026-01-01T00:01:00Z"), floor, deadline),
            "the rest rides the reboot"
        );
        assert!(
            !drain_finished(1, at("2026-01-02T00:00:00Z"), floor, None),
            "unbounded"
        );
        // A bound under five seconds drains for five.
        let mut f = requested("2026-01-01T00:00:01Z");
        f.node = node("a", true, true, true);
        f.grace = Ok(Some(Duration::from_secs(1)));
        assert!(matches!(next_step(&f), Step::Drain { deadline: Some(d), .. } if d == floor));
        // 0s is forceful: no drain at all.
        f.grace = Ok(Some(Duration::ZERO));
        assert_eq!(next_step(&f), Step::RecordPreBootId);
    }

    #[test]
    fn an_issued_reboot_unfences_on_a_new_boot_and_succeeds_once_ready() {
        let mut f = requested("2026-01-01T00:02:00Z");
        f.phase = Phase::Issued;
        f.issued_at = Some(at("2026-01-01T00:01:00Z"));
        f.pre_boot_id = Some("a".into());
        f.node = node("a", true, true, true);
        assert_eq!(next_step(&f), Step::Unlabel, "initialization holds for one boot");
        f.node = node("a", true, true, false);
        assert_eq!(next_step(&f), Step::Wait);
        f.node = node("b", false, true, false);
        assert_eq!(next_step(&f), Step::Unfence);
        f.node = node("b", false, false, false);
        assert_eq!(next_step(&f), Step::Wait, "not Ready yet");
        f.node = node("b", true, false, false);
        assert_eq!(next_step(&f), Step::Succeed);
    }

    #[test]
    fn timeouts_and_invalid_requests_fail_and_only_timeouts_replace() {
        let mut f = requested("2026-01-01T00:00:01Z");
        f.grace = Err("bad".into());
        assert!(matches!(
            next_step(&f),
            Step::Fail {
                result: RESULT_INVALID_REQUEST,
                replace: false,
                ..
            }
        ));

        let mut f = requested("2026-01-01T00:06:01Z");
        f.node = node("a", true, true, true);
        f.pre_boot_id = Some("a".into());
        f.issuing_since = Some(at("2026-01-01T00:01:00Z"));
        assert!(matches!(
            next_step(&f),
            Step::Fail {
                result: RESULT_PROVIDER_ERROR,
                replace: true,
                ..
            }
        ));

        let mut f = requested("2026-01-01T00:21:01Z");
        f.phase = Phase::Issued;
        f.issued_at = Some(at("2026-01-01T00:01:00Z"));
        f.pre_boot_id = Some("a".into());
        f.node = node("a", true, true, false);
        assert!(matches!(
            next_step(&f),
            Step::Fail {
                result: RESULT_RECOVERY_TIMEOUT,
                replace: true,
                ..
            }
        ));

        // A Node that went away is waited for until the issuance timeout from the request.
        let mut f = requested("2026-01-01T00:04:00Z");
        f.node = None;
        assert_eq!(next_step(&f), Step::Wait);
        f.now = at("2026-01-01T00:05:01Z");
        assert!(matches!(next_step(&f), Step::Fail { replace: true, .. }));
    }

    #[test]
    fn the_operation_id_is_stable_for_one_reboot_and_the_grace_reads_back() {
        assert_eq!(operation_id("u", at(T0), "a"), operation_id("u", at(T0), "a"));
        assert_ne!(operation_id("u", at(T0), "a"), operation_id("u", at(T0), "b"));
        let mut claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c"},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}},
        }))
        .unwrap();
        assert_eq!(reboot_grace(&claim), Ok(None));
        claim.metadata.annotations = Some(
            [(
                labels::REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION.to_string(),
                format_grace(Duration::from_secs(60)),
            )]
            .into(),
        );
        assert_eq!(reboot_grace(&claim), Ok(Some(Duration::from_secs(60))));
        claim.metadata.annotations = Some(
            [(
                labels::REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION.to_string(),
                "soon".to_string(),
            )]
            .into(),
        );
        assert!(reboot_grace(&claim).is_err());
    }
}
