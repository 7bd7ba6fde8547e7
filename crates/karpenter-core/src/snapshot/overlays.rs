//! NodeOverlays (feature gate NodeOverlay): changes to the price of matching offerings and to the capacity of
//! matching instance types, per NodePool as upstream's overlay store keeps them, and the verdict the NodeOverlay
//! status controller writes on each overlay.
//!
//! An overlay matches an instance type of a NodePool when its requirements are compatible with the type's
//! requirements plus the NodePool's template labels and `karpenter.sh/nodepool` (no undefined keys), and it
//! matches at least one of the type's offerings (zone and capacity type). Overlays are tried by precedence
//! (highest weight first, then the name later in the alphabet): the first that changes an offering's price
//! sets it; for each capacity resource the first that sets it wins.
//!
//! An overlay is not used at all when
//! - it fails validation (the CRD's rules and the runtime checks, or its requirements do not parse): verdict
//!   `RuntimeValidation`, naming the field;
//! - it conflicts with an overlay of the same weight ahead of it: both change the price of one offering, or both
//!   set one capacity resource, of the same instance type in the same NodePool (NodePools being deleted aside):
//!   verdict `Conflict`, naming the other overlay and what they both touch. As upstream's overlay controller,
//!   overlays are taken in precedence order and one that conflicts with any overlay already taken is left out
//!   whole (never partly applied). Of two conflicting overlays the one ahead by precedence stays: it is the one
//!   whose price or resource would have been used anyway, so the loser is the one that was shadowed, and the
//!   scheduler, `karpenter schedule` and the status controller all use this one rule.

use std::{collections::HashMap, sync::Arc};

use karpenter_api::{
    label_policy::LabelPolicy,
    nodeoverlay::{NodeOverlay, precedence},
    nodepool::NodePool,
};

use crate::{
    instance_type::{InstanceType, Offering},
    requirements::{Requirements, WellKnownKeys},
    resources::ResourceId,
};

use super::{
    Snapshot,
    context::{Context, Keys, describe},
    nodepools::{label_requirements, pool_labels},
};

struct Compiled<'s> {
    overlay: &'s NodeOverlay,
    requirements: Requirements,
    capacity: Vec<(ResourceId, i64)>,
}

impl Compiled<'_> {
    fn name(&self) -> &str {
        self.overlay.metadata.name.as_deref().unwrap_or_default()
    }

    fn weight(&self) -> i32 {
        self.overlay.spec.weight()
    }
}

/// Why a NodeOverlay is not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OverlayProblem {
    /// It fails validation; the message names the fields at fault.
    RuntimeValidation(String),
    /// It conflicts with NodeOverlay `with`, of the same weight and ahead of it by name; the message says what
    /// they both change.
    Conflict { with: String, message: String },
}

/// What the NodeOverlay status controller writes on one overlay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlayVerdict {
    pub name: String,
    /// `Ok` when the overlay is applied (`ValidationSucceeded=True`).
    pub result: Result<(), OverlayProblem>,
}

/// The usable overlays, by precedence, and the ones left out.
#[derive(Default)]
pub(super) struct Overlays<'s> {
    items: Vec<Compiled<'s>>,
    /// By name: why the overlay is not used.
    rejected: HashMap<String, OverlayProblem>,
}

/// Overlaid instance types, shared across NodePools when the same overlays apply: (index into the catalog's
/// types, overlays matched) to the result.
pub(super) type OverlayCache = HashMap<(usize, Vec<u32>), Arc<InstanceType>>;

/// The overlays of `snapshot` the scheduler applies: validated, then with conflicts resolved over the snapshot's
/// NodePools (those not being deleted) and `types`. Every problem is noted.
pub(super) fn usable_overlays<'s>(
    cx: &mut Context,
    snapshot: &'s Snapshot,
    policy: LabelPolicy,
    types: &[Arc<InstanceType>],
) -> Overlays<'s> {
    let mut overlays = Overlays::compile(cx, &snapshot.node_overlays, policy);
    overlays.resolve_conflicts(cx, &snapshot.node_pools, types);
    overlays
}

impl<'s> Overlays<'s> {
    pub fn compile(cx: &mut Context, overlays: &'s [NodeOverlay], policy: LabelPolicy) -> Self {
        let mut sorted: Vec<&NodeOverlay> = overlays.iter().collect();
        sorted.sort_by(|a, b| precedence(a, b));
        let mut items = Vec::with_capacity(sorted.len());
        let mut rejected = HashMap::new();
        for overlay in sorted {
            let overlay_name = overlay.metadata.name.clone().unwrap_or_default();
            let object = describe("NodeOverlay", None, overlay.metadata.name.as_deref());
            if let Err(e) = overlay.validate(policy) {
                cx.note(object, format!("{e}; not applied"));
                rejected.insert(overlay_name, OverlayProblem::RuntimeValidation(e.fields()));
                continue;
            }
            let requirements = match Requirements::from_api(&overlay.spec.requirements, &mut cx.interner) {
                Ok(r) => r,
                Err(e) => {
                    let problem = format!("spec.requirements: {e}");
                    cx.note(object, format!("{problem}; not applied"));
                    rejected.insert(overlay_name, OverlayProblem::RuntimeValidation(problem));
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
        Self { items, rejected }
    }

    /// Leaves out each overlay that conflicts with an overlay of the same weight taken before it (see the
    /// module's comment), judged on each of `node_pools` not being deleted.
    fn resolve_conflicts(&mut self, cx: &mut Context, node_pools: &[NodePool], types: &[Arc<InstanceType>]) {
        // Sorted by precedence, so overlays of one weight are adjacent: without two of one weight, no conflict.
        let contested: Vec<bool> = (0..self.items.len())
            .map(|j| {
                let w = self.items[j].weight();
                (j > 0 && self.items[j - 1].weight() == w)
                    || self.items.get(j + 1).is_some_and(|n| n.weight() == w)
            })
            .collect();
        if !contested.iter().any(|&c| c) {
            return;
        }
        // Each NodePool's name and its side of the match: `karpenter.sh/nodepool In [name]` and the template
        // labels.
        let pools: Vec<(String, Requirements)> = node_pools
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| {
                let labels = pool_labels(cx, p);
                (
                    p.metadata.name.clone().unwrap_or_default(),
                    label_requirements(&labels),
                )
            })
            .collect();
        let keys = cx.keys;
        let none = WellKnownKeys::none();
        // Per NodePool and instance type: the contested overlays matching it, by precedence.
        let mut matches: Vec<(usize, usize, Vec<usize>)> = Vec::new();
        for (p, (_, pool_side)) in pools.iter().enumerate() {
            for (t, it) in types.iter().enumerate() {
                let combined = pool_side.intersect(&it.requirements);
                let matched: Vec<usize> = (0..self.items.len())
                    .filter(|&j| contested[j])
                    .filter(|&j| {
                        let o = &self.items[j];
                        combined.is_compatible(&o.requirements, &none)
                            && it
                                .offerings
                                .iter()
                                .any(|off| offering_matches(&o.requirements, off, &keys))
                    })
                    .collect();
                if matched.len() > 1 {
                    matches.push((p, t, matched));
                }
            }
        }
        let mut taken = vec![true; self.items.len()];
        let mut lost: Vec<(usize, usize, String)> = Vec::new();
        let view: &Context = cx;
        for j in (0..self.items.len()).filter(|&j| contested[j]) {
            let found = matches
                .iter()
                .filter(|(_, _, matched)| matched.contains(&j))
                .find_map(|(p, t, matched)| {
                    matched
                        .iter()
                        .filter(|&&k| k < j && taken[k] && self.items[k].weight() == self.items[j].weight())
                        .find_map(|&k| {
                            let what = clash(view, &self.items[k], &self.items[j], &types[*t])?;
                            Some((k, format!("{what} in NodePool {}", pools[*p].0)))
                        })
                });
            if let Some((k, what)) = found {
                taken[j] = false;
                lost.push((j, k, what));
            }
        }
        for (j, k, what) in lost {
            let (loser, winner) = (&self.items[j], &self.items[k]);
            let message = format!(
                "conflicts with NodeOverlay {:?} of the same weight ({}), which takes precedence: both {what}",
                winner.name(),
                winner.weight()
            );
            cx.note(
                describe("NodeOverlay", None, Some(loser.name())),
                format!("{message}; not applied"),
            );
            self.rejected.insert(
                loser.name().to_string(),
                OverlayProblem::Conflict {
                    with: winner.name().to_string(),
                    message,
                },
            );
        }
        let mut keep = taken.into_iter();
        self.items.retain(|_| keep.next().unwrap_or(true));
    }

    /// Each overlay of `overlays` (the ones compiled from) with whether it is applied and why not.
    pub fn verdicts(&self, overlays: &[NodeOverlay]) -> Vec<OverlayVerdict> {
        overlays
            .iter()
            .map(|o| {
                let name = o.metadata.name.clone().unwrap_or_default();
                let result = match self.rejected.get(&name) {
                    Some(problem) => Err(problem.clone()),
                    None => Ok(()),
                };
                OverlayVerdict { name, result }
            })
            .collect()
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
                out.overlays_applied.price = true;
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
                out.overlays_applied.capacity = true;
            }
        }
        out
    }
}

/// What `a` and `b`, both matching `it`, would both change on it: the price of one offering, or one capacity
/// resource. `None` when they touch different things.
fn clash(cx: &Context, a: &Compiled<'_>, b: &Compiled<'_>, it: &InstanceType) -> Option<String> {
    let keys = &cx.keys;
    if a.overlay.spec.changes_price() && b.overlay.spec.changes_price() {
        let shared = it.offerings.iter().find(|o| {
            offering_matches(&a.requirements, o, keys) && offering_matches(&b.requirements, o, keys)
        });
        if let Some(o) = shared {
            return Some(format!(
                "change the price of instance type {} in zone {} ({})",
                it.name,
                cx.interner.resolve(o.zone),
                cx.interner.resolve(o.capacity_type)
            ));
        }
    }
    let resource = a
        .capacity
        .iter()
        .find(|(id, _)| b.capacity.iter().any(|(other, _)| other == id))?;
    Some(format!(
        "set capacity {} of instance type {}",
        cx.table.name(resource.0),
        it.name
    ))
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

    fn verdicts(objects: &[&str]) -> Vec<(String, Result<(), super::OverlayProblem>)> {
        super::super::node_overlay_verdicts(
            &snapshot(objects),
            &catalog(),
            karpenter_api::label_policy::LabelPolicy::Aws,
        )
        .into_iter()
        .map(|v| (v.name, v.result))
        .collect()
    }

    fn conflict_with(result: &Result<(), super::OverlayProblem>) -> Option<(&str, &str)> {
        match result {
            Err(super::OverlayProblem::Conflict { with, message }) => Some((with.as_str(), message.as_str())),
            _ => None,
        }
    }

    fn prices(it: &crate::instance_type::InstanceType, built: &ScheduleInputs, ct: &str) -> Vec<f64> {
        let ct = built.interner.lookup(ct).unwrap();
        it.offerings
            .iter()
            .filter(|o| o.capacity_type == ct)
            .map(|o| o.price)
            .collect()
    }

    #[test]
    fn equal_weights_pricing_one_offering_conflict_and_the_one_behind_by_name_is_not_applied() {
        // Both change the price of small's spot offerings at weight 10. Among equal weights the name later in
        // the alphabet goes first, so `b` stays and `a` loses, whole: its on-demand price is not applied either.
        let a = overlay(
            "a",
            10,
            "  requirements: [{key: size, operator: In, values: [small]}]\n  price: \"0.01\"\n",
        );
        let b = overlay(
            "b",
            10,
            "  requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]\n  price: \"0.02\"\n",
        );
        let v = verdicts(&[DEFAULT_POOL, &a, &b]);
        assert_eq!(v[1], ("b".to_string(), Ok(())));
        let (with, message) = conflict_with(&v[0].1).expect("a conflicts");
        assert_eq!(with, "b");
        assert!(
            message.contains("NodeOverlay \"b\"")
                && message.contains("price of instance type small")
                && message.contains("NodePool default"),
            "{message}"
        );

        let built = build(&[DEFAULT_POOL, &a, &b], true);
        let it = small(&built);
        assert!(prices(it, &built, "spot").iter().all(|p| (p - 0.02).abs() < 1e-9));
        assert!(
            prices(it, &built, "on-demand")
                .iter()
                .all(|p| (p - 0.1).abs() < 1e-9),
            "the loser is not applied anywhere"
        );
        assert!(
            built
                .notes
                .iter()
                .any(|n| n.object == "NodeOverlay a" && n.message.contains("not applied")),
            "{:?}",
            built.notes
        );
    }

    #[test]
    fn overlays_conflict_only_at_equal_weight_on_a_shared_offering_or_resource() {
        let spot = |name: &str, weight: u32| {
            overlay(
                name,
                weight,
                "  requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]\n  priceAdjustment: \"-10%\"\n",
            )
        };
        let on_demand = overlay(
            "od",
            10,
            "  requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]\n  priceAdjustment: \"+10%\"\n",
        );
        let heavier = spot("heavier", 20);
        let device = |name: &str, resource: &str| {
            overlay(
                name,
                10,
                &format!("  requirements: []\n  capacity: {{{resource}: \"1\"}}\n"),
            )
        };
        // Different offerings at one weight; one offering at different weights; a price and a capacity change
        // at one weight; different resources at one weight: no conflict.
        let dev_a = device("dev-a", "example.com/a");
        let dev_b = device("dev-b", "example.com/b");
        let spot10 = spot("spot", 10);
        let v = verdicts(&[DEFAULT_POOL, &spot10, &on_demand, &heavier, &dev_a, &dev_b]);
        assert!(v.iter().all(|(_, r)| r.is_ok()), "{v:?}");

        // The same resource at one weight conflicts; `dev-b` is ahead of `dev-a` by name.
        let dev_a_again = device("dev-a", "example.com/b");
        let v = verdicts(&[DEFAULT_POOL, &dev_a_again, &dev_b]);
        let (with, message) = conflict_with(&v[0].1).expect("dev-a conflicts");
        assert_eq!(with, "dev-b");
        assert!(message.contains("capacity example.com/b"), "{message}");
        assert_eq!(v[1].1, Ok(()));
    }

    #[test]
    fn a_conflict_is_judged_against_the_overlays_applied_only() {
        // `c` beats `b` on small's spot price; `a` sets the same resource as `b` only, and `b` is not applied,
        // so `a` is.
        let c = overlay(
            "c",
            5,
            "  requirements: [{key: size, operator: In, values: [small]}]\n  price: \"0.03\"\n",
        );
        let b = overlay(
            "b",
            5,
            "  requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]\n  price: \"0.02\"\n  capacity: {example.com/x: \"1\"}\n",
        );
        let a = overlay("a", 5, "  requirements: []\n  capacity: {example.com/x: \"2\"}\n");
        let v = verdicts(&[DEFAULT_POOL, &a, &b, &c]);
        assert_eq!(v[0], ("a".to_string(), Ok(())));
        assert_eq!(conflict_with(&v[1].1).map(|(w, _)| w), Some("c"));
        assert_eq!(v[2], ("c".to_string(), Ok(())));
        let built = build(&[DEFAULT_POOL, &a, &b, &c], true);
        let id = built.table.get("example.com/x").unwrap();
        assert_eq!(small(&built).capacity.get(id), 2000);
    }

    #[test]
    fn an_overlay_failing_validation_is_reported_with_the_field() {
        let bad = overlay("bad", 1, "  requirements: []\n  priceAdjustment: \"-150%\"\n");
        let v = verdicts(&[DEFAULT_POOL, &bad]);
        match &v[0].1 {
            Err(super::OverlayProblem::RuntimeValidation(message)) => {
                assert!(message.starts_with("spec.priceAdjustment"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        let built = build(&[DEFAULT_POOL, &bad], true);
        assert!((small(&built).offerings[0].price - 0.05).abs() < 1e-9);
    }
}
