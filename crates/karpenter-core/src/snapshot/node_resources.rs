//! What a Node has: the capacity or allocatable it reports and, until a Karpenter node is initialized, its
//! NodeClaim's amount of every resource it reports as zero or not at all.
//!
//! Kubelet reports an extended resource (`nvidia.com/gpu`, `aws.amazon.com/neuron`, `vpc.amazonaws.com/efa`, ...)
//! as zero until its device plugin registers it. Taken at its word, a GPU node still starting would hold none of
//! the GPU pods it was launched for, so the next provisioning round would launch another node for them, and its
//! GPUs would not count against the NodePool's limits. Upstream's state node fills those resources from the
//! NodeClaim the same way; once the node is initialized, what the Node reports is all there is.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::CompactNode;
use karpenter_api::{labels, nodeclaim::NodeClaim};

use crate::resources::Resources;

use super::context::{Context, describe};

/// Which of the two resource lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ResourceField {
    Capacity,
    Allocatable,
}

impl ResourceField {
    fn path(self) -> &'static str {
        match self {
            Self::Capacity => "status.capacity",
            Self::Allocatable => "status.allocatable",
        }
    }
}

/// Whether Karpenter has labelled the Node initialized.
pub(super) fn is_initialized(node: &CompactNode) -> bool {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::INITIALIZED_LABEL))
        .is_some_and(|v| v == "true")
}

/// The Node's `field`, completed from `claim` (its NodeClaim, if it has one) until the Node is initialized; `None`
/// when neither has it (a quantity that does not parse is noted, and its list left out).
pub(super) fn node_resources(
    cx: &mut Context,
    node: &CompactNode,
    claim: Option<&NodeClaim>,
    field: ResourceField,
) -> Option<Resources> {
    let status = node.status.as_ref();
    let list = match field {
        ResourceField::Capacity => status.and_then(|s| s.capacity.as_deref()),
        ResourceField::Allocatable => status.and_then(|s| s.allocatable.as_deref()),
    };
    let node_object = describe("Node", None, node.metadata.name.as_deref());
    let reported = resource_list(cx, &node_object, field, list);
    let promised = match claim.filter(|_| !is_initialized(node)) {
        Some(c) => {
            let status = c.status.as_ref();
            let list = match field {
                ResourceField::Capacity => status.and_then(|s| s.capacity.as_deref()),
                ResourceField::Allocatable => status.and_then(|s| s.allocatable.as_deref()),
            };
            let claim_object = describe("NodeClaim", None, c.metadata.name.as_deref());
            resource_list(cx, &claim_object, field, list)
        }
        None => None,
    };
    match (reported, promised) {
        (Some(mut reported), Some(promised)) => {
            fill_unreported(&mut reported, &promised);
            Some(reported)
        }
        (reported, promised) => reported.or(promised),
    }
}

/// A non-empty resource list read into a vector; `None` (with a note) when a quantity does not parse.
fn resource_list(
    cx: &mut Context,
    object: &str,
    field: ResourceField,
    list: Option<&BTreeMap<String, Quantity>>,
) -> Option<Resources> {
    let list = list.filter(|l| !l.is_empty())?;
    Resources::from_resource_list(list, &mut cx.table)
        .map_err(|e| cx.note(object.to_string(), format!("{}: {e}", field.path())))
        .ok()
}

/// Takes `promised`'s amount for every resource `reported` has as zero (a missing resource and a zero one are the
/// same); what the Node does report stays as reported.
fn fill_unreported(reported: &mut Resources, promised: &Resources) {
    for (id, amount) in promised.iter() {
        if reported.get(id) == 0 {
            reported.set(id, amount);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::{BuildOptions, ScheduleInputs, build_schedule_inputs};

    fn build(objects: &[&str]) -> ScheduleInputs {
        build_schedule_inputs(&snapshot(objects), &catalog(), &BuildOptions::default())
    }

    /// A GPU NodeClaim launched as `i-gpu` with 4 GPUs, and its Node reporting `gpu` GPUs; `node_labels` are more
    /// Node labels.
    fn gpu_node_and_claim(gpu: &str, node_labels: &str) -> [String; 2] {
        let claim = "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata:\n  name: gpu-claim\n  labels: {karpenter.sh/nodepool: default}\nspec:\n  requirements: []\n  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\nstatus:\n  providerID: sim:///test-zone-1/i-gpu\n  capacity: {cpu: \"8\", memory: 16Gi, pods: \"20\", nvidia.com/gpu: \"4\"}\n  allocatable: {cpu: \"8\", memory: 16Gi, pods: \"20\", nvidia.com/gpu: \"4\"}\n".to_string();
        let node = format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: gpu-node\n  labels: {{karpenter.sh/nodepool: default{node_labels}}}\nspec: {{providerID: sim:///test-zone-1/i-gpu}}\nstatus:\n  capacity: {{cpu: \"8\", memory: 16Gi, pods: \"20\", nvidia.com/gpu: \"{gpu}\"}}\n  allocatable: {{cpu: 7900m, memory: 15Gi, pods: \"20\", nvidia.com/gpu: \"{gpu}\"}}\n"
        );
        [claim, node]
    }

    #[test]
    fn an_uninitialized_node_offers_the_extended_resources_its_claim_promises_until_it_reports_them() {
        let [claim, node] = gpu_node_and_claim("0", "");
        let built = build(&[DEFAULT_POOL, &claim, &node]);
        assert_eq!(
            built.node_names,
            vec!["gpu-node"],
            "the claim is the Node's, not in flight"
        );
        let n = &built.input.existing[0];
        let gpu = built.table.get("nvidia.com/gpu").unwrap();
        assert_eq!(
            n.available.get(gpu),
            4000,
            "the GPUs the device plugin has not registered yet"
        );
        assert_eq!(n.available.cpu(), 7900, "what the Node reports stands");
    }

    #[test]
    fn an_initialized_node_offers_only_what_it_reports() {
        let [claim, node] = gpu_node_and_claim("0", ", karpenter.sh/initialized: \"true\"");
        let built = build(&[DEFAULT_POOL, &claim, &node]);
        let gpu = built.table.get("nvidia.com/gpu").unwrap();
        assert_eq!(built.input.existing[0].available.get(gpu), 0);
    }

    #[test]
    fn a_resource_the_node_reports_is_not_raised_to_the_claims() {
        let [claim, node] = gpu_node_and_claim("2", "");
        let built = build(&[DEFAULT_POOL, &claim, &node]);
        let gpu = built.table.get("nvidia.com/gpu").unwrap();
        assert_eq!(built.input.existing[0].available.get(gpu), 2000);
    }

    #[test]
    fn a_gpu_pod_goes_to_the_uninitialized_gpu_node_instead_of_a_new_one() {
        let [claim, node] = gpu_node_and_claim("0", "");
        let pod = pending_pod("default", "train", "1", "  tolerations: [{operator: Exists}]\n").replace(
            "requests: {cpu: \"1\"}",
            "requests: {cpu: \"1\", nvidia.com/gpu: \"2\"}",
        );
        let mut built = build(&[DEFAULT_POOL, &claim, &node, &pod]);
        let results = crate::scheduling::schedule(&built.input, &mut built.interner, &built.table);
        assert!(results.pod_errors.is_empty(), "{:?}", results.pod_errors);
        assert!(results.new_node_claims.is_empty(), "no second GPU node");
        assert_eq!(results.existing_nodes, vec![(0, vec![0])]);
    }

    #[test]
    fn the_gpus_of_an_uninitialized_node_count_against_the_nodepool_limit() {
        let pool = DEFAULT_POOL.replace(
            "spec:\n  template:",
            "spec:\n  limits: {nvidia.com/gpu: \"8\"}\n  template:",
        );
        let [claim, node] = gpu_node_and_claim("0", "");
        let built = build(&[&pool, &claim, &node]);
        let gpu = built.table.get("nvidia.com/gpu").unwrap();
        let remaining = built.input.templates[0].remaining.as_ref().unwrap();
        assert_eq!(
            remaining.get(gpu),
            4000,
            "8 allowed, 4 on the node still starting"
        );
    }
}
