use std::collections::BTreeMap;

use aws_sdk_ec2::types::{
    LaunchTemplateHttpTokensState, LaunchTemplateInstanceMetadataEndpointState,
    LaunchTemplateInstanceMetadataProtocolIpv6, ResourceType, VolumeType,
};
use karpenter_api::ec2nodeclass::{
    AmiFamily, AmiSelectorTerm, BlockDevice, BlockDeviceMapping, ConnectionTracking, CpuOptions,
    EC2NodeClassSpec, EC2NodeClassStatus, MetadataOptions, NetworkInterface, SecurityGroup,
};

use super::*;

fn class(spec: EC2NodeClassSpec) -> EC2NodeClass {
    let mut class = EC2NodeClass::new("default", spec);
    class.status = Some(EC2NodeClassStatus {
        security_groups: vec![
            SecurityGroup {
                id: "sg-1".into(),
                ..SecurityGroup::default()
            },
            SecurityGroup {
                id: "sg-2".into(),
                ..SecurityGroup::default()
            },
        ],
        instance_profile: Some("prod_123".into()),
        ..EC2NodeClassStatus::default()
    });
    class
}

fn alias(alias: &str) -> EC2NodeClassSpec {
    EC2NodeClassSpec {
        ami_selector_terms: vec![AmiSelectorTerm {
            alias: Some(alias.into()),
            ..AmiSelectorTerm::default()
        }],
        ..EC2NodeClassSpec::default()
    }
}

fn spec_of(class: &EC2NodeClass) -> LaunchTemplateSpec {
    LaunchTemplateSpec::from_node_class(class, "ami-1", "prod", "default").unwrap()
}

#[test]
fn an_unset_class_gets_upstreams_defaults() {
    let spec = spec_of(&class(alias("al2023@latest")));
    assert_eq!(
        spec.metadata_options,
        MetadataOptionsSpec {
            http_endpoint: "enabled".into(),
            http_protocol_ipv6: "disabled".into(),
            http_put_response_hop_limit: 1,
            http_tokens: "required".into(),
        }
    );
    assert_eq!(spec.block_devices, default_block_devices(AmiFamily::AL2023));
    assert!(!spec.detailed_monitoring);
    assert_eq!(spec.associate_public_ip_address, None);
    assert_eq!(spec.security_group_ids, ["sg-1", "sg-2"]);
    assert_eq!(spec.instance_profile.as_deref(), Some("prod_123"));

    let data = launch_template_data(&spec);
    let devices = data.block_device_mappings();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0].device_name(), Some("/dev/xvda"));
    let ebs = devices[0].ebs().unwrap();
    assert_eq!(
        (ebs.volume_size(), ebs.volume_type(), ebs.encrypted()),
        (Some(20), Some(&VolumeType::Gp3), Some(true))
    );
    let metadata = data.metadata_options().unwrap();
    assert_eq!(
        metadata.http_tokens(),
        Some(&LaunchTemplateHttpTokensState::Required)
    );
    assert_eq!(metadata.http_put_response_hop_limit(), Some(1));
    assert_eq!(
        metadata.http_endpoint(),
        Some(&LaunchTemplateInstanceMetadataEndpointState::Enabled)
    );
    assert_eq!(
        metadata.http_protocol_ipv6(),
        Some(&LaunchTemplateInstanceMetadataProtocolIpv6::Disabled)
    );
    assert_eq!(data.monitoring().and_then(|m| m.enabled()), Some(false));
    assert_eq!(data.security_group_ids(), ["sg-1", "sg-2"]);
    assert!(data.network_interfaces().is_empty());
    assert_eq!(
        data.iam_instance_profile().and_then(|p| p.name()),
        Some("prod_123")
    );
}

#[test]
fn the_family_picks_the_default_devices_unless_the_class_sets_its_own() {
    let devices = |spec| spec_of(&class(spec)).block_devices;
    assert_eq!(devices(alias("bottlerocket@latest")).len(), 2);
    assert_eq!(devices(alias("windows2022@latest"))[0].device_name, "/dev/sda1");
    let custom = EC2NodeClassSpec {
        ami_family: Some("Custom".into()),
        ..alias("al2023@latest")
    };
    assert!(devices(custom.clone()).is_empty());
    assert!(
        launch_template_data(&spec_of(&class(custom)))
            .block_device_mappings()
            .is_empty(),
        "no mappings: the AMI's own apply"
    );

    let own = EC2NodeClassSpec {
        block_device_mappings: Some(vec![BlockDeviceMapping {
            device_name: Some("/dev/xvda".into()),
            ebs: Some(BlockDevice {
                volume_size: Some("100Gi".into()),
                volume_type: Some("io2".into()),
                iops: Some(10_000),
                throughput: Some(500),
                encrypted: Some(true),
                kms_key_id: Some("alias/nodes".into()),
                delete_on_termination: Some(false),
                snapshot_id: Some("snap-1".into()),
                ..BlockDevice::default()
            }),
            root_volume: Some(true),
        }]),
        ..alias("bottlerocket@latest")
    };
    let data = launch_template_data(&spec_of(&class(own)));
    let [device] = data.block_device_mappings() else {
        panic!("one device, not the family's two: {data:?}");
    };
    let ebs = device.ebs().unwrap();
    assert_eq!(ebs.volume_size(), Some(100));
    assert_eq!(ebs.volume_type(), Some(&VolumeType::Io2));
    assert_eq!(ebs.iops(), Some(10_000));
    assert_eq!(ebs.throughput(), Some(500));
    assert_eq!(ebs.kms_key_id(), Some("alias/nodes"));
    assert_eq!(ebs.delete_on_termination(), Some(false));
    assert_eq!(ebs.snapshot_id(), Some("snap-1"));
}

#[test]
fn metadata_monitoring_and_public_ips_follow_the_class() {
    let spec = EC2NodeClassSpec {
        metadata_options: Some(MetadataOptions {
            http_endpoint: Some("disabled".into()),
            http_protocol_ipv6: Some("enabled".into()),
            http_put_response_hop_limit: Some(2),
            http_tokens: Some("optional".into()),
        }),
        detailed_monitoring: Some(true),
        associate_public_ip_address: Some(false),
        ..alias("al2023@latest")
    };
    let data = launch_template_data(&spec_of(&class(spec)));
    let metadata = data.metadata_options().unwrap();
    assert_eq!(
        metadata.http_tokens(),
        Some(&LaunchTemplateHttpTokensState::Optional)
    );
    assert_eq!(metadata.http_put_response_hop_limit(), Some(2));
    assert_eq!(
        metadata.http_endpoint(),
        Some(&LaunchTemplateInstanceMetadataEndpointState::Disabled)
    );
    assert_eq!(
        metadata.http_protocol_ipv6(),
        Some(&LaunchTemplateInstanceMetadataProtocolIpv6::Enabled)
    );
    assert_eq!(data.monitoring().and_then(|m| m.enabled()), Some(true));
    // The groups move onto the primary interface, which carries the public-IP switch.
    assert!(data.security_group_ids().is_empty());
    let [interface] = data.network_interfaces() else {
        panic!("one interface: {data:?}");
    };
    assert_eq!(interface.device_index(), Some(0));
    assert_eq!(interface.associate_public_ip_address(), Some(false));
    assert_eq!(interface.groups(), ["sg-1", "sg-2"]);
}

#[test]
fn templates_are_tagged_for_the_cluster_node_pool_and_class_and_tag_what_they_launch() {
    let spec = EC2NodeClassSpec {
        tags: Some(BTreeMap::from([("team".into(), "ml".into())])),
        ..alias("al2023@latest")
    };
    let template = spec_of(&class(spec));
    assert_eq!(
        template.tags,
        BTreeMap::from([
            ("eks:eks-cluster-name".to_string(), "prod".to_string()),
            (
                "karpenter.k8s.aws/ec2nodeclass".to_string(),
                "default".to_string()
            ),
            ("karpenter.sh/nodepool".to_string(), "default".to_string()),
            ("kubernetes.io/cluster/prod".to_string(), "owned".to_string()),
            ("team".to_string(), "ml".to_string()),
        ])
    );
    assert_eq!(template.node_class(), Some("default"));
    let data = launch_template_data(&template);
    let resources: Vec<&ResourceType> = data
        .tag_specifications()
        .iter()
        .filter_map(|t| t.resource_type())
        .collect();
    assert_eq!(
        resources,
        [
            &ResourceType::Instance,
            &ResourceType::Volume,
            &ResourceType::NetworkInterface
        ]
    );
    assert!(data.tag_specifications().iter().all(|t| t.tags().len() == 5));
}

#[test]
fn the_name_changes_with_anything_in_the_template() {
    let base = class(alias("al2023@latest"));
    let name = spec_of(&base).name();
    assert!(name.starts_with("karpenter.k8s.aws/"), "{name}");
    assert_eq!(name.len(), "karpenter.k8s.aws/".len() + 16);
    assert_eq!(spec_of(&base).name(), name, "stable for the same class");

    let edits: [fn(&mut EC2NodeClassSpec); 10] = [
        |s: &mut EC2NodeClassSpec| s.network_interfaces = Some(vec![primary_and_efa_only()[0].clone()]),
        |s: &mut EC2NodeClassSpec| s.ip_prefix_count = Some(1),
        |s: &mut EC2NodeClassSpec| s.connection_tracking = Some(udp_timeout(30)),
        |s: &mut EC2NodeClassSpec| s.cpu_options = Some(nested("enabled")),
        |s: &mut EC2NodeClassSpec| s.detailed_monitoring = Some(true),
        |s: &mut EC2NodeClassSpec| s.associate_public_ip_address = Some(true),
        |s: &mut EC2NodeClassSpec| {
            s.metadata_options = Some(MetadataOptions {
                http_put_response_hop_limit: Some(2),
                ..MetadataOptions::default()
            });
        },
        |s: &mut EC2NodeClassSpec| {
            s.block_device_mappings = Some(vec![BlockDeviceMapping {
                device_name: Some("/dev/xvda".into()),
                ebs: Some(BlockDevice {
                    volume_size: Some("21Gi".into()),
                    ..BlockDevice::default()
                }),
                root_volume: None,
            }]);
        },
        |s: &mut EC2NodeClassSpec| s.tags = Some(BTreeMap::from([("a".into(), "b".into())])),
        |s: &mut EC2NodeClassSpec| s.user_data = Some("#!/bin/sh\n".into()),
    ];
    let mut changed = Vec::new();
    for edit in edits {
        let mut edited = base.clone();
        edit(&mut edited.spec);
        changed.push(spec_of(&edited).name());
    }
    let other_ami = LaunchTemplateSpec::from_node_class(&base, "ami-2", "prod", "default").unwrap();
    let other_cluster = LaunchTemplateSpec::from_node_class(&base, "ami-1", "dev", "default").unwrap();
    // Each NodePool has its own templates, as upstream's (the NodePool is in their tags).
    let other_node_pool = LaunchTemplateSpec::from_node_class(&base, "ami-1", "prod", "gpu").unwrap();
    let with_efa = spec_of(&base).with_efa_interfaces(2);
    changed.extend([
        other_ami.name(),
        other_cluster.name(),
        other_node_pool.name(),
        with_efa.name(),
    ]);
    changed.push(name);
    let distinct: std::collections::BTreeSet<&String> = changed.iter().collect();
    assert_eq!(distinct.len(), changed.len(), "{changed:?}");
}

#[test]
fn a_class_without_resolved_security_groups_or_with_a_bad_device_cannot_launch() {
    let mut unresolved = class(alias("al2023@latest"));
    unresolved.status = None;
    let err = LaunchTemplateSpec::from_node_class(&unresolved, "ami-1", "prod", "default").unwrap_err();
    assert_eq!(err.to_string(), "NodeClass default is not ready: no status yet");

    let bad = class(EC2NodeClassSpec {
        block_device_mappings: Some(vec![BlockDeviceMapping {
            device_name: Some("/dev/xvda".into()),
            ebs: Some(BlockDevice {
                volume_size: Some("huge".into()),
                ..BlockDevice::default()
            }),
            root_volume: None,
        }]),
        ..alias("al2023@latest")
    });
    let err = LaunchTemplateSpec::from_node_class(&bad, "ami-1", "prod", "default").unwrap_err();
    assert_eq!(
        err.to_string(),
        "NodeClass default is not ready: spec.blockDeviceMappings[0].ebs.volumeSize \"huge\" is not a volume size"
    );
}

#[test]
fn a_reserved_launch_template_targets_its_reservation() {
    use crate::capacity_reservations::ReservationTarget;
    use karpenter_api::ec2nodeclass::CapacityReservationType;

    let plain = spec_of(&class(alias("al2023@latest")));
    let data = launch_template_data(&plain);
    assert!(data.capacity_reservation_specification().is_none());
    assert!(data.instance_market_options().is_none());

    let mut reserved = plain.clone();
    reserved.capacity_reservation = Some(ReservationTarget {
        id: "cr-0123".into(),
        reservation_type: CapacityReservationType::Default,
    });
    let data = launch_template_data(&reserved);
    assert_eq!(
        data.capacity_reservation_specification()
            .and_then(|s| s.capacity_reservation_target())
            .and_then(|t| t.capacity_reservation_id()),
        Some("cr-0123")
    );
    assert!(data.instance_market_options().is_none(), "on-demand capacity");
    assert_ne!(reserved.name(), plain.name(), "one template per reservation");

    let mut block = reserved.clone();
    block.capacity_reservation = Some(ReservationTarget {
        id: "cr-0123".into(),
        reservation_type: CapacityReservationType::CapacityBlock,
    });
    let data = launch_template_data(&block);
    assert_eq!(
        data.instance_market_options().and_then(|o| o.market_type()),
        Some(&aws_sdk_ec2::types::MarketType::CapacityBlock)
    );
    assert_ne!(block.name(), reserved.name());
}

#[test]
fn a_placement_group_template_names_the_group_and_a_pinned_partition() {
    use super::TemplatePlacement;

    let plain = spec_of(&class(alias("al2023@latest")));
    assert!(launch_template_data(&plain).placement().is_none());

    let mut grouped = plain.clone();
    grouped.placement = Some(TemplatePlacement {
        group_id: "pg-0abc".into(),
        partition: None,
    });
    let data = launch_template_data(&grouped);
    let placement = data.placement().unwrap();
    assert_eq!(
        (
            placement.group_id(),
            placement.group_name(),
            placement.partition_number()
        ),
        (Some("pg-0abc"), None, None)
    );
    assert_ne!(grouped.name(), plain.name(), "one template per group");

    let mut pinned = grouped.clone();
    pinned.placement = Some(TemplatePlacement {
        group_id: "pg-0abc".into(),
        partition: Some(2),
    });
    assert_eq!(
        launch_template_data(&pinned)
            .placement()
            .unwrap()
            .partition_number(),
        Some(2)
    );
    assert_ne!(pinned.name(), grouped.name(), "one template per pinned partition");
}

#[test]
fn a_dedicated_template_asks_for_dedicated_tenancy_and_a_shared_one_keeps_its_name() {
    let plain = spec_of(&class(alias("al2023@latest")));
    let plain_name = plain.name();
    assert!(launch_template_data(&plain).placement().is_none());

    let mut dedicated = plain.clone();
    dedicated.tenancy = Some("dedicated".into());
    let data = launch_template_data(&dedicated);
    assert_eq!(
        data.placement().and_then(|p| p.tenancy()),
        Some(&aws_sdk_ec2::types::Tenancy::Dedicated)
    );
    assert_eq!(data.placement().and_then(|p| p.group_id()), None);
    assert_ne!(
        dedicated.name(),
        plain_name,
        "dedicated instances get their own template"
    );
    assert_eq!(
        plain.name(),
        plain_name,
        "an unset tenancy leaves the name as it was"
    );

    let mut grouped = dedicated.clone();
    grouped.placement = Some(super::TemplatePlacement {
        group_id: "pg-0abc".into(),
        partition: None,
    });
    let data = launch_template_data(&grouped);
    let placement = data.placement().unwrap();
    assert_eq!(
        (placement.group_id(), placement.tenancy()),
        (Some("pg-0abc"), Some(&aws_sdk_ec2::types::Tenancy::Dedicated)),
        "a placement group and dedicated tenancy together"
    );
}

#[test]
fn templates_without_the_interface_and_cpu_fields_keep_their_names() {
    // Pinned: a template of a class that sets none of networkInterfaces, ipPrefixCount, connectionTracking or
    // cpuOptions keeps its name when fields it does not set are added, so no template is made again for them.
    // (The name moved once when templates were tagged with their NodePool, as upstream's are: each NodePool has
    // its own templates. Drift does not read template names, so nodes stayed.)
    assert_eq!(
        spec_of(&class(alias("al2023@latest"))).name(),
        "karpenter.k8s.aws/5da8f533708f0d88"
    );
}

fn interface(card: i32, device: i32, kind: &str) -> NetworkInterface {
    NetworkInterface {
        network_card_index: card,
        device_index: device,
        interface_type: kind.into(),
    }
}

fn primary_and_efa_only() -> Vec<NetworkInterface> {
    vec![
        interface(0, 0, "interface"),
        interface(0, 1, "efa-only"),
        interface(1, 0, "efa-only"),
    ]
}

fn udp_timeout(seconds: i32) -> ConnectionTracking {
    ConnectionTracking {
        udp_timeout: Some(seconds),
        ..ConnectionTracking::default()
    }
}

fn nested(state: &str) -> CpuOptions {
    CpuOptions {
        nested_virtualization: Some(state.into()),
    }
}

#[test]
fn network_interfaces_of_the_class_carry_the_groups_and_primary_only_settings() {
    let spec = EC2NodeClassSpec {
        network_interfaces: Some(primary_and_efa_only()),
        associate_public_ip_address: Some(true),
        ip_prefix_count: Some(2),
        connection_tracking: Some(ConnectionTracking {
            tcp_established_timeout: Some(600),
            ..udp_timeout(45)
        }),
        ..alias("al2023@latest")
    };
    let data = launch_template_data(&spec_of(&class(spec)));
    // EC2 refuses instance-level groups next to interfaces.
    assert!(data.security_group_ids().is_empty());
    let [primary, efa_card0, efa_card1] = data.network_interfaces() else {
        panic!("three interfaces: {data:?}");
    };
    let shape: Vec<_> = data
        .network_interfaces()
        .iter()
        .map(|i| (i.network_card_index(), i.device_index(), i.interface_type()))
        .collect();
    assert_eq!(
        shape,
        [
            (Some(0), Some(0), Some("interface")),
            (Some(0), Some(1), Some("efa-only")),
            (Some(1), Some(0), Some("efa-only")),
        ]
    );
    for each in data.network_interfaces() {
        assert_eq!(each.groups(), ["sg-1", "sg-2"]);
    }
    assert_eq!(primary.associate_public_ip_address(), Some(true));
    assert_eq!(primary.ipv4_prefix_count(), Some(2));
    let tracking = primary.connection_tracking_specification().unwrap();
    assert_eq!(tracking.tcp_established_timeout(), Some(600));
    assert_eq!(tracking.udp_timeout(), Some(45));
    assert_eq!(tracking.udp_stream_timeout(), None);
    // EFA-only interfaces have no IP addresses: no public IP, prefixes or connection tracking.
    for efa_only in [efa_card0, efa_card1] {
        assert_eq!(efa_only.associate_public_ip_address(), None);
        assert_eq!(efa_only.ipv4_prefix_count(), None);
        assert!(efa_only.connection_tracking_specification().is_none());
    }
}

#[test]
fn ip_prefixes_alone_get_a_primary_interface_with_the_groups() {
    let spec = EC2NodeClassSpec {
        ip_prefix_count: Some(1),
        ..alias("al2023@latest")
    };
    let data = launch_template_data(&spec_of(&class(spec)));
    assert!(data.security_group_ids().is_empty());
    let [primary] = data.network_interfaces() else {
        panic!("one interface: {data:?}");
    };
    assert_eq!(primary.device_index(), Some(0));
    assert_eq!(primary.ipv4_prefix_count(), Some(1));
    assert_eq!(primary.groups(), ["sg-1", "sg-2"]);
    assert_eq!(primary.associate_public_ip_address(), None);
    assert!(primary.connection_tracking_specification().is_none());
}

#[test]
fn connection_tracking_alone_gets_a_primary_interface() {
    let spec = EC2NodeClassSpec {
        connection_tracking: Some(udp_timeout(30)),
        ..alias("al2023@latest")
    };
    let data = launch_template_data(&spec_of(&class(spec)));
    assert!(data.security_group_ids().is_empty());
    let [primary] = data.network_interfaces() else {
        panic!("one interface: {data:?}");
    };
    let tracking = primary.connection_tracking_specification().unwrap();
    assert_eq!(tracking.udp_timeout(), Some(30));
    assert_eq!(primary.ipv4_prefix_count(), None);
}

#[test]
fn a_class_without_interface_settings_keeps_groups_on_the_instance() {
    let data = launch_template_data(&spec_of(&class(alias("al2023@latest"))));
    assert_eq!(data.security_group_ids(), ["sg-1", "sg-2"]);
    assert!(data.network_interfaces().is_empty());
    assert!(data.cpu_options().is_none());
}

#[test]
fn nested_virtualization_becomes_the_templates_cpu_option() {
    for state in ["enabled", "disabled"] {
        let spec = EC2NodeClassSpec {
            cpu_options: Some(nested(state)),
            ..alias("al2023@latest")
        };
        let data = launch_template_data(&spec_of(&class(spec)));
        let nested_state = data.cpu_options().and_then(|c| c.nested_virtualization());
        assert_eq!(nested_state.map(|s| s.as_str()), Some(state));
        // A CPU option does not need an interface.
        assert_eq!(data.security_group_ids(), ["sg-1", "sg-2"]);
    }
}

#[test]
fn an_efa_claim_gets_one_efa_interface_per_card() {
    let spec = spec_of(&class(EC2NodeClassSpec {
        associate_public_ip_address: Some(false),
        ..alias("al2023@latest")
    }))
    .with_efa_interfaces(4);
    let data = launch_template_data(&spec);
    let shape: Vec<_> = data
        .network_interfaces()
        .iter()
        .map(|i| (i.network_card_index(), i.device_index(), i.interface_type()))
        .collect();
    assert_eq!(
        shape,
        [
            (Some(0), Some(0), Some("efa")),
            (Some(1), Some(1), Some("efa")),
            (Some(2), Some(1), Some("efa")),
            (Some(3), Some(1), Some("efa")),
        ]
    );
    assert!(data.security_group_ids().is_empty());
    assert!(
        data.network_interfaces()
            .iter()
            .all(|i| i.groups() == ["sg-1", "sg-2"])
    );
    let public: Vec<_> = data
        .network_interfaces()
        .iter()
        .map(|i| i.associate_public_ip_address())
        .collect();
    assert_eq!(public, [Some(false), None, None, None]);
}

#[test]
fn the_classes_own_interfaces_win_over_efa_ones() {
    let with_interfaces = spec_of(&class(EC2NodeClassSpec {
        network_interfaces: Some(primary_and_efa_only()),
        ..alias("al2023@latest")
    }));
    let unchanged = with_interfaces.clone().with_efa_interfaces(4);
    assert_eq!(unchanged, with_interfaces);
    // No EFA on the type: nothing changes either.
    let plain = spec_of(&class(alias("al2023@latest")));
    assert_eq!(plain.clone().with_efa_interfaces(0), plain);
}

fn ipv6_fields(
    interface: &aws_sdk_ec2::types::LaunchTemplateInstanceNetworkInterfaceSpecificationRequest,
) -> (Option<bool>, Option<i32>, Option<i32>, Option<i32>) {
    (
        interface.primary_ipv6(),
        interface.ipv6_address_count(),
        interface.ipv6_prefix_count(),
        interface.ipv4_prefix_count(),
    )
}

#[test]
fn an_ipv6_cluster_gives_the_primary_interface_a_primary_ipv6_address() {
    let ipv4 = spec_of(&class(alias("al2023@latest")));
    let spec = ipv4.clone().with_ip_family(IpFamily::Ipv6);
    let data = launch_template_data(&spec);
    // Upstream always sends the primary interface; an IPv6 cluster needs it for the address.
    assert!(data.security_group_ids().is_empty());
    let [primary] = data.network_interfaces() else {
        panic!("one interface: {data:?}");
    };
    assert_eq!(primary.device_index(), Some(0));
    assert_eq!(primary.network_card_index(), None);
    assert_eq!(primary.interface_type(), None);
    assert_eq!(primary.groups(), ["sg-1", "sg-2"]);
    assert_eq!(ipv6_fields(primary), (Some(true), Some(1), None, None));
    assert_eq!(primary.associate_public_ip_address(), None);
    // The IPv6 metadata endpoint follows the class on either family: disabled by the CRD's default.
    assert_eq!(
        data.metadata_options().and_then(|m| m.http_protocol_ipv6()),
        Some(&LaunchTemplateInstanceMetadataProtocolIpv6::Disabled)
    );
    let enabled = spec_of(&class(EC2NodeClassSpec {
        metadata_options: Some(MetadataOptions {
            http_protocol_ipv6: Some("enabled".into()),
            ..MetadataOptions::default()
        }),
        ..alias("al2023@latest")
    }))
    .with_ip_family(IpFamily::Ipv6);
    assert_eq!(
        launch_template_data(&enabled)
            .metadata_options()
            .and_then(|m| m.http_protocol_ipv6()),
        Some(&LaunchTemplateInstanceMetadataProtocolIpv6::Enabled)
    );
    // A different template than the IPv4 one, so a cluster's templates never mix the families.
    assert_ne!(spec.name(), ipv4.name());
}

#[test]
fn an_ipv4_cluster_keeps_its_templates_and_names() {
    let plain = spec_of(&class(alias("al2023@latest")));
    assert_eq!(plain.ip_family, IpFamily::Ipv4);
    assert_eq!(plain.clone().with_ip_family(IpFamily::Ipv4), plain);
    assert_eq!(
        plain.with_ip_family(IpFamily::Ipv4).name(),
        "karpenter.k8s.aws/5da8f533708f0d88"
    );
    let prefixed = spec_of(&class(EC2NodeClassSpec {
        ip_prefix_count: Some(3),
        ..alias("al2023@latest")
    }));
    // The prefix count keeps the key it was hashed under before it could mean IPv6 prefixes.
    let json = serde_json::to_string(&prefixed).unwrap();
    assert!(json.contains("\"ipv4_prefix_count\":3"), "{json}");
    assert!(!json.contains("ip_family"), "{json}");
    let data = launch_template_data(&prefixed);
    let [primary] = data.network_interfaces() else {
        panic!("one interface: {data:?}");
    };
    assert_eq!(ipv6_fields(primary), (None, None, None, Some(3)));
}

#[test]
fn an_ipv6_clusters_prefixes_are_ipv6_prefixes_on_every_interface_with_addresses() {
    let mut interfaces = primary_and_efa_only();
    interfaces.push(interface(1, 1, "interface"));
    let spec = spec_of(&class(EC2NodeClassSpec {
        network_interfaces: Some(interfaces),
        associate_public_ip_address: Some(true),
        ip_prefix_count: Some(2),
        ..alias("al2023@latest")
    }))
    .with_ip_family(IpFamily::Ipv6);
    let data = launch_template_data(&spec);
    let fields: Vec<_> = data.network_interfaces().iter().map(ipv6_fields).collect();
    assert_eq!(
        fields,
        [
            (Some(true), Some(1), Some(2), None),
            // EFA-only interfaces have no IP addresses, so nothing IPv6 either.
            (None, None, None, None),
            (None, None, None, None),
            (Some(true), Some(1), Some(2), None),
        ]
    );
    // The public-IP switch stays where it was.
    let public: Vec<_> = data
        .network_interfaces()
        .iter()
        .map(|i| i.associate_public_ip_address())
        .collect();
    assert_eq!(public, [Some(true), None, None, None]);

    let prefixes_only = spec_of(&class(EC2NodeClassSpec {
        ip_prefix_count: Some(0),
        ..alias("al2023@latest")
    }))
    .with_ip_family(IpFamily::Ipv6);
    let data = launch_template_data(&prefixes_only);
    let [primary] = data.network_interfaces() else {
        panic!("one interface: {data:?}");
    };
    assert_eq!(ipv6_fields(primary), (Some(true), Some(1), Some(0), None));
}

#[test]
fn an_ipv6_clusters_efa_interfaces_each_get_an_ipv6_address() {
    let spec = spec_of(&class(EC2NodeClassSpec {
        ip_prefix_count: Some(1),
        ..alias("al2023@latest")
    }))
    .with_ip_family(IpFamily::Ipv6)
    .with_efa_interfaces(2);
    let data = launch_template_data(&spec);
    let fields: Vec<_> = data.network_interfaces().iter().map(ipv6_fields).collect();
    assert_eq!(
        fields,
        [
            (Some(true), Some(1), Some(1), None),
            (Some(true), Some(1), Some(1), None),
        ]
    );
}
