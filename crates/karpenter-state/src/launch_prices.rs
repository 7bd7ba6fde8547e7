//! The NodeOverlay prices a launch follows, read from the cache: the controller hands this to a cloud provider
//! that launches by priority (AWS), so the instance EC2 picks for a NodeClaim is the one the overlaid prices
//! made cheapest, not the cheapest at list price.

use karpenter_api::label_policy::LabelPolicy;
use karpenter_core::{catalog::CatalogFile, cloudprovider::LaunchPrices, snapshot::apply_overlay_prices};

use crate::ClusterState;

/// [`LaunchPrices`] over the cache's NodeOverlays and NodePools.
#[derive(Debug, Clone)]
pub struct CachedLaunchPrices {
    state: ClusterState,
    /// The label rules overlays are validated with (the provisioner's).
    policy: LabelPolicy,
}

impl CachedLaunchPrices {
    pub fn new(state: ClusterState, policy: LabelPolicy) -> Self {
        Self { state, policy }
    }
}

impl LaunchPrices for CachedLaunchPrices {
    fn apply(&self, node_pool: &str, catalog: &mut CatalogFile) -> usize {
        // Conflicts are judged over every NodePool not being deleted, as the scheduler judges them.
        let snapshot = self.state.node_overlay_snapshot();
        if snapshot.node_overlays.is_empty() {
            return 0;
        }
        let Some(pool) = snapshot
            .node_pools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(node_pool))
        else {
            return 0;
        };
        apply_overlay_prices(&snapshot, catalog, self.policy, pool)
    }
}

#[cfg(test)]
mod tests {
    use karpenter_api::{nodeoverlay::NodeOverlay, nodepool::NodePool};
    use serde_json::json;

    use super::*;

    fn catalog() -> CatalogFile {
        let offering = |ct: &str, price: f64| {
            json!({"zone": "zone-a", "capacityType": ct, "price": price, "available": true,
                   "reservationId": null, "reservationCapacity": null})
        };
        let it = |name: &str, od: f64| {
            json!({"name": name,
                   "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [name]}],
                   "capacity": {"cpu": "2", "memory": "8Gi", "pods": "20"},
                   "overhead": {"kubeReserved": {}, "systemReserved": {}, "evictionThreshold": {}},
                   "offerings": [offering("on-demand", od), offering("spot", od / 3.0)]})
        };
        let text =
            json!({"wellKnownLabels": [], "instanceTypes": [it("m5.large", 0.096), it("m6i.large", 0.096)]});
        CatalogFile::from_json_str(&text.to_string()).expect("test catalog")
    }

    fn pool(name: &str) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
        }))
        .expect("NodePool")
    }

    fn prefer_m6i() -> NodeOverlay {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": "prefer-m6i"},
            "spec": {"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m6i.large"]},
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["general"]}],
                "priceAdjustment": "-10%"}
        }))
        .expect("NodeOverlay")
    }

    fn on_demand_price(catalog: &CatalogFile, name: &str) -> f64 {
        catalog
            .instance_types
            .iter()
            .find(|t| t.name == name)
            .and_then(|t| t.offerings.iter().find(|o| o.capacity_type == "on-demand"))
            .map(|o| o.price)
            .unwrap_or(f64::NAN)
    }

    #[test]
    fn a_node_pool_s_launch_catalog_carries_the_cached_overlays_prices() {
        let state = ClusterState::default();
        state.node_pools.apply(pool("general"));
        state.node_pools.apply(pool("batch"));
        state.node_overlays.apply(prefer_m6i());
        let prices = CachedLaunchPrices::new(state, LabelPolicy::Aws);

        let mut general = catalog();
        assert_eq!(
            prices.apply("general", &mut general),
            2,
            "m6i.large's two offerings"
        );
        assert!((on_demand_price(&general, "m6i.large") - 0.0864).abs() < 1e-9);
        assert!((on_demand_price(&general, "m5.large") - 0.096).abs() < 1e-9);

        let mut batch = catalog();
        assert_eq!(
            prices.apply("batch", &mut batch),
            0,
            "the overlay selects NodePool general only"
        );
        assert_eq!(batch, catalog());
        let mut unknown = catalog();
        assert_eq!(prices.apply("gone", &mut unknown), 0);
    }
}
