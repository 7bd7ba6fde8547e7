//! An instance whose NodeClaim tag did not make it to EC2: the provider still lists it under its NodeClaim
//! (so garbage collection leaves it), and the tagging controller applies the tags later.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_aws::instance::get_instance;
use karpenter_aws::nodeclaim_tagging::InstanceTagger;
use karpenter_aws::nodeclaim_tagging::controller::{TaggingContext, reconcile};
use karpenter_core::cloudprovider::CloudProvider;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::moto;

use super::fixtures::{CLUSTER, al2023_image_id, provider};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_waiting_for_its_node_claim_tag_is_listed_as_its_claims_and_tagged_later() {
    let moto = moto!(&["m5.large"]);
    let clients = moto.clients("us-west-2").await;
    let admin = moto.admin_clients("us-west-2").await;
    let ec2 = &clients.ec2;
    let (server, provider) = provider(clients.clone()).await;

    // Launched in a batch: the cluster's tags, and CreateTags for the NodeClaim's never succeeded.
    let image_id = al2023_image_id(&admin.ssm).await;
    let tag = |key: &str, value: &str| Tag::builder().key(key).value(value).build();
    let run = admin
        .ec2
        .run_instances()
        .image_id(&image_id)
        .instance_type("m5.large".into())
        .min_count(1)
        .max_count(1)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::Instance)
                .tags(tag("karpenter.sh/nodepool", "default"))
                .tags(tag("eks:eks-cluster-name", CLUSTER))
                .tags(tag(&format!("kubernetes.io/cluster/{CLUSTER}"), "owned"))
                .build(),
        )
        .send()
        .await
        .unwrap();
    let instance_id = run.instances()[0].instance_id().unwrap().to_string();
    let claim_tag = BTreeMap::from([("karpenter.sh/nodeclaim".to_string(), "default-x7k2p".to_string())]);
    provider
        .tag_ledger()
        .record_waiting(&instance_id, claim_tag, std::time::Instant::now());

    // Listed and got under the claim's name, though EC2 has no such tag.
    let listed = provider.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name_any(), "default-x7k2p");
    let provider_id = listed[0].status.as_ref().unwrap().provider_id.clone().unwrap();
    // Garbage collection's summaries name it too.
    let summaries = provider.list_instances().await.unwrap();
    assert_eq!(summaries.len(), 1);
    assert_eq!(summaries[0].node_claim.as_deref(), Some("default-x7k2p"));
    assert_eq!(summaries[0].provider_id, provider_id);
    assert_eq!(
        provider.get(&provider_id).await.unwrap().name_any(),
        "default-x7k2p"
    );
    let described = get_instance(ec2, &instance_id).await.unwrap();
    assert!(!described.tags.contains_key("karpenter.sh/nodeclaim"));

    // The claim registered; the tagging controller tags its instance and marks it.
    let claims: Api<NodeClaim> = Api::all(server.client());
    let claim: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "default-x7k2p"},
        "spec": {"requirements": [],
                 "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
    }))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap();
    let node_name = "ip-10-0-1-7.us-west-2.compute.internal";
    let status = json!({"status": {"providerID": provider_id, "nodeName": node_name}});
    claims
        .patch_status("default-x7k2p", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let ctx = TaggingContext {
        client: server.client(),
        tagger: Arc::new(ec2.clone()) as Arc<dyn InstanceTagger>,
        ledger: Arc::clone(provider.tag_ledger()),
        cluster_name: CLUSTER.into(),
        create_tags_interval: Duration::ZERO,
        unowned_grace: Duration::from_secs(900),
    };
    let outcome = reconcile(&ctx).await.unwrap();
    assert_eq!(outcome.tagged, ["default-x7k2p"]);
    let described = get_instance(ec2, &instance_id).await.unwrap();
    assert_eq!(described.tags["karpenter.sh/nodeclaim"], "default-x7k2p");
    assert_eq!(described.tags["Name"], node_name);
    assert_eq!(described.tags["eks:eks-cluster-name"], CLUSTER);
    let marked = claims.get("default-x7k2p").await.unwrap();
    assert_eq!(marked.annotations()["karpenter.k8s.aws/tagged"], "true");
    assert!(provider.tag_ledger().is_empty(), "nothing left to wait for");
}
