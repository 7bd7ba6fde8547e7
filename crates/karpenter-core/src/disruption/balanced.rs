//! The `Balanced` consolidation policy: a move is made only when what it saves, as a share of its NodePool's
//! price, is worth what it disrupts, as a share of the NodePool's disruption cost.
//!
//! Upstream's rule (`balanced.go`): `score = (savings / pool price) / (disruption / pool disruption)`, approved
//! when `score >= 1/k` with `k = 2`; a pool with no known price approves nothing, a move saving nothing is never
//! approved, a move in a pool without disruption cost (or disrupting nothing) is approved whenever it saves
//! something. A move drawing on several NodePools is scored per Balanced pool, with the savings shared out in
//! proportion to each pool's part of the removed price, and every Balanced pool must approve.

use karpenter_api::nodepool::ConsolidationPolicy;

use super::consolidation::ConsolidationCandidate;

/// Upstream's default consolidation threshold `k`: a move must score at least `1/k`.
pub const BALANCED_K: f64 = 2.0;

/// How a move scores under the Balanced policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BalancedScore {
    pub score: f64,
    /// Savings as a fraction of the NodePool's total price.
    pub savings_fraction: f64,
    /// Disruption as a fraction of the NodePool's total disruption cost.
    pub disruption_fraction: f64,
    pub approved: bool,
}

/// `(savings / pool_total_price) / (disruption / pool_total_disruption)`: 0 when the pool has no price or the move
/// saves nothing, infinite when it saves something at no disruption (or the pool has no disruption cost).
pub fn balanced_score(
    savings: f64,
    pool_total_price: f64,
    disruption: f64,
    pool_total_disruption: f64,
) -> f64 {
    score_move(savings, pool_total_price, disruption, pool_total_disruption).score
}

/// Whether a score clears the Balanced bar `1/k`.
pub fn balanced_approves(score: f64) -> bool {
    score >= 1.0 / BALANCED_K
}

/// `x > 0`, false for NaN.
fn positive(x: f64) -> bool {
    x > 0.0
}

/// [`balanced_score`] with its parts and the verdict.
pub fn score_move(
    savings: f64,
    pool_total_price: f64,
    disruption: f64,
    pool_total_disruption: f64,
) -> BalancedScore {
    let rejected = |savings_fraction| BalancedScore {
        score: 0.0,
        savings_fraction,
        disruption_fraction: 0.0,
        approved: false,
    };
    // NaN falls on the refusing side.
    if !positive(pool_total_price) {
        return rejected(0.0);
    }
    let savings_fraction = savings / pool_total_price;
    if !positive(savings) {
        return rejected(savings_fraction.max(0.0));
    }
    if !positive(pool_total_disruption) || !positive(disruption) {
        return BalancedScore {
            score: f64::INFINITY,
            savings_fraction,
            disruption_fraction: 0.0,
            approved: true,
        };
    }
    let disruption_fraction = disruption / pool_total_disruption;
    let score = savings_fraction / disruption_fraction;
    BalancedScore {
        score,
        savings_fraction,
        disruption_fraction,
        approved: balanced_approves(score),
    }
}

/// Checks a move (the candidates it removes, what it saves per hour) against every Balanced NodePool it draws
/// on. `pool_totals[node_pool]` is the pool's `(total price, total disruption cost)` over all its nodes, measured
/// as the candidates' `price` and `disruption_cost` are. Returns why the move is refused, naming the first pool
/// that refuses it.
pub fn evaluate_balanced(
    candidates: &[&ConsolidationCandidate],
    savings: f64,
    pool_totals: &[(f64, f64)],
) -> Result<(), String> {
    let mut pools: Vec<usize> = candidates
        .iter()
        .filter(|c| c.policy == ConsolidationPolicy::Balanced)
        .map(|c| c.node_pool)
        .collect();
    pools.sort_unstable();
    pools.dedup();
    if pools.is_empty() {
        return Ok(());
    }
    let total_price: f64 = candidates.iter().map(|c| c.price).sum();
    let several = candidates.iter().any(|c| c.node_pool != candidates[0].node_pool);
    for pool in pools {
        let ours: Vec<&&ConsolidationCandidate> = candidates.iter().filter(|c| c.node_pool == pool).collect();
        let name = ours.first().map_or("", |c| c.node_pool_name.as_str());
        let pool_price: f64 = ours.iter().map(|c| c.price).sum();
        let disruption: f64 = ours.iter().map(|c| c.disruption_cost).sum();
        let pool_savings = if several && total_price > 0.0 {
            savings * pool_price / total_price
        } else {
            savings
        };
        let (price_total, disruption_total) = pool_totals.get(pool).copied().unwrap_or((0.0, 0.0));
        let s = score_move(pool_savings, price_total, disruption, disruption_total);
        if s.approved {
            continue;
        }
        let why = if !positive(price_total) {
            format!("Balanced: the total price of NodePool {name:?} is unknown, so no move can be weighed")
        } else if !positive(pool_savings) {
            format!("Balanced: the move saves nothing in NodePool {name:?}")
        } else {
            format!(
                "Balanced: savings of {:.0}% do not justify disrupting {:.0}% of the NodePool (score {:.2} < {:.2})",
                s.savings_fraction * 100.0,
                s.disruption_fraction * 100.0,
                s.score,
                1.0 / BALANCED_K
            )
        };
        return Err(why);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requirements::LabelInterner;

    fn candidate(
        pool: usize,
        policy: ConsolidationPolicy,
        price: f64,
        disruption: f64,
    ) -> ConsolidationCandidate {
        let mut i = LabelInterner::new();
        ConsolidationCandidate {
            index: 0,
            node_pool: pool,
            node_pool_name: format!("pool-{pool}"),
            policy,
            instance_type: "m5.large".into(),
            capacity_type: i.intern("on-demand"),
            zone: i.intern("zone-a"),
            price,
            disruption_cost: disruption,
            pod_count: 3,
            reserved: false,
        }
    }

    #[test]
    fn score_is_savings_share_over_disruption_share() {
        // 10% of the price for 40% of the disruption.
        assert!((balanced_score(1.0, 10.0, 4.0, 10.0) - 0.25).abs() < 1e-12);
        assert!(!balanced_approves(0.25));
        assert!(balanced_approves(0.5));
        assert_eq!(balanced_score(1.0, 10.0, 0.0, 10.0), f64::INFINITY);
        assert_eq!(balanced_score(1.0, 10.0, 2.0, 0.0), f64::INFINITY);
        assert_eq!(balanced_score(0.0, 10.0, 1.0, 10.0), 0.0);
        assert_eq!(balanced_score(1.0, 0.0, 1.0, 10.0), 0.0);
        assert!(!score_move(f64::NAN, 10.0, 1.0, 10.0).approved);
    }

    #[test]
    fn only_balanced_pools_are_gated() {
        let c = candidate(0, ConsolidationPolicy::WhenEmptyOrUnderutilized, 1.0, 4.0);
        assert_eq!(evaluate_balanced(&[&c], 0.1, &[(10.0, 10.0)]), Ok(()));
        let c = candidate(0, ConsolidationPolicy::Balanced, 1.0, 4.0);
        assert_eq!(
            evaluate_balanced(&[&c], 1.0, &[(10.0, 10.0)]).unwrap_err(),
            "Balanced: savings of 10% do not justify disrupting 40% of the NodePool (score 0.25 < 0.50)"
        );
        assert_eq!(evaluate_balanced(&[&c], 2.0, &[(10.0, 10.0)]), Ok(()));
        assert!(
            evaluate_balanced(&[&c], 2.0, &[])
                .unwrap_err()
                .contains("unknown")
        );
    }

    #[test]
    fn cross_pool_moves_share_savings_by_removed_price() {
        // Pool 0 (Balanced) removes 1.0 of 4.0 removed: it is credited a quarter of the savings.
        let a = candidate(0, ConsolidationPolicy::Balanced, 1.0, 2.0);
        let b = candidate(1, ConsolidationPolicy::WhenEmptyOrUnderutilized, 3.0, 2.0);
        // Credited 1.0 of 4.0 savings: 10% of 10.0 for 20% of 10.0 disruption: 0.5, approved.
        assert_eq!(
            evaluate_balanced(&[&a, &b], 4.0, &[(10.0, 10.0), (1.0, 1.0)]),
            Ok(())
        );
        // Credited 0.5: 0.25, refused.
        assert!(evaluate_balanced(&[&a, &b], 2.0, &[(10.0, 10.0), (1.0, 1.0)]).is_err());
    }
}
