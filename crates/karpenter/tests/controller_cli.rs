//! `karpenter controller` as a process against an API server over HTTP (karpenter-sim's, served on 127.0.0.1
//! with a kubeconfig), with the kwok provider: it takes the leader Lease, answers /healthz and /readyz, creates
//! a NodeClaim (and its Node) for pending pods, exports metrics; and a bad setting stops it at start-up naming
//! the setting.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers outside #[test] fns

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    sync::Arc,
    time::Duration,
};

use k8s_openapi::api::{coordination::v1::Lease, core::v1::Node};
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_e2e::{apply_node_class, apply_nodepool};
use karpenter_sim::{ApiServer, SystemClock};
use kube::{Api, api::PostParams};
use serde_json::json;

/// Kills the controller however the test ends.
struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// A plain HTTP GET: (status code, body), or None while nothing listens.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    get_accepting(port, path, None)
}

/// [`get`] with an `Accept` header.
fn get_accepting(port: u16, path: &str, accept: Option<&str>) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).ok()?;
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{accept}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let chunked = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"));
    Some((code, if chunked { dechunk(body)? } else { body.to_string() }))
}

/// The body of a `Transfer-Encoding: chunked` response (a streamed one, as /metrics is).
fn dechunk(mut body: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..size)?);
        body = rest.get(size..)?.strip_prefix("\r\n")?;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_leads_serves_probes_and_metrics_and_launches_for_pending_pods() {
    let api = ApiServer::new(Arc::new(SystemClock));
    let http = api
        .serve_http(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let kubeconfig =
        std::env::temp_dir().join(format!("karpenter-controller-{}.kubeconfig", std::process::id()));
    http.write_kubeconfig(&kubeconfig).unwrap();
    let (metrics_port, probe_port) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["controller", "--cloud-provider", "kwok", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--metrics-port", &metrics_port.to_string()])
        .args(["--health-probe-port", &probe_port.to_string()])
        .args(["--batch-idle-duration", "100ms", "--batch-max-duration", "1s"])
        .env("POD_NAME", "karpenter-test-0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _controller = Controller(child);

    // Ready once the cache has synced; bounded wait, not a timing assertion.
    let mut ready = None;
    for _ in 0..300 {
        ready = get(probe_port, "/readyz");
        if ready.as_ref().is_some_and(|(code, _)| *code == 200) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(ready.map(|(c, _)| c), Some(200), "/readyz never answered 200");
    assert_eq!(get(probe_port, "/healthz").map(|(c, _)| c), Some(200));
    let lease = Api::<Lease>::namespaced(api.client(), "kube-system")
        .get("karpenter-leader-election")
        .await
        .unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("karpenter-test-0")
    );

    let client = api.client();
    // The NodeClass the NodePool refers to, as a user creates it: a NodePool whose NodeClass is missing is not
    // Ready and launches nothing. Under kwok it needs no status.
    apply_node_class(&client, "default").await.unwrap();
    apply_nodepool(&client, "default", &["on-demand"], serde_json::Value::Null)
        .await
        .unwrap();
    // No kube-scheduler here: pods are created pending and marked unschedulable, as kube-scheduler would.
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), "default");
    for i in 0..3 {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("web-{i}"), "namespace": "default", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "x",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "0/0 nodes are available"}]}
        }))
        .unwrap();
        let mut created = pods.create(&PostParams::default(), &pod).await.unwrap();
        created.status = pod.status.clone();
        pods.replace_status(&format!("web-{i}"), &PostParams::default(), &created)
            .await
            .unwrap();
    }

    let claims = Api::<NodeClaim>::all(client.clone());
    let mut launched = Vec::new();
    for _ in 0..300 {
        launched = claims.list(&Default::default()).await.unwrap().items;
        if launched
            .iter()
            .any(|c| c.status.as_ref().and_then(|s| s.provider_id.as_ref()).is_some())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        launched.len(),
        1,
        "one NodeClaim for three 1-cpu pods: {launched:?}"
    );
    let nodes = Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(nodes.len(), 1, "the kwok provider created the Node");

    // What Prometheus asks for: OpenMetrics.
    let openmetrics = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
    let (code, metrics) = get_accepting(metrics_port, "/metrics", Some(openmetrics)).unwrap();
    assert_eq!(code, 200);
    for expected in [
        "# TYPE karpenter_nodeclaims_created counter",
        // The process's own, as every Prometheus client exports them (upstream's e2e suites read these).
        "# TYPE process_cpu_seconds counter",
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "go_gc_heap_live_bytes ",
        r#"karpenter_nodeclaims_created_total{reason="provisioning",nodepool="default""#,
        r#"leader_election_master_status{name="karpenter-leader-election"} 1"#,
        "karpenter_cluster_state_synced 1",
        r#"karpenter_cloudprovider_duration_seconds_count{controller="nodeclaim.lifecycle",method="Create",provider="kwok"}"#,
        r#"controller_runtime_reconcile_total{controller="provisioner",result="success"}"#,
        // The per-node gauges, streamed after the registry's metrics.
        "# TYPE karpenter_nodes_allocatable gauge",
        r#"karpenter_nodes_allocatable{node_name=""#,
    ] {
        assert!(
            metrics.contains(expected),
            "{expected} missing from /metrics:\n{metrics}"
        );
    }
    assert!(
        metrics.ends_with("# EOF\n"),
        "the exposition is complete:\n{metrics}"
    );
    // What client-go's pod proxy GET and curl get: the classic text format, every counter's family named
    // after its sample, no OpenMetrics end marker.
    let (code, classic) = get(metrics_port, "/metrics").unwrap();
    assert_eq!(code, 200);
    for expected in [
        "# TYPE karpenter_nodeclaims_created_total counter",
        "# TYPE process_cpu_seconds_total counter",
        "# TYPE process_resident_memory_bytes gauge",
        "# TYPE karpenter_nodes_allocatable gauge",
    ] {
        assert!(
            classic.contains(expected),
            "{expected} missing from the classic text:\n{classic}"
        );
    }
    assert!(!classic.contains("# EOF") && !classic.contains("# TYPE karpenter_nodeclaims_created counter"));
    let heap = classic
        .lines()
        .find_map(|l| l.strip_prefix("go_gc_heap_live_bytes "))
        .and_then(|v| v.parse::<f64>().ok());
    assert!(heap.is_some_and(|b| b > 0.0), "the live heap is read: {heap:?}");
    let _ = std::fs::remove_file(&kubeconfig);
    http.shutdown().await;
}

#[test]
fn a_bad_setting_stops_start_up_naming_it() {
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let out = Command::new(env!("CARGO_BIN_EXE_karpenter"))
            .args(args)
            .envs(env.iter().copied())
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (ok, stderr) = run(&["controller", "--batch-max-duration", "ten"], &[]);
    assert!(!ok && stderr.contains("BATCH_MAX_DURATION"), "{stderr}");
    let (ok, stderr) = run(&["controller"], &[("FEATURE_GATES", "NodeRepair=maybe")]);
    assert!(
        !ok && stderr.contains("FEATURE_GATES") && stderr.contains("NodeRepair"),
        "{stderr}"
    );
    let (ok, stderr) = run(&["controller"], &[("BATCH_IDLE_DURATION", "20s")]);
    assert!(!ok && stderr.contains("BATCH_IDLE_DURATION"), "{stderr}");
    // No subcommand is the controller too.
    let (ok, stderr) = run(&["--log-level", "loud"], &[]);
    assert!(!ok && stderr.contains("LOG_LEVEL"), "{stderr}");
}
