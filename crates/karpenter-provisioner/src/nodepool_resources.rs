//! What a NodePool has launched, for its `status.resources` and `status.nodes` (upstream's nodepool.counter).
//! Pure.
//!
//! A NodePool's nodes are its Nodes (label `karpenter.sh/nodepool`) and its launched NodeClaims whose Node has
//! not registered yet, matched by provider ID so a node is counted once; the capacity is the Node's when it
//! has registered and the NodeClaim's before. Counting claims that have not registered keeps `limits` and the
//! status honest while instances boot. Until a Node is initialized, a resource it reports as zero or not at all
//! (a GPU whose device plugin has not registered yet) counts at its NodeClaim's capacity, as upstream.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karpenter_api::{
    common::ResourceList,
    labels,
    nodeclaim::NodeClaim,
    quantity::{format_milli, parse_milli},
};
use karpenter_core::snapshot::{CompactNode, LabelLookup};
use kube::ResourceExt;

/// The sum of the capacity of a NodePool's nodes, with the pseudo-resource `nodes`, and the node count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolResources {
    pub resources: ResourceList,
    pub nodes: i64,
}

/// A resource list in milli-units. A quantity that does not parse (no kubelet writes one) is left out rather than
/// failing the count.
fn milli_units(list: Option<&BTreeMap<String, Quantity>>) -> BTreeMap<String, i64> {
    list.into_iter()
        .flatten()
        .filter_map(|(name, q)| Some((name.clone(), parse_milli(&q.0).ok()?)))
        .collect()
}

fn add(total: &mut BTreeMap<String, i64>, capacity: BTreeMap<String, i64>) {
    for (name, milli) in capacity {
        let sum = total.entry(name).or_default();
        *sum = sum.saturating_add(milli);
    }
}

fn is_initialized(node: &CompactNode) -> bool {
    node.labels()
        .get(labels::INITIALIZED_LABEL)
        .is_some_and(|v| v == "true")
}

fn in_pool(labels_: &impl LabelLookup, pool: &str) -> bool {
    labels_.label(labels::NODEPOOL_LABEL) == Some(pool)
}

/// Counts the nodes of NodePool `pool`.
pub fn pool_resources<'a>(
    pool: &str,
    nodes: impl IntoIterator<Item = &'a CompactNode>,
    claims: impl IntoIterator<Item = &'a NodeClaim>,
) -> PoolResources {
    let claims: Vec<&NodeClaim> = claims.into_iter().collect();
    let claims_by_provider_id: HashMap<&str, &NodeClaim> = claims
        .iter()
        .filter_map(|c| Some((c.status.as_ref()?.provider_id.as_deref()?, *c)))
        .collect();
    let mut milli: BTreeMap<String, i64> = BTreeMap::new();
    let mut count: i64 = 0;
    let mut registered: HashSet<String> = HashSet::new();
    for node in nodes {
        let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
        if let Some(id) = provider_id {
            registered.insert(id.to_string());
        }
        if !in_pool(node.labels(), pool) {
            continue;
        }
        count += 1;
        let mut capacity = milli_units(node.status.as_ref().and_then(|s| s.capacity.as_deref()));
        let claim = provider_id
            .and_then(|id| claims_by_provider_id.get(id))
            .filter(|_| !is_initialized(node));
        if let Some(claim) = claim {
            let promised = milli_units(claim.status.as_ref().and_then(|s| s.capacity.as_deref()));
            for (name, amount) in promised {
                let reported = capacity.entry(name).or_default();
                if *reported == 0 {
                    *reported = amount;
                }
            }
        }
        add(&mut milli, capacity);
    }
    for claim in claims {
        let Some(status) = claim.status.as_ref() else {
            continue;
        };
        let Some(id) = status.provider_id.as_deref() else {
            continue;
        };
        if registered.contains(id) || !in_pool(claim.labels(), pool) {
            continue;
        }
        count += 1;
        add(&mut milli, milli_units(status.capacity.as_deref()));
    }
    let mut resources: ResourceList = milli
        .into_iter()
        .map(|(name, m)| {
            let text = format_milli(&name, m);
            (name, Quantity(text))
        })
        .collect();
    resources.insert(labels::RESOURCE_NODES.to_string(), Quantity(count.to_string()));
    PoolResources {
        resources,
        nodes: count,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn node(name: &str, pool: &str, cpu: &str) -> CompactNode {
        serde_json::from_value::<k8s_openapi::api::core::v1::Node>(json!({
            "metadata": {"name": name, "labels": {labels::NODEPOOL_LABEL: pool}},
            "spec": {"providerID": format!("sim:///{name}")},
            "status": {"capacity": {"cpu": cpu, "memory": "4Gi", "pods": "10", "ephemeral-storage": "20Gi"}}
        }))
        .unwrap()
        .into()
    }

    fn claim(name: &str, pool: &str, provider_id: Option<&str>) -> NodeClaim {
        let mut status = json!({"capacity": {"cpu": "8", "memory": "16Gi", "pods": "40"}});
        if let Some(id) = provider_id {
            status["providerID"] = json!(id);
        }
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {labels::NODEPOOL_LABEL: pool}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []},
            "status": status
        }))
        .unwrap()
    }

    fn get(r: &PoolResources, name: &str) -> String {
        r.resources.get(name).map(|q| q.0.clone()).unwrap_or_default()
    }

    #[test]
    fn sums_the_capacity_of_the_pools_nodes_and_counts_them() {
        let nodes = vec![
            node("a", "p", "2"),
            node("b", "p", "1500m"),
            node("c", "other", "64"),
        ];
        // Registered as node a: counted once, with the Node's capacity.
        let claims = vec![claim("ca", "p", Some("sim:///a"))];
        let r = pool_resources("p", &nodes, &claims);
        assert_eq!(r.nodes, 2);
        assert_eq!(get(&r, "cpu"), "3500m");
        assert_eq!(get(&r, "memory"), "8Gi");
        assert_eq!(get(&r, "pods"), "20");
        assert_eq!(get(&r, "ephemeral-storage"), "40Gi");
        assert_eq!(get(&r, "nodes"), "2");
    }

    #[test]
    fn launched_claims_count_before_their_node_registers_but_unlaunched_ones_do_not() {
        let claims = vec![
            claim("booting", "p", Some("sim:///x")),
            claim("pending", "p", None),
        ];
        let r = pool_resources("p", &[], &claims);
        assert_eq!(r.nodes, 1);
        assert_eq!(get(&r, "cpu"), "8");
    }

    #[test]
    fn an_empty_pool_has_zero_nodes() {
        let r = pool_resources("p", &[], &[]);
        assert_eq!(r.nodes, 0);
        assert_eq!(r.resources.len(), 1);
        assert_eq!(get(&r, "nodes"), "0");
    }

    #[test]
    fn a_gpu_not_registered_yet_counts_at_the_claims_capacity_until_the_node_is_initialized() {
        let gpu_node = |gpus: &str, initialized: bool| -> CompactNode {
            let mut node_labels = json!({labels::NODEPOOL_LABEL: "p"});
            if initialized {
                node_labels[labels::INITIALIZED_LABEL] = json!("true");
            }
            serde_json::from_value::<k8s_openapi::api::core::v1::Node>(json!({
                "metadata": {"name": "g", "labels": node_labels},
                "spec": {"providerID": "sim:///g"},
                "status": {"capacity": {"cpu": "8", "nvidia.com/gpu": gpus}}
            }))
            .unwrap()
            .into()
        };
        let mut gpu_claim = claim("cg", "p", Some("sim:///g"));
        if let Some(status) = gpu_claim.status.as_mut() {
            Arc::make_mut(status.capacity.get_or_insert_with(Default::default))
                .insert("nvidia.com/gpu".into(), Quantity("4".into()));
        }
        let claims = [gpu_claim];
        let starting = pool_resources("p", &[gpu_node("0", false)], &claims);
        assert_eq!(get(&starting, "nvidia.com/gpu"), "4");
        assert_eq!(get(&starting, "cpu"), "8", "what the Node reports stands");
        let initialized = pool_resources("p", &[gpu_node("0", true)], &claims);
        assert_eq!(get(&initialized, "nvidia.com/gpu"), "0");
    }
}
