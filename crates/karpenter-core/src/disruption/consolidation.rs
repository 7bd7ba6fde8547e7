//! Consolidation: which nodes to remove because their pods fit elsewhere (delete) or on one cheaper node
//! (replace). Pure decisions against an abstract re-simulation ([`Resimulator`]): the caller re-runs the
//! scheduler without the candidates and reports what it took.
//!
//! Upstream's rules (`consolidation.go`, `multinodeconsolidation.go`, `singlenodeconsolidation.go`):
//! - candidates are tried in ascending disruption cost; empty nodes are left to emptiness (and its budget), so a
//!   NodePool with policy `WhenEmpty` offers none;
//! - a move is a delete when every pod fits on nodes that stay, a replace when exactly one new node is needed and
//!   it is cheaper; instance types of the replacement whose worst launch price (most expensive offering its
//!   requirements allow) is not below the removed nodes' price are dropped, and minValues must still hold;
//! - an on-demand (or reserved) node whose replacement could be spot or on-demand gets a spot-only replacement,
//!   so a spot shortage fails the launch instead of buying pricier on-demand capacity; a replacement the
//!   scheduler put into a capacity reservation stays in reserved capacity;
//! - replacing spot with spot needs the SpotToSpotConsolidation gate; one spot node is replaced only when at
//!   least 15 cheaper spot types exist, and the launch is limited to the 15 cheapest (more if minValues needs);
//! - multi-node consolidation binary-searches the longest prefix (at most 100 candidates, within each NodePool's
//!   budget) that can go at once, and never replaces several nodes with a type one of them already is unless it
//!   is cheaper than that node;
//! - single-node consolidation takes candidates round-robin across NodePools and acts on the first that works;
//! - each search has a time limit ([`Deadline`], on a clock the caller passes in): multi-node consolidation stops
//!   after [`MULTI_NODE_TIMEOUT`] with the last prefix that worked, single-node after [`SINGLE_NODE_TIMEOUT`]
//!   with no command, naming the NodePools it never reached so the next search starts with them;
//! - `Balanced` NodePools also require the move to pass [`super::balanced`]'s score.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use karpenter_api::{labels, nodepool::ConsolidationPolicy};

use super::{balanced, cost::order_by_disruption_cost};
use crate::{
    clock::Clock,
    instance_type::{InstanceType, Offering},
    requirements::{LabelInterner, Requirement, Requirements, Symbol},
    scheduling::{Launch, NewNodeClaim},
};

/// A single spot node is replaced only when at least this many cheaper spot types exist, and its replacement
/// launches from this many (upstream `MinInstanceTypesForSpotToSpotConsolidation`).
pub const MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT: usize = 15;
/// Multi-node consolidation looks at most at this many candidates.
pub const MAX_MULTI_CANDIDATES: usize = 100;
/// How long multi-node consolidation searches before it settles for the last prefix that worked (upstream
/// `MultiNodeConsolidationTimeoutDuration`).
pub const MULTI_NODE_TIMEOUT: SignedDuration = SignedDuration::from_secs(60);
/// How long single-node consolidation tries candidates before it gives up for this pass (upstream
/// `SingleNodeConsolidationTimeoutDuration`).
pub const SINGLE_NODE_TIMEOUT: SignedDuration = SignedDuration::from_secs(180);

/// When a consolidation search must stop: once `clock` reads later than the limit set at its start. The caller
/// passes the clock in (core never reads the machine's), so a test can advance it per simulated candidate. As
/// upstream, the search looks at it before each step and stops there; a step already begun runs to its end.
#[derive(Clone, Copy)]
pub struct Deadline<'a> {
    clock: &'a dyn Clock,
    at: Timestamp,
}

impl<'a> Deadline<'a> {
    /// `limit` from now on `clock`.
    pub fn after(clock: &'a dyn Clock, limit: SignedDuration) -> Self {
        let now = clock.now();
        Self {
            clock,
            at: now.checked_add(limit).unwrap_or(Timestamp::MAX),
        }
    }

    /// Whether the clock is past the limit.
    pub fn passed(&self) -> bool {
        self.clock.now() > self.at
    }
}

impl std::fmt::Debug for Deadline<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deadline").field("at", &self.at).finish()
    }
}

fn past(deadline: Option<&Deadline<'_>>) -> bool {
    deadline.is_some_and(Deadline::passed)
}

/// One node consolidation may remove.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsolidationCandidate {
    /// The caller's id for the node; commands and rejections refer to it.
    pub index: usize,
    /// Index of its NodePool (into the budgets and [`ConsolidationSettings::pool_totals`]).
    pub node_pool: usize,
    pub node_pool_name: String,
    pub policy: ConsolidationPolicy,
    pub instance_type: String,
    pub capacity_type: Symbol,
    pub zone: Symbol,
    /// Its current offering's price per hour (a reserved node's reserved price).
    pub price: f64,
    /// See [`super::cost::disruption_cost`].
    pub disruption_cost: f64,
    /// Reschedulable pods on it.
    pub pod_count: usize,
    /// It runs in a capacity reservation.
    pub reserved: bool,
}

/// What re-scheduling a set of candidates' pods elsewhere gave.
#[derive(Debug, Clone)]
pub enum SimulationOutcome {
    /// Every pod fits on nodes that stay.
    Delete,
    /// These new NodeClaims are needed (from the scheduler, with their instance types cheapest first).
    Replace(Vec<NewNodeClaim>),
    /// Some pod fits nowhere: why, for the user.
    Unschedulable(String),
}

/// Re-runs scheduling as if the candidates were gone.
pub trait Resimulator {
    fn simulate(&mut self, candidates: &[&ConsolidationCandidate]) -> SimulationOutcome;
}

impl<F> Resimulator for F
where
    F: FnMut(&[&ConsolidationCandidate]) -> SimulationOutcome,
{
    fn simulate(&mut self, candidates: &[&ConsolidationCandidate]) -> SimulationOutcome {
        self(candidates)
    }
}

/// What consolidation needs to know besides the candidates.
#[derive(Debug, Clone)]
pub struct ConsolidationSettings {
    /// The SpotToSpotConsolidation feature gate.
    pub spot_to_spot: bool,
    /// The capacity-type values.
    pub spot: Symbol,
    pub on_demand: Symbol,
    pub reserved: Symbol,
    pub zone_key: Symbol,
    pub capacity_type_key: Symbol,
    /// `node.kubernetes.io/instance-type`, narrowed on a replacement to the instance types it keeps.
    pub instance_type_key: Symbol,
    /// Multi-node consolidation's candidate cap (upstream 100).
    pub max_multi_candidates: usize,
    /// Per NodePool index: `(total price per hour, total disruption cost)` over all its nodes, for `Balanced`.
    pub pool_totals: Vec<(f64, f64)>,
}

impl ConsolidationSettings {
    /// The well-known symbols from `interner`, a cap of 100 candidates and no pool totals.
    pub fn new(interner: &mut LabelInterner, spot_to_spot: bool) -> Self {
        Self {
            spot_to_spot,
            spot: interner.intern(labels::CAPACITY_TYPE_SPOT),
            on_demand: interner.intern(labels::CAPACITY_TYPE_ON_DEMAND),
            reserved: interner.intern(labels::CAPACITY_TYPE_RESERVED),
            zone_key: interner.intern_key(labels::ZONE_LABEL),
            capacity_type_key: interner.intern_key(labels::CAPACITY_TYPE_LABEL),
            instance_type_key: interner.intern_key(labels::INSTANCE_TYPE_LABEL),
            max_multi_candidates: MAX_MULTI_CANDIDATES,
            pool_totals: Vec::new(),
        }
    }
}

/// What a command does with its candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Remove them; their pods fit on nodes that stay.
    Delete,
    /// Launch the replacement, then remove them.
    Replace,
}

/// A consolidation move.
#[derive(Debug, Clone)]
pub struct ConsolidationCommand {
    /// [`ConsolidationCandidate::index`] of each node removed, in the order tried.
    pub candidates: Vec<usize>,
    pub decision: Decision,
    /// The one replacement of a `Replace` (empty for `Delete`): instance types cut to those cheaper than the
    /// removed nodes, cheapest first, its requirements narrowed to them (and pinned to spot or reserved capacity
    /// where that applies), its launch re-chosen among them.
    pub replacements: Vec<NewNodeClaim>,
    /// Removed nodes' prices, less the replacement's worst-case launch price.
    pub savings_per_hour: f64,
}

/// Which consolidation method is asking: spot-to-spot's 15-type rule applies to one node only, the same-type
/// filter to several.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Single,
    Multi,
}

/// Why a candidate is not consolidated at all, before any simulation: an empty node is emptiness's alone, within
/// the Empty budget (upstream leaves it out of consolidation, so a budget for `Empty` holds it), and a `WhenEmpty`
/// NodePool consolidates nothing else.
fn disqualified(c: &ConsolidationCandidate) -> Option<&'static str> {
    if c.pod_count == 0 {
        Some("empty: only emptiness removes it, within the Empty budget")
    } else if c.policy == ConsolidationPolicy::WhenEmpty {
        Some("NodePool policy WhenEmpty: the node is not empty")
    } else {
        None
    }
}

/// Multi-node consolidation: the longest prefix of the candidates (by ascending disruption cost, within budgets,
/// at most `settings.max_multi_candidates`, at least two) that can be deleted, or replaced by one cheaper node.
///
/// `budgets_left[node_pool]` is how many more nodes each NodePool may lose (a pool missing from it may lose
/// none); on return it is reduced by the nodes the command removes. The prefixes form a binary search, as
/// upstream's, so the longest prefix found is not necessarily the longest that works when validity is not
/// monotone. No time limit: see [`multi_node_within`].
pub fn multi_node(
    candidates: &[ConsolidationCandidate],
    budgets_left: &mut [usize],
    sim: &mut dyn Resimulator,
    settings: &ConsolidationSettings,
) -> Option<ConsolidationCommand> {
    multi_node_within(candidates, budgets_left, sim, settings, None).command
}

/// What a multi-node search found, and whether its time ran out first.
#[derive(Debug, Clone)]
pub struct MultiNodeOutcome {
    /// The longest prefix that worked, even when the search stopped at its deadline (as upstream, which returns
    /// the last valid command it found).
    pub command: Option<ConsolidationCommand>,
    /// The deadline passed before the binary search ended.
    pub timed_out: bool,
}

/// [`multi_node`], stopping at `deadline` (checked before each re-simulation) with the best command found so
/// far.
pub fn multi_node_within(
    candidates: &[ConsolidationCandidate],
    budgets_left: &mut [usize],
    sim: &mut dyn Resimulator,
    settings: &ConsolidationSettings,
    deadline: Option<&Deadline<'_>>,
) -> MultiNodeOutcome {
    let eligible = multi_node_eligible(candidates, budgets_left, settings);
    if eligible.len() < 2 {
        return MultiNodeOutcome {
            command: None,
            timed_out: false,
        };
    }
    let (best, timed_out) = longest_working_prefix(&eligible, sim, settings, deadline);
    let command = best.map(|(n, cmd)| {
        for c in &eligible[..n] {
            if let Some(left) = budgets_left.get_mut(c.node_pool) {
                *left = left.saturating_sub(1);
            }
        }
        cmd
    });
    MultiNodeOutcome { command, timed_out }
}

/// The candidates multi-node consolidation may take, in ascending disruption cost: not disqualified, within
/// each NodePool's budget, at most `settings.max_multi_candidates`.
fn multi_node_eligible<'c>(
    candidates: &'c [ConsolidationCandidate],
    budgets_left: &[usize],
    settings: &ConsolidationSettings,
) -> Vec<&'c ConsolidationCandidate> {
    let mut budgets = budgets_left.to_vec();
    let mut eligible: Vec<&ConsolidationCandidate> = Vec::new();
    for i in order_by_disruption_cost(candidates) {
        if eligible.len() >= settings.max_multi_candidates {
            break;
        }
        let c = &candidates[i];
        if disqualified(c).is_some() {
            continue;
        }
        match budgets.get_mut(c.node_pool) {
            Some(left) if *left > 0 => *left -= 1,
            _ => continue,
        }
        eligible.push(c);
    }
    eligible
}

/// Upstream's binary search over prefix lengths (at least two): the longest prefix found that can go, with its
/// command, and whether `deadline` passed before the search ended.
fn longest_working_prefix(
    eligible: &[&ConsolidationCandidate],
    sim: &mut dyn Resimulator,
    settings: &ConsolidationSettings,
    deadline: Option<&Deadline<'_>>,
) -> (Option<(usize, ConsolidationCommand)>, bool) {
    let (mut lo, mut hi) = (2, eligible.len());
    let mut best: Option<(usize, ConsolidationCommand)> = None;
    while lo <= hi {
        if past(deadline) {
            return (best, true);
        }
        let mid = lo + (hi - lo) / 2;
        match compute(&eligible[..mid], sim, settings, Method::Multi) {
            Ok(cmd) => {
                best = Some((mid, cmd));
                lo = mid + 1;
            }
            Err(_) => hi = mid - 1,
        }
    }
    (best, false)
}

/// Single-node consolidation: every candidate in turn (ascending disruption cost, round-robin across NodePools,
/// skipping NodePools whose budget is spent) until one can be deleted or replaced by one cheaper node.
///
/// Returns the command, why each candidate tried before it was not consolidated (by
/// [`ConsolidationCandidate::index`], including those skipped for budget or policy), and how many candidates
/// were re-simulated. No time limit: see [`single_node_within`].
pub fn single_node(
    candidates: &[ConsolidationCandidate],
    budgets_left: &[usize],
    sim: &mut dyn Resimulator,
    settings: &ConsolidationSettings,
) -> (Option<ConsolidationCommand>, Vec<(usize, String)>, usize) {
    let outcome = single_node_within(candidates, budgets_left, sim, settings, &[], None);
    (outcome.command, outcome.rejected, outcome.evaluated)
}

/// What a single-node search found, and where its time ran out.
#[derive(Debug, Clone, Default)]
pub struct SingleNodeOutcome {
    pub command: Option<ConsolidationCommand>,
    /// Why each candidate tried was not consolidated (see [`single_node`]).
    pub rejected: Vec<(usize, String)>,
    /// Candidates re-simulated.
    pub evaluated: usize,
    /// The deadline passed before a command was found or every candidate tried; there is no command then.
    pub timed_out: bool,
    /// After a timeout: the candidates never reached ([`ConsolidationCandidate::index`]), in the order they
    /// would have been tried.
    pub unreached: Vec<usize>,
    /// After a timeout: the NodePools none of whose candidates was reached, to try first next time (upstream's
    /// `PreviouslyUnseenNodePools`).
    pub unseen_node_pools: Vec<usize>,
}

/// [`single_node`], with the candidates of `first_pools` (NodePool indices) leading the round-robin, and stopping
/// at `deadline` (checked before each candidate, as upstream) without a command.
pub fn single_node_within(
    candidates: &[ConsolidationCandidate],
    budgets_left: &[usize],
    sim: &mut dyn Resimulator,
    settings: &ConsolidationSettings,
    first_pools: &[usize],
    deadline: Option<&Deadline<'_>>,
) -> SingleNodeOutcome {
    let mut out = SingleNodeOutcome::default();
    let order = interleave_with_first(candidates, first_pools);
    for (position, &i) in order.iter().enumerate() {
        let c = &candidates[i];
        if past(deadline) {
            out.stop_at(candidates, &order, position);
            return out;
        }
        if let Some(why) = not_tried(c, budgets_left) {
            out.rejected.push((c.index, why));
            continue;
        }
        out.evaluated += 1;
        match compute(&[c], sim, settings, Method::Single) {
            Ok(cmd) => {
                out.command = Some(cmd);
                return out;
            }
            Err(why) => out.rejected.push((c.index, why)),
        }
    }
    out
}

/// Why single-node consolidation passes over a candidate without simulating it: its NodePool's budget is spent,
/// or it is [`disqualified`].
fn not_tried(c: &ConsolidationCandidate, budgets_left: &[usize]) -> Option<String> {
    if budgets_left.get(c.node_pool).copied().unwrap_or(0) == 0 {
        return Some(format!(
            "the disruption budget of NodePool {:?} allows no more nodes to be disrupted now",
            c.node_pool_name
        ));
    }
    disqualified(c).map(str::to_string)
}

impl SingleNodeOutcome {
    /// Records a search stopped by its deadline before `order[position]`: the candidates not reached, and the
    /// NodePools none of whose candidates was reached (in the order they would have come).
    fn stop_at(&mut self, candidates: &[ConsolidationCandidate], order: &[usize], position: usize) {
        self.timed_out = true;
        self.unreached = order[position..].iter().map(|&u| candidates[u].index).collect();
        let mut seen: Vec<usize> = order[..position]
            .iter()
            .map(|&s| candidates[s].node_pool)
            .collect();
        seen.sort_unstable();
        seen.dedup();
        for &u in &order[position..] {
            let pool = candidates[u].node_pool;
            if seen.binary_search(&pool).is_err() && !self.unseen_node_pools.contains(&pool) {
                self.unseen_node_pools.push(pool);
            }
        }
    }
}

/// Positions of `candidates` by ascending disruption cost within each NodePool, taken round-robin across
/// NodePools (the NodePool whose cheapest candidate comes first leads), so one large NodePool does not starve
/// the others.
pub fn interleave_by_node_pool(candidates: &[ConsolidationCandidate]) -> Vec<usize> {
    interleave_with_first(candidates, &[])
}

/// [`interleave_by_node_pool`], the NodePools of `first` leading (among themselves, and the others, in the usual
/// order).
fn interleave_with_first(candidates: &[ConsolidationCandidate], first: &[usize]) -> Vec<usize> {
    let mut pools: Vec<(usize, Vec<usize>)> = Vec::new();
    for i in order_by_disruption_cost(candidates) {
        let pool = candidates[i].node_pool;
        match pools.iter_mut().find(|(p, _)| *p == pool) {
            Some((_, list)) => list.push(i),
            None => pools.push((pool, vec![i])),
        }
    }
    // Stable: within each group the NodePool whose cheapest candidate comes first still leads.
    pools.sort_by_key(|(p, _)| !first.contains(p));
    let longest = pools.iter().map(|(_, l)| l.len()).max().unwrap_or(0);
    let mut order = Vec::with_capacity(candidates.len());
    for round in 0..longest {
        order.extend(pools.iter().filter_map(|(_, l)| l.get(round).copied()));
    }
    order
}

/// Re-simulates the candidates and turns the outcome into a command, or says why there is none.
fn compute(
    candidates: &[&ConsolidationCandidate],
    sim: &mut dyn Resimulator,
    settings: &ConsolidationSettings,
    method: Method,
) -> Result<ConsolidationCommand, String> {
    let price: f64 = candidates.iter().map(|c| c.price).sum();
    let (decision, replacements, savings) = match sim.simulate(candidates) {
        SimulationOutcome::Unschedulable(why) => return Err(why),
        SimulationOutcome::Delete => (Decision::Delete, Vec::new(), price),
        SimulationOutcome::Replace(claims) if claims.is_empty() => (Decision::Delete, Vec::new(), price),
        SimulationOutcome::Replace(claims) if claims.len() > 1 => {
            return Err(format!(
                "its pods would need {} new nodes; consolidation replaces with at most one",
                claims.len()
            ));
        }
        SimulationOutcome::Replace(claims) => {
            let Some(claim) = claims.into_iter().next() else {
                return Err("the re-simulation returned no replacement".into());
            };
            let claim = shape_replacement(claim, candidates, price, settings, method)?;
            let worst = claim.worst_price(settings.zone_key, settings.capacity_type_key);
            if worst.partial_cmp(&price) != Some(std::cmp::Ordering::Less) {
                return Err(not_cheaper(price));
            }
            (Decision::Replace, vec![claim], price - worst)
        }
    };
    balanced::evaluate_balanced(candidates, savings, &settings.pool_totals)?;
    Ok(ConsolidationCommand {
        candidates: candidates.iter().map(|c| c.index).collect(),
        decision,
        replacements,
        savings_per_hour: savings,
    })
}

fn not_cheaper(price: f64) -> String {
    format!(
        "replacement would not be cheaper: no instance type that fits the pods launches for less than ${price:.4}/h"
    )
}

/// Cuts a replacement down to what consolidation may launch, as upstream's `computeConsolidation` does.
fn shape_replacement(
    mut claim: NewNodeClaim,
    candidates: &[&ConsolidationCandidate],
    price: f64,
    settings: &ConsolidationSettings,
    method: Method,
) -> Result<NewNodeClaim, String> {
    let ct = settings.capacity_type_key;
    // A launch the scheduler put into a reservation stays in reserved capacity (upstream's scheduler pins it).
    if claim
        .launch
        .as_ref()
        .is_some_and(|l| l.offering.capacity_type == settings.reserved)
    {
        claim
            .requirements
            .add(Requirement::in_values(ct, [settings.reserved]));
    }
    let all_spot = candidates
        .iter()
        .all(|c| c.capacity_type == settings.spot && !c.reserved);
    let spot_to_spot = all_spot && claim.requirements.allows(ct, settings.spot);
    if spot_to_spot {
        if !settings.spot_to_spot {
            return Err(
                "spot-to-spot consolidation is disabled (the SpotToSpotConsolidation feature gate is off)"
                    .into(),
            );
        }
        claim
            .requirements
            .add(Requirement::in_values(ct, [settings.spot]));
    } else if claim.requirements.allows(ct, settings.spot)
        && claim.requirements.allows(ct, settings.on_demand)
    {
        // Priced as spot, so it must launch as spot: a spot shortage then fails the launch rather than buying
        // on-demand capacity that costs more than the node it replaces.
        claim
            .requirements
            .add(Requirement::in_values(ct, [settings.spot]));
    }
    keep_cheaper_than(&mut claim, price, settings);
    if claim.instance_types.is_empty() {
        return Err(if spot_to_spot {
            format!(
                "replacement would not be cheaper: no spot instance type that fits the pods costs less than ${price:.4}/h"
            )
        } else {
            not_cheaper(price)
        });
    }
    let needed = min_values_prefix(&claim)?;
    if method == Method::Multi {
        filter_out_same_type(&mut claim, candidates, settings)?;
    } else if spot_to_spot {
        let cheaper = claim.instance_types.len();
        if cheaper < MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT {
            return Err(format!(
                "fewer than {MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT} cheaper spot instance types ({cheaper}): replacing a spot node needs that many to choose from"
            ));
        }
        claim
            .instance_types
            .truncate(needed.max(MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT));
    }
    narrow_to_kept_types(&mut claim, settings);
    Ok(claim)
}

/// The most expensive available offering of `it` that `reqs` allow.
fn worst_price(it: &InstanceType, reqs: &Requirements, settings: &ConsolidationSettings) -> Option<f64> {
    it.worst_offering(reqs, settings.zone_key, settings.capacity_type_key)
        .map(|o| o.price)
}

/// Keeps the instance types whose worst launch price is below `price`, cheapest first.
fn keep_cheaper_than(claim: &mut NewNodeClaim, price: f64, settings: &ConsolidationSettings) {
    let reqs = &claim.requirements;
    let mut kept: Vec<(f64, Arc<InstanceType>)> = claim
        .instance_types
        .iter()
        .filter(|it| worst_price(it, reqs, settings).is_some_and(|w| w < price))
        .filter_map(|it| {
            it.cheapest_offering(reqs, settings.zone_key, settings.capacity_type_key)
                .map(|o| (o.price, it.clone()))
        })
        .collect();
    kept.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    claim.instance_types = kept.into_iter().map(|(_, it)| it).collect();
}

/// How many of the leading instance types minValues needs, or why the kept ones cannot satisfy it. A claim whose
/// minValues the scheduler already relaxed (BestEffort) passes with every type.
fn min_values_prefix(claim: &NewNodeClaim) -> Result<usize, String> {
    match claim
        .requirements
        .check_min_values(claim.instance_types.iter().map(|it| &it.requirements))
    {
        Ok(n) => Ok(n),
        Err(_) if claim.min_values_relaxed => Ok(claim.instance_types.len()),
        Err(short) => Err(format!(
            "the cheaper instance types cannot satisfy minValues ({} requirement{} short)",
            short.len(),
            if short.len() == 1 { " falls" } else { "s fall" }
        )),
    }
}

/// Several nodes are not replaced by a node of a type one of them already is unless it is cheaper than that
/// node: keeping it and deleting the others would do the same with less disruption. Drops every type whose
/// worst launch price is not below the cheapest removed node whose type the replacement could be.
fn filter_out_same_type(
    claim: &mut NewNodeClaim,
    candidates: &[&ConsolidationCandidate],
    settings: &ConsolidationSettings,
) -> Result<(), String> {
    let ceiling = claim
        .instance_types
        .iter()
        .flat_map(|it| candidates.iter().filter(|c| c.instance_type == it.name))
        .map(|c| c.price)
        .fold(f64::INFINITY, f64::min);
    if ceiling == f64::INFINITY {
        return Ok(());
    }
    let reqs = &claim.requirements;
    claim
        .instance_types
        .retain(|it| worst_price(it, reqs, settings).is_some_and(|w| w < ceiling));
    if claim.instance_types.is_empty() {
        return Err(format!(
            "the replacement would be no cheaper than a node being removed (${ceiling:.4}/h) of the same instance type: deleting the others is enough"
        ));
    }
    min_values_prefix(claim).map(|_| ())
}

/// Narrows the instance-type requirement to the types kept and re-chooses the launch among them when the
/// scheduler's choice was cut: a reservation with room first, then spot, then the cheapest.
fn narrow_to_kept_types(claim: &mut NewNodeClaim, settings: &ConsolidationSettings) {
    claim.requirements.add(Requirement::in_values(
        settings.instance_type_key,
        claim.instance_types.iter().map(|it| it.name_symbol),
    ));
    let reqs = &claim.requirements;
    let allowed = |o: &Offering| {
        o.available
            && reqs.allows(settings.zone_key, o.zone)
            && reqs.allows(settings.capacity_type_key, o.capacity_type)
    };
    let still_valid = claim.launch.as_ref().is_some_and(|l| {
        allowed(&l.offering)
            && claim
                .instance_types
                .iter()
                .any(|it| it.name == l.instance_type.name)
    });
    if still_valid {
        return;
    }
    // Reservations with room first, then spot, then by price; the first of equals wins.
    let order = |a: &Offering, b: &Offering| {
        b.reservation_id
            .is_some()
            .cmp(&a.reservation_id.is_some())
            .then_with(|| (b.capacity_type == settings.spot).cmp(&(a.capacity_type == settings.spot)))
            .then_with(|| a.price.total_cmp(&b.price))
    };
    let best = claim
        .instance_types
        .iter()
        .flat_map(|it| it.offerings.iter().filter(|o| allowed(o)).map(move |o| (it, o)))
        .filter(|(_, o)| o.reservation_id.is_none() || o.reservation_capacity.unwrap_or(0) > 0)
        .min_by(|a, b| order(a.1, b.1));
    claim.launch = best.map(|(it, o)| Launch {
        instance_type: it.clone(),
        offering: o.clone(),
    });
}

#[cfg(test)]
mod tests;
