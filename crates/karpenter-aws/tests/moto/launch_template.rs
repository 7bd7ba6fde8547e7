//! Launch templates against moto: what CreateLaunchTemplate stores is what the EC2NodeClass asked for.

use aws_sdk_ec2::types::{
    Filter, LaunchTemplateHttpTokensState, LaunchTemplateInstanceMetadataEndpointState, VolumeType,
};
use karpenter_api::ec2nodeclass::{EC2NodeClassStatus, SecurityGroup};
use karpenter_aws::launch_template::{LaunchTemplateSpec, ensure_launch_template};
use serde_json::json;

use super::fixtures::{CLUSTER, network, node_class};
use crate::moto_or_skip;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_template_holds_the_classes_block_devices_metadata_options_and_tags() {
    let moto = moto_or_skip!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let net = network(&clients.ec2).await;
    let mut class = node_class("storage", json!([{"alias": "bottlerocket@latest"}]));
    class.spec = serde_json::from_value(json!({
        "amiSelectorTerms": [{"alias": "bottlerocket@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
        "instanceProfile": "KarpenterNodeInstanceProfile",
        "blockDeviceMappings": [
            {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "8Gi", "volumeType": "gp3", "encrypted": true}},
            {"deviceName": "/dev/xvdb", "rootVolume": true, "ebs": {
                "volumeSize": "200Gi", "volumeType": "gp3", "iops": 6000, "throughput": 400,
                "encrypted": true, "kmsKeyID": "alias/karpenter", "deleteOnTermination": true}}
        ],
        "metadataOptions": {"httpPutResponseHopLimit": 2, "httpTokens": "required"},
        "detailedMonitoring": true
    }))
    .unwrap();
    class.status = Some(EC2NodeClassStatus {
        security_groups: vec![SecurityGroup {
            id: net.security_group_id.clone(),
            ..SecurityGroup::default()
        }],
        ..EC2NodeClassStatus::default()
    });
    let spec = LaunchTemplateSpec::from_node_class(&class, "ami-12345678", CLUSTER).unwrap();
    let name = ensure_launch_template(&clients.ec2, &spec).await.unwrap();
    assert_eq!(name, spec.name());

    let versions = clients
        .ec2
        .describe_launch_template_versions()
        .launch_template_name(&name)
        .versions("$Latest")
        .send()
        .await
        .unwrap();
    let data = versions.launch_template_versions()[0]
        .launch_template_data()
        .unwrap();
    let devices: Vec<_> = data
        .block_device_mappings()
        .iter()
        .map(|d| {
            let ebs = d.ebs().unwrap();
            (
                d.device_name().unwrap(),
                ebs.volume_size(),
                ebs.volume_type().cloned(),
                ebs.iops(),
                ebs.throughput(),
                ebs.kms_key_id(),
            )
        })
        .collect();
    assert_eq!(
        devices,
        [
            ("/dev/xvda", Some(8), Some(VolumeType::Gp3), None, None, None),
            (
                "/dev/xvdb",
                Some(200),
                Some(VolumeType::Gp3),
                Some(6000),
                Some(400),
                Some("alias/karpenter")
            ),
        ]
    );
    let metadata = data.metadata_options().unwrap();
    assert_eq!(metadata.http_put_response_hop_limit(), Some(2));
    assert_eq!(
        metadata.http_tokens(),
        Some(&LaunchTemplateHttpTokensState::Required)
    );
    assert_eq!(
        metadata.http_endpoint(),
        Some(&LaunchTemplateInstanceMetadataEndpointState::Enabled),
        "the default"
    );
    assert_eq!(data.monitoring().and_then(|m| m.enabled()), Some(true));
    assert_eq!(data.security_group_ids(), [net.security_group_id.as_str()]);

    // The template is found by the cluster's tag, and names its class.
    let found = clients
        .ec2
        .describe_launch_templates()
        .filters(
            Filter::builder()
                .name(format!("tag:kubernetes.io/cluster/{CLUSTER}"))
                .values("owned")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let [template] = found.launch_templates() else {
        panic!("one template: {found:?}");
    };
    assert_eq!(template.launch_template_name(), Some(name.as_str()));
    assert!(
        template
            .tags()
            .iter()
            .any(|t| t.key() == Some("karpenter.k8s.aws/ec2nodeclass") && t.value() == Some("storage"))
    );

    // A changed class is a new template; the old one is left for garbage collection.
    class.spec.detailed_monitoring = Some(false);
    let changed = LaunchTemplateSpec::from_node_class(&class, "ami-12345678", CLUSTER).unwrap();
    let second = ensure_launch_template(&clients.ec2, &changed).await.unwrap();
    assert_ne!(second, name);
    let all = clients.ec2.describe_launch_templates().send().await.unwrap();
    assert_eq!(all.launch_templates().len(), 2);
}
