//! EC2NodeClass network and CPU settings through the CloudProvider against moto: a claim requesting EFA gets
//! EFA interfaces in its launch template, and `cpuOptions.nestedVirtualization: enabled` keeps only the
//! instance types whose processors support it.

use karpenter_core::cloudprovider::CloudProvider;
use serde_json::json;

use crate::moto;

use super::fixtures::{create_node_class, latest_template_data, network, node_claim, node_class, provider};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_requesting_efa_launches_with_an_efa_interface() {
    // c5n.9xlarge has one EFA interface; m5.large none, so the claim's EFA request rules it out.
    let moto = moto!(&["c5n.9xlarge", "m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    let net = network(&admin).await;
    let (server, provider) = provider(clients.clone()).await;
    provider.refresh_instance_types().await.unwrap();
    create_node_class(
        &server,
        &node_class("default", json!([{"alias": "al2023@latest"}])),
    )
    .await;
    let mut claim = node_claim(
        "efa-abcde",
        "default",
        json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]),
    );
    claim.spec.resources.requests.get_or_insert_default().insert(
        "vpc.amazonaws.com/efa".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
    );
    let launched = provider.create(&claim).await.unwrap();
    let labels = launched.metadata.labels.unwrap();
    assert_eq!(labels["node.kubernetes.io/instance-type"], "c5n.9xlarge");

    let templates = admin.ec2.describe_launch_templates().send().await.unwrap();
    let [template] = templates.launch_templates() else {
        panic!("one template: {templates:?}");
    };
    let data = latest_template_data(&admin.ec2, template.launch_template_name().unwrap())
        .await
        .unwrap();
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
            )
        })
        .collect();
    assert_eq!(
        interfaces,
        [(Some(0), Some(0), Some("efa"), vec![net.security_group_id.clone()])]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_virtualization_keeps_only_the_types_that_support_it() {
    // moto's c8i.large lists the nested-virtualization processor feature; m5.large does not.
    let moto = moto!(&["c8i.large", "m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let (_server, provider) = provider(clients.clone()).await;
    provider.refresh_instance_types().await.unwrap();
    let names = |class: &karpenter_api::ec2nodeclass::EC2NodeClass| -> Vec<String> {
        provider
            .catalog_for(class)
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect()
    };
    let mut class = node_class("nested", json!([{"alias": "al2023@latest"}]));
    assert_eq!(names(&class), ["c8i.large", "m5.large"]);
    for (state, expected) in [
        ("enabled", vec!["c8i.large"]),
        ("disabled", vec!["c8i.large", "m5.large"]),
    ] {
        class.spec.cpu_options = Some(karpenter_api::ec2nodeclass::CpuOptions {
            nested_virtualization: Some(state.into()),
        });
        assert_eq!(names(&class), expected, "nestedVirtualization: {state}");
    }
}
