//! What a disruption pass tells Prometheus: the nodes each reason could disrupt, how many disruptions each
//! NodePool's budgets allow now, how long each method took to decide and which consolidation searches ran out
//! of time; and, from the same inputs, what each NodePool's nodes cost an hour.

use karpenter_api::nodepool::DisruptionReason;
use karpenter_core::{disruption::pass::PassResult, snapshot::DisruptionInputs};
use karpenter_metrics::{
    ConsolidationTypeLabels, EvaluationLabels, NodePoolLabels, NodePoolReasonLabels, ReasonLabels, metrics,
};

/// A reason no budget limits reports the largest 32-bit integer, as upstream's budget mapping does.
const UNLIMITED: i64 = i32::MAX as i64;

/// Upstream's `reason` label: the reason lower-cased.
fn reason_label(reason: DisruptionReason) -> String {
    reason.as_str().to_ascii_lowercase()
}

/// Records one pass. `pool_name` names a NodePool by its index in the pass's inputs.
pub fn record_pass<'a>(result: &PassResult, pool_name: impl Fn(usize) -> &'a str) {
    let m = metrics();
    for evaluation in &result.evaluations {
        m.voluntary_disruption_decision_evaluation_duration_seconds
            .get_or_create(&EvaluationLabels {
                reason: reason_label(evaluation.method.reason()),
                consolidation_type: evaluation.method.consolidation_type().into(),
            })
            .observe(evaluation.duration.as_secs_f64());
    }
    for &(reason, eligible) in &result.eligible {
        m.voluntary_disruption_eligible_nodes
            .get_or_create(&ReasonLabels {
                reason: reason_label(reason),
            })
            .set(i64::try_from(eligible).unwrap_or(i64::MAX));
    }
    for budget in &result.budgets {
        let allowed = budget.allowed.map_or(UNLIMITED, |n| {
            i64::try_from(n).unwrap_or(UNLIMITED).min(UNLIMITED)
        });
        m.nodepools_allowed_disruptions
            .get_or_create(&NodePoolReasonLabels {
                nodepool: pool_name(budget.pool).to_string(),
                reason: reason_label(budget.reason),
            })
            .set(allowed);
    }
}

/// `karpenter_voluntary_disruption_consolidation_timeouts_total`: one per consolidation search of the pass that
/// stopped at its time limit, by `consolidation_type` (`multi`, `single`).
pub fn record_timeouts(result: &PassResult) {
    for kind in &result.consolidation_timeouts {
        metrics()
            .voluntary_disruption_consolidation_timeouts
            .get_or_create(&ConsolidationTypeLabels {
                consolidation_type: kind.as_str().into(),
            })
            .inc();
    }
}

/// `karpenter_nodepools_cost_total`: per NodePool, the sum of the hourly prices of its NodeClaims' offerings
/// (0 for a NodePool without nodes; a NodePool that is gone loses its series), as upstream's cost tracker sums
/// the offerings of its NodeClaims. A claim whose offering the catalog no longer lists counts 0.
pub fn record_cost(inputs: &DisruptionInputs) {
    set_cost(
        inputs.pools.iter().map(|p| p.name.as_str()),
        inputs.claims.iter().flatten().map(|c| (c.pool, c.price)),
    );
}

/// Sets the cost of each of `pools` from `claims` (each its pool's index and its hourly price).
fn set_cost<'a>(pools: impl ExactSizeIterator<Item = &'a str>, claims: impl Iterator<Item = (usize, f64)>) {
    let pools: Vec<&str> = pools.collect();
    let mut cost = vec![0.0; pools.len()];
    for (pool, price) in claims {
        if let Some(c) = cost.get_mut(pool) {
            *c += price;
        }
    }
    let gauge = &metrics().nodepools_cost_total;
    gauge.clear();
    for (pool, cost) in pools.into_iter().zip(cost) {
        gauge
            .get_or_create(&NodePoolLabels {
                nodepool: pool.to_string(),
            })
            .set(cost);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use karpenter_core::disruption::pass::{BudgetEntry, ConsolidationType, Method, MethodEvaluation};

    use super::*;

    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
    }

    #[test]
    fn a_pass_sets_eligible_nodes_allowed_disruptions_and_evaluation_time() {
        let result = PassResult {
            evaluations: vec![MethodEvaluation {
                method: Method::Drift,
                duration: Duration::from_millis(30),
            }],
            eligible: vec![(DisruptionReason::Empty, 0), (DisruptionReason::Drifted, 3)],
            budgets: vec![
                BudgetEntry {
                    pool: 0,
                    reason: DisruptionReason::Drifted,
                    allowed: Some(2),
                },
                BudgetEntry {
                    pool: 0,
                    reason: DisruptionReason::Underutilized,
                    allowed: None,
                },
            ],
            ..PassResult::default()
        };
        record_pass(&result, |_| "metrics-test-pool");
        let text = metrics().encode();
        assert_eq!(
            sample(
                &text,
                r#"karpenter_voluntary_disruption_eligible_nodes{reason="drifted"}"#
            ),
            Some(3.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"karpenter_nodepools_allowed_disruptions{nodepool="metrics-test-pool",reason="drifted"}"#
            ),
            Some(2.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"karpenter_nodepools_allowed_disruptions{nodepool="metrics-test-pool",reason="underutilized"}"#
            ),
            Some(f64::from(i32::MAX)),
            "no budget limits Underutilized"
        );
        assert!(
            sample(
                &text,
                r#"karpenter_voluntary_disruption_decision_evaluation_duration_seconds_count{reason="drifted",consolidation_type=""}"#
            )
            .is_some_and(|n| n >= 1.0),
            "{text}"
        );
    }

    #[test]
    fn each_consolidation_search_that_ran_out_of_time_counts_once_by_type() {
        let counter = |kind: &str| {
            sample(
                &metrics().encode(),
                &format!(
                    "karpenter_voluntary_disruption_consolidation_timeouts_total{{consolidation_type=\"{kind}\"}}"
                ),
            )
            .unwrap_or(0.0)
        };
        let (multi, single) = (counter("multi"), counter("single"));
        record_timeouts(&PassResult {
            consolidation_timeouts: vec![ConsolidationType::Multi, ConsolidationType::Single],
            ..PassResult::default()
        });
        record_timeouts(&PassResult {
            consolidation_timeouts: vec![ConsolidationType::Single],
            ..PassResult::default()
        });
        record_timeouts(&PassResult::default());
        assert_eq!(counter("multi"), multi + 1.0);
        assert_eq!(counter("single"), single + 2.0);
    }

    #[test]
    fn each_nodepool_costs_the_sum_of_its_claims_prices_and_a_gone_pool_loses_its_series() {
        let cost = |text: &str, pool: &str| {
            sample(
                text,
                &format!("karpenter_nodepools_cost_total{{nodepool=\"{pool}\"}}"),
            )
        };
        set_cost(
            ["cost-a", "cost-b", "cost-empty"].into_iter(),
            [(0, 0.096), (0, 0.192), (1, 0.05), (7, 9.0)].into_iter(),
        );
        let text = metrics().encode();
        assert!(
            cost(&text, "cost-a").is_some_and(|c| (c - 0.288).abs() < 1e-9),
            "{text}"
        );
        assert_eq!(cost(&text, "cost-b"), Some(0.05));
        assert_eq!(
            cost(&text, "cost-empty"),
            Some(0.0),
            "a pool without nodes costs 0"
        );
        assert!(
            text.contains("# TYPE karpenter_nodepools_cost_total gauge"),
            "{text}"
        );

        set_cost(["cost-b"].into_iter(), std::iter::empty());
        let text = metrics().encode();
        assert_eq!(cost(&text, "cost-a"), None, "{text}");
        assert_eq!(cost(&text, "cost-b"), Some(0.0));
    }
}
