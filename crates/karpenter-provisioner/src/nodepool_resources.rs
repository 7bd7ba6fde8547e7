//! What a NodePool has launched, for its `status.resources` and `status.nodes` (upstream's nodepool.counter).
//! Pure.
//!
//! A NodePool's nodes are its Nodes (label `karpenter.sh/nodepool`) and its launched NodeClaims whose Node has
//! not registered yet, matched by provider ID so a node is counted once; the capacity is the Node's when it
//! has registered and the NodeClaim's before. Counting claims that have not registered keeps `limits` and the
//! status honest while instances boot.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::{api::core::v1::Node, apimachinery::pkg::api::resource::Quantity};
use karpenter_api::{
    common::ResourceList,
    labels,
    nodeclaim::NodeClaim,
    quantity::{format_milli, parse_milli},
};
use kube::ResourceExt;

/// The sum of the capacity of a NodePool's nodes, with the pseudo-resource `nodes`, and the node count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolResources {
    pub resources: ResourceList,
    pub nodes: i64,
}

fn add(total: &mut BTreeMap<String, i64>, capacity: Option<&BTreeMap<String, Quantity>>) {
    for (name, quantity) in capacity.into_iter().flatten() {
        // A quantity that does not parse (no kubelet writes one) is left out rather than failing the count.
        if let Ok(milli) = parse_milli(&quantity.0) {
            let sum = total.entry(name.clone()).or_default();
            *sum = sum.saturating_add(milli);
        }
    }
}

fn in_pool(labels_: &BTreeMap<String, String>, pool: &str) -> bool {
    labels_.get(labels::NODEPOOL_LABEL).is_some_and(|p| p == pool)
}

/// Counts the nodes of NodePool `pool`.
pub fn pool_resources<'a>(
    pool: &str,
    nodes: impl IntoIterator<Item = &'a Node>,
    claims: impl IntoIterator<Item = &'a NodeClaim>,
) -> PoolResources {
    let mut milli: BTreeMap<String, i64> = BTreeMap::new();
    let mut count: i64 = 0;
    let mut registered: HashSet<String> = HashSet::new();
    for node in nodes {
        if let Some(id) = node.spec.as_ref().and_then(|s| s.provider_id.clone()) {
            registered.insert(id);
        }
        if !in_pool(node.labels(), pool) {
            continue;
        }
        count += 1;
        add(&mut milli, node.status.as_ref().and_then(|s| s.capacity.as_ref()));
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
        add(&mut milli, status.capacity.as_ref());
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
    use serde_json::json;

    use super::*;

    fn node(name: &str, pool: &str, cpu: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {labels::NODEPOOL_LABEL: pool}},
            "spec": {"providerID": format!("sim:///{name}")},
            "status": {"capacity": {"cpu": cpu, "memory": "4Gi", "pods": "10", "ephemeral-storage": "20Gi"}}
        }))
        .unwrap()
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
}
