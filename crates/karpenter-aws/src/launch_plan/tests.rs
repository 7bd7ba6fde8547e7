use karpenter_api::ec2nodeclass::CapacityReservationType;
use karpenter_aws_catalog::{AwsCapacitySettings, aws_catalog};
use serde_json::json;

use super::*;

fn claim(requirements: serde_json::Value, requests: serde_json::Value) -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "default-abcde"},
        "spec": {"requirements": requirements, "resources": {"requests": requests},
                 "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
    }))
    .unwrap()
}

fn catalog() -> Vec<CatalogInstanceType> {
    aws_catalog("us-west-2", &AwsCapacitySettings::default())
        .unwrap()
        .instance_types
}

fn ami(arch: &str) -> Ami {
    Ami {
        id: format!("ami-{arch}"),
        deprecated: false,
        name: None,
        requirements: vec![k8s_openapi::api::core::v1::NodeSelectorRequirement {
            key: "kubernetes.io/arch".into(),
            operator: "In".into(),
            values: Some(vec![arch.into()]),
        }],
    }
}

fn amd64_ami() -> Vec<Ami> {
    vec![ami("amd64")]
}

fn subnets() -> BTreeMap<String, String> {
    ["us-west-2a", "us-west-2b"]
        .into_iter()
        .enumerate()
        .map(|(i, zone)| (zone.to_string(), format!("subnet-{i}")))
        .collect()
}

const TYPES: [&str; 3] = ["m5.large", "m5.xlarge", "c6g.large"];

#[test]
fn spot_when_allowed_in_the_subnets_zones_with_an_ami_that_runs_the_type() {
    let claim = claim(
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": TYPES},
               {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}]),
        json!({"cpu": "1"}),
    );
    let plan = plan_launch(
        &claim,
        &catalog(),
        &amd64_ami(),
        &subnets(),
        &[],
        PodAddressing::SecondaryIps,
    )
    .unwrap();
    assert_eq!(plan.capacity_type, "spot");
    assert_eq!(plan.image_id, "ami-amd64");
    assert!(
        plan.overrides.iter().all(|o| o.instance_type.starts_with("m5.")),
        "c6g is arm64"
    );
    let zones: std::collections::BTreeSet<&str> = plan.overrides.iter().map(|o| o.zone.as_str()).collect();
    assert_eq!(zones, ["us-west-2a", "us-west-2b"].into());
    assert!(
        plan.overrides.windows(2).all(|w| w[0].price <= w[1].price),
        "cheapest first"
    );
    assert_eq!(plan.overrides.len(), 4);
    assert_eq!(plan.subnets["us-west-2b"], "subnet-1");
    assert!(
        plan.overrides
            .iter()
            .all(|o| plan.subnets[&o.zone] == o.subnet_id)
    );
    assert_eq!(
        plan.addresses,
        BTreeMap::from([("us-west-2a".to_string(), 29), ("us-west-2b".to_string(), 29)]),
        "an instance is counted on to use the smallest max pods of its zone's types (m5.large: 29)"
    );
}

#[test]
fn leased_subnets_replace_the_planned_ones_and_zones_without_one_are_dropped() {
    let claim = claim(
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": TYPES}]),
        json!({"cpu": "1"}),
    );
    let mut plan = plan_launch(
        &claim,
        &catalog(),
        &amd64_ami(),
        &subnets(),
        &[],
        PodAddressing::SecondaryIps,
    )
    .unwrap();
    let leased = BTreeMap::from([("us-west-2b".to_string(), "subnet-other".to_string())]);
    assert!(plan.use_subnets(&leased));
    assert!(!plan.overrides.is_empty());
    assert!(
        plan.overrides
            .iter()
            .all(|o| o.zone == "us-west-2b" && o.subnet_id == "subnet-other")
    );
    assert_eq!(plan.subnets, leased);
    assert!(!plan.use_subnets(&BTreeMap::new()), "nothing left to launch");
}

#[test]
fn on_demand_when_the_claim_says_so_and_requests_must_fit() {
    let on_demand = claim(
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": TYPES},
               {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
               {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-west-2b"]}]),
        json!({"cpu": "3", "memory": "4Gi"}),
    );
    let plan = plan_launch(
        &on_demand,
        &catalog(),
        &amd64_ami(),
        &subnets(),
        &[],
        PodAddressing::SecondaryIps,
    )
    .unwrap();
    assert_eq!(plan.capacity_type, "on-demand");
    let chosen: Vec<(&str, &str)> = plan
        .overrides
        .iter()
        .map(|o| (o.instance_type.as_str(), o.zone.as_str()))
        .collect();
    assert_eq!(chosen, [("m5.xlarge", "us-west-2b")], "m5.large has 2 vCPUs");

    let too_big = claim(
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": TYPES}]),
        json!({"cpu": "100"}),
    );
    let err = plan_launch(
        &too_big,
        &catalog(),
        &amd64_ami(),
        &subnets(),
        &[],
        PodAddressing::SecondaryIps,
    )
    .unwrap_err();
    assert_eq!(err.category(), "InsufficientCapacity");
    let no_subnets = plan_launch(
        &on_demand,
        &catalog(),
        &amd64_ami(),
        &BTreeMap::new(),
        &[],
        PodAddressing::SecondaryIps,
    )
    .unwrap_err();
    assert_eq!(no_subnets.category(), "InsufficientCapacity");
}

#[test]
fn unavailable_offerings_are_skipped() {
    let mut catalog = catalog();
    for entry in catalog.iter_mut().filter(|t| t.name == "m5.large") {
        for offering in &mut entry.offerings {
            offering.available = offering.capacity_type != "spot";
        }
    }
    let claim = claim(
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}]),
        json!({}),
    );
    let plan = plan_launch(
        &claim,
        &catalog,
        &amd64_ami(),
        &subnets(),
        &[],
        PodAddressing::SecondaryIps,
    )
    .unwrap();
    assert_eq!(plan.capacity_type, "on-demand");
}

#[test]
fn each_override_carries_the_ami_that_runs_its_type() {
    let claim = claim(
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": TYPES},
               {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
               {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-west-2a"]}]),
        json!({}),
    );
    let plan = plan_launch(
        &claim,
        &catalog(),
        &[ami("amd64"), ami("arm64")],
        &subnets(),
        &[],
        PodAddressing::SecondaryIps,
    )
    .unwrap();
    let images: Vec<(&str, Option<&str>)> = plan
        .overrides
        .iter()
        .map(|o| (o.instance_type.as_str(), o.image_id.as_deref()))
        .collect();
    assert_eq!(
        images,
        [
            ("c6g.large", Some("ami-arm64")),
            ("m5.large", Some("ami-amd64")),
            ("m5.xlarge", Some("ami-amd64"))
        ]
    );
    assert_eq!(
        plan.image_id, "ami-arm64",
        "the template takes the cheapest override's"
    );
}

fn reservation(id: &str, zone: &str, reservation_type: CapacityReservationType) -> CapacityReservation {
    CapacityReservation {
        availability_zone: zone.into(),
        id: id.into(),
        instance_type: "m5.large".into(),
        owner_id: "123456789012".into(),
        reservation_type,
        ..Default::default()
    }
}

/// The catalog with m5.large's reservations added, each with `available` instances.
fn reserved_catalog(reservations: &[CapacityReservation], available: i64) -> Vec<CatalogInstanceType> {
    use crate::capacity_reservations::ReservationAvailability;
    use crate::capacity_reservations::offerings::add_reserved_offerings;
    use crate::pricing::PricingProvider;
    use crate::unavailable_offerings::UnavailableOfferings;

    let availability = ReservationAvailability::default();
    availability.record_reported(
        reservations.iter().map(|r| (r.id.as_str(), available)),
        std::time::Instant::now(),
    );
    let mut catalog = catalog();
    add_reserved_offerings(
        &mut catalog,
        reservations,
        &availability,
        &UnavailableOfferings::default(),
        &PricingProvider::new("us-west-2", false).unwrap(),
        std::time::Instant::now(),
    );
    catalog
}

#[test]
fn a_reservation_with_room_is_launched_into_alone_before_spot() {
    let reservations = [
        reservation("cr-b", "us-west-2b", CapacityReservationType::Default),
        reservation("cr-block", "us-west-2a", CapacityReservationType::CapacityBlock),
    ];
    let catalog = reserved_catalog(&reservations, 1);
    let any = claim(
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": TYPES},
               {"key": "karpenter.sh/capacity-type", "operator": "In",
                "values": ["reserved", "spot", "on-demand"]}]),
        json!({"cpu": "1"}),
    );
    let plan = plan_launch(
        &any,
        &catalog,
        &amd64_ami(),
        &subnets(),
        &reservations,
        PodAddressing::SecondaryIps,
    )
    .unwrap();
    assert_eq!(plan.capacity_type, "reserved");
    assert_eq!(plan.overrides.len(), 1, "one reservation per launch");
    assert_eq!(plan.overrides[0].instance_type, "m5.large");
    let target = plan.reservation.as_ref().unwrap();
    assert_eq!(
        plan.overrides[0].zone,
        reservations
            .iter()
            .find(|r| r.id == target.id)
            .unwrap()
            .availability_zone
    );

    // A claim may name the reservation, or the kind, it wants.
    let block = claim(
        json!([{"key": "karpenter.k8s.aws/capacity-reservation-type", "operator": "In",
                "values": ["capacity-block"]},
               {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved"]}]),
        json!({}),
    );
    let plan = plan_launch(
        &block,
        &catalog,
        &amd64_ami(),
        &subnets(),
        &reservations,
        PodAddressing::SecondaryIps,
    )
    .unwrap();
    let target = plan.reservation.unwrap();
    assert_eq!(target.id, "cr-block");
    assert!(target.is_capacity_block());
    assert_eq!(plan.overrides[0].zone, "us-west-2a");
    let by_id = claim(
        json!([{"key": "karpenter.k8s.aws/capacity-reservation-id", "operator": "In", "values": ["cr-b"]}]),
        json!({}),
    );
    let plan = plan_launch(
        &by_id,
        &catalog,
        &amd64_ami(),
        &subnets(),
        &reservations,
        PodAddressing::SecondaryIps,
    )
    .unwrap();
    assert_eq!(plan.reservation.unwrap().id, "cr-b");

    // Without reserved capacity allowed, the reservations are left alone.
    let spot = claim(
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": TYPES},
               {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}]),
        json!({}),
    );
    let plan = plan_launch(
        &spot,
        &catalog,
        &amd64_ami(),
        &subnets(),
        &reservations,
        PodAddressing::SecondaryIps,
    )
    .unwrap();
    assert_eq!((plan.capacity_type.as_str(), plan.reservation), ("spot", None));
    assert!(plan.overrides.len() > 1);
}

#[test]
fn full_reservations_fall_back_to_spot_and_on_demand() {
    let reservations = [reservation(
        "cr-b",
        "us-west-2b",
        CapacityReservationType::Default,
    )];
    let catalog = reserved_catalog(&reservations, 0);
    let any = claim(
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
               {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved", "on-demand"]}]),
        json!({}),
    );
    let plan = plan_launch(
        &any,
        &catalog,
        &amd64_ami(),
        &subnets(),
        &reservations,
        PodAddressing::SecondaryIps,
    )
    .unwrap();
    assert_eq!(
        (plan.capacity_type.as_str(), plan.reservation),
        ("on-demand", None)
    );
    let only_reserved = claim(
        json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved"]}]),
        json!({}),
    );
    let err = plan_launch(
        &only_reserved,
        &catalog,
        &amd64_ami(),
        &subnets(),
        &reservations,
        PodAddressing::SecondaryIps,
    )
    .unwrap_err();
    assert_eq!(err.category(), "InsufficientCapacity");
}

#[test]
fn with_ip_prefixes_a_launch_is_counted_on_whole_prefixes() {
    use crate::pod_addressing::prefix_mode_max_pods;
    use karpenter_aws_catalog::aws_catalog_data;

    // The class's catalog in prefix mode: m5.large and m5.xlarge both have 110 pods.
    let mut catalog = catalog();
    for entry in catalog.iter_mut().filter(|e| TYPES.contains(&e.name.as_str())) {
        let data = aws_catalog_data().unwrap().instance_type(&entry.name).unwrap();
        entry
            .capacity
            .insert("pods".into(), prefix_mode_max_pods(data, 0) * 1000);
    }
    let claim = claim(
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": TYPES}]),
        json!({"cpu": "1"}),
    );
    let one_prefix = PodAddressing::Ipv4Prefixes { at_launch: 1 };
    let plan = plan_launch(&claim, &catalog, &amd64_ami(), &subnets(), &[], one_prefix).unwrap();
    assert_eq!(
        plan.addresses,
        BTreeMap::from([("us-west-2a".to_string(), 113), ("us-west-2b".to_string(), 113)]),
        "110 pods need 7 prefixes of 16, plus the node's own address"
    );
    let eight_prefixes = PodAddressing::Ipv4Prefixes { at_launch: 8 };
    let plan = plan_launch(&claim, &catalog, &amd64_ami(), &subnets(), &[], eight_prefixes).unwrap();
    assert_eq!(
        plan.addresses["us-west-2a"], 129,
        "what EC2 assigns at launch, at least"
    );
}

/// The types and capacity types of `plan`'s overrides, deduplicated across zones.
fn types_of(plan: &LaunchPlan) -> Vec<(String, String)> {
    let mut types: Vec<(String, String)> = plan
        .overrides
        .iter()
        .map(|o| (o.instance_type.clone(), plan.capacity_type.clone()))
        .collect();
    types.sort();
    types.dedup();
    types
}

#[test]
fn exotic_types_are_launched_only_for_claims_that_need_them() {
    const MIXED: [&str; 4] = ["m5.large", "m5.metal", "g4dn.xlarge", "inf2.xlarge"];
    let plan_for = |requirements: serde_json::Value, requests: serde_json::Value| {
        plan_launch(
            &claim(requirements, requests),
            &catalog(),
            &amd64_ami(),
            &subnets(),
            &[],
            PodAddressing::SecondaryIps,
        )
        .unwrap()
    };
    let on_demand = json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]});
    // Ordinary pods: the GPU, Neuron and metal types are not launched while m5.large can serve.
    let ordinary = plan_for(
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": MIXED}, on_demand]),
        json!({"cpu": "1"}),
    );
    assert_eq!(
        types_of(&ordinary),
        [("m5.large".to_string(), "on-demand".to_string())]
    );
    // A pod asking for a GPU: only the GPU type fits, so it is launched.
    let gpu = plan_for(
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": MIXED}, on_demand]),
        json!({"cpu": "1", "nvidia.com/gpu": "1"}),
    );
    assert_eq!(
        types_of(&gpu),
        [("g4dn.xlarge".to_string(), "on-demand".to_string())]
    );
    // Too big for the ordinary type: the exotic ones that fit are all there is.
    let big = plan_for(
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": MIXED}, on_demand]),
        json!({"cpu": "3"}),
    );
    let names: Vec<String> = types_of(&big).into_iter().map(|(t, _)| t).collect();
    assert_eq!(names, ["g4dn.xlarge", "inf2.xlarge", "m5.metal"]);
    // A claim with minValues keeps every type.
    let flexible = plan_for(
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": MIXED, "minValues": 2},
               on_demand]),
        json!({"cpu": "1"}),
    );
    assert_eq!(types_of(&flexible).len(), 4);
}

/// The catalog with the spot price of `instance_type` set to `price` in every zone.
fn with_spot_price(
    mut catalog: Vec<CatalogInstanceType>,
    instance_type: &str,
    price: f64,
) -> Vec<CatalogInstanceType> {
    for entry in catalog.iter_mut().filter(|t| t.name == instance_type) {
        for offering in entry.offerings.iter_mut().filter(|o| o.capacity_type == "spot") {
            offering.price = price;
        }
    }
    catalog
}

#[test]
fn spot_dearer_than_the_cheapest_on_demand_is_not_launched() {
    const TWO: [&str; 2] = ["m5.large", "m5.xlarge"];
    let on_demand_price = |catalog: &[CatalogInstanceType]| {
        catalog
            .iter()
            .find(|t| t.name == "m5.large")
            .and_then(|t| t.offerings.iter().find(|o| o.capacity_type == "on-demand"))
            .map(|o| o.price)
            .unwrap()
    };
    let cheapest_on_demand = on_demand_price(&catalog());
    let plan_for = |capacity_types: &[&str], catalog: &[CatalogInstanceType]| {
        plan_launch(
            &claim(
                json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": TWO},
                       {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types}]),
                json!({"cpu": "1"}),
            ),
            catalog,
            &amd64_ami(),
            &subnets(),
            &[],
            PodAddressing::SecondaryIps,
        )
        .unwrap()
    };
    // m5.large's spot dearer than its on-demand, m5.xlarge's spot cheaper: only m5.xlarge's spot is sent.
    let catalog = with_spot_price(catalog(), "m5.large", cheapest_on_demand * 1.5);
    let catalog = with_spot_price(catalog, "m5.xlarge", cheapest_on_demand * 0.9);
    let plan = plan_for(&["spot", "on-demand"], &catalog);
    assert_eq!(types_of(&plan), [("m5.xlarge".to_string(), "spot".to_string())]);
    // A claim that may only be spot still gets both.
    let spot_only = plan_for(&["spot"], &catalog);
    assert_eq!(types_of(&spot_only).len(), 2);

    // Every spot offering dearer than the cheapest on-demand one: the launch is on-demand.
    let dear = with_spot_price(catalog, "m5.xlarge", cheapest_on_demand * 1.01);
    let plan = plan_for(&["spot", "on-demand"], &dear);
    assert_eq!(plan.capacity_type, "on-demand");
    assert!(plan.overrides.iter().all(|o| o.price >= cheapest_on_demand));
    assert_eq!(plan.overrides[0].instance_type, "m5.large");
    // A spot offering priced exactly as the cheapest on-demand one stays.
    let equal = with_spot_price(dear, "m5.xlarge", cheapest_on_demand);
    assert_eq!(plan_for(&["spot", "on-demand"], &equal).capacity_type, "spot");
}

#[test]
fn a_reservation_of_an_exotic_type_is_still_launched_into() {
    // The reserved offerings are preferred first, as upstream's reserved filters run before the exotic one.
    let reservations = [CapacityReservation {
        instance_type: "g4dn.xlarge".into(),
        ..reservation("cr-gpu", "us-west-2a", CapacityReservationType::Default)
    }];
    let catalog = reserved_catalog(&reservations, 1);
    let claim = claim(
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "g4dn.xlarge"]},
               {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved", "on-demand"]}]),
        json!({"cpu": "1"}),
    );
    let plan = plan_launch(
        &claim,
        &catalog,
        &amd64_ami(),
        &subnets(),
        &reservations,
        PodAddressing::SecondaryIps,
    )
    .unwrap();
    assert_eq!(plan.capacity_type, "reserved");
    assert_eq!(plan.reservation.unwrap().id, "cr-gpu");
    assert_eq!(plan.overrides[0].instance_type, "g4dn.xlarge");
}
