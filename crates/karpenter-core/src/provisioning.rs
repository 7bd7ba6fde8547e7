//! What the provisioner creates for a simulated NodeClaim: the `karpenter.sh/v1` NodeClaim object, built the
//! way upstream's `NodeClaimTemplate.ToNodeClaim` builds it. `karpenter schedule` prints the same object's
//! fields, so what the CLI shows is what the controller would create.
//!
//! - metadata: `generateName: <nodepool>-`; the template's labels, the labels the claim's requirements resolve to
//!   (`NewNodeClaim::labels`: single values, and a value chosen for user-defined keys that allow several, as
//!   upstream's `resolveCustomLabelsFromRequirements` chooses one) and `karpenter.sh/nodepool`; the template's annotations, the NodePool hash and its version, and
//!   `karpenter.sh/nodeclaim-min-values-relaxed` when minValues was relaxed, `karpenter.sh/price-overlay-applied`
//!   and `karpenter.sh/capacity-overlay-applied` when a NodeOverlay changed the price or the capacity of one of
//!   its instance types; an owner reference to the NodePool
//!   when its uid is known (so deleting the NodePool deletes its NodeClaims);
//! - spec: the narrowed requirements (the kept instance types among them, hostname left out: it is only a
//!   simulation placeholder), the requests (DaemonSet overhead included), taints, startup taints, node class,
//!   expireAfter and terminationGracePeriod from the template.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use karpenter_api::{
    common::{
        NodeClassReference, NodeSelectorRequirementWithMinValues, Operator, Taint as ApiTaint,
        TaintEffect as ApiEffect,
    },
    duration::{GoDuration, NillableDuration},
    labels,
    nodeclaim::{NodeClaim, NodeClaimSpec, ResourceRequirements},
    nodepool::NODEPOOL_HASH_VERSION,
};

use crate::{
    requirements::LabelInterner,
    resources::ResourceTable,
    scheduling::{NewNodeClaim, NodePoolTemplate, Taint, TaintEffect},
};

/// What besides the simulated claim the object needs.
pub struct ClaimContext<'a> {
    pub interner: &'a LabelInterner,
    pub table: &'a ResourceTable,
    pub template: &'a NodePoolTemplate,
    /// `NodePool::hash()` of the template's NodePool.
    pub nodepool_hash: Option<&'a str>,
    /// The NodePool's uid, for the owner reference.
    pub nodepool_uid: Option<&'a str>,
}

/// The NodeClaim object for `claim`.
pub fn node_claim_object(cx: &ClaimContext<'_>, claim: &NewNodeClaim) -> NodeClaim {
    let interner = cx.interner;
    let template = cx.template;
    let resolve = |s| interner.resolve(s).to_string();
    let is_hostname = |key: &str| key == labels::HOSTNAME_LABEL;

    let mut claim_labels: BTreeMap<String, String> = template
        .labels
        .iter()
        .map(|&(k, v)| (resolve(k), resolve(v)))
        .collect();
    claim_labels.extend(claim.labels.iter().map(|&(k, v)| (resolve(k), resolve(v))));
    claim_labels.insert(labels::NODEPOOL_LABEL.to_string(), template.name.clone());

    let metadata = &template.claim_metadata;
    let mut annotations: BTreeMap<String, String> = metadata.annotations.iter().cloned().collect();
    if let Some(hash) = cx.nodepool_hash {
        annotations.insert(labels::NODEPOOL_HASH_ANNOTATION.to_string(), hash.to_string());
        annotations.insert(
            labels::NODEPOOL_HASH_VERSION_ANNOTATION.to_string(),
            NODEPOOL_HASH_VERSION.to_string(),
        );
    }
    if claim.min_values_relaxed {
        annotations.insert(
            labels::NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION.to_string(),
            "true".to_string(),
        );
    }
    // As upstream: marked when any instance type the NodeClaim may launch carries an overlay's change.
    if claim.instance_types.iter().any(|it| it.overlays_applied.price) {
        annotations.insert(
            labels::PRICE_OVERLAY_APPLIED_ANNOTATION.to_string(),
            "true".to_string(),
        );
    }
    if claim.instance_types.iter().any(|it| it.overlays_applied.capacity) {
        annotations.insert(
            labels::CAPACITY_OVERLAY_APPLIED_ANNOTATION.to_string(),
            "true".to_string(),
        );
    }

    let requirements: Vec<_> = claim
        .requirements
        .to_specs(interner)
        .into_iter()
        .filter(|spec| !is_hostname(&spec.key))
        .filter_map(|spec| {
            // to_specs writes only operators the API knows.
            let operator = spec.operator.parse::<Operator>().ok()?;
            Some(NodeSelectorRequirementWithMinValues {
                key: spec.key,
                operator,
                values: spec.values,
                min_values: spec.min_values,
            })
        })
        .collect();
    let requests = claim.requests.to_resource_list(cx.table);
    let (group, kind, name) = metadata.node_class_ref.clone();

    NodeClaim {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", template.name)),
            labels: Some(claim_labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: cx.nodepool_uid.map(|uid| {
                vec![OwnerReference {
                    api_version: "karpenter.sh/v1".to_string(),
                    kind: "NodePool".to_string(),
                    name: template.name.clone(),
                    uid: uid.to_string(),
                    block_owner_deletion: Some(true),
                    controller: None,
                }]
            }),
            ..ObjectMeta::default()
        },
        spec: NodeClaimSpec {
            taints: template.taints.iter().map(|t| api_taint(interner, t)).collect(),
            startup_taints: template
                .startup_taints
                .iter()
                .map(|t| api_taint(interner, t))
                .collect(),
            requirements: std::sync::Arc::new(requirements),
            resources: ResourceRequirements {
                requests: (!requests.is_empty()).then_some(requests),
            },
            node_class_ref: NodeClassReference { kind, name, group },
            termination_grace_period: metadata
                .termination_grace_period
                .as_deref()
                .and_then(|d| GoDuration::parse(d).ok()),
            expire_after: metadata
                .expire_after
                .as_deref()
                .and_then(|d| NillableDuration::parse(d).ok()),
        },
        status: None,
    }
}

fn api_taint(interner: &LabelInterner, t: &Taint) -> ApiTaint {
    ApiTaint {
        key: interner.resolve(t.key).to_string(),
        value: t.value.map(|v| interner.resolve(v).to_string()),
        effect: match t.effect {
            TaintEffect::NoSchedule => ApiEffect::NoSchedule,
            TaintEffect::PreferNoSchedule => ApiEffect::PreferNoSchedule,
            TaintEffect::NoExecute => ApiEffect::NoExecute,
        },
        time_added: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        scheduling::schedule,
        snapshot::{BuildOptions, build_schedule_inputs, test_support::*},
    };

    #[test]
    fn a_simulated_claim_becomes_the_object_the_provisioner_creates() {
        let pool = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: web, uid: pool-uid}\nspec:\n  template:\n    metadata:\n      labels: {team: web}\n      annotations: {example.com/owner: web}\n    spec:\n      expireAfter: 24h\n      terminationGracePeriod: 1h\n      taints: [{key: team, value: web, effect: NoSchedule}]\n      startupTaints: [{key: agent, effect: NoExecute}]\n      requirements:\n      - {key: kubernetes.io/arch, operator: In, values: [amd64]}\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: web}\n";
        let pod = pending_pod(
            "default",
            "a",
            "1",
            "  tolerations: [{key: team, operator: Exists}]\n",
        );
        let snap = snapshot(&[pool, &pod]);
        let mut inputs = build_schedule_inputs(&snap, &catalog(), &BuildOptions::default());
        let results = schedule(&inputs.input, &mut inputs.interner, &inputs.table);
        assert_eq!(results.new_node_claims.len(), 1, "{:?}", results.pod_errors);
        let claim = &results.new_node_claims[0];
        let hash = snap.node_pools[0].hash();
        let object = node_claim_object(
            &ClaimContext {
                interner: &inputs.interner,
                table: &inputs.table,
                template: &inputs.input.templates[claim.template],
                nodepool_hash: Some(&hash),
                nodepool_uid: Some("pool-uid"),
            },
            claim,
        );

        let meta = &object.metadata;
        assert_eq!(meta.generate_name.as_deref(), Some("web-"));
        let claim_labels = meta.labels.clone().unwrap_or_default();
        assert_eq!(claim_labels.get("team").map(String::as_str), Some("web"));
        assert_eq!(
            claim_labels.get("karpenter.sh/nodepool").map(String::as_str),
            Some("web")
        );
        assert_eq!(
            claim_labels.get("kubernetes.io/arch").map(String::as_str),
            Some("amd64")
        );
        assert!(!claim_labels.contains_key("kubernetes.io/hostname"));
        let annotations = meta.annotations.clone().unwrap_or_default();
        assert_eq!(annotations.get("karpenter.sh/nodepool-hash"), Some(&hash));
        assert_eq!(
            annotations
                .get("karpenter.sh/nodepool-hash-version")
                .map(String::as_str),
            Some(NODEPOOL_HASH_VERSION)
        );
        assert_eq!(
            annotations.get("example.com/owner").map(String::as_str),
            Some("web")
        );
        let owner = meta.owner_references.clone().unwrap_or_default();
        assert_eq!(
            (owner[0].kind.as_str(), owner[0].uid.as_str()),
            ("NodePool", "pool-uid")
        );

        let spec = &object.spec;
        let instance_types = spec
            .requirements
            .iter()
            .find(|r| r.key == "node.kubernetes.io/instance-type")
            .map(|r| r.values.clone())
            .unwrap_or_default();
        assert!(!instance_types.is_empty() && !instance_types.contains(&"arm".to_string()));
        assert!(
            spec.requirements
                .iter()
                .all(|r| r.key != "kubernetes.io/hostname")
        );
        let requests = spec.resources.requests.clone().unwrap_or_default();
        assert_eq!(requests.get("cpu").map(|q| q.0.as_str()), Some("1"));
        assert_eq!(spec.taints.len(), 1);
        assert_eq!(spec.startup_taints[0].effect, ApiEffect::NoExecute);
        assert_eq!(
            (
                spec.node_class_ref.kind.as_str(),
                spec.node_class_ref.name.as_str()
            ),
            ("EC2NodeClass", "web")
        );
        assert_eq!(
            spec.expire_after.as_ref().map(|d| d.to_string()).as_deref(),
            Some("24h")
        );
        assert!(spec.termination_grace_period.is_some());

        // The object is valid against the API's rules.
        let mut named = object.clone();
        named.metadata.name = Some("web-abcde".into());
        let policy = karpenter_api::label_policy::LabelPolicy::Aws;
        assert!(named.validate(policy).is_ok(), "{:?}", named.validate(policy));
    }

    /// The labels of the NodeClaim object the provisioner creates for one pod (needing `pod_extra`) on a NodePool
    /// with `requirements` (YAML flow entries).
    fn claim_labels_for(requirements: &[&str], pod_extra: &str) -> BTreeMap<String, String> {
        let listed: String = requirements.iter().map(|r| format!("      - {r}\n")).collect();
        let pool = format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: pool}}\nspec:\n  template:\n    spec:\n      requirements:\n{listed}      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n"
        );
        let pod = pending_pod("default", "a", "100m", pod_extra);
        let snap = snapshot(&[&pool, &pod]);
        the_one_claim(&snap, &BuildOptions::default())
            .metadata
            .labels
            .unwrap_or_default()
    }

    /// The NodeClaim object of the one new NodeClaim scheduling `snap` gives.
    fn the_one_claim(snap: &crate::snapshot::Snapshot, options: &BuildOptions) -> NodeClaim {
        let mut inputs = build_schedule_inputs(snap, &catalog(), options);
        let results = schedule(&inputs.input, &mut inputs.interner, &inputs.table);
        assert_eq!(results.new_node_claims.len(), 1, "{:?}", results.pod_errors);
        let claim = &results.new_node_claims[0];
        node_claim_object(
            &ClaimContext {
                interner: &inputs.interner,
                table: &inputs.table,
                template: &inputs.input.templates[claim.template],
                nodepool_hash: None,
                nodepool_uid: None,
            },
            claim,
        )
    }

    #[test]
    fn each_requirement_operator_becomes_a_label_value_the_pods_accept() {
        let affinity = |expression: &str| {
            format!(
                "  affinity: {{nodeAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: {{nodeSelectorTerms: [{{matchExpressions: [{expression}]}}]}}}}}}\n"
            )
        };
        // (NodePool requirements, the pod's own constraint, the key, the label the NodeClaim gets)
        let cases: Vec<(Vec<&str>, String, &str, Option<&str>)> = vec![
            (
                vec!["{key: team, operator: In, values: [web]}"],
                String::new(),
                "team",
                Some("web"),
            ),
            // Several values: the one the pod needs, not the NodePool's first.
            (
                vec!["{key: team, operator: In, values: [a, b]}"],
                "  nodeSelector: {team: b}\n".into(),
                "team",
                Some("b"),
            ),
            (
                vec!["{key: team, operator: In, values: [a, b]}"],
                affinity("{key: team, operator: NotIn, values: [a]}"),
                "team",
                Some("b"),
            ),
            // Exists, NotIn and the integer operators: an integer the requirement (and the pod) allow.
            (
                vec!["{key: rack, operator: Exists}"],
                String::new(),
                "rack",
                Some("0"),
            ),
            (
                vec!["{key: rack, operator: NotIn, values: [\"0\", \"1\"]}"],
                String::new(),
                "rack",
                Some("2"),
            ),
            (
                vec!["{key: gen, operator: Gt, values: [\"3\"]}"],
                String::new(),
                "gen",
                Some("4"),
            ),
            (
                vec!["{key: gen, operator: Gt, values: [\"3\"]}"],
                affinity("{key: gen, operator: Gt, values: [\"5\"]}"),
                "gen",
                Some("6"),
            ),
            (
                vec!["{key: gen, operator: Gte, values: [\"3\"]}"],
                String::new(),
                "gen",
                Some("3"),
            ),
            (
                vec![
                    "{key: gen, operator: Lt, values: [\"3\"]}",
                    "{key: gen, operator: NotIn, values: [\"0\"]}",
                ],
                String::new(),
                "gen",
                Some("1"),
            ),
            (
                vec!["{key: gen, operator: Lte, values: [\"0\"]}"],
                String::new(),
                "gen",
                Some("0"),
            ),
            // No value is allowed: no label.
            (
                vec!["{key: legacy, operator: DoesNotExist}"],
                String::new(),
                "legacy",
                None,
            ),
            // Well-known keys with several values are the launch's to label, from the instance type it picks.
            (
                vec!["{key: topology.kubernetes.io/zone, operator: In, values: [test-zone-1, test-zone-2]}"],
                String::new(),
                "topology.kubernetes.io/zone",
                None,
            ),
            (
                vec!["{key: topology.kubernetes.io/zone, operator: In, values: [test-zone-1, test-zone-2]}"],
                "  nodeSelector: {topology.kubernetes.io/zone: test-zone-2}\n".into(),
                "topology.kubernetes.io/zone",
                Some("test-zone-2"),
            ),
        ];
        for (requirements, pod_extra, key, expected) in cases {
            let labels = claim_labels_for(&requirements, &pod_extra);
            assert_eq!(
                labels.get(key).map(String::as_str),
                expected,
                "{requirements:?} with pod {pod_extra:?}: {labels:?}"
            );
        }
    }

    /// The annotations of the NodeClaim object made for one 100m pod on NodePool `default` with `overlays`
    /// (NodeOverlay YAML documents) and the NodeOverlay gate on.
    fn claim_annotations_with(overlays: &[&str]) -> BTreeMap<String, String> {
        let pod = pending_pod("default", "a", "100m", "");
        let mut objects = vec![DEFAULT_POOL, pod.as_str()];
        objects.extend_from_slice(overlays);
        let snap = snapshot(&objects);
        let options = BuildOptions {
            node_overlays: true,
            ..BuildOptions::default()
        };
        the_one_claim(&snap, &options)
            .metadata
            .annotations
            .unwrap_or_default()
    }

    #[test]
    fn a_claim_whose_instance_types_were_overlaid_carries_the_applied_markers() {
        let price = labels::PRICE_OVERLAY_APPLIED_ANNOTATION;
        let capacity = labels::CAPACITY_OVERLAY_APPLIED_ANNOTATION;
        let none = claim_annotations_with(&[]);
        assert!(
            !none.contains_key(price) && !none.contains_key(capacity),
            "{none:?}"
        );

        let discount = "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {name: discount}\nspec:\n  requirements: [{key: size, operator: In, values: [small]}]\n  priceAdjustment: \"-10%\"\n";
        let priced = claim_annotations_with(&[discount]);
        assert_eq!(priced.get(price).map(String::as_str), Some("true"), "{priced:?}");
        assert!(!priced.contains_key(capacity), "{priced:?}");

        let device = "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {name: device}\nspec:\n  requirements: []\n  capacity: {example.com/device: \"1\"}\n";
        let both = claim_annotations_with(&[discount, device]);
        assert_eq!(both.get(price).map(String::as_str), Some("true"), "{both:?}");
        assert_eq!(both.get(capacity).map(String::as_str), Some("true"), "{both:?}");
    }
}
