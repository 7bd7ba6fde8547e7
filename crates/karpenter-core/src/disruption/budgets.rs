//! Disruption budgets: how many of a NodePool's nodes may be disrupted at a moment, for a reason.
//!
//! Upstream's rules: a budget applies to the reasons it lists (every reason when it lists none); it is active
//! always, or, with a cron `schedule` (UTC) and a `duration`, from each schedule hit for that long; `nodes` is a
//! count or a percentage of the NodePool's nodes rounded up; the most restrictive active budget wins; the nodes
//! already being disrupted (deleting, or NotReady) use up the allowance; a NodePool without budgets gets one of
//! 10%; a schedule that does not parse allows nothing (fail closed) and is reported.

use std::time::Duration;

use jiff::{Timestamp, tz::TimeZone};
use karpenter_api::{
    duration::parse_go_duration,
    nodepool::{Budget, DEFAULT_BUDGET_NODES, DisruptionReason, budget_allowed_nodes, parse_budget_schedule},
};

/// A budget that could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("budgets[{index}]: {message}")]
pub struct BudgetError {
    pub index: usize,
    pub message: String,
}

/// Whether `budget` is in force at `now`.
pub fn is_active(budget: &Budget, now: Timestamp) -> Result<bool, String> {
    let (Some(schedule), Some(duration)) = (&budget.schedule, &budget.duration) else {
        return Ok(true);
    };
    let cron = parse_budget_schedule(schedule)?;
    let window = parse_go_duration(duration).map_err(|e| e.to_string())?;
    // The last hit at or before now, in UTC (budgets have no time zone).
    let now_utc = now.to_zoned(TimeZone::UTC);
    let last = cron
        .find_previous_occurrence(&now_utc, true)
        .map_err(|e| format!("{schedule:?}: {e}"))?;
    let since = now.duration_since(last.timestamp());
    let since = Duration::try_from(since).unwrap_or(Duration::ZERO);
    Ok(since < window)
}

/// How many more nodes of a NodePool may be disrupted for `reason` at `now`: the most restrictive active budget
/// applying to the reason, less the nodes already being disrupted. `budgets` is the NodePool's list as written
/// (`None` for the default); `total` counts the NodePool's nodes, `disrupting` those deleting or NotReady.
/// Budgets that cannot be evaluated allow nothing and are returned as errors.
pub fn allowed_disruptions(
    budgets: Option<&[Budget]>,
    reason: DisruptionReason,
    total: usize,
    disrupting: usize,
    now: Timestamp,
) -> (usize, Vec<BudgetError>) {
    let default = [Budget {
        nodes: Some(DEFAULT_BUDGET_NODES.to_string()),
        ..Budget::default()
    }];
    let budgets = budgets.unwrap_or(&default);
    let mut errors = Vec::new();
    let mut allowed = usize::MAX;
    for (index, b) in budgets.iter().enumerate() {
        if b.reasons.as_ref().is_some_and(|rs| !rs.contains(&reason)) {
            continue;
        }
        match is_active(b, now) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(message) => {
                errors.push(BudgetError { index, message });
                allowed = 0;
                continue;
            }
        }
        let nodes = b.nodes.as_deref().unwrap_or(DEFAULT_BUDGET_NODES);
        match budget_allowed_nodes(nodes, total) {
            Some(n) => allowed = allowed.min(n),
            None => {
                errors.push(BudgetError {
                    index,
                    message: format!("nodes {nodes:?} is not a count or percentage"),
                });
                allowed = 0;
            }
        }
    }
    if allowed == usize::MAX {
        // No budget applies to this reason now: nothing limits it but the NodePool's size.
        allowed = total;
    }
    (allowed.saturating_sub(disrupting), errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn budget(
        nodes: &str,
        schedule: Option<&str>,
        duration: Option<&str>,
        reasons: Option<Vec<DisruptionReason>>,
    ) -> Budget {
        Budget {
            nodes: Some(nodes.into()),
            schedule: schedule.map(Into::into),
            duration: duration.map(Into::into),
            reasons,
        }
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn default_budget_is_ten_percent_rounded_up() {
        let now = at("2026-12-02T10:00:00Z");
        assert_eq!(
            allowed_disruptions(None, DisruptionReason::Underutilized, 25, 0, now).0,
            3
        );
        assert_eq!(
            allowed_disruptions(None, DisruptionReason::Underutilized, 1, 0, now).0,
            1
        );
        assert_eq!(
            allowed_disruptions(None, DisruptionReason::Underutilized, 0, 0, now).0,
            0
        );
    }

    #[test]
    fn most_restrictive_active_budget_wins_and_disrupting_nodes_use_it_up() {
        let now = at("2026-12-02T10:00:00Z");
        let bs = [budget("50%", None, None, None), budget("3", None, None, None)];
        assert_eq!(
            allowed_disruptions(Some(&bs), DisruptionReason::Drifted, 20, 0, now).0,
            3
        );
        assert_eq!(
            allowed_disruptions(Some(&bs), DisruptionReason::Drifted, 20, 2, now).0,
            1
        );
        assert_eq!(
            allowed_disruptions(Some(&bs), DisruptionReason::Drifted, 20, 5, now).0,
            0
        );
    }

    #[test]
    fn budgets_apply_only_to_their_reasons() {
        let now = at("2026-12-02T10:00:00Z");
        let bs = [
            budget("0", None, None, Some(vec![DisruptionReason::Drifted])),
            budget("5", None, None, None),
        ];
        assert_eq!(
            allowed_disruptions(Some(&bs), DisruptionReason::Drifted, 20, 0, now).0,
            0
        );
        assert_eq!(
            allowed_disruptions(Some(&bs), DisruptionReason::Empty, 20, 0, now).0,
            5
        );
        let only_drift = [budget("1", None, None, Some(vec![DisruptionReason::Drifted]))];
        assert_eq!(
            allowed_disruptions(Some(&only_drift), DisruptionReason::Empty, 20, 0, now).0,
            20,
            "nothing limits Empty"
        );
    }

    #[test]
    fn cron_windows_are_evaluated_in_utc_for_their_duration() {
        // Weekdays 09:00-17:00 UTC: no consolidation.
        let bs = [
            budget("0", Some("0 9 * * mon-fri"), Some("8h"), None),
            budget("10", None, None, None),
        ];
        let tuesday_noon = at("2026-12-01T12:00:00Z");
        let tuesday_evening = at("2026-12-01T17:30:00Z");
        let saturday_noon = at("2026-12-05T12:00:00Z");
        assert_eq!(
            allowed_disruptions(Some(&bs), DisruptionReason::Underutilized, 40, 0, tuesday_noon).0,
            0
        );
        assert_eq!(
            allowed_disruptions(Some(&bs), DisruptionReason::Underutilized, 40, 0, tuesday_evening).0,
            10
        );
        assert_eq!(
            allowed_disruptions(Some(&bs), DisruptionReason::Underutilized, 40, 0, saturday_noon).0,
            10
        );
        let exactly_at_start = at("2026-12-01T09:00:00Z");
        assert_eq!(
            allowed_disruptions(
                Some(&bs),
                DisruptionReason::Underutilized,
                40,
                0,
                exactly_at_start
            )
            .0,
            0
        );
        let daily = [budget("2", Some("@daily"), Some("1h"), None)];
        assert_eq!(
            allowed_disruptions(
                Some(&daily),
                DisruptionReason::Empty,
                40,
                0,
                at("2026-12-01T00:30:00Z")
            )
            .0,
            2
        );
        assert_eq!(
            allowed_disruptions(
                Some(&daily),
                DisruptionReason::Empty,
                40,
                0,
                at("2026-12-01T01:30:00Z")
            )
            .0,
            40
        );
    }

    #[test]
    fn a_schedule_that_does_not_parse_fails_closed() {
        let bs = [budget("5", Some("not a cron at all x"), Some("1h"), None)];
        let (allowed, errors) = allowed_disruptions(
            Some(&bs),
            DisruptionReason::Empty,
            10,
            0,
            at("2026-12-01T00:30:00Z"),
        );
        assert_eq!(allowed, 0);
        assert_eq!(errors.len(), 1);
        assert!(errors[0].to_string().starts_with("budgets[0]: "), "{}", errors[0]);
    }

    proptest! {
        #[test]
        fn allowed_never_exceeds_any_active_budget(total in 0usize..500, disrupting in 0usize..50, pct in 0u32..=100, count in 0usize..60) {
            let now = at("2026-12-02T10:00:00Z");
            let bs = [budget(&format!("{pct}%"), None, None, None), budget(&count.to_string(), None, None, None)];
            let (allowed, _) = allowed_disruptions(Some(&bs), DisruptionReason::Underutilized, total, disrupting, now);
            let by_pct = (total * pct as usize).div_ceil(100);
            prop_assert!(allowed + disrupting.min(by_pct.min(count)) <= by_pct.min(count));
            prop_assert!(allowed <= total);
        }
    }
}
