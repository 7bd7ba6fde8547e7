//! Placement groups: an EC2NodeClass's `spec.placementGroupSelector` (a name or an id) resolved with
//! DescribePlacementGroups, and what a launch into the group needs.
//!
//! - Resolution: the EC2NodeClass controller (and a launch that comes before it) describes the selected group;
//!   its PlacementGroupReady condition ([`crate::nodeclass::status`]) says whether it exists and is available.
//!   The resolved group is kept per class in [`ResolvedPlacementGroups`] (the EC2NodeClass status has no field
//!   for it), which the catalog, launches and drift read.
//! - Scheduling: the class's instance types carry `karpenter.k8s.aws/placement-group-id` (the group's id) and,
//!   for a partition group, `karpenter.k8s.aws/placement-group-partition` with every partition, so NodePools
//!   and topology spread constraints can select them ([`PlacementGroup::requirements`]).
//! - Launch: the launch template names the group by id, and a partition when the NodeClaim allows only some of
//!   the group's partitions ([`launch_placement`]); otherwise EC2 picks the partition and the launch reads it
//!   back from the instance. CreateFleet's overrides cannot carry a partition, so the template is the place.
//! - Zones: a cluster group lives in one zone, but DescribePlacementGroups does not say which: the zone of the
//!   group's instances Karpenter knows (its launches and listings) restricts the class's offerings
//!   ([`cluster_zone`]); before any, every zone is open and EC2 pins the group to the first launch's zone.

pub mod store;

use aws_sdk_ec2::types::{PlacementGroupState, PlacementStrategy as Ec2PlacementStrategy};
use karpenter_api::ec2nodeclass::PlacementGroupSelector;
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_core::catalog::CatalogRequirement;
use karpenter_core::cloudprovider::CloudProviderError;
use karpenter_core::requirements::{LabelInterner, Requirements};
use serde::Serialize;

use crate::error::AwsError;
use crate::instance::Ec2Instance;

pub use store::{PlacementGroupResolution, ResolvedPlacementGroups};

/// The label of a node launched into a placement group: the group's id.
pub const PLACEMENT_GROUP_ID_LABEL: &str = "karpenter.k8s.aws/placement-group-id";
/// The label of a node launched into a partition placement group: its partition number (from 1).
pub const PLACEMENT_GROUP_PARTITION_LABEL: &str = "karpenter.k8s.aws/placement-group-partition";

/// How a placement group places its instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PlacementStrategy {
    /// Close together in one zone.
    Cluster,
    /// Each on distinct hardware.
    Spread,
    /// In partitions that share no hardware with each other.
    Partition,
}

/// A placement group as DescribePlacementGroups reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementGroup {
    pub id: String,
    pub name: String,
    /// None for a strategy this version does not know.
    pub strategy: Option<PlacementStrategy>,
    /// The number of partitions of a partition group.
    pub partition_count: Option<i32>,
    /// `pending`, `available`, `deleting` or `deleted`.
    pub state: String,
}

impl PlacementGroup {
    /// Whether instances can launch into it.
    pub fn is_available(&self) -> bool {
        self.state == PlacementGroupState::Available.as_str()
    }

    /// Its partitions (1..=count) when it is a partition group with a known count; else none.
    pub fn partitions(&self) -> Vec<i32> {
        match (self.strategy, self.partition_count) {
            (Some(PlacementStrategy::Partition), Some(count)) if count > 0 => (1..=count).collect(),
            _ => Vec::new(),
        }
    }

    /// Whether `selector` names this group.
    pub fn is_selected_by(&self, selector: &PlacementGroupSelector) -> bool {
        selector.id.as_ref().is_none_or(|id| *id == self.id)
            && selector.name.as_ref().is_none_or(|name| *name == self.name)
    }

    /// What the instance types of a class launching into this group satisfy: its id, and any of its
    /// partitions.
    pub fn requirements(&self) -> Vec<CatalogRequirement> {
        let mut requirements = vec![CatalogRequirement::is_in(PLACEMENT_GROUP_ID_LABEL, [&self.id])];
        let partitions = self.partitions();
        if !partitions.is_empty() {
            requirements.push(CatalogRequirement::is_in(
                PLACEMENT_GROUP_PARTITION_LABEL,
                partitions.iter().map(ToString::to_string),
            ));
        }
        requirements
    }
}

/// The selector as its manifest writes it (`{"name":"x"}`), for condition messages.
pub fn selector_json(selector: &PlacementGroupSelector) -> String {
    serde_json::to_string(selector).unwrap_or_default()
}

/// A DescribePlacementGroups record as Karpenter keeps it; None without an id or name (nothing could launch
/// into it by them).
pub fn group_from_sdk(record: &aws_sdk_ec2::types::PlacementGroup) -> Option<PlacementGroup> {
    let strategy = match record.strategy() {
        Some(Ec2PlacementStrategy::Cluster) => Some(PlacementStrategy::Cluster),
        Some(Ec2PlacementStrategy::Spread) => Some(PlacementStrategy::Spread),
        Some(Ec2PlacementStrategy::Partition) => Some(PlacementStrategy::Partition),
        _ => None,
    };
    Some(PlacementGroup {
        id: record.group_id()?.to_string(),
        name: record.group_name()?.to_string(),
        strategy,
        partition_count: record.partition_count(),
        state: record.state().map(|s| s.as_str().to_string()).unwrap_or_default(),
    })
}

/// Whether an error code of DescribePlacementGroups means the named group does not exist: EC2 refuses an
/// unknown name or id instead of answering with nothing.
fn is_unknown_group_code(code: &str) -> bool {
    code.starts_with("InvalidPlacementGroup") && (code.ends_with(".Unknown") || code.ends_with(".NotFound"))
}

/// The group `selector` selects, in any state; None when there is none. The answer is matched against the
/// selector too, so what is selected does not depend on which parameters an endpoint honours.
pub async fn describe_placement_group(
    ec2: &aws_sdk_ec2::Client,
    selector: &PlacementGroupSelector,
) -> Result<Option<PlacementGroup>, AwsError> {
    let answer = ec2
        .describe_placement_groups()
        .set_group_ids(selector.id.clone().map(|id| vec![id]))
        .set_group_names(selector.name.clone().map(|name| vec![name]))
        .send()
        .await;
    let output = match answer.map_err(|e| AwsError::from_sdk("DescribePlacementGroups", e)) {
        Ok(output) => output,
        Err(err) if err.code().is_some_and(is_unknown_group_code) => return Ok(None),
        Err(err) => return Err(err),
    };
    Ok(output
        .placement_groups()
        .iter()
        .filter_map(group_from_sdk)
        .find(|group| group.is_selected_by(selector)))
}

/// Where one launch goes: the group, and the partition when the NodeClaim needs a particular one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementTarget {
    pub group: PlacementGroup,
    pub partition: Option<i32>,
}

/// The placement of a launch of `claim` into `group`. For a partition group, the lowest partition the
/// claim's `karpenter.k8s.aws/placement-group-partition` requirement allows when it allows only some of them
/// (a topology spread over partitions pins one); none when it allows all, so EC2 balances them. A claim that
/// allows none of them cannot launch.
pub fn launch_placement(
    claim: &NodeClaim,
    group: &PlacementGroup,
) -> Result<PlacementTarget, CloudProviderError> {
    let partitions = group.partitions();
    let mut interner = LabelInterner::new();
    let wanted = Requirements::from_api(&claim.spec.requirements, &mut interner).map_err(|e| {
        CloudProviderError::Create {
            reason: "InvalidRequirements".into(),
            message: format!("spec.requirements: {e}"),
        }
    })?;
    let key = interner.intern_key(PLACEMENT_GROUP_PARTITION_LABEL);
    let allowed: Vec<i32> = match wanted.get(key) {
        None => partitions.clone(),
        Some(requirement) => partitions
            .iter()
            .copied()
            .filter(|p| requirement.has(interner.intern(&p.to_string())))
            .collect(),
    };
    if !partitions.is_empty() && allowed.is_empty() {
        return Err(CloudProviderError::InsufficientCapacity {
            message: format!(
                "NodeClaim {} allows none of the {} partitions of placement group {}",
                claim.metadata.name.as_deref().unwrap_or_default(),
                partitions.len(),
                group.name
            ),
            offerings: Vec::new(),
        });
    }
    Ok(PlacementTarget {
        group: group.clone(),
        partition: (allowed.len() < partitions.len())
            .then(|| allowed.first().copied())
            .flatten(),
    })
}

/// The zone of a cluster group: where its instances among `instances` run. None for other strategies and
/// before any instance is known.
pub fn cluster_zone<'a>(
    group: &PlacementGroup,
    instances: impl IntoIterator<Item = &'a Ec2Instance>,
) -> Option<String> {
    if group.strategy != Some(PlacementStrategy::Cluster) {
        return None;
    }
    instances
        .into_iter()
        .find(|i| i.is_in_placement_group(&group.id, &group.name) && !i.zone.is_empty())
        .map(|i| i.zone.clone())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use karpenter_core::catalog::RequirementOperator;
    use serde_json::json;

    use super::*;
    use crate::instance::InstancePlacementGroup;

    fn group(strategy: PlacementStrategy, partitions: Option<i32>) -> PlacementGroup {
        PlacementGroup {
            id: "pg-0abc".into(),
            name: "training".into(),
            strategy: Some(strategy),
            partition_count: partitions,
            state: "available".into(),
        }
    }

    fn selector(json: serde_json::Value) -> PlacementGroupSelector {
        serde_json::from_value(json).unwrap()
    }

    fn claim(requirements: serde_json::Value) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "default-x"},
            "spec": {"requirements": requirements,
                     "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
        }))
        .unwrap()
    }

    #[test]
    fn records_become_groups_and_selectors_match_by_name_or_id() {
        let record = aws_sdk_ec2::types::PlacementGroup::builder()
            .group_id("pg-0abc")
            .group_name("training")
            .strategy(Ec2PlacementStrategy::Partition)
            .partition_count(3)
            .state(PlacementGroupState::Available)
            .build();
        let found = group_from_sdk(&record).unwrap();
        assert_eq!(found, group(PlacementStrategy::Partition, Some(3)));
        assert!(found.is_available());
        assert_eq!(found.partitions(), [1, 2, 3]);
        let pending = aws_sdk_ec2::types::PlacementGroup::builder()
            .group_id("pg-1")
            .group_name("new")
            .state(PlacementGroupState::Pending)
            .build();
        let pending = group_from_sdk(&pending).unwrap();
        assert!(!pending.is_available());
        assert_eq!(pending.strategy, None);
        assert_eq!(
            group_from_sdk(
                &aws_sdk_ec2::types::PlacementGroup::builder()
                    .group_name("x")
                    .build()
            ),
            None,
            "no id"
        );

        assert!(found.is_selected_by(&selector(json!({"name": "training"}))));
        assert!(found.is_selected_by(&selector(json!({"id": "pg-0abc"}))));
        assert!(!found.is_selected_by(&selector(json!({"name": "other"}))));
        assert!(!found.is_selected_by(&selector(json!({"id": "pg-0def"}))));
        assert_eq!(
            selector_json(&selector(json!({"name": "training"}))),
            r#"{"name":"training"}"#
        );
        assert!(is_unknown_group_code("InvalidPlacementGroup.Unknown"));
        assert!(is_unknown_group_code("InvalidPlacementGroupId.NotFound"));
        assert!(!is_unknown_group_code("UnauthorizedOperation"));
    }

    #[test]
    fn instance_types_carry_the_group_and_its_partitions() {
        let cluster = group(PlacementStrategy::Cluster, None).requirements();
        assert_eq!(cluster.len(), 1);
        assert_eq!(
            (
                cluster[0].key.as_str(),
                cluster[0].operator,
                cluster[0].values.as_slice()
            ),
            (
                PLACEMENT_GROUP_ID_LABEL,
                RequirementOperator::In,
                &["pg-0abc".to_string()][..]
            )
        );
        let partition = group(PlacementStrategy::Partition, Some(3)).requirements();
        assert_eq!(partition[1].key, PLACEMENT_GROUP_PARTITION_LABEL);
        assert_eq!(partition[1].values, ["1", "2", "3"]);
        assert_eq!(
            group(PlacementStrategy::Partition, None).requirements().len(),
            1,
            "an unknown partition count offers no partition"
        );
    }

    #[test]
    fn a_partition_is_pinned_only_when_the_claim_narrows_them() {
        let partition = group(PlacementStrategy::Partition, Some(3));
        let any = launch_placement(&claim(json!([])), &partition).unwrap();
        assert_eq!(any.partition, None, "EC2 balances the partitions");
        let all = claim(
            json!([{"key": PLACEMENT_GROUP_PARTITION_LABEL, "operator": "In", "values": ["1", "2", "3"]}]),
        );
        assert_eq!(launch_placement(&all, &partition).unwrap().partition, None);
        let two = claim(json!([{"key": PLACEMENT_GROUP_PARTITION_LABEL, "operator": "In", "values": ["2"]}]));
        assert_eq!(launch_placement(&two, &partition).unwrap().partition, Some(2));
        let not_one =
            claim(json!([{"key": PLACEMENT_GROUP_PARTITION_LABEL, "operator": "NotIn", "values": ["1"]}]));
        assert_eq!(launch_placement(&not_one, &partition).unwrap().partition, Some(2));
        let none =
            claim(json!([{"key": PLACEMENT_GROUP_PARTITION_LABEL, "operator": "In", "values": ["7"]}]));
        assert!(matches!(
            launch_placement(&none, &partition),
            Err(CloudProviderError::InsufficientCapacity { .. })
        ));
        let spread = launch_placement(&two, &group(PlacementStrategy::Spread, None)).unwrap();
        assert_eq!(spread.partition, None, "only partition groups have partitions");
    }

    #[test]
    fn a_cluster_group_is_in_the_zone_of_its_instances() {
        let instance = |zone: &str, placement: Option<InstancePlacementGroup>| Ec2Instance {
            id: format!("i-{zone}"),
            instance_type: "c5n.18xlarge".into(),
            zone: zone.into(),
            capacity_type: "on-demand".into(),
            capacity_reservation_id: None,
            state: "running".into(),
            image_id: None,
            launch_time: None,
            private_dns_name: None,
            subnet_id: None,
            security_group_ids: Vec::new(),
            placement_group: placement,
            tags: BTreeMap::new(),
        };
        let cluster = group(PlacementStrategy::Cluster, None);
        let elsewhere = instance("us-west-2a", None);
        assert_eq!(cluster_zone(&cluster, [&elsewhere]), None, "before any instance");
        let by_name = instance(
            "us-west-2b",
            Some(InstancePlacementGroup {
                id: None,
                name: Some("training".into()),
                partition: None,
            }),
        );
        assert_eq!(
            cluster_zone(&cluster, [&elsewhere, &by_name]).as_deref(),
            Some("us-west-2b")
        );
        assert_eq!(
            cluster_zone(&group(PlacementStrategy::Spread, None), [&by_name]),
            None,
            "spread groups span zones"
        );
    }
}
