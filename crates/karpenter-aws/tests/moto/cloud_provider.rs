//! The CloudProvider trait end to end against moto: launch, get, list, drift, delete, insufficient capacity.

use std::time::Instant;

use karpenter_api::nodepool::NodePool;
use karpenter_core::cloudprovider::{CloudProvider, CloudProviderError};
use serde_json::json;

use karpenter_aws::userdata;

use crate::moto;

use super::fixtures::{
    create_node_class, latest_template_data, network, node_claim, node_class, provider, set_ice,
};

const TYPES: [&str; 3] = ["m5.large", "m5.xlarge", "c6g.large"];

fn requirements(capacity_types: &[&str]) -> serde_json::Value {
    json!([
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": TYPES},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types}
    ])
}

fn node_pool(class: &str) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": class}}}}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_claim_launches_through_the_cloud_provider_and_is_found_drifted_and_deleted() {
    let moto = moto!(&TYPES);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    let net = network(&admin).await;
    let (server, provider) = provider(clients.clone()).await;
    assert_eq!(provider.refresh_instance_types().await.unwrap(), 3);
    let dyn_provider: std::sync::Arc<dyn CloudProvider> = provider.clone();
    assert_eq!(dyn_provider.name(), "aws");

    // A class that does not exist yet cannot launch.
    let claim = node_claim("default-abcde", "default", requirements(&["on-demand"]));
    let missing = dyn_provider.create(&claim).await.unwrap_err();
    assert_eq!(missing.category(), "NodeClassNotReady", "{missing}");

    // No status yet: the provider resolves the class itself (alias through SSM, subnets and groups by tag).
    create_node_class(
        &server,
        &node_class("default", json!([{"alias": "al2023@latest"}])),
    )
    .await;
    let launched = dyn_provider.create(&claim).await.unwrap();
    let labels = launched.metadata.labels.as_ref().unwrap();
    assert_eq!(
        labels["node.kubernetes.io/instance-type"], "c6g.large",
        "the cheapest type"
    );
    assert_eq!(labels["karpenter.sh/capacity-type"], "on-demand");
    assert_eq!(labels["karpenter.k8s.aws/instance-family"], "c6g");
    assert_eq!(labels["kubernetes.io/arch"], "arm64");
    assert_eq!(labels["karpenter.sh/nodepool"], "default");
    let zone = labels["topology.kubernetes.io/zone"].clone();
    assert!(zone == "us-west-2a" || zone == "us-west-2b", "{zone}");
    assert!(labels.contains_key("topology.k8s.aws/zone-id"));
    let status = launched.status.as_ref().unwrap();
    let provider_id = status.provider_id.clone().unwrap();
    assert!(
        provider_id.starts_with(&format!("aws:///{zone}/i-")),
        "{provider_id}"
    );
    assert_eq!(status.allocatable.as_ref().unwrap()["pods"].0, "29");
    assert_eq!(status.capacity.as_ref().unwrap()["cpu"].0, "2");
    let annotations = launched.metadata.annotations.as_ref().unwrap();
    assert_eq!(
        annotations["karpenter.k8s.aws/ec2nodeclass-hash-version"],
        karpenter_api::ec2nodeclass::EC2NODECLASS_HASH_VERSION
    );
    // The image is the alias's arm64 standard AMI.
    let alias_image = admin
        .ssm
        .get_parameter()
        .name("/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/arm64/standard/recommended/image_id")
        .send()
        .await
        .unwrap()
        .parameter()
        .and_then(|p| p.value())
        .unwrap()
        .to_string();
    assert_eq!(status.image_id.as_deref(), Some(alias_image.as_str()));

    // The instance: in a class subnet, with the class's security group, tagged for the cluster and the claim.
    let instance_id = provider_id.rsplit('/').next().unwrap();
    let instance = karpenter_aws::instance::get_instance(&clients.ec2, instance_id)
        .await
        .unwrap();
    assert!(net.subnet_ids.contains(instance.subnet_id.as_ref().unwrap()));
    // moto does not apply the launch template's security groups to fleet instances, so they are not checked.
    assert_eq!(instance.tags["karpenter.sh/nodeclaim"], "default-abcde");
    assert_eq!(instance.tags["eks:eks-cluster-name"], "test-cluster");
    assert_eq!(instance.tags["team"], "platform");
    // One launch template per max pods: m5.xlarge's 58 and the 29 of m5.large and c6g.large.
    let templates = admin.ec2.describe_launch_templates().send().await.unwrap();
    assert_eq!(templates.launch_templates().len(), 2);
    let mut user_data_by_template = Vec::new();
    for template in templates.launch_templates() {
        let template_name = template.launch_template_name().unwrap().to_string();
        assert!(template_name.starts_with("karpenter.k8s.aws/"));
        let data = latest_template_data(&admin.ec2, &template_name).await;
        let encoded = data.as_ref().and_then(|d| d.user_data()).unwrap();
        user_data_by_template.push(String::from_utf8(userdata::base64_decode(encoded).unwrap()).unwrap());
    }

    // The templates' user data is the AL2023 NodeConfig for the cluster, the claim and the types' max pods.
    let cluster = provider.cluster_info();
    let expected = |max_pods: i64| {
        userdata::generate(
            karpenter_api::ec2nodeclass::AmiFamily::AL2023,
            &userdata::UserDataInput {
                cluster: &cluster,
                kubelet: None,
                max_pods: Some(max_pods),
                labels: [("karpenter.sh/nodepool".to_string(), "default".to_string())].into(),
                taints: Vec::new(),
                custom: None,
                instance_store_raid0: false,
            },
        )
        .unwrap()
        .unwrap()
    };
    user_data_by_template.sort_by_key(|u| u.contains("maxPods: 58"));
    assert_eq!(user_data_by_template, [expected(29), expected(58)]);
    let user_data = &user_data_by_template[0];
    for line in [
        "    name: test-cluster\n",
        "    apiServerEndpoint: https://test.gr7.us-west-2.eks.amazonaws.com\n",
        "    certificateAuthority: \"LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==\"\n",
        "    cidr: \"10.100.0.0/16\"\n",
        "      maxPods: 29\n",
        "        key: karpenter.sh/unregistered\n",
        "    - \"--node-labels=karpenter.sh/nodepool=default\"\n",
    ] {
        assert!(user_data.contains(line), "{line:?} in\n{user_data}");
    }

    // get and list see it, named after the claim.
    let got = dyn_provider.get(&provider_id).await.unwrap();
    assert_eq!(got.metadata.name.as_deref(), Some("default-abcde"));
    assert_eq!(got.spec.node_class_ref.name, "default");
    let listed = dyn_provider.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].status.as_ref().unwrap().provider_id.as_deref(),
        Some(provider_id.as_str())
    );

    // Drift: none until the class's AMIs change.
    assert_eq!(dyn_provider.is_drifted(&launched), None);
    let mut changed = node_class("default", json!([{"alias": "al2023@latest"}]));
    changed.status = Some(karpenter_api::ec2nodeclass::EC2NodeClassStatus {
        amis: vec![karpenter_api::ec2nodeclass::Ami {
            id: "ami-0newer".into(),
            ..Default::default()
        }],
        ..Default::default()
    });
    provider.node_class_cache().insert(changed);
    assert_eq!(dyn_provider.is_drifted(&launched).as_deref(), Some("AMIDrift"));

    // Delete until NotFound; then the instance is gone from get and list.
    dyn_provider.delete(&launched).await.unwrap();
    let gone = dyn_provider.delete(&launched).await.unwrap_err();
    assert!(gone.is_not_found(), "{gone}");
    assert!(dyn_provider.get(&provider_id).await.unwrap_err().is_not_found());
    assert!(dyn_provider.list().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insufficient_capacity_falls_back_and_marks_offerings_unavailable() {
    let moto = moto!(&TYPES);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    let (server, provider) = provider(clients.clone()).await;
    provider.refresh_instance_types().await.unwrap();
    create_node_class(
        &server,
        &node_class("default", json!([{"alias": "al2023@latest"}])),
    )
    .await;

    set_ice(&admin, "spot:c6g.large:*").await;
    // Spot only: with on-demand allowed too, the m5 types' spot offerings would not be sent at all (below).
    let claim = node_claim("default-spot1", "default", requirements(&["spot"]));
    let launched = provider.create(&claim).await.unwrap();
    let labels = launched.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["karpenter.sh/capacity-type"], "spot");
    assert_eq!(
        labels["node.kubernetes.io/instance-type"], "m5.large",
        "c6g.large had no capacity; the same fleet fell back to an amd64 type with its own AMI"
    );
    assert_eq!(labels["kubernetes.io/arch"], "amd64");
    let unavailable = provider.unavailable_offerings();
    let now = Instant::now();
    for zone in ["us-west-2a", "us-west-2b"] {
        assert!(
            unavailable.is_unavailable("c6g.large", zone, "spot", now),
            "{zone}"
        );
        assert!(!unavailable.is_unavailable("c6g.large", zone, "on-demand", now));
    }
    // Spot or on-demand: spot offerings dearer than the cheapest on-demand one are not sent (upstream's spot
    // offering filter). Without spot price history each spot price is the type's on-demand price, so the m5 types'
    // spot costs more than c6g.large on demand; c6g.large's spot is out of capacity: c6g.large on demand.
    let mixed = provider
        .create(&node_claim(
            "default-mixed1",
            "default",
            requirements(&["spot", "on-demand"]),
        ))
        .await
        .unwrap();
    let labels = mixed.metadata.labels.as_ref().unwrap();
    assert_eq!(
        (
            labels["karpenter.sh/capacity-type"].as_str(),
            labels["node.kubernetes.io/instance-type"].as_str()
        ),
        ("on-demand", "c6g.large")
    );
    // The NodePool's instance types say so.
    let types = provider.instance_types(&node_pool("default")).await.unwrap();
    let c6g = types.iter().find(|t| t.name == "c6g.large").unwrap();
    let unavailable_here: Vec<(&str, &str)> = c6g
        .offerings
        .iter()
        .filter(|o| !o.available && ["us-west-2a", "us-west-2b"].contains(&o.zone.as_str()))
        .map(|o| (o.zone.as_str(), o.capacity_type.as_str()))
        .collect();
    assert_eq!(unavailable_here, [("us-west-2a", "spot"), ("us-west-2b", "spot")]);
    assert!(
        provider
            .instance_types(&node_pool("absent"))
            .await
            .unwrap()
            .is_empty(),
        "no class, nothing to launch"
    );

    // Nothing left with capacity: InsufficientCapacity naming the offerings tried.
    set_ice(&admin, "*").await;
    let err = provider
        .create(&node_claim("default-spot2", "default", requirements(&["spot"])))
        .await
        .unwrap_err();
    match &err {
        CloudProviderError::InsufficientCapacity { offerings, .. } => {
            assert_eq!(offerings.len(), 4, "both m5 types in both zones: {offerings:?}");
            assert!(
                offerings
                    .iter()
                    .all(|o| o.instance_type.starts_with("m5.") && o.capacity_type == "spot")
            );
        }
        other => panic!("expected InsufficientCapacity, got {other:?}"),
    }
    // The next attempt does not even call EC2 for spot: every spot offering is cached unavailable.
    let again = provider
        .create(&node_claim("default-spot3", "default", requirements(&["spot"])))
        .await
        .unwrap_err();
    assert_eq!(again.category(), "InsufficientCapacity");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_whose_selectors_match_nothing_is_not_ready() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let (server, provider) = provider(clients.clone()).await;
    provider.refresh_instance_types().await.unwrap();
    // No network was created: no subnet or group carries the discovery tag.
    create_node_class(
        &server,
        &node_class("default", json!([{"alias": "al2023@latest"}])),
    )
    .await;
    let err = provider
        .create(&node_claim(
            "default-x",
            "default",
            json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}]),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.category(), "NodeClassNotReady");
    let message = err.to_string();
    assert!(message.contains("SubnetsNotFound"), "{message}");
    assert!(message.contains("SecurityGroupsNotFound"), "{message}");
}

/// With the NodeOverlay gate on, a NodeClaim the scheduler priced by overlays launches by those prices: the
/// overlay makes m5.xlarge cheaper than c6g.large and m5.large here, and EC2 (moto launches the first override
/// of a fleet) gets it first. A claim without the mark launches at EC2's own prices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_priced_by_node_overlays_launches_the_type_they_made_cheapest() {
    use karpenter_api::{label_policy::LabelPolicy, nodeoverlay::NodeOverlay};
    use karpenter_state::{CachedLaunchPrices, ClusterState};

    let moto = moto!(&TYPES);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    let (server, provider) = provider(clients.clone()).await;
    provider.refresh_instance_types().await.unwrap();
    create_node_class(
        &server,
        &node_class("default", json!([{"alias": "al2023@latest"}])),
    )
    .await;
    let state = ClusterState::default();
    state.node_pools.apply(node_pool("default"));
    let overlay: NodeOverlay = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": "savings-plan"},
        "spec": {"requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]}],
            "price": "0.001"}
    }))
    .unwrap();
    state.node_overlays.apply(overlay);
    provider.set_launch_prices(std::sync::Arc::new(CachedLaunchPrices::new(
        state,
        LabelPolicy::Aws,
    )));

    let unmarked = provider
        .create(&node_claim(
            "default-plain",
            "default",
            requirements(&["on-demand"]),
        ))
        .await
        .unwrap();
    assert_eq!(
        unmarked.metadata.labels.as_ref().unwrap()["node.kubernetes.io/instance-type"],
        "c6g.large",
        "no mark: EC2's cheapest"
    );

    let mut marked = node_claim("default-overlaid", "default", requirements(&["on-demand"]));
    marked.metadata.annotations = Some(
        [(
            "karpenter.sh/price-overlay-applied".to_string(),
            "true".to_string(),
        )]
        .into(),
    );
    let launched = provider.create(&marked).await.unwrap();
    assert_eq!(
        launched.metadata.labels.as_ref().unwrap()["node.kubernetes.io/instance-type"],
        "m5.xlarge",
        "the overlaid price comes first"
    );
}
