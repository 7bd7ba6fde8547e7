//! The disruption loop and its one-command-at-a-time orchestration (see the crate documentation).

use std::{collections::HashMap, sync::Arc, time::Duration};

use futures::{StreamExt, stream};
use jiff::Timestamp;
use karpenter_api::{
    common::{Condition, ConditionStatus, find_condition},
    label_policy::LabelPolicy,
    labels,
    nodeclaim::{NodeClaim, conditions},
    nodepool::{ConsolidationPolicy, NodePool},
};
use karpenter_core::{
    clock::Clock,
    cloudprovider::CloudProvider,
    disruption::pass::{
        ConsolidationProgress, Expiration, Method, PassResult, PassSettings, SearchLimits,
        disruption_pass_within, expired_claims,
    },
    provisioning::{ClaimContext, node_claim_object},
    snapshot::{BuildOptions, DisruptionInputs, Snapshot, build_disruption_inputs},
};
use karpenter_provisioner::catalog::catalog_for;
use karpenter_state::api_errors::{ignore_not_found, is_conflict, is_not_found};
use karpenter_state::{
    ControllerContext,
    events::{Dedupe, DedupedRecorder},
};
use karpenter_termination::taint::{add_disrupted_taint, remove_disrupted_taint};
use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;
use tokio::sync::Mutex;

use crate::{
    DisruptionError,
    blocked_events::{
        CONSOLIDATION_REJECTED, DISRUPTION_BLOCKED, NODE_POOL_BLOCKED_DEDUPE, event_reason,
        node_pool_blocked_message,
    },
    claim_conditions::{disruption_conditions, with_disruption_reason, without_disruption_reason},
    command_events::{
        CONSOLIDATION_APPROVED, CONSOLIDATION_CANDIDATE, DISRUPTION_LAUNCHING, DISRUPTION_TERMINATING,
        DISRUPTION_WAITING_READINESS, WAITING_READINESS_MESSAGE, approved_message, candidate_message,
        launching_message, terminating_message,
    },
    validation::{command_shapes, needs_validation, validate},
};

/// NodeClaim condition writes in flight at once.
const CONDITION_WRITE_CONCURRENCY: usize = 16;

/// How the controller runs.
#[derive(Debug, Clone)]
pub struct DisruptionSettings {
    /// Between passes (upstream: 10 s).
    pub interval: Duration,
    /// How long replacements may take to initialize before the command is rolled back.
    pub replacement_timeout: Duration,
    pub build: BuildOptions,
    /// The SpotToSpotConsolidation feature gate.
    pub spot_to_spot: bool,
    /// The TerminateFirstDrift feature gate: drifted nodes are deleted before their replacements launch.
    pub terminate_first_drift: bool,
    /// How long a consolidation (or emptiness) decision waits before it is taken again and, if unchanged,
    /// carried out (upstream: 15 s).
    pub validation_delay: Duration,
}

impl Default for DisruptionSettings {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(10),
            replacement_timeout: Duration::from_secs(600),
            build: BuildOptions {
                label_policy: LabelPolicy::Aws,
                ..BuildOptions::default()
            },
            spot_to_spot: false,
            terminate_first_drift: false,
            validation_delay: Duration::from_secs(15),
        }
    }
}

/// A command being carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    /// The method that chose it.
    pub method: Method,
    /// Why (`Empty`, `Drifted`, `Underutilized`): the candidates' `DisruptionReason` condition.
    pub reason: String,
    /// The candidates' NodeClaim and Node names.
    pub candidates: Vec<(String, String)>,
    /// The replacement NodeClaims created for it.
    pub replacements: Vec<String>,
    pub started: Timestamp,
}

/// What one tick did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tick {
    NotSynced,
    /// No command in flight and the pass found nothing to do.
    Idle,
    Started(InFlight),
    /// Replacements are not all initialized yet.
    Waiting,
    /// The candidates' NodeClaims were deleted (the terminator drains them).
    Completed(InFlight),
    RolledBack {
        command: InFlight,
        why: String,
    },
    /// A consolidation decision was not confirmed when taken again after the validation delay; nothing was
    /// done.
    Abandoned {
        method: Method,
        why: String,
    },
}

/// The controller's context.
pub struct DisruptionController {
    cx: ControllerContext,
    cloud: Arc<dyn CloudProvider>,
    settings: DisruptionSettings,
    in_flight: Mutex<Option<InFlight>>,
    events: DedupedRecorder,
    /// Whether taints left by a previous process have been cleared (once, on the first synced tick).
    recovered: std::sync::atomic::AtomicBool,
    /// The NodePools single-node consolidation did not reach before its last timeout, tried first next pass.
    consolidation_progress: std::sync::Mutex<ConsolidationProgress>,
}

fn is_initialized(claim: &NodeClaim) -> bool {
    claim.status.as_ref().is_some_and(|s| {
        find_condition(&s.conditions, conditions::INITIALIZED)
            .is_some_and(|c| c.status == ConditionStatus::True)
    })
}

impl DisruptionController {
    pub fn new(cx: ControllerContext, cloud: Arc<dyn CloudProvider>, settings: DisruptionSettings) -> Self {
        Self {
            events: cx.recorder(),
            cx,
            cloud,
            settings,
            in_flight: Mutex::new(None),
            recovered: std::sync::atomic::AtomicBool::new(false),
            consolidation_progress: std::sync::Mutex::default(),
        }
    }

    /// The command being carried out, if any.
    pub async fn in_flight(&self) -> Option<InFlight> {
        self.in_flight.lock().await.clone()
    }

    /// Refreshes the NodeClaims' disruption conditions, then moves the command in flight on, or runs a pass
    /// and starts its command.
    pub async fn tick(&self) -> Result<Tick, DisruptionError> {
        if !self.cx.state.synced() {
            return Ok(Tick::NotSynced);
        }
        let mut in_flight = self.in_flight.lock().await;
        if !self.recovered.load(std::sync::atomic::Ordering::Acquire) {
            self.recover_after_restart().await?;
            self.recovered.store(true, std::sync::atomic::Ordering::Release);
        }
        let started = std::time::Instant::now();
        let (rss_before_mib, _) = crate::process_memory::resident_mib();
        let (snapshot, inputs) = self.inputs().await?;
        let (rss_inputs_mib, peak_inputs_mib) = crate::process_memory::resident_mib();
        let converted = started.elapsed();
        self.sync_conditions(&inputs).await;
        crate::pass_metrics::record_cost(&inputs);
        // Where a tick's time goes, for whoever profiles a large cluster (`RUST_LOG=karpenter_disruption=debug`).
        let (rss_mib, peak_mib) = crate::process_memory::resident_mib();
        tracing::debug!(
            inputs_seconds = converted.as_secs_f64(),
            rss_before_mib,
            rss_inputs_mib,
            peak_inputs_mib,
            rss_mib,
            peak_mib,
            conditions_seconds = (started.elapsed() - converted).as_secs_f64(),
            "disruption inputs built and NodeClaim conditions synced"
        );
        if let Some(command) = in_flight.clone() {
            // Expiration does not wait for a command's replacements to become ready.
            let expirations = expired_claims(&inputs, self.cx.clock.now());
            self.delete_expired(&inputs, &expirations).await?;
            let tick = self.advance(command).await?;
            if !matches!(tick, Tick::Waiting) {
                *in_flight = None;
            }
            return Ok(tick);
        }
        let tick = self.start(snapshot, inputs).await?;
        if let Tick::Started(command) = &tick {
            *in_flight = Some(command.clone());
        }
        Ok(tick)
    }

    /// A command in flight lives in memory only: after a restart (or a leader change) the nodes a killed
    /// process had tainted `karpenter.sh/disrupted` but not yet deleted would stay cordoned forever. As
    /// upstream does at start-up, the taint is removed from every Node whose NodeClaim is not being deleted;
    /// replacements it had launched are ordinary nodes now, consolidated like any other if unneeded.
    async fn recover_after_restart(&self) -> Result<(), DisruptionError> {
        let deleting: std::collections::HashSet<String> = self
            .cx
            .state
            .node_claims
            .all()
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_some())
            .filter_map(|c| c.status.as_ref().and_then(|s| s.node_name.clone()))
            .collect();
        for node in self.cx.state.nodes.all() {
            let tainted = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|ts| ts.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY));
            if tainted && node.metadata.deletion_timestamp.is_none() && !deleting.contains(&node.name_any()) {
                tracing::info!(node = %node.name_any(), "removing the disrupted taint a previous controller left");
                remove_disrupted_taint(&self.cx.client, &node.to_node()).await?;
            }
        }
        let stale: Vec<String> = self
            .cx
            .state
            .node_claims
            .all()
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter(|c| {
                c.status
                    .as_ref()
                    .is_some_and(|s| find_condition(&s.conditions, conditions::DISRUPTION_REASON).is_some())
            })
            .map(|c| c.name_any())
            .collect();
        for claim in stale {
            tracing::info!(nodeclaim = %claim, "removing the DisruptionReason a previous controller left");
            self.update_claim_conditions(&claim, without_disruption_reason)
                .await?;
        }
        Ok(())
    }

    /// Rewrites NodeClaim `name`'s conditions as `change` makes them from the current ones (`None`: nothing to
    /// write). Read from the API server and written conditional on that read, so a condition another controller
    /// wrote meanwhile is not lost: a conflict is read again, a few times. A claim gone is nothing to do.
    async fn update_claim_conditions(
        &self,
        name: &str,
        change: impl Fn(&[Condition]) -> Option<Vec<Condition>>,
    ) -> Result<(), DisruptionError> {
        const ATTEMPTS: usize = 3;
        let claims: Api<NodeClaim> = Api::all(self.cx.client.clone());
        for attempt in 1..=ATTEMPTS {
            let Some(claim) = claims.get_opt(name).await? else {
                return Ok(());
            };
            let current = claim
                .status
                .as_ref()
                .map(|s| s.conditions.as_slice())
                .unwrap_or_default();
            let Some(conditions) = change(current) else {
                return Ok(());
            };
            let patch = json!({
                "metadata": {"resourceVersion": claim.resource_version()},
                "status": {"conditions": conditions},
            });
            match claims
                .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) if is_conflict(&e) && attempt < ATTEMPTS => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// The cache as it is now, and the pass's inputs over it.
    async fn inputs(&self) -> Result<(Snapshot, DisruptionInputs), DisruptionError> {
        let snapshot = self.cx.state.snapshot();
        let catalog = catalog_for(self.cloud.as_ref(), &snapshot.node_pools).await?;
        let inputs = build_disruption_inputs(
            &snapshot,
            &catalog,
            &self.settings.build,
            self.cloud.as_ref(),
            self.cx.clock.now(),
        );
        Ok((snapshot, inputs))
    }

    /// Runs a pass, its consolidation searches within upstream's time limits on the controller's clock.
    fn pass(&self, inputs: &mut DisruptionInputs) -> PassResult {
        let settings = PassSettings {
            now: self.cx.clock.now(),
            spot_to_spot: self.settings.spot_to_spot,
        };
        let limits = SearchLimits::upstream(self.cx.clock.as_ref());
        let mut progress = self
            .consolidation_progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let result = disruption_pass_within(inputs, &settings, Some(&limits), &mut progress);
        crate::pass_metrics::record_timeouts(&result);
        result
    }

    /// Expiration is forceful: the claims go now, whatever else the pass decided or a command is waiting on.
    async fn delete_expired(
        &self,
        inputs: &DisruptionInputs,
        expirations: &[Expiration],
    ) -> Result<(), DisruptionError> {
        let claims: Api<NodeClaim> = Api::all(self.cx.client.clone());
        for e in expirations {
            let Some(name) = &inputs.view.nodes[e.node].node_claim else {
                continue;
            };
            tracing::info!(nodeclaim = %name, "expired; deleting");
            delete_claim(&claims, name).await?;
            let claim = self.cx.state.node_claims.get(name);
            let label = |key: &str| {
                claim
                    .as_ref()
                    .and_then(|c| c.labels().get(key).cloned())
                    .unwrap_or_default()
            };
            karpenter_metrics::metrics()
                .nodeclaims_disrupted
                .get_or_create(&karpenter_metrics::NodeClaimDisruptedLabels {
                    reason: "expired".into(),
                    nodepool: label(labels::NODEPOOL_LABEL),
                    capacity_type: label(labels::CAPACITY_TYPE_LABEL),
                })
                .inc();
        }
        Ok(())
    }

    async fn start(&self, snapshot: Snapshot, mut inputs: DisruptionInputs) -> Result<Tick, DisruptionError> {
        let now = self.cx.clock.now();
        let started = std::time::Instant::now();
        let result = self.pass(&mut inputs);
        crate::pass_metrics::record_pass(&result, |p| inputs.pools[p].name.as_str());
        let (rss_mib, peak_mib) = crate::process_memory::resident_mib();
        tracing::debug!(
            pass_seconds = started.elapsed().as_secs_f64(),
            rss_mib,
            peak_mib,
            commands = result.commands.len(),
            blocked = result.blocked.len(),
            "disruption pass"
        );
        self.delete_expired(&inputs, &result.expirations).await?;
        self.report_blocked(&inputs, &result).await;
        let Some(first) = result.commands.first() else {
            return Ok(Tick::Idle);
        };
        if !needs_validation(first.method) {
            return self.execute(&snapshot, &inputs, &result, now).await;
        }
        // Taken again after the delay, on the cache as it is then; carried out only if unchanged, with the
        // replacements computed then. This decision's inputs go first: holding two sets at once was the
        // controller's memory peak on a large cluster.
        let decided = command_shapes(&result.commands, |n| inputs.view.nodes[n].node_claim.as_deref());
        let method = first.method;
        drop(result);
        drop(inputs);
        drop(snapshot);
        tokio::time::sleep(self.settings.validation_delay).await;
        let (snapshot, mut again_inputs) = self.inputs().await?;
        let again = self.pass(&mut again_inputs);
        let confirmed = command_shapes(&again.commands, |n| {
            again_inputs.view.nodes[n].node_claim.as_deref()
        });
        if let Err(why) = validate(&decided, &confirmed) {
            return Ok(Tick::Abandoned { method, why });
        }
        self.execute(&snapshot, &again_inputs, &again, self.cx.clock.now())
            .await
    }

    /// Taints the candidates and creates the replacements of the pass's commands.
    async fn execute(
        &self,
        snapshot: &Snapshot,
        inputs: &DisruptionInputs,
        result: &PassResult,
        now: Timestamp,
    ) -> Result<Tick, DisruptionError> {
        let Some(first) = result.commands.first() else {
            return Ok(Tick::Idle);
        };
        let claims: Api<NodeClaim> = Api::all(self.cx.client.clone());
        let pools: HashMap<&str, _> = snapshot
            .node_pools
            .iter()
            .filter_map(|p| Some((p.metadata.name.as_deref()?, p)))
            .collect();
        let mut command = InFlight {
            method: first.method,
            reason: first.reason.as_str().to_string(),
            candidates: Vec::new(),
            replacements: Vec::new(),
            started: now,
        };
        // Every command of the pass (emptiness gives one per NodePool) is carried out together.
        for c in &result.commands {
            for &n in &c.candidates {
                let view = &inputs.view.nodes[n];
                if let Some(claim) = &view.node_claim {
                    command.candidates.push((claim.clone(), view.name.clone()));
                }
            }
        }
        self.tell_balanced_approved(inputs, result).await;
        for (claim, node) in &command.candidates {
            if let Some(node) = self.cx.state.nodes.get(node) {
                add_disrupted_taint(&self.cx.client, &node.to_node()).await?;
            }
            let reason = command.reason.clone();
            self.update_claim_conditions(claim, |c| with_disruption_reason(c, &reason, now))
                .await?;
        }
        // TerminateFirstDrift: where capacity is pinned (a reservation, a static pool's count), the drifted
        // node must go before its replacement can launch, so the candidates are deleted first.
        let terminate_first = self.settings.terminate_first_drift && command.method.is_drift();
        if terminate_first {
            self.tell_terminating(&command).await;
            for (claim, _) in &command.candidates {
                delete_claim(&claims, claim).await?;
            }
        }
        for c in &result.commands {
            for r in &c.replacements {
                let Some(template) = inputs.base.input.templates.get(r.template) else {
                    continue;
                };
                let pool = pools.get(template.name.as_str());
                let hash = pool.map(|p| p.hash());
                let object = node_claim_object(
                    &ClaimContext {
                        interner: &inputs.base.interner,
                        table: &inputs.base.table,
                        template,
                        nodepool_hash: hash.as_deref(),
                        nodepool_uid: pool.and_then(|p| p.metadata.uid.as_deref()),
                    },
                    r,
                );
                let created = claims.create(&PostParams::default(), &object).await?;
                self.events
                    .normal(
                        &NodeClaim::object_ref(&created, &()),
                        DISRUPTION_LAUNCHING,
                        &launching_message(&command.reason),
                    )
                    .await;
                karpenter_metrics::metrics()
                    .nodeclaims_created
                    .get_or_create(&karpenter_metrics::NodeClaimCreatedLabels {
                        reason: "disruption".into(),
                        nodepool: template.name.clone(),
                        min_values_relaxed: r.min_values_relaxed.to_string(),
                    })
                    .inc();
                command.replacements.push(created.name_any());
            }
        }
        Ok(Tick::Started(command))
    }

    /// Writes each managed NodeClaim's Drifted and Consolidatable conditions where they changed. A failed
    /// write (a conflict with the lifecycle's own status writes, most often) is retried on the next tick.
    async fn sync_conditions(&self, inputs: &DisruptionInputs) {
        let now = self.cx.clock.now();
        let now = Timestamp::from_second(now.as_second()).unwrap_or(now);
        let mut patches = Vec::new();
        for info in inputs.claims.iter().flatten() {
            let Some(claim) = self.cx.state.node_claims.get(&info.node_claim) else {
                continue;
            };
            if claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let current = claim
                .status
                .as_ref()
                .map(|s| s.conditions.as_slice())
                .unwrap_or_default();
            let Some(conditions) =
                disruption_conditions(current, info.drift.as_ref(), info.consolidatable, now)
            else {
                continue;
            };
            // The resourceVersion makes the write conditional on the conditions read, so a condition the
            // lifecycle wrote meanwhile is not overwritten.
            let patch = json!({
                "metadata": {"resourceVersion": claim.resource_version()},
                "status": {"conditions": conditions},
            });
            patches.push((info.node_claim.as_str(), Patch::Merge(patch)));
        }
        // Concurrently: on the first pass over a large cluster every NodeClaim gets its conditions, and one at a
        // time that was thousands of round trips before the pass could even start.
        let claims: Api<NodeClaim> = Api::all(self.cx.client.clone());
        let params = PatchParams::default();
        let writes: Vec<_> = patches
            .iter()
            .map(|(name, patch)| {
                let claims = &claims;
                let params = &params;
                async move { (*name, claims.patch_status(name, params, patch).await) }
            })
            .collect();
        let mut outcomes = stream::iter(writes).buffer_unordered(CONDITION_WRITE_CONCURRENCY);
        while let Some((name, outcome)) = outcomes.next().await {
            if let Err(error) = outcome {
                tracing::debug!(nodeclaim = %name, %error, "writing disruption conditions failed; retrying next tick");
            }
        }
    }

    /// `ConsolidationCandidate` on the Nodes and NodeClaims of each consolidation command drawn from a Balanced
    /// NodePool, and `ConsolidationApproved` on those Nodes and their NodePools: the score let it through.
    async fn tell_balanced_approved(&self, inputs: &DisruptionInputs, result: &PassResult) {
        for c in result.commands.iter().filter(|c| {
            matches!(
                c.method,
                Method::MultiNodeConsolidation | Method::SingleNodeConsolidation
            )
        }) {
            let balanced = |n: &usize| {
                let pool = inputs.view.nodes[*n].node_pool.as_deref();
                inputs
                    .pools
                    .iter()
                    .any(|p| Some(p.name.as_str()) == pool && p.policy == ConsolidationPolicy::Balanced)
            };
            for n in c.candidates.iter().filter(|n| balanced(n)) {
                let view = &inputs.view.nodes[*n];
                let candidate = candidate_message(c.method.as_str(), c.savings_per_hour);
                let approved = approved_message(&view.name, c.savings_per_hour);
                if let Some(node) = self.cx.state.nodes.get(&view.name) {
                    let node = node.object_ref();
                    self.events
                        .normal(&node, CONSOLIDATION_CANDIDATE, &candidate)
                        .await;
                    self.events.normal(&node, CONSOLIDATION_APPROVED, &approved).await;
                }
                if let Some(claim) = view
                    .node_claim
                    .as_deref()
                    .and_then(|c| self.cx.state.node_claims.get(c))
                {
                    let claim = NodeClaim::object_ref(&claim, &());
                    self.events
                        .normal(&claim, CONSOLIDATION_CANDIDATE, &candidate)
                        .await;
                }
                if let Some(pool) = view
                    .node_pool
                    .as_deref()
                    .and_then(|p| self.cx.state.node_pools.get(p))
                {
                    let pool = NodePool::object_ref(&pool, &());
                    self.events.normal(&pool, CONSOLIDATION_APPROVED, &approved).await;
                }
            }
        }
    }

    /// DisruptionBlocked and Unconsolidatable events on the Nodes and NodeClaims the pass left alone for a
    /// reason worth telling (see [`crate::blocked_events`]), deduplicated; Normal, as upstream's: a protection
    /// doing its job is not a fault.
    async fn report_blocked(&self, inputs: &DisruptionInputs, result: &PassResult) {
        // At most this many events per tick: on a large, steady cluster every node may be blocked, and events
        // are for people, not worth thousands of API calls a pass. Nodes not reported now are on later ticks
        // (the recorder skips the ones reported within its window).
        const MAX_EVENTS_PER_TICK: usize = 100;
        let mut published = 0;
        // A NodePool whose budgets allow nothing for a reason now is told so itself.
        for budget in result.budgets.iter().filter(|b| b.allowed == Some(0)) {
            let Some(pool) = inputs
                .pools
                .get(budget.pool)
                .and_then(|p| self.cx.state.node_pools.get(&p.name))
            else {
                continue;
            };
            let reason = budget.reason.as_str();
            self.events
                .normal_deduped(
                    &NodePool::object_ref(&pool, &()),
                    DISRUPTION_BLOCKED,
                    &node_pool_blocked_message(reason),
                    Dedupe {
                        key: Some(reason),
                        window: NODE_POOL_BLOCKED_DEDUPE,
                    },
                )
                .await;
        }
        for (n, why) in &result.blocked {
            if published >= MAX_EVENTS_PER_TICK {
                break;
            }
            let Some(reason) = event_reason(why) else { continue };
            let view = &inputs.view.nodes[*n];
            let message = match reason {
                DISRUPTION_BLOCKED => format!("Cannot disrupt: {why}"),
                CONSOLIDATION_REJECTED => format!("Consolidation rejected: {why}"),
                _ => format!("Cannot consolidate: {why}"),
            };
            if let Some(node) = self.cx.state.nodes.get(&view.name)
                && self.events.normal(&node.object_ref(), reason, &message).await
            {
                published += 1;
            }
            if let Some(claim) = view
                .node_claim
                .as_deref()
                .and_then(|c| self.cx.state.node_claims.get(c))
                && self
                    .events
                    .normal(&NodeClaim::object_ref(&claim, &()), reason, &message)
                    .await
            {
                published += 1;
            }
        }
    }

    async fn advance(&self, command: InFlight) -> Result<Tick, DisruptionError> {
        let claims: Api<NodeClaim> = Api::all(self.cx.client.clone());
        let mut missing = None;
        let mut waiting = Vec::new();
        for name in &command.replacements {
            match claims.get_opt(name).await? {
                None => missing = Some(name.clone()),
                Some(c) if !is_initialized(&c) => waiting.push(c),
                Some(_) => {}
            }
        }
        let ready = waiting.is_empty();
        let waited = self.cx.clock.now().duration_since(command.started);
        let why = match missing {
            Some(name) => Some(format!(
                "replacement NodeClaim {name} was deleted before it initialized"
            )),
            None if !ready && waited.as_secs() >= self.settings.replacement_timeout.as_secs() as i64 => {
                Some(format!(
                    "replacements were not initialized within {}s",
                    self.settings.replacement_timeout.as_secs()
                ))
            }
            None => None,
        };
        if let Some(why) = why {
            for (claim, node) in &command.candidates {
                if let Some(node) = self.cx.state.nodes.get(node) {
                    remove_disrupted_taint(&self.cx.client, &node.to_node()).await?;
                }
                self.update_claim_conditions(claim, without_disruption_reason)
                    .await?;
            }
            for name in &command.replacements {
                delete_claim(&claims, name).await?;
            }
            return Ok(Tick::RolledBack { command, why });
        }
        if !ready {
            for claim in &waiting {
                self.events
                    .normal(
                        &NodeClaim::object_ref(claim, &()),
                        DISRUPTION_WAITING_READINESS,
                        WAITING_READINESS_MESSAGE,
                    )
                    .await;
            }
            return Ok(Tick::Waiting);
        }
        // Drifted candidates deleted first (TerminateFirstDrift) were told so then.
        let terminate_first = self.settings.terminate_first_drift && command.method.is_drift();
        if !terminate_first {
            self.tell_terminating(&command).await;
        }
        for (claim, _) in &command.candidates {
            delete_claim(&claims, claim).await?;
        }
        Ok(Tick::Completed(command))
    }

    /// `DisruptionTerminating` on each candidate's Node and NodeClaim, as they are deleted.
    async fn tell_terminating(&self, command: &InFlight) {
        for (claim, node) in &command.candidates {
            if let Some(node) = self.cx.state.nodes.get(node) {
                self.events
                    .normal(
                        &node.object_ref(),
                        DISRUPTION_TERMINATING,
                        &terminating_message("Node", &command.reason),
                    )
                    .await;
            }
            if let Some(claim) = self.cx.state.node_claims.get(claim) {
                self.events
                    .normal(
                        &NodeClaim::object_ref(&claim, &()),
                        DISRUPTION_TERMINATING,
                        &terminating_message("NodeClaim", &command.reason),
                    )
                    .await;
            }
        }
    }
}

async fn delete_claim(claims: &Api<NodeClaim>, name: &str) -> Result<(), DisruptionError> {
    ignore_not_found(claims.delete(name, &DeleteParams::default()).await)?;
    Ok(())
}
