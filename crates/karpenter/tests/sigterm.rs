//! Two `karpenter controller` processes against one API server (karpenter-sim's, on 127.0.0.1 with a
//! kubeconfig), as the chart runs two replicas: when the leader receives SIGTERM (what the kubelet sends on a
//! rollout) it exits 0 and releases the leader Lease, and the standby takes over within seconds rather than
//! after the 15-second lease duration, and launches for pending pods.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers outside #[test] fns

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::{coordination::v1::Lease, core::v1::Pod};
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_e2e::{apply_node_class, apply_nodepool};
use karpenter_sim::{ApiServer, SystemClock};
use kube::{Api, api::PostParams};
use serde_json::json;

/// Kills the controller however the test ends.
struct Controller {
    child: Child,
    metrics_port: u16,
    probe_port: u16,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

fn start(kubeconfig: &Path, identity: &str, log: &Path) -> Controller {
    let (metrics_port, probe_port) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["controller", "--cloud-provider", "kwok", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["--metrics-port", &metrics_port.to_string()])
        .args(["--health-probe-port", &probe_port.to_string()])
        .args(["--batch-idle-duration", "100ms", "--batch-max-duration", "1s"])
        .env("POD_NAME", identity)
        .stdout(std::fs::File::create(log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Controller {
        child,
        metrics_port,
        probe_port,
    }
}

/// A plain HTTP/1.0 GET (so the body is not chunked): (status code, response), or None while nothing listens.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, response))
}

async fn holder(api: &ApiServer) -> Option<String> {
    Api::<Lease>::namespaced(api.client(), "kube-system")
        .get_opt("karpenter-leader-election")
        .await
        .unwrap()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

/// Polls `check` every 100 ms for up to `within`; bounded waits, not timing assertions.
async fn until<F: std::future::Future<Output = bool>>(
    within: Duration,
    mut check: impl FnMut() -> F,
) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Sends SIGTERM to `pid`, as the kubelet does to a pod's containers.
fn sigterm(pid: u32) {
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -TERM {pid}: {status}");
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sigterm_the_leader_exits_0_and_releases_the_lease_and_the_standby_takes_over_at_once() {
    let api = ApiServer::new(Arc::new(SystemClock));
    let http = api
        .serve_http(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("karpenter-sigterm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    http.write_kubeconfig(&kubeconfig).unwrap();
    let client = api.client();
    // The NodeClass the NodePool refers to, as a user creates it: a NodePool whose NodeClass is missing is not
    // Ready and launches nothing. Under kwok it needs no status.
    apply_node_class(&client, "default").await.unwrap();
    apply_nodepool(&client, "default", &["on-demand"], serde_json::Value::Null)
        .await
        .unwrap();

    let (log_a, log_b) = (dir.join("a.log"), dir.join("b.log"));
    let mut a = start(&kubeconfig, "karpenter-a", &log_a);
    let logs = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        until(Duration::from_secs(30), || async {
            holder(&api).await.as_deref() == Some("karpenter-a")
        })
        .await,
        "the first replica never took the Lease:\n{}",
        logs(&log_a)
    );
    let b = start(&kubeconfig, "karpenter-b", &log_b);
    // The standby is ready (its cache synced) but does not lead.
    assert!(
        until(Duration::from_secs(30), || async {
            get(b.probe_port, "/readyz").is_some_and(|(code, _)| code == 200)
        })
        .await,
        "the standby never became ready:\n{}",
        logs(&log_b)
    );
    let standby = get(b.metrics_port, "/metrics").unwrap().1;
    assert!(
        standby.contains(r#"leader_election_master_status{name="karpenter-leader-election"} 0"#),
        "{standby}"
    );
    assert_eq!(holder(&api).await.as_deref(), Some("karpenter-a"));

    let signalled = Instant::now();
    sigterm(a.child.id());
    // Bounded by the kubelet's default 30-second grace period, after which it would kill the process.
    let status = wait_exit(&mut a.child, Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "the leader did not exit 0 on SIGTERM: {status:?}\n{}",
        logs(&log_a)
    );
    // Released: nobody holds the Lease, or the standby already took it; no wait for it to expire.
    let after_exit = holder(&api).await;
    assert!(
        after_exit.is_none() || after_exit.as_deref() == Some("karpenter-b"),
        "the Lease is still held after the leader exited: {after_exit:?}"
    );
    assert!(
        until(Duration::from_secs(30), || async {
            holder(&api).await.as_deref() == Some("karpenter-b")
        })
        .await,
        "the standby never took the Lease:\n{}",
        logs(&log_b)
    );
    let took_over = signalled.elapsed();
    // The standby retries every 2 s; without the release it could take the Lease only once it had gone
    // unrenewed for the lease duration (15 s).
    assert!(
        took_over < Duration::from_secs(10),
        "the standby took over {took_over:?} after SIGTERM, not well within the 15 s lease duration"
    );

    // The new leader runs the controllers: it launches for a pod left pending.
    let pods = Api::<Pod>::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default"},
        "spec": {"containers": [{"name": "app", "image": "x",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/0 nodes are available"}]}
    }))
    .unwrap();
    let mut created = pods.create(&PostParams::default(), &pod).await.unwrap();
    created.status = pod.status.clone();
    pods.replace_status("web-0", &PostParams::default(), &created)
        .await
        .unwrap();
    let claims = Api::<NodeClaim>::all(client.clone());
    assert!(
        until(Duration::from_secs(30), || async {
            claims
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .iter()
                .any(|c| c.status.as_ref().and_then(|s| s.provider_id.as_ref()).is_some())
        })
        .await,
        "the new leader launched nothing for a pending pod:\n{}",
        logs(&log_b)
    );
    let leading = get(b.metrics_port, "/metrics").unwrap().1;
    assert!(
        leading.contains(r#"leader_election_master_status{name="karpenter-leader-election"} 1"#),
        "{leading}"
    );
    drop(b);
    let _ = std::fs::remove_dir_all(&dir);
    http.shutdown().await;
}
