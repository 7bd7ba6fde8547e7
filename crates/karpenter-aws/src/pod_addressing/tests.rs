use std::time::Instant;

use karpenter_api::ec2nodeclass::EC2NodeClassSpec;
use karpenter_aws_catalog::{AmiFamily, AwsCapacitySettings, aws_catalog_data};
use karpenter_core::catalog::CatalogInstanceType;

use super::*;
use crate::instance_types::catalog_instance_type;
use crate::pricing::PricingProvider;
use crate::unavailable_offerings::UnavailableOfferings;

const PREFIXES: PodAddressing = PodAddressing::Ipv4Prefixes { at_launch: 1 };

fn data(name: &str) -> &'static AwsInstanceTypeData {
    aws_catalog_data().unwrap().instance_type(name).unwrap()
}

/// The facts the formulas read, as the crate's embedded catalog (upstream's vpclimits table) has them.
fn network_facts(name: &str) -> (i64, i64, i64, &'static str) {
    let t = data(name);
    (t.max_enis, t.ipv4_per_eni, t.vcpu, t.hypervisor.as_str())
}

/// Type `name` as a catalog entry of us-west-2 under `capacity` and `addressing`.
fn entry(name: &str, capacity: &AwsCapacitySettings, addressing: PodAddressing) -> CatalogInstanceType {
    let catalog = aws_catalog_data().unwrap();
    let region = &catalog.regions["us-west-2"];
    let settings = capacity.resolve().unwrap();
    let t = data(name);
    catalog_instance_type(
        t,
        "us-west-2",
        region,
        &addressing.settings_for(t, &settings),
        &PricingProvider::new("us-west-2", false).unwrap(),
        &UnavailableOfferings::default(),
        Instant::now(),
    )
}

fn pods(entry: &CatalogInstanceType) -> i64 {
    entry.capacity["pods"] / 1000
}

#[test]
fn prefix_mode_max_pods_follow_the_calculator_for_catalog_types() {
    // m5.large: 3 ENIs × (10 − 1) × 16 + 2 = 434, capped at 110 (2 vCPUs).
    assert_eq!(network_facts("m5.large"), (3, 10, 2, "nitro"));
    assert_eq!(prefix_limited_pods(3, 10, 0), 434);
    assert_eq!(prefix_mode_max_pods(data("m5.large"), 0), 110);
    // m5.24xlarge: 15 × 49 × 16 + 2 = 11762, capped at 250 (96 vCPUs).
    assert_eq!(network_facts("m5.24xlarge"), (15, 50, 96, "nitro"));
    assert_eq!(prefix_limited_pods(15, 50, 0), 11762);
    assert_eq!(prefix_mode_max_pods(data("m5.24xlarge"), 0), 250);
    // t3.nano: 2 × 1 × 16 + 2 = 34, under the cap.
    assert_eq!(network_facts("t3.nano"), (2, 2, 2, "nitro"));
    assert_eq!(prefix_mode_max_pods(data("t3.nano"), 0), 34);
    // The cap moves above 30 vCPUs: m5.4xlarge (16) keeps 110, m5.8xlarge (32) gets 250.
    assert_eq!(network_facts("m5.4xlarge"), (8, 30, 16, "nitro"));
    assert_eq!(prefix_mode_max_pods(data("m5.4xlarge"), 0), 110);
    assert_eq!(network_facts("m5.8xlarge"), (8, 30, 32, "nitro"));
    assert_eq!(prefix_mode_max_pods(data("m5.8xlarge"), 0), 250);
    // m4.large is Xen: no prefixes, the ENI formula 2 × 9 + 2 = 20.
    assert_eq!(network_facts("m4.large"), (2, 10, 2, "xen"));
    assert_eq!(prefix_mode_max_pods(data("m4.large"), 0), 20);
    // Reserved ENIs carry no prefixes: t3.nano with one reserved is 1 × 1 × 16 + 2 = 18; none left is 0.
    assert_eq!(prefix_mode_max_pods(data("t3.nano"), 1), 18);
    assert_eq!(prefix_mode_max_pods(data("t3.nano"), 2), 0);
}

#[test]
fn a_class_with_ip_prefixes_gets_prefix_mode_max_pods_in_its_catalog() {
    let default = AwsCapacitySettings::default();
    assert_eq!(
        pods(&entry("m5.large", &default, PodAddressing::SecondaryIps)),
        29
    );
    let large = entry("m5.large", &default, PREFIXES);
    assert_eq!(pods(&large), 110);
    assert_eq!(large.allocatable()["pods"], 110_000);
    // AL2023 sizes kube-reserved memory from the ENI-limited count whatever max pods is, as with kubelet
    // maxPods: 11 × 29 + 255 MiB.
    assert_eq!(large.overhead.kube_reserved["memory"], 574 * 1024 * 1024 * 1000);
    assert_eq!(pods(&entry("m5.24xlarge", &default, PREFIXES)), 250);
    assert_eq!(pods(&entry("t3.nano", &default, PREFIXES)), 34);

    // Bottlerocket sizes it from the node's max pods: 11 × 110 + 255 MiB.
    let bottlerocket = AwsCapacitySettings {
        ami_family: AmiFamily::Bottlerocket,
        ..AwsCapacitySettings::default()
    };
    let entry_br = entry("m5.large", &bottlerocket, PREFIXES);
    assert_eq!(pods(&entry_br), 110);
    assert_eq!(
        entry_br.overhead.kube_reserved["memory"],
        1465 * 1024 * 1024 * 1000
    );

    // kubelet maxPods wins, podsPerCore still caps, Windows keeps 110, reserved ENIs count.
    let max_pods = AwsCapacitySettings {
        max_pods: Some(60),
        ..AwsCapacitySettings::default()
    };
    assert_eq!(pods(&entry("m5.24xlarge", &max_pods, PREFIXES)), 60);
    let per_core = AwsCapacitySettings {
        pods_per_core: Some(20),
        ..AwsCapacitySettings::default()
    };
    assert_eq!(pods(&entry("m5.large", &per_core, PREFIXES)), 40);
    let windows = AwsCapacitySettings {
        ami_family: AmiFamily::Windows2022,
        ..AwsCapacitySettings::default()
    };
    assert_eq!(pods(&entry("m5.24xlarge", &windows, PREFIXES)), 110);
    let reserved = AwsCapacitySettings {
        reserved_enis: 1,
        ..AwsCapacitySettings::default()
    };
    assert_eq!(pods(&entry("t3.nano", &reserved, PREFIXES)), 18);
}

#[test]
fn ip_prefix_count_selects_prefix_mode() {
    let spec = |count: Option<i32>| EC2NodeClassSpec {
        ip_prefix_count: count,
        ..EC2NodeClassSpec::default()
    };
    assert_eq!(PodAddressing::of_class(&spec(None)), PodAddressing::SecondaryIps);
    assert_eq!(
        PodAddressing::of_class(&spec(Some(0))),
        PodAddressing::SecondaryIps
    );
    assert_eq!(
        PodAddressing::of_class(&spec(Some(2))),
        PodAddressing::Ipv4Prefixes { at_launch: 2 }
    );
}

#[test]
fn a_launch_uses_whole_prefixes_and_its_own_address() {
    // One address per pod, at least the node's own.
    assert_eq!(PodAddressing::SecondaryIps.addresses_per_instance(29), 29);
    assert_eq!(PodAddressing::SecondaryIps.addresses_per_instance(0), 1);
    // 110 pods need 7 prefixes: 1 + 7 × 16.
    assert_eq!(PREFIXES.addresses_per_instance(110), 113);
    // 34 pods need 3.
    assert_eq!(PREFIXES.addresses_per_instance(34), 49);
    // 250 pods need 16.
    assert_eq!(PREFIXES.addresses_per_instance(250), 257);
    // Never fewer than EC2 assigns at launch.
    let ten = PodAddressing::Ipv4Prefixes { at_launch: 10 };
    assert_eq!(ten.addresses_per_instance(110), 161);
    assert_eq!(ten.addresses_per_instance(0), 161);
    assert_eq!(prefixes_for(16), 1);
    assert_eq!(prefixes_for(17), 2);
    assert_eq!(prefixes_for(-3), 0);
}
