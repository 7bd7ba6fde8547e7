//! The capacity settings an EC2NodeClass implies (AMI family, kubelet, root volume, instance store policy),
//! with the controller's VM memory overhead and reserved ENIs: what `InstanceTypeProvider::list` computes
//! capacity and overhead under for that class. The class's `efa-only` network interfaces count as reserved
//! ENIs: they take interface slots but carry no pod addresses.

use karpenter_api::ec2nodeclass::EC2NodeClass;
use karpenter_aws_catalog::{AmiFamily, AwsCapacitySettings};

use crate::launch_template::interfaces::EFA_ONLY;
use crate::settings::AwsSettings;

/// Core's capacity settings for `node_class` under `settings`.
pub fn capacity_settings(node_class: &EC2NodeClass, settings: &AwsSettings) -> AwsCapacitySettings {
    let spec = &node_class.spec;
    let family = spec.ami_family().as_str();
    let ami_family = AmiFamily::ALL
        .into_iter()
        .find(|f| f.as_str() == family)
        .unwrap_or_default();
    let kubelet = spec.kubelet.clone().unwrap_or_default();
    let non_negative = |v: Option<i32>| v.and_then(|v| u32::try_from(v).ok());
    let efa_only_enis = spec
        .network_interfaces
        .iter()
        .flatten()
        .filter(|i| i.interface_type == EFA_ONLY)
        .count();
    AwsCapacitySettings {
        ami_family,
        vm_memory_overhead_percent: settings.vm_memory_overhead_percent,
        reserved_enis: settings
            .reserved_enis_u32()
            .saturating_add(u32::try_from(efa_only_enis).unwrap_or(u32::MAX)),
        max_pods: non_negative(kubelet.max_pods),
        pods_per_core: non_negative(kubelet.pods_per_core),
        kube_reserved: kubelet.kube_reserved.unwrap_or_default(),
        system_reserved: kubelet.system_reserved.unwrap_or_default(),
        eviction_hard: kubelet.eviction_hard.unwrap_or_default(),
        root_volume_bytes: spec
            .root_volume()
            .and_then(|m| m.ebs.as_ref())
            .and_then(|ebs| ebs.volume_size_bytes()),
        instance_store_raid0: spec.instance_store_raid0(),
    }
}

/// Core's capacity settings for an instance whose class is unknown: AL2023 defaults under `settings`.
pub fn default_capacity_settings(settings: &AwsSettings) -> AwsCapacitySettings {
    AwsCapacitySettings {
        vm_memory_overhead_percent: settings.vm_memory_overhead_percent,
        reserved_enis: settings.reserved_enis_u32(),
        ..AwsCapacitySettings::default()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use karpenter_api::ec2nodeclass::{
        AmiSelectorTerm, BlockDevice, BlockDeviceMapping, EC2NodeClassSpec, KubeletConfiguration,
        NetworkInterface,
    };

    use super::*;

    #[test]
    fn the_class_shapes_capacity() {
        let class = EC2NodeClass::new(
            "c",
            EC2NodeClassSpec {
                ami_selector_terms: vec![AmiSelectorTerm {
                    alias: Some("bottlerocket@latest".into()),
                    ..Default::default()
                }],
                kubelet: Some(KubeletConfiguration {
                    max_pods: Some(50),
                    kube_reserved: Some(BTreeMap::from([("cpu".into(), "200m".into())])),
                    ..Default::default()
                }),
                block_device_mappings: Some(vec![BlockDeviceMapping {
                    device_name: Some("/dev/xvdb".into()),
                    ebs: Some(BlockDevice {
                        volume_size: Some("100Gi".into()),
                        ..Default::default()
                    }),
                    root_volume: Some(true),
                }]),
                ..Default::default()
            },
        );
        let settings = AwsSettings {
            reserved_enis: 1,
            vm_memory_overhead_percent: 0.1,
            ..AwsSettings::default()
        };
        let capacity = capacity_settings(&class, &settings);
        assert_eq!(capacity.ami_family, AmiFamily::Bottlerocket);
        assert_eq!(capacity.max_pods, Some(50));
        assert_eq!(capacity.reserved_enis, 1);
        assert_eq!(capacity.vm_memory_overhead_percent, 0.1);
        assert_eq!(capacity.kube_reserved["cpu"], "200m");
        assert_eq!(capacity.root_volume_bytes, Some(100 * 1024 * 1024 * 1024));
        assert!(capacity.resolve().is_ok());
    }

    #[test]
    fn efa_only_interfaces_are_not_counted_on_for_pod_addresses() {
        let interface = |card: i32, device: i32, kind: &str| NetworkInterface {
            network_card_index: card,
            device_index: device,
            interface_type: kind.into(),
        };
        let class = EC2NodeClass::new(
            "efa",
            EC2NodeClassSpec {
                network_interfaces: Some(vec![
                    interface(0, 0, "interface"),
                    interface(0, 1, "efa-only"),
                    interface(1, 0, "efa-only"),
                ]),
                ..Default::default()
            },
        );
        let settings = AwsSettings {
            reserved_enis: 1,
            ..AwsSettings::default()
        };
        assert_eq!(capacity_settings(&class, &settings).reserved_enis, 3);
        let plain = EC2NodeClass::new("plain", EC2NodeClassSpec::default());
        assert_eq!(capacity_settings(&plain, &settings).reserved_enis, 1);
    }
}
