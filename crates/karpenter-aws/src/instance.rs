//! The EC2 instances behind NodeClaims: finding one by ID, listing a cluster's, and terminating one, the way
//! upstream's instance provider does (pkg/providers/instance). A terminated instance counts as gone
//! ([`AwsError::NotFound`]); one shutting down still exists but is not terminated again.
//!
//! Provider IDs have the form `aws:///<zone>/<instance-id>`, as the AWS cloud controller manager writes them.

use std::collections::{BTreeMap, HashMap};
use std::sync::{PoisonError, RwLock};

use aws_sdk_ec2::types::{Filter, InstanceLifecycleType, InstanceStateName};
use jiff::Timestamp;

use karpenter_api::labels::CAPACITY_TYPE_RESERVED;

use crate::error::AwsError;
use crate::instance_types::{CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT};

/// The tag every instance Karpenter launches carries (its NodePool); listing looks for it.
pub const NODEPOOL_TAG: &str = "karpenter.sh/nodepool";
/// The tag naming the cluster an instance belongs to.
pub const CLUSTER_NAME_TAG: &str = "eks:eks-cluster-name";

/// What Karpenter needs to know about an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ec2Instance {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    /// `spot`, `on-demand`, or `reserved` for an instance in a capacity reservation.
    pub capacity_type: String,
    /// The capacity reservation the instance runs in.
    pub capacity_reservation_id: Option<String>,
    /// pending, running, stopping, stopped or shutting-down.
    pub state: String,
    pub image_id: Option<String>,
    pub launch_time: Option<Timestamp>,
    pub private_dns_name: Option<String>,
    /// The subnet and security groups the instance runs in, for subnet and security-group drift.
    pub subnet_id: Option<String>,
    pub security_group_ids: Vec<String>,
    /// The placement group the instance runs in, for placement-group labels, drift and a cluster group's zone.
    pub placement_group: Option<InstancePlacementGroup>,
    pub tags: BTreeMap<String, String>,
}

/// Where in a placement group an instance runs: EC2 reports the group by name (and by id for newer
/// launches), and the partition in a partition group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InstancePlacementGroup {
    pub id: Option<String>,
    pub name: Option<String>,
    pub partition: Option<i32>,
}

impl InstancePlacementGroup {
    /// The instance's placement group from DescribeInstances' `Placement`; None outside any group.
    fn from_sdk(placement: &aws_sdk_ec2::types::Placement) -> Option<Self> {
        let non_empty = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(str::to_string);
        let group = Self {
            id: non_empty(placement.group_id()),
            name: non_empty(placement.group_name()),
            partition: placement.partition_number().filter(|p| *p > 0),
        };
        (group.id.is_some() || group.name.is_some()).then_some(group)
    }
}

impl Ec2Instance {
    /// `aws:///<zone>/<instance-id>`.
    pub fn provider_id(&self) -> String {
        format!("aws:///{}/{}", self.zone, self.id)
    }

    /// Whether the instance runs in the placement group with id `id` or name `name`.
    pub fn is_in_placement_group(&self, id: &str, name: &str) -> bool {
        self.placement_group.as_ref().is_some_and(|g| {
            g.id.as_deref().is_some_and(|i| i == id) || g.name.as_deref().is_some_and(|n| n == name)
        })
    }

    fn from_sdk(instance: &aws_sdk_ec2::types::Instance) -> Option<Self> {
        let state = instance.state().and_then(|s| s.name())?;
        if *state == InstanceStateName::Terminated {
            return None;
        }
        Some(Self {
            id: instance.instance_id()?.to_string(),
            instance_type: instance.instance_type()?.as_str().to_string(),
            zone: instance
                .placement()
                .and_then(|p| p.availability_zone())
                .unwrap_or_default()
                .to_string(),
            capacity_type: if instance.instance_lifecycle() == Some(&InstanceLifecycleType::Spot) {
                CAPACITY_TYPE_SPOT
            } else if instance.capacity_reservation_id().is_some() {
                CAPACITY_TYPE_RESERVED
            } else {
                CAPACITY_TYPE_ON_DEMAND
            }
            .to_string(),
            capacity_reservation_id: instance.capacity_reservation_id().map(str::to_string),
            state: state.as_str().to_string(),
            image_id: instance.image_id().map(str::to_string),
            launch_time: instance
                .launch_time()
                .and_then(|t| Timestamp::from_second(t.secs()).ok()),
            private_dns_name: instance
                .private_dns_name()
                .filter(|name| !name.is_empty())
                .map(str::to_string),
            subnet_id: instance.subnet_id().map(str::to_string),
            security_group_ids: instance
                .security_groups()
                .iter()
                .filter_map(|g| g.group_id().map(str::to_string))
                .collect(),
            placement_group: instance.placement().and_then(InstancePlacementGroup::from_sdk),
            tags: instance
                .tags()
                .iter()
                .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string())))
                .collect(),
        })
    }
}

/// The instance ID of a provider ID (`aws:///us-west-2a/i-0123...`, or a bare `i-...`).
pub fn parse_provider_id(provider_id: &str) -> Result<&str, AwsError> {
    let id = provider_id
        .strip_prefix("aws://")
        .map_or(provider_id, |rest| rest.rsplit('/').next().unwrap_or_default());
    if id.starts_with("i-") && id.len() > 2 {
        Ok(id)
    } else {
        Err(AwsError::InvalidProviderId(provider_id.to_string()))
    }
}

fn not_found(id: &str) -> AwsError {
    AwsError::NotFound {
        operation: "DescribeInstances",
        code: "InvalidInstanceID.NotFound".into(),
        message: format!("instance {id} does not exist or is terminated"),
    }
}

/// The instance `id`; NotFound when it does not exist or is terminated.
pub async fn get_instance(ec2: &aws_sdk_ec2::Client, id: &str) -> Result<Ec2Instance, AwsError> {
    let output = ec2
        .describe_instances()
        .instance_ids(id)
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("DescribeInstances", e))?;
    output
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .find_map(Ec2Instance::from_sdk)
        .ok_or_else(|| not_found(id))
}

/// Every instance of `cluster_name` Karpenter launched (tagged with a NodePool), not terminated.
pub async fn list_instances(
    ec2: &aws_sdk_ec2::Client,
    cluster_name: &str,
) -> Result<Vec<Ec2Instance>, AwsError> {
    let filters = vec![
        Filter::builder().name("tag-key").values(NODEPOOL_TAG).build(),
        Filter::builder()
            .name(format!("tag:{CLUSTER_NAME_TAG}"))
            .values(cluster_name)
            .build(),
        Filter::builder()
            .name("instance-state-name")
            .set_values(Some(
                ["pending", "running", "stopping", "stopped", "shutting-down"]
                    .map(String::from)
                    .to_vec(),
            ))
            .build(),
    ];
    let mut pages = ec2
        .describe_instances()
        .set_filters(Some(filters))
        .into_paginator()
        .send();
    let mut instances = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| AwsError::from_sdk("DescribeInstances", e))?;
        instances.extend(
            page.reservations()
                .iter()
                .flat_map(|r| r.instances())
                .filter_map(Ec2Instance::from_sdk),
        );
    }
    instances.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(instances)
}

/// Terminates `id` unless it is already shutting down; NotFound once it is terminated (the termination
/// controller retries until then).
pub async fn terminate_instance(ec2: &aws_sdk_ec2::Client, id: &str) -> Result<(), AwsError> {
    let instance = get_instance(ec2, id).await?;
    if instance.state == InstanceStateName::ShuttingDown.as_str() {
        return Ok(());
    }
    ec2.terminate_instances()
        .instance_ids(id)
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("TerminateInstances", e))?;
    Ok(())
}

/// The last state seen of each instance of the cluster (launches, get, list), by instance ID: what drift and
/// the interruption source read without asking EC2.
#[derive(Debug, Default)]
pub struct InstanceCache {
    by_id: RwLock<HashMap<String, Ec2Instance>>,
}

impl InstanceCache {
    pub fn get(&self, id: &str) -> Option<Ec2Instance> {
        self.by_id
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    pub fn insert(&self, instance: Ec2Instance) {
        self.by_id
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(instance.id.clone(), instance);
    }

    pub fn remove(&self, id: &str) {
        self.by_id
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }

    /// An instance `matches` accepts, if any.
    pub fn find(&self, matches: impl Fn(&Ec2Instance) -> bool) -> Option<Ec2Instance> {
        self.by_id
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .find(|i| matches(i))
            .cloned()
    }

    /// Replaces everything with a full listing (instances not listed are gone).
    pub fn replace_all(&self, instances: &[Ec2Instance]) {
        *self.by_id.write().unwrap_or_else(PoisonError::into_inner) =
            instances.iter().map(|i| (i.id.clone(), i.clone())).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids() {
        assert_eq!(
            parse_provider_id("aws:///us-west-2a/i-0123456789abcdef0").unwrap(),
            "i-0123456789abcdef0"
        );
        assert_eq!(parse_provider_id("i-0abc").unwrap(), "i-0abc");
        let err = parse_provider_id("kind://docker/node").unwrap_err();
        assert_eq!(err.category(), "InvalidProviderID");
        assert_eq!(
            err.to_string(),
            r#""kind://docker/node" is not an AWS provider ID"#
        );
    }

    #[test]
    fn instances_report_their_placement_group_and_partition() {
        use aws_sdk_ec2::types::{Instance, InstanceState, Placement};
        let instance = |placement: Placement| {
            let described = Instance::builder()
                .instance_id("i-1")
                .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
                .state(InstanceState::builder().name(InstanceStateName::Running).build())
                .placement(placement)
                .build();
            Ec2Instance::from_sdk(&described).unwrap()
        };
        let partitioned = instance(
            Placement::builder()
                .availability_zone("us-west-2a")
                .group_name("training")
                .group_id("pg-0abc")
                .partition_number(2)
                .build(),
        );
        assert_eq!(
            partitioned.placement_group,
            Some(InstancePlacementGroup {
                id: Some("pg-0abc".into()),
                name: Some("training".into()),
                partition: Some(2),
            })
        );
        assert!(partitioned.is_in_placement_group("pg-0abc", "other"));
        assert!(partitioned.is_in_placement_group("pg-other", "training"));
        assert!(!partitioned.is_in_placement_group("pg-other", "other"));
        // EC2 reports an empty group name for an instance outside any group.
        let outside = instance(
            Placement::builder()
                .availability_zone("us-west-2a")
                .group_name("")
                .build(),
        );
        assert_eq!(outside.placement_group, None);
        assert_eq!(outside.zone, "us-west-2a");
    }
}
