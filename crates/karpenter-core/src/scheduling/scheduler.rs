//! The scheduling simulation: pending pods, largest first, onto existing nodes, then onto the NodeClaims this
//! simulation has opened (least-loaded first), then onto a new NodeClaim from each NodePool by weight. A pod
//! that fits nowhere has one preference relaxed and goes to the back of the queue; the simulation ends when a
//! full pass over the queue places nothing and relaxes nothing.
//!
//! Each open NodeClaim keeps the instance types that could still hold everything placed on it; a pod is added
//! only if at least one type remains (and minValues still holds), so every NodeClaim can be launched.

use std::{collections::BTreeSet, collections::HashMap, collections::VecDeque, sync::Arc};

use crate::{
    instance_type::{InstanceType, Offering},
    requirements::{Incompatibility, LabelInterner, Requirement, Requirements, Symbol, WellKnownKeys},
    resources::{ResourceTable, Resources, fits, sum_fits},
};
use karpenter_api::labels;

use super::{
    claim_index::{ClaimIndex, Walk},
    node_overlay::NodeOverlay,
    nodes::{ExistingNode, NodePoolTemplate},
    pod::{AffinityTerm, HostPort, Labels, Pod, PreferencePolicy, Relaxation, untolerated},
    topology::{Host, PodGroups, Topology, TopologyError},
};

/// How minValues is enforced (the controller's MIN_VALUES_POLICY).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MinValuesPolicy {
    /// A NodeClaim must keep at least minValues distinct values of each key among its instance types.
    #[default]
    Strict,
    /// Relax minValues when it cannot be met, and say so on the NodeClaim.
    BestEffort,
}

/// Settings of one simulation.
#[derive(Debug, Clone)]
pub struct SchedulingSettings {
    pub preference_policy: PreferencePolicy,
    pub min_values_policy: MinValuesPolicy,
    /// The ReservedCapacity feature gate: launch into reservations first.
    pub reserved_capacity: bool,
    /// Instance types kept on each NodeClaim (upstream core keeps 600).
    pub max_instance_types: usize,
}

impl Default for SchedulingSettings {
    fn default() -> Self {
        Self {
            preference_policy: PreferencePolicy::Respect,
            min_values_policy: MinValuesPolicy::Strict,
            reserved_capacity: true,
            max_instance_types: 600,
        }
    }
}

/// A pod already bound to an existing node, as topology sees it.
#[derive(Debug, Clone)]
pub struct BoundPod {
    pub namespace: Symbol,
    pub labels: Labels,
    /// Bound pods with the same namespace and labels (the replicas of a workload) share an id, so the scheduler
    /// matches each distinct set against the topology groups once; [`BoundPod::UNSHARED`] opts out.
    pub label_set: u32,
    /// Index into `SchedulingInput::existing`.
    pub node: usize,
    /// Its required anti-affinity terms, which repel matching pending pods (a boxed slice: one bound pod in
    /// thousands has any, and this struct is repeated for every pod of the cluster).
    pub anti_affinity: Box<[AffinityTerm]>,
}

impl BoundPod {
    /// A `label_set` shared with no other pod.
    pub const UNSHARED: u32 = u32::MAX;
}

/// Everything one simulation reads.
#[derive(Debug, Clone)]
pub struct SchedulingInput {
    /// NodePool templates; tried by weight, highest first, then by name.
    pub templates: Vec<NodePoolTemplate>,
    pub existing: Vec<ExistingNode>,
    pub bound_pods: Vec<BoundPod>,
    pub pods: Vec<Pod>,
    /// Keys a pod may select without the NodePool declaring them.
    pub well_known: WellKnownKeys,
    pub settings: SchedulingSettings,
    /// Why NodePools that exist took no part (`NodePool "x" was skipped: it is not ready (...)`), told to every
    /// pod no node could take.
    pub skipped_nodepools: Vec<String>,
}

/// The offering a launch of a NodeClaim would pick.
#[derive(Debug, Clone)]
pub struct Launch {
    pub instance_type: Arc<InstanceType>,
    pub offering: Offering,
}

/// A NodeClaim the simulation opened.
#[derive(Debug, Clone)]
pub struct NewNodeClaim {
    /// Index into `SchedulingInput::templates`.
    pub template: usize,
    /// The NodePool's requirements narrowed by every pod placed (and by topology), plus the instance types kept.
    pub requirements: Requirements,
    /// Every instance type that could hold the pods, cheapest first, truncated to `max_instance_types` without
    /// breaking minValues.
    pub instance_types: Vec<Arc<InstanceType>>,
    /// The pods' requests plus the DaemonSet overhead of its instance types (the smallest of them per resource,
    /// as upstream: each type was checked against its own).
    pub requests: Resources,
    /// Indices into `SchedulingInput::pods`.
    pub pods: Vec<usize>,
    /// minValues could not be met and was relaxed (BestEffort).
    pub min_values_relaxed: bool,
    /// The labels its requirements give the NodeClaim object (see [`claim_labels`]), sorted by key.
    pub labels: Vec<(Symbol, Symbol)>,
    pub launch: Option<Launch>,
}

impl NewNodeClaim {
    /// The worst price a launch could pay: the most expensive offering among its instance types.
    pub fn worst_price(&self, zone_key: Symbol, ct_key: Symbol) -> f64 {
        self.instance_types
            .iter()
            .filter_map(|it| it.worst_offering(&self.requirements, zone_key, ct_key))
            .map(|o| o.price)
            .fold(0.0, f64::max)
    }
}

/// What a simulation decided.
#[derive(Debug, Clone, Default)]
pub struct SchedulingResults {
    pub new_node_claims: Vec<NewNodeClaim>,
    /// Pods placed on each existing node (index into `SchedulingInput::existing`).
    pub existing_nodes: Vec<(usize, Vec<usize>)>,
    /// Pods left pending, with why.
    pub pod_errors: Vec<(usize, String)>,
}

/// A NodeClaim being filled.
struct OpenClaim {
    template: usize,
    requirements: Requirements,
    /// Its hostname domain (claims follow the existing nodes in the hostname tables).
    hostname: Host,
    /// Indices into the template's instance types that still fit, cheapest first.
    types: Vec<u32>,
    /// Per-slot maximum over `types` of allocatable less the type's DaemonSet overhead: a cheap bound to reject
    /// pods early.
    max_room: Resources,
    /// What the pods placed request; each type's DaemonSet overhead is added when that type is checked.
    pod_requests: Resources,
    pods: Vec<usize>,
    host_ports: Vec<HostPort>,
    min_values_relaxed: bool,
}

/// Why a pod could not go onto a NodeClaim, to explain it. Cheap to build: the words (and, for instance types,
/// which of requirements, resources and offerings ruled them out) are worked out only for the rejections a pod
/// is told about.
enum Rejection {
    Taint,
    HostPort,
    Requirements(Incompatibility),
    Topology(TopologyError),
    /// No instance type left could take the pod (its requirements, resources or offerings ruled them all out).
    NoInstanceType,
    MinValues(Vec<crate::requirements::MinValuesShortfall>),
    /// The NodePool's node limit is used up.
    NodeLimit,
    /// Every instance type's capacity exceeds what is left of the NodePool's limits.
    ResourceLimits,
    /// The NodePool's requirements allow none of the instance types.
    NoInstanceTypes,
}

/// Runs one simulation. `interner` must be the one the input was built with; placeholder hostnames for new
/// NodeClaims are interned into it.
pub fn schedule(
    input: &SchedulingInput,
    interner: &mut LabelInterner,
    table: &ResourceTable,
) -> SchedulingResults {
    schedule_indexed(input, &SimulationIndex::new(input), interner, table)
}

/// [`schedule`] with its [`SimulationIndex`] built beforehand: re-simulations of one cluster share it, so none of
/// them walks every bound pod to find the few with anti-affinity, or every node for the most room any has.
/// `index` must have been built from `input` with its bound pods and its nodes' free resources as they are now
/// (only the nodes' `schedulable` and `leaving` flags may have changed since).
pub fn schedule_indexed(
    input: &SchedulingInput,
    index: &SimulationIndex,
    interner: &mut LabelInterner,
    table: &ResourceTable,
) -> SchedulingResults {
    debug_assert_eq!(
        (index.bound_pods, index.existing_nodes),
        (input.bound_pods.len(), input.existing.len()),
        "the index is of other bound pods or nodes"
    );
    Scheduler::new(input, index, interner).run(interner, table)
}

/// What a simulation needs to know about the bound pods and the existing nodes that does not change while only
/// the pending pods and the nodes' `schedulable` and `leaving` flags do (what a disruption pass changes between
/// re-simulations): built once per pass, so no re-simulation walks every bound pod or every node of the cluster.
///
/// Built only by [`SimulationIndex::new`]: an empty index's ceiling would let no pod onto any node.
#[derive(Debug, Clone)]
pub struct SimulationIndex {
    /// How many bound pods and existing nodes it was built from (to catch an index used with other ones).
    bound_pods: usize,
    existing_nodes: usize,
    /// Indices of the bound pods with required anti-affinity terms, ascending: one pod in thousands has any, and
    /// only those repel pending pods whatever their labels.
    with_anti_affinity: Vec<usize>,
    /// The most CPU and the most memory any existing node has free before pods are placed (each may be another
    /// node's; `schedulable` is not read, so the bound holds whatever the flags). Placing pods only lowers what
    /// nodes have free, so a pod asking for more fits on none of them and skips the scan: a re-simulation of a
    /// full cluster otherwise scans every node for every pod of every candidate.
    existing_ceiling: (i64, i64),
}

impl SimulationIndex {
    pub fn new(input: &SchedulingInput) -> Self {
        Self {
            bound_pods: input.bound_pods.len(),
            existing_nodes: input.existing.len(),
            with_anti_affinity: input
                .bound_pods
                .iter()
                .enumerate()
                .filter(|(_, b)| !b.anti_affinity.is_empty())
                .map(|(i, _)| i)
                .collect(),
            existing_ceiling: input
                .existing
                .iter()
                .fold((i64::MIN, i64::MIN), |(cpu, memory), n| {
                    (cpu.max(n.available.cpu()), memory.max(n.available.memory()))
                }),
        }
    }

    /// The bound pods with anti-affinity that are still there (not on a leaving node), by ascending index.
    fn anti_affinity_staying<'a>(
        &'a self,
        input: &'a SchedulingInput,
    ) -> impl Iterator<Item = (usize, &'a BoundPod)> + 'a {
        self.with_anti_affinity
            .iter()
            .map(|&i| (i, &input.bound_pods[i]))
            .filter(|(_, b)| !input.existing[b.node].leaving)
    }
}

struct Scheduler<'a> {
    input: &'a SchedulingInput,
    simulation_index: &'a SimulationIndex,
    template_order: Vec<usize>,
    zone_key: Symbol,
    ct_key: Symbol,
    instance_type_key: Symbol,
    wildcard_ip: Symbol,
    spot: Symbol,
    topology: Topology<'a>,
    groups: Vec<PodGroups>,
    relax: Vec<Relaxation>,
    /// The existing nodes pods were placed on; the others are read from the input.
    nodes: NodeOverlay,
    claims: Vec<OpenClaim>,
    /// Open claims ordered by (pod count, creation order): least-loaded first, as upstream tries them.
    claim_order: BTreeSet<(usize, usize)>,
    /// The open claims by what rules them out for a pod's topology, so pods walk only those they may join.
    claim_index: ClaimIndex,
    remaining: Vec<Option<Resources>>,
    remaining_nodes: Vec<Option<i64>>,
    no_undefined: WellKnownKeys,
}

impl<'a> Scheduler<'a> {
    fn new(
        input: &'a SchedulingInput,
        simulation_index: &'a SimulationIndex,
        interner: &mut LabelInterner,
    ) -> Self {
        let hostname_key = interner.intern_key(labels::HOSTNAME_LABEL);
        let zone_key = interner.intern_key(labels::ZONE_LABEL);
        let ct_key = interner.intern_key(labels::CAPACITY_TYPE_LABEL);
        let instance_type_key = interner.intern_key(labels::INSTANCE_TYPE_LABEL);
        let wildcard_ip = interner.intern("");
        let spot = interner.intern(labels::CAPACITY_TYPE_SPOT);

        let mut template_order: Vec<usize> = (0..input.templates.len()).collect();
        template_order.sort_by(|&a, &b| {
            let (ta, tb) = (&input.templates[a], &input.templates[b]);
            tb.weight.cmp(&ta.weight).then_with(|| ta.name.cmp(&tb.name))
        });

        let topology = Self::build_topology(input, simulation_index, hostname_key);
        let mut s = Self {
            input,
            simulation_index,
            template_order,
            zone_key,
            ct_key,
            instance_type_key,
            wildcard_ip,
            spot,
            topology,
            groups: Vec::new(),
            relax: input
                .pods
                .iter()
                .map(|p| Relaxation::new(p, input.settings.preference_policy))
                .collect(),
            nodes: NodeOverlay::new(input.existing.len()),
            claims: Vec::new(),
            claim_order: BTreeSet::new(),
            claim_index: ClaimIndex::default(),
            remaining: input.templates.iter().map(|t| t.remaining.clone()).collect(),
            remaining_nodes: input.templates.iter().map(|t| t.remaining_nodes).collect(),
            no_undefined: WellKnownKeys::none(),
        };
        s.register_pods();
        let groups = 0..s.topology.groups().len();
        s.claim_index = ClaimIndex::new(
            groups.clone().map(|g| s.topology.host_spread_skew(g)),
            groups.filter_map(|g| s.topology.non_host_affinity_key(g)),
        );
        s
    }

    /// The topology over every non-hostname key the pods' constraints (and bound pods' anti-affinity) use.
    fn build_topology(
        input: &'a SchedulingInput,
        simulation_index: &SimulationIndex,
        hostname_key: Symbol,
    ) -> Topology<'a> {
        let mut keys: Vec<Symbol> = Vec::new();
        let mut add_key = |k: Symbol| {
            if k != hostname_key && !keys.contains(&k) {
                keys.push(k);
            }
        };
        for p in &input.pods {
            p.spread.iter().for_each(|s| add_key(s.topology_key));
            p.affinity
                .iter()
                .chain(p.anti_affinity.iter())
                .for_each(|t| add_key(t.topology_key));
            p.preferred_affinity
                .iter()
                .chain(p.preferred_anti_affinity.iter())
                .for_each(|(_, t)| add_key(t.topology_key));
        }
        for (_, b) in simulation_index.anti_affinity_staying(input) {
            b.anti_affinity.iter().for_each(|t| add_key(t.topology_key));
        }
        Topology::new(
            hostname_key,
            &keys,
            &input.templates,
            &input.existing,
            &input.well_known,
        )
    }

    fn register_pods(&mut self) {
        let input = self.input;
        for p in &input.pods {
            let affinity = p
                .affinity
                .iter()
                .map(|t| (t.clone(), true))
                .chain(p.preferred_affinity.iter().map(|(_, t)| (t.clone(), false)));
            let anti = p
                .anti_affinity
                .iter()
                .map(|t| (t.clone(), true))
                .chain(p.preferred_anti_affinity.iter().map(|(_, t)| (t.clone(), false)));
            // Spread constraints count the nodes matching the pod's node selector and one of its required node
            // affinity terms (nodeAffinityPolicy Honor); a pod without any needs no copy of its requirements.
            let node_affinity: Vec<Requirements> = if p.spread.is_empty() {
                Vec::new()
            } else if p.required_terms.is_empty() {
                vec![p.base_requirements.clone()]
            } else {
                p.required_terms
                    .iter()
                    .map(|term| p.base_requirements.intersect(term))
                    .collect()
            };
            let g = self.topology.register(
                p.namespace,
                &node_affinity,
                &p.tolerations,
                &p.spread,
                affinity,
                anti,
            );
            self.groups.push(g);
        }
        // Pods bound to a leaving node are gone with it. Most bound pods have no anti-affinity of their own, so
        // only those that do get groups (by index, ascending): re-simulations run this once per candidate, and a
        // group per pod was a large allocation each time. The index lists them, so finding them does not walk
        // every bound pod of the cluster either.
        let bound_here = |b: &BoundPod| !input.existing[b.node].leaving;
        let simulation_index = self.simulation_index;
        let mut own_groups: Vec<(usize, PodGroups)> = Vec::new();
        for (i, b) in simulation_index.anti_affinity_staying(input) {
            let anti = b.anti_affinity.iter().map(|t| (t.clone(), true));
            own_groups.push((
                i,
                self.topology
                    .register(b.namespace, &[], &[], &[], std::iter::empty(), anti),
            ));
        }
        for (p, g) in input.pods.iter().zip(self.groups.iter_mut()) {
            self.topology.link(g, p.namespace, &p.labels);
        }
        // Which groups count a pod depends only on its namespace and labels, which the replicas of a workload
        // share (`label_set`): match each distinct set against the groups once, not every bound pod. A cluster's
        // bound pods outnumber its label sets by orders of magnitude, and re-simulations run this per candidate.
        let any_groups = !self.topology.groups().is_empty();
        let mut links: Vec<Option<PodGroups>> = Vec::new();
        let mut scratch = PodGroups::default();
        let no_groups = PodGroups::default();
        let mut own_groups = own_groups.iter().peekable();
        for (i, b) in input.bound_pods.iter().enumerate() {
            if !any_groups {
                break;
            }
            if !bound_here(b) {
                continue;
            }
            let own = match own_groups.next_if(|(at, _)| *at == i) {
                Some((_, own)) => own,
                None => &no_groups,
            };
            let topology = &mut self.topology;
            let linked = match usize::try_from(b.label_set)
                .ok()
                .filter(|_| b.label_set != BoundPod::UNSHARED)
            {
                Some(id) => {
                    if links.len() <= id {
                        links.resize(id + 1, None);
                    }
                    links[id].get_or_insert_with(|| {
                        let mut linked = PodGroups::default();
                        topology.link(&mut linked, b.namespace, &b.labels);
                        linked
                    })
                }
                None => {
                    topology.link(&mut scratch, b.namespace, &b.labels);
                    &scratch
                }
            };
            let node = &input.existing[b.node];
            topology.record_parts(
                &linked.counted_by,
                &own.anti_affinity,
                &node.requirements,
                &node.taints,
                host_of_node(b.node),
            );
        }
    }

    fn run(mut self, interner: &mut LabelInterner, table: &ResourceTable) -> SchedulingResults {
        let pods = &self.input.pods;
        let mut order: Vec<usize> = (0..pods.len()).collect();
        // Largest first: by CPU, then memory, descending; input order breaks ties.
        order.sort_by(|&a, &b| {
            let (ra, rb) = (&pods[a].requests, &pods[b].requests);
            rb.cpu()
                .cmp(&ra.cpu())
                .then_with(|| rb.memory().cmp(&ra.memory()))
                .then_with(|| a.cmp(&b))
        });
        let mut queue: VecDeque<usize> = order.into();
        let mut errors: HashMap<usize, String> = HashMap::new();
        let mut since_progress = 0usize;
        while let Some(p) = queue.pop_front() {
            match self.place(p, interner, table) {
                Ok(()) => {
                    errors.remove(&p);
                    since_progress = 0;
                }
                Err(e) => {
                    errors.insert(p, e);
                    if self.relax[p].relax(&pods[p]).is_some() {
                        since_progress = 0;
                    } else {
                        since_progress += 1;
                    }
                    queue.push_back(p);
                    if since_progress >= queue.len() {
                        break;
                    }
                }
            }
        }
        self.finish(errors, interner)
    }

    /// Tries existing nodes, then open NodeClaims, then a new NodeClaim per NodePool.
    fn place(&mut self, p: usize, interner: &mut LabelInterner, table: &ResourceTable) -> Result<(), String> {
        let pod = &self.input.pods[p];
        let reqs = self.relax[p].requirements(pod);

        let (cpu_ceiling, memory_ceiling) = self.simulation_index.existing_ceiling;
        if pod.requests.cpu() <= cpu_ceiling && pod.requests.memory() <= memory_ceiling {
            for n in 0..self.input.existing.len() {
                if self.try_existing(p, n, &reqs) {
                    return Ok(());
                }
            }
        }

        let mut found = None;
        let blocked = self.topology.blocks_every_claim(
            self.active_anti_affinity(p),
            &self.groups[p].inverse,
            self.claims.len(),
        );
        if !blocked {
            for (_, c) in self.claim_walk(p, &reqs) {
                if let Ok(update) = self.try_claim(p, &self.claims[c], &reqs) {
                    found = Some((c, update));
                    break;
                }
            }
            if cfg!(debug_assertions) {
                self.check_claims_left_out(p, &reqs, found.as_ref().map(|(c, _)| *c));
            }
        }
        if let Some((c, update)) = found {
            self.commit(p, c, update);
            return Ok(());
        }

        let mut reasons = Vec::new();
        for i in 0..self.template_order.len() {
            let t = self.template_order[i];
            match self.open_claim(p, t, &reqs) {
                Ok(()) => return Ok(()),
                Err(r) => reasons.push((t, r)),
            }
        }
        Err(self.explain(p, &reqs, reasons, interner, table))
    }

    /// The open claims pod `p` (with node requirements `reqs`) may join, in the claim order: the index filtered
    /// by the hostname spread constraints and the first non-hostname pod affinity it honours now.
    fn claim_walk(&self, p: usize, reqs: &Requirements) -> Walk<'_> {
        let pod = &self.input.pods[p];
        let spread = self
            .active_spread(p)
            .map(|g| (g, self.topology.group_selects(g, pod.namespace, &pod.labels)));
        let affinity = self.active_affinity(p).find_map(|g| {
            self.topology
                .affinity_domains(g, pod.namespace, &pod.labels, reqs)
        });
        self.claim_index.walk(&self.claim_order, spread, affinity)
    }

    /// Debug builds: every claim the index left out of pod `p`'s walk, before the one it joined, is one the
    /// topology check rejects (the index is a filter, never a decision).
    fn check_claims_left_out(&self, p: usize, reqs: &Requirements, joined: Option<usize>) {
        let walked: BTreeSet<(usize, usize)> = self.claim_walk(p, reqs).collect();
        for key @ &(_, c) in &self.claim_order {
            if Some(c) == joined {
                break;
            }
            if !walked.contains(key) {
                assert!(
                    matches!(
                        self.try_claim(p, &self.claims[c], reqs),
                        Err(Rejection::Topology(_))
                    ),
                    "the claim index left out claim {c}, which pod {p} could join"
                );
            }
        }
    }

    fn try_existing(&mut self, p: usize, n: usize, reqs: &Requirements) -> bool {
        let pod = &self.input.pods[p];
        let node = &self.input.existing[n];
        let state = self.nodes.view(n, node);
        if !node.schedulable
            || untolerated(
                &pod.tolerations,
                &node.taints,
                !self.relax[p].prefer_no_schedule_tolerated,
            )
            .is_some()
            || !fits(&pod.requests, state.available)
            || !node.requirements.is_compatible(reqs, &self.no_undefined)
            || pod
                .host_ports
                .iter()
                .any(|hp| state.host_ports.iter().any(|u| hp.conflicts(u, self.wildcard_ip)))
        {
            return false;
        }
        for (driver, count) in &pod.csi_volumes {
            let limit = node
                .volume_limits
                .iter()
                .find(|(d, _)| d == driver)
                .map(|(_, l)| *l);
            let used = state
                .volumes_used
                .iter()
                .find(|(d, _)| d == driver)
                .map_or(0, |(_, u)| *u);
            if limit.is_some_and(|l| used + count > l) {
                return false;
            }
        }
        let topo = match self.topology_requirements(p, reqs, &node.requirements, host_of_node(n)) {
            Ok(t) => t,
            Err(_) => return false,
        };
        if !node.requirements.is_compatible(&topo, &self.no_undefined) {
            return false;
        }
        let state = self.nodes.touch(n, node);
        state.available.sub_assign(&pod.requests);
        state.host_ports.extend(pod.host_ports.iter().copied());
        for (driver, count) in &pod.csi_volumes {
            match state.volumes_used.iter_mut().find(|(d, _)| d == driver) {
                Some((_, used)) => *used += count,
                None => state.volumes_used.push((*driver, *count)),
            }
        }
        state.pods.push(p);
        self.topology
            .record(&self.groups[p], &node.requirements, &node.taints, host_of_node(n));
        true
    }

    /// The spread constraints pod `p` honours now.
    fn active_spread(&self, p: usize) -> impl Iterator<Item = usize> + '_ {
        let soft = !self.relax[p].soft_spread_dropped;
        self.groups[p]
            .spread
            .iter()
            .filter(move |(_, hard)| *hard || soft)
            .map(|(i, _)| *i)
    }

    /// The affinity terms pod `p` honours now: required, then preferred ones not yet relaxed.
    fn active_affinity(&self, p: usize) -> impl Iterator<Item = usize> + '_ {
        let required = self.input.pods[p].affinity.len();
        let g = &self.groups[p].affinity;
        g[..required]
            .iter()
            .chain(g[required..].iter().skip(self.relax[p].dropped_affinity))
            .copied()
    }

    /// The anti-affinity terms pod `p` honours now.
    fn active_anti_affinity(&self, p: usize) -> impl Iterator<Item = usize> + '_ {
        let required = self.input.pods[p].anti_affinity.len();
        let g = &self.groups[p].anti_affinity;
        g[..required]
            .iter()
            .chain(g[required..].iter().skip(self.relax[p].dropped_anti_affinity))
            .copied()
    }

    fn topology_requirements(
        &self,
        p: usize,
        pod_reqs: &Requirements,
        node: &Requirements,
        host: Host,
    ) -> Result<Requirements, TopologyError> {
        let pod = &self.input.pods[p];
        self.topology.requirements_for(
            self.active_spread(p),
            self.active_affinity(p),
            self.active_anti_affinity(p),
            &self.groups[p].inverse,
            pod.namespace,
            &pod.labels,
            pod_reqs,
            node,
            host,
        )
    }

    /// Checks whether pod `p` can join `claim`; returns the claim's new requirements, instance types and bound.
    fn try_claim(&self, p: usize, claim: &OpenClaim, reqs: &Requirements) -> Result<ClaimUpdate, Rejection> {
        let pod = &self.input.pods[p];
        let template = &self.input.templates[claim.template];
        if untolerated(
            &pod.tolerations,
            &template.taints,
            !self.relax[p].prefer_no_schedule_tolerated,
        )
        .is_some()
        {
            return Err(Rejection::Taint);
        }
        if pod
            .host_ports
            .iter()
            .any(|hp| claim.host_ports.iter().any(|u| hp.conflicts(u, self.wildcard_ip)))
        {
            return Err(Rejection::HostPort);
        }
        let overheads = &template.daemon_overheads;
        // A DaemonSet binding one of the pod's host ports rules out only the types it runs on.
        let port_blocked: Vec<bool> = if pod.host_ports.is_empty() {
            Vec::new()
        } else {
            overheads
                .groups()
                .iter()
                .map(|g| g.conflicts(&pod.host_ports, self.wildcard_ip))
                .collect()
        };
        let pod_groups = &self.groups[p];
        if let Some(e) = self.topology.host_rejection(
            self.active_spread(p),
            self.active_anti_affinity(p),
            &pod_groups.inverse,
            pod.namespace,
            &pod.labels,
            claim.hostname,
        ) {
            return Err(Rejection::Topology(e));
        }
        if !sum_fits(&claim.pod_requests, &pod.requests, &claim.max_room) {
            return Err(Rejection::NoInstanceType);
        }
        let requests = claim.pod_requests.saturating_add(&pod.requests);
        // Most pods add no requirement a claim does not already have; build merged requirements only when
        // something changes.
        let mut merged = None;
        if !reqs.is_empty() {
            claim
                .requirements
                .compatible(reqs, &self.input.well_known)
                .map_err(Rejection::Requirements)?;
            merged = Some(claim.requirements.intersect(reqs));
        }
        let topo = self
            .topology_requirements(
                p,
                reqs,
                merged.as_ref().unwrap_or(&claim.requirements),
                claim.hostname,
            )
            .map_err(Rejection::Topology)?;
        if !topo.is_empty() {
            let mut m = merged.take().unwrap_or_else(|| claim.requirements.clone());
            m.compatible(&topo, &self.input.well_known)
                .map_err(Rejection::Requirements)?;
            m.intersect_with(&topo);
            merged = Some(m);
        }
        let merged = merged.filter(|m| *m != claim.requirements);
        let requirements_changed = merged.is_some();
        let view = merged.as_ref().unwrap_or(&claim.requirements);
        // Offerings need re-checking only when the zone or capacity type narrowed.
        let offerings_changed = merged.as_ref().is_some_and(|m| {
            m.get(self.zone_key) != claim.requirements.get(self.zone_key)
                || m.get(self.ct_key) != claim.requirements.get(self.ct_key)
        });
        let mut types = Vec::with_capacity(claim.types.len());
        let mut max_room = Resources::zero();
        let mut compatible = 0usize;
        let mut compatible_but_port_blocked = 0usize;
        for &i in &claim.types {
            let it = &template.instance_types[i as usize];
            if requirements_changed
                && (it.requirements.intersects(view).is_err()
                    || (offerings_changed
                        && it.cheapest_offering(view, self.zone_key, self.ct_key).is_none()))
            {
                continue;
            }
            let g = overheads.group_of(i as usize);
            if port_blocked.get(g).copied().unwrap_or(false) {
                compatible_but_port_blocked += 1;
                continue;
            }
            compatible += 1;
            let daemons = &overheads.groups()[g].requests;
            if sum_fits(&requests, daemons, &it.allocatable) {
                max_room.max_assign(&room(&it.allocatable, daemons));
                types.push(i);
            }
        }
        if types.is_empty() {
            if compatible == 0 && compatible_but_port_blocked > 0 {
                return Err(Rejection::HostPort);
            }
            return Err(Rejection::NoInstanceType);
        }
        let mut min_values_relaxed = claim.min_values_relaxed;
        if view.has_min_values() {
            let its: Vec<&Requirements> = types
                .iter()
                .map(|&i| &template.instance_types[i as usize].requirements)
                .collect();
            if let Err(shortfalls) = view.check_min_values(its.iter().copied()) {
                match self.input.settings.min_values_policy {
                    MinValuesPolicy::Strict => return Err(Rejection::MinValues(shortfalls)),
                    MinValuesPolicy::BestEffort => min_values_relaxed = true,
                }
            }
        }
        Ok(ClaimUpdate {
            requirements: merged,
            types,
            max_room,
            pod_requests: requests,
            min_values_relaxed,
        })
    }

    fn commit(&mut self, p: usize, c: usize, update: ClaimUpdate) {
        let pod = &self.input.pods[p];
        let claim = &mut self.claims[c];
        let old_key = (claim.pods.len(), c);
        self.claim_order.remove(&old_key);
        if let Some(requirements) = update.requirements {
            claim.requirements = requirements;
        }
        claim.types = update.types;
        claim.max_room = update.max_room;
        claim.pod_requests = update.pod_requests;
        claim.min_values_relaxed = update.min_values_relaxed;
        claim.pods.push(p);
        claim.host_ports.extend(pod.host_ports.iter().copied());
        let key = (claim.pods.len(), c);
        self.claim_order.insert(key);
        self.claim_index.place(c, old_key, key, &claim.requirements);
        self.topology.record(
            &self.groups[p],
            &claim.requirements,
            &self.input.templates[claim.template].taints,
            claim.hostname,
        );
        for &g in &self.groups[p].counted_by {
            if self.claim_index.tracks(g) {
                let count = self.topology.host_count_in(g, claim.hostname);
                self.claim_index.counted(g, c, key, count);
            }
        }
    }

    fn open_claim(&mut self, p: usize, t: usize, reqs: &Requirements) -> Result<(), Rejection> {
        let template = &self.input.templates[t];
        if self.remaining_nodes[t].is_some_and(|n| n <= 0) {
            return Err(Rejection::NodeLimit);
        }
        let mut types = Vec::with_capacity(template.instance_types.len());
        let mut max_room = Resources::zero();
        for (i, it) in template.instance_types.iter().enumerate() {
            // Limits are enforced pessimistically: a type whose whole capacity would not fit in what is left
            // of the limits is not an option.
            if self.remaining[t]
                .as_ref()
                .is_some_and(|rem| !fits(&it.capacity, rem))
            {
                continue;
            }
            max_room.max_assign(&room(&it.allocatable, &template.daemon_overheads.of(i).requests));
            types.push(u32::try_from(i).unwrap_or(u32::MAX));
        }
        if types.is_empty() {
            return Err(if template.instance_types.is_empty() {
                Rejection::NoInstanceTypes
            } else {
                Rejection::ResourceLimits
            });
        }
        // Upstream checks a new NodeClaim's taints, then its requirements, before anything else: a pod that
        // fails both is told about those first, not about an instance type too small for it.
        if untolerated(
            &self.input.pods[p].tolerations,
            &template.taints,
            !self.relax[p].prefer_no_schedule_tolerated,
        )
        .is_some()
        {
            return Err(Rejection::Taint);
        }
        if !reqs.is_empty() {
            template
                .requirements
                .compatible(reqs, &self.input.well_known)
                .map_err(Rejection::Requirements)?;
        }
        let hostname = host_of_node(self.input.existing.len() + self.claims.len());
        let claim = OpenClaim {
            template: t,
            requirements: template.requirements.clone(),
            hostname,
            types,
            max_room,
            pod_requests: Resources::zero(),
            pods: Vec::new(),
            host_ports: Vec::new(),
            min_values_relaxed: false,
        };
        let update = self.try_claim(p, &claim, reqs)?;
        let c = self.claims.len();
        self.claims.push(claim);
        self.claim_order.insert((0, c));
        self.commit(p, c, update);
        // Charge the limits with the largest capacity the claim might still launch.
        if let Some(rem) = self.remaining[t].as_mut() {
            let template = &self.input.templates[t];
            let mut largest = Resources::zero();
            for &i in &self.claims[c].types {
                largest.max_assign(&template.instance_types[i as usize].capacity);
            }
            rem.sub_assign(&largest);
        }
        if let Some(n) = self.remaining_nodes[t].as_mut() {
            *n -= 1;
        }
        Ok(())
    }

    /// Why pod `p` fits nowhere, in upstream's words: one clause per NodePool, joined by `; ` as upstream joins
    /// its per-NodePool errors, each naming the NodePool (upstream keeps the name in its log's structured fields;
    /// here the message is all a user gets), then the NodePools that were skipped.
    fn explain(
        &self,
        p: usize,
        reqs: &Requirements,
        reasons: Vec<(usize, Rejection)>,
        interner: &LabelInterner,
        table: &ResourceTable,
    ) -> String {
        let skipped = &self.input.skipped_nodepools;
        if reasons.is_empty() && skipped.is_empty() {
            return "no nodepools found".to_string();
        }
        reasons
            .iter()
            .map(|(t, r)| self.explain_nodepool(p, *t, reqs, r, interner, table))
            .chain(skipped.iter().cloned())
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Why NodePool `t` cannot launch a node for pod `p`.
    fn explain_nodepool(
        &self,
        p: usize,
        t: usize,
        reqs: &Requirements,
        rejection: &Rejection,
        interner: &LabelInterner,
        table: &ResourceTable,
    ) -> String {
        let pod = &self.input.pods[p];
        let template = &self.input.templates[t];
        let name = &template.name;
        let why = match rejection {
            Rejection::NodeLimit => {
                return format!("node limits have been exhausted for nodepool (NodePool={name})");
            }
            Rejection::ResourceLimits => {
                return format!("all available instance types exceed limits for nodepool (NodePool={name})");
            }
            Rejection::NoInstanceTypes => {
                return format!(
                    "nodepool requirements filtered out all available instance types (NodePool={name})"
                );
            }
            Rejection::Taint => match untolerated(&pod.tolerations, &template.taints, true) {
                Some(taint) => format!(
                    "did not tolerate {}={}:{:?}",
                    interner.resolve(taint.key),
                    taint.value.map(|v| interner.resolve(v)).unwrap_or_default(),
                    taint.effect
                ),
                None => "did not tolerate a taint".to_string(),
            },
            Rejection::HostPort => {
                let conflicting = pod.host_ports.iter().find(|hp| {
                    template
                        .daemon_overheads
                        .groups()
                        .iter()
                        .any(|g| g.conflicts(std::slice::from_ref(*hp), self.wildcard_ip))
                });
                match conflicting {
                    Some(hp) => format!(
                        "checking host port usage, IP={} Port={} Proto={} conflicts with existing HostPort configuration",
                        match interner.resolve(hp.ip) {
                            "" => "0.0.0.0",
                            ip => ip,
                        },
                        hp.port,
                        interner.resolve(hp.protocol)
                    ),
                    None => {
                        "checking host port usage, a host port conflicts with existing HostPort configuration"
                            .to_string()
                    }
                }
            }
            Rejection::Requirements(inc) => format!(
                "incompatible requirements, {}",
                inc.clone()
                    .with_suggestion(&template.requirements, &self.input.well_known, interner)
                    .explain(interner)
            ),
            Rejection::Topology(e) => e.explain(|s| interner.resolve(s).to_string()),
            Rejection::NoInstanceType => self.explain_instance_types(p, t, reqs, None, interner, table),
            Rejection::MinValues(shortfalls) => {
                self.explain_instance_types(p, t, reqs, Some(shortfalls), interner, table)
            }
        };
        let daemons = match template.daemon_overheads.bounds(0..template.instance_types.len()) {
            Some((min, max)) if min != max => format!("min={}, max={}", min.json(table), max.json(table)),
            Some((min, _)) => min.json(table).to_string(),
            None => Resources::zero().json(table).to_string(),
        };
        format!("incompatible with nodepool {name:?}, daemonset overhead={daemons}, {why}")
    }

    /// Why no instance type of NodePool `t` can take pod `p` on a new NodeClaim, as upstream's
    /// `InstanceTypeFilterError` says it: which of the three criteria (the requirements, enough resources, an
    /// available offering) no instance type met, alone or in pairs, or the minValues labels the survivors fall
    /// short on; then the requirements and the resources (the pod's requests plus DaemonSet overhead, as a range
    /// when the overhead differs by instance type) that were checked.
    fn explain_instance_types(
        &self,
        p: usize,
        t: usize,
        reqs: &Requirements,
        min_values: Option<&[crate::requirements::MinValuesShortfall]>,
        interner: &LabelInterner,
        table: &ResourceTable,
    ) -> String {
        let pod = &self.input.pods[p];
        let template = &self.input.templates[t];
        // The requirements a new NodeClaim would have had: the NodePool's, the pod's and its topology's.
        let mut requirements = template.requirements.intersect(reqs);
        let host = host_of_node(self.input.existing.len() + self.claims.len());
        if let Ok(topology) = self.topology_requirements(p, reqs, &requirements, host)
            && requirements.compatible(&topology, &self.input.well_known).is_ok()
        {
            requirements.intersect_with(&topology);
        }
        let overheads = &template.daemon_overheads;
        let port_blocked = |g: usize| {
            !pod.host_ports.is_empty() && overheads.groups()[g].conflicts(&pod.host_ports, self.wildcard_ip)
        };
        let within_limits = |i: usize| {
            self.remaining[t]
                .as_ref()
                .is_none_or(|rem| fits(&template.instance_types[i].capacity, rem))
        };
        let considered: Vec<usize> = (0..template.instance_types.len())
            .filter(|&i| within_limits(i) && !port_blocked(overheads.group_of(i)))
            .collect();
        let mut met = Criteria::default();
        for &i in &considered {
            let it = &template.instance_types[i];
            let compatible = it.requirements.intersects(&requirements).is_ok();
            let fit = sum_fits(&pod.requests, &overheads.of(i).requests, &it.allocatable);
            let offering = it
                .cheapest_offering(&requirements, self.zone_key, self.ct_key)
                .is_some();
            met.record(compatible, fit, offering);
        }
        let resources = match overheads.bounds(considered.iter().copied()) {
            Some((min, max)) if min != max => format!(
                "min={}, max={}",
                pod.requests.saturating_add(&min).json(table),
                pod.requests.saturating_add(&max).json(table)
            ),
            Some((min, _)) => pod.requests.saturating_add(&min).json(table).to_string(),
            None => pod.requests.json(table).to_string(),
        };
        let reason = match min_values {
            Some(shortfalls) => crate::requirements::explain_shortfalls(shortfalls, interner),
            None => met.failure_reason().to_string(),
        };
        let mut msg = format!(
            "{reason}, requirements={}, resources={resources}",
            requirements.display(interner)
        );
        // A CPU request of a million cores is almost always `M` typed for `m`.
        if min_values.is_none() && !met.fits && pod.requests.cpu() >= 1_000_000_000 {
            msg.push_str(" (CPU request >= 1 Million, m vs M typo?)");
        }
        msg
    }

    fn finish(self, errors: HashMap<usize, String>, interner: &mut LabelInterner) -> SchedulingResults {
        let input = self.input;
        let mut reservations: HashMap<Symbol, i64> = HashMap::new();
        let mut new_node_claims = Vec::with_capacity(self.claims.len());
        for claim in self.claims {
            let template = &input.templates[claim.template];
            let mut types: Vec<(f64, usize)> = claim
                .types
                .iter()
                .map(|&i| i as usize)
                .filter_map(|i| {
                    template.instance_types[i]
                        .cheapest_offering(&claim.requirements, self.zone_key, self.ct_key)
                        .map(|o| (o.price, i))
                })
                .collect();
            let name = |i: usize| &template.instance_types[i].name;
            types.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| name(a.1).cmp(name(b.1))));
            let mut instance_types: Vec<Arc<InstanceType>> = types
                .iter()
                .map(|&(_, i)| template.instance_types[i].clone())
                .collect();
            truncate_keeping_min_values(
                &mut instance_types,
                &claim.requirements,
                input.settings.max_instance_types,
            );
            let mut requirements = claim.requirements;
            requirements.add(Requirement::in_values(
                self.instance_type_key,
                instance_types.iter().map(|it| it.name_symbol),
            ));
            let launch = choose_launch(
                &instance_types,
                &requirements,
                self.zone_key,
                self.ct_key,
                input.settings.reserved_capacity,
                self.spot,
                &mut reservations,
            );
            let mut kept: Vec<usize> = types.iter().take(instance_types.len()).map(|&(_, i)| i).collect();
            if let Some(Launch {
                offering:
                    Offering {
                        reservation_id: Some(id),
                        capacity_type,
                        ..
                    },
                ..
            }) = &launch
            {
                // Pinned to the reservation it was counted against, as upstream's scheduler narrows a claim that
                // reserved an offering: the launch goes into that reservation or fails for lack of capacity (the
                // next round then sees it full), never quietly onto on-demand or spot while the reservation
                // still had room, and two claims never count on one seat.
                let reservation_key = interner.intern_key(labels::AWS_CAPACITY_RESERVATION_ID_LABEL);
                let mut pinned = requirements.clone();
                pinned.add(Requirement::in_values(self.ct_key, [*capacity_type]));
                pinned.add(Requirement::in_values(reservation_key, [*id]));
                let fits_pin: Vec<bool> = instance_types
                    .iter()
                    .map(|it| it.requirements.intersects(&pinned).is_ok())
                    .collect();
                let narrowed: Vec<&Requirements> = instance_types
                    .iter()
                    .zip(&fits_pin)
                    .filter(|(_, fits)| **fits)
                    .map(|(it, _)| &it.requirements)
                    .collect();
                // A pin that would leave fewer types than minValues asks for is not made: the claim keeps its
                // choice of types and the launch still prefers the reservation.
                if !pinned.has_min_values() || pinned.check_min_values(narrowed.iter().copied()).is_ok() {
                    let mut fits = fits_pin.iter();
                    instance_types.retain(|_| *fits.next().unwrap_or(&false));
                    let mut fits = fits_pin.iter();
                    kept.retain(|_| *fits.next().unwrap_or(&false));
                    pinned.add(Requirement::in_values(
                        self.instance_type_key,
                        instance_types.iter().map(|it| it.name_symbol),
                    ));
                    requirements = pinned;
                }
            }
            // The DaemonSets counted are the fewest any of its types runs, as upstream requests them: the
            // launch may pick any of the types, and each one was checked with its own overhead.
            let mut requests = claim.pod_requests;
            if let Some((daemons, _)) = template.daemon_overheads.bounds(kept.iter().copied()) {
                requests.add_assign(&daemons);
            }
            let labels = claim_labels(&requirements, &input.well_known, interner);
            new_node_claims.push(NewNodeClaim {
                template: claim.template,
                requirements,
                instance_types,
                requests,
                pods: claim.pods,
                min_values_relaxed: claim.min_values_relaxed,
                labels,
                launch,
            });
        }
        let existing_nodes = self.nodes.into_placements();
        let mut pod_errors: Vec<(usize, String)> = errors.into_iter().collect();
        pod_errors.sort_by_key(|(p, _)| *p);
        SchedulingResults {
            new_node_claims,
            existing_nodes,
            pod_errors,
        }
    }
}

/// The labels a NodeClaim's requirements give its object, as upstream's `resolveCustomLabelsFromRequirements`
/// resolves them at creation: a key with one allowed value is labelled with it; a key a user defined (not
/// well-known) with several allowed values, or constrained by `Exists`, `NotIn`, `Gt`, `Lt`, `Gte` or `Lte`, is
/// labelled with one value it allows ([`Requirement::any_value`]: the first listed, or the smallest integer within
/// the bounds and not excluded, where upstream picks at random); `DoesNotExist` and the hostname give none.
/// Well-known keys with several values are left to the launch, which labels them from the instance type and
/// offering it picks (those are the cloud provider's to set).
///
/// `requirements` are the claim's narrowed ones (the NodePool's intersected with every pod placed), so the value
/// chosen satisfies each pod on the claim: a pod needing `team In [b]` on a pool allowing `team In [a, b]` gets
/// a node labelled `team=b`.
///
/// [`Requirement::any_value`]: crate::requirements::Requirement::any_value
pub fn claim_labels(
    requirements: &Requirements,
    well_known: &WellKnownKeys,
    interner: &mut LabelInterner,
) -> Vec<(Symbol, Symbol)> {
    let hostname = interner.intern_key(labels::HOSTNAME_LABEL);
    let mut out: Vec<(Symbol, Symbol)> = requirements
        .iter()
        .filter(|r| r.key() != hostname)
        .filter_map(|r| match r.single_value() {
            Some(v) => Some((r.key(), v)),
            None if well_known.contains(r.key()) => None,
            None => r.any_value(interner).map(|v| (r.key(), v)),
        })
        .collect();
    out.sort_unstable_by(|a, b| interner.resolve(a.0).cmp(interner.resolve(b.0)));
    out
}

/// What an instance type has left for pods once its DaemonSet pods run.
fn room(allocatable: &Resources, daemons: &Resources) -> Resources {
    if daemons.is_zero() {
        allocatable.clone()
    } else {
        allocatable.saturating_sub(daemons)
    }
}

/// The hostname-table index of the n-th node (existing nodes, then opened claims).
fn host_of_node(n: usize) -> Host {
    Host(u32::try_from(n).unwrap_or(u32::MAX))
}

struct ClaimUpdate {
    /// `None` when the claim's requirements do not change.
    requirements: Option<Requirements>,
    types: Vec<u32>,
    max_room: Resources,
    pod_requests: Resources,
    min_values_relaxed: bool,
}

/// Which of upstream's three instance-type criteria (its requirements, enough resources, an available offering)
/// at least one instance type met, alone and in pairs, to say which of them ruled every type out.
#[derive(Debug, Default, Clone, Copy)]
struct Criteria {
    requirements: bool,
    fits: bool,
    offering: bool,
    /// One type met the requirements and had room, but no offering.
    requirements_and_fits: bool,
    /// One type met the requirements and had an offering, but no room.
    requirements_and_offering: bool,
    /// One type had room and an offering, but did not meet the requirements.
    fits_and_offering: bool,
}

impl Criteria {
    fn record(&mut self, compatible: bool, fits: bool, offering: bool) {
        self.requirements |= compatible;
        self.fits |= fits;
        self.offering |= offering;
        self.requirements_and_fits |= compatible && fits && !offering;
        self.requirements_and_offering |= compatible && offering && !fits;
        self.fits_and_offering |= fits && offering && !compatible;
    }

    /// Upstream's sentence for why no instance type is left: the criteria no type met at all first (all three,
    /// then pairs, then one), then the pairs no single type met together.
    fn failure_reason(&self) -> &'static str {
        match (self.requirements, self.fits, self.offering) {
            (false, false, false) => {
                "no instance type met the scheduling requirements or had enough resources or had a required offering"
            }
            (false, false, true) => {
                "no instance type met the scheduling requirements or had enough resources"
            }
            (false, true, false) => {
                "no instance type met the scheduling requirements or had a required offering"
            }
            (true, false, false) => "no instance type had enough resources or had a required offering",
            (false, true, true) => "no instance type met all requirements",
            (true, false, true) => "no instance type has enough resources",
            (true, true, false) => "no instance type has the required offering",
            (true, true, true) if self.requirements_and_fits => {
                "no instance type which met the scheduling requirements and had enough resources, had a required offering"
            }
            (true, true, true) if self.fits_and_offering => {
                "no instance type which had enough resources and the required offering met the scheduling requirements"
            }
            (true, true, true) if self.requirements_and_offering => {
                "no instance type which met the scheduling requirements and the required offering had the required resources"
            }
            (true, true, true) => "no instance type met the requirements/resources/offering tuple",
        }
    }
}

/// Keeps the `max` cheapest types, extending the cut only as far as minValues needs.
pub(crate) fn truncate_keeping_min_values(
    types: &mut Vec<Arc<InstanceType>>,
    requirements: &Requirements,
    max: usize,
) {
    if types.len() <= max {
        return;
    }
    if requirements.has_min_values() {
        let reqs: Vec<&Requirements> = types.iter().map(|it| &it.requirements).collect();
        if let Ok(needed) = requirements.check_min_values(reqs.iter().copied()) {
            types.truncate(needed.max(max));
            return;
        }
    }
    types.truncate(max);
}

/// The offering a launch picks: reserved capacity first (with the gate on and capacity left), then spot, then
/// on-demand, the cheapest available offering of that capacity type across every instance type.
fn choose_launch(
    types: &[Arc<InstanceType>],
    requirements: &Requirements,
    zone_key: Symbol,
    ct_key: Symbol,
    reserved_first: bool,
    spot: Symbol,
    reservations: &mut HashMap<Symbol, i64>,
) -> Option<Launch> {
    let allowed = |o: &Offering| {
        o.available && requirements.allows(zone_key, o.zone) && requirements.allows(ct_key, o.capacity_type)
    };
    if reserved_first {
        let mut best: Option<(&Arc<InstanceType>, &Offering)> = None;
        for it in types {
            for o in it.offerings.iter().filter(|o| allowed(o)) {
                let Some(id) = o.reservation_id else { continue };
                let left = *reservations
                    .entry(id)
                    .or_insert(o.reservation_capacity.unwrap_or(0));
                if left > 0 && best.is_none_or(|(_, b)| o.price < b.price) {
                    best = Some((it, o));
                }
            }
        }
        if let Some((it, o)) = best {
            if let Some(id) = o.reservation_id {
                *reservations.entry(id).or_insert(0) -= 1;
            }
            return Some(Launch {
                instance_type: it.clone(),
                offering: o.clone(),
            });
        }
    }
    // Then spot before on-demand, as the AWS launch does, cheapest within the capacity type.
    let mut best: Option<(&Arc<InstanceType>, &Offering)> = None;
    for it in types {
        for o in it
            .offerings
            .iter()
            .filter(|o| allowed(o) && o.reservation_id.is_none())
        {
            let better = match best {
                None => true,
                Some((_, b)) => {
                    let (os, bs) = (o.capacity_type == spot, b.capacity_type == spot);
                    (os && !bs) || (os == bs && o.price < b.price)
                }
            };
            if better {
                best = Some((it, o));
            }
        }
    }
    best.map(|(it, o)| Launch {
        instance_type: it.clone(),
        offering: o.clone(),
    })
}
