//! One disruption pass: the methods in upstream's order (emptiness, static drift, drift, multi-node
//! consolidation, single-node consolidation); the first that yields commands wins the pass. Every managed node
//! the pass does not act on is listed with the reason, so "why is this node not consolidated?" has an answer.
//! The consolidation searches stop at upstream's time limits when the caller gives a clock
//! ([`disruption_pass_within`]); single-node consolidation then carries the NodePools it did not reach to the next
//! pass ([`ConsolidationProgress`]).

use jiff::{SignedDuration, Timestamp};
use karpenter_api::nodepool::{Budget, ConsolidationPolicy, DisruptionReason};

use crate::{
    clock::Clock,
    snapshot::{ClaimInfo, DisruptionInputs},
};

use super::{
    budgets::{allowed_disruptions, is_active},
    candidates::{MethodClass, blocked_reason, is_empty},
    consolidation::SimulationOutcome,
    consolidation::{
        ConsolidationCandidate, ConsolidationSettings, Deadline, Decision, MULTI_NODE_TIMEOUT,
        SINGLE_NODE_TIMEOUT, SingleNodeOutcome, multi_node_within, single_node_within,
    },
    drift::DriftReason,
    resimulate::{SchedulerResimulator, simulate_removal},
};
use crate::scheduling::NewNodeClaim;

/// The method that produced a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Method {
    Emptiness,
    StaticDrift,
    Drift,
    MultiNodeConsolidation,
    SingleNodeConsolidation,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Emptiness => "emptiness",
            Self::StaticDrift => "static-drift",
            Self::Drift => "drift",
            Self::MultiNodeConsolidation => "multi-node-consolidation",
            Self::SingleNodeConsolidation => "single-node-consolidation",
        }
    }

    /// Drift, of a dynamic node or of a static NodePool's: the methods `TerminateFirstDrift` applies to.
    pub fn is_drift(self) -> bool {
        matches!(self, Self::Drift | Self::StaticDrift)
    }

    /// Consolidation, multi-node or single-node.
    pub fn is_consolidation(self) -> bool {
        matches!(self, Self::MultiNodeConsolidation | Self::SingleNodeConsolidation)
    }

    /// The disruption reason the method acts for (upstream's `reason` metric label, lower-cased there).
    pub fn reason(self) -> DisruptionReason {
        match self {
            Self::Emptiness => DisruptionReason::Empty,
            Self::StaticDrift | Self::Drift => DisruptionReason::Drifted,
            Self::MultiNodeConsolidation | Self::SingleNodeConsolidation => DisruptionReason::Underutilized,
        }
    }

    /// Upstream's `consolidation_type` metric label: `multi`, `single`, or empty for the other methods.
    pub fn consolidation_type(self) -> &'static str {
        match self {
            Self::MultiNodeConsolidation => "multi",
            Self::SingleNodeConsolidation => "single",
            _ => "",
        }
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which consolidation search: upstream's `consolidation_type` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsolidationType {
    Multi,
    Single,
}

impl ConsolidationType {
    /// `multi` or `single`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Multi => "multi",
            Self::Single => "single",
        }
    }
}

/// How long the consolidation searches may run, measured on `clock`.
#[derive(Clone, Copy)]
pub struct SearchLimits<'a> {
    pub clock: &'a dyn Clock,
    pub multi_node: SignedDuration,
    pub single_node: SignedDuration,
}

impl<'a> SearchLimits<'a> {
    /// Upstream's limits: one minute for multi-node, three for single-node consolidation.
    pub fn upstream(clock: &'a dyn Clock) -> Self {
        Self {
            clock,
            multi_node: MULTI_NODE_TIMEOUT,
            single_node: SINGLE_NODE_TIMEOUT,
        }
    }
}

/// What one pass leaves the next: the NodePools single-node consolidation did not reach before its time ran out
/// (by name), whose candidates lead the next search (upstream's `PreviouslyUnseenNodePools`). Cleared when a
/// search tries every candidate without finding a command; kept as it is when a command is found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsolidationProgress {
    pub unseen_node_pools: Vec<String>,
}

/// One method the pass ran and how long it took (upstream's decision-evaluation histogram). Methods after the
/// one whose command ended the pass did not run and have no entry.
#[derive(Debug, Clone)]
pub struct MethodEvaluation {
    pub method: Method,
    pub duration: std::time::Duration,
}

/// What the pass would carry out.
#[derive(Debug, Clone)]
pub struct DisruptionCommand {
    pub method: Method,
    pub reason: DisruptionReason,
    pub decision: Decision,
    /// Cluster-view node indices.
    pub candidates: Vec<usize>,
    pub replacements: Vec<NewNodeClaim>,
    pub savings_per_hour: f64,
}

/// How many nodes of a NodePool may still be disrupted for a reason, before the pass's commands; `None` when no
/// budget limits that reason now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetEntry {
    pub pool: usize,
    pub reason: DisruptionReason,
    pub allowed: Option<usize>,
}

/// The disruption conditions the pass computed for a managed NodeClaim.
#[derive(Debug, Clone)]
pub struct ClaimConditions {
    pub node: usize,
    pub drifted: Option<DriftReason>,
    pub consolidatable: bool,
}

/// A NodeClaim past its `expireAfter`: expiration deletes it whatever the budgets say (it is forceful), and
/// draining then honours PDBs and do-not-disrupt until the NodeClaim's terminationGracePeriod, if any, ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expiration {
    /// Cluster-view node index.
    pub node: usize,
    pub expired_at: Timestamp,
    /// Pods that block eviction will hold the drain (until a terminationGracePeriod ends, when there is one).
    pub drain_blocked_by: Option<String>,
}

/// Everything a pass decided.
#[derive(Debug, Clone, Default)]
pub struct PassResult {
    pub commands: Vec<DisruptionCommand>,
    /// Expired NodeClaims, deleted beside the commands (upstream's expiration controller, not budgeted).
    pub expirations: Vec<Expiration>,
    /// Managed nodes the pass left alone, with why (cluster-view node index, reason).
    pub blocked: Vec<(usize, String)>,
    pub node_claims: Vec<ClaimConditions>,
    pub budgets: Vec<BudgetEntry>,
    pub errors: Vec<String>,
    /// Re-simulations consolidation ran (multi-node prefixes and single-node candidates together).
    pub candidates_evaluated: usize,
    /// The methods that ran, in order.
    pub evaluations: Vec<MethodEvaluation>,
    /// Nodes the methods that ran could disrupt for each reason, before budgets (upstream's eligible-nodes gauge).
    pub eligible: Vec<(DisruptionReason, usize)>,
    /// The consolidation searches that stopped at their time limit (upstream's consolidation-timeouts counter).
    pub consolidation_timeouts: Vec<ConsolidationType>,
}

impl PassResult {
    /// Records a method's run: its time, and its eligible nodes added to its reason's count.
    fn evaluated(&mut self, method: Method, started: std::time::Instant, eligible: usize) {
        self.evaluations.push(MethodEvaluation {
            method,
            duration: started.elapsed(),
        });
        match self.eligible.iter_mut().find(|(r, _)| *r == method.reason()) {
            Some((_, n)) => *n += eligible,
            None => self.eligible.push((method.reason(), eligible)),
        }
    }
}

/// The pass's settings.
#[derive(Debug, Clone)]
pub struct PassSettings {
    pub now: Timestamp,
    /// The SpotToSpotConsolidation feature gate.
    pub spot_to_spot: bool,
}

const REASONS: [DisruptionReason; 3] = [
    DisruptionReason::Empty,
    DisruptionReason::Drifted,
    DisruptionReason::Underutilized,
];

/// Whether some budget limits `reason` now (the default budget limits every reason).
fn budget_applies(budgets: Option<&[Budget]>, reason: DisruptionReason, now: Timestamp) -> bool {
    match budgets {
        None => true,
        Some(list) => list.iter().any(|b| {
            b.reasons.as_ref().is_none_or(|rs| rs.contains(&reason)) && is_active(b, now).unwrap_or(true)
        }),
    }
}

/// Runs one pass at `settings.now`, its consolidation searches without a time limit (what `karpenter disrupt`
/// runs: its answer does not depend on how fast the machine is).
pub fn disruption_pass(inputs: &mut DisruptionInputs, settings: &PassSettings) -> PassResult {
    disruption_pass_within(inputs, settings, None, &mut ConsolidationProgress::default())
}

/// Runs one pass at `settings.now`, its consolidation searches stopping at `limits` when given: multi-node
/// consolidation then takes the best command found so far, single-node consolidation none, and `progress` records
/// the NodePools it did not reach for the next pass. Each search that stops is listed in
/// [`PassResult::consolidation_timeouts`].
pub fn disruption_pass_within(
    inputs: &mut DisruptionInputs,
    settings: &PassSettings,
    limits: Option<&SearchLimits<'_>>,
    progress: &mut ConsolidationProgress,
) -> PassResult {
    let now = settings.now;
    let mut result = PassResult::default();
    let allowed = pool_budgets(inputs, now, &mut result);
    record_claim_conditions(inputs, &mut result);

    let mut acted = vec![false; inputs.view.nodes.len()];
    let mut explained = vec![false; inputs.view.nodes.len()];
    block_invalid_pools(inputs, &mut result, &mut explained);
    expire(inputs, now, &mut result, &mut acted);
    let graceful_blocked = graceful_blocked_reasons(inputs, &acted, now);

    let mut pass = MethodPass {
        allowed: &allowed,
        graceful_blocked: &graceful_blocked,
        result: &mut result,
        explained: &mut explained,
    };
    let commands = pass.run(inputs, settings, limits, progress);
    for c in &commands {
        for &n in &c.candidates {
            acted[n] = true;
        }
    }
    result.commands = commands;
    explain_the_rest(inputs, &graceful_blocked, &acted, &mut explained, &mut result);
    result
}

/// How many nodes each NodePool may still lose per reason ([`REASONS`] order), before any command; every
/// budget's entry and error is recorded in `result`.
fn pool_budgets(inputs: &DisruptionInputs, now: Timestamp, result: &mut PassResult) -> Vec<[usize; 3]> {
    let mut allowed: Vec<[usize; 3]> = Vec::with_capacity(inputs.pools.len());
    for (p, pool) in inputs.pools.iter().enumerate() {
        let mut per_reason = [0usize; 3];
        for (r, reason) in REASONS.iter().enumerate() {
            let (n, errors) =
                allowed_disruptions(pool.budgets.as_deref(), *reason, pool.nodes, pool.disrupting, now);
            for e in errors {
                result
                    .errors
                    .push(format!("NodePool {}: spec.disruption.{e}", pool.name));
            }
            let applies = budget_applies(pool.budgets.as_deref(), *reason, now);
            // No budget limiting the reason leaves it unlimited, whatever is already disrupting (as upstream).
            per_reason[r] = if applies { n } else { usize::MAX };
            result.budgets.push(BudgetEntry {
                pool: p,
                reason: *reason,
                allowed: applies.then_some(n),
            });
        }
        allowed.push(per_reason);
    }
    allowed
}

/// The disruption conditions of every managed NodeClaim, as the pass found them.
fn record_claim_conditions(inputs: &DisruptionInputs, result: &mut PassResult) {
    for (node, info) in inputs.claims.iter().enumerate() {
        if let Some(info) = info {
            result.node_claims.push(ClaimConditions {
                node,
                drifted: info.drift.clone(),
                consolidatable: info.consolidatable,
            });
        }
    }
}

/// A NodePool that fails validation is reported and its nodes left alone.
fn block_invalid_pools(inputs: &DisruptionInputs, result: &mut PassResult, explained: &mut [bool]) {
    for pool in &inputs.pools {
        if let Some(why) = &pool.invalid {
            result.errors.push(format!("NodePool {}: {why}", pool.name));
        }
    }
    for (n, info) in inputs.claims.iter().enumerate() {
        let Some(info) = info else { continue };
        let pool = &inputs.pools[info.pool];
        if pool.invalid.is_some() {
            block(
                result,
                explained,
                n,
                format!(
                    "NodePool {} is invalid (see errors); its nodes are left alone",
                    pool.name
                ),
            );
        }
    }
}

/// Expiration is forceful: an expired NodeClaim goes whatever its pods, budgets or do-not-disrupt say (an
/// invalid NodePool's too, as upstream's expiration controller does not read the NodePool), so it takes no part
/// in the methods: it is marked `acted`, and its node takes no pods in their simulations.
fn expire(inputs: &mut DisruptionInputs, now: Timestamp, result: &mut PassResult, acted: &mut [bool]) {
    for expiration in expired_claims(inputs, now) {
        let n = expiration.node;
        acted[n] = true;
        // Nothing the methods simulate may move pods onto a node that is going anyway.
        if let Some(e) = inputs.existing_of.get(n).copied().flatten()
            && let Some(node) = inputs.base.input.existing.get_mut(e)
        {
            node.schedulable = false;
        }
        result.expirations.push(expiration);
    }
}

/// The NodeClaims past their `expireAfter` and not yet deleted: what expiration deletes now, a node a disruption
/// command has tainted included. The controller also asks this while a command waits on its replacements, so
/// expiration never waits on a command (upstream's expiration is a controller of its own).
pub fn expired_claims(inputs: &DisruptionInputs, now: Timestamp) -> Vec<Expiration> {
    inputs
        .claims
        .iter()
        .enumerate()
        .filter_map(|(n, info)| {
            let info = info.as_ref().filter(|i| i.expired)?;
            (!inputs.view.nodes[n].deleted).then(|| Expiration {
                node: n,
                expired_at: info.expires_at.unwrap_or(now),
                drain_blocked_by: blocked_reason(&inputs.view, n, MethodClass::Graceful, now),
            })
        })
        .collect()
}

/// Per view node: why a graceful method may not touch it, if it may not (expired, its NodePool invalid, or
/// protected).
fn graceful_blocked_reasons(
    inputs: &DisruptionInputs,
    acted: &[bool],
    now: Timestamp,
) -> Vec<Option<String>> {
    (0..inputs.view.nodes.len())
        .map(|n| {
            if acted[n] {
                return Some("expired".to_string());
            }
            if inputs.claims[n]
                .as_ref()
                .is_some_and(|i| inputs.pools[i.pool].invalid.is_some())
            {
                return Some("its NodePool is invalid".to_string());
            }
            blocked_reason(&inputs.view, n, MethodClass::Graceful, now)
        })
        .collect()
}

/// Gives every managed node the pass neither acted on nor explained its reason, and drops the reasons of
/// nodes a command acts on.
fn explain_the_rest(
    inputs: &DisruptionInputs,
    graceful_blocked: &[Option<String>],
    acted: &[bool],
    explained: &mut [bool],
    result: &mut PassResult,
) {
    for n in 0..inputs.view.nodes.len() {
        if acted[n] || explained[n] || inputs.view.nodes[n].node_claim.is_none() {
            continue;
        }
        let why = match (&graceful_blocked[n], &inputs.claims[n]) {
            (Some(why), _) => why.clone(),
            (None, None) => "node's NodePool was not found".to_string(),
            (None, Some(info)) => idle_reason(inputs, info, result.commands.first().map(|c| c.method)),
        };
        block(result, explained, n, why);
    }
    result.blocked.retain(|(n, _)| !acted[*n]);
}

/// The methods of one pass, in upstream's order, with what they share: the budgets, the nodes graceful methods
/// may not touch, and the result and explanations they add to.
struct MethodPass<'a> {
    allowed: &'a [[usize; 3]],
    graceful_blocked: &'a [Option<String>],
    result: &'a mut PassResult,
    explained: &'a mut [bool],
}

impl MethodPass<'_> {
    /// Runs the methods until one yields commands (those commands), or all have run (none).
    fn run(
        &mut self,
        inputs: &mut DisruptionInputs,
        settings: &PassSettings,
        limits: Option<&SearchLimits<'_>>,
        progress: &mut ConsolidationProgress,
    ) -> Vec<DisruptionCommand> {
        let now = settings.now;
        let started = std::time::Instant::now();
        let (cmd, eligible) = emptiness(
            inputs,
            self.allowed,
            self.graceful_blocked,
            self.result,
            self.explained,
        );
        self.result.evaluated(Method::Emptiness, started, eligible);
        if let Some(cmd) = cmd {
            return vec![cmd];
        }
        if let Some(cmd) = self.static_drift(inputs, now) {
            return vec![cmd];
        }
        let started = std::time::Instant::now();
        let (cmd, eligible) = drift(inputs, self.allowed, now, self.result, self.explained);
        self.result.evaluated(Method::Drift, started, eligible);
        if let Some(cmd) = cmd {
            return vec![cmd];
        }
        self.consolidation(inputs, settings, limits, progress)
            .into_iter()
            .collect()
    }

    /// Static drift: static NodePools keep their replica count themselves, so a drifted node is deleted and the
    /// static provisioner launches its replacement.
    fn static_drift(&mut self, inputs: &DisruptionInputs, now: Timestamp) -> Option<DisruptionCommand> {
        let started = std::time::Instant::now();
        let static_drifted: Vec<(usize, Vec<usize>)> = (0..inputs.pools.len())
            .filter(|&p| inputs.pools[p].is_static)
            .map(|p| (p, drifted_candidates(inputs, p, now)))
            .collect();
        let eligible = static_drifted.iter().map(|(_, d)| d.len()).sum();
        self.result.evaluated(Method::StaticDrift, started, eligible);
        let (_, drifted) = static_drifted
            .into_iter()
            .find(|(p, drifted)| self.allowed[*p][1] > 0 && !drifted.is_empty())?;
        Some(DisruptionCommand {
            method: Method::StaticDrift,
            reason: DisruptionReason::Drifted,
            decision: Decision::Delete,
            candidates: vec![drifted[0]],
            replacements: Vec::new(),
            savings_per_hour: 0.0,
        })
    }

    /// Multi-node, then single-node consolidation over the same candidates and Underutilized budgets.
    fn consolidation(
        &mut self,
        inputs: &mut DisruptionInputs,
        settings: &PassSettings,
        limits: Option<&SearchLimits<'_>>,
        progress: &mut ConsolidationProgress,
    ) -> Option<DisruptionCommand> {
        let started = std::time::Instant::now();
        let candidates = consolidation_candidates(inputs, self.graceful_blocked, self.result, self.explained);
        let mut settings_c = ConsolidationSettings::new(&mut inputs.base.interner, settings.spot_to_spot);
        settings_c.pool_totals = pool_totals(inputs);
        let budgets_left: Vec<usize> = self.allowed.iter().map(|a| a[2]).collect();
        self.block_spent_budgets(inputs, &candidates, &budgets_left);
        let mut sim = SchedulerResimulator::new(inputs);
        let deadline = limits.map(|l| Deadline::after(l.clock, l.multi_node));
        let multi = multi_node_within(
            &candidates,
            &mut budgets_left.clone(),
            &mut sim,
            &settings_c,
            deadline.as_ref(),
        );
        self.result
            .evaluated(Method::MultiNodeConsolidation, started, candidates.len());
        if multi.timed_out {
            self.result.consolidation_timeouts.push(ConsolidationType::Multi);
        }
        if let Some(cmd) = multi.command {
            self.result.candidates_evaluated = sim.simulations();
            return Some(consolidation_command(Method::MultiNodeConsolidation, cmd));
        }

        let started = std::time::Instant::now();
        let first_pools: Vec<usize> = progress
            .unseen_node_pools
            .iter()
            .filter_map(|name| sim.inputs().pools.iter().position(|p| p.name == *name))
            .collect();
        let deadline = limits.map(|l| Deadline::after(l.clock, l.single_node));
        let single = single_node_within(
            &candidates,
            &budgets_left,
            &mut sim,
            &settings_c,
            &first_pools,
            deadline.as_ref(),
        );
        // The same candidates multi-node consolidation counted: not counted twice.
        self.result.evaluated(Method::SingleNodeConsolidation, started, 0);
        self.result.candidates_evaluated = sim.simulations();
        self.record_single_node(inputs, limits, progress, &single);
        let SingleNodeOutcome {
            command, rejected, ..
        } = single;
        for (n, why) in rejected {
            block(self.result, self.explained, n, why);
        }
        command.map(|cmd| consolidation_command(Method::SingleNodeConsolidation, cmd))
    }

    /// Candidates of a NodePool whose Underutilized budget is spent are explained as such.
    fn block_spent_budgets(
        &mut self,
        inputs: &DisruptionInputs,
        candidates: &[ConsolidationCandidate],
        budgets_left: &[usize],
    ) {
        for (p, pool) in inputs.pools.iter().enumerate() {
            if budgets_left[p] != 0 {
                continue;
            }
            for c in candidates.iter().filter(|c| c.node_pool == p) {
                block(
                    self.result,
                    self.explained,
                    c.index,
                    format!(
                        "NodePool {} allows no more disruptions for Underutilized now (budget)",
                        pool.name
                    ),
                );
            }
        }
    }

    /// What single-node consolidation's end means for the next pass: after a timeout, the NodePools it did not
    /// reach lead the next search and the candidates it did not reach are explained; after a search that tried
    /// everything and found nothing, no NodePool leads.
    fn record_single_node(
        &mut self,
        inputs: &DisruptionInputs,
        limits: Option<&SearchLimits<'_>>,
        progress: &mut ConsolidationProgress,
        single: &SingleNodeOutcome,
    ) {
        if single.timed_out {
            self.result.consolidation_timeouts.push(ConsolidationType::Single);
            progress.unseen_node_pools = single
                .unseen_node_pools
                .iter()
                .map(|&p| inputs.pools[p].name.clone())
                .collect();
            let limit = limits.map_or(SINGLE_NODE_TIMEOUT, |l| l.single_node);
            for &n in &single.unreached {
                let why = format!(
                    "not evaluated this pass: single-node consolidation reached its time limit ({limit:#}) first"
                );
                block(self.result, self.explained, n, why);
            }
        } else if single.command.is_none() {
            progress.unseen_node_pools.clear();
        }
    }
}

/// Records why a node is left alone, once: the first reason found is the one reported.
fn block(result: &mut PassResult, explained: &mut [bool], node: usize, why: String) {
    if !explained[node] {
        explained[node] = true;
        result.blocked.push((node, why));
    }
}

/// Why a healthy, unprotected node was left alone when no method chose it. `winner` is the method whose
/// commands ended the pass, if any: later methods did not run.
fn idle_reason(inputs: &DisruptionInputs, info: &ClaimInfo, winner: Option<Method>) -> String {
    let pool = &inputs.pools[info.pool];
    if pool.is_static {
        return format!("NodePool {} is static: only drift replaces its nodes", pool.name);
    }
    if pool.consolidate_after_never {
        return format!("NodePool {} has consolidateAfter: Never", pool.name);
    }
    if !info.consolidatable {
        return "consolidateAfter has not elapsed since the last pod event".to_string();
    }
    if pool.policy == ConsolidationPolicy::WhenEmpty && info.reschedulable_pods > 0 {
        return format!("NodePool {} consolidates only empty nodes (WhenEmpty)", pool.name);
    }
    match winner {
        Some(m) if m != Method::SingleNodeConsolidation => {
            format!(
                "not considered this pass: {} produced the pass's commands first",
                m.as_str()
            )
        }
        _ => "no cheaper placement of its pods was found".to_string(),
    }
}

/// Emptiness: every consolidatable, empty node of a dynamic NodePool within its NodePool's Empty budget, the
/// cheapest to disrupt first, in one command across NodePools (as upstream's emptiness method).
fn emptiness(
    inputs: &DisruptionInputs,
    allowed: &[[usize; 3]],
    graceful_blocked: &[Option<String>],
    result: &mut PassResult,
    explained: &mut [bool],
) -> (Option<DisruptionCommand>, usize) {
    let mut empty: Vec<&ClaimInfo> = inputs
        .claims
        .iter()
        .flatten()
        .filter(|i| {
            !inputs.pools[i.pool].is_static
                && graceful_blocked[i.node].is_none()
                && i.consolidatable
                && is_empty(&inputs.view, i.node)
        })
        .collect();
    empty.sort_by(|a, b| {
        a.disruption_cost
            .total_cmp(&b.disruption_cost)
            .then_with(|| a.node.cmp(&b.node))
    });
    let eligible = empty.len();
    let mut left: Vec<usize> = allowed.iter().map(|a| a[0]).collect();
    let mut chosen = Vec::new();
    for info in empty {
        if left[info.pool] == 0 {
            let why = format!(
                "empty, but NodePool {} allows no more disruptions for Empty now (budget)",
                inputs.pools[info.pool].name
            );
            block(result, explained, info.node, why);
            continue;
        }
        left[info.pool] -= 1;
        chosen.push(info);
    }
    let command = (!chosen.is_empty()).then(|| DisruptionCommand {
        method: Method::Emptiness,
        reason: DisruptionReason::Empty,
        decision: Decision::Delete,
        candidates: chosen.iter().map(|i| i.node).collect(),
        replacements: Vec::new(),
        savings_per_hour: chosen.iter().map(|i| i.price).sum(),
    });
    (command, eligible)
}

/// Drift: one drifted node per command, within each NodePool's Drifted budget, in [`drift_order`]; a node whose
/// pods cannot all be placed is passed over for the next.
fn drift(
    inputs: &mut DisruptionInputs,
    allowed: &[[usize; 3]],
    now: Timestamp,
    result: &mut PassResult,
    explained: &mut [bool],
) -> (Option<DisruptionCommand>, usize) {
    let mut drifted: Vec<usize> = Vec::new();
    let mut eligible = 0;
    for (p, pool) in inputs.pools.iter().enumerate() {
        if pool.is_static {
            continue;
        }
        let nodes = drifted_candidates(inputs, p, now);
        eligible += nodes.len();
        if allowed[p][1] > 0 {
            drifted.extend(nodes);
            continue;
        }
        for n in nodes {
            let why = format!(
                "drifted, but NodePool {} allows no more disruptions for Drifted now (budget)",
                pool.name
            );
            block(result, explained, n, why);
        }
    }
    drifted.sort_by_key(|&n| drift_order(inputs, n, now));
    for n in drifted {
        match simulate_removal(inputs, &[n]) {
            SimulationOutcome::Delete => {
                return (
                    Some(drift_command(inputs, n, Decision::Delete, Vec::new())),
                    eligible,
                );
            }
            SimulationOutcome::Replace(claims) => {
                return (
                    Some(drift_command(inputs, n, Decision::Replace, claims)),
                    eligible,
                );
            }
            SimulationOutcome::Unschedulable(why) => {
                block(result, explained, n, format!("drifted, but {why}"))
            }
        }
    }
    (None, eligible)
}

/// The order drift takes nodes in, as upstream: empty ones first, then the longest drifted (the Drifted
/// condition's lastTransitionTime; a drift first found this pass counts from `now`); the oldest NodeClaim, then
/// the node's position, break ties.
fn drift_order(
    inputs: &DisruptionInputs,
    n: usize,
    now: Timestamp,
) -> (bool, Timestamp, Option<Timestamp>, usize) {
    let info = inputs.claims[n].as_ref();
    (
        !is_empty(&inputs.view, n),
        info.and_then(|i| i.drifted_since).unwrap_or(now),
        info.and_then(|i| i.created),
        n,
    )
}

/// Drifted NodeClaims of a pool the eventual methods may take, empty ones first.
fn drifted_candidates(inputs: &DisruptionInputs, pool: usize, now: Timestamp) -> Vec<usize> {
    inputs
        .claims
        .iter()
        .enumerate()
        .filter_map(|(n, info)| {
            let info = info.as_ref()?;
            (info.pool == pool
                && inputs.pools[pool].invalid.is_none()
                && !info.expired
                && info.drift.is_some()
                && blocked_reason(&inputs.view, n, MethodClass::Eventual, now).is_none())
            .then_some(n)
        })
        .collect()
}

fn drift_command(
    inputs: &DisruptionInputs,
    n: usize,
    decision: Decision,
    replacements: Vec<NewNodeClaim>,
) -> DisruptionCommand {
    let price = inputs.claims[n].as_ref().map_or(0.0, |i| i.price);
    let zone_key = inputs.base.interner.lookup_key(karpenter_api::labels::ZONE_LABEL);
    let ct_key = inputs
        .base
        .interner
        .lookup_key(karpenter_api::labels::CAPACITY_TYPE_LABEL);
    let replacement_price: f64 = match (zone_key, ct_key) {
        (Some(z), Some(c)) => replacements.iter().map(|r| r.worst_price(z, c)).sum(),
        _ => 0.0,
    };
    DisruptionCommand {
        method: Method::Drift,
        reason: DisruptionReason::Drifted,
        decision,
        candidates: vec![n],
        replacements,
        savings_per_hour: price - replacement_price,
    }
}

fn consolidation_command(
    method: Method,
    cmd: super::consolidation::ConsolidationCommand,
) -> DisruptionCommand {
    DisruptionCommand {
        method,
        reason: DisruptionReason::Underutilized,
        decision: cmd.decision,
        candidates: cmd.candidates,
        replacements: cmd.replacements,
        savings_per_hour: cmd.savings_per_hour,
    }
}

/// Per NodePool: total price and disruption cost of its managed nodes (for the Balanced score).
fn pool_totals(inputs: &DisruptionInputs) -> Vec<(f64, f64)> {
    let mut totals = vec![(0.0, 0.0); inputs.pools.len()];
    for info in inputs.claims.iter().flatten() {
        totals[info.pool].0 += info.price;
        totals[info.pool].1 += info.disruption_cost;
    }
    totals
}

/// Consolidatable, unprotected nodes of dynamic NodePools, in disruption-cost order.
fn consolidation_candidates(
    inputs: &DisruptionInputs,
    graceful_blocked: &[Option<String>],
    result: &mut PassResult,
    explained: &mut [bool],
) -> Vec<ConsolidationCandidate> {
    let mut out = Vec::new();
    for (n, info) in inputs.claims.iter().enumerate() {
        let Some(info) = info else { continue };
        let pool = &inputs.pools[info.pool];
        if pool.is_static
            || pool.consolidate_after_never
            || !info.consolidatable
            || graceful_blocked[n].is_some()
        {
            continue;
        }
        if inputs.view.nodes[n].holds_capacity_buffer {
            if !explained[n] {
                explained[n] = true;
                result
                    .blocked
                    .push((n, "node holds CapacityBuffer headroom".to_string()));
            }
            continue;
        }
        out.push(ConsolidationCandidate {
            index: n,
            node_pool: info.pool,
            node_pool_name: pool.name.clone(),
            policy: pool.policy,
            instance_type: info.instance_type.clone(),
            capacity_type: info.capacity_type,
            zone: info.zone,
            price: info.price,
            disruption_cost: info.disruption_cost,
            pod_count: info.reschedulable_pods,
            reserved: info.reserved,
        });
    }
    out.sort_by(|a, b| {
        a.disruption_cost
            .total_cmp(&b.disruption_cost)
            .then_with(|| a.index.cmp(&b.index))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        disruption::drift::NoProviderDrift,
        snapshot::{BuildOptions, build_disruption_inputs, test_support::*},
    };

    const NOW: &str = "2026-12-02T10:00:00Z";

    fn pool(disruption: &str) -> String {
        format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: default}}\nspec:\n  template:\n    spec:\n      requirements: []\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n  disruption: {disruption}\n"
        )
    }

    /// A managed, initialized `large` node (8 cpu in the catalog; the Node offers 4) with its NodeClaim.
    fn managed(name: &str) -> [String; 2] {
        let labels = ", karpenter.sh/nodepool: default, karpenter.sh/initialized: \"true\", node.kubernetes.io/instance-type: large, karpenter.sh/capacity-type: on-demand, kubernetes.io/arch: amd64, size: large";
        let claim = format!(
            "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata:\n  name: default-{name}\n  creationTimestamp: \"2026-12-01T00:00:00Z\"\n  labels: {{karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: large, karpenter.sh/capacity-type: on-demand, topology.kubernetes.io/zone: test-zone-1, kubernetes.io/arch: amd64, size: large}}\nspec:\n  requirements: []\n  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\nstatus:\n  nodeName: {name}\n  conditions:\n  - {{type: Launched, status: \"True\", lastTransitionTime: \"2026-12-01T00:00:00Z\"}}\n  - {{type: Initialized, status: \"True\", lastTransitionTime: \"2026-12-01T00:01:00Z\"}}\n"
        );
        // Ready: a NotReady node would use up the budget.
        let node = node(name, labels, "") + "  conditions: [{type: Ready, status: \"True\"}]\n";
        [node, claim]
    }

    fn names(inputs: &crate::snapshot::DisruptionInputs, nodes: &[usize]) -> Vec<String> {
        let mut v: Vec<String> = nodes.iter().map(|&n| inputs.view.nodes[n].name.clone()).collect();
        v.sort();
        v
    }

    fn blocked<'a>(
        inputs: &'a crate::snapshot::DisruptionInputs,
        r: &'a PassResult,
        node: &str,
    ) -> Option<&'a str> {
        r.blocked
            .iter()
            .find(|(n, _)| inputs.view.nodes[*n].name == node)
            .map(|(_, why)| why.as_str())
    }

    #[test]
    fn emptiness_deletes_empty_nodes_within_the_budget_first() {
        let [n1, c1] = managed("n1");
        let [n2, c2] = managed("n2");
        let [n3, c3] = managed("n3");
        let p = pool("{consolidateAfter: 0s, budgets: [{nodes: \"2\"}]}");
        let (inputs, r) = run(&[&p, &n1, &c1, &n2, &c2, &n3, &c3]);
        assert_eq!(r.commands.len(), 1);
        assert_eq!(r.commands[0].method, Method::Emptiness);
        assert_eq!(r.commands[0].candidates.len(), 2, "the budget allows two");
        let left = ["n1", "n2", "n3"]
            .into_iter()
            .find(|n| !names(&inputs, &r.commands[0].candidates).contains(&n.to_string()))
            .unwrap();
        assert!(
            blocked(&inputs, &r, left)
                .unwrap()
                .contains("allows no more disruptions for Empty")
        );
    }

    #[test]
    fn methods_say_what_they_are() {
        let all = [
            Method::Emptiness,
            Method::StaticDrift,
            Method::Drift,
            Method::MultiNodeConsolidation,
            Method::SingleNodeConsolidation,
        ];
        let drift: Vec<_> = all.iter().filter(|m| m.is_drift()).map(|m| m.as_str()).collect();
        assert_eq!(drift, ["static-drift", "drift"]);
        let consolidation: Vec<_> = all
            .iter()
            .filter(|m| m.is_consolidation())
            .map(|m| m.as_str())
            .collect();
        assert_eq!(
            consolidation,
            ["multi-node-consolidation", "single-node-consolidation"]
        );
        for m in all {
            assert_eq!(m.to_string(), m.as_str());
            // The string hand-off this replaced: drift was any method whose name contains "drift".
            assert_eq!(m.is_drift(), m.as_str().contains("drift"));
        }
    }

    #[test]
    fn eligible_nodes_and_evaluated_methods_are_reported_up_to_the_method_that_acted() {
        // Two empty nodes and a budget of one: both are eligible for Empty, emptiness acts, nothing after it runs.
        let [n1, c1] = managed("n1");
        let [n2, c2] = managed("n2");
        let p = pool("{consolidateAfter: 0s, budgets: [{nodes: \"1\"}]}");
        let (_, r) = run(&[&p, &n1, &c1, &n2, &c2]);
        assert_eq!(r.eligible, [(DisruptionReason::Empty, 2)]);
        let ran: Vec<Method> = r.evaluations.iter().map(|e| e.method).collect();
        assert_eq!(ran, [Method::Emptiness]);

        // One drifted node holding a pod, one busy node: nothing empty; drift finds one and acts.
        let [n1, c1] = drifted("n1", "2026-12-01T00:00:00Z", None);
        let [n2, c2] = managed("n2");
        let p = pool("{consolidateAfter: Never}");
        let a = bound_pod("default", "a", "n1", "1", "");
        let b = bound_pod("default", "b", "n2", "1", "");
        let (_, r) = run(&[&p, &n1, &c1, &n2, &c2, &a, &b]);
        assert_eq!(r.commands[0].method, Method::Drift);
        assert_eq!(
            r.eligible,
            [(DisruptionReason::Empty, 0), (DisruptionReason::Drifted, 1)]
        );
        let ran: Vec<Method> = r.evaluations.iter().map(|e| e.method).collect();
        assert_eq!(ran, [Method::Emptiness, Method::StaticDrift, Method::Drift]);

        // Nothing drifted or empty: every method runs and consolidation's candidates count once.
        let [n1, c1] = managed("n1");
        let [n2, c2] = managed("n2");
        let p = pool("{consolidateAfter: 0s}");
        let a = bound_pod("default", "a", "n1", "3", "");
        let b = bound_pod("default", "b", "n2", "3", "");
        let (_, r) = run(&[&p, &n1, &c1, &n2, &c2, &a, &b]);
        assert!(r.commands.is_empty(), "{:?}", r.blocked);
        assert_eq!(
            r.eligible,
            [
                (DisruptionReason::Empty, 0),
                (DisruptionReason::Drifted, 0),
                (DisruptionReason::Underutilized, 2)
            ]
        );
        let ran: Vec<&str> = r.evaluations.iter().map(|e| e.method.as_str()).collect();
        assert_eq!(
            ran,
            [
                "emptiness",
                "static-drift",
                "drift",
                "multi-node-consolidation",
                "single-node-consolidation"
            ]
        );
    }

    #[test]
    fn emptiness_deletes_the_empty_nodes_of_every_nodepool_in_one_command() {
        let [n1, c1] = managed("n1");
        let [n2, c2] = managed("n2");
        let to_other = |s: &str| s.replace("karpenter.sh/nodepool: default", "karpenter.sh/nodepool: other");
        let (n2, c2) = (to_other(&n2), to_other(&c2));
        let p = pool("{consolidateAfter: 0s}");
        let other = p.replace("name: default", "name: other");
        let (inputs, r) = run(&[&p, &other, &n1, &c1, &n2, &c2]);
        assert_eq!(r.commands.len(), 1, "one emptiness command across NodePools");
        assert_eq!(names(&inputs, &r.commands[0].candidates), ["n1", "n2"]);
        assert!((r.commands[0].savings_per_hour - 0.8).abs() < 1e-9);
    }

    #[test]
    fn an_empty_node_waits_for_consolidate_after() {
        let [n1, c1] = managed("n1");
        // The node was initialized a minute before NOW; consolidateAfter is an hour.
        let c1 = c1.replace(
            "{type: Initialized, status: \"True\", lastTransitionTime: \"2026-12-01T00:01:00Z\"}",
            "{type: Initialized, status: \"True\", lastTransitionTime: \"2026-12-02T09:59:00Z\"}",
        );
        let p = pool("{consolidateAfter: 1h}");
        let (inputs, r) = run(&[&p, &n1, &c1]);
        assert!(r.commands.is_empty(), "not Consolidatable yet");
        assert_eq!(
            blocked(&inputs, &r, "n1"),
            Some("consolidateAfter has not elapsed since the last pod event")
        );
        let (_, r) = run(&[&pool("{consolidateAfter: 1m}"), &n1, &c1]);
        assert_eq!(r.commands[0].method, Method::Emptiness, "Consolidatable at NOW");
    }

    #[test]
    fn a_reason_no_budget_limits_is_not_limited_by_disrupting_nodes() {
        let [n1, c1] = managed("n1");
        let [n2, c2] = managed("n2");
        // n2 is NotReady: it uses up budgets that apply, but no budget limits Empty here.
        let n2 = n2.replace("status: \"True\"}]", "status: \"False\"}]");
        let p = pool("{consolidateAfter: 0s, budgets: [{nodes: \"0\", reasons: [Drifted]}]}");
        let (inputs, r) = run(&[&p, &n1, &c1, &n2, &c2]);
        assert_eq!(r.commands.len(), 1, "{:?}", r.blocked);
        assert_eq!(names(&inputs, &r.commands[0].candidates), ["n1", "n2"]);
    }

    #[test]
    fn consolidation_deletes_nodes_whose_pods_fit_elsewhere() {
        let [n1, c1] = managed("n1");
        let [n2, c2] = managed("n2");
        let p = pool("{consolidateAfter: 0s}");
        let a = bound_pod("default", "a", "n1", "1", "");
        let b = bound_pod("default", "b", "n2", "1", "");
        let (inputs, r) = run(&[&p, &n1, &c1, &n2, &c2, &a, &b]);
        assert_eq!(r.commands.len(), 1, "{:?}", r.blocked);
        let cmd = &r.commands[0];
        assert_eq!(cmd.reason, DisruptionReason::Underutilized);
        assert_eq!(cmd.decision, Decision::Delete);
        assert_eq!(cmd.candidates.len(), 1, "one node's pods fit on the other");
        assert!((cmd.savings_per_hour - 0.4).abs() < 1e-9);
        let kept = if names(&inputs, &cmd.candidates) == ["n1"] {
            "n2"
        } else {
            "n1"
        };
        assert!(
            blocked(&inputs, &r, kept).is_some(),
            "the node left alone is explained"
        );
    }

    #[test]
    fn protected_nodes_are_left_alone_with_the_reason() {
        let [n1, c1] = managed("n1");
        let [n2, c2] = managed("n2");
        let p = pool("{consolidateAfter: 0s}");
        let a = bound_pod("default", "a", "n1", "1", "").replace(
            "labels: {app: a}",
            "labels: {app: a}, annotations: {karpenter.sh/do-not-disrupt: \"true\"}",
        );
        let b = bound_pod("default", "b", "n2", "1", "");
        let pdb = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: b, namespace: default}\nspec: {selector: {matchLabels: {app: b}}}\nstatus: {disruptionsAllowed: 0, currentHealthy: 1, desiredHealthy: 1, expectedPods: 1}\n";
        let (inputs, r) = run(&[&p, &n1, &c1, &n2, &c2, &a, &b, pdb]);
        assert!(r.commands.is_empty());
        assert_eq!(
            blocked(&inputs, &r, "n1"),
            Some("pod default/a has karpenter.sh/do-not-disrupt")
        );
        assert_eq!(
            blocked(&inputs, &r, "n2"),
            Some("pod default/b PodDisruptionBudget default/b allows no more disruptions")
        );
    }

    #[test]
    fn expired_nodes_are_deleted_whatever_the_budgets_and_take_no_other_part() {
        // n1's claim is 720h (the default expireAfter) old at NOW; n2's is a day old.
        let [n1, c1] = managed("n1");
        let c1 = c1.replace(
            "creationTimestamp: \"2026-12-01T00:00:00Z\"",
            "creationTimestamp: \"2026-11-01T00:00:00Z\"",
        );
        let [n2, c2] = managed("n2");
        let p = pool("{consolidateAfter: 0s, budgets: [{nodes: \"0\"}]}");
        let a = bound_pod("default", "a", "n1", "1", "").replace(
            "labels: {app: a}",
            "labels: {app: a}, annotations: {karpenter.sh/do-not-disrupt: \"true\"}",
        );
        let (inputs, r) = run(&[&p, &n1, &c1, &n2, &c2, &a]);
        assert_eq!(r.expirations.len(), 1, "{:?}", r.expirations);
        let e = &r.expirations[0];
        assert_eq!(names(&inputs, &[e.node]), ["n1"]);
        assert_eq!(e.expired_at.to_string(), "2026-12-01T00:00:00Z");
        assert_eq!(
            e.drain_blocked_by.as_deref(),
            Some("pod default/a has karpenter.sh/do-not-disrupt"),
            "do-not-disrupt does not stop expiration, it holds the drain"
        );
        assert_eq!(
            blocked(&inputs, &r, "n1"),
            None,
            "an expiring node is not 'left alone'"
        );
        assert!(r.commands.is_empty(), "the empty n2 is held by the zero budget");
        assert!(
            blocked(&inputs, &r, "n2")
                .unwrap()
                .contains("allows no more disruptions for Empty")
        );
    }

    #[test]
    fn consolidate_after_not_elapsed_is_explained() {
        let [n1, c1] = managed("n1");
        let p = pool("{consolidateAfter: 720h}");
        let a = bound_pod("default", "a", "n1", "1", "");
        let (inputs, r) = run(&[&p, &n1, &c1, &a]);
        assert!(r.commands.is_empty());
        assert_eq!(
            blocked(&inputs, &r, "n1"),
            Some("consolidateAfter has not elapsed since the last pod event")
        );
    }

    #[test]
    fn budgets_are_reported_per_reason_and_null_when_none_applies() {
        let [n1, c1] = managed("n1");
        let p = pool("{consolidateAfter: Never, budgets: [{nodes: \"0\", reasons: [Drifted]}]}");
        let a = bound_pod("default", "a", "n1", "1", "");
        let (_, r) = run(&[&p, &n1, &c1, &a]);
        let get = |reason| r.budgets.iter().find(|b| b.reason == reason).unwrap().allowed;
        assert_eq!(get(DisruptionReason::Drifted), Some(0));
        assert_eq!(get(DisruptionReason::Empty), None, "no budget limits Empty");
        assert_eq!(get(DisruptionReason::Underutilized), None);
    }

    #[test]
    fn a_drifted_node_is_replaced_or_deleted_within_the_drift_budget() {
        let [n1, c1] = managed("n1");
        let p = pool("{consolidateAfter: Never}");
        // The claim's hash (same version) no longer matches the NodePool's template: NodePoolDrifted.
        let c1 = c1.replace(
            "  creationTimestamp:",
            "  annotations: {karpenter.sh/nodepool-hash: \"1\", karpenter.sh/nodepool-hash-version: v3-rs1}\n  creationTimestamp:",
        );
        let a = bound_pod("default", "a", "n1", "1", "");
        let (inputs, r) = run(&[&p, &n1, &c1, &a]);
        assert_eq!(r.node_claims[0].drifted, Some(DriftReason::NodePoolDrifted));
        assert_eq!(r.commands.len(), 1, "{:?}", r.blocked);
        let cmd = &r.commands[0];
        assert_eq!(cmd.method, Method::Drift);
        assert_eq!(cmd.decision, Decision::Replace, "its pod needs a new node");
        assert_eq!(names(&inputs, &cmd.candidates), ["n1"]);
        assert_eq!(cmd.replacements.len(), 1);
    }

    /// `managed(name)`, drifted (a stale NodePool hash), its claim created at `created`, with the Drifted condition
    /// True since `since` when given.
    fn drifted(name: &str, created: &str, since: Option<&str>) -> [String; 2] {
        let [node, claim] = managed(name);
        let mut claim = claim.replace(
            "  creationTimestamp: \"2026-12-01T00:00:00Z\"",
            &format!("  annotations: {{karpenter.sh/nodepool-hash: \"1\", karpenter.sh/nodepool-hash-version: v3-rs1}}\n  creationTimestamp: \"{created}\""),
        );
        if let Some(since) = since {
            claim += &format!(
                "  - {{type: Drifted, status: \"True\", reason: NodePoolDrifted, lastTransitionTime: \"{since}\"}}\n"
            );
        }
        [node, claim]
    }

    #[test]
    fn drift_takes_the_longest_drifted_node_first() {
        let p = pool("{consolidateAfter: Never}");
        let a = bound_pod("default", "a", "n1", "1", "");
        let b = bound_pod("default", "b", "n2", "1", "");
        // n1 is the older NodeClaim, n2 drifted first.
        let [n1, c1] = drifted("n1", "2026-11-20T00:00:00Z", Some("2026-12-02T09:00:00Z"));
        let [n2, c2] = drifted("n2", "2026-11-25T00:00:00Z", Some("2026-12-01T12:00:00Z"));
        let (inputs, r) = run(&[&p, &n1, &c1, &n2, &c2, &a, &b]);
        assert_eq!(r.commands[0].method, Method::Drift);
        assert_eq!(names(&inputs, &r.commands[0].candidates), ["n2"]);
        // Without Drifted conditions (drift found this pass), the older NodeClaim goes first.
        let [n1, c1] = drifted("n1", "2026-11-20T00:00:00Z", None);
        let [n2, c2] = drifted("n2", "2026-11-25T00:00:00Z", None);
        let (inputs, r) = run(&[&p, &n1, &c1, &n2, &c2, &a, &b]);
        assert_eq!(names(&inputs, &r.commands[0].candidates), ["n1"]);
    }

    #[test]
    fn a_snapshot_replaces_a_node_the_controller_recorded_as_drifted_by_the_provider() {
        let p = pool("{consolidateAfter: Never}");
        let a = bound_pod("default", "a", "n1", "1", "");
        let [n1, c1] = managed("n1");
        // Nothing in the snapshot drifts n1 (its hash is current); only the provider, which the CLI cannot ask,
        // found its AMI out of date.
        let c1 = c1
            + "  - {type: Drifted, status: \"True\", reason: AMIDrift, lastTransitionTime: \"2026-12-02T09:00:00Z\"}\n";
        let (inputs, r) = run(&[&p, &n1, &c1, &a]);
        assert_eq!(
            r.node_claims[0].drifted,
            Some(DriftReason::Provider("AMIDrift".into()))
        );
        assert_eq!(r.commands.len(), 1, "{:?}", r.blocked);
        assert_eq!(r.commands[0].method, Method::Drift);
        assert_eq!(names(&inputs, &r.commands[0].candidates), ["n1"]);

        // Recorded as no longer drifted: left alone.
        let c1 = c1.replace(
            "status: \"True\", reason: AMIDrift",
            "status: \"False\", reason: AMIDrift",
        );
        let (_, r) = run(&[&p, &n1, &c1, &a]);
        assert_eq!(r.node_claims[0].drifted, None);
        assert!(r.commands.is_empty(), "{:?}", r.commands);
    }

    #[test]
    fn drift_passes_over_a_node_it_cannot_replace() {
        let p = pool("{consolidateAfter: Never}");
        // n1's pod needs 9 cpu: no instance type fits it.
        let a = bound_pod("default", "a", "n1", "9", "");
        let b = bound_pod("default", "b", "n2", "1", "");
        let [n1, c1] = drifted("n1", "2026-11-20T00:00:00Z", None);
        let [n2, c2] = drifted("n2", "2026-11-25T00:00:00Z", None);
        let (inputs, r) = run(&[&p, &n1, &c1, &n2, &c2, &a, &b]);
        assert_eq!(r.commands.len(), 1, "{:?}", r.blocked);
        assert_eq!(names(&inputs, &r.commands[0].candidates), ["n2"]);
        assert!(
            blocked(&inputs, &r, "n1").unwrap().starts_with("drifted, but "),
            "{:?}",
            r.blocked
        );
    }

    #[test]
    fn drift_proceeds_past_do_not_disrupt_with_a_termination_grace_period() {
        let p = pool("{consolidateAfter: Never}");
        let a = bound_pod("default", "a", "n1", "1", "").replace(
            "labels: {app: a}",
            "labels: {app: a}, annotations: {karpenter.sh/do-not-disrupt: \"true\"}",
        );
        let [n1, c1] = drifted("n1", "2026-11-20T00:00:00Z", None);
        let (inputs, r) = run(&[&p, &n1, &c1, &a]);
        assert!(r.commands.is_empty());
        assert_eq!(
            blocked(&inputs, &r, "n1"),
            Some("pod default/a has karpenter.sh/do-not-disrupt")
        );
        let c1 = c1.replace(
            "spec:\n  requirements: []\n",
            "spec:\n  requirements: []\n  terminationGracePeriod: 1h\n",
        );
        let (inputs, r) = run(&[&p, &n1, &c1, &a]);
        assert_eq!(r.commands[0].method, Method::Drift, "{:?}", r.blocked);
        assert_eq!(names(&inputs, &r.commands[0].candidates), ["n1"]);
    }

    #[test]
    fn an_empty_budget_is_not_bypassed_by_consolidation() {
        let [n1, c1] = managed("n1");
        let p = pool(
            "{consolidateAfter: 0s, budgets: [{nodes: \"0\", reasons: [Empty]}, {nodes: \"5\", reasons: [Underutilized]}]}",
        );
        let (inputs, r) = run(&[&p, &n1, &c1]);
        assert!(
            r.commands.is_empty(),
            "the empty node is held by the Empty budget"
        );
        assert!(
            blocked(&inputs, &r, "n1")
                .unwrap()
                .contains("allows no more disruptions for Empty")
        );
    }

    #[test]
    fn pending_pods_keep_the_room_they_need_from_consolidation() {
        let [n1, c1] = managed("n1");
        let [n2, c2] = managed("n2");
        let p = pool("{consolidateAfter: 0s}");
        let a = bound_pod("default", "a", "n1", "1", "");
        let b = bound_pod("default", "b", "n2", "1", "");
        let (_, r) = run(&[&p, &n1, &c1, &n2, &c2, &a, &b]);
        assert_eq!(
            r.commands[0].decision,
            Decision::Delete,
            "without pending pods one node's pod moves over"
        );
        // A pending pod needs the room left on either node: deleting one would push a pod onto a new node.
        let waiting = pending_pod("default", "waiting", "2500m", "");
        let (_, r) = run(&[&p, &n1, &c1, &n2, &c2, &a, &b, &waiting]);
        assert!(
            r.commands.iter().all(|c| c.decision != Decision::Delete),
            "{:?}",
            r.commands.iter().map(|c| c.method).collect::<Vec<_>>()
        );
    }

    #[test]
    fn an_invalid_nodepool_is_reported_and_its_nodes_left_alone() {
        let [n1, c1] = managed("n1");
        let p = pool("{consolidateAfter: 0s, budgets: [{nodes: \"1\", schedule: \"0 9 * * *\"}]}");
        let (inputs, r) = run(&[&p, &n1, &c1]);
        assert!(
            r.commands.is_empty(),
            "the empty node of an invalid NodePool is not removed"
        );
        assert_eq!(
            r.errors,
            ["NodePool default: spec.disruption.budgets[0]: schedule and duration must be set together"]
        );
        assert!(
            blocked(&inputs, &r, "n1")
                .unwrap()
                .contains("NodePool default is invalid")
        );
    }

    /// A clock that moves on `step` each time it is read: each deadline check of a search costs `step`.
    struct SteppingClock {
        now: std::sync::Mutex<Timestamp>,
        step: SignedDuration,
    }

    impl Clock for SteppingClock {
        fn now(&self) -> Timestamp {
            let mut now = self.now.lock().unwrap();
            *now = now.checked_add(self.step).unwrap();
            *now
        }
    }

    /// `managed(name)` in NodePool `pool`.
    fn managed_in(name: &str, pool: &str) -> [String; 2] {
        managed(name).map(|o| {
            o.replace(
                "karpenter.sh/nodepool: default",
                &format!("karpenter.sh/nodepool: {pool}"),
            )
        })
    }

    #[test]
    fn consolidation_searches_stop_at_their_limits_and_the_next_pass_starts_where_single_node_stopped() {
        let p = pool("{consolidateAfter: 0s}");
        let other = p.replace("{name: default}", "{name: other}");
        let [n1, c1] = managed("n1");
        let [n2, c2] = managed("n2");
        let [n3, c3] = managed_in("n3", "other");
        // Each node is nearly full and nothing cheaper holds its pod, nor the pods of two: nothing can go.
        let pods: Vec<String> = ["n1", "n2", "n3"]
            .iter()
            .map(|n| bound_pod("default", &format!("p-{n}"), n, "3950m", ""))
            .collect();
        let objects = [
            &p, &other, &n1, &c1, &n2, &c2, &n3, &c3, &pods[0], &pods[1], &pods[2],
        ];
        let objects: Vec<&str> = objects.iter().map(|s| s.as_str()).collect();
        let (inputs, unlimited) = run(&objects);
        assert!(unlimited.commands.is_empty());
        assert!(unlimited.consolidation_timeouts.is_empty());
        for n in ["n1", "n2", "n3"] {
            assert!(
                blocked(&inputs, &unlimited, n)
                    .unwrap()
                    .starts_with("replacement would not be cheaper"),
                "{:?}",
                unlimited.blocked
            );
        }

        // Each deadline check takes 91 s: multi-node's minute is over at its first, single-node's three at its
        // second.
        let clock = SteppingClock {
            now: std::sync::Mutex::new(NOW.parse().unwrap()),
            step: SignedDuration::from_secs(91),
        };
        let limits = SearchLimits::upstream(&clock);
        let mut progress = ConsolidationProgress::default();
        let (inputs, r) = run_within(&objects, &limits, &mut progress);
        assert!(r.commands.is_empty(), "{:?}", r.commands);
        assert_eq!(
            r.consolidation_timeouts,
            [ConsolidationType::Multi, ConsolidationType::Single]
        );
        assert!(
            blocked(&inputs, &r, "n1")
                .unwrap()
                .starts_with("replacement would not be cheaper"),
            "{:?}",
            r.blocked
        );
        for n in ["n2", "n3"] {
            assert_eq!(
                blocked(&inputs, &r, n),
                Some("not evaluated this pass: single-node consolidation reached its time limit (3m) first"),
                "{:?}",
                r.blocked
            );
        }
        assert_eq!(progress.unseen_node_pools, ["other"]);

        // The next pass tries NodePool other first, and then it is default's turn.
        let (inputs, r) = run_within(&objects, &limits, &mut progress);
        assert_eq!(
            r.consolidation_timeouts,
            [ConsolidationType::Multi, ConsolidationType::Single]
        );
        assert!(
            blocked(&inputs, &r, "n3")
                .unwrap()
                .starts_with("replacement would not be cheaper"),
            "{:?}",
            r.blocked
        );
        assert!(blocked(&inputs, &r, "n1").unwrap().starts_with("not evaluated"));
        assert_eq!(progress.unseen_node_pools, ["default"]);

        // With time enough, every candidate is tried and nothing is carried over.
        let patient = SearchLimits {
            clock: &clock,
            multi_node: SignedDuration::from_hours(1),
            single_node: SignedDuration::from_hours(1),
        };
        let (_, r) = run_within(&objects, &patient, &mut progress);
        assert!(r.consolidation_timeouts.is_empty());
        assert!(progress.unseen_node_pools.is_empty());
    }

    /// [`run`] with time limits and the progress of earlier passes.
    fn run_within(
        objects: &[&str],
        limits: &SearchLimits<'_>,
        progress: &mut ConsolidationProgress,
    ) -> (crate::snapshot::DisruptionInputs, PassResult) {
        let snap = snapshot(objects);
        let now: Timestamp = NOW.parse().unwrap();
        let mut inputs =
            build_disruption_inputs(&snap, &catalog(), &BuildOptions::default(), &NoProviderDrift, now);
        let settings = PassSettings {
            now,
            spot_to_spot: false,
        };
        let result = disruption_pass_within(&mut inputs, &settings, Some(limits), progress);
        (inputs, result)
    }

    /// Builds the pass inputs from objects that load without a note (conversion may note problems, such as an
    /// invalid NodePool) and runs the pass.
    fn run(objects: &[&str]) -> (crate::snapshot::DisruptionInputs, PassResult) {
        let snap = snapshot(objects);
        let now: Timestamp = NOW.parse().unwrap();
        let mut inputs =
            build_disruption_inputs(&snap, &catalog(), &BuildOptions::default(), &NoProviderDrift, now);
        let result = disruption_pass(
            &mut inputs,
            &PassSettings {
                now,
                spot_to_spot: false,
            },
        );
        (inputs, result)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, ..Default::default() })]

        /// Whatever the cluster, a command stays within the budget, never disrupts a node holding an active
        /// do-not-disrupt or PDB-protected pod through a graceful method, leaves every pod a place (off the
        /// expiring nodes too), and every consolidation saves money; every expired node, and only those, is an
        /// expiration, never a command's candidate.
        #[test]
        fn commands_keep_pods_placed_within_budgets_and_protections(
            nodes in proptest::collection::vec(
                (proptest::collection::vec(100u32..1500, 0..4), proptest::prelude::any::<bool>(), proptest::prelude::any::<bool>(), proptest::prelude::any::<bool>()),
                1..6,
            ),
            budget in 0usize..4,
        ) {
            let mut objects: Vec<String> = vec![pool(&format!("{{consolidateAfter: 0s, budgets: [{{nodes: \"{budget}\"}}]}}"))];
            objects.push("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: guarded, namespace: default}\nspec: {selector: {matchLabels: {guard: \"yes\"}}}\nstatus: {disruptionsAllowed: 0, currentHealthy: 1, desiredHealthy: 1, expectedPods: 1}\n".to_string());
            for (i, (pods, dnd, guarded, expired)) in nodes.iter().enumerate() {
                let name = format!("n{i}");
                let [node, mut claim] = managed(&name);
                if *expired {
                    claim = claim.replace("creationTimestamp: \"2026-12-01T00:00:00Z\"", "creationTimestamp: \"2026-11-01T00:00:00Z\"");
                }
                objects.extend([node, claim]);
                for (j, cpu) in pods.iter().enumerate() {
                    let mut pod = bound_pod("default", &format!("p{i}-{j}"), &name, &format!("{cpu}m"), "");
                    if j == 0 && *dnd {
                        pod = pod.replace("labels: {app:", "annotations: {karpenter.sh/do-not-disrupt: \"true\"}, labels: {app:");
                    }
                    if j == 0 && *guarded {
                        pod = pod.replace("labels: {app: ", "labels: {guard: \"yes\", app: ");
                    }
                    objects.push(pod);
                }
            }
            let refs: Vec<&str> = objects.iter().map(String::as_str).collect();
            let (mut inputs, r) = run(&refs);
            let view_names: Vec<String> = inputs.view.nodes.iter().map(|n| n.name.clone()).collect();
            let index = |n: usize| view_names[n][1..].parse::<usize>().unwrap();
            let mut expiring: Vec<usize> = r.expirations.iter().map(|e| index(e.node)).collect();
            expiring.sort_unstable();
            let expected: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].3).collect();
            proptest::prop_assert_eq!(expiring, expected);
            for cmd in &r.commands {
                proptest::prop_assert!(cmd.candidates.iter().all(|&n| !nodes[index(n)].3), "an expiring node is a candidate");
                proptest::prop_assert!(cmd.candidates.len() <= budget, "{} nodes disrupted with a budget of {budget}", cmd.candidates.len());
                if cmd.method != Method::Drift && cmd.method != Method::StaticDrift {
                    for &n in &cmd.candidates {
                        let (_, dnd, guarded, _) = &nodes[inputs.view.nodes[n].name[1..].parse::<usize>().unwrap()];
                        let has_pods = !nodes[inputs.view.nodes[n].name[1..].parse::<usize>().unwrap()].0.is_empty();
                        proptest::prop_assert!(!(has_pods && (*dnd || *guarded)), "a protected pod would be evicted");
                    }
                }
                if cmd.reason == DisruptionReason::Underutilized {
                    proptest::prop_assert!(cmd.savings_per_hour > 0.0, "a consolidation that saves nothing");
                }
                let outcome = simulate_removal(&mut inputs, &cmd.candidates);
                proptest::prop_assert!(!matches!(outcome, SimulationOutcome::Unschedulable(_)), "a pod is left without a place");
            }
        }
    }
}
