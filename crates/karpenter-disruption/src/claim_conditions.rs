//! The NodeClaim disruption conditions (upstream's nodeclaim.disruption controller), from what core computed
//! for the pass. Pure.
//!
//! - `Drifted`: True with the drift reason (NodePoolDrifted, RequirementsDrifted, InstanceTypeNotFound or the
//!   provider's, such as AMIDrift) while the claim is drifted; removed when it no longer is.
//! - `Consolidatable`: True once the NodePool's consolidateAfter has passed since the last pod event or the
//!   initialization; removed otherwise (not initialized, consolidateAfter Never, or not yet elapsed), as
//!   upstream clears it rather than writing False.
//! - `DisruptionReason`: True, with the reason (`Empty`, `Drifted`, `Underutilized`) as reason and message, on a
//!   claim a command has chosen and tainted ([`with_disruption_reason`]); removed when the command is rolled
//!   back or a restart finds it on a claim not being deleted ([`without_disruption_reason`]). The terminator
//!   reads it as the `reason` of `karpenter_pods_drained_total`.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::{
    common::{Condition, ConditionStatus},
    nodeclaim::conditions,
};
use karpenter_core::disruption::drift::DriftReason;

fn set(out: &mut Vec<Condition>, current: &[Condition], type_: &str, wanted: Option<&str>, now: Timestamp) {
    let Some(reason) = wanted else { return };
    let previous = current.iter().find(|c| c.type_ == type_);
    let last_transition_time = match previous {
        Some(p) if p.status == ConditionStatus::True => p.last_transition_time.clone(),
        _ => Time(now),
    };
    out.push(Condition {
        type_: type_.to_string(),
        status: ConditionStatus::True,
        observed_generation: previous.and_then(|p| p.observed_generation),
        last_transition_time,
        reason: reason.to_string(),
        message: String::new(),
    });
}

/// The claim's conditions with Drifted and Consolidatable as they should be, or `None` when they already are
/// (so nothing is written). Every other condition is kept in place.
pub fn disruption_conditions(
    current: &[Condition],
    drifted: Option<&DriftReason>,
    consolidatable: bool,
    now: Timestamp,
) -> Option<Vec<Condition>> {
    let mut out: Vec<Condition> = current
        .iter()
        .filter(|c| c.type_ != conditions::DRIFTED && c.type_ != conditions::CONSOLIDATABLE)
        .cloned()
        .collect();
    set(
        &mut out,
        current,
        conditions::DRIFTED,
        drifted.map(DriftReason::as_str),
        now,
    );
    set(
        &mut out,
        current,
        conditions::CONSOLIDATABLE,
        consolidatable.then_some(conditions::CONSOLIDATABLE),
        now,
    );
    let unchanged = out.len() == current.len() && out.iter().all(|c| current.contains(c));
    (!unchanged).then_some(out)
}

/// The claim's conditions with `DisruptionReason` True for `reason`, or `None` when it already says so. The
/// transition time is kept while the condition stays True.
pub fn with_disruption_reason(current: &[Condition], reason: &str, now: Timestamp) -> Option<Vec<Condition>> {
    let previous = current.iter().find(|c| c.type_ == conditions::DISRUPTION_REASON);
    if previous
        .is_some_and(|p| p.status == ConditionStatus::True && p.reason == reason && p.message == reason)
    {
        return None;
    }
    let mut out: Vec<Condition> = current
        .iter()
        .filter(|c| c.type_ != conditions::DISRUPTION_REASON)
        .cloned()
        .collect();
    set(
        &mut out,
        current,
        conditions::DISRUPTION_REASON,
        Some(reason),
        now,
    );
    if let Some(c) = out.last_mut() {
        c.message = reason.to_string();
    }
    Some(out)
}

/// The claim's conditions without `DisruptionReason`, or `None` when it has none.
pub fn without_disruption_reason(current: &[Condition]) -> Option<Vec<Condition>> {
    current
        .iter()
        .any(|c| c.type_ == conditions::DISRUPTION_REASON)
        .then(|| {
            current
                .iter()
                .filter(|c| c.type_ != conditions::DISRUPTION_REASON)
                .cloned()
                .collect()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn condition(type_: &str, reason: &str, t: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: ConditionStatus::True,
            observed_generation: None,
            last_transition_time: Time(at(t)),
            reason: reason.into(),
            message: String::new(),
        }
    }

    #[test]
    fn drift_and_consolidatable_are_added_with_their_reasons() {
        let initialized = condition("Initialized", "Initialized", "2026-01-01T00:00:00Z");
        let now = at("2026-01-01T01:00:00Z");
        let out = disruption_conditions(
            std::slice::from_ref(&initialized),
            Some(&DriftReason::Provider("AMIDrift".into())),
            true,
            now,
        )
        .unwrap();
        assert_eq!(
            out,
            vec![
                initialized,
                condition("Drifted", "AMIDrift", "2026-01-01T01:00:00Z"),
                condition("Consolidatable", "Consolidatable", "2026-01-01T01:00:00Z"),
            ]
        );
    }

    #[test]
    fn nothing_to_write_when_they_already_hold() {
        let current = vec![
            condition("Drifted", "NodePoolDrifted", "2026-01-01T00:00:00Z"),
            condition("Consolidatable", "Consolidatable", "2026-01-01T00:00:00Z"),
        ];
        let now = at("2026-01-01T05:00:00Z");
        assert_eq!(
            disruption_conditions(&current, Some(&DriftReason::NodePoolDrifted), true, now),
            None
        );
    }

    #[test]
    fn a_new_drift_reason_keeps_the_transition_time_and_a_cleared_one_is_removed() {
        let current = vec![
            condition("Drifted", "NodePoolDrifted", "2026-01-01T00:00:00Z"),
            condition("Consolidatable", "Consolidatable", "2026-01-01T00:00:00Z"),
        ];
        let now = at("2026-01-01T05:00:00Z");
        let out =
            disruption_conditions(&current, Some(&DriftReason::RequirementsDrifted), false, now).unwrap();
        assert_eq!(
            out,
            vec![condition(
                "Drifted",
                "RequirementsDrifted",
                "2026-01-01T00:00:00Z"
            )]
        );
        assert_eq!(disruption_conditions(&out, None, false, now), Some(vec![]));
    }

    #[test]
    fn a_chosen_claim_says_why_and_loses_it_on_rollback() {
        let initialized = condition("Initialized", "Initialized", "2026-01-01T00:00:00Z");
        let now = at("2026-01-01T01:00:00Z");
        let chosen =
            with_disruption_reason(std::slice::from_ref(&initialized), "Underutilized", now).unwrap();
        let mut reason = condition("DisruptionReason", "Underutilized", "2026-01-01T01:00:00Z");
        reason.message = "Underutilized".into();
        assert_eq!(chosen, vec![initialized.clone(), reason]);
        // Written once: the same reason again is nothing to write.
        assert_eq!(
            with_disruption_reason(&chosen, "Underutilized", at("2026-01-01T02:00:00Z")),
            None
        );
        // Another reason replaces it, keeping the transition time.
        let drifted = with_disruption_reason(&chosen, "Drifted", at("2026-01-01T02:00:00Z")).unwrap();
        assert_eq!(drifted[1].reason, "Drifted");
        assert_eq!(drifted[1].last_transition_time, Time(now));
        assert_eq!(
            without_disruption_reason(&drifted),
            Some(vec![initialized.clone()])
        );
        assert_eq!(without_disruption_reason(&[initialized]), None);
    }
}
