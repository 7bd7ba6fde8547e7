//! The block devices of a launch template: an EC2NodeClass's `blockDeviceMappings` in EC2's units, or, when
//! the class sets none, its AMI family's defaults (upstream v1's): an encrypted 20 GiB gp3 root volume for
//! AL2 and AL2023, a 4 GiB OS volume plus a 20 GiB data volume for Bottlerocket, a 50 GiB root volume for
//! Windows, and nothing for Custom (the AMI's own mappings apply).
//!
//! Sizes: EBS takes whole GiB. A class's quantity is converted exactly and rounded up (`20Gi` is 20,
//! `100G` is 94), so the volume is never smaller than asked for. Upstream scales to decimal gigabytes
//! instead, which gives 22 for `20Gi`; we keep the volume equal to the quantity the capacity maths uses.

use karpenter_api::ec2nodeclass::{AmiFamily, BlockDeviceMapping};
use serde::Serialize;

const GIB: i64 = 1024 * 1024 * 1024;

/// One block device of a template, in the units CreateLaunchTemplate takes. Unset fields are left to EC2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct BlockDeviceSpec {
    pub device_name: String,
    pub volume_size_gib: Option<i32>,
    pub volume_type: Option<String>,
    pub iops: Option<i32>,
    /// MiB/s.
    pub throughput: Option<i32>,
    pub encrypted: Option<bool>,
    pub kms_key_id: Option<String>,
    pub delete_on_termination: Option<bool>,
    pub snapshot_id: Option<String>,
    /// MiB/s at which the snapshot is loaded.
    pub volume_initialization_rate: Option<i32>,
}

/// An encrypted gp3 volume of `size_gib` at `device_name`, as every family default is.
fn encrypted_gp3(device_name: &str, size_gib: i32) -> BlockDeviceSpec {
    BlockDeviceSpec {
        device_name: device_name.into(),
        volume_size_gib: Some(size_gib),
        volume_type: Some("gp3".into()),
        encrypted: Some(true),
        ..BlockDeviceSpec::default()
    }
}

/// The block devices of `family` when the class sets none.
pub fn default_block_devices(family: AmiFamily) -> Vec<BlockDeviceSpec> {
    match family {
        AmiFamily::AL2 | AmiFamily::AL2023 => vec![encrypted_gp3("/dev/xvda", 20)],
        // The OS volume stays small; containers and the kubelet live on the data volume.
        AmiFamily::Bottlerocket => vec![encrypted_gp3("/dev/xvda", 4), encrypted_gp3("/dev/xvdb", 20)],
        AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => {
            vec![encrypted_gp3("/dev/sda1", 50)]
        }
        AmiFamily::Custom => Vec::new(),
    }
}

/// Whole GiB holding `bytes`, rounded up.
fn gib_ceil(bytes: i64) -> i64 {
    bytes.div_euclid(GIB) + i64::from(bytes.rem_euclid(GIB) != 0)
}

/// The class's mappings in EC2's units. The error names the field (`spec.blockDeviceMappings[1].ebs.iops`).
pub fn from_mappings(mappings: &[BlockDeviceMapping]) -> Result<Vec<BlockDeviceSpec>, String> {
    mappings
        .iter()
        .enumerate()
        .map(|(index, mapping)| {
            let field = |name: &str| format!("spec.blockDeviceMappings[{index}].{name}");
            let device_name = mapping
                .device_name
                .clone()
                .filter(|name| !name.is_empty())
                .ok_or_else(|| format!("{} is required", field("deviceName")))?;
            let Some(ebs) = &mapping.ebs else {
                return Ok(BlockDeviceSpec {
                    device_name,
                    ..BlockDeviceSpec::default()
                });
            };
            let in_range = |name: &str, value: Option<i64>| -> Result<Option<i32>, String> {
                value
                    .map(|v| {
                        i32::try_from(v)
                            .ok()
                            .filter(|v| *v >= 0)
                            .ok_or_else(|| format!("{} {v} is out of range", field(name)))
                    })
                    .transpose()
            };
            let volume_size_gib = match ebs.volume_size.as_deref() {
                None => None,
                Some(text) => {
                    let bytes = ebs.volume_size_bytes().filter(|b| *b > 0).ok_or_else(|| {
                        format!("{} {text:?} is not a volume size", field("ebs.volumeSize"))
                    })?;
                    in_range("ebs.volumeSize", Some(gib_ceil(bytes)))?
                }
            };
            Ok(BlockDeviceSpec {
                device_name,
                volume_size_gib,
                volume_type: ebs.volume_type.clone(),
                iops: in_range("ebs.iops", ebs.iops)?,
                throughput: in_range("ebs.throughput", ebs.throughput)?,
                encrypted: ebs.encrypted,
                kms_key_id: ebs.kms_key_id.clone(),
                delete_on_termination: ebs.delete_on_termination,
                snapshot_id: ebs.snapshot_id.clone(),
                volume_initialization_rate: ebs.volume_initialization_rate,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use karpenter_api::ec2nodeclass::BlockDevice;

    use super::*;

    #[test]
    fn families_default_to_upstreams_encrypted_gp3_volumes() {
        let sizes = |family| {
            default_block_devices(family)
                .into_iter()
                .map(|d| {
                    assert_eq!(d.volume_type.as_deref(), Some("gp3"));
                    assert_eq!(d.encrypted, Some(true));
                    (d.device_name, d.volume_size_gib.unwrap())
                })
                .collect::<Vec<_>>()
        };
        let root = |name: &str, size| vec![(name.to_string(), size)];
        assert_eq!(sizes(AmiFamily::AL2), root("/dev/xvda", 20));
        assert_eq!(sizes(AmiFamily::AL2023), root("/dev/xvda", 20));
        assert_eq!(
            sizes(AmiFamily::Bottlerocket),
            [("/dev/xvda".to_string(), 4), ("/dev/xvdb".to_string(), 20)]
        );
        for windows in [
            AmiFamily::Windows2019,
            AmiFamily::Windows2022,
            AmiFamily::Windows2025,
        ] {
            assert_eq!(sizes(windows), root("/dev/sda1", 50));
        }
        assert!(sizes(AmiFamily::Custom).is_empty(), "the AMI's own devices apply");
    }

    #[test]
    fn class_mappings_keep_every_ebs_field_and_round_sizes_up_to_whole_gib() {
        let mapping = |size: &str| BlockDeviceMapping {
            device_name: Some("/dev/xvdb".into()),
            ebs: Some(BlockDevice {
                volume_size: Some(size.into()),
                ..BlockDevice::default()
            }),
            root_volume: None,
        };
        let full = BlockDeviceMapping {
            device_name: Some("/dev/xvda".into()),
            ebs: Some(BlockDevice {
                delete_on_termination: Some(false),
                encrypted: Some(true),
                iops: Some(6000),
                kms_key_id: Some("arn:aws:kms:us-west-2:111122223333:key/k".into()),
                snapshot_id: Some("snap-0123".into()),
                throughput: Some(250),
                volume_initialization_rate: Some(200),
                volume_size: Some("100Gi".into()),
                volume_type: Some("io2".into()),
            }),
            root_volume: Some(true),
        };
        let specs = from_mappings(&[full, mapping("100G"), mapping("1Ti")]).unwrap();
        assert_eq!(
            specs[0],
            BlockDeviceSpec {
                device_name: "/dev/xvda".into(),
                volume_size_gib: Some(100),
                volume_type: Some("io2".into()),
                iops: Some(6000),
                throughput: Some(250),
                encrypted: Some(true),
                kms_key_id: Some("arn:aws:kms:us-west-2:111122223333:key/k".into()),
                delete_on_termination: Some(false),
                snapshot_id: Some("snap-0123".into()),
                volume_initialization_rate: Some(200),
            }
        );
        assert_eq!(specs[1].volume_size_gib, Some(94), "100 GB is 93.1 GiB");
        assert_eq!(specs[2].volume_size_gib, Some(1024));
    }

    #[test]
    fn unusable_mappings_are_errors_naming_the_field() {
        let bad_size = BlockDeviceMapping {
            device_name: Some("/dev/xvda".into()),
            ebs: Some(BlockDevice {
                volume_size: Some("lots".into()),
                ..BlockDevice::default()
            }),
            root_volume: None,
        };
        let no_name = BlockDeviceMapping {
            device_name: None,
            ..bad_size.clone()
        };
        let huge_iops = BlockDeviceMapping {
            ebs: Some(BlockDevice {
                iops: Some(i64::from(i32::MAX) + 1),
                volume_size: Some("20Gi".into()),
                ..BlockDevice::default()
            }),
            ..bad_size.clone()
        };
        assert_eq!(
            from_mappings(&[bad_size]).unwrap_err(),
            "spec.blockDeviceMappings[0].ebs.volumeSize \"lots\" is not a volume size"
        );
        let named = BlockDeviceMapping {
            device_name: Some("/dev/xvda".into()),
            ebs: None,
            root_volume: None,
        };
        assert_eq!(
            from_mappings(&[named.clone(), no_name]).unwrap_err(),
            "spec.blockDeviceMappings[1].deviceName is required"
        );
        assert_eq!(
            from_mappings(&[named, huge_iops]).unwrap_err(),
            "spec.blockDeviceMappings[1].ebs.iops 2147483648 is out of range"
        );
    }
}
