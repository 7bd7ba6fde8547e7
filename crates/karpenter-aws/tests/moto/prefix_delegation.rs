//! A class with `ipPrefixCount` launches nodes whose max pods follow prefix delegation, and each launch is
//! counted on to take whole /28 prefixes from its subnet.

use karpenter_core::cloudprovider::CloudProvider;
use serde_json::json;

use karpenter_aws::userdata;

use crate::moto;

use super::fixtures::{create_node_class, latest_template_data, network, node_claim, node_class, provider};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_with_ip_prefixes_launches_prefix_mode_nodes_and_counts_their_prefixes() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    let net = network(&admin).await;
    let (server, provider) = provider(clients.clone()).await;
    provider.refresh_instance_types().await.unwrap();
    let mut class = node_class("prefixes", json!([{"alias": "al2023@latest"}]));
    class.spec.ip_prefix_count = Some(1);
    create_node_class(&server, &class).await;

    let claim = node_claim(
        "prefixes-abcde",
        "prefixes",
        json!([
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-west-2a"]}
        ]),
    );
    let subnets = admin
        .ec2
        .describe_subnets()
        .subnet_ids(&net.subnet_ids[0])
        .send()
        .await
        .unwrap();
    let free_before = i64::from(subnets.subnets()[0].available_ip_address_count().unwrap());
    let launched = provider.create(&claim).await.unwrap();
    let status = launched.status.as_ref().unwrap();
    // m5.large: 3 ENIs × 9 prefixes × 16 + 2 = 434, capped at 110.
    assert_eq!(status.capacity.as_ref().unwrap()["pods"].0, "110");
    assert_eq!(status.allocatable.as_ref().unwrap()["pods"].0, "110");

    // The kubelet is told the same.
    let templates = admin.ec2.describe_launch_templates().send().await.unwrap();
    let [template] = templates.launch_templates() else {
        panic!("one template: {templates:?}");
    };
    let data = latest_template_data(&admin.ec2, template.launch_template_name().unwrap())
        .await
        .unwrap();
    let user_data = String::from_utf8(userdata::base64_decode(data.user_data().unwrap()).unwrap()).unwrap();
    assert!(user_data.contains("      maxPods: 110\n"), "{user_data}");
    assert_eq!(data.network_interfaces()[0].ipv4_prefix_count(), Some(1));

    // The launch resolved the class (EC2 counted the subnet's free addresses then, as before it) and holds
    // 7 prefixes and the node's own address there until EC2 counts again.
    assert_eq!(
        provider.subnet_ips().free(&net.subnet_ids[0]),
        Some(free_before - (1 + 7 * 16))
    );
}
