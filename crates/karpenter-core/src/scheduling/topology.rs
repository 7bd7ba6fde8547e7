//! Topology: pod counts per domain for every topology spread constraint and pod (anti-)affinity term in play,
//! and the domain requirements a pod must add to be placed on a node.
//!
//! Semantics follow upstream Karpenter's topology groups:
//! - spread: a domain may take the pod while `count + (1 if the pod selects itself) - min <= maxSkew`, where min is
//!   over the domains the constraint counts ([`spread_domains`]: those of the NodePools and nodes its
//!   nodeAffinityPolicy and nodeTaintsPolicy admit), 0 for hostname since a new node is always possible, and 0
//!   when fewer domains than minDomains are counted; the least-loaded allowed domain is chosen, pinning the node;
//! - affinity: only domains already holding a matching pod, or any domain for the first of a self-selecting group;
//! - anti-affinity: only domains holding no matching pod; and the inverse: a pod matching the selector of another
//!   pod's required anti-affinity stays out of the domains that pod is in;
//! - a placed pod is counted in a domain only once its node is pinned to one (anti-affinity blocks every domain
//!   the node might still land in).

use std::collections::HashMap;

use crate::requirements::{Requirement, Requirements, Symbol, WellKnownKeys};

use super::{
    nodes::{ExistingNode, NodePoolTemplate},
    pod::{AffinityTerm, LabelSelector, Labels, NamespaceScope, SpreadConstraint, Taint, Toleration},
};

mod spread_domains;

pub use spread_domains::NodeFilter;
use spread_domains::{KeyDomains, discover_all};

/// What a topology group enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupKind {
    Spread {
        max_skew: u32,
        min_domains: Option<u32>,
    },
    Affinity,
    /// `required`: from required terms (enforced symmetrically against matching pods) or preferred ones.
    AntiAffinity {
        required: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct GroupKey {
    kind: GroupKind,
    key: Symbol,
    selector: LabelSelector,
    namespaces: NamespaceScope,
    filter: NodeFilter,
}

/// A node's place in the hostname tables: existing nodes first, then the NodeClaims a simulation opens. Each
/// node is its own hostname domain, so hostname counts are a dense vector indexed by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Host(pub u32);

/// Pod counts per domain: a dense table for keys with a known set of domains (zones, capacity types), another
/// indexed by [`Host`] for hostnames.
#[derive(Debug, Clone, Default)]
struct Counts {
    by_host: Vec<u32>,
    /// How many NodeClaim hosts (those at or past `Topology::first_claim_host`) hold at least one pod.
    occupied_claim_hosts: u32,
    /// Parallel to `Topology::universe(key)`.
    dense: Vec<u32>,
    total: u64,
}

/// One group of pods counted together.
#[derive(Debug, Clone)]
pub struct TopologyGroup {
    pub kind: GroupKind,
    pub key: Symbol,
    pub selector: LabelSelector,
    pub namespaces: NamespaceScope,
    /// Spread constraints only: the nodes whose pods count.
    pub filter: NodeFilter,
    /// Spread constraints only: which domains of the key the constraint counts (parallel to the key's universe);
    /// `None` when it counts all of them.
    counted: Option<Vec<bool>>,
    counts: Counts,
    /// Anti-affinity only: where the pods owning this term are.
    owners: Counts,
}

/// Why a pod's topology constraints rule a node out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopologyError {
    Spread { key: Symbol },
    Affinity { key: Symbol },
    AntiAffinity { key: Symbol },
    InverseAntiAffinity { key: Symbol },
}

impl TopologyError {
    pub fn explain(&self, resolve: impl Fn(Symbol) -> String) -> String {
        match self {
            Self::Spread { key } => format!("topology spread on {} would exceed maxSkew", resolve(*key)),
            Self::Affinity { key } => format!(
                "no domain of {} holds a pod its pod affinity selects",
                resolve(*key)
            ),
            Self::AntiAffinity { key } => format!(
                "every allowed {} domain holds a pod its anti-affinity selects",
                resolve(*key)
            ),
            Self::InverseAntiAffinity { key } => {
                format!(
                    "another pod's required anti-affinity on {} excludes it",
                    resolve(*key)
                )
            }
        }
    }
}

/// The topology groups of one simulation.
#[derive(Debug, Clone)]
pub struct Topology<'a> {
    hostname_key: Option<Symbol>,
    groups: Vec<TopologyGroup>,
    index: HashMap<GroupKey, usize>,
    /// Known domains per non-hostname key, and the NodePools providing each.
    universes: HashMap<Symbol, KeyDomains>,
    /// Hosts from this index on are NodeClaims opened by the simulation (existing nodes come first).
    first_claim_host: u32,
    /// The simulation's NodePools and nodes, whose domains spread constraints count as their policies admit them.
    templates: &'a [NodePoolTemplate],
    existing: &'a [ExistingNode],
    /// Keys a NodeClaim may leave undefined and still match a spread constraint's node affinity.
    well_known: &'a WellKnownKeys,
    /// No key: a node's labels are all it has.
    labels_only: WellKnownKeys,
}

/// The groups one pod owns, in the order its relaxation state lists its constraints.
#[derive(Debug, Clone, Default)]
pub struct PodGroups {
    /// (group, hard) per spread constraint.
    pub spread: Vec<(usize, bool)>,
    /// Required affinity terms, then preferred ones heaviest first.
    pub affinity: Vec<usize>,
    /// Required anti-affinity terms, then preferred ones heaviest first.
    pub anti_affinity: Vec<usize>,
    /// Groups whose counts this pod adds to when placed.
    pub counted_by: Vec<usize>,
    /// Required anti-affinity groups of other pods that select this pod.
    pub inverse: Vec<usize>,
}

impl<'a> Topology<'a> {
    /// The topology of a simulation over `templates` and `existing` nodes. `keys`: the non-hostname keys the pods'
    /// constraints use; every domain each can take is discovered from the NodePools' instance types and the nodes.
    /// Hosts from `existing.len()` on are the NodeClaims the simulation opens.
    pub fn new(
        hostname_key: Symbol,
        keys: &[Symbol],
        templates: &'a [NodePoolTemplate],
        existing: &'a [ExistingNode],
        well_known: &'a WellKnownKeys,
    ) -> Self {
        Self {
            hostname_key: Some(hostname_key),
            groups: Vec::new(),
            index: HashMap::new(),
            universes: discover_all(keys, templates, existing),
            first_claim_host: u32::try_from(existing.len()).unwrap_or(u32::MAX),
            templates,
            existing,
            well_known,
            labels_only: WellKnownKeys::none(),
        }
    }

    fn is_host(&self, key: Symbol) -> bool {
        self.hostname_key == Some(key)
    }

    /// The known domains of a key (empty for hostname).
    pub fn universe(&self, key: Symbol) -> &[Symbol] {
        self.universes.get(&key).map_or(&[], |u| u.domains.as_slice())
    }

    fn group(
        &mut self,
        kind: GroupKind,
        key: Symbol,
        selector: &LabelSelector,
        namespaces: &NamespaceScope,
        filter: NodeFilter,
    ) -> usize {
        let gk = GroupKey {
            kind,
            key,
            selector: selector.clone(),
            namespaces: namespaces.clone(),
            filter,
        };
        if let Some(&i) = self.index.get(&gk) {
            return i;
        }
        let dense = vec![0; self.universe(key).len()];
        let counts = Counts {
            dense: dense.clone(),
            ..Counts::default()
        };
        let counted = match (kind, self.universes.get(&key)) {
            (GroupKind::Spread { .. }, Some(u)) => {
                u.counted(key, &gk.filter, self.templates, self.existing, self.well_known)
            }
            _ => None,
        };
        self.groups.push(TopologyGroup {
            kind,
            key,
            selector: selector.clone(),
            namespaces: namespaces.clone(),
            filter: gk.filter.clone(),
            counted,
            counts,
            owners: Counts {
                dense,
                ..Counts::default()
            },
        });
        self.index.insert(gk, self.groups.len() - 1);
        self.groups.len() - 1
    }

    /// Registers a pod's constraints and returns its groups. Call for every pending pod (and for bound pods with
    /// anti-affinity, so their terms repel matching pods) before [`Topology::link`].
    /// `node_affinity` (the pod's node selector intersected with each required node-affinity term, or alone when
    /// there is none) and `tolerations` are the pod's, for the spread constraints' node filters.
    pub fn register(
        &mut self,
        namespace: Symbol,
        node_affinity: &[Requirements],
        tolerations: &[Toleration],
        spread: &[SpreadConstraint],
        affinity: impl Iterator<Item = (AffinityTerm, bool)>,
        anti_affinity: impl Iterator<Item = (AffinityTerm, bool)>,
    ) -> PodGroups {
        let own_ns = NamespaceScope::Only(vec![namespace]);
        let mut groups = PodGroups::default();
        for s in spread {
            let kind = GroupKind::Spread {
                max_skew: s.max_skew,
                min_domains: s.min_domains,
            };
            let filter = NodeFilter {
                affinity: s.honor_node_affinity.then(|| node_affinity.to_vec()),
                tolerations: s.honor_node_taints.then(|| tolerations.to_vec()),
            };
            groups.spread.push((
                self.group(kind, s.topology_key, &s.selector, &own_ns, filter),
                s.hard,
            ));
        }
        for (term, _) in affinity {
            let group = self.group(
                GroupKind::Affinity,
                term.topology_key,
                &term.selector,
                &term.namespaces,
                NodeFilter::default(),
            );
            groups.affinity.push(group);
        }
        for (term, required) in anti_affinity {
            let kind = GroupKind::AntiAffinity { required };
            let group = self.group(
                kind,
                term.topology_key,
                &term.selector,
                &term.namespaces,
                NodeFilter::default(),
            );
            groups.anti_affinity.push(group);
        }
        groups
    }

    /// Fills in which groups count a pod and which required anti-affinity terms repel it. Call after every pod
    /// has been registered.
    pub fn link(&self, groups: &mut PodGroups, namespace: Symbol, labels: &Labels) {
        groups.counted_by.clear();
        groups.inverse.clear();
        for (i, g) in self.groups.iter().enumerate() {
            if g.namespaces.contains(namespace) && g.selector.matches(labels) {
                groups.counted_by.push(i);
                if g.kind == (GroupKind::AntiAffinity { required: true }) {
                    groups.inverse.push(i);
                }
            }
        }
    }

    pub fn groups(&self) -> &[TopologyGroup] {
        &self.groups
    }

    /// Group `g`'s maxSkew when it is a hostname spread constraint, the one kind that rules a NodeClaim out by its
    /// own count alone (see [`Self::host_rejection`]).
    pub fn host_spread_skew(&self, g: usize) -> Option<u32> {
        match self.groups[g].kind {
            GroupKind::Spread { max_skew, .. } if self.is_host(self.groups[g].key) => Some(max_skew),
            _ => None,
        }
    }

    /// For a pod affinity group `g` on a key other than hostname: the domains a node pinned to one value of the
    /// key must be in for a pod of `namespace` with `labels` and node requirements `pod_reqs` to join it (as
    /// [`Self::requirements_for`] decides), with the key. A node pinned elsewhere is ruled out; `None` for other
    /// groups.
    pub fn affinity_domains(
        &self,
        g: usize,
        namespace: Symbol,
        labels: &Labels,
        pod_reqs: &Requirements,
    ) -> Option<(Symbol, Vec<Symbol>)> {
        let key = self.non_host_affinity_key(g)?;
        let group = &self.groups[g];
        let universe = self.universe(key);
        let pod_allows = |d: Symbol| pod_reqs.get(group.key).is_none_or(|r| r.has(d));
        let occupied = self.occupied_domains(group, pod_reqs);
        let allowed = if !occupied.is_empty() {
            occupied
        } else if Self::selects(group, namespace, labels) {
            // The first pod of a self-selecting group may start it in any domain the pod allows.
            universe.iter().copied().filter(|d| pod_allows(*d)).collect()
        } else {
            Vec::new()
        };
        Some((key, allowed))
    }

    /// The key of pod affinity group `g` when it is not hostname (nodes pinned to one of its values can be
    /// ruled out by [`Self::affinity_domains`]).
    pub fn non_host_affinity_key(&self, g: usize) -> Option<Symbol> {
        let group = &self.groups[g];
        (group.kind == GroupKind::Affinity && !self.is_host(group.key)).then_some(group.key)
    }

    /// How many pods group `g` counts on the node `host`.
    pub fn host_count_in(&self, g: usize, host: Host) -> u32 {
        Self::host_count(&self.groups[g].counts, host)
    }

    /// Whether group `g` counts a pod of `namespace` with `labels` (so the pod adds one to its own spread).
    pub fn group_selects(&self, g: usize, namespace: Symbol, labels: &Labels) -> bool {
        Self::selects(&self.groups[g], namespace, labels)
    }

    #[inline]
    fn host_count(counts: &Counts, host: Host) -> u32 {
        counts.by_host.get(host.0 as usize).copied().unwrap_or(0)
    }

    fn bump_host(counts: &mut Counts, host: Host, first_claim_host: u32) {
        let i = host.0 as usize;
        if counts.by_host.len() <= i {
            counts.by_host.resize(i + 1, 0);
        }
        if counts.by_host[i] == 0 && host.0 >= first_claim_host {
            counts.occupied_claim_hosts += 1;
        }
        counts.by_host[i] += 1;
        counts.total += 1;
    }

    /// True when hostname anti-affinity (the pod's own, or another pod's that selects it) rules out every one
    /// of the `open_claims` NodeClaims the simulation has opened, so none needs trying.
    pub fn blocks_every_claim(
        &self,
        anti_affinity: impl Iterator<Item = usize>,
        inverse: &[usize],
        open_claims: usize,
    ) -> bool {
        let open = u32::try_from(open_claims).unwrap_or(u32::MAX);
        if open == 0 {
            return false;
        }
        let full = |c: &Counts| c.occupied_claim_hosts >= open;
        anti_affinity
            .map(|g| &self.groups[g])
            .any(|g| self.is_host(g.key) && full(&g.counts))
            || inverse
                .iter()
                .map(|&g| &self.groups[g])
                .any(|g| self.is_host(g.key) && full(&g.owners))
    }

    fn bump(universe: &[Symbol], counts: &mut Counts, domain: Symbol) {
        if let Ok(i) = universe.binary_search(&domain) {
            counts.dense[i] += 1;
            counts.total += 1;
        }
    }

    /// The domains a node with requirements `node` might be in for a non-hostname `key`.
    fn node_domains(&self, key: Symbol, node: &Requirements) -> Vec<Symbol> {
        match node.get(key) {
            None => self.universe(key).to_vec(),
            Some(r) => self.universe(key).iter().copied().filter(|d| r.has(*d)).collect(),
        }
    }

    /// Records a placed (or already bound) pod: its counts, and where it is for its own anti-affinity terms.
    /// `taints` are the node's, for the spread constraints' node filters.
    pub fn record(&mut self, groups: &PodGroups, node: &Requirements, taints: &[Taint], host: Host) {
        self.record_parts(&groups.counted_by, &groups.anti_affinity, node, taints, host);
    }

    /// [`Topology::record`] for a pod whose groups are held apart: `counted_by` (from [`Topology::link`]) and
    /// its own `anti_affinity` groups.
    pub fn record_parts(
        &mut self,
        counted_by: &[usize],
        anti_affinity: &[usize],
        node: &Requirements,
        taints: &[Taint],
        host: Host,
    ) {
        let on_claim = host.0 >= self.first_claim_host;
        for &g in counted_by {
            // A NodeClaim's instance type is not chosen yet, so it may leave the well-known keys undefined.
            let allow_undefined = if on_claim {
                self.well_known
            } else {
                &self.labels_only
            };
            if self.groups[g].filter.admits(node, taints, allow_undefined) {
                self.record_into(g, node, host, false);
            }
        }
        for &g in anti_affinity {
            self.record_into(g, node, host, true);
        }
    }

    fn record_into(&mut self, g: usize, node: &Requirements, host: Host, owner: bool) {
        let key = self.groups[g].key;
        if self.is_host(key) {
            let first_claim_host = self.first_claim_host;
            let group = &mut self.groups[g];
            let counts = if owner {
                &mut group.owners
            } else {
                &mut group.counts
            };
            Self::bump_host(counts, host, first_claim_host);
            return;
        }
        let anti = matches!(self.groups[g].kind, GroupKind::AntiAffinity { .. });
        let domains: Vec<Symbol> = match node.get(key).and_then(|r| r.single_value()) {
            Some(d) => vec![d],
            // Anti-affinity must block every domain the node could still land in; the others count only a known
            // domain.
            None if anti => self.node_domains(key, node),
            None => Vec::new(),
        };
        if domains.is_empty() {
            return;
        }
        // Borrow the universe and the group apart rather than copying the universe on every placement.
        let universe = self.universes.get(&key).map_or(&[][..], |u| u.domains.as_slice());
        let group = &mut self.groups[g];
        let counts = if owner {
            &mut group.owners
        } else {
            &mut group.counts
        };
        for d in domains {
            Self::bump(universe, counts, d);
        }
    }

    /// The requirements a pod must add to land on a node described by `node` (already intersected with the
    /// pod's own requirements) with hostname `host`, given the constraints it honours now. `pod_reqs` is the
    /// pod's own node requirements (for nodeAffinityPolicy Honor) and `self_labels`/`namespace` say whether it
    /// selects itself.
    #[allow(clippy::too_many_arguments)]
    pub fn requirements_for(
        &self,
        spread: impl Iterator<Item = usize>,
        affinity: impl Iterator<Item = usize>,
        anti_affinity: impl Iterator<Item = usize>,
        inverse: &[usize],
        namespace: Symbol,
        labels: &Labels,
        pod_reqs: &Requirements,
        node: &Requirements,
        host: Host,
    ) -> Result<Requirements, TopologyError> {
        let mut out = Requirements::new();
        for g in spread {
            let group = &self.groups[g];
            if let Some(r) = self.next_spread_domain(group, namespace, labels, node, host)? {
                out.add(r);
            }
        }
        for g in affinity {
            let group = &self.groups[g];
            if let Some(r) = self.next_affinity_domain(group, namespace, labels, pod_reqs, node, host)? {
                out.add(r);
            }
        }
        for g in anti_affinity {
            let group = &self.groups[g];
            if let Some(r) = self.allowed_without(
                group,
                &group.counts,
                node,
                host,
                TopologyError::AntiAffinity { key: group.key },
            )? {
                out.add(r);
            }
        }
        for &g in inverse {
            let group = &self.groups[g];
            let err = TopologyError::InverseAntiAffinity { key: group.key };
            if let Some(r) = self.allowed_without(group, &group.owners, node, host, err)? {
                out.add(r);
            }
        }
        Ok(out)
    }

    /// A cheap first check on hostname-keyed constraints alone: true when the node `host` is ruled out whatever
    /// its other requirements (anti-affinity or inverse anti-affinity to a pod on it, a full hostname spread).
    pub fn host_rejection(
        &self,
        spread: impl Iterator<Item = usize>,
        anti_affinity: impl Iterator<Item = usize>,
        inverse: &[usize],
        namespace: Symbol,
        labels: &Labels,
        host: Host,
    ) -> Option<TopologyError> {
        for g in spread {
            let group = &self.groups[g];
            if let GroupKind::Spread { max_skew, .. } = group.kind
                && self.is_host(group.key)
            {
                let own = u32::from(Self::selects(group, namespace, labels));
                if Self::host_count(&group.counts, host) + own > max_skew {
                    return Some(TopologyError::Spread { key: group.key });
                }
            }
        }
        for g in anti_affinity {
            let group = &self.groups[g];
            if self.is_host(group.key) && Self::host_count(&group.counts, host) > 0 {
                return Some(TopologyError::AntiAffinity { key: group.key });
            }
        }
        inverse.iter().find_map(|&g| {
            let group = &self.groups[g];
            (self.is_host(group.key) && Self::host_count(&group.owners, host) > 0)
                .then_some(TopologyError::InverseAntiAffinity { key: group.key })
        })
    }

    fn selects(group: &TopologyGroup, namespace: Symbol, labels: &Labels) -> bool {
        group.namespaces.contains(namespace) && group.selector.matches(labels)
    }

    /// The domain a spread constraint puts the pod in on a node described by `node` (already narrowed by
    /// everything the pod requires, its preferences and volumes included), or why none is allowed. The minimum is
    /// over the domains the constraint counts, which the pod's preferences and volumes do not narrow: they limit
    /// where this pod goes, not where the pods it is spread against may be.
    fn next_spread_domain(
        &self,
        group: &TopologyGroup,
        namespace: Symbol,
        labels: &Labels,
        node: &Requirements,
        host: Host,
    ) -> Result<Option<Requirement>, TopologyError> {
        let GroupKind::Spread {
            max_skew,
            min_domains,
        } = group.kind
        else {
            return Ok(None);
        };
        let err = TopologyError::Spread { key: group.key };
        let own = u32::from(Self::selects(group, namespace, labels));
        if self.is_host(group.key) {
            // A new node is always possible, so the minimum over hostname domains is 0.
            let count = Self::host_count(&group.counts, host);
            return if count + own <= max_skew {
                Ok(None)
            } else {
                Err(err)
            };
        }
        let universe = self.universe(group.key);
        let counted = |i: usize| group.counted.as_ref().is_none_or(|c| c[i]);
        let mut eligible = 0u32;
        let mut min = u32::MAX;
        for i in (0..universe.len()).filter(|&i| counted(i)) {
            eligible += 1;
            min = min.min(group.counts.dense[i]);
        }
        if eligible == 0 {
            return Err(err);
        }
        // Without minDomains the constraint behaves as with 1, which any counted domain satisfies.
        if min_domains.is_some_and(|m| eligible < m) {
            min = 0;
        }
        let node_req = node.get(group.key);
        let mut best: Option<(u32, Symbol)> = None;
        for (i, &d) in universe.iter().enumerate() {
            if !counted(i) || !node_req.is_none_or(|r| r.has(d)) {
                continue;
            }
            let count = group.counts.dense[i] + own;
            if count.saturating_sub(min) <= max_skew && best.is_none_or(|(c, _)| count < c) {
                best = Some((count, d));
            }
        }
        match best {
            Some((_, d)) => Ok(Some(Requirement::in_values(group.key, [d]))),
            None => Err(err),
        }
    }

    /// The domains of an affinity group's key that already hold a pod it selects and that `pod_reqs` allow.
    fn occupied_domains(&self, group: &TopologyGroup, pod_reqs: &Requirements) -> Vec<Symbol> {
        let pod_allows = |d: Symbol| pod_reqs.get(group.key).is_none_or(|r| r.has(d));
        self.universe(group.key)
            .iter()
            .enumerate()
            .filter(|(i, d)| group.counts.dense[*i] > 0 && pod_allows(**d))
            .map(|(_, d)| *d)
            .collect()
    }

    fn next_affinity_domain(
        &self,
        group: &TopologyGroup,
        namespace: Symbol,
        labels: &Labels,
        pod_reqs: &Requirements,
        node: &Requirements,
        host: Host,
    ) -> Result<Option<Requirement>, TopologyError> {
        let err = TopologyError::Affinity { key: group.key };
        let self_selecting = Self::selects(group, namespace, labels);
        if self.is_host(group.key) {
            if Self::host_count(&group.counts, host) > 0 {
                return Ok(None);
            }
            // The first pod of a self-selecting group may start it anywhere.
            return if group.counts.total == 0 && self_selecting {
                Ok(None)
            } else {
                Err(err)
            };
        }
        let universe = self.universe(group.key);
        let pod_allows = |d: Symbol| pod_reqs.get(group.key).is_none_or(|r| r.has(d));
        let node_allows = |d: Symbol| node.get(group.key).is_none_or(|r| r.has(d));
        let occupied = self.occupied_domains(group, pod_reqs);
        let options: Vec<Symbol> = if !occupied.is_empty() {
            occupied.into_iter().filter(|d| node_allows(*d)).collect()
        } else if self_selecting {
            // Bootstrap: prefer a domain the node is already in, else any the pod allows.
            universe
                .iter()
                .copied()
                .find(|d| pod_allows(*d) && node_allows(*d))
                .into_iter()
                .collect()
        } else {
            Vec::new()
        };
        if options.is_empty() {
            Err(err)
        } else {
            Ok(Some(Requirement::in_values(group.key, options)))
        }
    }

    /// Domains holding no pod counted in `counts`.
    fn allowed_without(
        &self,
        group: &TopologyGroup,
        counts: &Counts,
        node: &Requirements,
        host: Host,
        err: TopologyError,
    ) -> Result<Option<Requirement>, TopologyError> {
        if counts.total == 0 {
            return Ok(None);
        }
        if self.is_host(group.key) {
            return if Self::host_count(counts, host) == 0 {
                Ok(None)
            } else {
                Err(err)
            };
        }
        let universe = self.universe(group.key);
        let blocked: Vec<Symbol> = universe
            .iter()
            .enumerate()
            .filter(|(i, _)| counts.dense[*i] > 0)
            .map(|(_, d)| *d)
            .collect();
        let node_req = node.get(group.key);
        if universe
            .iter()
            .enumerate()
            .all(|(i, d)| counts.dense[i] > 0 || !node_req.is_none_or(|r| r.has(*d)))
        {
            return Err(err);
        }
        Ok(Some(Requirement::not_in(group.key, blocked)))
    }
}
