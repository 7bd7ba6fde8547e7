//! The offering prices a launch follows when NodeOverlays reprice a NodePool's instance types.
//!
//! The scheduler picks a NodeClaim's instance types by their overlaid prices and marks the claim
//! `karpenter.sh/price-overlay-applied`; the cloud provider then launches from its own catalog, whose prices are
//! the cloud's. [`apply_overlay_prices`] puts the overlaid prices back on that catalog, with the very overlays
//! and precedence the scheduler used (validation and conflicts included), so the launch can ask EC2 to follow
//! them (its prioritized allocation strategies) rather than the cloud's list prices.

use std::collections::HashMap;

use karpenter_api::{label_policy::LabelPolicy, nodepool::NodePool};

use crate::catalog::CatalogFile;

use super::{
    Snapshot,
    context::Context,
    intern_catalog,
    nodepools::{label_requirements, pool_labels},
    overlays::{OverlayCache, usable_overlays},
};

/// Reprices the offerings of `catalog` as NodePool `pool` sees them after the NodeOverlays of `snapshot`
/// (judged over `snapshot.node_pools`, as the scheduler judges conflicts). Capacity overlays are left out: only
/// prices change. Returns how many offerings were repriced.
pub fn apply_overlay_prices(
    snapshot: &Snapshot,
    catalog: &mut CatalogFile,
    policy: LabelPolicy,
    pool: &NodePool,
) -> usize {
    if snapshot.node_overlays.is_empty() {
        return 0;
    }
    let mut cx = Context::new();
    let interned = intern_catalog(&mut cx, catalog);
    let overlays = usable_overlays(&mut cx, snapshot, policy, &interned);
    let labels = pool_labels(&mut cx, pool);
    let pool_side = label_requirements(&labels);
    let overlaid = overlays.apply(&cx.keys, &pool_side, &interned, &mut OverlayCache::new());
    let by_name: HashMap<&str, _> = overlaid
        .iter()
        .filter(|it| it.overlays_applied.price)
        .map(|it| (it.name.as_str(), it))
        .collect();

    let mut repriced = 0;
    for it in &mut catalog.instance_types {
        let Some(overlaid) = by_name.get(it.name.as_str()) else {
            continue;
        };
        for offering in &mut it.offerings {
            let zone = cx.interner.intern(&offering.zone);
            let capacity_type = cx.interner.intern(&offering.capacity_type);
            let reservation = offering.reservation_id.as_deref().map(|r| cx.interner.intern(r));
            let Some(found) = overlaid.offerings.iter().find(|o| {
                o.zone == zone && o.capacity_type == capacity_type && o.reservation_id == reservation
            }) else {
                continue;
            };
            if found.price.to_bits() != offering.price.to_bits() {
                offering.price = found.price;
                repriced += 1;
            }
        }
    }
    repriced
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    const POOL: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    metadata:\n      labels: {team: a}\n    spec:\n      requirements: []\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n";

    fn overlay(name: &str, weight: u32, body: &str) -> String {
        format!(
            "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {{name: {name}}}\nspec:\n  weight: {weight}\n{body}"
        )
    }

    fn price(catalog: &CatalogFile, name: &str, capacity_type: &str) -> f64 {
        catalog
            .instance_types
            .iter()
            .find(|t| t.name == name)
            .and_then(|t| t.offerings.iter().find(|o| o.capacity_type == capacity_type))
            .map(|o| o.price)
            .unwrap_or(f64::NAN)
    }

    #[test]
    fn the_launch_catalog_gets_the_prices_the_scheduler_used() {
        let discount = overlay(
            "small-discount",
            10,
            "  requirements:\n  - {key: node.kubernetes.io/instance-type, operator: In, values: [small]}\n  - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n  priceAdjustment: \"-50%\"\n",
        );
        let other_team = overlay(
            "other-team",
            20,
            "  requirements:\n  - {key: team, operator: In, values: [b]}\n  price: \"0.001\"\n",
        );
        let snapshot = snapshot(&[POOL, &discount, &other_team]);
        let mut catalog = catalog();
        let before_od = price(&catalog, "small", "on-demand");
        let before_spot = price(&catalog, "small", "spot");
        let before_large = price(&catalog, "large", "on-demand");
        let pool = &snapshot.node_pools[0];

        let repriced = apply_overlay_prices(&snapshot, &mut catalog, LabelPolicy::Aws, pool);

        assert!(repriced > 0, "the small on-demand offerings are repriced");
        assert!((price(&catalog, "small", "on-demand") - before_od / 2.0).abs() < 1e-9);
        assert_eq!(
            price(&catalog, "small", "spot").to_bits(),
            before_spot.to_bits(),
            "spot untouched"
        );
        assert_eq!(
            price(&catalog, "large", "on-demand").to_bits(),
            before_large.to_bits()
        );
    }

    #[test]
    fn an_overlay_in_conflict_is_not_applied_to_the_launch_either() {
        let a = overlay(
            "a",
            10,
            "  requirements:\n  - {key: node.kubernetes.io/instance-type, operator: In, values: [small]}\n  price: \"0.010\"\n",
        );
        let b = overlay(
            "b",
            10,
            "  requirements:\n  - {key: node.kubernetes.io/instance-type, operator: In, values: [small]}\n  price: \"0.020\"\n",
        );
        let snapshot = snapshot(&[POOL, &a, &b]);
        let mut catalog = catalog();
        let pool = &snapshot.node_pools[0];

        apply_overlay_prices(&snapshot, &mut catalog, LabelPolicy::Aws, pool);

        // "b" is ahead by name at the same weight; "a" conflicts with it and is left out whole.
        assert!((price(&catalog, "small", "on-demand") - 0.020).abs() < 1e-9);
    }

    #[test]
    fn no_overlay_changes_nothing() {
        let snapshot = snapshot(&[POOL]);
        let mut catalog = catalog();
        let before = catalog.clone();
        let pool = &snapshot.node_pools[0];
        assert_eq!(
            apply_overlay_prices(&snapshot, &mut catalog, LabelPolicy::Aws, pool),
            0
        );
        assert_eq!(catalog, before);
    }
}
