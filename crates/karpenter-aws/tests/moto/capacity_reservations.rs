//! Capacity reservations against moto, whose DescribeCapacityReservations the harness fills in from the
//! reservations a test registers (harness.py): the EC2NodeClass status and CapacityReservationsReady, reserved
//! offerings, a launch into a reservation end to end, and a full reservation falling back.

use std::time::Instant;

use karpenter_api::common::ConditionStatus;
use karpenter_api::ec2nodeclass::{
    CapacityReservationState, CapacityReservationType, EC2NodeClass, InstanceMatchCriteria,
};
use karpenter_api::nodepool::NodePool;
use karpenter_core::catalog::CatalogInstanceType;
use karpenter_core::cloudprovider::{CloudProvider, CloudProviderError};
use serde_json::json;

use super::fixtures::{
    condition, create_node_class, latest_template_data, network, node_claim, node_class, provider,
    provider_on, reconciled, set_capacity_reservations, settings,
};
use crate::moto;

const TYPES: [&str; 2] = ["m5.large", "m5.xlarge"];

/// An m5.large reservation for team ml in us-west-2a with two instances free, an m5.xlarge capacity block in
/// us-west-2b with one, a reservation of another team, and an expired one of team ml.
fn reservations() -> serde_json::Value {
    json!([
        {"CapacityReservationId": "cr-0a", "InstanceType": "m5.large", "AvailabilityZone": "us-west-2a",
         "AvailableInstanceCount": 2, "TotalInstanceCount": 4, "Tags": [{"Key": "team", "Value": "ml"}]},
        {"CapacityReservationId": "cr-0block", "InstanceType": "m5.xlarge", "AvailabilityZone": "us-west-2b",
         "AvailableInstanceCount": 1, "ReservationType": "capacity-block", "InstanceMatchCriteria": "targeted",
         "EndDate": "2099-01-01T00:00:00Z"},
        {"CapacityReservationId": "cr-0web", "InstanceType": "m5.large", "AvailabilityZone": "us-west-2a",
         "AvailableInstanceCount": 5, "Tags": [{"Key": "team", "Value": "web"}]},
        {"CapacityReservationId": "cr-0old", "InstanceType": "m5.large", "AvailabilityZone": "us-west-2a",
         "AvailableInstanceCount": 5, "State": "expired", "Tags": [{"Key": "team", "Value": "ml"}]}
    ])
}

/// The fixture class selecting reservations with `terms`.
fn reserving_class(name: &str, terms: serde_json::Value) -> EC2NodeClass {
    let mut class = node_class(name, json!([{"alias": "al2023@latest"}]));
    class.spec.capacity_reservation_selector_terms = Some(serde_json::from_value(terms).unwrap());
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

fn requirements(capacity_types: &[&str]) -> serde_json::Value {
    json!([
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": TYPES},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types}
    ])
}

/// (reservation id, zone, available, free instances) of `instance_type`'s reserved offerings.
fn reserved_offerings(
    types: &[CatalogInstanceType],
    instance_type: &str,
) -> Vec<(String, String, bool, i64)> {
    types
        .iter()
        .find(|t| t.name == instance_type)
        .unwrap()
        .offerings
        .iter()
        .filter(|o| o.capacity_type == "reserved")
        .map(|o| {
            (
                o.reservation_id.clone().unwrap(),
                o.zone.clone(),
                o.available,
                o.reservation_capacity.unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_lists_selected_reservations_and_names_a_term_that_selects_nothing() {
    let moto = moto!(&TYPES);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    set_capacity_reservations(&admin, reservations()).await;
    let (server, provider) = provider(clients.clone()).await;
    provider.refresh_instance_types().await.unwrap();

    // Team ml's reservations (not the expired one) and the capacity block by id.
    create_node_class(
        &server,
        &reserving_class("default", json!([{"tags": {"team": "ml"}}, {"id": "cr-0block"}])),
    )
    .await;
    let class = reconciled(&server, &provider, "default").await;
    let status = class.status.as_ref().unwrap();
    let listed: Vec<(&str, &str, &str, CapacityReservationType, InstanceMatchCriteria)> = status
        .capacity_reservations
        .iter()
        .map(|r| {
            (
                r.id.as_str(),
                r.instance_type.as_str(),
                r.availability_zone.as_str(),
                r.reservation_type,
                r.instance_match_criteria,
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            (
                "cr-0a",
                "m5.large",
                "us-west-2a",
                CapacityReservationType::Default,
                InstanceMatchCriteria::Open
            ),
            (
                "cr-0block",
                "m5.xlarge",
                "us-west-2b",
                CapacityReservationType::CapacityBlock,
                InstanceMatchCriteria::Targeted
            ),
        ]
    );
    let block = &status.capacity_reservations[1];
    assert_eq!(block.owner_id, "123456789012");
    assert_eq!(block.state, CapacityReservationState::Active);
    assert_eq!(
        block.end_time.as_ref().map(|t| t.0.to_string()).as_deref(),
        Some("2099-01-01T00:00:00Z")
    );
    let (ready, reason, _) = condition(&class, "CapacityReservationsReady").unwrap();
    assert_eq!(
        (ready, reason.as_str()),
        (ConditionStatus::True, "CapacityReservationsReady")
    );
    assert!(class.is_ready());

    // The NodePool's instance types offer the reservations, nearly free, with their free instances.
    let types = provider.instance_types(&node_pool("default")).await.unwrap();
    assert_eq!(
        reserved_offerings(&types, "m5.large"),
        [("cr-0a".to_string(), "us-west-2a".to_string(), true, 2)]
    );
    assert_eq!(
        reserved_offerings(&types, "m5.xlarge"),
        [("cr-0block".to_string(), "us-west-2b".to_string(), true, 1)]
    );
    let m5 = types.iter().find(|t| t.name == "m5.large").unwrap();
    let reserved_price = m5
        .offerings
        .iter()
        .find(|o| o.capacity_type == "reserved")
        .unwrap()
        .price;
    let on_demand_price = m5
        .offerings
        .iter()
        .find(|o| o.capacity_type == "on-demand")
        .unwrap()
        .price;
    assert!(reserved_price < on_demand_price / 1000.0, "{reserved_price}");

    // A term that selects nothing is named, and the class is not Ready.
    create_node_class(
        &server,
        &reserving_class(
            "partly",
            json!([{"tags": {"team": "ml"}}, {"id": "cr-0missing"}, {"tags": {"team": "nobody"}}]),
        ),
    )
    .await;
    let partly = reconciled(&server, &provider, "partly").await;
    let (ready, reason, message) = condition(&partly, "CapacityReservationsReady").unwrap();
    assert_eq!(
        (ready, reason.as_str(), message.as_str()),
        (
            ConditionStatus::False,
            "CapacityReservationsNotFound",
            r#"CapacityReservationSelector did not match any CapacityReservations: [{"id":"cr-0missing"},{"tags":{"team":"nobody"}}]"#
        )
    );
    assert_eq!(
        partly.status.as_ref().unwrap().capacity_reservations.len(),
        1,
        "what the other term selected is still listed"
    );
    let (ready, _, message) = condition(&partly, "Ready").unwrap();
    assert_eq!(ready, ConditionStatus::False);
    assert_eq!(
        message,
        "CapacityReservationsReady=False (CapacityReservationsNotFound)"
    );

    // With the ReservedCapacity feature gate off, reservations are neither resolved nor offered.
    let gate_off = provider_on(
        &server,
        karpenter_aws::AwsSettings {
            reserved_capacity: false,
            ..settings()
        },
        clients.clone(),
    );
    gate_off.refresh_instance_types().await.unwrap();
    let partly = reconciled(&server, &gate_off, "partly").await;
    assert_eq!(condition(&partly, "CapacityReservationsReady"), None);
    assert!(partly.status.as_ref().unwrap().capacity_reservations.is_empty());
    assert!(partly.is_ready());
    let types = gate_off.instance_types(&node_pool("default")).await.unwrap();
    assert!(reserved_offerings(&types, "m5.large").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_claim_that_allows_reserved_capacity_launches_into_the_reservation() {
    let moto = moto!(&TYPES);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    set_capacity_reservations(
        &admin,
        json!([
            {"CapacityReservationId": "cr-0a", "InstanceType": "m5.large", "AvailabilityZone": "us-west-2a",
             "AvailableInstanceCount": 1},
            {"CapacityReservationId": "cr-0block", "InstanceType": "m5.xlarge", "AvailabilityZone": "us-west-2b",
             "AvailableInstanceCount": 1, "ReservationType": "capacity-block",
             "InstanceMatchCriteria": "targeted", "EndDate": "2099-01-01T00:00:00Z"}
        ]),
    )
    .await;
    let (server, provider) = provider(clients.clone()).await;
    provider.refresh_instance_types().await.unwrap();
    create_node_class(
        &server,
        &reserving_class("default", json!([{"id": "cr-0a"}, {"id": "cr-0block"}])),
    )
    .await;
    assert!(reconciled(&server, &provider, "default").await.is_ready());

    let claim = node_claim(
        "default-reserved",
        "default",
        requirements(&["reserved", "spot", "on-demand"]),
    );
    let launched = provider.create(&claim).await.unwrap();
    let labels = launched.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["karpenter.sh/capacity-type"], "reserved");
    assert_eq!(labels["karpenter.k8s.aws/capacity-reservation-id"], "cr-0a");
    assert_eq!(labels["karpenter.k8s.aws/capacity-reservation-type"], "default");
    assert_eq!(labels["node.kubernetes.io/instance-type"], "m5.large");
    assert_eq!(labels["topology.kubernetes.io/zone"], "us-west-2a");

    // EC2 put the instance in the reservation because its launch template targets it.
    let provider_id = launched.status.as_ref().unwrap().provider_id.clone().unwrap();
    let instance_id = provider_id.rsplit('/').next().unwrap();
    let described = admin
        .ec2
        .describe_instances()
        .instance_ids(instance_id)
        .send()
        .await
        .unwrap();
    let instance = &described.reservations()[0].instances()[0];
    assert_eq!(instance.capacity_reservation_id(), Some("cr-0a"));
    let targets = reservation_targets(&admin.ec2).await;
    assert_eq!(targets, [("cr-0a".to_string(), None)]);
    // CloudProvider.get says so too.
    let got = provider.get(&provider_id).await.unwrap();
    let labels = got.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["karpenter.sh/capacity-type"], "reserved");
    assert_eq!(labels["karpenter.k8s.aws/capacity-reservation-id"], "cr-0a");

    // The reservation's one instance is used: it is no longer offered, and the next launch falls back to spot
    // without trying the reservation (its instance is counted before EC2 is asked again).
    assert_eq!(provider.reservation_availability().available("cr-0a"), 0);
    let types = provider.instance_types(&node_pool("default")).await.unwrap();
    assert_eq!(
        reserved_offerings(&types, "m5.large"),
        [("cr-0a".to_string(), "us-west-2a".to_string(), false, 0)]
    );
    let next = provider
        .create(&node_claim(
            "default-next",
            "default",
            json!([
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved", "spot"]}
            ]),
        ))
        .await
        .unwrap();
    let labels = next.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["karpenter.sh/capacity-type"], "spot");
    assert!(!labels.contains_key("karpenter.k8s.aws/capacity-reservation-id"));

    // A claim for a capacity block launches into it with market type capacity-block.
    let block = provider
        .create(&node_claim(
            "default-block",
            "default",
            json!([
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved"]},
                {"key": "karpenter.k8s.aws/capacity-reservation-type", "operator": "In",
                 "values": ["capacity-block"]}
            ]),
        ))
        .await
        .unwrap();
    let labels = block.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["karpenter.sh/capacity-type"], "reserved");
    assert_eq!(labels["karpenter.k8s.aws/capacity-reservation-id"], "cr-0block");
    assert_eq!(
        labels["karpenter.k8s.aws/capacity-reservation-type"],
        "capacity-block"
    );
    assert_eq!(labels["node.kubernetes.io/instance-type"], "m5.xlarge");
    assert!(
        reservation_targets(&admin.ec2)
            .await
            .contains(&("cr-0block".to_string(), Some("capacity-block".to_string())))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_found_full_at_launch_is_unavailable_and_the_launch_lacks_capacity() {
    let moto = moto!(&TYPES);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    let reservation = |available: i64| {
        json!([{"CapacityReservationId": "cr-0a", "InstanceType": "m5.large", "AvailabilityZone": "us-west-2a",
                "AvailableInstanceCount": available}])
    };
    set_capacity_reservations(&admin, reservation(1)).await;
    let (server, provider) = provider(clients.clone()).await;
    provider.refresh_instance_types().await.unwrap();
    create_node_class(&server, &reserving_class("default", json!([{"id": "cr-0a"}]))).await;
    assert!(reconciled(&server, &provider, "default").await.is_ready());

    // Something outside Karpenter takes the last instance before the next DescribeCapacityReservations.
    set_capacity_reservations(&admin, reservation(0)).await;
    let claim = node_claim(
        "default-reserved",
        "default",
        requirements(&["reserved", "on-demand"]),
    );
    let err = provider.create(&claim).await.unwrap_err();
    match &err {
        CloudProviderError::InsufficientCapacity { offerings, message } => {
            let tried: Vec<(&str, &str, &str)> = offerings
                .iter()
                .map(|o| {
                    (
                        o.instance_type.as_str(),
                        o.zone.as_str(),
                        o.capacity_type.as_str(),
                    )
                })
                .collect();
            assert_eq!(tried, [("m5.large", "us-west-2a", "reserved")]);
            assert!(message.contains("cr-0a"), "{message}");
        }
        other => panic!("expected InsufficientCapacity, got {other:?}"),
    }
    assert!(
        provider
            .unavailable_offerings()
            .is_reservation_unavailable("cr-0a", Instant::now())
    );
    let types = provider.instance_types(&node_pool("default")).await.unwrap();
    let m5 = types.iter().find(|t| t.name == "m5.large").unwrap();
    let available: Vec<(&str, &str)> = m5
        .offerings
        .iter()
        .filter(|o| o.available && o.zone == "us-west-2a")
        .map(|o| (o.capacity_type.as_str(), o.zone.as_str()))
        .collect();
    assert_eq!(
        available,
        [("on-demand", "us-west-2a"), ("spot", "us-west-2a")],
        "only the reserved offering went"
    );

    // Trying again (as core does after InsufficientCapacity) launches on-demand.
    let retried = provider.create(&claim).await.unwrap();
    let labels = retried.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["karpenter.sh/capacity-type"], "on-demand");
    assert!(!labels.contains_key("karpenter.k8s.aws/capacity-reservation-id"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_launches_at_once_do_not_both_count_on_the_last_reserved_instance() {
    let moto = moto!(&TYPES);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    set_capacity_reservations(
        &admin,
        json!([{"CapacityReservationId": "cr-0a", "InstanceType": "m5.large", "AvailabilityZone": "us-west-2a",
                "AvailableInstanceCount": 1}]),
    )
    .await;
    let (server, provider) = provider(clients.clone()).await;
    provider.refresh_instance_types().await.unwrap();
    create_node_class(&server, &reserving_class("default", json!([{"id": "cr-0a"}]))).await;
    assert!(reconciled(&server, &provider, "default").await.is_ready());

    let claim = |name: &str| node_claim(name, "default", requirements(&["reserved", "on-demand"]));
    let (one, two) = (claim("default-one"), claim("default-two"));
    let (first, second) = tokio::join!(provider.create(&one), provider.create(&two));
    let mut capacity_types: Vec<String> = [first.unwrap(), second.unwrap()]
        .iter()
        .map(|c| c.metadata.labels.as_ref().unwrap()["karpenter.sh/capacity-type"].clone())
        .collect();
    capacity_types.sort();
    assert_eq!(
        capacity_types,
        ["on-demand", "reserved"],
        "one launch got the reservation's last instance, the other fell back"
    );
    assert!(
        !provider
            .unavailable_offerings()
            .is_reservation_unavailable("cr-0a", Instant::now()),
        "no launch had to find the reservation full at EC2"
    );
}

/// The reservations the account's launch templates target, each with its market type.
async fn reservation_targets(ec2: &aws_sdk_ec2::Client) -> Vec<(String, Option<String>)> {
    let templates = ec2.describe_launch_templates().send().await.unwrap();
    let mut targets = Vec::new();
    for template in templates.launch_templates() {
        let name = template.launch_template_name().unwrap();
        let Some(data) = latest_template_data(ec2, name).await else {
            continue;
        };
        if let Some(id) = data
            .capacity_reservation_specification()
            .and_then(|s| s.capacity_reservation_target())
            .and_then(|t| t.capacity_reservation_id())
        {
            let market = data
                .instance_market_options()
                .and_then(|o| o.market_type())
                .map(|m| m.as_str().to_string());
            targets.push((id.to_string(), market));
        }
    }
    targets.sort();
    targets
}
