//! What an EC2NodeClass resolves to, and the status written from it: the resolved AMIs, subnets, security
//! groups, capacity reservations and instance profile, and one condition per dependent (AMIsReady,
//! SubnetsReady, SecurityGroupsReady, InstanceProfileReady, ValidationSucceeded, PlacementGroupReady when
//! `spec.placementGroupSelector` is set, and CapacityReservationsReady with the ReservedCapacity feature gate
//! on) plus Ready. A dependent that selected nothing is False with the upstream reason and a message naming
//! the selector terms, so `kubectl describe` says what to fix. For capacity reservations that is any single
//! term selecting nothing (no terms at all is fine: the class simply uses none).
//!
//! The placement group itself is not in the status (the API has no field for it): the provider keeps it
//! ([`crate::placement_groups::ResolvedPlacementGroups`]). ValidationSucceeded is the spec's validity, then
//! the verdict of the EC2 dry runs ([`crate::nodeclass::dry_run`]) when the controller ran them.
//!
//! Instance profiles: `spec.instanceProfile` is used as it is; for `spec.role` the controller creates one
//! ([`crate::instance_profile`]) and the resolution carries its name, or why it could not.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::common::{Condition, ConditionStatus};
use karpenter_api::ec2nodeclass::{
    Ami, EC2NodeClass, EC2NodeClassStatus, SecurityGroup, Subnet, conditions, reasons,
};
use karpenter_nodeclass::conditions::{keep_transition_times, ready_over};
use serde::Serialize;

use crate::capacity_reservations::ReservationDiscovery;
use crate::error::AwsError;
use crate::nodeclass::dry_run::DryRunOutcome;
use crate::placement_groups::{PlacementGroup, selector_json};
use crate::subnet_ips::SubnetAddressCounts;

/// Reason of a role-based class's InstanceProfileReady before its instance profile was created.
pub const INSTANCE_PROFILE_NOT_MANAGED: &str = "InstanceProfileNotManaged";
/// Reason of a role-based class's InstanceProfileReady when creating its instance profile failed.
pub const INSTANCE_PROFILE_CREATION_FAILED: &str = "InstanceProfileCreationFailed";
/// Reason of ValidationSucceeded when the spec breaks the CRD's rules (an object the API server would refuse).
pub const SPEC_VALIDATION_FAILED: &str = "SpecValidationFailed";
/// Reason of Ready when a dependent is not True (karpenter-nodeclass computes Ready over the dependents).
pub use karpenter_nodeclass::conditions::UNHEALTHY_DEPENDENTS;
/// Reason of a dependent whose lookup failed (throttling, permissions, an unreachable endpoint).
pub const RESOLUTION_FAILED: &str = "ResolutionFailed";
/// Reason of CapacityReservationsReady when a capacity reservation selector term selected nothing.
pub const CAPACITY_RESERVATIONS_NOT_FOUND: &str = "CapacityReservationsNotFound";
/// Reason of PlacementGroupReady when the selected group exists but instances cannot launch into it (pending,
/// deleting), as upstream names it.
pub const PLACEMENT_GROUP_NOT_AVAILABLE: &str = "PlacementGroupNotAvailable";

/// The outcome of resolving each part of a class; an `Err` is a failed lookup, not an empty match.
#[derive(Debug)]
pub struct Resolution {
    pub amis: Result<Vec<Ami>, AwsError>,
    pub subnets: Result<Vec<Subnet>, AwsError>,
    /// EC2's free address counts of those subnets, for launches to choose between them; None when the lookup
    /// failed (or in tests that do not need it).
    pub subnet_addresses: Option<SubnetAddressCounts>,
    pub security_groups: Result<Vec<SecurityGroup>, AwsError>,
    /// None with the ReservedCapacity feature gate off (no CapacityReservationsReady condition then).
    pub capacity_reservations: Option<Result<ReservationDiscovery, AwsError>>,
    /// The instance profile created for `spec.role`; None when there is none to create (`spec.instanceProfile`
    /// is set) or it was not attempted.
    pub instance_profile: Option<Result<String, AwsError>>,
    /// The group `spec.placementGroupSelector` selects (`Ok(None)`: none matches); None without a selector.
    pub placement_group: Option<Result<Option<PlacementGroup>, AwsError>>,
    /// The dry-run authorization checks' verdict ([`crate::nodeclass::dry_run`]); None when they were not run
    /// (a launch resolving a class the controller has not reconciled yet, or an invalid spec): then only the
    /// spec's validity counts.
    pub dry_run: Option<DryRunOutcome>,
}

impl Resolution {
    /// The first lookup error, for the controller's retry.
    pub fn error(&self) -> Option<&AwsError> {
        [
            self.amis.as_ref().err(),
            self.subnets.as_ref().err(),
            self.security_groups.as_ref().err(),
            self.capacity_reservations.as_ref().and_then(|r| r.as_ref().err()),
            self.instance_profile.as_ref().and_then(|p| p.as_ref().err()),
            self.placement_group.as_ref().and_then(|g| g.as_ref().err()),
        ]
        .into_iter()
        .flatten()
        .find(|e| !matches!(e, AwsError::Config(_)))
    }

    /// [`Resolution::error`], owned.
    pub fn into_error(self) -> Option<AwsError> {
        [
            self.amis.err(),
            self.subnets.err(),
            self.security_groups.err(),
            self.capacity_reservations.and_then(Result::err),
            self.instance_profile.and_then(Result::err),
            self.placement_group.and_then(Result::err),
        ]
        .into_iter()
        .flatten()
        .find(|e| !matches!(e, AwsError::Config(_)))
    }
}

fn terms_json<T: Serialize>(terms: &[T]) -> String {
    serde_json::to_string(terms).unwrap_or_default()
}

/// One condition computed now; the caller keeps the old transition time when the status did not change.
fn condition(type_: &str, ok: bool, reason: &str, message: String, generation: Option<i64>) -> Condition {
    if ok {
        condition_with(type_, ConditionStatus::True, type_, String::new(), generation)
    } else {
        condition_with(type_, ConditionStatus::False, reason, message, generation)
    }
}

/// [`condition`] with any status and reason (a True condition with its own reason, an Unknown one).
fn condition_with(
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: String,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status,
        observed_generation: generation,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
        reason: reason.to_string(),
        message,
    }
}

/// ValidationSucceeded: the spec's validity first, then the dry runs' verdict. An inconclusive dry run keeps
/// the previous verdict (a throttled check must not flip a validated class), or is Unknown before there is one.
fn validation_condition(
    node_class: &EC2NodeClass,
    dry_run: Option<&DryRunOutcome>,
    previous: &EC2NodeClassStatus,
    generation: Option<i64>,
) -> Condition {
    let type_ = conditions::VALIDATION_SUCCEEDED;
    if let Err(err) = node_class.validate() {
        return condition(type_, false, SPEC_VALIDATION_FAILED, err.to_string(), generation);
    }
    match dry_run {
        None | Some(DryRunOutcome::Authorized) => condition(type_, true, "", String::new(), generation),
        Some(DryRunOutcome::Disabled) => condition_with(
            type_,
            ConditionStatus::True,
            reasons::DRY_RUN_DISABLED,
            "the EC2 dry-run authorization checks are disabled (DISABLE_DRY_RUN)".into(),
            generation,
        ),
        Some(DryRunOutcome::DependenciesNotReady(waiting)) => condition(
            type_,
            false,
            reasons::DEPENDENCIES_NOT_READY,
            waiting.clone(),
            generation,
        ),
        Some(DryRunOutcome::Failed { reason, message }) => {
            condition(type_, false, reason, message.clone(), generation)
        }
        Some(DryRunOutcome::Inconclusive(message)) => previous
            .conditions
            .iter()
            .find(|c| c.type_ == type_ && c.reason != SPEC_VALIDATION_FAILED)
            .map(|c| Condition {
                observed_generation: generation,
                ..c.clone()
            })
            .unwrap_or_else(|| {
                condition_with(
                    type_,
                    ConditionStatus::Unknown,
                    reasons::DEPENDENCIES_NOT_READY,
                    message.clone(),
                    generation,
                )
            }),
    }
}

/// The status `resolution` gives `node_class` at `now`. Where a lookup failed the previous status's value is
/// kept (a throttled DescribeSubnets must not empty the subnets launches use).
pub fn compute_status(
    node_class: &EC2NodeClass,
    resolution: &Resolution,
    now: Timestamp,
) -> EC2NodeClassStatus {
    let previous = node_class.status.clone().unwrap_or_default();
    let generation = node_class.metadata.generation;
    let spec = &node_class.spec;
    let mut conditions_out = Vec::new();

    let amis = match &resolution.amis {
        Ok(amis) => {
            conditions_out.push(condition(
                conditions::AMIS_READY,
                !amis.is_empty(),
                reasons::AMI_NOT_FOUND,
                format!(
                    "AMISelector did not match any AMIs: {}",
                    terms_json(&spec.ami_selector_terms)
                ),
                generation,
            ));
            amis.clone()
        }
        Err(err) => {
            let reason = match err {
                AwsError::Config(_) => reasons::UNSUPPORTED_ALIAS,
                _ => RESOLUTION_FAILED,
            };
            conditions_out.push(condition(
                conditions::AMIS_READY,
                false,
                reason,
                err.to_string(),
                generation,
            ));
            previous.amis.clone()
        }
    };
    let subnets = match &resolution.subnets {
        Ok(subnets) => {
            conditions_out.push(condition(
                conditions::SUBNETS_READY,
                !subnets.is_empty(),
                reasons::SUBNETS_NOT_FOUND,
                format!(
                    "SubnetSelector did not match any Subnets: {}",
                    terms_json(&spec.subnet_selector_terms)
                ),
                generation,
            ));
            subnets.clone()
        }
        Err(err) => {
            conditions_out.push(condition(
                conditions::SUBNETS_READY,
                false,
                RESOLUTION_FAILED,
                err.to_string(),
                generation,
            ));
            previous.subnets.clone()
        }
    };
    let security_groups = match &resolution.security_groups {
        Ok(groups) => {
            conditions_out.push(condition(
                conditions::SECURITY_GROUPS_READY,
                !groups.is_empty(),
                reasons::SECURITY_GROUPS_NOT_FOUND,
                format!(
                    "SecurityGroupSelector did not match any SecurityGroups: {}",
                    terms_json(&spec.security_group_selector_terms)
                ),
                generation,
            ));
            groups.clone()
        }
        Err(err) => {
            conditions_out.push(condition(
                conditions::SECURITY_GROUPS_READY,
                false,
                RESOLUTION_FAILED,
                err.to_string(),
                generation,
            ));
            previous.security_groups.clone()
        }
    };
    let capacity_reservations = match &resolution.capacity_reservations {
        None => Vec::new(),
        Some(Ok(discovery)) => {
            conditions_out.push(condition(
                conditions::CAPACITY_RESERVATIONS_READY,
                discovery.unmatched_terms.is_empty(),
                CAPACITY_RESERVATIONS_NOT_FOUND,
                format!(
                    "CapacityReservationSelector did not match any CapacityReservations: {}",
                    terms_json(&discovery.unmatched_terms)
                ),
                generation,
            ));
            discovery.reservations.iter().map(|r| r.status.clone()).collect()
        }
        Some(Err(err)) => {
            conditions_out.push(condition(
                conditions::CAPACITY_RESERVATIONS_READY,
                false,
                RESOLUTION_FAILED,
                err.to_string(),
                generation,
            ));
            previous.capacity_reservations.clone()
        }
    };
    let instance_profile = match (&spec.instance_profile, &resolution.instance_profile) {
        (Some(profile), _) => {
            conditions_out.push(condition(
                conditions::INSTANCE_PROFILE_READY,
                true,
                "",
                String::new(),
                generation,
            ));
            Some(profile.clone())
        }
        (None, Some(Ok(profile))) => {
            conditions_out.push(condition(
                conditions::INSTANCE_PROFILE_READY,
                true,
                "",
                String::new(),
                generation,
            ));
            Some(profile.clone())
        }
        (None, Some(Err(err))) => {
            conditions_out.push(condition(
                conditions::INSTANCE_PROFILE_READY,
                false,
                INSTANCE_PROFILE_CREATION_FAILED,
                format!(
                    "creating the instance profile for role {:?}: {err}",
                    spec.role.as_deref().unwrap_or_default()
                ),
                generation,
            ));
            previous.instance_profile.clone()
        }
        (None, None) => {
            conditions_out.push(condition(
                conditions::INSTANCE_PROFILE_READY,
                false,
                INSTANCE_PROFILE_NOT_MANAGED,
                format!(
                    "the instance profile for role {:?} has not been created yet",
                    spec.role.as_deref().unwrap_or_default()
                ),
                generation,
            ));
            None
        }
    };
    if let (Some(selector), Some(resolved)) = (&spec.placement_group_selector, &resolution.placement_group) {
        let (ok, reason, message) = match resolved {
            Ok(Some(group)) if group.is_available() => (true, "", String::new()),
            Ok(Some(group)) => (
                false,
                PLACEMENT_GROUP_NOT_AVAILABLE,
                format!(
                    "placement group {} ({}) is {}, not available",
                    group.name, group.id, group.state
                ),
            ),
            Ok(None) => (
                false,
                reasons::PLACEMENT_GROUP_NOT_FOUND,
                format!(
                    "PlacementGroupSelector did not match any PlacementGroups: {}",
                    selector_json(selector)
                ),
            ),
            Err(err) => (
                false,
                reasons::PLACEMENT_GROUP_RESOLUTION_FAILED,
                format!("resolving placement group {}: {err}", selector_json(selector)),
            ),
        };
        conditions_out.push(condition(
            conditions::PLACEMENT_GROUP_READY,
            ok,
            reason,
            message,
            generation,
        ));
    }
    conditions_out.push(validation_condition(
        node_class,
        resolution.dry_run.as_ref(),
        &previous,
        generation,
    ));

    conditions_out.push(ready_over(&conditions_out, generation));
    // A condition keeps its transition time while its status stays.
    keep_transition_times(&mut conditions_out, &previous.conditions, now);
    EC2NodeClassStatus {
        subnets,
        security_groups,
        capacity_reservations,
        amis,
        instance_profile,
        conditions: conditions_out,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use karpenter_api::ec2nodeclass::{
        AmiSelectorTerm, EC2NodeClassSpec, SecurityGroupSelectorTerm, SubnetSelectorTerm,
    };

    use super::*;

    fn node_class() -> EC2NodeClass {
        let mut class = EC2NodeClass::new(
            "default",
            EC2NodeClassSpec {
                ami_selector_terms: vec![AmiSelectorTerm {
                    alias: Some("al2023@latest".into()),
                    ..Default::default()
                }],
                subnet_selector_terms: vec![SubnetSelectorTerm {
                    tags: Some(BTreeMap::from([(
                        "karpenter.sh/discovery".into(),
                        "nobody".into(),
                    )])),
                    id: None,
                }],
                security_group_selector_terms: vec![SecurityGroupSelectorTerm {
                    id: Some("sg-1".into()),
                    ..Default::default()
                }],
                instance_profile: Some("nodes".into()),
                ..Default::default()
            },
        );
        class.metadata.generation = Some(3);
        class
    }

    fn ok_resolution(subnets: Vec<Subnet>) -> Resolution {
        Resolution {
            amis: Ok(vec![Ami {
                id: "ami-1".into(),
                ..Default::default()
            }]),
            subnets: Ok(subnets),
            subnet_addresses: None,
            security_groups: Ok(vec![SecurityGroup {
                id: "sg-1".into(),
                name: None,
            }]),
            capacity_reservations: None,
            instance_profile: None,
            placement_group: None,
            dry_run: None,
        }
    }

    fn find<'a>(status: &'a EC2NodeClassStatus, type_: &str) -> &'a Condition {
        status.conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn a_selector_that_matches_nothing_is_named_and_blocks_ready() {
        let t0: Timestamp = "2026-12-02T12:00:00Z".parse().unwrap();
        let status = compute_status(&node_class(), &ok_resolution(Vec::new()), t0);
        let subnets = find(&status, conditions::SUBNETS_READY);
        assert_eq!(subnets.status, ConditionStatus::False);
        assert_eq!(subnets.reason, "SubnetsNotFound");
        assert_eq!(
            subnets.message,
            r#"SubnetSelector did not match any Subnets: [{"tags":{"karpenter.sh/discovery":"nobody"}}]"#
        );
        assert_eq!(subnets.observed_generation, Some(3));
        let ready = find(&status, conditions::READY);
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason, UNHEALTHY_DEPENDENTS);
        assert_eq!(ready.message, "SubnetsReady=False (SubnetsNotFound)");
        assert_eq!(find(&status, conditions::AMIS_READY).reason, "AMIsReady");
        assert_eq!(status.instance_profile.as_deref(), Some("nodes"));
    }

    #[test]
    fn transition_times_stay_while_the_status_does_and_failed_lookups_keep_the_old_values() {
        let t0: Timestamp = "2026-12-02T12:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-12-02T12:05:00Z".parse().unwrap();
        let subnet = Subnet {
            id: "subnet-1".into(),
            zone: "us-west-2a".into(),
            zone_id: None,
        };
        let mut class = node_class();
        class.status = Some(compute_status(&class, &ok_resolution(vec![subnet.clone()]), t0));
        assert!(
            class
                .status
                .as_ref()
                .unwrap()
                .conditions
                .iter()
                .all(|c| c.status == ConditionStatus::True)
        );
        let mut later = ok_resolution(Vec::new());
        later.subnets = Err(AwsError::from_code(
            "DescribeSubnets",
            "RequestLimitExceeded".into(),
            "slow down".into(),
        ));
        assert_eq!(later.error().map(AwsError::category), Some("Throttled"));
        let status = compute_status(&class, &later, t1);
        assert_eq!(status.subnets, [subnet], "kept");
        let subnets = find(&status, conditions::SUBNETS_READY);
        assert_eq!(
            (subnets.status, subnets.reason.as_str()),
            (ConditionStatus::False, RESOLUTION_FAILED)
        );
        assert_eq!(subnets.last_transition_time, Time(t1));
        assert_eq!(
            find(&status, conditions::AMIS_READY).last_transition_time,
            Time(t0)
        );
    }

    #[test]
    fn role_based_classes_use_the_created_instance_profile() {
        let mut class = node_class();
        class.spec.instance_profile = None;
        class.spec.role = Some("KarpenterNodeRole".into());
        let status = compute_status(&class, &ok_resolution(Vec::new()), Timestamp::UNIX_EPOCH);
        let profile = find(&status, conditions::INSTANCE_PROFILE_READY);
        assert_eq!(profile.reason, INSTANCE_PROFILE_NOT_MANAGED);
        assert_eq!(status.instance_profile, None);

        let mut created = ok_resolution(Vec::new());
        created.instance_profile = Some(Ok("prod_123".into()));
        let status = compute_status(&class, &created, Timestamp::UNIX_EPOCH);
        let profile = find(&status, conditions::INSTANCE_PROFILE_READY);
        assert_eq!(profile.status, ConditionStatus::True);
        assert_eq!(status.instance_profile.as_deref(), Some("prod_123"));

        class.status = Some(status);
        let mut failed = ok_resolution(Vec::new());
        failed.instance_profile = Some(Err(AwsError::from_code(
            "AddRoleToInstanceProfile",
            "NoSuchEntity".into(),
            "no role KarpenterNodeRole".into(),
        )));
        let status = compute_status(&class, &failed, Timestamp::UNIX_EPOCH);
        let profile = find(&status, conditions::INSTANCE_PROFILE_READY);
        assert_eq!(
            (profile.status, profile.reason.as_str()),
            (ConditionStatus::False, INSTANCE_PROFILE_CREATION_FAILED)
        );
        assert!(
            profile.message.contains("KarpenterNodeRole"),
            "{}",
            profile.message
        );
        assert_eq!(status.instance_profile.as_deref(), Some("prod_123"), "kept");
    }

    #[test]
    fn capacity_reservations_are_listed_and_a_term_that_selects_nothing_is_named() {
        use crate::capacity_reservations::DiscoveredReservation;
        use karpenter_api::ec2nodeclass::{CapacityReservation, CapacityReservationSelectorTerm};

        let subnets = vec![Subnet {
            id: "subnet-1".into(),
            zone: "us-west-2a".into(),
            zone_id: None,
        }];
        let class = node_class();
        let gate_off = compute_status(&class, &ok_resolution(subnets.clone()), Timestamp::UNIX_EPOCH);
        assert!(
            gate_off
                .conditions
                .iter()
                .all(|c| c.type_ != conditions::CAPACITY_RESERVATIONS_READY),
            "no condition without the ReservedCapacity gate"
        );

        let reservation = CapacityReservation {
            availability_zone: "us-west-2a".into(),
            id: "cr-1".into(),
            instance_type: "m5.large".into(),
            owner_id: "123456789012".into(),
            ..Default::default()
        };
        let mut found = ok_resolution(subnets.clone());
        found.capacity_reservations = Some(Ok(ReservationDiscovery {
            reservations: vec![DiscoveredReservation {
                status: reservation.clone(),
                available_instance_count: 2,
                tags: BTreeMap::new(),
            }],
            unmatched_terms: Vec::new(),
            asked_at: std::time::Instant::now(),
        }));
        let mut class = class;
        class.status = Some(compute_status(&class, &found, Timestamp::UNIX_EPOCH));
        let status = class.status.as_ref().unwrap();
        assert_eq!(status.capacity_reservations, std::slice::from_ref(&reservation));
        let ready = find(status, conditions::CAPACITY_RESERVATIONS_READY);
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            (ConditionStatus::True, "CapacityReservationsReady")
        );

        let mut partly = ok_resolution(subnets.clone());
        partly.capacity_reservations = Some(Ok(ReservationDiscovery {
            reservations: Vec::new(),
            unmatched_terms: vec![CapacityReservationSelectorTerm {
                tags: Some(BTreeMap::from([("team".into(), "nobody".into())])),
                ..Default::default()
            }],
            asked_at: std::time::Instant::now(),
        }));
        let status = compute_status(&class, &partly, Timestamp::UNIX_EPOCH);
        let ready = find(&status, conditions::CAPACITY_RESERVATIONS_READY);
        assert_eq!(
            (ready.status, ready.reason.as_str(), ready.message.as_str()),
            (
                ConditionStatus::False,
                CAPACITY_RESERVATIONS_NOT_FOUND,
                r#"CapacityReservationSelector did not match any CapacityReservations: [{"tags":{"team":"nobody"}}]"#
            )
        );
        assert_eq!(
            find(&status, conditions::READY).message,
            "CapacityReservationsReady=False (CapacityReservationsNotFound)"
        );

        // A failed DescribeCapacityReservations keeps the reservations and leaves the other conditions alone.
        let mut failed = ok_resolution(subnets.clone());
        failed.capacity_reservations = Some(Err(AwsError::from_code(
            "DescribeCapacityReservations",
            "UnauthorizedOperation".into(),
            "not allowed".into(),
        )));
        assert_eq!(failed.error().map(AwsError::category), Some("ApiError"));
        let status = compute_status(&class, &failed, Timestamp::UNIX_EPOCH);
        assert_eq!(status.capacity_reservations, [reservation], "kept");
        let ready = find(&status, conditions::CAPACITY_RESERVATIONS_READY);
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            (ConditionStatus::False, RESOLUTION_FAILED)
        );
        assert!(
            ready.message.contains("UnauthorizedOperation"),
            "{}",
            ready.message
        );
        assert_eq!(
            find(&status, conditions::SECURITY_GROUPS_READY).status,
            ConditionStatus::True
        );
    }

    #[test]
    fn a_selected_placement_group_must_exist_and_be_available() {
        use crate::placement_groups::{PlacementGroup, PlacementStrategy};
        use karpenter_api::ec2nodeclass::PlacementGroupSelector;

        let subnets = vec![Subnet {
            id: "subnet-1".into(),
            zone: "us-west-2a".into(),
            zone_id: None,
        }];
        let mut class = node_class();
        let without = compute_status(&class, &ok_resolution(subnets.clone()), Timestamp::UNIX_EPOCH);
        assert!(
            without
                .conditions
                .iter()
                .all(|c| c.type_ != conditions::PLACEMENT_GROUP_READY),
            "no condition without a selector"
        );

        class.spec.placement_group_selector = Some(PlacementGroupSelector {
            name: Some("training".into()),
            id: None,
        });
        let mut group = PlacementGroup {
            id: "pg-0abc".into(),
            name: "training".into(),
            strategy: Some(PlacementStrategy::Cluster),
            partition_count: None,
            state: "available".into(),
        };
        let mut found = ok_resolution(subnets.clone());
        found.placement_group = Some(Ok(Some(group.clone())));
        let status = compute_status(&class, &found, Timestamp::UNIX_EPOCH);
        let ready = find(&status, conditions::PLACEMENT_GROUP_READY);
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            (ConditionStatus::True, "PlacementGroupReady")
        );
        assert_eq!(find(&status, conditions::READY).status, ConditionStatus::True);

        let mut missing = ok_resolution(subnets.clone());
        missing.placement_group = Some(Ok(None));
        let status = compute_status(&class, &missing, Timestamp::UNIX_EPOCH);
        let ready = find(&status, conditions::PLACEMENT_GROUP_READY);
        assert_eq!(
            (ready.status, ready.reason.as_str(), ready.message.as_str()),
            (
                ConditionStatus::False,
                "PlacementGroupNotFound",
                r#"PlacementGroupSelector did not match any PlacementGroups: {"name":"training"}"#
            )
        );
        assert_eq!(
            find(&status, conditions::READY).message,
            "PlacementGroupReady=False (PlacementGroupNotFound)"
        );

        group.state = "pending".into();
        let mut pending = ok_resolution(subnets.clone());
        pending.placement_group = Some(Ok(Some(group)));
        let status = compute_status(&class, &pending, Timestamp::UNIX_EPOCH);
        let ready = find(&status, conditions::PLACEMENT_GROUP_READY);
        assert_eq!(
            (ready.status, ready.reason.as_str(), ready.message.as_str()),
            (
                ConditionStatus::False,
                PLACEMENT_GROUP_NOT_AVAILABLE,
                "placement group training (pg-0abc) is pending, not available"
            )
        );

        let mut failed = ok_resolution(subnets);
        failed.placement_group = Some(Err(AwsError::from_code(
            "DescribePlacementGroups",
            "UnauthorizedOperation".into(),
            "not allowed".into(),
        )));
        assert_eq!(
            failed.error().map(AwsError::code),
            Some(Some("UnauthorizedOperation"))
        );
        let status = compute_status(&class, &failed, Timestamp::UNIX_EPOCH);
        let ready = find(&status, conditions::PLACEMENT_GROUP_READY);
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            (ConditionStatus::False, "PlacementGroupResolutionFailed")
        );
        assert_eq!(
            ready.message,
            r#"resolving placement group {"name":"training"}: DescribePlacementGroups: UnauthorizedOperation: not allowed"#
        );
    }
}
