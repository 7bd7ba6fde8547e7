//! What one launch asks CreateFleet for: the offerings a NodeClaim allows (its requirements intersect the
//! instance type's, narrowed to the offering's zone and capacity type, and the type's allocatable covers its
//! requests), available, in a zone the EC2NodeClass has a subnet in, and runnable by one of the class's AMIs.
//!
//! Capacity type, as upstream: reserved when the claim allows it and a reserved offering (a capacity
//! reservation of the class with instances left) qualifies, then spot, then on-demand. A reserved launch
//! targets one reservation, the cheapest that qualifies, so it has exactly one override and its launch template
//! names that reservation ([`LaunchPlan::reservation`]). A reserved offering carries its reservation's labels
//! (`karpenter.k8s.aws/capacity-reservation-id` and `-type`) and the others carry none, so a claim that selects
//! those labels gets only the reservations it names. Each override carries the AMI for its type (the first of
//! the class's AMIs that runs it), so one fleet can mix architectures; the launch template holds the cheapest
//! override's AMI. At most [`MAX_OVERRIDES`] overrides, cheapest first.

use std::collections::BTreeMap;

use karpenter_api::ec2nodeclass::{Ami, CapacityReservation, Subnet};
use karpenter_api::labels::{
    AWS_CAPACITY_RESERVATION_ID_LABEL, AWS_CAPACITY_RESERVATION_TYPE_LABEL, CAPACITY_TYPE_LABEL,
    CAPACITY_TYPE_RESERVED, ZONE_LABEL,
};
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_api::quantity::parse_milli;
use karpenter_core::catalog::{CatalogInstanceType, Quantities};
use karpenter_core::cloudprovider::CloudProviderError;
use karpenter_core::instance_type;
use karpenter_core::requirements::{LabelInterner, Requirement, Requirements};
use karpenter_core::resources::ResourceTable;

use crate::capacity_reservations::{ReservationTarget, reservation_type_label};
use crate::instance_types::{CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT};
use crate::launch::LaunchOverride;
use crate::subnets::{DiscoveredSubnet, subnets_for_launch};

/// CreateFleet's limit on overrides Karpenter uses (upstream's `maxInstanceTypes`).
pub const MAX_OVERRIDES: usize = 60;

/// The offerings to send and what they share.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchPlan {
    pub capacity_type: String,
    /// The cheapest override's AMI, for the launch template.
    pub image_id: String,
    /// Cheapest first.
    pub overrides: Vec<LaunchOverride>,
    /// The subnet each zone launches into.
    pub subnets: BTreeMap<String, String>,
    /// The capacity reservation a reserved launch targets.
    pub reservation: Option<ReservationTarget>,
}

fn invalid(message: String) -> CloudProviderError {
    CloudProviderError::Create {
        reason: "InvalidRequirements".into(),
        message,
    }
}

fn requests(claim: &NodeClaim) -> Result<Quantities, CloudProviderError> {
    claim
        .spec
        .resources
        .requests
        .iter()
        .flatten()
        .map(|(name, q)| {
            parse_milli(&q.0)
                .map(|milli| (name.clone(), milli))
                .map_err(|e| invalid(format!("spec.resources.requests.{name}: {e}")))
        })
        .collect()
}

/// The class's subnets as launch candidates. The status lists them most free addresses first (as of the last
/// resolution), so the rank stands in for the address count instead of asking EC2 again on every launch.
fn ranked_subnets(subnets: &[Subnet]) -> Vec<DiscoveredSubnet> {
    let count = subnets.len();
    subnets
        .iter()
        .enumerate()
        .map(|(rank, s)| DiscoveredSubnet {
            id: s.id.clone(),
            zone: s.zone.clone(),
            zone_id: s.zone_id.clone(),
            available_ip_count: i32::try_from(count - rank).unwrap_or(i32::MAX),
        })
        .collect()
}

struct Candidate {
    instance_type: String,
    zone: String,
    capacity_type: String,
    price: f64,
    image: usize,
    reservation: Option<ReservationTarget>,
}

/// The plan for `claim` over `catalog` (the class's instance types, with its reserved offerings), and `amis`,
/// `subnets` and `reservations` (its status). InsufficientCapacity when nothing qualifies.
pub fn plan_launch(
    claim: &NodeClaim,
    catalog: &[CatalogInstanceType],
    amis: &[Ami],
    subnets: &[Subnet],
    reservations: &[CapacityReservation],
) -> Result<LaunchPlan, CloudProviderError> {
    let mut interner = LabelInterner::new();
    let mut table = ResourceTable::default();
    let wanted = Requirements::from_api(&claim.spec.requirements, &mut interner)
        .map_err(|e| invalid(format!("spec.requirements: {e}")))?;
    let requests = requests(claim)?;
    let zone_key = interner.intern_key(ZONE_LABEL);
    let capacity_type_key = interner.intern_key(CAPACITY_TYPE_LABEL);
    let reservation_id_key = interner.intern_key(AWS_CAPACITY_RESERVATION_ID_LABEL);
    let reservation_type_key = interner.intern_key(AWS_CAPACITY_RESERVATION_TYPE_LABEL);
    // An AMI whose requirements do not parse suits nothing rather than everything.
    let images: Vec<(usize, Requirements)> = amis
        .iter()
        .enumerate()
        .filter_map(|(index, ami)| {
            Requirements::from_node_selector_requirements(&ami.requirements, &mut interner)
                .ok()
                .map(|r| (index, r))
        })
        .collect();
    let launch_subnets = subnets_for_launch(&ranked_subnets(subnets));

    let mut candidates = Vec::new();
    for entry in catalog {
        let allocatable = entry.allocatable();
        let fits = requests
            .iter()
            .all(|(resource, amount)| *amount <= allocatable.get(resource).copied().unwrap_or(0));
        if !fits {
            continue;
        }
        let Ok(compiled) = instance_type::from_catalog(entry, &mut interner, &mut table) else {
            continue;
        };
        let Some(image) = images
            .iter()
            .find(|(_, ami)| compiled.requirements.intersects(ami).is_ok())
            .map(|(index, _)| *index)
        else {
            continue;
        };
        let has_reservations = entry.offerings.iter().any(|o| o.reservation_id.is_some());
        for offering in entry.offerings.iter().filter(|o| o.available) {
            if !launch_subnets.contains_key(&offering.zone) {
                continue;
            }
            // A reserved offering needs its reservation in the class's status (for its kind).
            let reservation = match &offering.reservation_id {
                None => None,
                Some(id) => match reservations.iter().find(|r| r.id == *id) {
                    Some(r) => Some(ReservationTarget {
                        id: id.clone(),
                        reservation_type: r.reservation_type,
                    }),
                    None => continue,
                },
            };
            let mut narrowed = compiled.requirements.clone();
            narrowed.add(Requirement::in_values(
                zone_key,
                [interner.intern(&offering.zone)],
            ));
            narrowed.add(Requirement::in_values(
                capacity_type_key,
                [interner.intern(&offering.capacity_type)],
            ));
            // The reservation labels are the offering's, not the type's (which admits them all once the type
            // has a reservation).
            match &reservation {
                Some(target) => {
                    narrowed.add(Requirement::in_values(
                        reservation_id_key,
                        [interner.intern(&target.id)],
                    ));
                    narrowed.add(Requirement::in_values(
                        reservation_type_key,
                        [interner.intern(reservation_type_label(target.reservation_type))],
                    ));
                }
                None if has_reservations => {
                    narrowed.add(Requirement::does_not_exist(reservation_id_key));
                    narrowed.add(Requirement::does_not_exist(reservation_type_key));
                }
                None => {}
            }
            if narrowed.intersects(&wanted).is_ok() {
                candidates.push(Candidate {
                    instance_type: entry.name.clone(),
                    zone: offering.zone.clone(),
                    capacity_type: offering.capacity_type.clone(),
                    price: offering.price,
                    image,
                    reservation,
                });
            }
        }
    }
    let capacity_type = if candidates.iter().any(|c| c.reservation.is_some()) {
        CAPACITY_TYPE_RESERVED
    } else if candidates.iter().any(|c| c.capacity_type == CAPACITY_TYPE_SPOT) {
        CAPACITY_TYPE_SPOT
    } else {
        CAPACITY_TYPE_ON_DEMAND
    };
    candidates.retain(|c| c.capacity_type == capacity_type);
    candidates.sort_by(|a, b| {
        a.price
            .total_cmp(&b.price)
            .then_with(|| a.instance_type.cmp(&b.instance_type))
            .then_with(|| a.zone.cmp(&b.zone))
            .then_with(|| {
                a.reservation
                    .as_ref()
                    .map(|r| &r.id)
                    .cmp(&b.reservation.as_ref().map(|r| &r.id))
            })
    });
    // One reservation per launch: its launch template targets it.
    let reservation = candidates.first().and_then(|c| c.reservation.clone());
    if reservation.is_some() {
        candidates.truncate(1);
    }
    let Some(image) = candidates.first().map(|c| c.image) else {
        return Err(CloudProviderError::InsufficientCapacity {
            message: format!(
                "no available offering satisfies the requirements and requests of NodeClaim {} in the zones of \
                 its EC2NodeClass's subnets with one of its AMIs",
                claim.metadata.name.as_deref().unwrap_or_default()
            ),
            offerings: Vec::new(),
        });
    };
    candidates.truncate(MAX_OVERRIDES);
    let overrides = candidates
        .iter()
        .filter_map(|c| {
            Some(LaunchOverride {
                instance_type: c.instance_type.clone(),
                zone: c.zone.clone(),
                subnet_id: launch_subnets.get(&c.zone)?.id.clone(),
                price: c.price,
                image_id: amis.get(c.image).map(|a| a.id.clone()),
                launch_template_name: None,
            })
        })
        .collect();
    Ok(LaunchPlan {
        capacity_type: capacity_type.to_string(),
        image_id: amis.get(image).map(|a| a.id.clone()).unwrap_or_default(),
        overrides,
        subnets: launch_subnets
            .into_iter()
            .map(|(zone, subnet)| (zone, subnet.id))
            .collect(),
        reservation,
    })
}

#[cfg(test)]
mod tests;
