//! `karpenter controller --cloud-provider kwok` as a process against karpenter-sim's API server, with the NodePool
//! and KWOKNodeClass upstream's e2e suites start from (a class with no spec; os linux, on-demand and
//! `karpenter.kwok.sh/instance-size Lt 32`), and upstream's catalog format given with `--kwok-instance-types`:
//! a pending pod gets a NodeClaim and a Node as upstream's KWOK provider makes it, a pod selecting a
//! `karpenter.kwok.sh` label the NodePool does not declare is placed by that label, and a pod that fits only a
//! type of size 32 or more gets nothing; and a catalog file that cannot be used stops start-up naming it.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers outside #[test] fns

use std::{
    net::{Ipv4Addr, SocketAddr},
    process::{Child, Command, Stdio},
    sync::Arc,
    time::Duration,
};

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_api::{kwoknodeclass::KWOKNodeClass, nodeclaim::NodeClaim, nodepool::NodePool};
use karpenter_sim::{ApiServer, SystemClock};
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams},
};
use serde_json::json;

/// Kills the controller however the test ends.
struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Three instance types in upstream's instance_types.json format: two under the e2e suites' size limit of 32.
fn catalog() -> serde_json::Value {
    let offering = |price: f64, capacity_type: &str| {
        json!({"Price": price, "Available": true, "Requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity_type]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]})
    };
    let it = |name: &str, cpu: &str, memory: &str, price: f64| {
        json!({"name": name, "architecture": "amd64", "operatingSystems": ["linux"],
               "resources": {"cpu": cpu, "memory": memory, "pods": "110"},
               "offerings": [offering(price, "on-demand"), offering(price / 3.0, "spot")]})
    };
    json!([
        it("c-4x-amd64-linux", "4", "8Gi", 0.2),
        it("m-16x-amd64-linux", "16", "64Gi", 0.9),
        it("c-48x-amd64-linux", "48", "96Gi", 2.0),
    ])
}

async fn pending_pod(pods: &Api<Pod>, name: &str, cpu: &str, node_selector: serde_json::Value) {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeSelector": node_selector, "containers": [{"name": "app", "image": "x",
            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/0 nodes are available"}]}
    }))
    .unwrap();
    let mut created = pods.create(&PostParams::default(), &pod).await.unwrap();
    created.status = pod.status.clone();
    pods.replace_status(name, &PostParams::default(), &created)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kwok_node_class_node_pool_launches_upstream_kwok_nodes() {
    let api = ApiServer::new(Arc::new(SystemClock));
    let http = api
        .serve_http(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("karpenter-kwok-nodeclass-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    http.write_kubeconfig(&kubeconfig).unwrap();
    let types = dir.join("instance_types.json");
    std::fs::write(&types, catalog().to_string()).unwrap();

    let client = api.client();
    // The e2e suites' default class: no spec. This API server applies no CRD defaults, so its Ready condition,
    // which a real API server defaults, is written here.
    let resource = ApiResource::erase::<KWOKNodeClass>(&());
    let classes = Api::<DynamicObject>::all_with(client.clone(), &resource);
    let class = json!({"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
                       "metadata": {"name": "default-abcde"}});
    classes
        .create(&PostParams::default(), &serde_json::from_value(class).unwrap())
        .await
        .unwrap();
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
        "message": "", "lastTransitionTime": "2024-01-01T01:01:01Z"}]}});
    classes
        .patch_status("default-abcde", &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .unwrap();
    let pool: NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "Never",
                           "budgets": [{"nodes": "100%"}]},
            "template": {"spec": {
                "expireAfter": "Never",
                "requirements": [
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": "karpenter.kwok.sh/instance-size", "operator": "Lt", "values": ["32"]}],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default-abcde"}}}}
    }))
    .unwrap();
    Api::<NodePool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await
        .unwrap();

    let child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args([
            "controller",
            "--cloud-provider",
            "kwok",
            "--disable-leader-election",
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .arg("--kwok-instance-types")
        .arg(&types)
        .args(["--metrics-port", "0", "--health-probe-port", "0"])
        .args(["--batch-idle-duration", "100ms", "--batch-max-duration", "1s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _controller = Controller(child);

    // The pod selecting instance-family m lands on the m type although c-4x is cheaper, which it may select
    // only because the karpenter.kwok.sh labels are well known (the NodePool does not declare that key). The
    // 20-CPU pod fits only c-48x, which the NodePool's instance-size Lt 32 rules out, so it stays pending.
    let pods = Api::<Pod>::namespaced(client.clone(), "default");
    pending_pod(
        &pods,
        "picky",
        "1",
        json!({"karpenter.kwok.sh/instance-family": "m"}),
    )
    .await;
    pending_pod(&pods, "huge", "20", json!({})).await;

    let claims = Api::<NodeClaim>::all(client.clone());
    let nodes_api = Api::<Node>::all(client.clone());
    let mut nodes = Vec::new();
    for _ in 0..300 {
        nodes = nodes_api.list(&Default::default()).await.unwrap().items;
        if !nodes.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A second NodeClaim, had there been one, comes from the same batch; give it time to show.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let launched = claims.list(&Default::default()).await.unwrap().items;
    assert_eq!(
        launched.len(),
        1,
        "one NodeClaim, for the picky pod only: {launched:?}"
    );
    assert_eq!(nodes.len(), 1, "the NodeClaim's Node: {nodes:?}");
    let node = &nodes[0];
    let claim = &launched[0];
    let label = |key: &str| node.labels().get(key).cloned().unwrap_or_default();
    assert_eq!(label("node.kubernetes.io/instance-type"), "m-16x-amd64-linux");
    assert_eq!(label("karpenter.kwok.sh/instance-size"), "16");
    assert_eq!(label("topology.kubernetes.io/zone"), "test-zone-a");
    assert_eq!(label("kubernetes.io/os"), "linux");
    assert_eq!(label("karpenter.kwok.sh/instance-family"), "m");
    assert_eq!(label("karpenter.kwok.sh/instance-cpu"), "16");
    assert_eq!(label("karpenter.kwok.sh/instance-memory"), "64Gi");
    assert_eq!(label("karpenter.sh/capacity-type"), "on-demand");
    assert_eq!(label("karpenter.sh/nodepool"), "default");
    assert_eq!(label("kwok.x-k8s.io/node"), "fake");
    assert_eq!(label("kwok-partition"), "a");
    assert_eq!(label("kubernetes.io/hostname"), claim.name_any());
    assert_eq!(
        node.annotations().get("kwok.x-k8s.io/node").map(String::as_str),
        Some("fake")
    );
    assert!(
        node.name_any()
            .starts_with(&format!("kwok-{}-", claim.name_any()))
    );
    assert_eq!(
        node.spec.as_ref().and_then(|s| s.provider_id.clone()),
        Some(format!("kwok://{}", node.name_any()))
    );
    assert_eq!(
        claim.status.as_ref().and_then(|s| s.provider_id.clone()),
        Some(format!("kwok://{}", node.name_any()))
    );

    let _ = std::fs::remove_dir_all(&dir);
    http.shutdown().await;
}

/// A KWOK catalog that was named and cannot be used stops start-up naming the file and, for a bad entry, the
/// entry and field; so does a bad AWS catalog for EC2NodeClass NodePools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_kwok_catalog_stops_start_up_naming_it() {
    let api = ApiServer::new(Arc::new(SystemClock));
    let http = api
        .serve_http(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("karpenter-kwok-bad-catalog-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    http.write_kubeconfig(&kubeconfig).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"[{"name": "c-1x", "resources": {"cpu": "one"}}]"#).unwrap();
    let run = |args: &[&str], env: &[(&str, &std::path::Path)]| {
        let out = Command::new(env!("CARGO_BIN_EXE_karpenter"))
            .args([
                "controller",
                "--cloud-provider",
                "kwok",
                "--disable-leader-election",
                "--kubeconfig",
            ])
            .arg(&kubeconfig)
            .args(["--metrics-port", "0", "--health-probe-port", "0"])
            .args(args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let bad_path = bad.display().to_string();
    let (ok, stderr) = run(&[], &[("INSTANCE_TYPES_FILE_PATH", &bad)]);
    assert!(
        !ok && stderr.contains(&format!("KWOK instance types {bad_path}: [0].resources.cpu")),
        "{stderr}"
    );
    let missing = dir.join("missing.json");
    let (ok, stderr) = run(
        &["--instance-types-file-path", &missing.display().to_string()],
        &[],
    );
    assert!(
        !ok && stderr.contains(&format!("KWOK instance types {}", missing.display())),
        "{stderr}"
    );
    let (ok, stderr) = run(&["--kwok-aws-catalog", &bad_path], &[]);
    assert!(
        !ok && stderr.contains(&format!("KWOK_AWS_CATALOG {bad_path}")),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    http.shutdown().await;
}
