//! Capacity reservations (on-demand capacity reservations and capacity blocks), behind the ReservedCapacity
//! feature gate ([`crate::AwsSettings::reserved_capacity`]):
//! - discovery: each `capacityReservationSelectorTerm` of an EC2NodeClass becomes one
//!   DescribeCapacityReservations call (active reservations only), and the EC2NodeClass controller writes the
//!   result to `status.capacityReservations` with the CapacityReservationsReady condition
//!   ([`crate::nodeclass::status`]);
//! - [`availability`]: how many instances each reservation can still take, shared by every class and launch;
//! - [`offerings`]: each reservation of a class as a `reserved` offering of its instance type and zone;
//! - [`lifecycle`]: NodeClaims whose reservation ended become on-demand; capacity blocks are drained 40
//!   minutes before they end; each such NodeClaim gets a Kubernetes Event saying so;
//! - launches into a reservation go through a launch template that targets it ([`ReservationTarget`]), one
//!   reservation per CreateFleet ([`crate::launch_plan`], [`crate::launch`]).

pub mod availability;
pub mod lifecycle;
pub mod offerings;

use std::collections::BTreeMap;
use std::time::Instant;

use aws_sdk_ec2::types::{
    CapacityReservationState as Ec2ReservationState, CapacityReservationType as Ec2ReservationType, Filter,
    InstanceMatchCriteria as Ec2MatchCriteria,
};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::ec2nodeclass::{
    CapacityReservation, CapacityReservationSelectorTerm, CapacityReservationState, CapacityReservationType,
    InstanceMatchCriteria,
};
use serde::Serialize;

use crate::error::AwsError;

pub use availability::{ReservationAvailability, ReservationSlot};

/// How often a class's reservations are described again (upstream: every minute), which also refreshes their
/// available instance counts.
pub const CAPACITY_RESERVATION_REFRESH: std::time::Duration = std::time::Duration::from_secs(60);

/// A capacity block is `expiring` this long before it ends: EC2 reclaims its instances at the end, so nothing
/// new launches into it and (upstream) its nodes are drained from then on.
pub const CAPACITY_BLOCK_EXPIRATION_WINDOW: SignedDuration = SignedDuration::from_mins(40);

/// A reservation as DescribeCapacityReservations reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredReservation {
    /// What `status.capacityReservations` holds of it.
    pub status: CapacityReservation,
    /// Instances it can still take, as EC2 counted them (running instances already subtracted).
    pub available_instance_count: i64,
    pub tags: BTreeMap<String, String>,
}

/// What a class's selector terms selected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationDiscovery {
    /// Every reservation some term selected, once, by id.
    pub reservations: Vec<DiscoveredReservation>,
    /// The terms that selected nothing, for the CapacityReservationsReady message.
    pub unmatched_terms: Vec<CapacityReservationSelectorTerm>,
    /// When EC2 was asked: its instance counts include the launches that finished before.
    pub asked_at: Instant,
}

/// The reservation a launch targets: its id and kind (a capacity block launches with market type
/// `capacity-block`, an on-demand capacity reservation as on-demand capacity).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservationTarget {
    pub id: String,
    pub reservation_type: CapacityReservationType,
}

impl ReservationTarget {
    pub fn is_capacity_block(&self) -> bool {
        self.reservation_type == CapacityReservationType::CapacityBlock
    }

    /// The `karpenter.k8s.aws/capacity-reservation-type` label value.
    pub fn type_label(&self) -> &'static str {
        reservation_type_label(self.reservation_type)
    }
}

/// `default` or `capacity-block`, as the label and the status write it.
pub fn reservation_type_label(reservation_type: CapacityReservationType) -> &'static str {
    match reservation_type {
        CapacityReservationType::Default => "default",
        CapacityReservationType::CapacityBlock => "capacity-block",
    }
}

/// The DescribeCapacityReservations request of one term: the ids to ask for and the filters. Every request asks
/// for active reservations only; a tag value `*` asks for the tag key with any value.
pub fn term_request(term: &CapacityReservationSelectorTerm) -> (Vec<String>, Vec<Filter>) {
    let filter = |name: &str, value: &str| Filter::builder().name(name).values(value).build();
    let mut filters = vec![filter("state", "active")];
    if let Some(owner) = &term.owner_id {
        filters.push(filter("owner-id", owner));
    }
    if let Some(criteria) = &term.instance_match_criteria {
        filters.push(filter("instance-match-criteria", criteria));
    }
    for (key, value) in term.tags.iter().flatten() {
        filters.push(if value == "*" {
            filter("tag-key", key)
        } else {
            filter(&format!("tag:{key}"), value)
        });
    }
    (term.id.iter().cloned().collect(), filters)
}

/// Whether `term` selects `reservation`: the same test as [`term_request`]'s filters, applied to the answer too
/// so that what a term selects does not depend on which filters an endpoint honours.
pub fn term_selects(term: &CapacityReservationSelectorTerm, reservation: &DiscoveredReservation) -> bool {
    let status = &reservation.status;
    let criteria = match status.instance_match_criteria {
        InstanceMatchCriteria::Open => "open",
        InstanceMatchCriteria::Targeted => "targeted",
    };
    term.id.as_ref().is_none_or(|id| *id == status.id)
        && term
            .owner_id
            .as_ref()
            .is_none_or(|owner| *owner == status.owner_id)
        && term
            .instance_match_criteria
            .as_ref()
            .is_none_or(|wanted| wanted == criteria)
        && term.tags.iter().flatten().all(|(key, value)| {
            reservation
                .tags
                .get(key)
                .is_some_and(|found| value == "*" || found == value)
        })
}

/// A DescribeCapacityReservations record as Karpenter keeps it at `now`; None for a reservation that is not
/// active or lacks an id, instance type, zone or owner (nothing could launch into it).
pub fn reservation_from_sdk(
    record: &aws_sdk_ec2::types::CapacityReservation,
    now: Timestamp,
) -> Option<DiscoveredReservation> {
    if record.state() != Some(&Ec2ReservationState::Active) {
        return None;
    }
    let reservation_type = match record.reservation_type() {
        Some(Ec2ReservationType::CapacityBlock) => CapacityReservationType::CapacityBlock,
        _ => CapacityReservationType::Default,
    };
    let instance_match_criteria = match record.instance_match_criteria() {
        Some(Ec2MatchCriteria::Targeted) => InstanceMatchCriteria::Targeted,
        _ => InstanceMatchCriteria::Open,
    };
    let end_time = record
        .end_date()
        .and_then(|end| Timestamp::new(end.secs(), 0).ok());
    let expiring = reservation_type == CapacityReservationType::CapacityBlock
        && end_time.is_some_and(|end| end.duration_since(now) <= CAPACITY_BLOCK_EXPIRATION_WINDOW);
    Some(DiscoveredReservation {
        status: CapacityReservation {
            availability_zone: record.availability_zone()?.to_string(),
            end_time: end_time.map(Time),
            id: record.capacity_reservation_id()?.to_string(),
            instance_match_criteria,
            instance_type: record.instance_type()?.to_string(),
            owner_id: record.owner_id()?.to_string(),
            reservation_type,
            interruptible: record.interruptible().unwrap_or(false),
            state: if expiring {
                CapacityReservationState::Expiring
            } else {
                CapacityReservationState::Active
            },
        },
        available_instance_count: i64::from(record.available_instance_count().unwrap_or(0).max(0)),
        tags: record
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string())))
            .collect(),
    })
}

/// The reservations one term selects at `now`.
async fn describe_term(
    ec2: &aws_sdk_ec2::Client,
    term: &CapacityReservationSelectorTerm,
    now: Timestamp,
) -> Result<Vec<DiscoveredReservation>, AwsError> {
    let (ids, filters) = term_request(term);
    let mut pages = ec2
        .describe_capacity_reservations()
        .set_capacity_reservation_ids((!ids.is_empty()).then_some(ids))
        .set_filters(Some(filters))
        .into_paginator()
        .send();
    let mut found = Vec::new();
    while let Some(page) = pages.next().await {
        let page = match page.map_err(|e| AwsError::from_sdk("DescribeCapacityReservations", e)) {
            Ok(page) => page,
            // EC2 refuses an id it does not know instead of answering with nothing: the term selects nothing.
            Err(AwsError::NotFound { .. }) if term.id.is_some() => return Ok(Vec::new()),
            Err(err) => return Err(err),
        };
        found.extend(
            page.capacity_reservations()
                .iter()
                .filter_map(|record| reservation_from_sdk(record, now))
                .filter(|reservation| term_selects(term, reservation)),
        );
    }
    Ok(found)
}

/// The reservations `terms` select (ORed) at `now`, deduplicated and in id order, and the terms that selected
/// none. No terms: nothing selected and no call made.
pub async fn discover_capacity_reservations(
    ec2: &aws_sdk_ec2::Client,
    terms: &[CapacityReservationSelectorTerm],
    now: Timestamp,
) -> Result<ReservationDiscovery, AwsError> {
    let asked_at = Instant::now();
    let mut by_id: BTreeMap<String, DiscoveredReservation> = BTreeMap::new();
    let mut unmatched_terms = Vec::new();
    for term in terms {
        let found = describe_term(ec2, term, now).await?;
        if found.is_empty() {
            unmatched_terms.push(term.clone());
        }
        for reservation in found {
            by_id.insert(reservation.status.id.clone(), reservation);
        }
    }
    Ok(ReservationDiscovery {
        reservations: by_id.into_values().collect(),
        unmatched_terms,
        asked_at,
    })
}

#[cfg(test)]
mod tests {
    use aws_sdk_ec2::primitives::DateTime;
    use aws_sdk_ec2::types::Tag;

    use super::*;

    fn record(id: &str) -> aws_sdk_ec2::types::builders::CapacityReservationBuilder {
        aws_sdk_ec2::types::CapacityReservation::builder()
            .capacity_reservation_id(id)
            .instance_type("m5.large")
            .availability_zone("us-west-2a")
            .owner_id("123456789012")
            .state(Ec2ReservationState::Active)
            .available_instance_count(3)
            .tags(Tag::builder().key("team").value("ml").build())
    }

    fn term(json: serde_json::Value) -> CapacityReservationSelectorTerm {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn records_become_status_entries_and_only_active_ones_count() {
        let now: Timestamp = "2026-12-02T12:00:00Z".parse().unwrap();
        let found = reservation_from_sdk(&record("cr-1").build(), now).unwrap();
        assert_eq!(
            found.status,
            CapacityReservation {
                availability_zone: "us-west-2a".into(),
                end_time: None,
                id: "cr-1".into(),
                instance_match_criteria: InstanceMatchCriteria::Open,
                instance_type: "m5.large".into(),
                owner_id: "123456789012".into(),
                reservation_type: CapacityReservationType::Default,
                interruptible: false,
                state: CapacityReservationState::Active,
            }
        );
        assert_eq!(found.available_instance_count, 3);
        assert_eq!(found.tags["team"], "ml");

        let expired = record("cr-2").state(Ec2ReservationState::Expired).build();
        assert_eq!(reservation_from_sdk(&expired, now), None);
        let no_zone = aws_sdk_ec2::types::CapacityReservation::builder()
            .capacity_reservation_id("cr-3")
            .state(Ec2ReservationState::Active)
            .build();
        assert_eq!(reservation_from_sdk(&no_zone, now), None);
    }

    #[test]
    fn a_capacity_block_is_expiring_forty_minutes_before_its_end() {
        let now: Timestamp = "2026-12-02T12:00:00Z".parse().unwrap();
        let block = |end: &str| {
            let end: Timestamp = end.parse().unwrap();
            record("cr-b")
                .reservation_type(Ec2ReservationType::CapacityBlock)
                .instance_match_criteria(Ec2MatchCriteria::Targeted)
                .end_date(DateTime::from_secs(end.as_second()))
                .build()
        };
        let later = reservation_from_sdk(&block("2026-12-02T13:00:00Z"), now).unwrap();
        assert_eq!(later.status.state, CapacityReservationState::Active);
        assert_eq!(
            later.status.reservation_type,
            CapacityReservationType::CapacityBlock
        );
        assert_eq!(
            later.status.instance_match_criteria,
            InstanceMatchCriteria::Targeted
        );
        assert_eq!(
            later.status.end_time,
            Some(Time("2026-12-02T13:00:00Z".parse().unwrap()))
        );
        let soon = reservation_from_sdk(&block("2026-12-02T12:40:00Z"), now).unwrap();
        assert_eq!(soon.status.state, CapacityReservationState::Expiring);
    }

    #[test]
    fn terms_become_filters_and_select_the_same_reservations() {
        let (ids, filters) = term_request(&term(serde_json::json!({
            "tags": {"team": "ml", "env": "*"}, "ownerID": "123456789012", "instanceMatchCriteria": "targeted"
        })));
        assert!(ids.is_empty());
        let filters: Vec<(&str, &[String])> =
            filters.iter().map(|f| (f.name().unwrap(), f.values())).collect();
        assert_eq!(
            filters,
            [
                ("state", &["active".to_string()][..]),
                ("owner-id", &["123456789012".to_string()][..]),
                ("instance-match-criteria", &["targeted".to_string()][..]),
                ("tag-key", &["env".to_string()][..]),
                ("tag:team", &["ml".to_string()][..]),
            ]
        );
        let (ids, _) = term_request(&term(serde_json::json!({"id": "cr-1"})));
        assert_eq!(ids, ["cr-1"]);

        let found = reservation_from_sdk(&record("cr-1").build(), Timestamp::UNIX_EPOCH).unwrap();
        for (json, selects) in [
            (serde_json::json!({"id": "cr-1"}), true),
            (serde_json::json!({"id": "cr-2"}), false),
            (serde_json::json!({"tags": {"team": "ml"}}), true),
            (serde_json::json!({"tags": {"team": "*"}}), true),
            (serde_json::json!({"tags": {"team": "web"}}), false),
            (serde_json::json!({"tags": {"team": "ml", "env": "*"}}), false),
            (serde_json::json!({"ownerID": "123456789012"}), true),
            (serde_json::json!({"ownerID": "210987654321"}), false),
            (serde_json::json!({"instanceMatchCriteria": "open"}), true),
            (serde_json::json!({"instanceMatchCriteria": "targeted"}), false),
        ] {
            assert_eq!(term_selects(&term(json.clone()), &found), selects, "{json}");
        }
    }
}
