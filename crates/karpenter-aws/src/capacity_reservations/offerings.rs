//! A class's capacity reservations as `reserved` offerings of the instance types they reserve.
//!
//! Each reservation in `status.capacityReservations` adds one offering to its instance type: its zone,
//! capacity type `reserved`, its id and the instances it can still take ([`ReservationAvailability`]). It is
//! available while it has instances left, is not expiring, is in a zone EC2 offers the type in, and no launch
//! recently found it full. Its price is the on-demand price divided by [`RESERVED_PRICE_DIVISOR`]: the
//! instances are paid for already, so the scheduler and consolidation treat them as nearly free, yet keep the
//! on-demand order between types (upstream does the same; zero when the on-demand price is unknown).
//!
//! The instance type's requirements then admit capacity type `reserved`, and no longer insist on having no
//! reservation labels, so a NodePool may select `karpenter.k8s.aws/capacity-reservation-id` or `-type`; which
//! offering carries which labels is decided per offering at launch ([`crate::launch_plan`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use karpenter_api::ec2nodeclass::{CapacityReservation, CapacityReservationState};
use karpenter_api::labels::{
    AWS_CAPACITY_RESERVATION_ID_LABEL, AWS_CAPACITY_RESERVATION_TYPE_LABEL, CAPACITY_TYPE_LABEL,
    CAPACITY_TYPE_RESERVED, ZONE_LABEL,
};
use karpenter_core::catalog::{CatalogInstanceType, CatalogOffering, RequirementOperator};

use super::ReservationAvailability;
use crate::pricing::PricingProvider;
use crate::unavailable_offerings::UnavailableOfferings;

/// A reserved offering costs its on-demand price divided by this.
pub const RESERVED_PRICE_DIVISOR: f64 = 10_000_000.0;

/// Adds a reserved offering per reservation of `reservations` to its instance type in `catalog`, at `now`.
/// Reservations of types the catalog lacks are skipped. Does nothing (and costs nothing) without reservations.
pub fn add_reserved_offerings(
    catalog: &mut [CatalogInstanceType],
    reservations: &[CapacityReservation],
    availability: &ReservationAvailability,
    unavailable: &UnavailableOfferings,
    pricing: &PricingProvider,
    now: Instant,
) {
    if reservations.is_empty() {
        return;
    }
    let mut by_type: HashMap<&str, Vec<&CapacityReservation>> = HashMap::new();
    for reservation in reservations {
        by_type
            .entry(reservation.instance_type.as_str())
            .or_default()
            .push(reservation);
    }
    for entry in catalog.iter_mut() {
        let Some(reserved) = by_type.get(entry.name.as_str()) else {
            continue;
        };
        let offered_zones: Vec<String> = entry
            .requirements
            .iter()
            .find(|r| r.key == ZONE_LABEL && r.operator == RequirementOperator::In)
            .map(|r| r.values.clone())
            .unwrap_or_default();
        let price = pricing
            .on_demand_price(&entry.name)
            .map_or(0.0, |on_demand| on_demand / RESERVED_PRICE_DIVISOR);
        for reservation in reserved {
            let capacity = availability.available(&reservation.id);
            entry.offerings.push(CatalogOffering {
                zone: reservation.availability_zone.clone(),
                capacity_type: CAPACITY_TYPE_RESERVED.to_string(),
                price,
                available: capacity > 0
                    && reservation.state == CapacityReservationState::Active
                    && offered_zones.contains(&reservation.availability_zone)
                    && !unavailable.is_reservation_unavailable(&reservation.id, now),
                reservation_id: Some(reservation.id.clone()),
                reservation_capacity: Some(capacity),
            });
        }
        admit_reserved_capacity(entry);
    }
}

/// Makes reservation `id`'s offerings in `catalog` unavailable: a launch found it without instances left.
pub fn withdraw_reservation(catalog: &mut [CatalogInstanceType], id: &str) {
    for offering in catalog
        .iter_mut()
        .flat_map(|t| t.offerings.iter_mut())
        .filter(|o| o.reservation_id.as_deref() == Some(id))
    {
        offering.available = false;
        offering.reservation_capacity = Some(0);
    }
}

/// Lets `entry`'s requirements accept its reserved offerings: capacity type `reserved`, and any reservation
/// labels.
fn admit_reserved_capacity(entry: &mut CatalogInstanceType) {
    // This entry's own copy: the requirements are shared with the catalog it came from.
    let requirements = Arc::make_mut(&mut entry.requirements);
    requirements.retain(|r| {
        !(r.operator == RequirementOperator::DoesNotExist
            && (r.key == AWS_CAPACITY_RESERVATION_ID_LABEL || r.key == AWS_CAPACITY_RESERVATION_TYPE_LABEL))
    });
    if let Some(capacity_types) = requirements
        .iter_mut()
        .find(|r| r.key == CAPACITY_TYPE_LABEL && r.operator == RequirementOperator::In)
        && !capacity_types.values.iter().any(|v| v == CAPACITY_TYPE_RESERVED)
    {
        capacity_types.values.push(CAPACITY_TYPE_RESERVED.to_string());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use karpenter_api::ec2nodeclass::{CapacityReservationType, InstanceMatchCriteria};
    use karpenter_aws_catalog::{AwsCapacitySettings, aws_catalog};

    use super::*;

    fn reservation(id: &str, instance_type: &str, zone: &str) -> CapacityReservation {
        CapacityReservation {
            availability_zone: zone.into(),
            end_time: None,
            id: id.into(),
            instance_match_criteria: InstanceMatchCriteria::Targeted,
            instance_type: instance_type.into(),
            owner_id: "123456789012".into(),
            reservation_type: CapacityReservationType::Default,
            interruptible: false,
            state: CapacityReservationState::Active,
        }
    }

    fn catalog() -> Vec<CatalogInstanceType> {
        aws_catalog("us-west-2", &AwsCapacitySettings::default())
            .unwrap()
            .instance_types
            .into_iter()
            .filter(|t| ["m5.large", "m5.xlarge"].contains(&t.name.as_str()))
            .collect()
    }

    fn reserved(entry: &CatalogInstanceType) -> Vec<(&str, &str, bool, Option<i64>)> {
        entry
            .offerings
            .iter()
            .filter(|o| o.capacity_type == "reserved")
            .map(|o| {
                (
                    o.reservation_id.as_deref().unwrap_or_default(),
                    o.zone.as_str(),
                    o.available,
                    o.reservation_capacity,
                )
            })
            .collect()
    }

    #[test]
    fn each_reservation_is_a_nearly_free_reserved_offering_of_its_type() {
        let availability = Arc::new(ReservationAvailability::default());
        let now = Instant::now();
        availability.record_reported(
            [("cr-a", 2), ("cr-full", 0), ("cr-expiring", 1), ("cr-iced", 1)],
            now,
        );
        let unavailable = UnavailableOfferings::default();
        unavailable.mark_reservation_unavailable("cr-iced", now);
        let pricing = PricingProvider::new("us-west-2", false).unwrap();
        let mut expiring = reservation("cr-expiring", "m5.large", "us-west-2b");
        expiring.state = CapacityReservationState::Expiring;
        let reservations = [
            reservation("cr-a", "m5.large", "us-west-2a"),
            reservation("cr-full", "m5.large", "us-west-2a"),
            expiring,
            reservation("cr-iced", "m5.large", "us-west-2c"),
            reservation("cr-nowhere", "m5.large", "us-east-1a"),
            reservation("cr-unknown-type", "x9.huge", "us-west-2a"),
        ];
        let mut catalog = catalog();
        let untouched = catalog.iter().find(|t| t.name == "m5.xlarge").cloned().unwrap();
        add_reserved_offerings(
            &mut catalog,
            &reservations,
            &availability,
            &unavailable,
            &pricing,
            now,
        );
        let m5 = catalog.iter().find(|t| t.name == "m5.large").unwrap();
        assert_eq!(
            reserved(m5),
            [
                ("cr-a", "us-west-2a", true, Some(2)),
                ("cr-full", "us-west-2a", false, Some(0)),
                ("cr-expiring", "us-west-2b", false, Some(1)),
                ("cr-iced", "us-west-2c", false, Some(1)),
                ("cr-nowhere", "us-east-1a", false, Some(0)),
            ]
        );
        let on_demand = pricing.on_demand_price("m5.large").unwrap();
        let offering = m5
            .offerings
            .iter()
            .find(|o| o.capacity_type == "reserved")
            .unwrap();
        assert!((offering.price - on_demand / RESERVED_PRICE_DIVISOR).abs() < 1e-12);
        assert!(offering.price > 0.0 && offering.price < 1e-6);

        let requirement = |key: &str| m5.requirements.iter().find(|r| r.key == key);
        assert_eq!(
            requirement(CAPACITY_TYPE_LABEL).unwrap().values,
            ["on-demand", "spot", "reserved"]
        );
        assert!(requirement(AWS_CAPACITY_RESERVATION_ID_LABEL).is_none());
        assert!(requirement(AWS_CAPACITY_RESERVATION_TYPE_LABEL).is_none());

        let m5_xlarge = catalog.iter().find(|t| t.name == "m5.xlarge").unwrap();
        assert_eq!(
            *m5_xlarge, untouched,
            "types without reservations stay as they were"
        );

        withdraw_reservation(&mut catalog, "cr-a");
        let m5 = catalog.iter().find(|t| t.name == "m5.large").unwrap();
        assert_eq!(reserved(m5)[0], ("cr-a", "us-west-2a", false, Some(0)));
    }
}
