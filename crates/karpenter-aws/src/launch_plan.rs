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
//!
//! Before the capacity type is chosen, upstream's launch filters narrow the offerings ([`filters`]): exotic
//! types (metal, GPUs and other accelerators) are dropped when ordinary ones can serve the claim, and in a launch
//! that may be spot or on-demand, spot offerings dearer than the cheapest on-demand one are dropped (all of them
//! dearer: the launch is on-demand).

use std::collections::BTreeMap;

use karpenter_api::ec2nodeclass::{Ami, CapacityReservation};
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
use crate::pod_addressing::PodAddressing;

mod filters;

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
    /// Zone → the IP addresses one instance launched there is counted on to use: what the smallest max pods
    /// of the types it may launch there needs under the class's pod addressing
    /// ([`PodAddressing::addresses_per_instance`], [`crate::subnet_ips`]).
    pub addresses: BTreeMap<String, i64>,
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

struct Candidate {
    instance_type: String,
    zone: String,
    capacity_type: String,
    price: f64,
    image: usize,
    reservation: Option<ReservationTarget>,
    /// The type's max pods.
    pods: i64,
    /// The type is exotic (metal, GPUs, accelerators): see [`filters::is_exotic`].
    exotic: bool,
}

/// The plan for `claim` over `catalog` (the class's instance types, with its reserved offerings), `amis` and
/// `reservations` (its status), `subnets` (zone → the subnet a launch there uses, see
/// [`crate::subnet_ips::SubnetIps::choose`]; only their zones are launched in) and `addressing` (how the
/// class's nodes address pods). InsufficientCapacity when nothing qualifies.
pub fn plan_launch(
    claim: &NodeClaim,
    catalog: &[CatalogInstanceType],
    amis: &[Ami],
    subnets: &BTreeMap<String, String>,
    reservations: &[CapacityReservation],
    addressing: PodAddressing,
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
        let pods = entry.capacity.get("pods").copied().unwrap_or(0) / 1000;
        let exotic = filters::is_exotic(entry);
        for offering in entry.offerings.iter().filter(|o| o.available) {
            if !subnets.contains_key(&offering.zone) {
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
                    pods,
                    exotic,
                });
            }
        }
    }
    // Reserved offerings first, as upstream's reserved-offering filter keeps only them when there are some; then
    // its exotic and spot filters (`filters`), so a reservation of an exotic type is still launched into.
    let reserved = candidates.iter().any(|c| c.reservation.is_some());
    if reserved {
        candidates.retain(|c| c.reservation.is_some());
    }
    let min_values = wanted.has_min_values();
    let claim_name = claim.metadata.name.as_deref().unwrap_or_default();
    let exotic = filters::drop_exotic(&mut candidates, min_values);
    if !exotic.is_empty() {
        tracing::debug!(nodeclaim = claim_name, filter = "exotic-instance-filter", instance_types = ?exotic,
            "filtered out instance types from launch");
    }
    let (spot, on_demand) = (
        interner.intern(CAPACITY_TYPE_SPOT),
        interner.intern(CAPACITY_TYPE_ON_DEMAND),
    );
    let spot_and_on_demand =
        wanted.allows(capacity_type_key, spot) && wanted.allows(capacity_type_key, on_demand);
    let pricier_spot = filters::drop_pricier_spot(&mut candidates, spot_and_on_demand, min_values);
    if !pricier_spot.is_empty() {
        tracing::debug!(nodeclaim = claim_name, filter = "spot-offering-filter", instance_types = ?pricier_spot,
            "filtered out instance types from launch");
    }
    let capacity_type = if reserved {
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
    // Upstream's estimate: the fewest pods any type of the zone may bring.
    let mut fewest_pods: BTreeMap<String, i64> = BTreeMap::new();
    for c in &candidates {
        fewest_pods
            .entry(c.zone.clone())
            .and_modify(|least| *least = (*least).min(c.pods))
            .or_insert(c.pods);
    }
    let addresses: BTreeMap<String, i64> = fewest_pods
        .into_iter()
        .map(|(zone, pods)| (zone, addressing.addresses_per_instance(pods)))
        .collect();
    let overrides = candidates
        .iter()
        .filter_map(|c| {
            Some(LaunchOverride {
                instance_type: c.instance_type.clone(),
                zone: c.zone.clone(),
                subnet_id: subnets.get(&c.zone)?.clone(),
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
        subnets: subnets
            .iter()
            .filter(|(zone, _)| addresses.contains_key(*zone))
            .map(|(zone, id)| (zone.clone(), id.clone()))
            .collect(),
        addresses,
        reservation,
    })
}

impl LaunchPlan {
    /// Launches through `subnets` (zone → subnet, as leased): each override takes its zone's subnet, and
    /// overrides in a zone without one are dropped. False when none is left.
    pub fn use_subnets(&mut self, subnets: &BTreeMap<String, String>) -> bool {
        self.overrides.retain_mut(|o| match subnets.get(&o.zone) {
            Some(id) => {
                o.subnet_id.clone_from(id);
                true
            }
            None => false,
        });
        self.subnets = subnets
            .iter()
            .filter(|(zone, _)| self.overrides.iter().any(|o| o.zone == **zone))
            .map(|(zone, id)| (zone.clone(), id.clone()))
            .collect();
        !self.overrides.is_empty()
    }
}

#[cfg(test)]
mod tests;
