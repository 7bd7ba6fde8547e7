//! Which of the pass's "left alone" reasons are worth an Event, and which: `DisruptionBlocked` when a
//! protection holds a node (do-not-disrupt, a PodDisruptionBudget, a disruption budget, an invalid or missing
//! NodePool, a drifted node with nowhere for its pods), `Unconsolidatable` when consolidation found nothing to
//! do with it (no cheaper placement, a policy that does not allow it). States that pass on their own (not yet
//! initialized, already deleting, consolidateAfter not elapsed, another method won the pass) get none, as
//! upstream, so a healthy cluster's Events stay quiet. Pure.
//!
//! A NodePool whose budgets allow no disruption for a reason gets `DisruptionBlocked` itself, at most once a
//! minute per reason, as upstream.
//!
//! Core reports the reasons as text; the classification reads that text, and the tests pin the phrases.

/// The upstream event reasons.
pub const DISRUPTION_BLOCKED: &str = "DisruptionBlocked";
pub const UNCONSOLIDATABLE: &str = "Unconsolidatable";
/// A move the Balanced policy's score refused (core's reasons for it start with "Balanced:").
pub const CONSOLIDATION_REJECTED: &str = "ConsolidationRejected";

const SILENT: [&str; 7] = [
    "not initialized yet",
    "already being deleted",
    "not managed by Karpenter",
    "consolidateAfter has not elapsed",
    "not considered this pass",
    "nominated for pending pod",
    "expired",
];

const BLOCKING: [&str; 7] = [
    "do-not-disrupt",
    "PodDisruptionBudget",
    "budget",
    "NodePool was not found",
    "is invalid",
    "NodePool is invalid",
    "drifted, but",
];

/// How long a NodePool is not told again that a budget blocks a reason (upstream's minute: a budget's schedule
/// can change every minute).
pub const NODE_POOL_BLOCKED_DEDUPE: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

/// The `DisruptionBlocked` message on a NodePool whose budgets allow no disruption for `reason` now.
pub fn node_pool_blocked_message(reason: &str) -> String {
    format!("No allowed disruptions for disruption reason {reason} due to blocking budget")
}

/// The Event reason for a node left alone `why`, if any.
pub fn event_reason(why: &str) -> Option<&'static str> {
    if SILENT.iter().any(|s| why.contains(s)) {
        return None;
    }
    if BLOCKING.iter().any(|s| why.contains(s)) {
        return Some(DISRUPTION_BLOCKED);
    }
    if why.starts_with("Balanced:") {
        return Some(CONSOLIDATION_REJECTED);
    }
    Some(UNCONSOLIDATABLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_the_balanced_score_refuses_is_rejected() {
        for why in [
            "Balanced: savings of 5% do not justify disrupting 40% of the NodePool (score 0.12 < 0.50)",
            "Balanced: the move saves nothing in NodePool \"default\"",
        ] {
            assert_eq!(event_reason(why), Some(CONSOLIDATION_REJECTED), "{why}");
        }
    }

    #[test]
    fn protections_block_disruption() {
        for why in [
            "node has karpenter.sh/do-not-disrupt",
            "pod default/web has karpenter.sh/do-not-disrupt",
            "pod default/b PodDisruptionBudget default/b allows no more disruptions",
            "NodePool default allows no more disruptions for Underutilized now (budget)",
            "node's NodePool was not found",
            "NodePool bad is invalid (see errors); its nodes are left alone",
            "drifted, but pod default/a has no place to go",
        ] {
            assert_eq!(event_reason(why), Some(DISRUPTION_BLOCKED), "{why}");
        }
    }

    #[test]
    fn consolidation_finding_nothing_is_unconsolidatable() {
        for why in [
            "no cheaper placement of its pods was found",
            "NodePool default consolidates only empty nodes (WhenEmpty)",
            "NodePool default has consolidateAfter: Never",
            "NodePool policy WhenEmpty: the node is not empty",
        ] {
            assert_eq!(event_reason(why), Some(UNCONSOLIDATABLE), "{why}");
        }
    }

    #[test]
    fn a_node_pool_blocked_by_its_budget_is_told_the_reason() {
        assert_eq!(
            node_pool_blocked_message("Underutilized"),
            "No allowed disruptions for disruption reason Underutilized due to blocking budget"
        );
    }

    #[test]
    fn passing_states_are_silent() {
        for why in [
            "node is not initialized yet",
            "node is already being deleted",
            "consolidateAfter has not elapsed since the last pod event",
            "not considered this pass: emptiness produced the pass's commands first",
            "node is nominated for pending pod default/x",
            "expired",
        ] {
            assert_eq!(event_reason(why), None, "{why}");
        }
    }
}
