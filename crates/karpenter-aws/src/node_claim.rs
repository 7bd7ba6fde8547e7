//! An EC2 instance as a NodeClaim, for `CloudProvider::get` and `list` (garbage collection compares them with
//! the cluster's NodeClaims). Follows upstream's `instanceToNodeClaim`: labels from the instance type's
//! single-valued requirements, then zone, capacity type (`reserved` in a capacity reservation, with the
//! reservation's id label), the placement group's id and partition labels when EC2 reports them, and the
//! NodePool from the instance's tag; capacity and
//! allocatable from the instance type (zero amounts left out); the launch time as creation time; a deletion
//! timestamp when the instance is shutting down; provider ID and image. Garbage collection reads only an
//! instance's summary ([`instance_summary`]): provider ID, NodeClaim tag, launch time.

use std::{collections::BTreeMap, sync::Arc};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::common::{NodeClassReference, ResourceList};
use karpenter_api::labels::{
    AWS_CAPACITY_RESERVATION_ID_LABEL, AWS_EC2NODECLASS_LABEL, AWS_TAG_NODECLAIM, CAPACITY_TYPE_LABEL,
    NODEPOOL_LABEL,
};
use karpenter_api::nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
use karpenter_api::quantity::format_milli;
use karpenter_core::catalog::{CatalogInstanceType, Quantities, RequirementOperator};
use karpenter_core::cloudprovider::InstanceSummary;

use crate::instance::Ec2Instance;
use crate::placement_groups::{PLACEMENT_GROUP_ID_LABEL, PLACEMENT_GROUP_PARTITION_LABEL};

const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// Milli-unit quantities as a Kubernetes resource list, zeros left out.
pub(crate) fn resource_list(quantities: &Quantities) -> ResourceList {
    quantities
        .iter()
        .filter(|(_, milli)| **milli != 0)
        .map(|(resource, milli)| (resource.clone(), Quantity(format_milli(resource, *milli))))
        .collect()
}

/// The NodeClaim an instance stands for; `instance_type` is its catalog entry when still known, `now` the
/// deletion time given to an instance that is shutting down. Named after its karpenter.sh/nodeclaim tag (empty
/// before the tagging).
pub fn instance_to_node_claim(
    instance: &Ec2Instance,
    instance_type: Option<&CatalogInstanceType>,
    now: Timestamp,
) -> NodeClaim {
    let mut labels = BTreeMap::new();
    if let Some(t) = instance_type {
        for requirement in t.requirements.iter() {
            if requirement.operator == RequirementOperator::In
                && let [value] = requirement.values.as_slice()
            {
                labels.insert(requirement.key.clone(), value.clone());
            }
        }
    }
    labels.insert(LABEL_ZONE.to_string(), instance.zone.clone());
    labels.insert(CAPACITY_TYPE_LABEL.to_string(), instance.capacity_type.clone());
    if let Some(reservation) = &instance.capacity_reservation_id {
        labels.insert(AWS_CAPACITY_RESERVATION_ID_LABEL.to_string(), reservation.clone());
    }
    if let Some(group) = &instance.placement_group {
        if let Some(id) = &group.id {
            labels.insert(PLACEMENT_GROUP_ID_LABEL.to_string(), id.clone());
        }
        if let Some(partition) = group.partition {
            labels.insert(PLACEMENT_GROUP_PARTITION_LABEL.to_string(), partition.to_string());
        }
    }
    if let Some(node_pool) = instance.tags.get(NODEPOOL_LABEL) {
        labels.insert(NODEPOOL_LABEL.to_string(), node_pool.clone());
    }

    let name = instance.tags.get(AWS_TAG_NODECLAIM).cloned().unwrap_or_default();
    let mut claim = NodeClaim::new(
        &name,
        NodeClaimSpec {
            node_class_ref: NodeClassReference {
                group: "karpenter.k8s.aws".into(),
                kind: "EC2NodeClass".into(),
                name: instance
                    .tags
                    .get(AWS_EC2NODECLASS_LABEL)
                    .cloned()
                    .unwrap_or_default(),
            },
            ..NodeClaimSpec::default()
        },
    );
    claim.metadata.labels = Some(labels);
    claim.metadata.creation_timestamp = instance.launch_time.map(Time);
    if instance.state == "shutting-down" {
        claim.metadata.deletion_timestamp = Some(Time(now));
    }
    claim.status = Some(NodeClaimStatus {
        provider_id: Some(instance.provider_id()),
        image_id: instance.image_id.clone(),
        capacity: instance_type.map(|t| Arc::new(resource_list(&t.capacity))),
        allocatable: instance_type.map(|t| Arc::new(resource_list(&t.allocatable()))),
        ..Default::default()
    });
    claim
}

/// What garbage collection reads of an instance, without a NodeClaim's labels and resources.
pub fn instance_summary(instance: &Ec2Instance) -> InstanceSummary {
    InstanceSummary {
        provider_id: instance.provider_id(),
        node_claim: instance
            .tags
            .get(AWS_TAG_NODECLAIM)
            .filter(|n| !n.is_empty())
            .cloned(),
        launched_at: instance.launch_time,
    }
}

#[cfg(test)]
mod tests {
    use karpenter_aws_catalog::{AwsCapacitySettings, aws_catalog};

    use super::*;

    fn instance(state: &str) -> Ec2Instance {
        Ec2Instance {
            id: "i-0123456789abcdef0".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: "spot".into(),
            capacity_reservation_id: None,
            state: state.into(),
            image_id: Some("ami-0abc".into()),
            launch_time: Some("2026-12-02T12:00:00Z".parse().unwrap()),
            private_dns_name: None,
            subnet_id: None,
            security_group_ids: Vec::new(),
            placement_group: None,
            tags: BTreeMap::from([
                ("karpenter.sh/nodepool".into(), "default".into()),
                ("karpenter.sh/nodeclaim".into(), "default-x7k2p".into()),
                ("karpenter.k8s.aws/ec2nodeclass".into(), "al2023".into()),
            ]),
        }
    }

    #[test]
    fn instances_become_node_claims() {
        let catalog = aws_catalog("us-east-1", &AwsCapacitySettings::default()).unwrap();
        let m5 = catalog.instance_type("m5.large").unwrap();
        let now: Timestamp = "2026-12-02T13:00:00Z".parse().unwrap();
        let claim = instance_to_node_claim(&instance("running"), Some(m5), now);
        assert_eq!(claim.metadata.name.as_deref(), Some("default-x7k2p"));
        let labels = claim.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["node.kubernetes.io/instance-type"], "m5.large");
        assert_eq!(labels["karpenter.k8s.aws/instance-cpu"], "2");
        assert_eq!(
            labels["topology.kubernetes.io/zone"], "us-east-1a",
            "the instance's zone, not the type's"
        );
        assert_eq!(labels["karpenter.sh/capacity-type"], "spot");
        assert_eq!(labels["karpenter.sh/nodepool"], "default");
        assert_eq!(claim.spec.node_class_ref.name, "al2023");
        assert_eq!(claim.metadata.deletion_timestamp, None);
        let status = claim.status.as_ref().unwrap();
        assert_eq!(
            status.provider_id.as_deref(),
            Some("aws:///us-east-1a/i-0123456789abcdef0")
        );
        assert_eq!(status.image_id.as_deref(), Some("ami-0abc"));
        let allocatable = status.allocatable.as_ref().unwrap();
        assert_eq!(allocatable["cpu"].0, "1930m");
        assert_eq!(allocatable["memory"].0, "6903Mi");
        assert_eq!(allocatable["pods"].0, "29");

        let terminating = instance_to_node_claim(&instance("shutting-down"), None, now);
        assert_eq!(terminating.metadata.deletion_timestamp, Some(Time(now)));
        assert_eq!(terminating.status.as_ref().unwrap().capacity, None);
        assert_eq!(terminating.metadata.labels.as_ref().unwrap().len(), 3);

        let mut reserved = instance("running");
        reserved.capacity_type = "reserved".into();
        reserved.capacity_reservation_id = Some("cr-0123".into());
        let claim = instance_to_node_claim(&reserved, Some(m5), now);
        let labels = claim.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["karpenter.sh/capacity-type"], "reserved");
        assert_eq!(labels["karpenter.k8s.aws/capacity-reservation-id"], "cr-0123");
        assert!(!labels.contains_key(PLACEMENT_GROUP_ID_LABEL));

        let mut partitioned = instance("running");
        partitioned.placement_group = Some(crate::instance::InstancePlacementGroup {
            id: Some("pg-0abc".into()),
            name: Some("training".into()),
            partition: Some(3),
        });
        let claim = instance_to_node_claim(&partitioned, Some(m5), now);
        let labels = claim.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[PLACEMENT_GROUP_ID_LABEL], "pg-0abc");
        assert_eq!(labels[PLACEMENT_GROUP_PARTITION_LABEL], "3");
    }

    #[test]
    fn an_instance_summary_agrees_with_its_node_claim() {
        let now: Timestamp = "2026-12-02T13:00:00Z".parse().unwrap();
        let running = instance("running");
        let claim = instance_to_node_claim(&running, None, now);
        assert_eq!(
            Some(instance_summary(&running)),
            InstanceSummary::of_claim(&claim)
        );
        let mut untagged = running;
        untagged.tags.remove(AWS_TAG_NODECLAIM);
        assert_eq!(instance_summary(&untagged).node_claim, None);
        assert_eq!(
            instance_summary(&untagged).provider_id,
            "aws:///us-east-1a/i-0123456789abcdef0"
        );
    }
}
