//! Upstream's launch filters that narrow the offerings a NodeClaim allows before CreateFleet is asked
//! (aws/karpenter-provider-aws `pkg/providers/instance/filter`), applied by [`super::plan_launch`] in upstream's
//! order, after the reserved offerings have been preferred:
//! - [`drop_exotic`]: exotic instance types (a `metal` size, or any NVIDIA or AMD GPU, AWS Neuron device or core,
//!   or Habana Gaudi) are not launched when ordinary types can serve the claim; a claim that needs them (a pod
//!   requesting `nvidia.com/gpu`, a requirement on the type) is served only by them, so they remain;
//! - [`drop_pricier_spot`]: in a launch that may be spot or on-demand, spot offerings dearer than the cheapest
//!   on-demand offering are dropped, so a flexible claim never pays more for spot than on-demand would cost; when
//!   every spot offering is dearer, the launch is on-demand.
//!
//! Both leave a claim with `minValues` alone (narrowing its types could leave fewer than it requires), and neither
//! ever drops every offering: what they would drop all of, they keep.

use std::collections::BTreeSet;

use karpenter_api::labels::{
    RESOURCE_AMD_GPU, RESOURCE_AWS_NEURON, RESOURCE_AWS_NEURON_CORE, RESOURCE_HABANA_GAUDI,
    RESOURCE_NVIDIA_GPU,
};
use karpenter_core::catalog::CatalogInstanceType;

use super::Candidate;
use crate::instance_types::{CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT};

/// The instance-size label, whose `metal` sizes are exotic.
const INSTANCE_SIZE_LABEL: &str = "karpenter.k8s.aws/instance-size";

/// The accelerators that make a type exotic (upstream's `WellKnownExoticResources`; EFA does not).
const EXOTIC_RESOURCES: [&str; 5] = [
    RESOURCE_AWS_NEURON,
    RESOURCE_AWS_NEURON_CORE,
    RESOURCE_AMD_GPU,
    RESOURCE_NVIDIA_GPU,
    RESOURCE_HABANA_GAUDI,
];

/// Whether upstream's exotic filter counts `entry` exotic: a size containing `metal`, or any of the accelerators.
pub(super) fn is_exotic(entry: &CatalogInstanceType) -> bool {
    let metal = entry
        .requirements
        .iter()
        .filter(|r| r.key == INSTANCE_SIZE_LABEL)
        .any(|r| r.values.iter().any(|size| size.contains("metal")));
    metal
        || EXOTIC_RESOURCES
            .iter()
            .any(|resource| entry.capacity.get(*resource).is_some_and(|amount| *amount != 0))
}

/// Drops the candidates of exotic types when some of another type remain (not for a claim with `minValues`).
/// Returns the types dropped.
pub(super) fn drop_exotic(candidates: &mut Vec<Candidate>, min_values: bool) -> BTreeSet<String> {
    if min_values || candidates.iter().all(|c| c.exotic) {
        return BTreeSet::new();
    }
    let dropped = candidates
        .iter()
        .filter(|c| c.exotic)
        .map(|c| c.instance_type.clone())
        .collect();
    candidates.retain(|c| !c.exotic);
    dropped
}

/// In a launch `spot_and_on_demand` may make either way, drops the spot candidates dearer than the cheapest
/// on-demand one, when there are both (not for a claim with `minValues`). Returns the types left without a
/// candidate.
pub(super) fn drop_pricier_spot(
    candidates: &mut Vec<Candidate>,
    spot_and_on_demand: bool,
    min_values: bool,
) -> BTreeSet<String> {
    if min_values || !spot_and_on_demand || !candidates.iter().any(|c| c.capacity_type == CAPACITY_TYPE_SPOT)
    {
        return BTreeSet::new();
    }
    let Some(cheapest_on_demand) = candidates
        .iter()
        .filter(|c| c.capacity_type == CAPACITY_TYPE_ON_DEMAND)
        .map(|c| c.price)
        .min_by(f64::total_cmp)
    else {
        return BTreeSet::new();
    };
    let types = |candidates: &[Candidate]| -> BTreeSet<String> {
        candidates.iter().map(|c| c.instance_type.clone()).collect()
    };
    let before = types(candidates);
    candidates.retain(|c| c.capacity_type != CAPACITY_TYPE_SPOT || c.price <= cheapest_on_demand);
    let after = types(candidates);
    before.difference(&after).cloned().collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use karpenter_core::catalog::{CatalogOverhead, CatalogRequirement};

    use super::*;

    fn candidate(instance_type: &str, capacity_type: &str, price: f64, exotic: bool) -> Candidate {
        Candidate {
            instance_type: instance_type.into(),
            zone: "us-west-2a".into(),
            capacity_type: capacity_type.into(),
            price,
            image: 0,
            reservation: None,
            pods: 29,
            exotic,
        }
    }

    fn offered(candidates: &[Candidate]) -> Vec<(&str, &str)> {
        candidates
            .iter()
            .map(|c| (c.instance_type.as_str(), c.capacity_type.as_str()))
            .collect()
    }

    fn entry(size: &str, capacity: &[(&str, i64)]) -> CatalogInstanceType {
        CatalogInstanceType {
            name: format!("x.{size}"),
            requirements: Arc::new(vec![CatalogRequirement::is_in(INSTANCE_SIZE_LABEL, [size])]),
            capacity: capacity.iter().map(|(r, q)| (r.to_string(), *q)).collect(),
            overhead: CatalogOverhead::default(),
            offerings: Vec::new(),
        }
    }

    #[test]
    fn metal_sizes_and_accelerators_are_exotic_and_efa_is_not() {
        let cpu = [("cpu", 4000), ("memory", 16 << 30)];
        assert!(!is_exotic(&entry("xlarge", &cpu)));
        assert!(is_exotic(&entry("metal", &cpu)));
        assert!(is_exotic(&entry("metal-24xl", &cpu)));
        for resource in EXOTIC_RESOURCES {
            assert!(
                is_exotic(&entry("xlarge", &[("cpu", 4000), (resource, 1000)])),
                "{resource}"
            );
            assert!(
                !is_exotic(&entry("xlarge", &[("cpu", 4000), (resource, 0)])),
                "{resource} 0"
            );
        }
        assert!(!is_exotic(&entry("24xlarge", &[("vpc.amazonaws.com/efa", 1000)])));
    }

    #[test]
    fn exotic_types_are_dropped_only_when_ordinary_ones_remain() {
        // Upstream: a generic type and a GPU, a metal and a Neuron type: only the generic one is launched.
        let mut mixed = vec![
            candidate("m5.large", "on-demand", 0.096, false),
            candidate("g4dn.xlarge", "on-demand", 0.526, true),
            candidate("m5.metal", "on-demand", 4.608, true),
            candidate("inf1.xlarge", "on-demand", 0.228, true),
        ];
        let dropped = drop_exotic(&mut mixed, false);
        assert_eq!(offered(&mixed), [("m5.large", "on-demand")]);
        assert_eq!(
            dropped,
            ["g4dn.xlarge", "inf1.xlarge", "m5.metal"]
                .map(String::from)
                .into()
        );
        // Only exotic types serve the claim (it asks for a GPU): they stay.
        let mut gpus = vec![
            candidate("g4dn.xlarge", "on-demand", 0.526, true),
            candidate("p3.2xlarge", "on-demand", 3.06, true),
        ];
        assert!(drop_exotic(&mut gpus, false).is_empty());
        assert_eq!(gpus.len(), 2);
        // A claim with minValues is left alone.
        let mut flexible = vec![
            candidate("m5.large", "on-demand", 0.096, false),
            candidate("g4dn.xlarge", "on-demand", 0.526, true),
        ];
        assert!(drop_exotic(&mut flexible, true).is_empty());
        assert_eq!(flexible.len(), 2);
    }

    #[test]
    fn spot_dearer_than_the_cheapest_on_demand_is_dropped_from_a_spot_or_on_demand_launch() {
        let mixed = || {
            vec![
                candidate("m5.large", "spot", 0.04, false),
                candidate("m5.large", "on-demand", 0.096, false),
                candidate("c5.large", "spot", 0.096, false),
                candidate("m5.xlarge", "spot", 0.12, false),
                candidate("m5.xlarge", "on-demand", 0.192, false),
                candidate("r5.xlarge", "spot", 0.15, false),
            ]
        };
        let mut candidates = mixed();
        let emptied = drop_pricier_spot(&mut candidates, true, false);
        assert_eq!(
            offered(&candidates),
            [
                ("m5.large", "spot"),
                ("m5.large", "on-demand"),
                ("c5.large", "spot"),
                ("m5.xlarge", "on-demand"),
            ],
            "a spot offering at the cheapest on-demand price stays"
        );
        assert_eq!(emptied, ["r5.xlarge".to_string()].into());

        // Not in a launch that may only be spot, nor for a claim with minValues.
        let mut spot_only = mixed();
        assert!(drop_pricier_spot(&mut spot_only, false, false).is_empty());
        assert_eq!(spot_only.len(), 6);
        let mut flexible = mixed();
        assert!(drop_pricier_spot(&mut flexible, true, true).is_empty());
        assert_eq!(flexible.len(), 6);

        // Without on-demand offerings to compare with, or without spot ones, nothing changes.
        let mut no_on_demand: Vec<Candidate> = mixed()
            .into_iter()
            .filter(|c| c.capacity_type == "spot")
            .collect();
        drop_pricier_spot(&mut no_on_demand, true, false);
        assert_eq!(no_on_demand.len(), 4);
        let mut no_spot: Vec<Candidate> = mixed()
            .into_iter()
            .filter(|c| c.capacity_type == "on-demand")
            .collect();
        drop_pricier_spot(&mut no_spot, true, false);
        assert_eq!(no_spot.len(), 2);

        // Every spot offering dearer: only on-demand is left, so the launch is on-demand.
        let mut dear_spot = vec![
            candidate("m5.large", "spot", 0.2, false),
            candidate("m5.large", "on-demand", 0.096, false),
        ];
        drop_pricier_spot(&mut dear_spot, true, false);
        assert_eq!(offered(&dear_spot), [("m5.large", "on-demand")]);
    }
}
