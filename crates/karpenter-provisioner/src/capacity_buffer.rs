//! The CapacityBuffer controller (feature gate CapacityBuffer; upstream's `capacitybuffer`): resolves each
//! buffer of the active-capacity strategy as the provisioner does (core's
//! [`resolve_buffers`](karpenter_core::snapshot::resolve_buffers)), writes its status, and asks the provisioner
//! for a round when a buffer changed and every 30 s (upstream's requeue) while a buffer keeps placeholder pods:
//! those pods are no pods of the cluster, so no pending pod would ever start a batch for them.
//!
//! The status, through the status subresource with a merge patch and only when it changed:
//! - `podTemplateRef` and `podTemplateGeneration`: the PodTemplate a `podTemplateRef` buffer resolved to. A
//!   `scalableRef` buffer reads its workload's own pod template; no PodTemplate object is made for it, so these
//!   stay unset and `ReadyForProvisioning`'s message names the workload.
//! - `replicas`: how many placeholder pods the buffer keeps (`karpenter_api::capacitybuffer::desired_replicas`).
//! - `provisioningStrategy`: the strategy the status was computed for.
//! - `ReadyForProvisioning`: True (`Resolved`) or False with `PodTemplateNotFound`, `ScalableRefNotFound` or
//!   `ResolutionFailed` and a message naming the missing object or the field at fault.
//! - `Provisioning`: from where the provisioner's last round placed the placeholders ([`BufferSignals`]), as
//!   upstream: True with `FitsExistingCapacity` (the spare capacity is there); False with `RequiresNewCapacity`
//!   (it is being launched, or no NodePool can take it), `NotReadyForProvisioning` or `BufferEmpty`. Being the only writer of the conditions, this controller never races the provisioner.
//!
//! Buffers of another provisioning strategy belong to another autoscaler and are left alone.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::{
    capacitybuffer::{CapacityBuffer, CapacityBufferStatus, LocalObjectRef, conditions, reasons},
    common::{Condition, ConditionStatus, find_condition},
};
use karpenter_core::{
    clock::Clock,
    snapshot::{BufferResolution, ResolvedBuffer, Snapshot, UnresolvedBuffer, resolve_buffers},
};
use karpenter_state::api_errors::is_not_found;
use karpenter_state::{ControllerContext, Keyed, ProjectedStore, periodic::run_synced};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::ProvisionerError;

/// Where a buffer's placeholder pods went in the provisioner's last round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProvisioningOutcome {
    /// Of `of` placeholders, `new` needed a new NodeClaim and `failed` found no place at all.
    RequiresNewCapacity { new: usize, failed: usize, of: usize },
    /// All `of` fit on existing nodes and in-flight NodeClaims.
    FitsExistingCapacity { of: usize },
}

/// What the buffer controller and the provisioner tell each other: requests for a round one way, where each
/// buffer's placeholders went the other.
#[derive(Debug, Default)]
pub struct BufferSignals {
    requests: AtomicU64,
    outcomes: Mutex<Outcomes>,
}

#[derive(Debug, Default)]
struct Outcomes {
    /// By `namespace/name`.
    by_buffer: HashMap<String, ProvisioningOutcome>,
    /// Bumped when `by_buffer` changes.
    version: u64,
}

impl BufferSignals {
    /// Asks the provisioner for a round.
    pub fn trigger(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// How many rounds were asked for so far: the provisioner runs one when this moves.
    pub fn triggered(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// The provisioner's last round: every buffer that had placeholder pods, and where they went.
    pub fn record(&self, outcomes: HashMap<String, ProvisioningOutcome>) {
        let mut current = self.outcomes.lock().unwrap_or_else(PoisonError::into_inner);
        if current.by_buffer != outcomes {
            current.by_buffer = outcomes;
            current.version += 1;
        }
    }

    /// Where buffer `namespace/name`'s placeholders went in the last round that had any.
    pub fn outcome(&self, key: &str) -> Option<ProvisioningOutcome> {
        let current = self.outcomes.lock().unwrap_or_else(PoisonError::into_inner);
        current.by_buffer.get(key).copied()
    }

    fn outcomes_version(&self) -> u64 {
        self.outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .version
    }
}

/// `current`'s condition of `type_` as it should be now: its transition time kept while its status stays.
fn condition(
    current: &[Condition],
    type_: &str,
    (status, reason, message): (ConditionStatus, &str, String),
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let last_transition_time = match find_condition(current, type_) {
        Some(previous) if previous.status == status => previous.last_transition_time.clone(),
        _ => Time(now),
    };
    Condition {
        type_: type_.to_string(),
        status,
        observed_generation: generation,
        last_transition_time,
        reason: reason.to_string(),
        message,
    }
}

/// A buffer's status as it should be, given its `current` one, what it resolved to and where the
/// provisioner's last round put its placeholders (`None`: no round has placed them yet, so `Provisioning` is
/// kept as found). Conditions this controller does not own (LimitedByQuotas) are kept as found.
pub fn buffer_status(
    current: &CapacityBufferStatus,
    strategy: &str,
    resolution: &Result<ResolvedBuffer, UnresolvedBuffer>,
    outcome: Option<ProvisioningOutcome>,
    generation: Option<i64>,
    now: Timestamp,
) -> CapacityBufferStatus {
    let ready = match resolution {
        Ok(r) => (
            ConditionStatus::True,
            reasons::RESOLVED,
            format!("{} placeholder pod(s) shaped like {}", r.replicas, r.source),
        ),
        Err(e) => (ConditionStatus::False, e.reason, e.message.clone()),
    };
    let provisioning = match (resolution, outcome) {
        (Err(_), _) => Some((
            ConditionStatus::False,
            reasons::NOT_READY_FOR_PROVISIONING,
            "the buffer is not ReadyForProvisioning".to_string(),
        )),
        (Ok(r), _) if r.replicas <= 0 => Some((
            ConditionStatus::False,
            reasons::BUFFER_EMPTY,
            "the buffer resolved to 0 replicas".to_string(),
        )),
        (Ok(_), Some(ProvisioningOutcome::RequiresNewCapacity { new, failed, of })) => Some((
            ConditionStatus::False,
            reasons::REQUIRES_NEW_CAPACITY,
            format!("{new}/{of} placeholder pods required new capacity, {failed} found no place"),
        )),
        (Ok(_), Some(ProvisioningOutcome::FitsExistingCapacity { of })) => Some((
            ConditionStatus::True,
            reasons::FITS_EXISTING_CAPACITY,
            format!("all {of} placeholder pods fit on existing capacity"),
        )),
        (Ok(_), None) => None,
    };
    let ours = |c: &Condition| {
        c.type_ == conditions::READY_FOR_PROVISIONING
            || (provisioning.is_some() && c.type_ == conditions::PROVISIONING)
    };
    let mut out: Vec<Condition> = current.conditions.iter().filter(|c| !ours(c)).cloned().collect();
    out.push(condition(
        &current.conditions,
        conditions::READY_FOR_PROVISIONING,
        ready,
        generation,
        now,
    ));
    if let Some(provisioning) = provisioning {
        out.push(condition(
            &current.conditions,
            conditions::PROVISIONING,
            provisioning,
            generation,
            now,
        ));
    }
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    let resolved = resolution.as_ref().ok();
    CapacityBufferStatus {
        pod_template_ref: resolved
            .and_then(|r| r.pod_template.clone())
            .map(|name| LocalObjectRef { name }),
        replicas: resolved.map(|r| i32::try_from(r.replicas).unwrap_or(i32::MAX)),
        pod_template_generation: resolved.and_then(|r| r.pod_template_generation),
        conditions: out,
        provisioning_strategy: Some(strategy.to_string()),
    }
}

/// The merge patch writing `wanted` whole: fields it leaves unset are set to null, so a value that no longer
/// applies (a podTemplateRef whose template went away) is removed.
fn status_patch(wanted: &CapacityBufferStatus) -> Result<Value, ProvisionerError> {
    let conditions = serde_json::to_value(&wanted.conditions).map_err(|source| ProvisionerError::Encode {
        what: "CapacityBuffer conditions".to_string(),
        source,
    })?;
    Ok(json!({"status": {
        "podTemplateRef": wanted.pod_template_ref.as_ref().map(|r| json!({"name": r.name})),
        "replicas": wanted.replicas,
        "podTemplateGeneration": wanted.pod_template_generation,
        "provisioningStrategy": wanted.provisioning_strategy,
        "conditions": conditions,
    }}))
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BufferStatusPass {
    /// Buffers whose status was written, `namespace/name`.
    pub patched: Vec<String>,
    /// Whether the provisioner was asked for a round.
    pub triggered: bool,
}

/// Per buffer, what the provisioner's placeholders depend on: `None` when it is not ready.
type BufferShapes = Vec<(String, Option<(i64, String, String)>)>;

#[derive(Debug, Default)]
struct Memory {
    /// The store versions (buffers, PodTemplates, Deployments, StatefulSets, ReplicaSets) and the outcomes'
    /// version the last full pass saw.
    seen: Option<[u64; 6]>,
    last_full: Option<Instant>,
    shapes: BufferShapes,
}

/// The CapacityBuffer controller's context.
pub struct CapacityBufferController {
    cx: ControllerContext,
    signals: Arc<BufferSignals>,
    /// How often the cache is looked at for changes (cheap when nothing changed; tokio time).
    pub poll: Duration,
    /// Every buffer is re-resolved, and the provisioner asked for a round while a buffer keeps placeholders, at
    /// least this often (upstream's requeue).
    pub resync: Duration,
    memory: Mutex<Memory>,
}

fn owned<T: Clone + Keyed>(store: &ProjectedStore<T>) -> Vec<T> {
    store.all().iter().map(|o| T::clone(o)).collect()
}

impl CapacityBufferController {
    pub fn new(cx: ControllerContext, signals: Arc<BufferSignals>) -> Self {
        Self {
            cx,
            signals,
            poll: Duration::from_secs(1),
            resync: Duration::from_secs(30),
            memory: Mutex::default(),
        }
    }

    /// Runs passes until the future is dropped; a failed pass is logged and the next one retries.
    pub async fn run(&self) {
        run_synced(&self.cx.state, "capacitybuffer", self.poll, || async {
            match self.pass().await {
                Ok(pass) => {
                    if !pass.patched.is_empty() {
                        tracing::info!(controller = "capacitybuffer", patched = ?pass.patched, "wrote CapacityBuffer status");
                    }
                    true
                }
                Err(error) => {
                    tracing::warn!(controller = "capacitybuffer", category = error.category(), %error, "CapacityBuffer pass failed; retrying");
                    false
                }
            }
        })
        .await;
    }

    /// One pass: nothing when no buffer, workload or provisioning outcome changed since the last full pass
    /// and the resync is not due; otherwise every buffer resolved, its status written where it changed, and
    /// the provisioner asked for a round when the buffers' placeholders changed or the resync is due.
    pub async fn pass(&self) -> Result<BufferStatusPass, ProvisionerError> {
        if !self.cx.state.synced() {
            return Err(ProvisionerError::NotSynced);
        }
        let state = &self.cx.state;
        let seen = [
            state.capacity_buffers.version(),
            state.pod_templates.version(),
            state.deployments.version(),
            state.stateful_sets.version(),
            state.replica_sets.version(),
            self.signals.outcomes_version(),
        ];
        let (due, changed_stores) = {
            let memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
            let due = memory.last_full.is_none_or(|t| t.elapsed() >= self.resync);
            (due, memory.seen != Some(seen))
        };
        if !due && !changed_stores {
            return Ok(BufferStatusPass::default());
        }
        let snapshot = Snapshot {
            capacity_buffers: owned(&state.capacity_buffers),
            pod_templates: owned(&state.pod_templates),
            deployments: owned(&state.deployments),
            stateful_sets: owned(&state.stateful_sets),
            replica_sets: owned(&state.replica_sets),
            ..Snapshot::default()
        };
        let resolutions = resolve_buffers(&snapshot);
        let shapes: BufferShapes = resolutions
            .iter()
            .map(|r| {
                let shape = r
                    .outcome
                    .as_ref()
                    .ok()
                    .map(|ok| (ok.replicas, ok.source.clone(), ok.source_version.clone()));
                (format!("{}/{}", r.namespace, r.name), shape)
            })
            .collect();
        let keeps_placeholders = shapes
            .iter()
            .any(|(_, shape)| shape.as_ref().is_some_and(|(n, ..)| *n > 0));
        let mut pass = BufferStatusPass::default();
        {
            let mut memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
            let reshaped = memory.shapes != shapes;
            if reshaped || (due && keeps_placeholders) {
                self.signals.trigger();
                pass.triggered = true;
            }
            memory.seen = Some(seen);
            memory.shapes = shapes;
            if due {
                memory.last_full = Some(Instant::now());
            }
        }
        let now = self.cx.clock.now();
        let now = Timestamp::from_second(now.as_second()).unwrap_or(now);
        for resolution in &resolutions {
            if let Some(key) = self.write_status(resolution, now).await? {
                pass.patched.push(key);
            }
        }
        Ok(pass)
    }

    /// Writes one buffer's status if it changed; its key when it was written.
    async fn write_status(
        &self,
        resolution: &BufferResolution,
        now: Timestamp,
    ) -> Result<Option<String>, ProvisionerError> {
        let key = format!("{}/{}", resolution.namespace, resolution.name);
        let Some(buffer) = self.cx.state.capacity_buffers.get(&key) else {
            return Ok(None);
        };
        if buffer.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let current = buffer.status.clone().unwrap_or_default();
        let wanted = buffer_status(
            &current,
            buffer.spec.provisioning_strategy(),
            &resolution.outcome,
            self.signals.outcome(&key),
            buffer.metadata.generation,
            now,
        );
        if wanted == current {
            return Ok(None);
        }
        let api: Api<CapacityBuffer> = Api::namespaced(self.cx.client.clone(), &resolution.namespace);
        match api
            .patch_status(
                &resolution.name,
                &PatchParams::default(),
                &Patch::Merge(status_patch(&wanted)?),
            )
            .await
        {
            Ok(_) => Ok(Some(key)),
            // Deleted since the cache saw it.
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn resolved(replicas: i64, pod_template: Option<&str>) -> Result<ResolvedBuffer, UnresolvedBuffer> {
        Ok(ResolvedBuffer {
            pod_template: pod_template.map(str::to_string),
            pod_template_generation: pod_template.map(|_| 3),
            replicas,
            source: match pod_template {
                Some(t) => format!("PodTemplate ml/{t}"),
                None => "Deployment ml/api".to_string(),
            },
            source_version: "1".into(),
        })
    }

    fn find<'a>(status: &'a CapacityBufferStatus, type_: &str) -> &'a Condition {
        find_condition(&status.conditions, type_).unwrap()
    }

    const STRATEGY: &str = karpenter_api::capacitybuffer::ACTIVE_CAPACITY_STRATEGY;

    #[test]
    fn a_resolved_buffer_reports_its_template_replicas_and_readiness() {
        let now = at("2026-01-01T00:00:00Z");
        let s = buffer_status(
            &CapacityBufferStatus::default(),
            STRATEGY,
            &resolved(3, Some("chunk")),
            Some(ProvisioningOutcome::RequiresNewCapacity {
                new: 2,
                failed: 0,
                of: 3,
            }),
            Some(2),
            now,
        );
        assert_eq!(
            s.pod_template_ref.as_ref().map(|r| r.name.as_str()),
            Some("chunk")
        );
        assert_eq!(s.replicas, Some(3));
        assert_eq!(s.pod_template_generation, Some(3));
        assert_eq!(s.provisioning_strategy.as_deref(), Some(STRATEGY));
        let ready = find(&s, "ReadyForProvisioning");
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            (ConditionStatus::True, "Resolved")
        );
        assert_eq!(
            ready.message,
            "3 placeholder pod(s) shaped like PodTemplate ml/chunk"
        );
        assert_eq!(ready.observed_generation, Some(2));
        let provisioning = find(&s, "Provisioning");
        assert_eq!(
            (provisioning.status, provisioning.reason.as_str()),
            (ConditionStatus::False, "RequiresNewCapacity")
        );
        assert_eq!(
            provisioning.message,
            "2/3 placeholder pods required new capacity, 0 found no place"
        );
    }

    #[test]
    fn a_missing_template_is_named_and_nothing_is_provisioned() {
        let s = buffer_status(
            &CapacityBufferStatus::default(),
            STRATEGY,
            &Err(UnresolvedBuffer {
                reason: reasons::POD_TEMPLATE_NOT_FOUND,
                message: "PodTemplate ml/chunk not found".into(),
            }),
            None,
            None,
            at("2026-01-01T00:00:00Z"),
        );
        assert_eq!(s.replicas, None);
        assert_eq!(s.pod_template_ref, None);
        let ready = find(&s, "ReadyForProvisioning");
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason, "PodTemplateNotFound");
        assert_eq!(ready.message, "PodTemplate ml/chunk not found");
        let provisioning = find(&s, "Provisioning");
        assert_eq!(
            (provisioning.status, provisioning.reason.as_str()),
            (ConditionStatus::False, "NotReadyForProvisioning")
        );
    }

    #[test]
    fn an_unchanged_status_keeps_its_transition_times_so_nothing_is_written() {
        let first = buffer_status(
            &CapacityBufferStatus::default(),
            STRATEGY,
            &resolved(2, None),
            Some(ProvisioningOutcome::FitsExistingCapacity { of: 2 }),
            Some(1),
            at("2026-01-01T00:00:00Z"),
        );
        assert_eq!(
            first.pod_template_ref, None,
            "a scalableRef buffer names no PodTemplate"
        );
        let provisioning = find(&first, "Provisioning");
        assert_eq!(
            (provisioning.status, provisioning.message.as_str()),
            (
                ConditionStatus::True,
                "all 2 placeholder pods fit on existing capacity"
            )
        );
        let again = buffer_status(
            &first,
            STRATEGY,
            &resolved(2, None),
            Some(ProvisioningOutcome::FitsExistingCapacity { of: 2 }),
            Some(1),
            at("2026-01-01T00:05:00Z"),
        );
        assert_eq!(again, first);
        // No round has placed the placeholders since a restart: Provisioning is kept as found.
        let restarted = buffer_status(
            &first,
            STRATEGY,
            &resolved(2, None),
            None,
            Some(1),
            at("2026-01-01T00:06:00Z"),
        );
        assert_eq!(restarted, first);
        // Scaled to zero: BufferEmpty, with a new transition time.
        let empty = buffer_status(
            &first,
            STRATEGY,
            &resolved(0, None),
            Some(ProvisioningOutcome::FitsExistingCapacity { of: 2 }),
            Some(2),
            at("2026-01-01T00:07:00Z"),
        );
        let provisioning = find(&empty, "Provisioning");
        assert_eq!(
            (provisioning.status, provisioning.reason.as_str()),
            (ConditionStatus::False, "BufferEmpty")
        );
        assert_eq!(
            provisioning.last_transition_time,
            Time(at("2026-01-01T00:07:00Z"))
        );
        assert_eq!(
            find(&empty, "ReadyForProvisioning").last_transition_time,
            Time(at("2026-01-01T00:00:00Z"))
        );
    }

    #[test]
    fn conditions_this_controller_does_not_own_are_kept() {
        let quota = Condition {
            type_: "LimitedByQuotas".into(),
            status: ConditionStatus::False,
            observed_generation: None,
            last_transition_time: Time(at("2025-01-01T00:00:00Z")),
            reason: "NotLimited".into(),
            message: String::new(),
        };
        let current = CapacityBufferStatus {
            conditions: vec![quota.clone()],
            ..CapacityBufferStatus::default()
        };
        let s = buffer_status(
            &current,
            STRATEGY,
            &resolved(1, Some("t")),
            None,
            None,
            at("2026-01-01T00:00:00Z"),
        );
        assert_eq!(find(&s, "LimitedByQuotas"), &quota);
        assert!(find_condition(&s.conditions, "Provisioning").is_none());
    }

    #[test]
    fn the_patch_clears_what_no_longer_applies() {
        let s = buffer_status(
            &CapacityBufferStatus::default(),
            STRATEGY,
            &Err(UnresolvedBuffer {
                reason: reasons::SCALABLE_REF_NOT_FOUND,
                message: "Deployment ml/api not found".into(),
            }),
            None,
            None,
            at("2026-01-01T00:00:00Z"),
        );
        let patch = status_patch(&s).unwrap();
        assert_eq!(patch["status"]["podTemplateRef"], Value::Null);
        assert_eq!(patch["status"]["replicas"], Value::Null);
        assert!(patch["status"].as_object().unwrap().contains_key("replicas"));
        assert_eq!(patch["status"]["conditions"][1]["reason"], "ScalableRefNotFound");
    }

    #[test]
    fn signals_count_requests_and_version_outcomes() {
        let signals = BufferSignals::default();
        assert_eq!(signals.triggered(), 0);
        signals.trigger();
        assert_eq!(signals.triggered(), 1);
        let outcomes: HashMap<String, ProvisioningOutcome> = [(
            "ml/spare".to_string(),
            ProvisioningOutcome::FitsExistingCapacity { of: 1 },
        )]
        .into();
        signals.record(outcomes.clone());
        assert_eq!(signals.outcomes_version(), 1);
        signals.record(outcomes);
        assert_eq!(signals.outcomes_version(), 1, "the same outcomes are no change");
        assert_eq!(
            signals.outcome("ml/spare"),
            Some(ProvisioningOutcome::FitsExistingCapacity { of: 1 })
        );
        assert_eq!(signals.outcome("ml/other"), None);
    }
}
