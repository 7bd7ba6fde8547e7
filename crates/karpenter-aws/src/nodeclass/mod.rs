//! The EC2NodeClass controller and what it computes: each class's selector terms resolved into
//! `status.amis`, `status.subnets`, `status.securityGroups`, `status.capacityReservations` (with the
//! ReservedCapacity feature gate on) and `status.instanceProfile`, and its placement group selector into the
//! provider's [`crate::placement_groups::ResolvedPlacementGroups`], with its conditions
//! ([`status`]; ValidationSucceeded also from EC2 dry runs, [`dry_run`]), written through the status subresource; the `karpenter.k8s.aws/termination` finalizer, held
//! while NodeClaims still use the class; the drift hash annotations ([`controller`]) and the re-hashing of NodeClaims after a hash-version change
//! ([`hash`]).
//!
//! What every node class shares (the Ready root condition over the dependents, the hash annotations and the
//! re-hashing of NodeClaims, the finalizer that waits for the class's NodeClaims) is karpenter-nodeclass's; this
//! module names the EC2NodeClass's annotations and finalizer and does the EC2 resolution.
//!
//! [`resolve`] is shared with the CloudProvider, which resolves a class itself when a launch comes before the
//! controller has written any status.

pub mod amis;
pub mod controller;
pub mod dry_run;
pub mod hash;
pub mod status;

use std::time::Instant;

use jiff::Timestamp;
use karpenter_api::ec2nodeclass::EC2NodeClass;

use crate::capacity_reservations::discover_capacity_reservations;
use crate::client::AwsClients;
use crate::placement_groups::describe_placement_group;
use crate::security_groups::discover_security_groups;
use crate::subnet_ips::SubnetAddressCounts;
use crate::subnets::discover_subnets;
use status::Resolution;

/// Looks up everything `node_class` selects, for Kubernetes `k8s_version` (AMI aliases); its capacity
/// reservations only with `reserved_capacity` (the feature gate) on, its placement group only when it selects
/// one.
pub async fn resolve(
    clients: &AwsClients,
    node_class: &EC2NodeClass,
    k8s_version: &str,
    reserved_capacity: bool,
    now: Timestamp,
) -> Resolution {
    let spec = &node_class.spec;
    let amis = amis::resolve_amis(
        &clients.ec2,
        &clients.ssm,
        &spec.ami_selector_terms,
        k8s_version,
        now,
    )
    .await;
    // Before the call: a launch that finishes while EC2 counts stays subtracted.
    let subnets_asked_at = Instant::now();
    let found_subnets = discover_subnets(&clients.ec2, &spec.subnet_selector_terms).await;
    let subnet_addresses = found_subnets.as_ref().ok().map(|found| SubnetAddressCounts {
        asked_at: subnets_asked_at,
        available: found
            .iter()
            .map(|s| (s.id.clone(), i64::from(s.available_ip_count)))
            .collect(),
    });
    let subnets = found_subnets.map(|found| found.iter().map(|s| s.to_status()).collect());
    let security_groups = discover_security_groups(&clients.ec2, &spec.security_group_selector_terms).await;
    let capacity_reservations = if reserved_capacity {
        let terms = spec
            .capacity_reservation_selector_terms
            .as_deref()
            .unwrap_or_default();
        Some(discover_capacity_reservations(&clients.ec2, terms, now).await)
    } else {
        None
    };
    let placement_group = match &spec.placement_group_selector {
        Some(selector) => Some(describe_placement_group(&clients.ec2, selector).await),
        None => None,
    };
    Resolution {
        amis,
        subnets,
        subnet_addresses,
        security_groups,
        capacity_reservations,
        instance_profile: None,
        placement_group,
        dry_run: None,
    }
}
