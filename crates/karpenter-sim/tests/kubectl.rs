//! The real kubectl binary (get, apply, scale, patch, delete, wait) against the server over HTTP.
//!
//! Skipped, with a message, only when `kubectl` is not on PATH.

mod support;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use karpenter_sim::apiserver::{HttpHandle, ResourceId};
use serde_json::{Value, json};
use support::{TestResult, server};

/// A temporary directory with a kubeconfig, removed on drop.
struct Workdir(PathBuf);

impl Workdir {
    fn new(name: &str) -> std::io::Result<Self> {
        let dir = std::env::temp_dir().join(format!("karpenter-sim-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn kubectl_available() -> bool {
    let found = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("SKIPPED: kubectl is not on PATH");
    }
    found
}

struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs kubectl off the async runtime so the server keeps answering.
async fn kubectl(
    kubeconfig: &Path,
    args: &[&str],
) -> Result<Output, Box<dyn std::error::Error + Send + Sync>> {
    let mut command = Command::new("kubectl");
    command.arg("--kubeconfig").arg(kubeconfig).args(args);
    let output = tokio::task::spawn_blocking(move || command.output()).await??;
    Ok(Output {
        ok: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// Runs kubectl and fails the test with its stderr when it fails.
async fn ok(kubeconfig: &Path, args: &[&str]) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let out = kubectl(kubeconfig, args).await?;
    if !out.ok {
        return Err(format!("kubectl {args:?} failed:\n{}\n{}", out.stdout, out.stderr).into());
    }
    Ok(out.stdout)
}

async fn start(
    name: &str,
) -> Result<(karpenter_sim::ApiServer, HttpHandle, Workdir, PathBuf), Box<dyn std::error::Error + Send + Sync>>
{
    let server = server();
    let http = server.serve_http(([127, 0, 0, 1], 0).into()).await?;
    let dir = Workdir::new(name)?;
    let kubeconfig = dir.path("kubeconfig");
    http.write_kubeconfig(&kubeconfig)?;
    Ok((server, http, dir, kubeconfig))
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1
        env:
        - {name: A, value: "1"}
      - name: sidecar
        image: busybox:1
"#;

fn deployment(server: &karpenter_sim::ApiServer) -> Result<Value, String> {
    server
        .get_internal(&ResourceId::new("apps", "deployments"), "default", "web")
        .map(|d| (*d).clone())
        .ok_or_else(|| "deployment web not found".to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_get_scale_patch_delete() -> TestResult {
    if !kubectl_available() {
        return Ok(());
    }
    let (server, http, dir, kc) = start("apply").await?;
    let manifest = dir.path("deployment.yaml");
    std::fs::write(&manifest, DEPLOYMENT)?;
    let manifest = manifest.to_string_lossy().into_owned();

    // apply creates, then (re-applied with a change) patches with a strategic merge patch.
    ok(&kc, &["apply", "-f", &manifest]).await?;
    assert_eq!(deployment(&server)?["spec"]["replicas"], 2);
    std::fs::write(&manifest, DEPLOYMENT.replace("replicas: 2", "replicas: 3"))?;
    let out = ok(&kc, &["apply", "-f", &manifest]).await?;
    assert!(out.contains("configured"), "{out}");
    assert_eq!(deployment(&server)?["spec"]["replicas"], 3);
    assert_eq!(deployment(&server)?["metadata"]["generation"], 2);

    let out = ok(&kc, &["get", "deployments"]).await?;
    assert!(out.contains("web"), "{out}");
    let got: Value = serde_json::from_str(&ok(&kc, &["get", "deployment", "web", "-o", "json"]).await?)?;
    assert_eq!(got["metadata"]["name"], "web");

    ok(&kc, &["scale", "deployment", "web", "--replicas=5"]).await?;
    assert_eq!(deployment(&server)?["spec"]["replicas"], 5);

    ok(
        &kc,
        &[
            "patch",
            "deployment",
            "web",
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"tier":"front"}}}"#,
        ],
    )
    .await?;
    assert_eq!(deployment(&server)?["metadata"]["labels"]["tier"], "front");
    ok(
        &kc,
        &[
            "patch",
            "deployment",
            "web",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/replicas","value":1}]"#,
        ],
    )
    .await?;
    assert_eq!(deployment(&server)?["spec"]["replicas"], 1);
    // Strategic: the container list merges by name; the sidecar and the env survive.
    ok(&kc, &["patch", "deployment", "web", "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:2","env":[{"name":"B","value":"2"}]}]}}}}"#]).await?;
    let containers = deployment(&server)?["spec"]["template"]["spec"]["containers"].clone();
    assert_eq!(
        containers,
        json!([
        {"name": "web", "image": "nginx:2", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
        {"name": "sidecar", "image": "busybox:1"}])
    );

    ok(&kc, &["delete", "deployment", "web"]).await?;
    assert!(deployment(&server).is_err());
    http.shutdown().await;
    Ok(())
}

const NODEPOOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  replicas: 2
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: []
"#;

// Custom resources: kubectl apply falls back to JSON merge patches; `kubectl scale` uses the CRD's scale
// subresource (NodePool maps .spec.replicas and .status.nodes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_and_scale_a_custom_resource() -> TestResult {
    if !kubectl_available() {
        return Ok(());
    }
    let (server, http, dir, kc) = start("crd").await?;
    let manifest = dir.path("nodepool.yaml");
    std::fs::write(&manifest, NODEPOOL)?;
    let manifest = manifest.to_string_lossy().into_owned();
    ok(&kc, &["apply", "-f", &manifest]).await?;
    let out = ok(&kc, &["apply", "-f", &manifest]).await?;
    assert!(out.contains("unchanged"), "{out}");
    std::fs::write(&manifest, NODEPOOL.replace("replicas: 2", "replicas: 3"))?;
    ok(&kc, &["apply", "-f", &manifest]).await?;
    ok(&kc, &["scale", "nodepool", "default", "--replicas=4"]).await?;
    let nodepools = ResourceId::new("karpenter.sh", "nodepools");
    let pool = server
        .get_internal(&nodepools, "", "default")
        .ok_or("nodepool missing")?;
    assert_eq!(
        (
            pool["spec"]["replicas"].clone(),
            pool["metadata"]["generation"].clone()
        ),
        (json!(4), json!(3))
    );
    let out = ok(&kc, &["get", "nodepools", "-o", "name"]).await?;
    assert_eq!(out.trim(), "nodepool.karpenter.sh/default");
    let patches = server
        .audit()
        .iter()
        .filter(|r| r.verb == "patch" && r.resource == "nodepools")
        .count();
    assert_eq!(patches, 2, "one apply patch and one scale patch");
    assert!(
        server
            .audit()
            .iter()
            .any(|r| r.verb == "patch" && r.subresource.as_deref() == Some("scale"))
    );
    http.shutdown().await;
    Ok(())
}

// kubectl wait on a condition and on deletion; kubectl delete of a bound pod waits for its kubelet (here the
// test plays the kubelet and finishes the deletion).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_wait_for_condition_and_delete() -> TestResult {
    if !kubectl_available() {
        return Ok(());
    }
    let (server, http, _dir, kc) = start("wait").await?;
    let pods = ResourceId::core("pods");
    server.create_internal(
        &pods,
        json!({"metadata": {"namespace": "default", "name": "p"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "i"}]}}),
    )?;

    let waiting = {
        let kc = kc.clone();
        tokio::spawn(async move {
            kubectl(&kc, &["wait", "--for=condition=Ready", "pod/p", "--timeout=20s"]).await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    server.update_status_internal(
        &pods,
        "default",
        "p",
        json!({"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}]}),
    )?;
    let out = waiting.await??;
    assert!(
        out.ok && out.stdout.contains("condition met"),
        "{}{}",
        out.stdout,
        out.stderr
    );

    // A bound pod with a grace period stays (terminating) until its kubelet deletes it with grace period 0.
    let out = ok(&kc, &["delete", "pod", "p", "--wait=false"]).await?;
    assert!(out.contains("deleted"), "{out}");
    let pod = server
        .get_internal(&pods, "default", "p")
        .ok_or("pod went away before its kubelet finished")?;
    assert_eq!(pod["metadata"]["deletionGracePeriodSeconds"], 30);
    let waiting = {
        let kc = kc.clone();
        tokio::spawn(async move { kubectl(&kc, &["wait", "--for=delete", "pod/p", "--timeout=20s"]).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    server.delete_internal(&pods, "default", "p", Some(0))?;
    let out = waiting.await??;
    assert!(out.ok, "{}{}", out.stdout, out.stderr);
    assert!(server.get_internal(&pods, "default", "p").is_none());
    http.shutdown().await;
    Ok(())
}

// kubectl's non-resource requests: version, api-resources (discovery), and a missing object's error message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_discovery_and_not_found() -> TestResult {
    if !kubectl_available() {
        return Ok(());
    }
    let (_server, http, _dir, kc) = start("discovery").await?;
    let out = ok(&kc, &["version", "-o", "json"]).await?;
    let version: Value = serde_json::from_str(&out)?;
    assert_eq!(version["serverVersion"]["minor"], "33");
    let out = ok(&kc, &["api-resources", "-o", "name"]).await?;
    for resource in [
        "pods",
        "deployments.apps",
        "poddisruptionbudgets.policy",
        "leases.coordination.k8s.io",
        "nodepools.karpenter.sh",
        "ec2nodeclasses.karpenter.k8s.aws",
        "customresourcedefinitions.apiextensions.k8s.io",
    ] {
        assert!(
            out.lines().any(|l| l == resource),
            "{resource} missing from\n{out}"
        );
    }
    let out = kubectl(&kc, &["get", "pod", "nope"]).await?;
    assert!(!out.ok);
    assert!(out.stderr.contains(r#"pods "nope" not found"#), "{}", out.stderr);
    http.shutdown().await;
    Ok(())
}
