//! Launch templates against moto: what CreateLaunchTemplate stores is what the EC2NodeClass asked for, the
//! cache that skips creating them again, and their garbage collection.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use aws_sdk_ec2::types::{
    Filter, LaunchTemplateHttpTokensState, LaunchTemplateInstanceMetadataEndpointState, VolumeType,
};
use jiff::Timestamp;
use karpenter_api::ec2nodeclass::{EC2NodeClassStatus, SecurityGroup};
use karpenter_aws::launch_template::{LaunchTemplateSpec, ensure_launch_template};
use karpenter_core::cloudprovider::CloudProvider;
use serde_json::json;

use super::fixtures::{
    CLUSTER, create_node_class, latest_template_data, network, node_claim, node_class, provider,
};
use crate::moto;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_template_holds_the_classes_block_devices_metadata_options_and_tags() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    let net = network(&admin).await;
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
    let spec = LaunchTemplateSpec::from_node_class(&class, "ami-12345678", CLUSTER, "default").unwrap();
    let name = ensure_launch_template(&clients.ec2, &spec).await.unwrap();
    assert_eq!(name, spec.name());

    let data = latest_template_data(&admin.ec2, &name).await.unwrap();
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
    let found = admin
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
    let changed = LaunchTemplateSpec::from_node_class(&class, "ami-12345678", CLUSTER, "default").unwrap();
    let second = ensure_launch_template(&clients.ec2, &changed).await.unwrap();
    assert_ne!(second, name);
    let all = admin.ec2.describe_launch_templates().send().await.unwrap();
    assert_eq!(all.launch_templates().len(), 2);
}

/// Class `name` (AL2023) as the controller would have resolved it onto `security_group_id`.
fn resolved_class(name: &str, security_group_id: &str) -> karpenter_api::ec2nodeclass::EC2NodeClass {
    let mut class = node_class(name, json!([{"alias": "al2023@latest"}]));
    class.status = Some(EC2NodeClassStatus {
        security_groups: vec![SecurityGroup {
            id: security_group_id.to_string(),
            ..SecurityGroup::default()
        }],
        ..EC2NodeClassStatus::default()
    });
    class
}

async fn template_names(ec2: &aws_sdk_ec2::Client) -> BTreeSet<String> {
    let all = ec2.describe_launch_templates().send().await.unwrap();
    all.launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_name().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_template_is_not_created_again_and_a_launch_recreates_one_deleted_behind_its_back() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    let net = network(&admin).await;
    let (server, provider) = provider(clients.clone()).await;
    provider.refresh_instance_types().await.unwrap();

    // The cache answers for a template it created: deleted in EC2, it is not created again...
    let templates = provider.launch_templates();
    let spec = LaunchTemplateSpec::from_node_class(
        &resolved_class("cached", &net.security_group_id),
        "ami-12345678",
        CLUSTER,
        "default",
    )
    .unwrap();
    let name = templates.ensure(&spec, Instant::now()).await.unwrap();
    admin
        .ec2
        .delete_launch_template()
        .launch_template_name(&name)
        .send()
        .await
        .unwrap();
    assert_eq!(templates.ensure(&spec, Instant::now()).await.unwrap(), name);
    assert!(
        template_names(&admin.ec2).await.is_empty(),
        "no CreateLaunchTemplate"
    );
    // ...until it is forgotten.
    templates.forget(&name);
    templates.ensure(&spec, Instant::now()).await.unwrap();
    assert_eq!(template_names(&admin.ec2).await, BTreeSet::from([name]));

    // A launch whose cached template was deleted creates it again and launches.
    create_node_class(
        &server,
        &node_class("default", json!([{"alias": "al2023@latest"}])),
    )
    .await;
    let requirements = json!([
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
    ]);
    provider
        .create(&node_claim("default-first", "default", requirements.clone()))
        .await
        .unwrap();
    let launched_with: Vec<String> = provider
        .launch_templates()
        .list(Some("default"))
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(launched_with.len(), 1, "{launched_with:?}");
    for name in &launched_with {
        admin
            .ec2
            .delete_launch_template()
            .launch_template_name(name)
            .send()
            .await
            .unwrap();
    }
    let second = provider
        .create(&node_claim("default-second", "default", requirements))
        .await
        .unwrap();
    assert!(second.status.as_ref().unwrap().provider_id.is_some());
    assert!(template_names(&admin.ec2).await.contains(&launched_with[0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unused_templates_and_those_of_deleted_classes_are_garbage_collected() {
    use karpenter_aws::launch_template::{LaunchTemplateCache, LaunchTemplates};
    use karpenter_aws::nodeclass::controller::{Context, garbage_collect_launch_templates, reconcile};
    use kube::Api;
    use kube::api::DeleteParams;

    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    let ec2 = &clients.ec2;
    let net = network(&admin).await;
    let (server, provider) = provider(clients.clone()).await;
    let spec = |class: &str, cluster: &str| {
        LaunchTemplateSpec::from_node_class(
            &resolved_class(class, &net.security_group_id),
            "ami-12345678",
            cluster,
            "default",
        )
        .unwrap()
    };
    let templates = provider.launch_templates();
    let now = Instant::now();
    let kept = templates.ensure(&spec("kept", CLUSTER), now).await.unwrap();
    // Made before a restart, for a class deleted while Karpenter was down (so not in this cache).
    let gone = ensure_launch_template(ec2, &spec("gone", CLUSTER)).await.unwrap();
    // Neither another cluster's template (made by that cluster's controller: this one's policies could not) nor
    // one without Karpenter's name prefix is ever touched.
    let other_cluster = ensure_launch_template(&admin.ec2, &spec("gone", "other-cluster"))
        .await
        .unwrap();
    admin
        .ec2
        .create_launch_template()
        .launch_template_name("users-own")
        .launch_template_data(
            aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
                .image_id("ami-12345678")
                .build(),
        )
        .tag_specifications(
            aws_sdk_ec2::types::TagSpecification::builder()
                .resource_type(aws_sdk_ec2::types::ResourceType::LaunchTemplate)
                .tags(
                    aws_sdk_ec2::types::Tag::builder()
                        .key(format!("kubernetes.io/cluster/{CLUSTER}"))
                        .value("owned")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    let untouched = BTreeSet::from([other_cluster.clone(), "users-own".to_string()]);

    // Class "gone" does not exist: its template goes; "kept"'s stays.
    create_node_class(&server, &node_class("kept", json!([{"alias": "al2023@latest"}]))).await;
    let deleted = garbage_collect_launch_templates(&server.client(), provider.as_ref())
        .await
        .unwrap();
    assert_eq!(deleted, std::slice::from_ref(&gone));
    let mut expected = untouched.clone();
    expected.insert(kept.clone());
    assert_eq!(template_names(ec2).await, expected);

    // After a restart (an empty cache) a young template stays; one unused for the cache TTL goes.
    let restarted = LaunchTemplates::new(ec2.clone(), CLUSTER, Arc::new(LaunchTemplateCache::default()));
    let existing = BTreeSet::from(["kept".to_string()]);
    let ttl = jiff::SignedDuration::try_from(restarted.cache().ttl()).unwrap();
    let young = restarted
        .garbage_collect(&existing, Instant::now(), Timestamp::now())
        .await
        .unwrap();
    assert!(young.is_empty(), "{young:?}");
    // The provider's cache still has it in use, so its collector spares it even when it is old.
    let in_use = templates
        .garbage_collect(&existing, Instant::now(), Timestamp::now() + ttl * 2)
        .await
        .unwrap();
    assert!(in_use.is_empty(), "{in_use:?}");
    let stale = restarted
        .garbage_collect(&existing, Instant::now(), Timestamp::now() + ttl * 2)
        .await
        .unwrap();
    assert_eq!(stale, std::slice::from_ref(&kept));
    assert_eq!(template_names(ec2).await, untouched);

    // Deleting a class deletes its templates before its finalizer goes.
    let ctx = Arc::new(Context {
        client: server.client(),
        provider: provider.clone(),
    });
    let api: Api<karpenter_api::ec2nodeclass::EC2NodeClass> = Api::all(server.client());
    reconcile(Arc::new(api.get("kept").await.unwrap()), Arc::clone(&ctx))
        .await
        .unwrap();
    templates.forget(&kept);
    templates
        .ensure(&spec("kept", CLUSTER), Instant::now())
        .await
        .unwrap();
    api.delete("kept", &DeleteParams::default()).await.unwrap();
    reconcile(Arc::new(api.get("kept").await.unwrap()), Arc::clone(&ctx))
        .await
        .unwrap();
    assert_eq!(template_names(ec2).await, untouched);
    assert!(api.get_opt("kept").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_template_holds_the_classes_network_interfaces_prefixes_and_connection_tracking() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    let net = network(&admin).await;
    let mut class = node_class("efa", json!([{"alias": "al2023@latest"}]));
    class.spec = serde_json::from_value(json!({
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
        "instanceProfile": "KarpenterNodeInstanceProfile",
        "networkInterfaces": [
            {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
            {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"}
        ],
        "ipPrefixCount": 3,
        "connectionTracking": {"tcpEstablishedTimeout": 3600}
    }))
    .unwrap();
    class.status = Some(EC2NodeClassStatus {
        security_groups: vec![SecurityGroup {
            id: net.security_group_id.clone(),
            ..SecurityGroup::default()
        }],
        ..EC2NodeClassStatus::default()
    });
    let spec = LaunchTemplateSpec::from_node_class(&class, "ami-12345678", CLUSTER, "default").unwrap();
    let name = ensure_launch_template(&clients.ec2, &spec).await.unwrap();

    let data = latest_template_data(&admin.ec2, &name).await.unwrap();
    assert!(data.security_group_ids().is_empty(), "{data:?}");
    let interfaces: Vec<_> = data
        .network_interfaces()
        .iter()
        .map(|i| {
            (
                i.network_card_index(),
                i.device_index(),
                i.interface_type(),
                i.groups().to_vec(),
                i.ipv4_prefix_count(),
                i.connection_tracking_specification()
                    .and_then(|c| c.tcp_established_timeout()),
            )
        })
        .collect();
    let groups = vec![net.security_group_id.clone()];
    assert_eq!(
        interfaces,
        [
            (
                Some(0),
                Some(0),
                Some("interface"),
                groups.clone(),
                Some(3),
                Some(3600)
            ),
            (Some(1), Some(0), Some("efa-only"), groups, None, None),
        ]
    );
}
