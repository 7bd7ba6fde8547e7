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
