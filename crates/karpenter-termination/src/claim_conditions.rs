//! The NodeClaim conditions termination writes, as upstream's node termination controller does, so
//! `kubectl get nodeclaim -o yaml` shows where a termination is:
//! - `Drained`: Unknown (`Draining`) while pods are still waited for, True once none is;
//! - `VolumesDetached`: Unknown (`AwaitingVolumeDetachment`) while a VolumeAttachment still names the node, True
//!   once none does, False (`TerminationGracePeriodElapsed`) when the deadline passed before they went;
//! - `InstanceTerminating`: True once the cloud provider accepted the instance's deletion.
//!
//! Pure: [`with_condition`] computes the list to write; the terminator writes it.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::{
    common::{Condition, ConditionStatus},
    nodeclaim::conditions,
};

/// One condition as termination sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminationCondition {
    pub type_: &'static str,
    pub status: ConditionStatus,
    pub reason: &'static str,
    pub message: &'static str,
}

/// A True condition reads its own type as reason and has no message, as upstream's status conditions do.
const fn true_condition(type_: &'static str) -> TerminationCondition {
    TerminationCondition {
        type_,
        status: ConditionStatus::True,
        reason: type_,
        message: "",
    }
}

pub const DRAINING: TerminationCondition = TerminationCondition {
    type_: conditions::DRAINED,
    status: ConditionStatus::Unknown,
    reason: "Draining",
    message: "Draining",
};
pub const DRAINED: TerminationCondition = true_condition(conditions::DRAINED);
pub const AWAITING_VOLUME_DETACHMENT: TerminationCondition = TerminationCondition {
    type_: conditions::VOLUMES_DETACHED,
    status: ConditionStatus::Unknown,
    reason: "AwaitingVolumeDetachment",
    message: "AwaitingVolumeDetachment",
};
pub const VOLUMES_DETACHED: TerminationCondition = true_condition(conditions::VOLUMES_DETACHED);
pub const VOLUMES_LEFT_AT_DEADLINE: TerminationCondition = TerminationCondition {
    type_: conditions::VOLUMES_DETACHED,
    status: ConditionStatus::False,
    reason: "TerminationGracePeriodElapsed",
    message: "TerminationGracePeriodElapsed",
};
pub const INSTANCE_TERMINATING: TerminationCondition = true_condition(conditions::INSTANCE_TERMINATING);

/// Whether `current` holds `wanted` already (type, status, reason and message).
pub fn holds(current: &[Condition], wanted: &TerminationCondition) -> bool {
    current.iter().any(|c| {
        c.type_ == wanted.type_
            && c.status == wanted.status
            && c.reason == wanted.reason
            && c.message == wanted.message
    })
}

/// `current` with `wanted` set, or `None` when it holds already (nothing to write). The transition time moves
/// only when the status changes; every other condition stays as it is.
pub fn with_condition(
    current: &[Condition],
    wanted: &TerminationCondition,
    now: Timestamp,
) -> Option<Vec<Condition>> {
    if holds(current, wanted) {
        return None;
    }
    let mut out = current.to_vec();
    match out.iter_mut().find(|c| c.type_ == wanted.type_) {
        Some(c) => {
            if c.status != wanted.status {
                c.last_transition_time = Time(now);
            }
            c.status = wanted.status;
            c.reason = wanted.reason.to_string();
            c.message = wanted.message.to_string();
        }
        None => out.push(Condition {
            type_: wanted.type_.to_string(),
            status: wanted.status,
            observed_generation: None,
            last_transition_time: Time(now),
            reason: wanted.reason.to_string(),
            message: wanted.message.to_string(),
        }),
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        match s.parse() {
            Ok(t) => t,
            Err(e) => panic!("{e}: {s}"),
        }
    }

    #[test]
    fn draining_then_drained_moves_the_transition_time_and_keeps_other_conditions() {
        let t0 = at("2026-01-01T00:00:00Z");
        let t1 = at("2026-01-01T00:01:00Z");
        let ready = Condition {
            type_: "Ready".into(),
            status: ConditionStatus::True,
            observed_generation: Some(1),
            last_transition_time: Time(t0),
            reason: "Ready".into(),
            message: String::new(),
        };
        let draining = with_condition(std::slice::from_ref(&ready), &DRAINING, t0).unwrap_or_default();
        assert_eq!(draining.len(), 2);
        assert_eq!(draining[0], ready);
        assert_eq!(
            (
                draining[1].status,
                draining[1].reason.as_str(),
                draining[1].message.as_str()
            ),
            (ConditionStatus::Unknown, "Draining", "Draining")
        );
        assert_eq!(
            with_condition(&draining, &DRAINING, t1),
            None,
            "already holds: nothing to write"
        );

        let drained = with_condition(&draining, &DRAINED, t1).unwrap_or_default();
        assert_eq!(drained[1].type_, "Drained");
        assert_eq!(
            (
                drained[1].status,
                drained[1].reason.as_str(),
                drained[1].message.as_str()
            ),
            (ConditionStatus::True, "Drained", "")
        );
        assert_eq!(drained[1].last_transition_time, Time(t1));
    }

    #[test]
    fn a_new_reason_with_the_same_status_keeps_the_transition_time() {
        let t0 = at("2026-01-01T00:00:00Z");
        let t1 = at("2026-01-01T00:05:00Z");
        let awaiting = with_condition(&[], &AWAITING_VOLUME_DETACHMENT, t0).unwrap_or_default();
        let left = with_condition(&awaiting, &VOLUMES_LEFT_AT_DEADLINE, t1).unwrap_or_default();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].status, ConditionStatus::False);
        assert_eq!(left[0].reason, "TerminationGracePeriodElapsed");
        assert_eq!(left[0].last_transition_time, Time(t1));
        let instance = with_condition(&left, &INSTANCE_TERMINATING, t1).unwrap_or_default();
        assert!(holds(&instance, &INSTANCE_TERMINATING));
        assert!(holds(&instance, &VOLUMES_LEFT_AT_DEADLINE));
    }
}
