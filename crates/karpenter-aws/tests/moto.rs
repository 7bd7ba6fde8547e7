//! karpenter-aws against moto (tests/moto/harness.py): instance types and their capacity, prices and their
//! fallback, error mapping, launches through CreateFleet, capacity reservations, placement groups, the
//! EC2NodeClass dry-run checks and the instance status poller. Each test runs its own server.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

#[path = "moto/fixtures.rs"]
mod fixtures;

#[path = "moto/cloud_provider.rs"]
mod cloud_provider;

#[path = "moto/launch_template.rs"]
mod launch_template;

#[path = "moto/sdk_metrics.rs"]
mod sdk_metrics;

#[path = "moto/interruption_source.rs"]
mod interruption_source;

#[path = "moto/nodeclass.rs"]
mod nodeclass;

#[path = "moto/capacity_reservations.rs"]
mod capacity_reservations;

#[path = "moto/launch_batching.rs"]
mod launch_batching;

#[path = "moto/interfaces_and_cpu_options.rs"]
mod interfaces_and_cpu_options;

#[path = "moto/placement_groups.rs"]
mod placement_groups;

#[path = "moto/dry_run.rs"]
mod dry_run;

#[path = "moto/prefix_delegation.rs"]
mod prefix_delegation;

#[path = "moto/nodeclaim_tagging.rs"]
mod nodeclaim_tagging;

#[path = "moto/cluster_endpoint.rs"]
mod cluster_endpoint;

#[path = "moto/instance_status.rs"]
mod instance_status;

use std::collections::BTreeMap;
use std::time::Instant;

use karpenter_aws::instance_types::CAPACITY_TYPE_SPOT;
use karpenter_aws::pod_addressing::PodAddressing;
use karpenter_aws::{InstanceTypeProvider, PriceSource, PricingProvider, UnavailableOfferings};
use karpenter_aws_catalog::{AwsCapacitySettings, aws_catalog_data};
use karpenter_core::catalog::CatalogInstanceType;
use serde::Deserialize;

/// Karpenter's documented allocatable per type (AL2023, defaults), as core's golden test uses it.
const GOLDEN_JSON: &str = include_str!("../../karpenter-aws-catalog/data/aws-allocatable-golden.json");

#[derive(Deserialize)]
struct Golden {
    allocatable: BTreeMap<String, BTreeMap<String, String>>,
}

/// 110 types (all offered in moto's us-west-2) across families with GPUs, Neuron devices, EFA, instance stores,
/// arm64 and burstables.
const SAMPLE: &[&str] = &[
    "m5.*", "c5.*", "r5.*", "c6g.*", "m7g.*", "t3.*", "t4g.*", "g5.*", "inf2.*", "p4d.*", "trn1.*", "i3en.*",
    "m6id.*", "x2gd.*", "r6gd.*",
];

/// Compares each documented type of `catalog` with Karpenter's instance-type reference: allocatable under the
/// default settings, and every karpenter.k8s.aws/instance-* label except `ignored_label`. Checks that offerings
/// are available exactly where moto offers the type and a price is known. Returns how many types were compared
/// and the differences.
fn compare_with_documentation(
    catalog: &[CatalogInstanceType],
    pricing: &PricingProvider,
    ignored_label: Option<&str>,
) -> (usize, Vec<String>) {
    let golden: Golden = serde_json::from_str(GOLDEN_JSON).unwrap();
    let data = aws_catalog_data().unwrap();
    let mut mismatches = Vec::new();
    let mut compared = 0;
    for t in catalog {
        let Some(expected) = golden.allocatable.get(&t.name) else {
            continue;
        };
        compared += 1;
        let allocatable = t.allocatable();
        for (resource, text) in expected {
            let want = karpenter_api::quantity::parse_milli(text).unwrap();
            let got = allocatable.get(resource).copied().unwrap_or(0);
            if want != got {
                mismatches.push(format!("{} {resource}: doc {text}, computed {got} milli", t.name));
            }
        }
        for (resource, amount) in &allocatable {
            // The doc predates the vpclimits table that made some types trunking-compatible (core's golden
            // test documents the same exception).
            if *amount != 0 && !expected.contains_key(resource) && resource != "vpc.amazonaws.com/pod-eni" {
                mismatches.push(format!(
                    "{} {resource}: computed {amount}, not documented",
                    t.name
                ));
            }
        }
        // Labels computed from DescribeInstanceTypes equal the documented ones.
        let documented = data.instance_type(&t.name).unwrap();
        for requirement in t.requirements.iter() {
            let Some(value) = documented.label(&requirement.key) else {
                continue;
            };
            if requirement.values != [value] && Some(requirement.key.as_str()) != ignored_label {
                mismatches.push(format!(
                    "{} {}: doc {value:?}, computed {:?}",
                    t.name, requirement.key, requirement.values
                ));
            }
        }
        for key in documented.labels.keys() {
            if key.starts_with("karpenter.k8s.aws/") && !t.requirements.iter().any(|r| &r.key == key) {
                mismatches.push(format!("{} {key}: documented, not computed", t.name));
            }
        }
        // Offerings: available where moto offers the type, at the static on-demand price until Pricing answers.
        let zones = &t
            .requirements
            .iter()
            .find(|r| r.key == "topology.kubernetes.io/zone")
            .unwrap()
            .values;
        let on_demand = pricing.on_demand_price(&t.name);
        for offering in &t.offerings {
            if offering.available != (zones.contains(&offering.zone) && on_demand.is_some()) {
                mismatches.push(format!("{} {offering:?}: availability", t.name));
            }
        }
    }
    (compared, mismatches)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_types_from_moto_have_karpenters_labels_and_documented_allocatable() {
    let moto = moto!(SAMPLE);
    let clients = moto.clients("us-west-2").await;
    let provider = InstanceTypeProvider::new("us-west-2");
    let found = provider.refresh(&clients.ec2).await.unwrap();
    assert_eq!(found, 110, "the sample's types are all launchable");
    let pricing = PricingProvider::new("us-west-2", false).unwrap();
    let unavailable = UnavailableOfferings::default();
    let catalog = provider
        .list(
            &AwsCapacitySettings::default(),
            PodAddressing::SecondaryIps,
            &pricing,
            &unavailable,
            Instant::now(),
        )
        .unwrap();
    for t in &catalog {
        let zones = t
            .requirements
            .iter()
            .find(|r| r.key == "topology.kubernetes.io/zone")
            .unwrap();
        assert!(!zones.values.is_empty(), "moto offers {} in us-west-2", t.name);
    }
    let (compared, mismatches) = compare_with_documentation(&catalog, &pricing, None);
    assert_eq!(compared, 110, "every type of the sample is documented");
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );

    // An offering out of capacity is unavailable for a while, the others stay.
    let now = Instant::now();
    let m5 = catalog.iter().find(|t| t.name == "m5.large").unwrap();
    let zone = m5.offerings.iter().find(|o| o.available).unwrap().zone.clone();
    unavailable.mark_unavailable("m5.large", &zone, CAPACITY_TYPE_SPOT, now);
    let catalog = provider
        .list(
            &AwsCapacitySettings::default(),
            PodAddressing::SecondaryIps,
            &pricing,
            &unavailable,
            now,
        )
        .unwrap();
    let m5 = catalog.iter().find(|t| t.name == "m5.large").unwrap();
    for offering in &m5.offerings {
        let iced = offering.zone == zone && offering.capacity_type == CAPACITY_TYPE_SPOT;
        assert_eq!(offering.available, !iced, "{offering:?}");
    }
}

/// The clock-speed label where moto's DescribeInstanceTypes data and Karpenter's reference disagree (66 newer
/// types, documented in shared/data/aws/README.md, and a few old ones moto reports no speed for).
const CLOCK_SPEED_LABEL: &str = "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_instance_type_in_moto_has_karpenters_allocatable() {
    // moto's whole catalogue: DescribeInstanceTypes takes 5 s or more here.
    let moto = moto!(&[]);
    let clients = moto.clients("us-west-2").await;
    let provider = InstanceTypeProvider::new("us-west-2");
    let found = provider.refresh(&clients.ec2).await.unwrap();
    let pricing = PricingProvider::new("us-west-2", false).unwrap();
    let catalog = provider
        .list(
            &AwsCapacitySettings::default(),
            PodAddressing::SecondaryIps,
            &pricing,
            &UnavailableOfferings::default(),
            Instant::now(),
        )
        .unwrap();
    let (compared, mismatches) = compare_with_documentation(&catalog, &pricing, Some(CLOCK_SPEED_LABEL));
    println!("{found} launchable types in moto, {compared} of them documented and compared");
    assert!(compared > 1300, "{compared}");
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pricing_falls_back_to_the_static_table_when_the_pricing_api_fails() {
    let moto = moto!(&["m5.large", "c6g.large"]);
    let clients = moto.clients("us-west-2").await;
    let pricing = PricingProvider::new("us-west-2", false).unwrap();

    // moto has no Pricing backend: the update fails and the static us-east-1 prices stay in use.
    let err = pricing.update_on_demand(&clients.pricing).await.unwrap_err();
    assert_eq!(err.category(), "Unreachable", "{err}");
    let status = pricing.status();
    assert_eq!(status.on_demand_source, PriceSource::Fallback);
    let note = status.note.unwrap();
    assert!(
        note.starts_with("on-demand prices from the static us-east-1 table: GetProducts:"),
        "{note}"
    );
    assert_eq!(pricing.on_demand_price("m5.large"), Some(0.096));

    // Spot prices come from DescribeSpotPriceHistory (moto's are a constant).
    let spot_types = pricing.update_spot(&clients.ec2).await.unwrap();
    assert!(spot_types >= 1, "{spot_types}");
    assert_eq!(pricing.status().spot_source, PriceSource::Api);
    let price = pricing
        .spot_price("m5.large", "us-west-2a")
        .expect("m5.large has a spot price in us-west-2a");
    assert!(price > 0.0 && price < 0.096, "{price}");

    // In an isolated VPC the Pricing API is not called at all.
    let isolated = PricingProvider::new("us-west-2", true).unwrap();
    assert_eq!(isolated.update_on_demand(&clients.pricing).await.unwrap(), 0);
    assert_eq!(isolated.status().on_demand_source, PriceSource::Fallback);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_error_codes_map_to_stable_categories() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let err = clients
        .ec2
        .describe_instances()
        .instance_ids("i-0123456789abcdef0")
        .send()
        .await
        .map_err(|e| karpenter_aws::AwsError::from_sdk("DescribeInstances", e))
        .unwrap_err();
    assert_eq!(err.category(), "NotFound");
    assert_eq!(err.code(), Some("InvalidInstanceID.NotFound"));
    let provider_error: karpenter_core::cloudprovider::CloudProviderError = err.into();
    assert!(provider_error.is_not_found());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_fleet_launches_the_cheapest_offering_and_capacity_errors_mark_offerings_unavailable() {
    use karpenter_api::ec2nodeclass::{EC2NodeClass, EC2NodeClassSpec, EC2NodeClassStatus, SecurityGroup};
    use karpenter_aws::launch::{
        LaunchOverride, LaunchRequest, LaunchTemplateSpec, create_fleet, ensure_launch_template,
    };
    use karpenter_core::cloudprovider::CloudProviderError;

    use fixtures::set_ice;

    let moto = moto!(&["m5.large", "c5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    let ec2 = &clients.ec2;
    let vpc = admin
        .ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .unwrap();
    let vpc_id = vpc.vpc().and_then(|v| v.vpc_id()).unwrap().to_string();
    let mut subnets = BTreeMap::new();
    for (zone, cidr) in [("us-west-2a", "10.0.1.0/24"), ("us-west-2b", "10.0.2.0/24")] {
        let subnet = admin
            .ec2
            .create_subnet()
            .vpc_id(&vpc_id)
            .cidr_block(cidr)
            .availability_zone(zone)
            .send()
            .await
            .unwrap();
        subnets.insert(
            zone,
            subnet.subnet().and_then(|s| s.subnet_id()).unwrap().to_string(),
        );
    }
    let group = admin
        .ec2
        .create_security_group()
        .group_name("karpenter-nodes")
        .description("nodes")
        .vpc_id(&vpc_id)
        .send()
        .await
        .unwrap();
    let image_id = fixtures::al2023_image_id(&admin.ssm).await;

    let mut node_class = EC2NodeClass::new("default", EC2NodeClassSpec::default());
    node_class.spec.tags = Some(BTreeMap::from([("team".into(), "platform".into())]));
    assert!(matches!(
        LaunchTemplateSpec::from_node_class(&node_class, &image_id, fixtures::CLUSTER, "default"),
        Err(CloudProviderError::NodeClassNotReady { .. })
    ));
    node_class.status = Some(EC2NodeClassStatus {
        security_groups: vec![SecurityGroup {
            id: group.group_id().unwrap().to_string(),
            ..Default::default()
        }],
        instance_profile: Some("KarpenterNodeInstanceProfile".into()),
        ..Default::default()
    });
    let template =
        LaunchTemplateSpec::from_node_class(&node_class, &image_id, fixtures::CLUSTER, "default").unwrap();
    assert_eq!(template.metadata_options.http_tokens, "required");
    let name = ensure_launch_template(ec2, &template).await.unwrap();
    assert_eq!(
        ensure_launch_template(ec2, &template).await.unwrap(),
        name,
        "creating it again is fine"
    );

    let request = LaunchRequest {
        launch_template_name: name,
        capacity_type: "spot".into(),
        reservation: None,
        overrides: vec![
            LaunchOverride {
                instance_type: "m5.large".into(),
                zone: "us-west-2a".into(),
                subnet_id: subnets["us-west-2a"].clone(),
                price: 0.05,
                image_id: None,
                launch_template_name: None,
            },
            LaunchOverride {
                instance_type: "c5.large".into(),
                zone: "us-west-2b".into(),
                subnet_id: subnets["us-west-2b"].clone(),
                price: 0.04,
                image_id: None,
                launch_template_name: None,
            },
        ],
        // What the provider tags a launch with: the controller policies allow no less.
        tags: karpenter_aws::tags::launch_tags(fixtures::CLUSTER, "default", "default", None),
        zone_ids: BTreeMap::from([("us-west-2a".into(), "usw2-az2".into())]),
        context: None,
        prioritized: false,
    };
    let unavailable = UnavailableOfferings::default();
    let now = Instant::now();

    // The cheapest override first (moto launches the first one it is given).
    let launched = create_fleet(ec2, &request, &unavailable, now).await.unwrap();
    assert_eq!(
        (
            launched.instance_type.as_str(),
            launched.zone.as_str(),
            launched.capacity_type.as_str()
        ),
        ("c5.large", "us-west-2b", "spot")
    );
    let described = admin
        .ec2
        .describe_instances()
        .instance_ids(&launched.instance_id)
        .send()
        .await
        .unwrap();
    let instance = &described.reservations()[0].instances()[0];
    assert!(
        instance
            .tags()
            .iter()
            .any(|t| t.key() == Some("karpenter.sh/nodepool") && t.value() == Some("default"))
    );
    assert!(unavailable.is_empty(now));

    // c5.large spot in us-west-2b is out of capacity: m5.large launches and the ICE'd offering is remembered.
    set_ice(&admin, "spot:c5.large:us-west-2b").await;
    let launched = create_fleet(ec2, &request, &unavailable, now).await.unwrap();
    assert_eq!(
        (launched.instance_type.as_str(), launched.zone.as_str()),
        ("m5.large", "us-west-2a")
    );
    assert!(unavailable.is_unavailable("c5.large", "us-west-2b", "spot", now));
    assert!(!unavailable.is_unavailable("c5.large", "us-west-2b", "on-demand", now));

    // Nothing has capacity: InsufficientCapacity naming every offering tried.
    set_ice(&admin, "*").await;
    let err = create_fleet(ec2, &request, &unavailable, now).await.unwrap_err();
    let CloudProviderError::InsufficientCapacity { offerings, message } = &err else {
        panic!("expected InsufficientCapacity, got {err:?}");
    };
    assert_eq!(offerings.len(), 2, "{message}");
    assert_eq!(
        message,
        "no spot capacity for c5.large in us-west-2b, m5.large in us-west-2a"
    );
    assert!(unavailable.is_unavailable("m5.large", "us-west-2a", "spot", now));
    assert_eq!(err.category(), "InsufficientCapacity");
    // Each capacity error counts as a launch failure, with the zone ID the request knew.
    let failures = karpenter_metrics::metrics()
        .cloudprovider_instance_launch_failures
        .get_or_create(&karpenter_metrics::LaunchFailureLabels {
            zone: "us-west-2a".into(),
            zone_id: "usw2-az2".into(),
            capacity_type: "spot".into(),
            reason: "InsufficientInstanceCapacity".into(),
        })
        .get();
    assert!(failures >= 1, "{failures}");

    // Other errors fail the launch with AWS's code as the reason (and do not mean the NodeClaim is gone).
    set_ice(&admin, "nothing:matches:this").await;
    let missing_template = LaunchRequest {
        launch_template_name: "karpenter.k8s.aws/missing".into(),
        capacity_type: "on-demand".into(),
        ..request.clone()
    };
    let err = create_fleet(ec2, &missing_template, &unavailable, now)
        .await
        .unwrap_err();
    let CloudProviderError::Create { reason, .. } = &err else {
        panic!("expected a Create error, got {err:?}");
    };
    assert_eq!(reason, "InvalidLaunchTemplateName.NotFoundException");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interruption_messages_are_received_parsed_and_deleted() {
    use karpenter_aws::InterruptionQueue;
    use std::time::Duration;

    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    // The queue the controller policies allow, before it exists.
    let missing = InterruptionQueue::from_name(clients.sqs.clone(), fixtures::CLUSTER)
        .await
        .unwrap_err();
    assert_eq!(missing.category(), "NotFound", "{missing}");
    admin
        .sqs
        .create_queue()
        .queue_name(fixtures::CLUSTER)
        .send()
        .await
        .unwrap();
    let queue = InterruptionQueue::from_name(clients.sqs.clone(), fixtures::CLUSTER)
        .await
        .unwrap();
    let url = queue.url().unwrap();
    assert!(url.ends_with("/test-cluster"), "{url}");

    use fixtures::{event, send_messages};
    let bodies = [
        event(
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
            r#"{"instance-id": "i-0000000000000000a", "instance-action": "terminate"}"#,
        ),
        event(
            "aws.ec2",
            "EC2 Instance Rebalance Recommendation",
            r#"{"instance-id": "i-0000000000000000b"}"#,
        ),
        event(
            "aws.ec2",
            "EC2 Instance State-change Notification",
            r#"{"instance-id": "i-0000000000000000c", "state": "terminated"}"#,
        ),
        event(
            "aws.health",
            "AWS Health Event",
            r#"{"service": "EC2", "eventTypeCategory": "scheduledChange",
                "eventTypeCode": "AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED",
                "affectedEntities": [{"entityValue": "i-0000000000000000d"}]}"#,
        ),
        event(
            "aws.ec2",
            "EC2 Instance State-change Notification",
            r#"{"instance-id": "i-0000000000000000e", "state": "running"}"#,
        ),
        "this is not an event".to_string(),
    ];
    send_messages(&admin.sqs, queue.url().unwrap(), &bodies).await;

    let mut seen = Vec::new();
    for _ in 0..10 {
        for message in queue.receive(Duration::from_secs(1)).await.unwrap() {
            seen.push(match &message.parsed {
                Ok(Some(m)) => format!("{} {}", m.kind.as_str(), m.instance_ids.join(",")),
                Ok(None) => "ignored".to_string(),
                Err(e) => e.category().to_string(),
            });
            queue.delete(&message.receipt_handle).await.unwrap();
        }
        if seen.len() >= bodies.len() {
            break;
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "InvalidInterruptionMessage",
            "ignored",
            "instance_state_change i-0000000000000000c",
            "rebalance_recommendation i-0000000000000000b",
            "scheduled_change i-0000000000000000d",
            "spot_interrupted i-0000000000000000a",
        ]
    );
    // Deleted, not merely invisible for the visibility timeout.
    use aws_sdk_sqs::types::QueueAttributeName;
    let attributes = admin
        .sqs
        .get_queue_attributes()
        .queue_url(queue.url().unwrap())
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap();
    let attributes = attributes.attributes().unwrap();
    for name in [
        QueueAttributeName::ApproximateNumberOfMessages,
        QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
    ] {
        assert_eq!(attributes.get(&name).map(String::as_str), Some("0"), "{name:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_instances_are_found_listed_and_terminated() {
    use aws_sdk_ec2::types::{InstanceMarketOptionsRequest, MarketType, ResourceType, Tag, TagSpecification};
    use karpenter_aws::instance::{get_instance, list_instances, parse_provider_id, terminate_instance};

    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    let ec2 = &clients.ec2;
    let image_id = fixtures::al2023_image_id(&admin.ssm).await;
    let run = |tags: Vec<(&'static str, &'static str)>, spot: bool| {
        let mut call = admin
            .ec2
            .run_instances()
            .image_id(&image_id)
            .instance_type("m5.large".into())
            .min_count(1)
            .max_count(1);
        if !tags.is_empty() {
            call = call.tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::Instance)
                    .set_tags(Some(
                        tags.iter()
                            .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
                            .collect(),
                    ))
                    .build(),
            );
        }
        if spot {
            call = call.instance_market_options(
                InstanceMarketOptionsRequest::builder()
                    .market_type(MarketType::Spot)
                    .build(),
            );
        }
        async move {
            let output = call.send().await.unwrap();
            output.instances()[0].instance_id().unwrap().to_string()
        }
    };
    let ours = run(
        vec![
            ("karpenter.sh/nodepool", "default"),
            ("eks:eks-cluster-name", "test-cluster"),
            // Every instance Karpenter launches carries it, and the policies let it tag and terminate no other.
            ("kubernetes.io/cluster/test-cluster", "owned"),
        ],
        true,
    )
    .await;
    let _other_cluster = run(
        vec![
            ("karpenter.sh/nodepool", "default"),
            ("eks:eks-cluster-name", "other"),
        ],
        false,
    )
    .await;
    let _not_karpenters = run(vec![("eks:eks-cluster-name", "test-cluster")], false).await;

    let listed = list_instances(ec2, "test-cluster").await.unwrap();
    assert_eq!(
        listed.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        [ours.as_str()]
    );
    let instance = get_instance(ec2, &ours).await.unwrap();
    assert_eq!(instance, listed[0]);
    assert_eq!(instance.instance_type, "m5.large");
    assert_eq!(instance.capacity_type, "spot");
    assert_eq!(instance.image_id.as_deref(), Some(image_id.as_str()));
    assert!(instance.zone.starts_with("us-west-2"), "{}", instance.zone);
    assert_eq!(instance.tags["karpenter.sh/nodepool"], "default");
    assert_eq!(parse_provider_id(&instance.provider_id()).unwrap(), ours);

    // Once the NodeClaim has a node, the instance is tagged with both names.
    let names =
        karpenter_aws::tags::node_claim_tags("default-x7k2p", Some("ip-10-0-0-1.us-west-2.compute.internal"));
    karpenter_aws::tags::create_tags(ec2, &ours, &names)
        .await
        .unwrap();
    let tagged = get_instance(ec2, &ours).await.unwrap();
    assert_eq!(tagged.tags["karpenter.sh/nodeclaim"], "default-x7k2p");
    assert_eq!(tagged.tags["Name"], "ip-10-0-0-1.us-west-2.compute.internal");

    terminate_instance(ec2, &ours).await.unwrap();
    // moto reports shutting-down in TerminateInstances' answer and terminated from the next describe on.
    let gone = get_instance(ec2, &ours).await.unwrap_err();
    assert_eq!(gone.category(), "NotFound", "{gone}");
    assert_eq!(
        terminate_instance(ec2, &ours).await.unwrap_err().category(),
        "NotFound"
    );
    assert!(list_instances(ec2, "test-cluster").await.unwrap().is_empty());
    let unknown = get_instance(ec2, "i-0123456789abcdef0").await.unwrap_err();
    assert_eq!(unknown.code(), Some("InvalidInstanceID.NotFound"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn al2023_aliases_resolve_through_the_eks_ssm_parameters() {
    use karpenter_aws::ami::{AmiAlias, AmiVariant, resolve_alias};

    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    let latest = AmiAlias::parse("al2023@latest").unwrap();
    let amis = resolve_alias(&clients.ssm, &latest, "1.33").await.unwrap();
    let summary: Vec<(AmiVariant, &str)> = amis
        .iter()
        .map(|a| (a.variant, a.requirements[0].values[0].as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            (AmiVariant::Standard, "amd64"),
            (AmiVariant::Nvidia, "amd64"),
            (AmiVariant::Neuron, "amd64"),
            (AmiVariant::Standard, "arm64"),
            (AmiVariant::Nvidia, "arm64"),
        ]
    );
    // The harness points them at moto's Amazon Linux 2023 images of the same architecture.
    for ami in &amis {
        let images = admin
            .ec2
            .describe_images()
            .image_ids(&ami.id)
            .send()
            .await
            .unwrap();
        let architecture = images.images()[0].architecture().unwrap().as_str();
        let arch = &ami.requirements[0].values[0];
        assert_eq!(
            architecture,
            if arch == "amd64" { "x86_64" } else { "arm64" },
            "{}",
            ami.id
        );
    }

    let pinned = AmiAlias::parse("al2023@v20200101").unwrap();
    let err = resolve_alias(&clients.ssm, &pinned, "1.33").await.unwrap_err();
    assert_eq!(err.category(), "NotFound");
    assert_eq!(
        err.to_string(),
        "GetParameters: not found (ParameterNotFound): no AMI found for alias al2023@v20200101 and Kubernetes 1.33"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_terms_select_subnets_and_security_groups() {
    use aws_sdk_ec2::types::Tag;
    use karpenter_api::ec2nodeclass::{SecurityGroupSelectorTerm, SubnetSelectorTerm};
    use karpenter_aws::security_groups::discover_security_groups;
    use karpenter_aws::subnets::{discover_subnets, subnets_for_launch};

    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    let ec2 = &clients.ec2;
    let tag = |ids: Vec<String>, key: &str, value: &str| {
        admin
            .ec2
            .create_tags()
            .set_resources(Some(ids))
            .tags(Tag::builder().key(key).value(value).build())
            .send()
    };
    let vpc = admin
        .ec2
        .create_vpc()
        .cidr_block("10.1.0.0/16")
        .send()
        .await
        .unwrap();
    let vpc_id = vpc.vpc().and_then(|v| v.vpc_id()).unwrap().to_string();
    let mut subnet_ids = BTreeMap::new();
    for (name, zone, cidr) in [
        ("big-a", "us-west-2a", "10.1.1.0/24"),
        ("small-a", "us-west-2a", "10.1.2.0/28"),
        ("b", "us-west-2b", "10.1.3.0/24"),
        ("other", "us-west-2c", "10.1.4.0/24"),
        ("untagged", "us-west-2c", "10.1.5.0/24"),
    ] {
        let subnet = admin
            .ec2
            .create_subnet()
            .vpc_id(&vpc_id)
            .cidr_block(cidr)
            .availability_zone(zone)
            .send()
            .await
            .unwrap();
        subnet_ids.insert(
            name,
            subnet.subnet().and_then(|s| s.subnet_id()).unwrap().to_string(),
        );
    }
    let discovery = |names: &[&str]| names.iter().map(|n| subnet_ids[n].clone()).collect::<Vec<_>>();
    tag(
        discovery(&["big-a", "small-a", "b"]),
        "karpenter.sh/discovery",
        "test",
    )
    .await
    .unwrap();
    tag(discovery(&["other"]), "karpenter.sh/discovery", "other-cluster")
        .await
        .unwrap();

    let by_tag = |value: &str| SubnetSelectorTerm {
        tags: Some(BTreeMap::from([("karpenter.sh/discovery".into(), value.into())])),
        id: None,
    };
    let subnets = discover_subnets(ec2, &[by_tag("test")]).await.unwrap();
    let ids: Vec<&str> = subnets.iter().map(|s| s.id.as_str()).collect();
    let mut expected = discovery(&["big-a", "b"]);
    expected.sort();
    expected.push(subnet_ids["small-a"].clone());
    assert_eq!(ids, expected, "most free addresses first");
    assert_eq!(subnets.last().unwrap().available_ip_count, 11);
    let chosen = subnets_for_launch(&subnets);
    assert_eq!(chosen["us-west-2a"].id, subnet_ids["big-a"]);
    assert_eq!(chosen.len(), 2);

    let wildcard = discover_subnets(ec2, &[by_tag("*")]).await.unwrap();
    assert_eq!(wildcard.len(), 4, "any value of the tag");
    let by_id = SubnetSelectorTerm {
        tags: None,
        id: Some(subnet_ids["untagged"].clone()),
    };
    let ored = discover_subnets(ec2, &[by_tag("test"), by_id.clone(), by_id])
        .await
        .unwrap();
    assert_eq!(ored.len(), 4, "terms are ORed and results deduplicated");
    assert!(
        discover_subnets(ec2, &[by_tag("nobody")])
            .await
            .unwrap()
            .is_empty()
    );

    let mut group_ids = BTreeMap::new();
    for name in ["nodes", "extra", "unrelated"] {
        let group = admin
            .ec2
            .create_security_group()
            .group_name(name)
            .description(name)
            .vpc_id(&vpc_id)
            .send()
            .await
            .unwrap();
        group_ids.insert(name, group.group_id().unwrap().to_string());
    }
    tag(vec![group_ids["nodes"].clone()], "karpenter.sh/discovery", "test")
        .await
        .unwrap();
    let groups = discover_security_groups(
        ec2,
        &[
            SecurityGroupSelectorTerm {
                tags: Some(BTreeMap::from([("karpenter.sh/discovery".into(), "test".into())])),
                ..Default::default()
            },
            SecurityGroupSelectorTerm {
                name: Some("extra".into()),
                ..Default::default()
            },
        ],
    )
    .await
    .unwrap();
    let mut expected: Vec<(String, Option<String>)> = ["nodes", "extra"]
        .map(|n| (group_ids[n].clone(), Some(n.to_string())))
        .to_vec();
    expected.sort();
    assert_eq!(
        groups.into_iter().map(|g| (g.id, g.name)).collect::<Vec<_>>(),
        expected
    );
    let by_id = discover_security_groups(
        ec2,
        &[SecurityGroupSelectorTerm {
            id: Some(group_ids["unrelated"].clone()),
            ..Default::default()
        }],
    )
    .await
    .unwrap();
    assert_eq!(by_id.len(), 1);
    assert_eq!(by_id[0].name.as_deref(), Some("unrelated"));
}
