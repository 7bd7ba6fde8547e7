//! The domains a topology spread constraint counts. kube-scheduler counts the domains of the nodes that its
//! nodeAffinityPolicy and nodeTaintsPolicy admit; the simulation also counts the domains the NodePools could launch
//! a node into (upstream's domain groups), admitted by the same policies, so an empty zone a new node could open
//! holds the global minimum down just as an empty node there would.

use std::collections::HashMap;

use crate::requirements::{Requirements, Symbol, WellKnownKeys};

use super::super::{
    nodes::{ExistingNode, NodePoolTemplate},
    pod::{Taint, Toleration, untolerated},
};

/// Which nodes and NodePools a spread constraint counts, as its policies say. The defaults of the API
/// (nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore) set only `affinity`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NodeFilter {
    /// nodeAffinityPolicy Honor: the pod's node selector intersected with each of its required node-affinity terms
    /// (ORed, as the terms are); a node or NodePool counts when it is compatible with one of them. Preferred terms
    /// and volume topology are not part of it: they steer where the pod goes, not which domains exist.
    pub affinity: Option<Vec<Requirements>>,
    /// nodeTaintsPolicy Honor: the pod's tolerations; a node or NodePool counts only when they tolerate its taints.
    pub tolerations: Option<Vec<Toleration>>,
}

impl NodeFilter {
    /// Whether pods on a node described by `node` (its labels, or a NodeClaim's requirements) with `taints` count.
    /// `allow_undefined`: the keys `node` may leave undefined and still match (the well-known keys for a NodeClaim,
    /// whose instance type is not chosen yet; none for a node, whose labels are all it has).
    pub fn admits(&self, node: &Requirements, taints: &[Taint], allow_undefined: &WellKnownKeys) -> bool {
        self.tolerates(taints)
            && self
                .affinity
                .as_ref()
                .is_none_or(|terms| terms.iter().any(|t| node.is_compatible(t, allow_undefined)))
    }

    /// Whether domain `domain` of `key`, which a node or NodePool described by `node` with `taints` provides,
    /// counts: the taints are tolerated (Honor) and one term both allows the domain and admits `node`.
    fn admits_domain(
        &self,
        key: Symbol,
        domain: Symbol,
        node: &Requirements,
        taints: &[Taint],
        allow_undefined: &WellKnownKeys,
    ) -> bool {
        self.tolerates(taints)
            && self.affinity.as_ref().is_none_or(|terms| {
                terms
                    .iter()
                    .any(|t| t.allows(key, domain) && node.is_compatible(t, allow_undefined))
            })
    }

    fn tolerates(&self, taints: &[Taint]) -> bool {
        self.tolerations
            .as_ref()
            .is_none_or(|t| untolerated(t, taints, false).is_none())
    }
}

/// The domains one topology key can take and which NodePools provide each.
#[derive(Debug, Clone, Default)]
pub struct KeyDomains {
    /// Sorted, deduplicated.
    pub domains: Vec<Symbol>,
    /// Per NodePool template, the indices into `domains` it can launch a node into.
    by_template: Vec<Vec<u32>>,
}

impl KeyDomains {
    /// The domains of `key`: the values the NodePools' instance types offer within each NodePool's requirements
    /// (or, for a key only the NodePool defines, its own values), and the values nodes that stay carry.
    pub fn discover(key: Symbol, templates: &[NodePoolTemplate], existing: &[ExistingNode]) -> Self {
        let per_template: Vec<Vec<Symbol>> = templates.iter().map(|t| template_domains(key, t)).collect();
        let mut domains: Vec<Symbol> = per_template.iter().flatten().copied().collect();
        domains.extend(
            existing
                .iter()
                .filter(|n| !n.leaving)
                .filter_map(|n| n.requirements.single_value(key)),
        );
        domains.sort_unstable();
        domains.dedup();
        let by_template = per_template
            .iter()
            .map(|values| {
                values
                    .iter()
                    .filter_map(|v| domains.binary_search(v).ok())
                    .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
                    .collect()
            })
            .collect();
        Self { domains, by_template }
    }

    /// Which of the domains a spread constraint with `filter` counts, parallel to `domains`; `None` when all do.
    /// A domain counts when a NodePool or a node that stays provides it and the filter admits that provider.
    pub fn counted(
        &self,
        key: Symbol,
        filter: &NodeFilter,
        templates: &[NodePoolTemplate],
        existing: &[ExistingNode],
        well_known: &WellKnownKeys,
    ) -> Option<Vec<bool>> {
        if *filter == NodeFilter::default() {
            return None;
        }
        let mut counted = vec![false; self.domains.len()];
        for (template, indices) in templates.iter().zip(&self.by_template) {
            for &i in indices {
                let i = i as usize;
                counted[i] = counted[i]
                    || filter.admits_domain(
                        key,
                        self.domains[i],
                        &template.requirements,
                        &template.taints,
                        well_known,
                    );
            }
        }
        // Nodes matter only for the domains no admitted NodePool provides, which is rarely any: most clusters'
        // NodePools cover every zone their nodes are in.
        if counted.contains(&false) {
            let labels_only = WellKnownKeys::none();
            for node in existing.iter().filter(|n| !n.leaving) {
                let Some(domain) = node.requirements.single_value(key) else {
                    continue;
                };
                if let Ok(i) = self.domains.binary_search(&domain)
                    && !counted[i]
                {
                    counted[i] =
                        filter.admits_domain(key, domain, &node.requirements, &node.taints, &labels_only);
                }
            }
        }
        (!counted.iter().all(|&c| c)).then_some(counted)
    }
}

/// The values of `key` a NodePool can launch a node with.
fn template_domains(key: Symbol, template: &NodePoolTemplate) -> Vec<Symbol> {
    let template_req = template.requirements.get(key);
    let mut values = Vec::new();
    for it in &template.instance_types {
        if let Some(r) = it.requirements.get(key).filter(|r| !r.is_complement()) {
            values.extend(
                r.values()
                    .iter()
                    .copied()
                    .filter(|v| template_req.is_none_or(|tr| tr.has(*v))),
            );
        }
    }
    if let Some(tr) = template_req.filter(|r| !r.is_complement()) {
        // A key only the NodePool defines (a custom label) takes the NodePool's values.
        if template.instance_types.iter().all(|it| !it.requirements.has(key)) {
            values.extend(tr.values().iter().copied());
        }
    }
    values
}

/// The domains of every key, discovered once per simulation.
pub fn discover_all(
    keys: &[Symbol],
    templates: &[NodePoolTemplate],
    existing: &[ExistingNode],
) -> HashMap<Symbol, KeyDomains> {
    keys.iter()
        .map(|&k| (k, KeyDomains::discover(k, templates, existing)))
        .collect()
}
