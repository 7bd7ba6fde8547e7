//! Placement groups against moto, which implements neither CreatePlacementGroup nor DescribePlacementGroups:
//! the harness adds both and places fleet instances in the group their launch template names (harness.py).
//! Resolution and PlacementGroupReady, launches into a group with its labels, a cluster group's zone, and
//! PlacementGroupDrift.

use karpenter_api::common::ConditionStatus;
use karpenter_api::ec2nodeclass::EC2NodeClass;
use karpenter_api::nodepool::NodePool;
use karpenter_aws::placement_groups::{PLACEMENT_GROUP_ID_LABEL, PLACEMENT_GROUP_PARTITION_LABEL};
use karpenter_core::catalog::CatalogInstanceType;
use karpenter_core::cloudprovider::{CloudProvider, CloudProviderError};
use karpenter_core::disruption::drift::DriftProvider;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::fixtures::{
    condition, create_node_class, latest_template_data, network, node_claim, node_class, provider, reconciled,
};
use crate::moto;

const TYPES: [&str; 2] = ["m5.large", "m5.xlarge"];

/// Creates a placement group through the harness; returns its id.
async fn create_placement_group(
    ec2: &aws_sdk_ec2::Client,
    name: &str,
    strategy: &str,
    partitions: Option<i32>,
) -> String {
    ec2.create_placement_group()
        .group_name(name)
        .strategy(strategy.into())
        .set_partition_count(partitions)
        .send()
        .await
        .unwrap()
        .placement_group()
        .and_then(|g| g.group_id())
        .unwrap()
        .to_string()
}

/// The fixture class launching into the group `selector` selects.
fn grouped_class(name: &str, selector: serde_json::Value) -> EC2NodeClass {
    let mut class = node_class(name, json!([{"alias": "al2023@latest"}]));
    class.spec.placement_group_selector = Some(serde_json::from_value(selector).unwrap());
    class
}

fn node_pool(class: &str) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": class}}}}
    }))
    .unwrap()
}

/// On-demand m5.large (and m5.xlarge), plus `extra` requirements.
fn requirements(extra: serde_json::Value) -> serde_json::Value {
    let mut all = vec![
        json!({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": TYPES}),
        json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}),
    ];
    all.extend(extra.as_array().cloned().unwrap_or_default());
    serde_json::Value::Array(all)
}

/// The values `entry` requires for `key`.
fn required<'a>(entry: &'a CatalogInstanceType, key: &str) -> Option<&'a [String]> {
    entry
        .requirements
        .iter()
        .find(|r| r.key == key)
        .map(|r| r.values.as_slice())
}

/// The placement (group id, partition) of the instance behind `claim`, as DescribeInstances reports it.
async fn instance_placement(
    ec2: &aws_sdk_ec2::Client,
    claim: &karpenter_api::nodeclaim::NodeClaim,
) -> (Option<String>, Option<i32>) {
    let provider_id = claim.status.as_ref().unwrap().provider_id.clone().unwrap();
    let described = ec2
        .describe_instances()
        .instance_ids(provider_id.rsplit('/').next().unwrap())
        .send()
        .await
        .unwrap();
    let placement = described.reservations()[0].instances()[0].placement().unwrap();
    (
        placement.group_id().map(str::to_string),
        placement.partition_number(),
    )
}

/// The (group id, partition) every launch template names, sorted.
async fn template_placements(ec2: &aws_sdk_ec2::Client) -> Vec<(Option<String>, Option<i32>)> {
    let mut placements = Vec::new();
    for template in ec2
        .describe_launch_templates()
        .send()
        .await
        .unwrap()
        .launch_templates()
    {
        let data = latest_template_data(ec2, template.launch_template_name().unwrap())
            .await
            .unwrap();
        let placement = data.placement();
        placements.push((
            placement.and_then(|p| p.group_id()).map(str::to_string),
            placement.and_then(|p| p.partition_number()),
        ));
    }
    placements.sort();
    placements
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_resolves_its_placement_group_by_name_or_id_and_is_ready() {
    let moto = moto!(&TYPES);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    let id = create_placement_group(&admin.ec2, "training", "partition", Some(3)).await;
    let (server, provider) = provider(clients.clone()).await;

    create_node_class(&server, &grouped_class("by-name", json!({"name": "training"}))).await;
    let class = reconciled(&server, &provider, "by-name").await;
    assert_eq!(
        condition(&class, "PlacementGroupReady"),
        Some((ConditionStatus::True, "PlacementGroupReady".into(), String::new()))
    );
    assert!(
        class.is_ready(),
        "{:?}",
        class.status.as_ref().map(|s| &s.conditions)
    );
    let selector = class.spec.placement_group_selector.clone().unwrap();
    let group = provider
        .placement_groups()
        .available_group("by-name", &selector)
        .unwrap();
    assert_eq!(
        (group.id.as_str(), group.name.as_str()),
        (id.as_str(), "training")
    );
    assert_eq!(group.partitions(), [1, 2, 3]);

    create_node_class(&server, &grouped_class("by-id", json!({"id": id}))).await;
    let class = reconciled(&server, &provider, "by-id").await;
    assert_eq!(
        condition(&class, "PlacementGroupReady").map(|c| c.0),
        Some(ConditionStatus::True)
    );
    assert!(class.is_ready());

    // A class without a selector has no such condition.
    create_node_class(&server, &node_class("plain", json!([{"alias": "al2023@latest"}]))).await;
    let plain = reconciled(&server, &provider, "plain").await;
    assert_eq!(condition(&plain, "PlacementGroupReady"), None);
    assert!(plain.is_ready());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_placement_group_is_named_and_keeps_the_class_unready() {
    let moto = moto!(&TYPES);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    create_placement_group(&admin.ec2, "training", "cluster", None).await;
    let (server, provider) = provider(clients.clone()).await;
    provider.refresh_instance_types().await.unwrap();

    create_node_class(&server, &grouped_class("nowhere", json!({"name": "nope"}))).await;
    let class = reconciled(&server, &provider, "nowhere").await;
    assert_eq!(
        condition(&class, "PlacementGroupReady"),
        Some((
            ConditionStatus::False,
            "PlacementGroupNotFound".into(),
            r#"PlacementGroupSelector did not match any PlacementGroups: {"name":"nope"}"#.into()
        ))
    );
    assert!(!class.is_ready());
    let (ready, reason, message) = condition(&class, "Ready").unwrap();
    assert_eq!(
        (ready, reason.as_str()),
        (ConditionStatus::False, "UnhealthyDependents")
    );
    assert_eq!(message, "PlacementGroupReady=False (PlacementGroupNotFound)");

    // An unknown id says the same, and nothing launches into the class.
    create_node_class(
        &server,
        &grouped_class("no-id", json!({"id": "pg-0123456789abcdef0"})),
    )
    .await;
    let class = reconciled(&server, &provider, "no-id").await;
    assert_eq!(
        condition(&class, "PlacementGroupReady").map(|c| (c.0, c.1)),
        Some((ConditionStatus::False, "PlacementGroupNotFound".into()))
    );
    let err = provider
        .create(&node_claim("no-id-x", "no-id", requirements(json!([]))))
        .await
        .unwrap_err();
    assert!(
        matches!(err, CloudProviderError::NodeClassNotReady { .. }),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launches_go_into_the_placement_group_and_carry_its_labels() {
    let moto = moto!(&TYPES);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    let id = create_placement_group(&admin.ec2, "training", "partition", Some(3)).await;
    let (server, provider) = provider(clients.clone()).await;
    provider.refresh_instance_types().await.unwrap();
    create_node_class(&server, &grouped_class("default", json!({"name": "training"}))).await;
    assert!(reconciled(&server, &provider, "default").await.is_ready());

    // The class's instance types offer the group and each of its partitions to the scheduler.
    let types = provider.instance_types(&node_pool("default")).await.unwrap();
    for entry in &types {
        assert_eq!(
            required(entry, PLACEMENT_GROUP_ID_LABEL),
            Some(&[id.clone()][..]),
            "{}",
            entry.name
        );
        assert_eq!(
            required(entry, PLACEMENT_GROUP_PARTITION_LABEL),
            Some(&["1".to_string(), "2".to_string(), "3".to_string()][..])
        );
    }

    // Any partition: the template names the group only, EC2 picks the partition and the label says which.
    let launched = provider
        .create(&node_claim("default-any", "default", requirements(json!([]))))
        .await
        .unwrap();
    let labels = launched.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[PLACEMENT_GROUP_ID_LABEL], id);
    let (group_id, partition) = instance_placement(&admin.ec2, &launched).await;
    assert_eq!(
        group_id.as_deref(),
        Some(id.as_str()),
        "the instance is in the group"
    );
    let partition = partition.expect("EC2 reports the partition");
    assert_eq!(labels[PLACEMENT_GROUP_PARTITION_LABEL], partition.to_string());
    // One template per max pods (m5.large, m5.xlarge), each naming the group and no partition.
    assert_eq!(
        template_placements(&admin.ec2).await,
        vec![(Some(id.clone()), None); 2]
    );

    // A claim for partition 3 (a topology spread over partitions pins one) gets templates for it.
    let pinned = provider
        .create(&node_claim(
            "default-three",
            "default",
            requirements(
                json!([{"key": PLACEMENT_GROUP_PARTITION_LABEL, "operator": "In", "values": ["3"]}]),
            ),
        ))
        .await
        .unwrap();
    assert_eq!(
        pinned.metadata.labels.as_ref().unwrap()[PLACEMENT_GROUP_PARTITION_LABEL],
        "3"
    );
    assert_eq!(instance_placement(&admin.ec2, &pinned).await.1, Some(3));
    let placements = template_placements(&admin.ec2).await;
    assert_eq!(placements.len(), 4);
    assert!(
        placements[..2].iter().all(|p| *p == (Some(id.clone()), None)),
        "{placements:?}"
    );
    assert!(
        placements[2..].iter().all(|p| *p == (Some(id.clone()), Some(3))),
        "{placements:?}"
    );

    // CloudProvider.get reads the placement back from EC2.
    let provider_id = pinned.status.as_ref().unwrap().provider_id.clone().unwrap();
    let got = provider.get(&provider_id).await.unwrap();
    let labels = got.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[PLACEMENT_GROUP_ID_LABEL], id);
    assert_eq!(labels[PLACEMENT_GROUP_PARTITION_LABEL], "3");

    // A partition the group does not have cannot launch.
    let err = provider
        .create(&node_claim(
            "default-seven",
            "default",
            requirements(
                json!([{"key": PLACEMENT_GROUP_PARTITION_LABEL, "operator": "In", "values": ["7"]}]),
            ),
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(err, CloudProviderError::InsufficientCapacity { .. }),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_group_keeps_launches_in_the_zone_of_its_first_instance() {
    let moto = moto!(&TYPES);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    let id = create_placement_group(&admin.ec2, "tight", "cluster", None).await;
    let (server, provider) = provider(clients.clone()).await;
    provider.refresh_instance_types().await.unwrap();
    create_node_class(&server, &grouped_class("default", json!({"name": "tight"}))).await;
    assert!(reconciled(&server, &provider, "default").await.is_ready());

    // Before any instance, both of the class's zones are offered.
    let available_zones = |types: &[CatalogInstanceType]| {
        let mut zones: Vec<String> = types
            .iter()
            .find(|t| t.name == "m5.large")
            .unwrap()
            .offerings
            .iter()
            .filter(|o| o.available && o.capacity_type == "on-demand")
            .map(|o| o.zone.clone())
            .collect();
        zones.sort();
        zones
    };
    let types = provider.instance_types(&node_pool("default")).await.unwrap();
    assert_eq!(available_zones(&types), ["us-west-2a", "us-west-2b"]);
    assert_eq!(
        required(
            types.iter().find(|t| t.name == "m5.large").unwrap(),
            PLACEMENT_GROUP_PARTITION_LABEL
        ),
        None,
        "a cluster group has no partitions"
    );

    let first = provider
        .create(&node_claim("default-first", "default", requirements(json!([]))))
        .await
        .unwrap();
    let labels = first.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[PLACEMENT_GROUP_ID_LABEL], id);
    assert!(!labels.contains_key(PLACEMENT_GROUP_PARTITION_LABEL));
    let zone = labels["topology.kubernetes.io/zone"].clone();

    // From then on only that zone is offered, and the next launch goes there even when asked for any zone.
    let types = provider.instance_types(&node_pool("default")).await.unwrap();
    assert_eq!(available_zones(&types), std::slice::from_ref(&zone));
    let other_zone = if zone == "us-west-2a" {
        "us-west-2b"
    } else {
        "us-west-2a"
    };
    let second = provider
        .create(&node_claim(
            "default-second",
            "default",
            requirements(json!([{"key": "topology.kubernetes.io/zone", "operator": "In",
                                 "values": ["us-west-2a", "us-west-2b"]}])),
        ))
        .await
        .unwrap();
    assert_eq!(
        second.metadata.labels.as_ref().unwrap()["topology.kubernetes.io/zone"],
        zone
    );
    let elsewhere = provider
        .create(&node_claim(
            "default-elsewhere",
            "default",
            requirements(
                json!([{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [other_zone]}]),
            ),
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(elsewhere, CloudProviderError::InsufficientCapacity { .. }),
        "{elsewhere}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_claim_drifts_once_its_class_no_longer_selects_its_placement_group() {
    let moto = moto!(&TYPES);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    create_placement_group(&admin.ec2, "training", "partition", Some(2)).await;
    let inference = create_placement_group(&admin.ec2, "inference", "spread", None).await;
    let (server, provider) = provider(clients.clone()).await;
    provider.refresh_instance_types().await.unwrap();
    create_node_class(&server, &grouped_class("default", json!({"name": "training"}))).await;
    assert!(reconciled(&server, &provider, "default").await.is_ready());
    let launched = provider
        .create(&node_claim("default-x", "default", requirements(json!([]))))
        .await
        .unwrap();
    assert_eq!(provider.is_drifted(&launched), None);

    let api: Api<EC2NodeClass> = Api::all(server.client());
    let select = |selector: serde_json::Value| {
        let api = api.clone();
        async move {
            api.patch(
                "default",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"placementGroupSelector": selector}})),
            )
            .await
            .unwrap();
        }
    };
    // The class now selects another group (by id): the node is in the wrong one.
    select(json!({"name": null, "id": inference})).await;
    let class = reconciled(&server, &provider, "default").await;
    assert_eq!(
        condition(&class, "PlacementGroupReady").map(|c| c.0),
        Some(ConditionStatus::True)
    );
    assert_eq!(
        provider.is_drifted(&launched).as_deref(),
        Some("PlacementGroupDrift")
    );

    // Back to the group the node is in: not drifted.
    select(json!({"name": "training", "id": null})).await;
    reconciled(&server, &provider, "default").await;
    assert_eq!(provider.is_drifted(&launched), None);

    // No group at all: drifted again, and the class has no PlacementGroupReady any more.
    select(serde_json::Value::Null).await;
    let class = reconciled(&server, &provider, "default").await;
    assert_eq!(condition(&class, "PlacementGroupReady"), None);
    assert_eq!(
        provider.is_drifted(&launched).as_deref(),
        Some("PlacementGroupDrift")
    );
}
