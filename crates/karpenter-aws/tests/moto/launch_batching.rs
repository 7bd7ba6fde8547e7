//! Launches against moto that depend on each other: CreateFleet calls batched over a short window, and the
//! free IP addresses of subnets as launches use them.

use std::collections::BTreeMap;
use std::sync::Arc;

use karpenter_api::ec2nodeclass::{EC2NodeClass, EC2NodeClassSpec, EC2NodeClassStatus, SecurityGroup};
use karpenter_aws::fleet_batcher::{Ec2Fleet, FleetBatchOptions, FleetBatcher};
use karpenter_aws::launch::{LaunchOverride, LaunchRequest, LaunchTemplateSpec, ensure_launch_template};
use karpenter_aws::{AwsClients, UnavailableOfferings};
use karpenter_core::cloudprovider::{CloudProvider, CloudProviderError};
use serde_json::json;

use crate::moto;

use super::fixtures::{
    al2023_image_id, create_node_class, network, node_claim, node_class, provider, set_ice,
};

/// A launch template for the network's security group and the AL2023 AMI.
async fn launch_template(clients: &AwsClients, security_group_id: &str) -> String {
    let image_id = al2023_image_id(&clients.ssm).await;
    let mut class = EC2NodeClass::new("default", EC2NodeClassSpec::default());
    class.status = Some(EC2NodeClassStatus {
        security_groups: vec![SecurityGroup {
            id: security_group_id.to_string(),
            ..Default::default()
        }],
        instance_profile: Some("KarpenterNodeInstanceProfile".into()),
        ..Default::default()
    });
    let template =
        LaunchTemplateSpec::from_node_class(&class, &image_id, crate::fixtures::CLUSTER, "default").unwrap();
    ensure_launch_template(&clients.ec2, &template).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launches_at_once_share_one_create_fleet_and_each_instance_carries_its_node_claims_tag() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    let ec2 = &clients.ec2;
    let net = network(&admin).await;
    let template = launch_template(&clients, &net.security_group_id).await;
    let request = |claim: &str| LaunchRequest {
        launch_template_name: template.clone(),
        capacity_type: "on-demand".into(),
        reservation: None,
        overrides: vec![LaunchOverride {
            instance_type: "m5.large".into(),
            zone: "us-west-2a".into(),
            subnet_id: net.subnet_ids[0].clone(),
            price: 0.096,
            image_id: None,
            launch_template_name: None,
        }],
        tags: {
            // What the provider tags a launch with: the controller policies allow no less.
            let mut tags =
                karpenter_aws::tags::launch_tags(crate::fixtures::CLUSTER, "default", "default", None);
            tags.insert("karpenter.sh/nodeclaim".into(), claim.into());
            tags
        },
        zone_ids: BTreeMap::new(),
        context: None,
        prioritized: false,
    };
    let unavailable = Arc::new(UnavailableOfferings::default());
    let batcher = FleetBatcher::new(
        Ec2Fleet::new(ec2.clone(), Arc::clone(&unavailable)),
        FleetBatchOptions::default(),
    );

    let (first, second, third) = (request("claim-1"), request("claim-2"), request("claim-3"));
    let launched = tokio::join!(
        batcher.launch(&first),
        batcher.launch(&second),
        batcher.launch(&third)
    );
    let launched = [launched.0.unwrap(), launched.1.unwrap(), launched.2.unwrap()];
    let fleets = admin.ec2.describe_fleets().send().await.unwrap();
    assert_eq!(fleets.fleets().len(), 1, "one CreateFleet for the three launches");
    for (claim, instance) in ["claim-1", "claim-2", "claim-3"].iter().zip(&launched) {
        let described = karpenter_aws::instance::get_instance(ec2, &instance.instance_id)
            .await
            .unwrap();
        assert_eq!(described.tags["karpenter.sh/nodeclaim"], *claim);
        assert_eq!(described.tags["karpenter.sh/nodepool"], "default");
    }

    // Out of capacity: every launch of the batch is told so, and the offering is marked unavailable.
    set_ice(&admin, "m5.large").await;
    let (first, second) = (request("claim-4"), request("claim-5"));
    let (first, second) = tokio::join!(batcher.launch(&first), batcher.launch(&second));
    for result in [first, second] {
        let err = result.unwrap_err();
        assert!(
            matches!(err, CloudProviderError::InsufficientCapacity { .. }),
            "{err:?}"
        );
    }
    assert!(unavailable.is_unavailable("m5.large", "us-west-2a", "on-demand", std::time::Instant::now()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_holds_the_addresses_it_uses_until_describe_subnets_counts_them() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    let net = network(&admin).await;
    let (server, provider) = provider(clients.clone()).await;
    provider.refresh_instance_types().await.unwrap();
    let class = node_class("default", json!([{"alias": "al2023@latest"}]));
    create_node_class(&server, &class).await;

    // No status: the launch resolves the class, which counts the subnets' addresses (a /24: 251 free).
    let claim = node_claim(
        "default-abcde",
        "default",
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
               {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-west-2a"]}]),
    );
    let launched = provider.create(&claim).await.unwrap();
    assert_eq!(
        launched.metadata.labels.as_ref().unwrap()["topology.kubernetes.io/zone"],
        "us-west-2a"
    );
    let (used, other) = (&net.subnet_ids[0], &net.subnet_ids[1]);
    assert_eq!(
        provider.subnet_ips().free(used),
        Some(251 - 29),
        "m5.large's 29 pods each take an address"
    );
    assert_eq!(provider.subnet_ips().free(other), Some(251));

    // A count asked for after the launch includes it and replaces the estimate.
    let resolution =
        karpenter_aws::nodeclass::resolve(&clients, &class, "1.33", false, jiff::Timestamp::now()).await;
    provider.record_subnet_addresses(&resolution);
    assert_eq!(
        provider.subnet_ips().free(used),
        Some(250),
        "moto counts the instance's address"
    );
}
