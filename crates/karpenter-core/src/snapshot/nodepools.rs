//! NodePools as NodeClaim templates (upstream `NewNodeClaimTemplate` and the provisioner's setup):
//!
//! - requirements: the NodePool's (with minValues) ∩ its template labels ∩ `karpenter.sh/nodepool In [name]`;
//! - instance types: the catalog's offered to this NodePool (a provider's catalog is gathered per NodePool, see
//!   [`crate::catalog::CatalogFile::node_pool_types`]), after NodeOverlays, whose requirements intersect those and
//!   that have an available offering they allow, cheapest first;
//! - DaemonSet overhead per instance type: the DaemonSet pods that tolerate the NodePool's taints and whose node
//!   requirements the template and the instance type can both meet;
//! - what is left of `spec.limits`: limits minus the capacity of the NodePool's nodes (with their NodeClaims'
//!   GPUs and other resources not registered yet, until initialized) and in-flight NodeClaims (resources the
//!   limits do not name stay unlimited), with `nodes` counted separately.
//!
//! Static NodePools (`replicas`), NodePools being deleted, NodePools that are not Ready (their `Ready` condition
//! False or Unknown, as the NodePool status controller writes it when the NodeClass is not ready or validation
//! failed; or absent, where [`super::BuildOptions::unevaluated_nodepools`] says so) and NodePools that fail
//! validation are skipped with a note; a pod no NodePool could take says which NodePools were not ready. A
//! NodePool whose node class is not in the snapshot is kept: a snapshot may leave node classes out.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use karpenter_api::{
    common::{ConditionStatus, find_condition},
    label_policy::LabelPolicy,
    labels,
    nodepool::NodePool,
};

use crate::{
    instance_type::InstanceType,
    requirements::{Requirement, Requirements, Symbol, WellKnownKeys},
    resources::Resources,
    scheduling::{ClaimMetadata, NodePoolTemplate},
};

use super::{
    Snapshot,
    context::{Context, describe},
    daemonsets::DaemonPods,
    node_resources::{ResourceField, node_resources},
    nodes::NodeSet,
    overlays::{OverlayCache, Overlays},
    taints::api_taint,
};

/// What a NodePool's nodes and in-flight NodeClaims already take of its limits.
#[derive(Debug, Default, Clone)]
pub(super) struct PoolUsage {
    pub capacity: Resources,
    pub nodes: i64,
}

/// Capacity and count per NodePool, from every Node labelled with it and every NodeClaim of it with no Node yet.
pub(super) fn pool_usage(
    cx: &mut Context,
    snapshot: &Snapshot,
    nodes: &NodeSet<'_>,
    types: &HashMap<&str, &Arc<InstanceType>>,
) -> HashMap<String, PoolUsage> {
    let mut usage: HashMap<String, PoolUsage> = HashMap::new();
    for node in &snapshot.nodes {
        let node_labels = node.metadata.labels.as_ref();
        let Some(pool) = node_labels.and_then(|l| l.get(labels::NODEPOOL_LABEL)) else {
            continue;
        };
        // A GPU not registered yet counts already: the limit is on what was launched.
        let claim = node.metadata.name.as_deref().and_then(|n| nodes.claim_of(n));
        let capacity = node_resources(cx, node, claim, ResourceField::Capacity)
            .or_else(|| node_resources(cx, node, claim, ResourceField::Allocatable))
            .or_else(|| super::nodes::instance_type_of(node_labels, types).map(|it| it.capacity.clone()))
            .unwrap_or_default();
        let u = usage.entry(pool.clone()).or_default();
        u.capacity.add_assign(&capacity);
        u.nodes += 1;
    }
    for claim in &snapshot.node_claims {
        let claim_labels = claim.metadata.labels.as_ref();
        let Some(pool) = claim_labels.and_then(|l| l.get(labels::NODEPOOL_LABEL)) else {
            continue;
        };
        if nodes.has_node(claim) {
            continue;
        }
        let capacity = claim
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .filter(|c| !c.is_empty())
            .and_then(|l| Resources::from_resource_list(l, &mut cx.table).ok())
            .or_else(|| super::nodes::instance_type_of(claim_labels, types).map(|it| it.capacity.clone()))
            .unwrap_or_default();
        let u = usage.entry(pool.clone()).or_default();
        u.capacity.add_assign(&capacity);
        u.nodes += 1;
    }
    usage
}

/// Which interned instance types each NodePool was offered: the catalog's `node_pool_types` carried over to the
/// interned list (a type that could not be read is not in it). A NodePool not listed is offered every type.
#[derive(Debug, Default)]
pub(super) struct PoolOffers(HashMap<String, Vec<bool>>);

impl PoolOffers {
    /// `read[i]` is the catalog index of interned type `i`.
    pub fn new(node_pool_types: &BTreeMap<String, Vec<usize>>, read: &[usize]) -> Self {
        let offers = node_pool_types
            .iter()
            .map(|(pool, indices)| {
                let mut catalog_offered = indices.clone();
                catalog_offered.sort_unstable();
                let offered = read
                    .iter()
                    .map(|i| catalog_offered.binary_search(i).is_ok())
                    .collect();
                (pool.clone(), offered)
            })
            .collect();
        Self(offers)
    }

    /// Whether NodePool `pool` may launch interned type `i`.
    pub fn offers(&self, pool: &str, i: usize) -> bool {
        self.0
            .get(pool)
            .is_none_or(|offered| offered.get(i).copied().unwrap_or(false))
    }
}

/// Everything templates are built from.
pub(super) struct TemplateSources<'a, 's> {
    pub snapshot: &'s Snapshot,
    pub policy: LabelPolicy,
    pub instance_types: &'a [Arc<InstanceType>],
    /// Which of `instance_types` each NodePool is offered.
    pub offers: &'a PoolOffers,
    pub overlays: &'a Overlays<'s>,
    pub daemons: &'a DaemonPods,
    pub usage: &'a HashMap<String, PoolUsage>,
    pub well_known: &'a WellKnownKeys,
    /// See [`super::BuildOptions::unevaluated_nodepools`].
    pub unevaluated_nodepools: bool,
}

/// Why `pool` may not launch NodeClaims for want of readiness, or `None` when it may: its `Ready` condition is
/// False or Unknown (with the condition's reason and message), or absent and `unevaluated` is false.
pub(super) fn not_ready(pool: &NodePool, unevaluated: bool) -> Option<String> {
    let ready = pool
        .status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, "Ready"));
    match ready {
        Some(c) if c.status == ConditionStatus::True => None,
        Some(c) => {
            let mut why = format!("Ready={:?}", c.status);
            if !c.reason.is_empty() {
                why.push_str(&format!(" ({})", c.reason));
            }
            if !c.message.is_empty() {
                why.push_str(&format!(": {}", c.message));
            }
            Some(why)
        }
        None if unevaluated => None,
        None => Some("it has no Ready condition yet".to_string()),
    }
}

/// One template per usable NodePool, with the NodePools' names, and what to tell a pod of each NodePool skipped
/// for not being ready.
pub(super) fn build_templates(
    cx: &mut Context,
    sources: &TemplateSources<'_, '_>,
) -> (Vec<NodePoolTemplate>, Vec<String>, Vec<String>) {
    let mut templates = Vec::with_capacity(sources.snapshot.node_pools.len());
    let mut names = Vec::with_capacity(sources.snapshot.node_pools.len());
    let mut not_ready_pools = Vec::new();
    let mut cache = OverlayCache::new();
    for pool in &sources.snapshot.node_pools {
        if pool.metadata.deletion_timestamp.is_none()
            && !pool.is_static()
            && let Some(why) = not_ready(pool, sources.unevaluated_nodepools)
        {
            let name = pool.metadata.name.as_deref().unwrap_or_default();
            cx.note(
                describe("NodePool", None, Some(name)),
                format!("is not ready ({why}); it launches no NodeClaims"),
            );
            not_ready_pools.push(format!("NodePool {name:?} was skipped: it is not ready ({why})"));
            continue;
        }
        if let Some(t) = template(cx, sources, pool, &mut cache) {
            names.push(t.name.clone());
            templates.push(t);
        }
    }
    (templates, names, not_ready_pools)
}

fn template(
    cx: &mut Context,
    sources: &TemplateSources<'_, '_>,
    pool: &NodePool,
    cache: &mut OverlayCache,
) -> Option<NodePoolTemplate> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let object = describe("NodePool", None, Some(&name));
    if pool.metadata.deletion_timestamp.is_some() {
        cx.note(object, "is being deleted; it launches no NodeClaims");
        return None;
    }
    if pool.is_static() {
        cx.note(
            object,
            "is static (replicas is set); it does not launch NodeClaims for pending pods",
        );
        return None;
    }
    pool_template(cx, sources, pool, cache)
}

/// The template of `pool` whatever kind of NodePool it is: its deletion and static-ness are the caller's to
/// judge (the static capacity controller builds templates of static NodePools here).
pub(super) fn pool_template(
    cx: &mut Context,
    sources: &TemplateSources<'_, '_>,
    pool: &NodePool,
    cache: &mut OverlayCache,
) -> Option<NodePoolTemplate> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let object = describe("NodePool", None, Some(&name));
    if let Err(e) = pool.validate(sources.policy) {
        cx.note(object, format!("{}; not used", e.fields()));
        return None;
    }
    let spec = &pool.spec.template.spec;
    let mut requirements = match Requirements::from_api(&spec.requirements, &mut cx.interner) {
        Ok(r) => r,
        Err(e) => {
            cx.note(object, format!("spec.template.spec.requirements: {e}; not used"));
            return None;
        }
    };
    let labels = pool_labels(cx, pool);
    let pool_side = label_requirements(&labels);
    requirements.intersect_with(&pool_side);

    let taints: Vec<_> = spec
        .taints
        .iter()
        .map(|t| api_taint(t, &mut cx.interner))
        .collect();
    let startup_taints = spec
        .startup_taints
        .iter()
        .map(|t| api_taint(t, &mut cx.interner))
        .collect();

    let candidates = sources
        .overlays
        .apply(&cx.keys, &pool_side, sources.instance_types, cache);
    // Overlays see every type (their cache is by position in the whole list); the NodePool keeps its own.
    let mut priced: Vec<(f64, Arc<InstanceType>)> = candidates
        .into_iter()
        .enumerate()
        .filter(|(i, _)| sources.offers.offers(&name, *i))
        .map(|(_, it)| it)
        .filter(|it| it.requirements.intersects(&requirements).is_ok())
        .filter_map(|it| {
            let price = it
                .cheapest_offering(&requirements, cx.keys.zone, cx.keys.capacity_type)?
                .price;
            Some((price, it))
        })
        .collect();
    priced.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    let instance_types: Vec<Arc<InstanceType>> = priced.into_iter().map(|(_, it)| it).collect();

    let daemon_overheads = sources.daemons.overheads_by_instance_type(
        &taints,
        &requirements,
        sources.well_known,
        &instance_types,
    );
    let usage = sources.usage.get(&name).cloned().unwrap_or_default();
    let (remaining, remaining_nodes) = remaining(cx, &object, pool, &usage);
    let claim_metadata = ClaimMetadata {
        node_class_ref: (
            spec.node_class_ref.group.clone(),
            spec.node_class_ref.kind.clone(),
            spec.node_class_ref.name.clone(),
        ),
        annotations: pool
            .spec
            .template
            .metadata
            .annotations
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        // The API server defaults expireAfter, so a NodeClaim always carries one.
        expire_after: Some(spec.expire_after.as_ref().map_or_else(
            || karpenter_api::nodepool::DEFAULT_EXPIRE_AFTER.to_string(),
            |d| d.as_str().to_string(),
        )),
        termination_grace_period: spec
            .termination_grace_period
            .as_ref()
            .map(|d| d.as_str().to_string()),
    };
    Some(NodePoolTemplate {
        name,
        weight: pool.spec.weight.unwrap_or(0),
        requirements,
        labels,
        taints,
        startup_taints,
        instance_types,
        daemon_overheads,
        remaining,
        remaining_nodes,
        claim_metadata,
    })
}

/// The NodePool's template labels and `karpenter.sh/nodepool=<name>`, sorted by key: what every NodeClaim of it
/// carries whatever instance type launches, and what NodeOverlays are matched against besides the type's own
/// requirements.
pub(super) fn pool_labels(cx: &mut Context, pool: &NodePool) -> Vec<(Symbol, Symbol)> {
    let pool_value = cx
        .interner
        .intern(pool.metadata.name.as_deref().unwrap_or_default());
    let mut labels: Vec<_> = pool
        .spec
        .template
        .metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (cx.interner.intern_key(k), cx.interner.intern(v)))
        .collect();
    labels.push((cx.keys.nodepool, pool_value));
    labels.sort_unstable_by_key(|(k, _)| *k);
    labels.dedup_by_key(|(k, _)| *k);
    labels
}

/// `key In [value]` for each label.
pub(super) fn label_requirements(labels: &[(Symbol, Symbol)]) -> Requirements {
    labels
        .iter()
        .map(|&(k, v)| Requirement::in_values(k, [v]))
        .collect()
}

/// What is left of the limits. Resources the limits do not name are unlimited (`i64::MAX`), so only named ones
/// can rule an instance type out.
fn remaining(
    cx: &mut Context,
    object: &str,
    pool: &NodePool,
    usage: &PoolUsage,
) -> (Option<Resources>, Option<i64>) {
    let Some(limits) = pool.spec.limits.as_ref() else {
        return (None, None);
    };
    let mut remaining_nodes = None;
    let mut named = Vec::new();
    for (resource, q) in limits {
        match karpenter_api::quantity::parse_milli(&q.0) {
            Ok(v) if resource == labels::RESOURCE_NODES => remaining_nodes = Some(v / 1000 - usage.nodes),
            Ok(v) => named.push((cx.table.intern(resource), v)),
            Err(e) => cx.note(
                object.to_string(),
                format!("spec.limits.{resource}: {e}; ignored"),
            ),
        }
    }
    if named.is_empty() {
        return (None, remaining_nodes);
    }
    let mut remaining = Resources::zero();
    for id in cx.table.ids() {
        remaining.set(id, i64::MAX);
    }
    for (id, v) in named {
        remaining.set(id, v);
    }
    remaining.sub_assign(&usage.capacity);
    (Some(remaining), remaining_nodes)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::{BuildOptions, ScheduleInputs, build_schedule_inputs};

    fn build(objects: &[&str]) -> ScheduleInputs {
        build_schedule_inputs(&snapshot(objects), &catalog(), &BuildOptions::default())
    }

    const WEB_POOL: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: web}\nspec:\n  weight: 10\n  limits: {cpu: \"10\", nodes: \"3\"}\n  template:\n    metadata:\n      labels: {team: web}\n      annotations: {example.com/owner: web}\n    spec:\n      expireAfter: 24h\n      terminationGracePeriod: 1h\n      taints: [{key: team, value: web, effect: NoSchedule}]\n      requirements:\n      - {key: kubernetes.io/arch, operator: In, values: [amd64]}\n      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n      - {key: size, operator: Exists, minValues: 1}\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: web}\n";

    #[test]
    fn template_requirements_include_labels_and_the_nodepool() {
        let built = build(&[WEB_POOL]);
        let t = &built.input.templates[0];
        let i = &built.interner;
        assert_eq!(t.name, "web");
        assert_eq!(t.weight, 10);
        assert_eq!(
            t.requirements.single_value(i.lookup_key("team").unwrap()),
            i.lookup("web")
        );
        assert_eq!(
            t.requirements
                .single_value(i.lookup_key("karpenter.sh/nodepool").unwrap()),
            i.lookup("web")
        );
        assert!(t.requirements.has_min_values());
        assert_eq!(t.labels.len(), 2);
        assert_eq!(t.taints.len(), 1);
        assert_eq!(
            t.claim_metadata.node_class_ref,
            (
                "karpenter.k8s.aws".to_string(),
                "EC2NodeClass".to_string(),
                "web".to_string()
            )
        );
        assert_eq!(
            t.claim_metadata.annotations,
            vec![("example.com/owner".to_string(), "web".to_string())]
        );
        assert_eq!(t.claim_metadata.expire_after.as_deref(), Some("24h"));
        assert_eq!(t.claim_metadata.termination_grace_period.as_deref(), Some("1h"));
    }

    #[test]
    fn instance_types_are_filtered_and_cheapest_first() {
        let built = build(&[DEFAULT_POOL, WEB_POOL]);
        let names = |t: usize| {
            built.input.templates[t]
                .instance_types
                .iter()
                .map(|it| it.name.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(0), vec!["small", "arm", "large"]);
        // amd64 on-demand only: small's on-demand offering (0.1) is what counts.
        assert_eq!(names(1), vec!["small", "large"]);
        assert_eq!(
            built.input.templates[0].claim_metadata.expire_after.as_deref(),
            Some("720h")
        );
    }

    #[test]
    fn limits_subtract_existing_capacity() {
        let claim = "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata:\n  name: web-1\n  labels: {karpenter.sh/nodepool: web, node.kubernetes.io/instance-type: large}\nspec:\n  requirements: []\n  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: web}\n";
        let built = build(&[WEB_POOL, &node("n1", ", karpenter.sh/nodepool: web", ""), claim]);
        let t = &built.input.templates[0];
        // 10 cpu - 4 (node) - 8 (the claim's instance type).
        assert_eq!(t.remaining.as_ref().unwrap().cpu(), -2000);
        assert_eq!(
            t.remaining.as_ref().unwrap().memory(),
            i64::MAX - 8 * (1 << 30) * 1000 - 16 * (1 << 30) * 1000
        );
        assert_eq!(t.remaining_nodes, Some(1));
        let built = build(&[DEFAULT_POOL]);
        assert!(
            built.input.templates[0].remaining.is_none()
                && built.input.templates[0].remaining_nodes.is_none()
        );
    }

    #[test]
    fn static_invalid_and_deleting_nodepools_are_skipped_with_a_note() {
        let static_pool = DEFAULT_POOL
            .replace("name: default}", "name: fixed}")
            .replace("spec:\n  template:", "spec:\n  replicas: 2\n  template:");
        let invalid = DEFAULT_POOL.replace("name: default}", "name: bad}").replace(
            "requirements: []",
            "requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [cheap]}]",
        );
        let deleting = DEFAULT_POOL.replace(
            "metadata: {name: default}",
            "metadata: {name: old, deletionTimestamp: \"2024-01-01T00:00:00Z\"}",
        );
        let built = build(&[&static_pool, &invalid, &deleting, DEFAULT_POOL]);
        assert_eq!(built.template_names, vec!["default"]);
        let objects: Vec<&str> = built.notes.iter().map(|n| n.object.as_str()).collect();
        assert_eq!(objects, vec!["NodePool fixed", "NodePool bad", "NodePool old"]);
        assert!(
            built.notes[1].message.contains("capacity-type"),
            "{}",
            built.notes[1].message
        );
    }
}
