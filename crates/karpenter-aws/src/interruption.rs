//! Interruption messages: the EventBridge events Karpenter's SQS queue receives (spot interruption warnings,
//! rebalance recommendations, AWS Health scheduled changes for EC2 instances, instance state changes,
//! capacity reservation instance interruption warnings), parsed into one [`InterruptionMessage`] shape the
//! interruption controller acts on.
//!
//! The capacity reservation warning (EC2 reclaiming instances of an interruptible reservation or a capacity
//! block) is documented with `detail: {"instance-id", "instance-action", "instance-termination-time", ...}`
//! and no reservation id; a `capacity-reservation-id` is read when present, and a list `instance-ids` is
//! accepted beside `instance-id`. Without the id the source finds the reservation from the instance.
//!
//! Shapes follow the EventBridge envelope (`version`, `id`, `detail-type`, `source`, `account`, `time`,
//! `region`, `resources`, `detail`) and each event's documented `detail`. Events that parse but do not concern
//! Karpenter (an instance starting, a Health event for another service) are `Ok(None)`: the caller deletes
//! them without acting. Anything else, including a body that is not such an event, is an
//! [`AwsError::InterruptionMessage`] the caller logs, counts and deletes.

use jiff::Timestamp;
use serde::Deserialize;
use serde_json::Value;

use crate::error::AwsError;

pub const SPOT_INTERRUPTION_DETAIL_TYPE: &str = "EC2 Spot Instance Interruption Warning";
pub const REBALANCE_RECOMMENDATION_DETAIL_TYPE: &str = "EC2 Instance Rebalance Recommendation";
pub const STATE_CHANGE_DETAIL_TYPE: &str = "EC2 Instance State-change Notification";
pub const HEALTH_DETAIL_TYPE: &str = "AWS Health Event";
pub const CAPACITY_RESERVATION_INTERRUPTION_DETAIL_TYPE: &str =
    "EC2 Capacity Reservation Instance Interruption Warning";

/// What happened to the instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InterruptionKind {
    /// EC2 reclaims a spot instance in two minutes; `action` is `terminate`, `stop` or `hibernate`.
    SpotInterruption { action: String },
    /// EC2 recommends moving off a spot instance at elevated risk of interruption.
    RebalanceRecommendation,
    /// AWS Health announces scheduled maintenance or retirement of the instances.
    ScheduledChange { event_type_code: String },
    /// The instance is stopping, stopped, shutting down or terminated.
    StateChange { state: InstanceState },
    /// EC2 reclaims instances running in a capacity reservation (interruptible reservation or capacity block)
    /// in about two minutes; `reservation_id` when the event names it.
    CapacityReservationInterruption { reservation_id: Option<String> },
}

impl InterruptionKind {
    /// A short, stable name for metrics (`message_type`) and events.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::SpotInterruption { .. } => "spot_interrupted",
            Self::RebalanceRecommendation => "rebalance_recommendation",
            Self::ScheduledChange { .. } => "scheduled_change",
            Self::StateChange { .. } => "instance_state_change",
            Self::CapacityReservationInterruption { .. } => "capacity_reservation_interrupted",
        }
    }
}

/// The instance states Karpenter reacts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceState {
    Stopping,
    Stopped,
    ShuttingDown,
    Terminated,
}

impl InstanceState {
    fn parse(state: &str) -> Option<Self> {
        match state {
            "stopping" => Some(Self::Stopping),
            "stopped" => Some(Self::Stopped),
            "shutting-down" => Some(Self::ShuttingDown),
            "terminated" => Some(Self::Terminated),
            _ => None,
        }
    }
}

/// One interruption event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterruptionMessage {
    pub kind: InterruptionKind,
    /// EC2 instance IDs (`i-...`), at least one.
    pub instance_ids: Vec<String>,
    /// When the event was emitted (the envelope's `time`).
    pub time: Timestamp,
    /// The EventBridge event ID, for logs.
    pub event_id: String,
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "detail-type")]
    detail_type: String,
    source: String,
    #[serde(default)]
    id: String,
    time: String,
    detail: Value,
}

#[derive(Deserialize)]
struct InstanceDetail {
    #[serde(rename = "instance-id")]
    instance_id: String,
    #[serde(rename = "instance-action", default)]
    instance_action: Option<String>,
    #[serde(default)]
    state: Option<String>,
}

#[derive(Deserialize)]
struct ReservationInterruptionDetail {
    #[serde(rename = "instance-id", default)]
    instance_id: Option<String>,
    #[serde(rename = "instance-ids", default)]
    instance_ids: Vec<String>,
    #[serde(rename = "capacity-reservation-id", default)]
    capacity_reservation_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HealthDetail {
    service: String,
    event_type_category: String,
    #[serde(default)]
    event_type_code: String,
    #[serde(default)]
    affected_entities: Vec<AffectedEntity>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AffectedEntity {
    entity_value: String,
}

fn invalid(message: impl Into<String>) -> AwsError {
    AwsError::InterruptionMessage(message.into())
}

fn detail<T: for<'de> Deserialize<'de>>(detail_type: &str, value: Value) -> Result<T, AwsError> {
    serde_json::from_value(value).map_err(|e| invalid(format!("{detail_type}: detail: {e}")))
}

fn check_instance_id(id: &str, detail_type: &str) -> Result<(), AwsError> {
    if id.starts_with("i-") && id.len() > 2 {
        Ok(())
    } else {
        Err(invalid(format!(
            "{detail_type}: {id:?} is not an EC2 instance ID"
        )))
    }
}

/// Parses an SQS message body. See the module documentation for what `Ok(None)` and errors mean.
pub fn parse_interruption_message(body: &str) -> Result<Option<InterruptionMessage>, AwsError> {
    let envelope: Envelope =
        serde_json::from_str(body).map_err(|e| invalid(format!("not an EventBridge event: {e}")))?;
    let time: Timestamp = envelope
        .time
        .parse()
        .map_err(|e| invalid(format!("{}: time {:?}: {e}", envelope.detail_type, envelope.time)))?;
    let detail_type = envelope.detail_type.as_str();
    let (kind, instance_ids) = match (envelope.source.as_str(), detail_type) {
        ("aws.ec2", SPOT_INTERRUPTION_DETAIL_TYPE) => {
            let d: InstanceDetail = detail(detail_type, envelope.detail)?;
            let action = d
                .instance_action
                .ok_or_else(|| invalid(format!("{detail_type}: detail lacks instance-action")))?;
            (InterruptionKind::SpotInterruption { action }, vec![d.instance_id])
        }
        ("aws.ec2", REBALANCE_RECOMMENDATION_DETAIL_TYPE) => {
            let d: InstanceDetail = detail(detail_type, envelope.detail)?;
            (InterruptionKind::RebalanceRecommendation, vec![d.instance_id])
        }
        ("aws.ec2", STATE_CHANGE_DETAIL_TYPE) => {
            let d: InstanceDetail = detail(detail_type, envelope.detail)?;
            let state = d
                .state
                .ok_or_else(|| invalid(format!("{detail_type}: detail lacks state")))?;
            // Pending and running instances are not interrupted.
            let Some(state) = InstanceState::parse(&state) else {
                return Ok(None);
            };
            (InterruptionKind::StateChange { state }, vec![d.instance_id])
        }
        ("aws.ec2", CAPACITY_RESERVATION_INTERRUPTION_DETAIL_TYPE) => {
            let d: ReservationInterruptionDetail = detail(detail_type, envelope.detail)?;
            let mut ids = d.instance_ids;
            ids.extend(d.instance_id);
            if ids.is_empty() {
                return Err(invalid(format!("{detail_type}: detail lacks instance-id")));
            }
            if let Some(id) = &d.capacity_reservation_id
                && !id.starts_with("cr-")
            {
                return Err(invalid(format!(
                    "{detail_type}: {id:?} is not a capacity reservation ID"
                )));
            }
            (
                InterruptionKind::CapacityReservationInterruption {
                    reservation_id: d.capacity_reservation_id,
                },
                ids,
            )
        }
        ("aws.health", HEALTH_DETAIL_TYPE) => {
            let d: HealthDetail = detail(detail_type, envelope.detail)?;
            if d.service != "EC2" || d.event_type_category != "scheduledChange" {
                return Ok(None);
            }
            if d.affected_entities.is_empty() {
                return Err(invalid(format!("{detail_type}: no affectedEntities")));
            }
            let ids = d.affected_entities.into_iter().map(|e| e.entity_value).collect();
            (
                InterruptionKind::ScheduledChange {
                    event_type_code: d.event_type_code,
                },
                ids,
            )
        }
        (source, other) => {
            return Err(invalid(format!(
                "unsupported event: source {source:?}, detail-type {other:?}"
            )));
        }
    };
    for id in &instance_ids {
        check_instance_id(id, detail_type)?;
    }
    Ok(Some(InterruptionMessage {
        kind,
        instance_ids,
        time,
        event_id: envelope.id,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> InterruptionMessage {
        parse_interruption_message(body).unwrap().unwrap()
    }

    fn error(body: &str) -> String {
        let err = parse_interruption_message(body).unwrap_err();
        assert_eq!(err.category(), "InvalidInterruptionMessage");
        err.to_string()
    }

    const SPOT: &str = r#"{
        "version": "0", "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
        "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2",
        "account": "123456789012", "time": "2026-12-02T12:00:00Z", "region": "us-west-2",
        "resources": ["arn:aws:ec2:us-west-2a:instance/i-0b662ef9931388ba0"],
        "detail": {"instance-id": "i-0b662ef9931388ba0", "instance-action": "terminate"}}"#;

    #[test]
    fn spot_interruption_warning() {
        let m = parse(SPOT);
        assert_eq!(
            m.kind,
            InterruptionKind::SpotInterruption {
                action: "terminate".into()
            }
        );
        assert_eq!(m.kind.as_str(), "spot_interrupted");
        assert_eq!(m.instance_ids, ["i-0b662ef9931388ba0"]);
        assert_eq!(m.time, "2026-12-02T12:00:00Z".parse::<Timestamp>().unwrap());
        assert_eq!(m.event_id, "1e5527d7-bb36-4607-3370-4164db56a40e");
    }

    #[test]
    fn rebalance_recommendation() {
        let m = parse(
            r#"{"version": "0", "id": "5f9a9c3e", "detail-type": "EC2 Instance Rebalance Recommendation",
                "source": "aws.ec2", "account": "123456789012", "time": "2026-12-02T12:01:00Z",
                "region": "us-west-2", "resources": ["arn:aws:ec2:us-west-2b:instance/i-0123456789abcdef0"],
                "detail": {"instance-id": "i-0123456789abcdef0"}}"#,
        );
        assert_eq!(m.kind, InterruptionKind::RebalanceRecommendation);
        assert_eq!(m.instance_ids, ["i-0123456789abcdef0"]);
    }

    #[test]
    fn scheduled_change_for_ec2_instances() {
        let m = parse(
            r#"{"version": "0", "id": "7bf73129-1428-4cd3-a780-95db273d1602", "detail-type": "AWS Health Event",
                "source": "aws.health", "account": "123456789012", "time": "2026-12-02T12:02:00Z",
                "region": "us-west-2", "resources": ["i-0aaaaaaaaaaaaaaa1", "i-0aaaaaaaaaaaaaaa2"],
                "detail": {"eventArn": "arn:aws:health:us-west-2::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/x",
                           "service": "EC2", "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
                           "eventTypeCategory": "scheduledChange", "eventScopeCode": "ACCOUNT_SPECIFIC",
                           "startTime": "Wed, 09 Dec 2026 12:00:00 GMT", "endTime": "Wed, 09 Dec 2026 13:00:00 GMT",
                           "eventDescription": [{"language": "en_US", "latestDescription": "retirement"}],
                           "affectedEntities": [{"entityValue": "i-0aaaaaaaaaaaaaaa1"},
                                                {"entityValue": "i-0aaaaaaaaaaaaaaa2"}]}}"#,
        );
        assert_eq!(
            m.kind,
            InterruptionKind::ScheduledChange {
                event_type_code: "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED".into()
            }
        );
        assert_eq!(m.instance_ids, ["i-0aaaaaaaaaaaaaaa1", "i-0aaaaaaaaaaaaaaa2"]);
    }

    #[test]
    fn health_events_of_other_services_or_categories_are_ignored() {
        let other = |service: &str, category: &str| {
            format!(
                r#"{{"version": "0", "id": "x", "detail-type": "AWS Health Event", "source": "aws.health",
                    "time": "2026-12-02T12:02:00Z", "detail": {{"service": "{service}",
                    "eventTypeCategory": "{category}", "affectedEntities": []}}}}"#
            )
        };
        assert_eq!(
            parse_interruption_message(&other("RDS", "scheduledChange")).unwrap(),
            None
        );
        assert_eq!(parse_interruption_message(&other("EC2", "issue")).unwrap(), None);
    }

    #[test]
    fn state_changes_karpenter_acts_on() {
        for (text, state) in [
            ("stopping", InstanceState::Stopping),
            ("stopped", InstanceState::Stopped),
            ("shutting-down", InstanceState::ShuttingDown),
            ("terminated", InstanceState::Terminated),
        ] {
            let m = parse(&format!(
                r#"{{"version": "0", "id": "s", "detail-type": "EC2 Instance State-change Notification",
                    "source": "aws.ec2", "account": "123456789012", "time": "2026-12-02T12:03:00Z",
                    "region": "us-west-2", "resources": ["arn:aws:ec2:us-west-2:123456789012:instance/i-0abcdef1234567890"],
                    "detail": {{"instance-id": "i-0abcdef1234567890", "state": "{text}"}}}}"#
            ));
            assert_eq!(m.kind, InterruptionKind::StateChange { state });
            assert_eq!(m.kind.as_str(), "instance_state_change");
        }
        let running = r#"{"version": "0", "id": "s", "detail-type": "EC2 Instance State-change Notification",
            "source": "aws.ec2", "time": "2026-12-02T12:03:00Z",
            "detail": {"instance-id": "i-0abcdef1234567890", "state": "running"}}"#;
        assert_eq!(parse_interruption_message(running).unwrap(), None);
    }

    const RESERVATION_INTERRUPTION: &str = r#"{
        "version": "0", "id": "0b7a2a3c-5c1d-4e38-9f7e-2f1c3d4e5f60",
        "detail-type": "EC2 Capacity Reservation Instance Interruption Warning", "source": "aws.ec2",
        "account": "123456789012", "time": "2026-12-02T12:04:00Z", "region": "us-west-2",
        "resources": ["arn:aws:ec2:us-west-2:123456789012:instance/i-0c0ffee0c0ffee000"],
        "detail": {"instance-id": "i-0c0ffee0c0ffee000", "instance-action": "terminate",
                   "instance-termination-time": "2026-12-02T12:06:00Z", "availability-zone-id": "usw2-az1",
                   "capacity-reservation-id": "cr-0123456789abcdef0"}}"#;

    #[test]
    fn capacity_reservation_interruption_warning() {
        let m = parse(RESERVATION_INTERRUPTION);
        assert_eq!(
            m.kind,
            InterruptionKind::CapacityReservationInterruption {
                reservation_id: Some("cr-0123456789abcdef0".into())
            }
        );
        assert_eq!(m.kind.as_str(), "capacity_reservation_interrupted");
        assert_eq!(m.instance_ids, ["i-0c0ffee0c0ffee000"]);
        assert_eq!(m.time, "2026-12-02T12:04:00Z".parse::<Timestamp>().unwrap());

        // As AWS documents it: no reservation id (the source looks it up), and a list of instances is read too.
        let documented = RESERVATION_INTERRUPTION.replace(
            r#""capacity-reservation-id": "cr-0123456789abcdef0""#,
            r#""instance-lifecycle": "capacity-block""#,
        );
        assert_eq!(
            parse(&documented).kind,
            InterruptionKind::CapacityReservationInterruption { reservation_id: None }
        );
        let several = RESERVATION_INTERRUPTION.replace(
            r#""instance-id": "i-0c0ffee0c0ffee000""#,
            r#""instance-ids": ["i-0aaaaaaaaaaaaaaa1", "i-0aaaaaaaaaaaaaaa2"]"#,
        );
        assert_eq!(
            parse(&several).instance_ids,
            ["i-0aaaaaaaaaaaaaaa1", "i-0aaaaaaaaaaaaaaa2"]
        );
    }

    #[test]
    fn malformed_capacity_reservation_interruptions_are_rejected() {
        assert_eq!(
            error(&RESERVATION_INTERRUPTION.replace(r#""instance-id": "i-0c0ffee0c0ffee000", "#, "")),
            "interruption message: EC2 Capacity Reservation Instance Interruption Warning: detail lacks instance-id"
        );
        assert_eq!(
            error(&RESERVATION_INTERRUPTION.replace("cr-0123456789abcdef0", "sir-1")),
            r#"interruption message: EC2 Capacity Reservation Instance Interruption Warning: "sir-1" is not a capacity reservation ID"#
        );
        assert_eq!(
            error(&RESERVATION_INTERRUPTION.replace(
                r#""i-0c0ffee0c0ffee000", "instance-action""#,
                r#""vol-1", "instance-action""#
            )),
            r#"interruption message: EC2 Capacity Reservation Instance Interruption Warning: "vol-1" is not an EC2 instance ID"#
        );
        assert!(
            error(
                &RESERVATION_INTERRUPTION
                    .replace(r#""instance-id": "i-0c0ffee0c0ffee000""#, r#""instance-id": 7"#)
            )
            .starts_with(
                "interruption message: EC2 Capacity Reservation Instance Interruption Warning: detail: "
            )
        );
    }

    #[test]
    fn malformed_messages_are_rejected_with_a_reason() {
        assert!(error("not json").starts_with("interruption message: not an EventBridge event:"));
        assert!(
            error(r#"{"detail-type": "EC2 Spot Instance Interruption Warning"}"#).contains("missing field")
        );
        // The rest of the message is jiff's.
        assert!(
            error(&SPOT.replace("2026-12-02T12:00:00Z", "yesterday")).starts_with(
                r#"interruption message: EC2 Spot Instance Interruption Warning: time "yesterday": "#
            )
        );
        assert_eq!(
            error(&SPOT.replace(r#""instance-id": "i-0b662ef9931388ba0", "#, "")),
            "interruption message: EC2 Spot Instance Interruption Warning: detail: missing field `instance-id`"
        );
        assert_eq!(
            error(&SPOT.replace(
                "\"i-0b662ef9931388ba0\", \"instance-action\"",
                "\"vol-1\", \"instance-action\""
            )),
            r#"interruption message: EC2 Spot Instance Interruption Warning: "vol-1" is not an EC2 instance ID"#
        );
        assert_eq!(
            error(&SPOT.replace("aws.ec2", "aws.s3")),
            r#"interruption message: unsupported event: source "aws.s3", detail-type "EC2 Spot Instance Interruption Warning""#
        );
        let no_entities = r#"{"version": "0", "id": "x", "detail-type": "AWS Health Event", "source": "aws.health",
            "time": "2026-12-02T12:02:00Z", "detail": {"service": "EC2", "eventTypeCategory": "scheduledChange"}}"#;
        assert_eq!(
            error(no_entities),
            "interruption message: AWS Health Event: no affectedEntities"
        );
    }
}
