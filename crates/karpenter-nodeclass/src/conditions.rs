//! The `Ready` root condition a node-class controller writes over the conditions of its dependents (for an
//! EC2NodeClass: AMIs, subnets, security groups, instance profile, validation...), and the transition times a
//! rewritten status keeps. Pure: the controller computes its dependents and writes the result.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::common::{Condition, ConditionStatus};

use crate::readiness::READY;

/// Reason of `Ready` when a dependent is not True.
pub const UNHEALTHY_DEPENDENTS: &str = "UnhealthyDependents";

/// `Ready` over `dependents`: True (reason `Ready`) when every one is True; otherwise False with reason
/// [`UNHEALTHY_DEPENDENTS`] and a message naming each dependent that is not (`SubnetsReady=False
/// (SubnetsNotFound), ...`), so `kubectl describe` says what to fix. Its transition time is left for
/// [`keep_transition_times`].
pub fn ready_over(dependents: &[Condition], generation: Option<i64>) -> Condition {
    let unhealthy: Vec<String> = dependents
        .iter()
        .filter(|c| c.status != ConditionStatus::True)
        .map(|c| format!("{}={:?} ({})", c.type_, c.status, c.reason))
        .collect();
    let (status, reason, message) = if unhealthy.is_empty() {
        (ConditionStatus::True, READY, String::new())
    } else {
        (ConditionStatus::False, UNHEALTHY_DEPENDENTS, unhealthy.join(", "))
    };
    Condition {
        type_: READY.to_string(),
        status,
        observed_generation: generation,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
        reason: reason.to_string(),
        message,
    }
}

/// Sets each condition's transition time: the previous one's while the condition of that type keeps its
/// status, `now` when it is new or changed status. An unchanged status so compares equal and is not rewritten.
pub fn keep_transition_times(conditions: &mut [Condition], previous: &[Condition], now: Timestamp) {
    for c in conditions {
        c.last_transition_time = previous
            .iter()
            .find(|old| old.type_ == c.type_ && old.status == c.status)
            .map_or(Time(now), |old| old.last_transition_time.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(type_: &str, status: ConditionStatus, reason: &str, at: Timestamp) -> Condition {
        Condition {
            type_: type_.into(),
            status,
            observed_generation: Some(2),
            last_transition_time: Time(at),
            reason: reason.into(),
            message: String::new(),
        }
    }

    #[test]
    fn ready_is_true_only_when_every_dependent_is_and_names_those_that_are_not() {
        let t = Timestamp::UNIX_EPOCH;
        let healthy = [
            condition("AMIsReady", ConditionStatus::True, "AMIsReady", t),
            condition("SubnetsReady", ConditionStatus::True, "SubnetsReady", t),
        ];
        let ready = ready_over(&healthy, Some(2));
        assert_eq!(
            (
                ready.type_.as_str(),
                ready.status,
                ready.reason.as_str(),
                ready.message.as_str()
            ),
            ("Ready", ConditionStatus::True, "Ready", "")
        );
        assert_eq!(ready.observed_generation, Some(2));

        let unhealthy = [
            condition("AMIsReady", ConditionStatus::True, "AMIsReady", t),
            condition("SubnetsReady", ConditionStatus::False, "SubnetsNotFound", t),
            condition(
                "ValidationSucceeded",
                ConditionStatus::Unknown,
                "DependenciesNotReady",
                t,
            ),
        ];
        let ready = ready_over(&unhealthy, None);
        assert_eq!(
            (ready.status, ready.reason.as_str(), ready.message.as_str()),
            (
                ConditionStatus::False,
                UNHEALTHY_DEPENDENTS,
                "SubnetsReady=False (SubnetsNotFound), ValidationSucceeded=Unknown (DependenciesNotReady)"
            )
        );
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_stays() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-01-01T00:05:00Z".parse().unwrap();
        let previous = [
            condition("AMIsReady", ConditionStatus::True, "AMIsReady", t0),
            condition("SubnetsReady", ConditionStatus::True, "SubnetsReady", t0),
        ];
        let mut now = vec![
            condition(
                "AMIsReady",
                ConditionStatus::True,
                "AMIsReady",
                Timestamp::UNIX_EPOCH,
            ),
            condition(
                "SubnetsReady",
                ConditionStatus::False,
                "SubnetsNotFound",
                Timestamp::UNIX_EPOCH,
            ),
            condition(
                "Ready",
                ConditionStatus::False,
                UNHEALTHY_DEPENDENTS,
                Timestamp::UNIX_EPOCH,
            ),
        ];
        keep_transition_times(&mut now, &previous, t1);
        let times: Vec<Timestamp> = now.iter().map(|c| c.last_transition_time.0).collect();
        assert_eq!(times, [t0, t1, t1]);
    }
}
