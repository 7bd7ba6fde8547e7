//! The instance types the simulation may launch: what the cloud provider offers each NodePool, gathered into one
//! catalog that records which versions each NodePool was offered. NodePools of different node classes see the
//! same instance type differently (an EC2NodeClass's subnets decide its zones, its kubelet and volumes its
//! capacity), so a type appears once per distinct version and each NodePool launches only its own.
//!
//! One NodePool whose node class the provider cannot read does not stop the others: it is left out with its
//! error, as upstream's provisioner skips a NodePool whose instance types cannot be listed.

use std::collections::HashMap;

use karpenter_api::nodepool::NodePool;
use karpenter_core::{
    catalog::CatalogFile,
    cloudprovider::{CloudProvider, CloudProviderError},
};

/// What the provider offers a set of NodePools.
#[derive(Debug, Default)]
pub struct NodePoolCatalog {
    /// Every version of every instance type any NodePool is offered, with `node_pool_types` saying which
    /// NodePool may launch which.
    pub catalog: CatalogFile,
    /// NodePools whose instance types could not be listed, with why; they are offered nothing.
    pub failed: Vec<(String, CloudProviderError)>,
}

/// The instance types the provider offers each of `pools`.
pub async fn catalog_by_node_pool(cloud: &dyn CloudProvider, pools: &[NodePool]) -> NodePoolCatalog {
    let mut out = NodePoolCatalog::default();
    // Name to the indices of its versions so far.
    let mut versions: HashMap<String, Vec<usize>> = HashMap::new();
    for pool in pools {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let types = match cloud.instance_types(pool).await {
            Ok(types) => types,
            Err(error) => {
                out.catalog.node_pool_types.insert(name.clone(), Vec::new());
                out.failed.push((name, error));
                continue;
            }
        };
        let mut offered = Vec::with_capacity(types.len());
        for it in types {
            let seen = versions.entry(it.name.clone()).or_default();
            let index = match seen.iter().find(|&&i| out.catalog.instance_types[i] == it) {
                Some(&i) => i,
                None => {
                    let i = out.catalog.instance_types.len();
                    out.catalog.instance_types.push(it);
                    seen.push(i);
                    i
                }
            };
            offered.push(index);
        }
        out.catalog.node_pool_types.insert(name, offered);
    }
    out
}

/// [`catalog_by_node_pool`] for callers that do not tell NodePools apart: a NodePool that failed is offered
/// nothing (and logged); the error is returned only when every NodePool failed.
pub async fn catalog_for(
    cloud: &dyn CloudProvider,
    pools: &[NodePool],
) -> Result<CatalogFile, CloudProviderError> {
    let NodePoolCatalog { catalog, mut failed } = catalog_by_node_pool(cloud, pools).await;
    if !failed.is_empty() && failed.len() == pools.len() {
        return Err(failed.swap_remove(0).1);
    }
    for (pool, error) in &failed {
        tracing::warn!(nodepool = %pool, category = error.category(), %error, "instance types could not be listed; the NodePool is offered none");
    }
    Ok(catalog)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use async_trait::async_trait;
    use karpenter_api::nodeclaim::NodeClaim;
    use karpenter_core::{
        catalog::CatalogInstanceType,
        cloudprovider::{NodeClassKind, RepairPolicy},
        disruption::drift::DriftProvider,
    };
    use serde_json::json;

    use super::*;

    /// Offers m5.large in the zone named by the NodePool's node class; class "broken" cannot be read.
    struct ZonePerClass;

    fn m5_large(zone: &str) -> CatalogInstanceType {
        let file = json!({"wellKnownLabels": [], "instanceTypes": [{
            "name": "m5.large",
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}],
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
            "overhead": {"kubeReserved": {}, "systemReserved": {}, "evictionThreshold": {}},
            "offerings": [{"zone": zone, "capacityType": "on-demand", "price": 0.096, "available": true,
                           "reservationId": null, "reservationCapacity": null}]}]});
        let mut file = CatalogFile::from_json_str(&file.to_string()).expect("catalog");
        file.instance_types.remove(0)
    }

    impl DriftProvider for ZonePerClass {
        fn is_drifted(&self, _: &NodeClaim) -> Option<String> {
            None
        }
    }

    #[async_trait]
    impl CloudProvider for ZonePerClass {
        fn name(&self) -> &'static str {
            "zone-per-class"
        }
        // Nothing is launched in these tests.
        async fn create(&self, _: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
            Err(CloudProviderError::NodeClaimNotFound("none".into()))
        }
        async fn delete(&self, _: &NodeClaim) -> Result<(), CloudProviderError> {
            Err(CloudProviderError::NodeClaimNotFound("none".into()))
        }
        async fn get(&self, id: &str) -> Result<NodeClaim, CloudProviderError> {
            Err(CloudProviderError::NodeClaimNotFound(id.into()))
        }
        async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
            Ok(Vec::new())
        }
        async fn instance_types(
            &self,
            pool: &NodePool,
        ) -> Result<Vec<CatalogInstanceType>, CloudProviderError> {
            match pool.spec.template.spec.node_class_ref.name.as_str() {
                "broken" => Err(CloudProviderError::NodeClassNotReady {
                    name: "broken".into(),
                    reason: "no subnets".into(),
                }),
                zone => Ok(vec![m5_large(zone)]),
            }
        }
        fn repair_policies(&self) -> Vec<RepairPolicy> {
            Vec::new()
        }
        fn supported_node_classes(&self) -> Vec<NodeClassKind> {
            Vec::new()
        }
    }

    fn pool(name: &str, class: &str) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": class}}}}
        }))
        .expect("NodePool")
    }

    #[tokio::test]
    async fn each_node_pool_is_offered_its_own_node_class_s_version_of_a_type() {
        let pools = [pool("a", "zone-a"), pool("b", "zone-b"), pool("c", "zone-a")];
        let got = catalog_by_node_pool(&ZonePerClass, &pools).await;
        assert!(got.failed.is_empty());
        let zones: Vec<&str> = got
            .catalog
            .instance_types
            .iter()
            .map(|t| t.offerings[0].zone.as_str())
            .collect();
        assert_eq!(zones, ["zone-a", "zone-b"], "one entry per distinct version");
        assert_eq!(
            got.catalog.node_pool_types,
            BTreeMap::from([
                ("a".into(), vec![0]),
                ("b".into(), vec![1]),
                ("c".into(), vec![0])
            ])
        );
    }

    #[tokio::test]
    async fn a_node_pool_whose_class_fails_does_not_fail_the_others() {
        let pools = [pool("good", "zone-a"), pool("bad", "broken")];
        let got = catalog_by_node_pool(&ZonePerClass, &pools).await;
        assert_eq!(got.failed.len(), 1);
        assert_eq!(got.failed[0].0, "bad");
        assert_eq!(got.catalog.node_pool_types["good"], vec![0]);
        assert!(got.catalog.node_pool_types["bad"].is_empty(), "offered nothing");

        let catalog = catalog_for(&ZonePerClass, &pools)
            .await
            .expect("one NodePool is fine");
        assert_eq!(catalog.instance_types.len(), 1);
        let all_bad = catalog_for(&ZonePerClass, &pools[1..]).await;
        assert!(all_bad.is_err(), "nothing can be offered at all");
    }
}
