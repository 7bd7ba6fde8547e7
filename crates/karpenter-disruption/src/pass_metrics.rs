//! What a disruption pass tells Prometheus: the nodes each reason could disrupt, how many disruptions each
//! NodePool's budgets allow now, and how long each method took to decide.

use karpenter_api::nodepool::DisruptionReason;
use karpenter_core::disruption::pass::PassResult;
use karpenter_metrics::{EvaluationLabels, NodePoolReasonLabels, ReasonLabels, metrics};

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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use karpenter_core::disruption::pass::{BudgetEntry, Method, MethodEvaluation};

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
}
