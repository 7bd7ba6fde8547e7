//! Shared fixtures of the CloudProvider, interruption and EC2NodeClass tests: a VPC with tagged subnets and a
//! security group, objects built from JSON, and an in-memory API server.

use std::sync::Arc;

use aws_sdk_ec2::types::Tag;
use karpenter_api::common::ConditionStatus;
use karpenter_api::ec2nodeclass::EC2NodeClass;
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_aws::nodeclass::controller::{Context, reconcile};
use karpenter_aws::{AwsCloudProvider, AwsSettings, KubeNodeClasses};
use karpenter_sim::apiserver::ApiServer;
use karpenter_sim::clock::SystemClock;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

pub const CLUSTER: &str = "test-cluster";
pub const DISCOVERY: &str = "test";
/// The API server nodes join (user data).
pub const ENDPOINT: &str = "https://test.gr7.us-west-2.eks.amazonaws.com";
/// The cluster CA nodes trust (user data): base64 of a PEM.
pub const CA_BUNDLE: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==";

/// What [`network`] created.
pub struct Network {
    /// us-west-2a, us-west-2b.
    pub subnet_ids: Vec<String>,
    #[allow(dead_code)] // not every test binary module reads it
    pub security_group_id: String,
}

/// The instance profile [`node_class`] names; [`network`] creates it, as a cluster's setup would (a dry-run
/// RunInstances with a profile IAM does not know fails in moto, as a real launch would).
pub const INSTANCE_PROFILE: &str = "KarpenterNodeInstanceProfile";

/// The node role deploy/cloudformation.yaml creates (`KarpenterNodeRole-<cluster>`), the one role its controller
/// policies let the controller pass to EC2.
pub const NODE_ROLE: &str = "KarpenterNodeRole-test-cluster";

/// A VPC with a subnet in us-west-2a and one in us-west-2b and a security group, all tagged
/// `karpenter.sh/discovery: test`, and the instance profile [`node_class`] uses.
pub async fn network(clients: &karpenter_aws::AwsClients) -> Network {
    let ec2 = &clients.ec2;
    clients
        .iam
        .create_instance_profile()
        .instance_profile_name(INSTANCE_PROFILE)
        .send()
        .await
        .unwrap();
    let vpc = ec2.create_vpc().cidr_block("10.0.0.0/16").send().await.unwrap();
    let vpc_id = vpc.vpc().and_then(|v| v.vpc_id()).unwrap().to_string();
    let mut subnet_ids = Vec::new();
    for (zone, cidr) in [("us-west-2a", "10.0.1.0/24"), ("us-west-2b", "10.0.2.0/24")] {
        let subnet = ec2
            .create_subnet()
            .vpc_id(&vpc_id)
            .cidr_block(cidr)
            .availability_zone(zone)
            .send()
            .await
            .unwrap();
        subnet_ids.push(subnet.subnet().and_then(|s| s.subnet_id()).unwrap().to_string());
    }
    let group = ec2
        .create_security_group()
        .group_name("nodes")
        .description("nodes")
        .vpc_id(&vpc_id)
        .send()
        .await
        .unwrap();
    let security_group_id = group.group_id().unwrap().to_string();
    let mut resources = subnet_ids.clone();
    resources.push(security_group_id.clone());
    ec2.create_tags()
        .set_resources(Some(resources))
        .tags(
            Tag::builder()
                .key("karpenter.sh/discovery")
                .value(DISCOVERY)
                .build(),
        )
        .send()
        .await
        .unwrap();
    Network {
        subnet_ids,
        security_group_id,
    }
}

/// An EC2NodeClass selecting the [`network`] by tag, with `ami_terms`, and an existing instance profile.
pub fn node_class(name: &str, ami_terms: serde_json::Value) -> EC2NodeClass {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": {
            "amiSelectorTerms": ami_terms,
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": DISCOVERY}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": DISCOVERY}}],
            "instanceProfile": INSTANCE_PROFILE,
            "tags": {"team": "platform"}
        }
    }))
    .unwrap()
}

/// A NodeClaim of NodePool `default` for class `class` with `requirements`.
pub fn node_claim(name: &str, class: &str, requirements: serde_json::Value) -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "requirements": requirements,
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": class}
        }
    }))
    .unwrap()
}

/// Settings for the test cluster, AMI aliases for Kubernetes 1.33 (the harness serves its parameters).
pub fn settings() -> AwsSettings {
    AwsSettings {
        cluster_name: CLUSTER.into(),
        kubernetes_version: Some("1.33".into()),
        cluster_endpoint: Some(ENDPOINT.into()),
        cluster_ca_bundle: Some(CA_BUNDLE.into()),
        cluster_dns_ip: Some("10.100.0.10".into()),
        ..AwsSettings::default()
    }
}

/// An in-memory API server and a provider reading EC2NodeClasses from it.
pub async fn provider(clients: karpenter_aws::AwsClients) -> (ApiServer, Arc<AwsCloudProvider>) {
    let server = ApiServer::new(SystemClock);
    let provider = provider_on(&server, settings(), clients);
    (server, provider)
}

/// A provider with `settings` reading EC2NodeClasses from `server`.
pub fn provider_on(
    server: &ApiServer,
    settings: AwsSettings,
    clients: karpenter_aws::AwsClients,
) -> Arc<AwsCloudProvider> {
    let source = Arc::new(KubeNodeClasses::new(server.client()));
    Arc::new(AwsCloudProvider::new(settings, clients, source).unwrap())
}

/// The AL2023 x86_64 AMI the harness serves under EKS's public SSM parameter for Kubernetes 1.33.
pub async fn al2023_image_id(ssm: &aws_sdk_ssm::Client) -> String {
    ssm.get_parameter()
        .name("/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id")
        .send()
        .await
        .unwrap()
        .parameter()
        .and_then(|p| p.value())
        .unwrap()
        .to_string()
}

/// The data of launch template `name`'s latest version, as EC2 (moto) stored it.
pub async fn latest_template_data(
    ec2: &aws_sdk_ec2::Client,
    name: &str,
) -> Option<aws_sdk_ec2::types::ResponseLaunchTemplateData> {
    let versions = ec2
        .describe_launch_template_versions()
        .launch_template_name(name)
        .versions("$Latest")
        .send()
        .await
        .unwrap();
    versions.launch_template_versions()[0]
        .launch_template_data()
        .cloned()
}

pub async fn create_node_class(server: &ApiServer, class: &EC2NodeClass) -> EC2NodeClass {
    let api: Api<EC2NodeClass> = Api::all(server.client());
    api.create(&PostParams::default(), class).await.unwrap()
}

/// The harness's insufficient-capacity rules (see harness.py), written through the SSM API.
pub async fn set_ice(clients: &karpenter_aws::AwsClients, rules: &str) {
    clients
        .ssm
        .put_parameter()
        .name("/moto-harness/ice")
        .value(rules)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .overwrite(true)
        .send()
        .await
        .unwrap();
}

/// The capacity reservations the harness answers DescribeCapacityReservations with (see harness.py): a JSON
/// list in EC2's shape, written through the SSM API. Writing it again replaces them, including their
/// AvailableInstanceCount (the harness subtracts the instances it launched into each).
pub async fn set_capacity_reservations(clients: &karpenter_aws::AwsClients, reservations: serde_json::Value) {
    clients
        .ssm
        .put_parameter()
        .name("/moto-harness/capacity-reservations")
        .value(reservations.to_string())
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .overwrite(true)
        .send()
        .await
        .unwrap();
}

/// An EventBridge envelope around `detail`, as the interruption queue receives it.
pub fn event(source: &str, detail_type: &str, detail: &str) -> String {
    format!(
        r#"{{"version": "0", "id": "e", "detail-type": "{detail_type}", "source": "{source}",
            "account": "123456789012", "time": "2026-12-02T12:00:00Z", "region": "us-west-2",
            "resources": [], "detail": {detail}}}"#
    )
}

/// Sends every body to the queue at `queue_url`.
pub async fn send_messages(sqs: &aws_sdk_sqs::Client, queue_url: &str, bodies: &[String]) {
    for body in bodies {
        sqs.send_message()
            .queue_url(queue_url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
}

/// Runs the EC2NodeClass controller once on `name` and returns the class as stored.
pub async fn reconciled(server: &ApiServer, provider: &Arc<AwsCloudProvider>, name: &str) -> EC2NodeClass {
    let api: Api<EC2NodeClass> = Api::all(server.client());
    let ctx = Arc::new(Context {
        client: server.client(),
        provider: provider.clone(),
    });
    let class = api.get(name).await.unwrap();
    let _ = reconcile(Arc::new(class), ctx).await;
    api.get(name).await.unwrap()
}

/// A condition of `class` as (status, reason, message).
pub fn condition(class: &EC2NodeClass, type_: &str) -> Option<(ConditionStatus, String, String)> {
    class
        .condition(type_)
        .map(|c| (c.status, c.reason.clone(), c.message.clone()))
}
