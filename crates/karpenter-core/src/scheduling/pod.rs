//! The compact pod the scheduler works on: requests as a resource vector, node requirements as interned
//! requirements (required terms as alternatives), tolerations, topology constraints and the preferences that may
//! be relaxed one at a time, in upstream's order.

use std::sync::Arc;

use crate::{
    requirements::{Requirements, Symbol},
    resources::Resources,
};

/// A pod's labels (or a namespace's), sorted by key. Immutable and cheap to clone, so the replicas of a workload
/// (thousands of bound pods in a large cluster) can share one copy.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Labels(Arc<[(Symbol, Symbol)]>);

impl Default for Labels {
    fn default() -> Self {
        Self(Arc::new([]))
    }
}

impl Labels {
    pub fn new(mut pairs: Vec<(Symbol, Symbol)>) -> Self {
        pairs.sort_unstable_by_key(|(k, _)| *k);
        pairs.dedup_by_key(|(k, _)| *k);
        Self(pairs.into())
    }

    pub fn get(&self, key: Symbol) -> Option<Symbol> {
        self.0
            .binary_search_by_key(&key, |(k, _)| *k)
            .ok()
            .map(|i| self.0[i].1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (Symbol, Symbol)> + '_ {
        self.0.iter().copied()
    }
}

/// The operators of a label selector expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// One `matchExpressions` entry (`matchLabels` entries become `In` with one value).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SelectorExpression {
    pub key: Symbol,
    pub operator: SelectorOperator,
    /// Sorted.
    pub values: Vec<Symbol>,
}

/// A label selector. An empty selector matches everything; `None` in a term (no selector) matches nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    pub expressions: Vec<SelectorExpression>,
}

impl LabelSelector {
    pub fn matches(&self, labels: &Labels) -> bool {
        self.expressions.iter().all(|e| {
            let value = labels.get(e.key);
            match e.operator {
                SelectorOperator::In => value.is_some_and(|v| e.values.binary_search(&v).is_ok()),
                SelectorOperator::NotIn => value.is_none_or(|v| e.values.binary_search(&v).is_err()),
                SelectorOperator::Exists => value.is_some(),
                SelectorOperator::DoesNotExist => value.is_none(),
            }
        })
    }
}

/// Which namespaces a pod-affinity term or spread constraint counts pods in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NamespaceScope {
    /// These namespaces (sorted).
    Only(Vec<Symbol>),
    /// Every namespace (an empty namespaceSelector).
    All,
}

impl NamespaceScope {
    pub fn contains(&self, namespace: Symbol) -> bool {
        match self {
            Self::Only(list) => list.binary_search(&namespace).is_ok(),
            Self::All => true,
        }
    }
}

/// The effect of a taint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

/// A node taint.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Taint {
    pub key: Symbol,
    pub value: Option<Symbol>,
    pub effect: TaintEffect,
}

/// A pod toleration.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// `None` with `exists` tolerates every key.
    pub key: Option<Symbol>,
    /// Operator Exists (any value) instead of Equal.
    pub exists: bool,
    pub value: Option<Symbol>,
    /// `None` tolerates every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// Whether this toleration tolerates `taint`, as the Kubernetes API defines it.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        match self.key {
            None => self.exists,
            Some(key) if key != taint.key => false,
            Some(_) => self.exists || self.value == taint.value,
        }
    }
}

/// Whether `tolerations` tolerate every taint that keeps pods off a node (NoSchedule and NoExecute; and
/// PreferNoSchedule too while the pod still respects preferences). Returns the first taint not tolerated.
pub fn untolerated<'a>(
    tolerations: &[Toleration],
    taints: &'a [Taint],
    include_prefer: bool,
) -> Option<&'a Taint> {
    taints.iter().find(|t| {
        (t.effect != TaintEffect::PreferNoSchedule || include_prefer)
            && !tolerations.iter().any(|tol| tol.tolerates(t))
    })
}

/// A topology spread constraint, with matchLabelKeys already folded into the selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SpreadConstraint {
    pub topology_key: Symbol,
    pub max_skew: u32,
    pub min_domains: Option<u32>,
    /// DoNotSchedule (true) or ScheduleAnyway (false, a preference).
    pub hard: bool,
    pub selector: LabelSelector,
    /// nodeAffinityPolicy Honor (default): only domains the pod's node requirements allow count.
    pub honor_node_affinity: bool,
    /// nodeTaintsPolicy Honor (default Ignore): only nodes whose taints the pod tolerates count.
    pub honor_node_taints: bool,
}

/// A required (or, with a weight, preferred) pod affinity or anti-affinity term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AffinityTerm {
    pub topology_key: Symbol,
    pub selector: LabelSelector,
    pub namespaces: NamespaceScope,
}

/// A host port a pod binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// 0 for all addresses.
    pub ip: Symbol,
    pub port: u16,
    /// TCP, UDP or SCTP, as a symbol.
    pub protocol: Symbol,
}

impl HostPort {
    /// Two host ports conflict when port and protocol match and either binds all addresses or both bind the same.
    pub fn conflicts(&self, other: &HostPort, wildcard: Symbol) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == wildcard || other.ip == wildcard)
    }
}

/// A pod to place: its id and its constraints. The constraints are shared ([`PodShape`]): the replicas of a
/// workload convert to equal shapes, and a cluster of 150,000 pods then holds a few hundred shapes instead of
/// 150,000 copies. Fields read through `Deref`; writing one (`DerefMut`) copies a shared shape first.
#[derive(Debug, Clone)]
pub struct Pod {
    /// `namespace/name`.
    pub id: String,
    shape: Arc<PodShape>,
}

impl Pod {
    pub fn new(id: impl Into<String>, shape: PodShape) -> Self {
        Self::shared(id, Arc::new(shape))
    }

    /// A pod with a shape other pods may share.
    pub fn shared(id: impl Into<String>, shape: Arc<PodShape>) -> Self {
        Self { id: id.into(), shape }
    }

    pub fn shape(&self) -> &Arc<PodShape> {
        &self.shape
    }
}

impl std::ops::Deref for Pod {
    type Target = PodShape;

    fn deref(&self) -> &PodShape {
        &self.shape
    }
}

impl std::ops::DerefMut for Pod {
    fn deref_mut(&mut self) -> &mut PodShape {
        Arc::make_mut(&mut self.shape)
    }
}

/// A pod's constraints: everything scheduling reads but its id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodShape {
    pub namespace: Symbol,
    pub labels: Labels,
    pub requests: Resources,
    /// The nodeSelector (and anything else every required term must be combined with).
    pub base_requirements: Requirements,
    /// What the pod's volumes require of a node (a bound volume's zone, a StorageClass's allowed topologies).
    /// Kept apart from `base_requirements` because, as upstream's strict pod requirements leave it out, it limits
    /// where the pod may go but not which domains its topology spread counts.
    pub volume_requirements: Requirements,
    /// Required node-affinity terms (ORed); empty when there are none.
    pub required_terms: Vec<Requirements>,
    /// Preferred node-affinity terms, heaviest first.
    pub preferred_terms: Vec<(i32, Requirements)>,
    pub tolerations: Vec<Toleration>,
    pub spread: Vec<SpreadConstraint>,
    pub affinity: Vec<AffinityTerm>,
    pub anti_affinity: Vec<AffinityTerm>,
    /// Preferred pod affinity, heaviest first.
    pub preferred_affinity: Vec<(i32, AffinityTerm)>,
    /// Preferred pod anti-affinity, heaviest first.
    pub preferred_anti_affinity: Vec<(i32, AffinityTerm)>,
    pub host_ports: Vec<HostPort>,
    /// CSI volumes by driver, for per-node attach limits.
    pub csi_volumes: Vec<(Symbol, u32)>,
    pub priority: i32,
}

/// How preferences are treated (the controller's PREFERENCE_POLICY).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PreferencePolicy {
    /// Treat preferences as requirements and relax them one at a time when a pod cannot be placed.
    #[default]
    Respect,
    /// Ignore preferred affinities and ScheduleAnyway spread constraints from the start.
    Ignore,
}

/// The state of one pod's relaxable preferences during a simulation: what is still being honoured.
#[derive(Debug, Clone, Default)]
pub struct Relaxation {
    /// Index of the required node-affinity term in use.
    pub required_term: usize,
    /// Preferred pod-affinity terms dropped so far (the heaviest first).
    pub dropped_affinity: usize,
    pub dropped_anti_affinity: usize,
    pub dropped_preferred_terms: usize,
    /// ScheduleAnyway spread constraints are no longer honoured.
    pub soft_spread_dropped: bool,
    /// PreferNoSchedule taints are tolerated.
    pub prefer_no_schedule_tolerated: bool,
}

impl Relaxation {
    /// The starting point under a policy: everything honoured, or every preference dropped.
    pub fn new(pod: &Pod, policy: PreferencePolicy) -> Self {
        match policy {
            PreferencePolicy::Respect => Self::default(),
            PreferencePolicy::Ignore => Self {
                required_term: 0,
                dropped_affinity: pod.preferred_affinity.len(),
                dropped_anti_affinity: pod.preferred_anti_affinity.len(),
                dropped_preferred_terms: pod.preferred_terms.len(),
                soft_spread_dropped: true,
                prefer_no_schedule_tolerated: true,
            },
        }
    }

    /// Relaxes one more preference in upstream's order: the next required OR term, then preferred pod affinity,
    /// preferred pod anti-affinity, preferred node affinity (heaviest first), ScheduleAnyway spread, then
    /// PreferNoSchedule taints. Returns what was relaxed, or `None` when nothing is left to relax.
    pub fn relax(&mut self, pod: &Pod) -> Option<&'static str> {
        if self.required_term + 1 < pod.required_terms.len() {
            self.required_term += 1;
            return Some("a required node affinity term");
        }
        if self.dropped_affinity < pod.preferred_affinity.len() {
            self.dropped_affinity += 1;
            return Some("a preferred pod affinity term");
        }
        if self.dropped_anti_affinity < pod.preferred_anti_affinity.len() {
            self.dropped_anti_affinity += 1;
            return Some("a preferred pod anti-affinity term");
        }
        if self.dropped_preferred_terms < pod.preferred_terms.len() {
            self.dropped_preferred_terms += 1;
            return Some("a preferred node affinity term");
        }
        if !self.soft_spread_dropped && pod.spread.iter().any(|s| !s.hard) {
            self.soft_spread_dropped = true;
            return Some("ScheduleAnyway topology spread constraints");
        }
        if !self.prefer_no_schedule_tolerated {
            self.prefer_no_schedule_tolerated = true;
            return Some("PreferNoSchedule taints");
        }
        None
    }

    /// The node requirements the pod must meet now: base ∩ volumes ∩ the required term in use ∩ the heaviest
    /// preferred node-affinity term still honoured.
    pub fn requirements(&self, pod: &Pod) -> Requirements {
        let mut reqs = pod.base_requirements.clone();
        if !pod.volume_requirements.is_empty() {
            reqs.intersect_with(&pod.volume_requirements);
        }
        if let Some(term) = pod.required_terms.get(self.required_term) {
            reqs.intersect_with(term);
        }
        if let Some((_, term)) = pod.preferred_terms.get(self.dropped_preferred_terms) {
            reqs.intersect_with(term);
        }
        reqs
    }

    /// Spread constraints honoured now.
    pub fn spread<'a>(&self, pod: &'a Pod) -> impl Iterator<Item = &'a SpreadConstraint> {
        let soft = !self.soft_spread_dropped;
        pod.spread.iter().filter(move |s| s.hard || soft)
    }

    /// Affinity terms honoured now (required, then the preferred ones not dropped).
    pub fn affinity<'a>(&self, pod: &'a Pod) -> impl Iterator<Item = &'a AffinityTerm> {
        pod.affinity.iter().chain(
            pod.preferred_affinity
                .iter()
                .skip(self.dropped_affinity)
                .map(|(_, t)| t),
        )
    }

    /// Anti-affinity terms honoured now.
    pub fn anti_affinity<'a>(&self, pod: &'a Pod) -> impl Iterator<Item = &'a AffinityTerm> {
        pod.anti_affinity.iter().chain(
            pod.preferred_anti_affinity
                .iter()
                .skip(self.dropped_anti_affinity)
                .map(|(_, t)| t),
        )
    }
}
