//! Size: 5,000 nodes and 150,000 pods fit, and listing them is linear (objects are shared, lists are written
//! item by item, a namespace is a range of the ordered map).

mod support;

use std::time::Instant;

use karpenter_sim::apiserver::ResourceId;
use kube::api::{ListParams, PartialObjectMeta};
use serde_json::json;
use support::{TestResult, server};

#[tokio::test]
async fn five_thousand_nodes_and_150k_pods() -> TestResult {
    let server = server();
    let nodes = ResourceId::core("nodes");
    let pods = ResourceId::core("pods");
    let started = Instant::now();
    for n in 0..5_000 {
        server.create_internal(
            &nodes,
            json!({"metadata": {"name": format!("node-{n}"), "labels": {"zone": format!("z{}", n % 3)}}}),
        )?;
    }
    for p in 0..150_000 {
        let namespace = if p % 2 == 0 { "default" } else { "kube-system" };
        server.create_internal(&pods, json!({"metadata": {"namespace": namespace, "name": format!("pod-{p}"), "labels": {"app": format!("a{}", p % 100)}},
            "spec": {"nodeName": format!("node-{}", p % 5_000), "containers": [{"name": "c", "image": "i",
                     "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}))?;
    }
    let created = started.elapsed();

    let started = Instant::now();
    assert_eq!(server.list_internal(&pods, None).len(), 150_000);
    assert_eq!(server.list_internal(&pods, Some("kube-system")).len(), 75_000);
    // Through the client, paginated as kube-runtime's watcher lists (500 per page), metadata only.
    let api: kube::Api<PartialObjectMeta<k8s_openapi::api::core::v1::Pod>> = kube::Api::all(server.client());
    let first = api.list_metadata(&ListParams::default().limit(500)).await?;
    assert_eq!(first.items.len(), 500);
    let on_node = api
        .list_metadata(&ListParams::default().fields("spec.nodeName=node-7"))
        .await?;
    assert_eq!(on_node.items.len(), 30);
    let listed = started.elapsed();
    eprintln!("created 155,000 objects in {created:?}; listed in {listed:?}");
    Ok(())
}
