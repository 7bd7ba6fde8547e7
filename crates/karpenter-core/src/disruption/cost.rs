//! What disrupting a node costs, so consolidation tries the cheapest disruptions first.
//!
//! Upstream's rules (`pkg/utils/disruption`): evicting a pod costs 1, plus its
//! `controller.kubernetes.io/pod-deletion-cost` divided by 2^27, plus its priority divided by 2^25, the whole
//! clamped to -10..10; a node's disruption cost is the sum over its reschedulable pods, scaled by the fraction of
//! its lifetime (`expireAfter`) still ahead of it, so nodes about to expire anyway are cheap to disrupt.

use std::time::Duration;

use jiff::Timestamp;

use super::consolidation::ConsolidationCandidate;

/// A pod-deletion-cost of 2^27 adds one pod's worth of cost (the int32 range spans about -16..16 pods).
pub const POD_DELETION_COST_SCALE: f64 = (1u64 << 27) as f64;
/// A priority of 2^25 adds one pod's worth of cost (system-node-critical, 2e9, is about 60 pods before clamping).
pub const PRIORITY_SCALE: f64 = (1u64 << 25) as f64;
/// A single pod's eviction cost is clamped to `-EVICTION_COST_BOUND..=EVICTION_COST_BOUND`.
pub const EVICTION_COST_BOUND: f64 = 10.0;

/// What evicting one pod costs: 1, plus its pod-deletion-cost annotation scaled by 2^-27 (a value that does not
/// parse as a finite number is ignored, as upstream logs and ignores it), plus its priority scaled by 2^-25,
/// clamped to -10..10.
pub fn pod_eviction_cost(deletion_cost_annotation: Option<&str>, priority: i32) -> f64 {
    let mut cost = 1.0;
    if let Some(v) = deletion_cost_annotation.and_then(|s| s.parse::<f64>().ok())
        && v.is_finite()
    {
        cost += v / POD_DELETION_COST_SCALE;
    }
    cost += f64::from(priority) / PRIORITY_SCALE;
    cost.clamp(-EVICTION_COST_BOUND, EVICTION_COST_BOUND)
}

/// A node's disruption cost: the sum of its reschedulable pods' eviction costs times the fraction of its lifetime
/// remaining (see [`lifetime_remaining`]; 1 when the node never expires).
pub fn disruption_cost(pod_costs: impl IntoIterator<Item = f64>, lifetime_remaining: f64) -> f64 {
    pod_costs.into_iter().sum::<f64>() * lifetime_remaining
}

/// The fraction (0..=1) of a node's lifetime still ahead of it at `now`: `1 - age / expireAfter`, clamped. 1 when
/// it never expires (`expire_after` is `None`), 0 for a zero `expireAfter`. A creation time in the future counts
/// as a node just created.
pub fn lifetime_remaining(created: Timestamp, expire_after: Option<Duration>, now: Timestamp) -> f64 {
    let Some(total) = expire_after else {
        return 1.0;
    };
    let total = total.as_secs_f64();
    if total <= 0.0 {
        return 0.0;
    }
    let age = now.duration_since(created).as_secs_f64();
    ((total - age) / total).clamp(0.0, 1.0)
}

/// Savings per unit of disruption: how much a disruption buys. Infinite for a free disruption that saves
/// something, 0 for one that saves nothing.
pub fn savings_per_disruption(savings: f64, disruption_cost: f64) -> f64 {
    if savings <= 0.0 || savings.is_nan() {
        0.0
    } else if disruption_cost <= 0.0 {
        f64::INFINITY
    } else {
        savings / disruption_cost
    }
}

/// Positions of `candidates` in the order consolidation tries them: ascending disruption cost, ties kept in the
/// order given.
pub fn order_by_disruption_cost(candidates: &[ConsolidationCandidate]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| {
        candidates[a]
            .disruption_cost
            .total_cmp(&candidates[b].disruption_cost)
    });
    order
}

/// Positions of `candidates` by descending price per unit of disruption ([`savings_per_disruption`] of deleting
/// each), ties kept in the order given: the order that puts the most savings for the least disruption first.
pub fn order_by_savings_per_disruption(candidates: &[ConsolidationCandidate]) -> Vec<usize> {
    let ratio = |c: &ConsolidationCandidate| savings_per_disruption(c.price, c.disruption_cost);
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| ratio(&candidates[b]).total_cmp(&ratio(&candidates[a])));
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requirements::LabelInterner;
    use karpenter_api::nodepool::ConsolidationPolicy;
    use proptest::prelude::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_plain_pod_costs_one() {
        assert_eq!(pod_eviction_cost(None, 0), 1.0);
    }

    #[test]
    fn deletion_cost_and_priority_add_scaled_cost() {
        assert_eq!(pod_eviction_cost(Some("134217728"), 0), 2.0);
        assert_eq!(pod_eviction_cost(None, 1 << 25), 2.0);
        assert_eq!(pod_eviction_cost(Some("-134217728"), 1 << 25), 1.0);
    }

    #[test]
    fn eviction_cost_is_clamped_to_ten_either_way() {
        assert_eq!(pod_eviction_cost(Some("2147483647"), 2_000_000_000), 10.0);
        assert_eq!(pod_eviction_cost(Some("-2147483648"), i32::MIN), -10.0);
    }

    #[test]
    fn an_unparsable_deletion_cost_is_ignored() {
        assert_eq!(pod_eviction_cost(Some("lots"), 0), 1.0);
        assert_eq!(pod_eviction_cost(Some("NaN"), 0), 1.0);
        assert_eq!(pod_eviction_cost(Some(" 5"), 0), 1.0);
    }

    #[test]
    fn disruption_cost_scales_by_lifetime_remaining() {
        assert_eq!(disruption_cost([1.0, 2.0, 3.0], 1.0), 6.0);
        assert_eq!(disruption_cost([1.0, 2.0, 3.0], 0.5), 3.0);
        assert_eq!(disruption_cost([], 1.0), 0.0);
    }

    #[test]
    fn lifetime_remaining_runs_from_one_to_zero() {
        let created = at("2026-01-01T00:00:00Z");
        let day = Duration::from_secs(86_400);
        assert_eq!(lifetime_remaining(created, None, at("2030-01-01T00:00:00Z")), 1.0);
        assert_eq!(lifetime_remaining(created, Some(day * 10), created), 1.0);
        assert_eq!(
            lifetime_remaining(created, Some(day * 10), at("2026-01-03T12:00:00Z")),
            0.75
        );
        assert_eq!(
            lifetime_remaining(created, Some(day * 10), at("2026-02-01T00:00:00Z")),
            0.0
        );
        assert_eq!(
            lifetime_remaining(created, Some(day), at("2025-12-31T00:00:00Z")),
            1.0,
            "created in the future"
        );
        assert_eq!(lifetime_remaining(created, Some(Duration::ZERO), created), 0.0);
    }

    fn candidate(index: usize, price: f64, disruption_cost: f64) -> ConsolidationCandidate {
        let mut i = LabelInterner::new();
        ConsolidationCandidate {
            index,
            node_pool: 0,
            node_pool_name: "default".into(),
            policy: ConsolidationPolicy::WhenEmptyOrUnderutilized,
            instance_type: "m5.large".into(),
            capacity_type: i.intern("on-demand"),
            zone: i.intern("zone-a"),
            price,
            disruption_cost,
            pod_count: 1,
            reserved: false,
        }
    }

    #[test]
    fn candidates_are_ordered_by_ascending_disruption_cost_stably() {
        let cs = [
            candidate(0, 1.0, 3.0),
            candidate(1, 1.0, 1.0),
            candidate(2, 1.0, 3.0),
            candidate(3, 1.0, 0.5),
        ];
        assert_eq!(order_by_disruption_cost(&cs), vec![3, 1, 0, 2]);
    }

    #[test]
    fn savings_per_disruption_puts_cheap_disruptions_of_pricey_nodes_first() {
        let cs = [
            candidate(0, 1.0, 4.0),
            candidate(1, 2.0, 1.0),
            candidate(2, 0.5, 0.0),
            candidate(3, 0.0, 0.0),
        ];
        assert_eq!(order_by_savings_per_disruption(&cs), vec![2, 1, 0, 3]);
    }

    proptest! {
        #[test]
        fn eviction_cost_stays_within_bounds(cost in any::<i32>(), priority in any::<i32>()) {
            let c = pod_eviction_cost(Some(&cost.to_string()), priority);
            prop_assert!((-EVICTION_COST_BOUND..=EVICTION_COST_BOUND).contains(&c));
        }

        #[test]
        fn lifetime_remaining_stays_within_zero_and_one(age in -1_000_000i64..10_000_000, total in 0u64..5_000_000) {
            let created = at("2026-01-01T00:00:00Z");
            let now = created.checked_add(jiff::SignedDuration::from_secs(age)).unwrap();
            let r = lifetime_remaining(created, Some(Duration::from_secs(total)), now);
            prop_assert!((0.0..=1.0).contains(&r));
        }
    }
}
