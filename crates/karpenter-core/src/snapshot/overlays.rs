//! NodeOverlays (feature gate NodeOverlay): changes to the price of matching offerings and to the capacity of
//! matching instance types, per NodePool as upstream's overlay store keeps them.
//!
//! An overlay matches an instance type of a NodePool when its requirements are compatible with the type's
//! requirements plus the NodePool's template labels and `karpenter.sh/nodepool` (no undefined keys), and it
//! matches at least one of the type's offerings (zone and capacity type). Overlays are tried by precedence
//! (highest weight first, then name): the first that changes an offering's price sets it; for each capacity
//! resource the first that sets it wins. An overlay that fails validation is noted and not used.

use std::{collections::HashMap, sync::Arc};

use karpenter_api::{
    label_policy::LabelPolicy,
    nodeoverlay::{NodeOverlay, precedence},
};

use crate::{
    instance_type::{InstanceType, Offering},
    requirements::{Requirements, WellKnownKeys},
    resources::ResourceId,
};

use super::context::{Context, Keys, describe};

struct Compiled<'s> {
    overlay: &'s NodeOverlay,
    requirements: Requirements,
    capacity: Vec<(ResourceId, i64)>,
}

/// The usable overlays, by precedence.
#[derive(Default)]
pub(super) struct Overlays<'s> {
    items: Vec<Compiled<'s>>,
}

/// Overlaid instance types, shared across NodePools when the same overlays apply: (index into the catalog's
/// types, overlays matched) to the result.
pub(super) type OverlayCache = HashMap<(usize, Vec<u32>), Arc<InstanceType>>;

impl<'s> Overlays<'s> {
    pub fn compile(cx: &mut Context, overlays: &'s [NodeOverlay], policy: LabelPolicy) -> Self {
        let mut sorted: Vec<&NodeOverlay> = overlays.iter().collect();
        sorted.sort_by(|a, b| precedence(a, b));
        let mut items = Vec::with_capacity(sorted.len());
        for overlay in sorted {
            let object = describe("NodeOverlay", None, overlay.metadata.name.as_deref());
            if let Err(e) = overlay.validate(policy) {
                cx.note(object, format!("{e}; not applied"));
                continue;
            }
            let requirements = match Requirements::from_api(&overlay.spec.requirements, &mut cx.interner) {
                Ok(r) => r,
                Err(e) => {
                    cx.note(object, format!("spec.requirements: {e}; not applied"));
                    continue;
                }
            };
            let mut capacity = Vec::new();
            for (name, q) in overlay.spec.capacity.iter().flatten() {
                match karpenter_api::quantity::parse_milli(&q.0) {
                    Ok(v) => capacity.push((cx.table.intern(name), v)),
                    Err(e) => cx.note(object.clone(), format!("spec.capacity.{name}: {e}; ignored")),
                }
            }
            items.push(Compiled {
                overlay,
                requirements,
                capacity,
            });
        }
        Self { items }
    }

    /// The catalog's types as a NodePool sees them. `pool_side`: `karpenter.sh/nodepool In [name]` and the
    /// template labels.
    pub fn apply(
        &self,
        keys: &Keys,
        pool_side: &Requirements,
        types: &[Arc<InstanceType>],
        cache: &mut OverlayCache,
    ) -> Vec<Arc<InstanceType>> {
        if self.items.is_empty() {
            return types.to_vec();
        }
        let none = WellKnownKeys::none();
        types
            .iter()
            .enumerate()
            .map(|(i, it)| {
                let combined = pool_side.intersect(&it.requirements);
                let matched: Vec<u32> = self
                    .items
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| {
                        combined.is_compatible(&o.requirements, &none)
                            && it
                                .offerings
                                .iter()
                                .any(|off| offering_matches(&o.requirements, off, keys))
                    })
                    .map(|(j, _)| u32::try_from(j).unwrap_or(u32::MAX))
                    .collect();
                if matched.is_empty() {
                    return it.clone();
                }
                cache
                    .entry((i, matched))
                    .or_insert_with_key(|(_, matched)| Arc::new(self.overlaid(it, matched, keys)))
                    .clone()
            })
            .collect()
    }

    fn overlaid(&self, it: &InstanceType, matched: &[u32], keys: &Keys) -> InstanceType {
        let mut out = it.clone();
        let overlays: Vec<&Compiled<'_>> = matched
            .iter()
            .filter_map(|&j| self.items.get(j as usize))
            .collect();
        for (offering, original) in out.offerings.iter_mut().zip(&it.offerings) {
            if let Some(o) = overlays
                .iter()
                .find(|o| o.overlay.spec.changes_price() && offering_matches(&o.requirements, original, keys))
            {
                offering.price = o.overlay.apply_price(original.price);
            }
        }
        out.offerings.sort_by(|a, b| a.price.total_cmp(&b.price));
        let mut set: Vec<ResourceId> = Vec::new();
        for o in &overlays {
            for &(id, v) in &o.capacity {
                if set.contains(&id) {
                    continue;
                }
                set.push(id);
                out.capacity.set(id, v);
                out.allocatable
                    .set(id, v.saturating_sub(out.overhead.get(id)).max(0));
            }
        }
        out
    }
}

fn offering_matches(requirements: &Requirements, o: &Offering, keys: &Keys) -> bool {
    requirements.allows(keys.zone, o.zone) && requirements.allows(keys.capacity_type, o.capacity_type)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::{BuildOptions, ScheduleInputs, build_schedule_inputs};

    fn overlay(name: &str, weight: u32, body: &str) -> String {
        format!(
            "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {{name: {name}}}\nspec:\n  weight: {weight}\n{body}"
        )
    }

    fn build(objects: &[&str], gate: bool) -> ScheduleInputs {
        let options = BuildOptions {
            node_overlays: gate,
            ..Default::default()
        };
        build_schedule_inputs(&snapshot(objects), &catalog(), &options)
    }

    fn small(built: &ScheduleInputs) -> &crate::instance_type::InstanceType {
        built.input.templates[0]
            .instance_types
            .iter()
            .find(|t| t.name == "small")
            .unwrap()
    }

    #[test]
    fn overlay_price_highest_weight_wins() {
        let cheap = overlay(
            "cheap",
            10,
            "  requirements: [{key: size, operator: In, values: [small]}]\n  price: \"0.01\"\n",
        );
        let heavy = overlay(
            "heavy",
            50,
            "  requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]\n  priceAdjustment: \"+100%\"\n",
        );
        let built = build(&[DEFAULT_POOL, &cheap, &heavy], true);
        assert!(built.notes.is_empty(), "{:?}", built.notes);
        let i = &built.interner;
        let od = i.lookup("on-demand").unwrap();
        let it = small(&built);
        // on-demand offerings: the weight-50 overlay doubles them; spot: only the weight-10 one applies.
        assert!(
            it.offerings
                .iter()
                .filter(|o| o.capacity_type == od)
                .all(|o| (o.price - 0.2).abs() < 1e-9)
        );
        assert!(
            it.offerings
                .iter()
                .filter(|o| o.capacity_type != od)
                .all(|o| (o.price - 0.01).abs() < 1e-9)
        );
        assert!(
            it.offerings.windows(2).all(|w| w[0].price <= w[1].price),
            "offerings stay cheapest first"
        );
        let large = built.input.templates[0]
            .instance_types
            .iter()
            .find(|t| t.name == "large")
            .unwrap();
        assert!((large.offerings[0].price - 0.8).abs() < 1e-9);
    }

    #[test]
    fn overlay_capacity_adds_an_extended_resource_to_matching_types() {
        let hugepages = overlay(
            "hp",
            1,
            "  requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]\n  capacity: {example.com/device: \"2\"}\n",
        );
        let built = build(&[DEFAULT_POOL, &hugepages], true);
        let id = built.table.get("example.com/device").unwrap();
        assert_eq!(small(&built).allocatable.get(id), 2000);
        let arm = built.input.templates[0]
            .instance_types
            .iter()
            .find(|t| t.name == "arm")
            .unwrap();
        assert_eq!(arm.allocatable.get(id), 0);
    }

    #[test]
    fn overlays_are_ignored_without_the_gate() {
        let cheap = overlay("cheap", 10, "  requirements: []\n  price: \"0.01\"\n");
        let built = build(&[DEFAULT_POOL, &cheap], false);
        assert!((small(&built).offerings[0].price - 0.05).abs() < 1e-9);
        assert_eq!(built.notes.len(), 1);
        assert!(built.notes[0].message.contains("gate"));
    }

    #[test]
    fn overlays_can_target_one_nodepool() {
        let other = DEFAULT_POOL.replace("name: default}", "name: other}");
        let only_other = overlay(
            "o",
            1,
            "  requirements: [{key: karpenter.sh/nodepool, operator: In, values: [other]}]\n  price: \"0.01\"\n",
        );
        let built = build(&[DEFAULT_POOL, &other, &only_other], true);
        let price = |pool: &str| {
            let t = built.template_names.iter().position(|n| n == pool).unwrap();
            built.input.templates[t]
                .instance_types
                .iter()
                .find(|t| t.name == "small")
                .unwrap()
                .offerings[0]
                .price
        };
        assert!((price("default") - 0.05).abs() < 1e-9);
        assert!((price("other") - 0.01).abs() < 1e-9);
    }
}
