//! The output of `karpenter schedule`: the stable JSON contract of architecture.md ("Contracts the CLI
//! keeps"), built from the simulation's results, and the same structure as YAML or as a table for people.
//!
//! Everything here resolves interned symbols and resource vectors back to strings once, at the edge;
//! map-valued fields are `BTreeMap`s so the output is byte-for-byte stable for a given input.

use std::collections::BTreeMap;

use karpenter_api::{
    common::{Taint as ApiTaint, TaintEffect as ApiTaintEffect},
    labels,
};
use karpenter_core::{
    provisioning::{ClaimContext, node_claim_object},
    requirements::{LabelInterner, RequirementSpec},
    resources::ResourceTable,
    scheduling::{Launch, NewNodeClaim, SchedulingInput, SchedulingResults},
};
use serde::Serialize;

/// The whole result of one `schedule` run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleOutput {
    pub node_claims: Vec<NodeClaimOutput>,
    pub existing_nodes: Vec<ExistingNodeOutput>,
    pub pod_errors: Vec<PodErrorOutput>,
    pub summary: Summary,
}

/// A NodeClaim the run would create, as the NodeClaim object would carry it, plus the launch it would get.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimOutput {
    pub node_pool: String,
    /// Every instance-type option, cheapest first.
    pub instance_types: Vec<String>,
    pub requirements: Vec<RequirementOutput>,
    pub requests: BTreeMap<String, String>,
    pub taints: Vec<TaintOutput>,
    pub startup_taints: Vec<TaintOutput>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub node_class_ref: NodeClassRefOutput,
    pub expire_after: Option<String>,
    pub termination_grace_period: Option<String>,
    pub launch: Option<LaunchOutput>,
    /// Every label a Node launched from `launch` carries.
    pub node_labels: BTreeMap<String, String>,
    /// `namespace/name` of the pods placed on it.
    pub pods: Vec<String>,
}

/// One requirement in Karpenter's wire form; `values` is always present (empty for Exists/DoesNotExist).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequirementOutput {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_values: Option<i64>,
}

impl From<RequirementSpec> for RequirementOutput {
    fn from(spec: RequirementSpec) -> Self {
        Self {
            key: spec.key,
            operator: spec.operator,
            values: spec.values,
            min_values: spec.min_values,
        }
    }
}

/// A taint as core/v1 prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaintOutput {
    pub key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub effect: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeClassRefOutput {
    pub group: String,
    pub kind: String,
    pub name: String,
}

/// The offering a launch would pick.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchOutput {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub price: f64,
    pub reservation_id: Option<String>,
}

/// Pods placed on a node that already exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExistingNodeOutput {
    pub name: String,
    pub pods: Vec<String>,
}

/// A pod left pending, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodErrorOutput {
    pub pod: String,
    pub error: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Pending pods the run tried to place.
    pub pods: usize,
    pub scheduled: usize,
    pub new_node_claims: usize,
    /// The sum of the launch prices of the new NodeClaims.
    pub cost_per_hour: f64,
}

/// What the output needs besides the results: the symbol and resource tables, and each NodePool's template
/// hash.
pub struct OutputContext<'a> {
    pub input: &'a SchedulingInput,
    pub interner: &'a LabelInterner,
    pub table: &'a ResourceTable,
    /// NodePool name to `NodePool::hash()`.
    pub nodepool_hashes: &'a BTreeMap<String, String>,
}

impl ScheduleOutput {
    pub fn new(ctx: &OutputContext<'_>, results: &SchedulingResults) -> Self {
        let input = ctx.input;
        let pod_id = |p: usize| {
            input
                .pods
                .get(p)
                .map(|pod| pod.id.clone())
                .unwrap_or_else(|| format!("pod #{p}"))
        };
        let node_claims: Vec<NodeClaimOutput> = results
            .new_node_claims
            .iter()
            .map(|claim| node_claim(ctx, claim, &pod_id))
            .collect();
        let existing_nodes = results
            .existing_nodes
            .iter()
            .map(|(n, pods)| ExistingNodeOutput {
                name: input
                    .existing
                    .get(*n)
                    .map(|node| node.name.clone())
                    .unwrap_or_else(|| format!("node #{n}")),
                pods: pods.iter().map(|&p| pod_id(p)).collect(),
            })
            .collect();
        let pod_errors: Vec<PodErrorOutput> = results
            .pod_errors
            .iter()
            .map(|(p, error)| PodErrorOutput {
                pod: pod_id(*p),
                error: error.clone(),
            })
            .collect();
        let cost: f64 = node_claims
            .iter()
            .filter_map(|c| c.launch.as_ref())
            .map(|l| l.price)
            .sum();
        let summary = Summary {
            pods: input.pods.len(),
            scheduled: input.pods.len().saturating_sub(pod_errors.len()),
            new_node_claims: node_claims.len(),
            cost_per_hour: round_price(cost),
        };
        Self {
            node_claims,
            existing_nodes,
            pod_errors,
            summary,
        }
    }
}

/// Prices summed in floating point pick up noise in the last bits (0.30000000000000004); prices carry at most
/// six decimals.
fn round_price(price: f64) -> f64 {
    (price * 1e6).round() / 1e6
}

/// A NodeClaim as the contract prints it; `disrupt` prints replacements the same way. Its fields are those of
/// the object the provisioner creates (`karpenter_core::provisioning`), plus the launch the simulation chose.
pub(crate) fn node_claim(
    ctx: &OutputContext<'_>,
    claim: &NewNodeClaim,
    pod_id: &dyn Fn(usize) -> String,
) -> NodeClaimOutput {
    let interner = ctx.interner;
    let template = &ctx.input.templates[claim.template];
    let object = node_claim_object(
        &ClaimContext {
            interner,
            table: ctx.table,
            template,
            nodepool_hash: ctx.nodepool_hashes.get(&template.name).map(String::as_str),
            nodepool_uid: None,
        },
        claim,
    );
    let claim_labels = object.metadata.labels.unwrap_or_default();
    let node_labels = claim
        .launch
        .as_ref()
        .map(|l| node_labels(interner, &claim_labels, l))
        .unwrap_or_default();
    let spec = object.spec;
    let metadata = &template.claim_metadata;

    NodeClaimOutput {
        node_pool: template.name.clone(),
        instance_types: claim.instance_types.iter().map(|it| it.name.clone()).collect(),
        requirements: std::sync::Arc::unwrap_or_clone(spec.requirements)
            .into_iter()
            .map(|r| RequirementOutput {
                key: r.key,
                operator: r.operator.as_str().to_string(),
                values: r.values,
                min_values: r.min_values,
            })
            .collect(),
        requests: spec
            .resources
            .requests
            .unwrap_or_default()
            .into_iter()
            .map(|(name, q)| (name, q.0))
            .collect(),
        taints: spec.taints.iter().map(taint).collect(),
        startup_taints: spec.startup_taints.iter().map(taint).collect(),
        labels: claim_labels,
        annotations: object.metadata.annotations.unwrap_or_default(),
        node_class_ref: NodeClassRefOutput {
            group: spec.node_class_ref.group,
            kind: spec.node_class_ref.kind,
            name: spec.node_class_ref.name,
        },
        expire_after: metadata.expire_after.clone(),
        termination_grace_period: metadata.termination_grace_period.clone(),
        launch: claim.launch.as_ref().map(|l| LaunchOutput {
            instance_type: l.instance_type.name.clone(),
            zone: interner.resolve(l.offering.zone).to_string(),
            capacity_type: interner.resolve(l.offering.capacity_type).to_string(),
            price: l.offering.price,
            reservation_id: l.offering.reservation_id.map(|r| interner.resolve(r).to_string()),
        }),
        node_labels,
        pods: claim.pods.iter().map(|&p| pod_id(p)).collect(),
    }
}

/// The labels a Node launched from `launch` carries: the NodeClaim's labels, the launched type's
/// single-valued requirements, and the instance type, zone and capacity type of the offering.
fn node_labels(
    interner: &LabelInterner,
    claim_labels: &BTreeMap<String, String>,
    launch: &Launch,
) -> BTreeMap<String, String> {
    let mut out = claim_labels.clone();
    out.extend(
        launch
            .instance_type
            .requirements
            .labels()
            .map(|(k, v)| (interner.resolve(k).to_string(), interner.resolve(v).to_string()))
            .filter(|(k, _)| k != labels::HOSTNAME_LABEL),
    );
    out.insert(
        labels::INSTANCE_TYPE_LABEL.to_string(),
        launch.instance_type.name.clone(),
    );
    out.insert(
        labels::ZONE_LABEL.to_string(),
        interner.resolve(launch.offering.zone).to_string(),
    );
    out.insert(
        labels::CAPACITY_TYPE_LABEL.to_string(),
        interner.resolve(launch.offering.capacity_type).to_string(),
    );
    out
}

fn taint(t: &ApiTaint) -> TaintOutput {
    TaintOutput {
        key: t.key.clone(),
        value: t.value.clone(),
        effect: match t.effect {
            ApiTaintEffect::NoSchedule => "NoSchedule",
            ApiTaintEffect::PreferNoSchedule => "PreferNoSchedule",
            ApiTaintEffect::NoExecute => "NoExecute",
        }
        .to_string(),
    }
}
