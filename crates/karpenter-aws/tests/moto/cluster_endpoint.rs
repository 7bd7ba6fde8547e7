//! The API server endpoint and CA bundle nodes join with: discovered with EKS's DescribeCluster when
//! `settings.clusterEndpoint` (CLUSTER_ENDPOINT) is empty, once at start-up, and written into the node's user
//! data; start-up fails naming the setting when the cluster cannot be described.

use karpenter_aws::runtime::AwsProvider;
use karpenter_aws::{AwsSettings, userdata};
use karpenter_core::cloudprovider::CloudProvider;
use serde_json::json;

use super::fixtures::{
    CLUSTER, create_node_class, latest_template_data, network, node_claim, node_class, settings,
};
use crate::moto;

/// Settings with neither the endpoint nor the CA bundle given.
fn undiscovered() -> AwsSettings {
    AwsSettings {
        cluster_endpoint: None,
        cluster_ca_bundle: None,
        ..settings()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_cluster_endpoint_is_discovered_with_describe_cluster_and_nodes_join_it() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    network(&admin).await;
    admin
        .eks
        .create_cluster()
        .name(CLUSTER)
        .version("1.33")
        .role_arn("arn:aws:iam::123456789012:role/eks-cluster")
        .resources_vpc_config(aws_sdk_eks::types::VpcConfigRequest::builder().build())
        .send()
        .await
        .unwrap();
    let described = admin.eks.describe_cluster().name(CLUSTER).send().await.unwrap();
    let cluster = described.cluster().unwrap();
    let endpoint = cluster.endpoint().unwrap().trim_end_matches('/').to_string();
    // moto's CA data is random base64, not a PEM: it is passed through as EKS gives it.
    let ca_bundle = cluster
        .certificate_authority()
        .and_then(|c| c.data())
        .unwrap()
        .to_string();
    assert!(endpoint.starts_with("https://"), "{endpoint}");

    let server = karpenter_sim::apiserver::ApiServer::new(karpenter_sim::clock::SystemClock);
    let runtime = AwsProvider::start_with_clients(undiscovered(), clients.clone(), server.client())
        .await
        .unwrap();
    let provider = runtime.cloud_provider.clone();
    let info = provider.cluster_info();
    assert_eq!(info.endpoint.as_deref(), Some(endpoint.as_str()));
    assert_eq!(info.ca_bundle.as_deref(), Some(ca_bundle.as_str()));

    // A launched node's user data joins the discovered endpoint with the discovered CA.
    create_node_class(
        &server,
        &node_class("default", json!([{"alias": "al2023@latest"}])),
    )
    .await;
    let claim = node_claim(
        "default-abcde",
        "default",
        json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]),
    );
    provider.create(&claim).await.unwrap();
    let templates = admin.ec2.describe_launch_templates().send().await.unwrap();
    let name = templates.launch_templates()[0].launch_template_name().unwrap();
    let data = latest_template_data(&admin.ec2, name).await.unwrap();
    let user_data = String::from_utf8(userdata::base64_decode(data.user_data().unwrap()).unwrap()).unwrap();
    assert!(user_data.contains(&endpoint), "{user_data}");
    assert!(user_data.contains(&ca_bundle), "{user_data}");

    // Given settings win: no discovery replaces them.
    let given = AwsProvider::start_with_clients(
        AwsSettings {
            cluster_ca_bundle: None,
            ..settings()
        },
        clients.clone(),
        server.client(),
    )
    .await
    .unwrap();
    assert_eq!(
        given.cloud_provider.cluster_info().endpoint.as_deref(),
        settings().cluster_endpoint.as_deref()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_fails_naming_the_setting_when_the_cluster_endpoint_cannot_be_discovered() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let server = karpenter_sim::apiserver::ApiServer::new(karpenter_sim::clock::SystemClock);
    // No EKS cluster of that name.
    let err = AwsProvider::start_with_clients(undiscovered(), clients, server.client())
        .await
        .unwrap_err();
    let message = err.to_string();
    assert_eq!(err.category(), "Configuration", "{message}");
    assert!(
        message.contains("settings.clusterEndpoint (CLUSTER_ENDPOINT) is not set"),
        "{message}"
    );
    assert!(message.contains(&format!("{CLUSTER:?}")), "{message}");
    assert!(message.contains("ResourceNotFoundException"), "{message}");
}
