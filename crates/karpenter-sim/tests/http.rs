//! The HTTP transport serves the same request path as the in-process one: a kube client over
//! http://127.0.0.1 lists, watches and writes; shutting the server down ends its watches.

mod support;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, api::PostParams, runtime::watcher};
use serde_json::json;
use support::{TestResult, server};

#[tokio::test]
async fn kube_client_over_http_watches_and_writes() -> TestResult {
    let server = server();
    let http = server.serve_http(([127, 0, 0, 1], 0).into()).await?;
    let config = kube::Config::new(http.url().parse()?);
    let client = kube::Client::try_from(config)?;
    let nodes: Api<Node> = Api::all(client);
    let mut events = Box::pin(watcher(nodes.clone(), watcher::Config::default()));
    assert!(matches!(events.try_next().await?, Some(watcher::Event::Init)));
    assert!(matches!(events.try_next().await?, Some(watcher::Event::InitDone)));

    let node: Node =
        serde_json::from_value(json!({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4"}}}))?;
    let created = nodes.create(&PostParams::default(), &node).await?;
    // Nodes keep their status on create, as upstream's node strategy does.
    assert!(
        created
            .status
            .and_then(|s| s.capacity)
            .is_some_and(|c| c.contains_key("cpu"))
    );
    match events.try_next().await? {
        Some(watcher::Event::Apply(node)) => assert_eq!(node.metadata.name.as_deref(), Some("n1")),
        other => return Err(format!("expected the node, got {other:?}").into()),
    }
    assert_eq!(server.open_watches(), 1);
    http.shutdown().await;
    // The watch connection is gone with the server.
    support::eventually(std::time::Duration::from_secs(5), || async {
        server.open_watches() == 0
    })
    .await?;
    Ok(())
}
