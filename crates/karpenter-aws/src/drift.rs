//! AWS drift: whether the instance behind a NodeClaim differs from what its EC2NodeClass launches today. Pure:
//! the CloudProvider answers from its caches of EC2NodeClasses and instances. Checked in upstream's order, the
//! first that fires giving the reason:
//! 1. `NodeClassDrift`: the claim's `karpenter.k8s.aws/ec2nodeclass-hash` differs from the class's hash,
//!    judged only when the claim was hashed by the current [`EC2NODECLASS_HASH_VERSION`] (an older version is
//!    re-hashed, not drifted);
//! 2. `AMIDrift`: the claim's image is not among the class's resolved AMIs;
//! 3. `SubnetDrift`: the instance's subnet is not among the class's subnets;
//! 4. `SecurityGroupDrift`: the instance's security groups are not exactly the class's;
//! 5. `CapacityReservationDrift` (only with the ReservedCapacity feature gate on): the claim was launched into
//!    a capacity reservation (capacity type `reserved`) that the class's `status.capacityReservations` no
//!    longer lists (its selector terms changed, or the reservation ended or was deleted), so the node is
//!    replaced with capacity the class does select;
//! 6. `PlacementGroupDrift`: the claim was launched into a placement group (its
//!    `karpenter.k8s.aws/placement-group-id` label, else the instance's group) that the class no longer
//!    selects: it selects no group, or its selector resolved to another group or to none.
//!
//! A check whose inputs are unknown (no status yet, an instance not seen yet) does not fire.

use std::collections::BTreeSet;

use karpenter_api::ec2nodeclass::{EC2NODECLASS_HASH_VERSION, EC2NodeClass};
use karpenter_api::labels::{
    AWS_CAPACITY_RESERVATION_ID_LABEL, AWS_EC2NODECLASS_HASH_ANNOTATION,
    AWS_EC2NODECLASS_HASH_VERSION_ANNOTATION, CAPACITY_TYPE_LABEL, CAPACITY_TYPE_RESERVED,
};
use karpenter_api::nodeclaim::NodeClaim;

use crate::instance::Ec2Instance;
use crate::placement_groups::{PLACEMENT_GROUP_ID_LABEL, PlacementGroupResolution};

pub const NODE_CLASS_DRIFT: &str = "NodeClassDrift";
pub const AMI_DRIFT: &str = "AMIDrift";
pub const SUBNET_DRIFT: &str = "SubnetDrift";
pub const SECURITY_GROUP_DRIFT: &str = "SecurityGroupDrift";
pub const CAPACITY_RESERVATION_DRIFT: &str = "CapacityReservationDrift";
pub const PLACEMENT_GROUP_DRIFT: &str = "PlacementGroupDrift";

/// The drift reason of `claim` against `node_class` and its `instance`, if any. `reserved_capacity` is the
/// ReservedCapacity feature gate: without it reservations are not resolved, so none can have gone away.
/// `placement_group` is what the class's placement group selector last resolved to (None: not yet known).
pub fn drift_reason(
    claim: &NodeClaim,
    node_class: &EC2NodeClass,
    instance: Option<&Ec2Instance>,
    reserved_capacity: bool,
    placement_group: Option<&PlacementGroupResolution>,
) -> Option<&'static str> {
    let annotations = claim.metadata.annotations.as_ref();
    let annotation = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
    if annotation(AWS_EC2NODECLASS_HASH_VERSION_ANNOTATION) == Some(EC2NODECLASS_HASH_VERSION)
        && let Some(hash) = annotation(AWS_EC2NODECLASS_HASH_ANNOTATION)
        && hash != node_class.hash()
    {
        return Some(NODE_CLASS_DRIFT);
    }
    let status = node_class.status.as_ref()?;
    let image = claim.status.as_ref().and_then(|s| s.image_id.as_deref());
    if let Some(image) = image
        && !status.amis.is_empty()
        && !status.amis.iter().any(|a| a.id == image)
    {
        return Some(AMI_DRIFT);
    }
    if let Some(instance) = instance {
        if let Some(subnet) = &instance.subnet_id
            && !status.subnets.is_empty()
            && !status.subnets.iter().any(|s| &s.id == subnet)
        {
            return Some(SUBNET_DRIFT);
        }
        let running: BTreeSet<&str> = instance.security_group_ids.iter().map(String::as_str).collect();
        let wanted: BTreeSet<&str> = status.security_groups.iter().map(|g| g.id.as_str()).collect();
        if !running.is_empty() && !wanted.is_empty() && running != wanted {
            return Some(SECURITY_GROUP_DRIFT);
        }
    }
    if reserved_capacity
        && let Some(reservation) = launched_reservation(claim, instance)
        && !status.capacity_reservations.iter().any(|r| r.id == reservation)
    {
        return Some(CAPACITY_RESERVATION_DRIFT);
    }
    if placement_group_drifted(claim, node_class, instance, placement_group) {
        return Some(PLACEMENT_GROUP_DRIFT);
    }
    None
}

/// Whether the placement group `claim` was launched into is no longer the one its class selects. A selector
/// naming the group (by id, or by the name the instance reports) keeps it; otherwise the selector's
/// resolution decides, and without one (not resolved yet) nothing is judged.
fn placement_group_drifted(
    claim: &NodeClaim,
    node_class: &EC2NodeClass,
    instance: Option<&Ec2Instance>,
    resolution: Option<&PlacementGroupResolution>,
) -> bool {
    let instance_group = instance.and_then(|i| i.placement_group.as_ref());
    let launched_id = claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(PLACEMENT_GROUP_ID_LABEL))
        .map(String::as_str)
        .or_else(|| instance_group.and_then(|g| g.id.as_deref()));
    let launched_name = instance_group.and_then(|g| g.name.as_deref());
    if launched_id.is_none() && launched_name.is_none() {
        return false;
    }
    let Some(selector) = &node_class.spec.placement_group_selector else {
        return true;
    };
    let named = |selected: Option<&str>, launched: Option<&str>| selected.is_some() && selected == launched;
    if named(selector.id.as_deref(), launched_id) || named(selector.name.as_deref(), launched_name) {
        return false;
    }
    match resolution.filter(|r| r.selector == *selector) {
        None => false,
        Some(resolved) => resolved.group.as_ref().is_none_or(|group| {
            !named(Some(group.id.as_str()), launched_id) && !named(Some(group.name.as_str()), launched_name)
        }),
    }
}

/// The capacity reservation a reserved claim runs in: its `karpenter.k8s.aws/capacity-reservation-id` label,
/// else the instance's own (a claim made before the label was set). A claim whose capacity type is not
/// `reserved` has none, even if its instance was launched with a reservation preference.
fn launched_reservation<'a>(claim: &'a NodeClaim, instance: Option<&'a Ec2Instance>) -> Option<&'a str> {
    let labels = claim.metadata.labels.as_ref()?;
    if labels.get(CAPACITY_TYPE_LABEL).map(String::as_str) != Some(CAPACITY_TYPE_RESERVED) {
        return None;
    }
    labels
        .get(AWS_CAPACITY_RESERVATION_ID_LABEL)
        .map(String::as_str)
        .or_else(|| instance.and_then(|i| i.capacity_reservation_id.as_deref()))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use karpenter_api::ec2nodeclass::{
        Ami, CapacityReservation, EC2NodeClassSpec, EC2NodeClassStatus, SecurityGroup, Subnet,
    };
    use serde_json::json;

    use super::*;

    fn node_class() -> EC2NodeClass {
        let mut class = EC2NodeClass::new(
            "default",
            EC2NodeClassSpec {
                instance_profile: Some("nodes".into()),
                ..Default::default()
            },
        );
        class.status = Some(EC2NodeClassStatus {
            amis: vec![Ami {
                id: "ami-new".into(),
                ..Default::default()
            }],
            subnets: vec![Subnet {
                id: "subnet-a".into(),
                zone: "us-west-2a".into(),
                zone_id: None,
            }],
            security_groups: vec![SecurityGroup {
                id: "sg-1".into(),
                name: None,
            }],
            ..Default::default()
        });
        class
    }

    fn claim(image: &str, hash: Option<(&str, &str)>) -> NodeClaim {
        let mut claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c"},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
            "status": {"imageID": image, "providerID": "aws:///us-west-2a/i-1"}
        }))
        .unwrap();
        if let Some((hash, version)) = hash {
            claim.metadata.annotations = Some(BTreeMap::from([
                (AWS_EC2NODECLASS_HASH_ANNOTATION.to_string(), hash.to_string()),
                (
                    AWS_EC2NODECLASS_HASH_VERSION_ANNOTATION.to_string(),
                    version.to_string(),
                ),
            ]));
        }
        claim
    }

    fn instance(subnet: &str, groups: &[&str]) -> Ec2Instance {
        Ec2Instance {
            id: "i-1".into(),
            instance_type: "m5.large".into(),
            zone: "us-west-2a".into(),
            capacity_type: "spot".into(),
            capacity_reservation_id: None,
            state: "running".into(),
            image_id: Some("ami-new".into()),
            launch_time: None,
            private_dns_name: None,
            subnet_id: Some(subnet.into()),
            security_group_ids: groups.iter().map(|g| g.to_string()).collect(),
            placement_group: None,
            tags: BTreeMap::new(),
        }
    }

    #[test]
    fn each_reason_in_order() {
        let class = node_class();
        let current = class.hash();
        let same = claim("ami-new", Some((&current, EC2NODECLASS_HASH_VERSION)));
        let ok = instance("subnet-a", &["sg-1"]);
        assert_eq!(drift_reason(&same, &class, Some(&ok), true, None), None);
        assert_eq!(
            drift_reason(&same, &class, None, true, None),
            None,
            "an unknown instance does not drift"
        );
        let rehashed = claim("ami-new", Some(("1", EC2NODECLASS_HASH_VERSION)));
        assert_eq!(
            drift_reason(&rehashed, &class, Some(&ok), true, None),
            Some(NODE_CLASS_DRIFT)
        );
        let old_version = claim("ami-new", Some(("1", "v5")));
        assert_eq!(drift_reason(&old_version, &class, Some(&ok), true, None), None);
        let old_image = claim("ami-old", Some(("1", EC2NODECLASS_HASH_VERSION)));
        assert_eq!(
            drift_reason(&old_image, &class, Some(&ok), true, None),
            Some(NODE_CLASS_DRIFT),
            "the static hash first"
        );
        assert_eq!(
            drift_reason(&claim("ami-old", None), &class, Some(&ok), true, None),
            Some(AMI_DRIFT)
        );
        let moved = instance("subnet-b", &["sg-1"]);
        assert_eq!(
            drift_reason(&same, &class, Some(&moved), true, None),
            Some(SUBNET_DRIFT)
        );
        let extra = instance("subnet-a", &["sg-1", "sg-2"]);
        assert_eq!(
            drift_reason(&same, &class, Some(&extra), true, None),
            Some(SECURITY_GROUP_DRIFT)
        );
    }

    fn class_with_reservations(ids: &[&str]) -> EC2NodeClass {
        let mut class = node_class();
        class.status.as_mut().unwrap().capacity_reservations = ids
            .iter()
            .map(|id| CapacityReservation {
                id: id.to_string(),
                availability_zone: "us-west-2a".into(),
                instance_type: "m5.large".into(),
                owner_id: "123456789012".into(),
                ..Default::default()
            })
            .collect();
        class
    }

    fn claim_in(capacity_type: &str, reservation: Option<&str>) -> NodeClaim {
        let mut claim = claim("ami-new", None);
        let mut labels = BTreeMap::from([(CAPACITY_TYPE_LABEL.to_string(), capacity_type.to_string())]);
        if let Some(id) = reservation {
            labels.insert(AWS_CAPACITY_RESERVATION_ID_LABEL.to_string(), id.to_string());
        }
        claim.metadata.labels = Some(labels);
        claim
    }

    #[test]
    fn a_reserved_claim_drifts_once_its_reservation_leaves_the_class_status() {
        let reserved = claim_in(CAPACITY_TYPE_RESERVED, Some("cr-1"));
        let ok = instance("subnet-a", &["sg-1"]);
        assert_eq!(
            drift_reason(
                &reserved,
                &class_with_reservations(&["cr-2"]),
                Some(&ok),
                true,
                None
            ),
            Some(CAPACITY_RESERVATION_DRIFT)
        );
        assert_eq!(
            drift_reason(&reserved, &class_with_reservations(&[]), None, true, None),
            Some(CAPACITY_RESERVATION_DRIFT),
            "the label is enough; the instance need not be known"
        );
        assert_eq!(
            drift_reason(
                &reserved,
                &class_with_reservations(&["cr-2"]),
                Some(&ok),
                false,
                None
            ),
            None,
            "without the ReservedCapacity gate reservations are not judged"
        );
    }

    #[test]
    fn a_reserved_claim_whose_reservation_is_still_listed_is_not_drifted() {
        let reserved = claim_in(CAPACITY_TYPE_RESERVED, Some("cr-1"));
        let ok = instance("subnet-a", &["sg-1"]);
        let class = class_with_reservations(&["cr-2", "cr-1"]);
        assert_eq!(drift_reason(&reserved, &class, Some(&ok), true, None), None);
    }

    #[test]
    fn a_claim_not_on_reserved_capacity_never_drifts_for_reservations() {
        let mut in_reservation = instance("subnet-a", &["sg-1"]);
        in_reservation.capacity_reservation_id = Some("cr-1".into());
        let class = class_with_reservations(&[]);
        for capacity_type in ["on-demand", "spot"] {
            let claim = claim_in(capacity_type, None);
            assert_eq!(
                drift_reason(&claim, &class, Some(&in_reservation), true, None),
                None
            );
        }
        // A reserved claim without the label falls back to the instance's reservation.
        let unlabelled = claim_in(CAPACITY_TYPE_RESERVED, None);
        assert_eq!(
            drift_reason(&unlabelled, &class, Some(&in_reservation), true, None),
            Some(CAPACITY_RESERVATION_DRIFT)
        );
    }

    fn placement_group(id: &str, name: &str) -> crate::placement_groups::PlacementGroup {
        crate::placement_groups::PlacementGroup {
            id: id.into(),
            name: name.into(),
            strategy: Some(crate::placement_groups::PlacementStrategy::Partition),
            partition_count: Some(2),
            state: "available".into(),
        }
    }

    fn selecting(name: Option<&str>) -> EC2NodeClass {
        let mut class = node_class();
        class.spec.placement_group_selector =
            name.map(|n| karpenter_api::ec2nodeclass::PlacementGroupSelector {
                name: Some(n.into()),
                id: None,
            });
        class
    }

    fn resolved(
        class: &EC2NodeClass,
        group: Option<crate::placement_groups::PlacementGroup>,
    ) -> PlacementGroupResolution {
        PlacementGroupResolution {
            selector: class.spec.placement_group_selector.clone().unwrap(),
            group,
        }
    }

    #[test]
    fn a_claim_drifts_once_its_class_no_longer_selects_its_placement_group() {
        let mut in_group = claim("ami-new", None);
        in_group.metadata.labels = Some(BTreeMap::from([(
            PLACEMENT_GROUP_ID_LABEL.to_string(),
            "pg-1".to_string(),
        )]));
        let ok = instance("subnet-a", &["sg-1"]);

        let same = selecting(Some("training"));
        let still = resolved(&same, Some(placement_group("pg-1", "training")));
        assert_eq!(
            drift_reason(&in_group, &same, Some(&ok), true, Some(&still)),
            None
        );
        assert_eq!(
            drift_reason(&in_group, &same, Some(&ok), true, None),
            None,
            "an unresolved selector judges nothing"
        );

        let other = selecting(Some("inference"));
        let moved = resolved(&other, Some(placement_group("pg-2", "inference")));
        assert_eq!(
            drift_reason(&in_group, &other, Some(&ok), true, Some(&moved)),
            Some(PLACEMENT_GROUP_DRIFT)
        );
        let missing = resolved(&other, None);
        assert_eq!(
            drift_reason(&in_group, &other, Some(&ok), true, Some(&missing)),
            Some(PLACEMENT_GROUP_DRIFT),
            "the class selects a group that does not exist"
        );
        assert_eq!(
            drift_reason(&in_group, &other, Some(&ok), true, Some(&still)),
            None,
            "a resolution of another selector is not used"
        );
        assert_eq!(
            drift_reason(&in_group, &selecting(None), None, true, None),
            Some(PLACEMENT_GROUP_DRIFT),
            "the class selects no group any more"
        );
    }

    #[test]
    fn placement_groups_judge_only_claims_launched_into_one() {
        let outside = claim("ami-new", None);
        let ok = instance("subnet-a", &["sg-1"]);
        let class = selecting(Some("training"));
        let group = resolved(&class, Some(placement_group("pg-1", "training")));
        assert_eq!(
            drift_reason(&outside, &class, Some(&ok), true, Some(&group)),
            None
        );
        assert_eq!(
            drift_reason(&outside, &selecting(None), Some(&ok), true, None),
            None
        );

        // Without the label, the instance's group counts; a selector naming it keeps it.
        let mut in_group = instance("subnet-a", &["sg-1"]);
        in_group.placement_group = Some(crate::instance::InstancePlacementGroup {
            id: None,
            name: Some("training".into()),
            partition: Some(1),
        });
        assert_eq!(drift_reason(&outside, &class, Some(&in_group), true, None), None);
        assert_eq!(
            drift_reason(&outside, &selecting(None), Some(&in_group), true, None),
            Some(PLACEMENT_GROUP_DRIFT)
        );
    }
}
