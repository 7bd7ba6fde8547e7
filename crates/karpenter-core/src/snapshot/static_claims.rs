//! The NodeClaims a static NodePool (`spec.replicas`) is filled up with. No pod asks for them, so there is no
//! simulation: each one is the NodePool's template as it stands (upstream's `NodeClaimTemplate` of the NodePool
//! with the instance types its requirements allow, no requests), made into the same object the provisioner
//! creates ([`crate::provisioning::node_claim_object`]): template labels and annotations, taints, requirements
//! narrowed to the compatible instance types cheapest first, node class, expireAfter, terminationGracePeriod,
//! the NodePool hash annotations and the owner reference. The launch then takes the cheapest available offering
//! among those types, as it does for any NodeClaim.

use std::collections::HashMap;

use karpenter_api::{nodeclaim::NodeClaim, nodepool::NodePool};

use crate::{
    catalog::CatalogFile,
    provisioning::{ClaimContext, node_claim_object},
    requirements::Requirement,
    resources::Resources,
    scheduling::{
        NewNodeClaim,
        scheduler::{claim_labels, truncate_keeping_min_values},
    },
};

use super::{
    BuildOptions, Snapshot, SnapshotNote,
    context::{Context, describe},
    daemonsets::DaemonPods,
    intern_catalog_offered,
    nodepools::{TemplateSources, pool_template},
    overlays::{OverlayCache, Overlays, usable_overlays},
    well_known_keys,
};

/// What [`static_node_claims`] made.
#[derive(Debug, Clone, Default)]
pub struct StaticClaims {
    /// `count` copies of the NodeClaim (each named by the API server from `generateName`), or none when the
    /// NodePool cannot launch anything (the notes say why).
    pub node_claims: Vec<NodeClaim>,
    pub notes: Vec<SnapshotNote>,
}

/// `count` NodeClaims for static NodePool `pool`, whose instance types are the catalog's (after NodeOverlays
/// when that gate is on). Readiness, deletion and the replica count are the caller's to judge.
pub fn static_node_claims(
    snapshot: &Snapshot,
    catalog: &CatalogFile,
    options: &BuildOptions,
    pool: &NodePool,
    count: usize,
) -> StaticClaims {
    let mut cx = Context::new();
    let well_known = well_known_keys(&mut cx.interner, catalog, options);
    let (instance_types, offers) = intern_catalog_offered(&mut cx, catalog);
    let overlays = if options.node_overlays {
        usable_overlays(&mut cx, snapshot, options.label_policy, &instance_types)
    } else {
        Overlays::default()
    };
    // Nothing is scheduled onto these NodeClaims, so DaemonSet overhead and limits on resources play no part
    // (a static NodePool may only limit `nodes`, which the caller counts).
    let daemons = DaemonPods::default();
    let usage = HashMap::new();
    let sources = TemplateSources {
        snapshot,
        policy: options.label_policy,
        instance_types: &instance_types,
        offers: &offers,
        overlays: &overlays,
        daemons: &daemons,
        usage: &usage,
        well_known: &well_known,
        unevaluated_nodepools: options.unevaluated_nodepools,
    };
    let Some(template) = pool_template(&mut cx, &sources, pool, &mut OverlayCache::new()) else {
        return StaticClaims {
            node_claims: Vec::new(),
            notes: cx.notes,
        };
    };
    if template.instance_types.is_empty() {
        cx.note(
            describe("NodePool", None, Some(&template.name)),
            "no instance type meets its requirements with an available offering; no NodeClaim created",
        );
        return StaticClaims {
            node_claims: Vec::new(),
            notes: cx.notes,
        };
    }
    let mut types = template.instance_types.clone();
    truncate_keeping_min_values(
        &mut types,
        &template.requirements,
        options.settings.max_instance_types,
    );
    let mut requirements = template.requirements.clone();
    requirements.add(Requirement::in_values(
        cx.keys.instance_type,
        types.iter().map(|it| it.name_symbol),
    ));
    // As the provisioner's claims: the labels its requirements resolve to (no pod narrows them here).
    let labels = claim_labels(&requirements, &well_known, &mut cx.interner);
    let claim = NewNodeClaim {
        template: 0,
        labels,
        requirements,
        instance_types: types,
        requests: Resources::zero(),
        pods: Vec::new(),
        min_values_relaxed: false,
        launch: None,
    };
    let hash = pool.hash();
    let object = node_claim_object(
        &ClaimContext {
            interner: &cx.interner,
            table: &cx.table,
            template: &template,
            nodepool_hash: Some(&hash),
            nodepool_uid: pool.metadata.uid.as_deref(),
        },
        &claim,
    );
    StaticClaims {
        node_claims: vec![object; count],
        notes: cx.notes,
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use karpenter_api::labels;

    const STATIC_POOL: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: fixed, uid: fixed-uid}\nspec:\n  replicas: 3\n  limits: {nodes: \"5\"}\n  template:\n    metadata:\n      labels: {team: infra}\n    spec:\n      expireAfter: 24h\n      taints: [{key: dedicated, value: infra, effect: NoSchedule}]\n      requirements:\n      - {key: kubernetes.io/arch, operator: In, values: [amd64]}\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n";

    #[test]
    fn a_static_nodepool_gets_its_template_as_nodeclaims_with_every_compatible_type() {
        let snap = snapshot(&[STATIC_POOL]);
        let built = static_node_claims(
            &snap,
            &catalog(),
            &BuildOptions::default(),
            &snap.node_pools[0],
            2,
        );
        assert!(built.notes.is_empty(), "{:?}", built.notes);
        assert_eq!(built.node_claims.len(), 2);
        let claim = &built.node_claims[0];
        let meta = &claim.metadata;
        assert_eq!(meta.generate_name.as_deref(), Some("fixed-"));
        let claim_labels = meta.labels.clone().unwrap_or_default();
        assert_eq!(claim_labels.get("team").map(String::as_str), Some("infra"));
        assert_eq!(
            claim_labels.get(labels::NODEPOOL_LABEL).map(String::as_str),
            Some("fixed")
        );
        let annotations = meta.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations.get(labels::NODEPOOL_HASH_ANNOTATION),
            Some(&snap.node_pools[0].hash())
        );
        assert!(annotations.contains_key(labels::NODEPOOL_HASH_VERSION_ANNOTATION));
        let owner = meta.owner_references.clone().unwrap_or_default();
        assert_eq!(owner[0].uid, "fixed-uid");
        let types = claim
            .spec
            .requirements
            .iter()
            .find(|r| r.key == labels::INSTANCE_TYPE_LABEL)
            .map(|r| r.values.clone())
            .unwrap_or_default();
        assert_eq!(
            types,
            vec!["large", "small"],
            "every amd64 type (a requirement lists values sorted)"
        );
        assert!(claim.spec.resources.requests.is_none(), "no pods, no requests");
        assert_eq!(claim.spec.taints.len(), 1);
        assert_eq!(
            claim.spec.expire_after.as_ref().map(|d| d.to_string()).as_deref(),
            Some("24h")
        );
        assert_eq!(claim.spec.node_class_ref.name, "default");
    }

    #[test]
    fn a_static_nodepool_no_instance_type_fits_creates_nothing_and_says_why() {
        let pool = STATIC_POOL.replace("values: [amd64]", "values: [s390x]");
        let snap = snapshot(&[&pool]);
        let built = static_node_claims(
            &snap,
            &catalog(),
            &BuildOptions::default(),
            &snap.node_pools[0],
            2,
        );
        assert!(built.node_claims.is_empty());
        assert!(
            built.notes[0].message.contains("no instance type"),
            "{:?}",
            built.notes
        );
    }
}
