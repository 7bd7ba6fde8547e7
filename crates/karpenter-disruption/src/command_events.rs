//! The Normal events a disruption command writes as it goes, with upstream's reasons and wording:
//! - `DisruptionLaunching` on each replacement NodeClaim as it is created: "Launching NodeClaim: <Reason>";
//! - `DisruptionWaitingReadiness` on each replacement not yet initialized, while the command waits for it:
//!   "Waiting on readiness to continue disruption" (deduplicated, so once per window however long it waits);
//! - `DisruptionTerminating` on each candidate's Node and NodeClaim as the NodeClaim is deleted:
//!   "Disrupting Node: <Reason>" and "Disrupting NodeClaim: <Reason>".
//!
//! `<Reason>` is the command's disruption reason (`Empty`, `Drifted`, `Underutilized`) with its first letter
//! upper-cased, as upstream's title-casing leaves those. Pure.

pub const DISRUPTION_LAUNCHING: &str = "DisruptionLaunching";
pub const DISRUPTION_WAITING_READINESS: &str = "DisruptionWaitingReadiness";
pub const DISRUPTION_TERMINATING: &str = "DisruptionTerminating";

pub const WAITING_READINESS_MESSAGE: &str = "Waiting on readiness to continue disruption";

/// Balanced consolidation, as upstream: each candidate of an approved move is told it is a candidate and what the
/// move saves, and its Node and NodePool that the Balanced score approved it. (A move the score refuses is told
/// `ConsolidationRejected`, from the pass's left-alone reasons: see [`crate::blocked_events`].)
pub const CONSOLIDATION_CANDIDATE: &str = "ConsolidationCandidate";
pub const CONSOLIDATION_APPROVED: &str = "ConsolidationApproved";

/// On each candidate's Node and NodeClaim of an approved Balanced move.
pub fn candidate_message(method: &str, savings_per_hour: f64) -> String {
    format!("Consolidation candidate ({method}), estimated savings ${savings_per_hour:.4}/h")
}

/// On each candidate's Node and its NodePool once the Balanced score approved the move.
pub fn approved_message(node: &str, savings_per_hour: f64) -> String {
    format!(
        "Balanced consolidation approved disrupting node {node}: its savings (${savings_per_hour:.4}/h) are worth the \
         disruption"
    )
}

/// Each word's first letter upper-cased, the rest left as they are.
fn title(reason: &str) -> String {
    reason
        .split(' ')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_uppercase().chain(chars).collect::<String>()
            })
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// On a replacement NodeClaim created for a command disrupting for `reason`.
pub fn launching_message(reason: &str) -> String {
    format!("Launching NodeClaim: {}", title(reason))
}

/// On a candidate's Node (`kind` "Node") or NodeClaim (`kind` "NodeClaim") as it is disrupted for `reason`.
pub fn terminating_message(kind: &str, reason: &str) -> String {
    format!("Disrupting {kind}: {}", title(reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balanced_messages_carry_the_savings() {
        assert_eq!(
            candidate_message("single-node-consolidation", 0.0416),
            "Consolidation candidate (single-node-consolidation), estimated savings $0.0416/h"
        );
        assert!(
            approved_message("node-a", 0.5).contains("node-a")
                && approved_message("node-a", 0.5).contains("$0.5000/h")
        );
    }

    #[test]
    fn messages_carry_the_disruption_reason_as_upstream_words_them() {
        assert_eq!(
            launching_message("Underutilized"),
            "Launching NodeClaim: Underutilized"
        );
        assert_eq!(launching_message("drifted"), "Launching NodeClaim: Drifted");
        assert_eq!(terminating_message("Node", "Empty"), "Disrupting Node: Empty");
        assert_eq!(
            terminating_message("NodeClaim", "Underutilized"),
            "Disrupting NodeClaim: Underutilized"
        );
        assert_eq!(
            WAITING_READINESS_MESSAGE,
            "Waiting on readiness to continue disruption"
        );
    }
}
