//! A [`LaunchTemplateSpec`] as EC2's CreateLaunchTemplate request, and creating it.

use std::collections::BTreeMap;

use aws_sdk_ec2::operation::create_launch_template::builders::CreateLaunchTemplateFluentBuilder;

use aws_sdk_ec2::types::{
    CapacityReservationTarget, LaunchTemplateBlockDeviceMappingRequest,
    LaunchTemplateCapacityReservationSpecificationRequest, LaunchTemplateCpuOptionsRequest,
    LaunchTemplateEbsBlockDeviceRequest, LaunchTemplateHttpTokensState,
    LaunchTemplateIamInstanceProfileSpecificationRequest, LaunchTemplateInstanceMarketOptionsRequest,
    LaunchTemplateInstanceMetadataEndpointState, LaunchTemplateInstanceMetadataOptionsRequest,
    LaunchTemplateInstanceMetadataProtocolIpv6, LaunchTemplatePlacementRequest,
    LaunchTemplateTagSpecificationRequest, LaunchTemplatesMonitoringRequest, MarketType,
    NestedVirtualizationSpecification, RequestLaunchTemplateData, ResourceType, Tag, TagSpecification,
    Tenancy, VolumeType,
};

use super::interfaces::interface_requests;
use super::{BlockDeviceSpec, LaunchTemplateSpec, MetadataOptionsSpec};
use crate::error::AwsError;

fn tags(map: &BTreeMap<String, String>) -> Vec<Tag> {
    map.iter()
        .map(|(key, value)| Tag::builder().key(key).value(value).build())
        .collect()
}

fn block_device(device: &BlockDeviceSpec) -> LaunchTemplateBlockDeviceMappingRequest {
    let ebs = LaunchTemplateEbsBlockDeviceRequest::builder()
        .set_volume_size(device.volume_size_gib)
        .set_volume_type(device.volume_type.as_deref().map(VolumeType::from))
        .set_iops(device.iops)
        .set_throughput(device.throughput)
        .set_encrypted(device.encrypted)
        .set_kms_key_id(device.kms_key_id.clone())
        .set_delete_on_termination(device.delete_on_termination)
        .set_snapshot_id(device.snapshot_id.clone())
        .set_volume_initialization_rate(device.volume_initialization_rate)
        .build();
    LaunchTemplateBlockDeviceMappingRequest::builder()
        .device_name(&device.device_name)
        .ebs(ebs)
        .build()
}

fn metadata_options(options: &MetadataOptionsSpec) -> LaunchTemplateInstanceMetadataOptionsRequest {
    LaunchTemplateInstanceMetadataOptionsRequest::builder()
        .http_endpoint(LaunchTemplateInstanceMetadataEndpointState::from(
            options.http_endpoint.as_str(),
        ))
        .http_protocol_ipv6(LaunchTemplateInstanceMetadataProtocolIpv6::from(
            options.http_protocol_ipv6.as_str(),
        ))
        .http_put_response_hop_limit(options.http_put_response_hop_limit)
        .http_tokens(LaunchTemplateHttpTokensState::from(options.http_tokens.as_str()))
        .build()
}

/// The template's `LaunchTemplateData`.
pub fn launch_template_data(spec: &LaunchTemplateSpec) -> RequestLaunchTemplateData {
    let mut data = RequestLaunchTemplateData::builder()
        .image_id(&spec.image_id)
        .metadata_options(metadata_options(&spec.metadata_options))
        .monitoring(
            LaunchTemplatesMonitoringRequest::builder()
                .enabled(spec.detailed_monitoring)
                .build(),
        )
        .set_block_device_mappings(
            (!spec.block_devices.is_empty()).then(|| spec.block_devices.iter().map(block_device).collect()),
        )
        .set_user_data(spec.user_data.clone());
    data = match interface_requests(spec) {
        // EC2 rejects security groups both on the instance and on an interface of it.
        Some(interfaces) => data.set_network_interfaces(Some(interfaces)),
        None => data.set_security_group_ids(Some(spec.security_group_ids.clone())),
    };
    if let Some(nested) = &spec.nested_virtualization {
        data = data.cpu_options(
            LaunchTemplateCpuOptionsRequest::builder()
                .nested_virtualization(NestedVirtualizationSpecification::from(nested.as_str()))
                .build(),
        );
    }
    if let Some(reservation) = &spec.capacity_reservation {
        data = data.capacity_reservation_specification(
            LaunchTemplateCapacityReservationSpecificationRequest::builder()
                .capacity_reservation_target(
                    CapacityReservationTarget::builder()
                        .capacity_reservation_id(&reservation.id)
                        .build(),
                )
                .build(),
        );
        if reservation.is_capacity_block() {
            data = data.instance_market_options(
                LaunchTemplateInstanceMarketOptionsRequest::builder()
                    .market_type(MarketType::CapacityBlock)
                    .build(),
            );
        }
    }
    if spec.placement.is_some() || spec.tenancy.is_some() {
        data = data.placement(
            LaunchTemplatePlacementRequest::builder()
                .set_group_id(spec.placement.as_ref().map(|p| p.group_id.clone()))
                .set_partition_number(spec.placement.as_ref().and_then(|p| p.partition))
                .set_tenancy(spec.tenancy.as_deref().map(Tenancy::from))
                .build(),
        );
    }
    if let Some(profile) = &spec.instance_profile {
        data = data.iam_instance_profile(
            LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                .name(profile)
                .build(),
        );
    }
    // CreateFleet tags instances and volumes too, but not network interfaces: only the template can.
    for resource in [
        ResourceType::Instance,
        ResourceType::Volume,
        ResourceType::NetworkInterface,
    ] {
        data = data.tag_specifications(
            LaunchTemplateTagSpecificationRequest::builder()
                .resource_type(resource)
                .set_tags(Some(tags(&spec.tags)))
                .build(),
        );
    }
    data.build()
}

/// The CreateLaunchTemplate request of `spec`, named [`LaunchTemplateSpec::name`] and tagged like what it
/// launches, ready to send (the EC2NodeClass dry runs send it with `DryRun`).
pub fn create_launch_template_request(
    ec2: &aws_sdk_ec2::Client,
    spec: &LaunchTemplateSpec,
) -> CreateLaunchTemplateFluentBuilder {
    ec2.create_launch_template()
        .launch_template_name(spec.name())
        .launch_template_data(launch_template_data(spec))
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::LaunchTemplate)
                .set_tags(Some(tags(&spec.tags)))
                .build(),
        )
}

/// Creates the template named [`LaunchTemplateSpec::name`] unless it exists. Returns its name.
pub async fn ensure_launch_template(
    ec2: &aws_sdk_ec2::Client,
    spec: &LaunchTemplateSpec,
) -> Result<String, AwsError> {
    let name = spec.name();
    let created = create_launch_template_request(ec2, spec).send().await;
    match created {
        Ok(_) => Ok(name),
        Err(err) => match AwsError::from_sdk("CreateLaunchTemplate", err) {
            // Same name, same content: another launch (or an earlier run) made it.
            exists if exists.code() == Some("InvalidLaunchTemplateName.AlreadyExistsException") => Ok(name),
            other => Err(other),
        },
    }
}
