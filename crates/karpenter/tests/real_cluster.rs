//! The real `karpenter controller --cloud-provider kwok` against a real Kubernetes 1.33 control plane
//! (kube-apiserver, controller-manager, scheduler and kwok, `karpenter_e2e::control_plane::shared`), with only the
//! permissions the Helm chart grants: the chart is rendered (`render-chart.py`, helm-python-sdk as
//! `.ci/check-charts.py` renders it), its ServiceAccount, ClusterRoles, Roles and bindings applied, and the
//! controller runs as a local process (there is no container runtime) with a token of that ServiceAccount, the
//! environment the chart's Deployment sets, and leader election on, in the chart's namespace.
//!
//! A Deployment scaled from 0 to 200 pods gets NodeClaims and kwok Nodes and every pod Running; a NodePool
//! template change drifts every node, replaced at most the Drifted budget at once while the real Eviction API
//! and disruption controller hold a PDB; midway the leader gets SIGTERM and the standby replica takes the Lease;
//! the stopped replica restarts as the standby, and with a command in flight (an old node tainted while its
//! replacement launches) the new leader is killed with SIGKILL: the restarted replica takes the Lease once it
//! expires and finishes the drift from what the cluster shows (no node left tainted, nothing orphaned); scaled
//! back to 0 the empty nodes are consolidated away. No replica's log has a 403/Forbidden: the chart's RBAC covers
//! everything these paths call. Needs Go (the control plane is built once), openssl, kubectl and python3 with its
//! venv module (the renderer's helm-python-sdk and PyYAML are installed at `.ci/requirements.txt`'s pins into
//! `target/chart-venv` by the test itself); fails, never skips, when one is missing.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // test helpers outside #[test] fns

use std::{
    collections::BTreeMap,
    fs,
    io::Write,
    net::{Ipv4Addr, TcpListener},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use karpenter_e2e::control_plane::{self, ControlPlane};
use serde_json::{Value, json};

/// Pods of the test Deployment: 250m CPU each, on nodes of at most 4 vCPUs, so about 15 per node and over ten
/// nodes. The whole scale-up and scale-down takes a few minutes on a 2-core machine.
const REPLICAS: usize = 200;
/// The identities the two controller replicas take in the Lease (the chart's POD_NAME).
const FIRST: &str = "karpenter-real-cluster-a";
const SECOND: &str = "karpenter-real-cluster-b";
/// How many old nodes drift may replace at once (the NodePool's Drifted budget).
const DRIFT_BUDGET: usize = 3;
/// The PDB's maxUnavailable over the Deployment's pods: evictions beyond it are refused with 429 by the real
/// Eviction API, and the drain must wait.
const MAX_UNAVAILABLE: usize = 10;
const APP: &str = "inflate";
const APP_NAMESPACE: &str = "default";

fn control_plane() -> &'static ControlPlane {
    match control_plane::shared() {
        Ok(cp) => cp,
        Err(e) => panic!("cannot start the test control plane: {e}"),
    }
}

/// Runs `command`, returning stdout; panics with stderr on failure.
fn output(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `kubectl <args> -f -` with `input` on stdin.
fn kubectl_stdin(mut command: Command, args: &[&str], input: &Value) -> String {
    let mut child = command
        .args(args)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?} failed ({}): {}\ninput: {input:#}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn apply(cp: &ControlPlane, object: &Value) {
    kubectl_stdin(cp.kubectl(), &["apply", "--server-side"], object);
}

/// `kubectl get <args> -o json` as admin: the list's items.
fn items(cp: &ControlPlane, args: &[&str]) -> Vec<Value> {
    let text = output(cp.kubectl().args(["get"]).args(args).args(["-o", "json"]));
    let list: Value = serde_json::from_str(&text).unwrap();
    list["items"].as_array().cloned().unwrap_or_default()
}

/// The chart's objects, rendered with the required values only.
fn render_chart() -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/render-chart.py");
    let python = karpenter_e2e::python_venv::chart_python()
        .unwrap_or_else(|e| panic!("cannot provision the chart renderer's Python: {e}"));
    let text = output(Command::new(python).arg(&script).args([
        "--set",
        "settings.clusterName=real-cluster-test",
        "--set",
        "controller.image.repository=example.com/karpenter-rs",
    ]));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text}", script.display()))
}

fn the<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let mut found = objects.iter().filter(|o| o["kind"] == kind);
    let object = found
        .next()
        .unwrap_or_else(|| panic!("the chart renders no {kind}"));
    assert!(found.next().is_none(), "the chart renders several {kind}s");
    object
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// The controller container's environment as the chart's Deployment sets it, with the downward-API values a
/// pod named `identity` in `namespace` gets. MEMORY_LIMIT and CPU_REQUESTS come from the container's resources,
/// which the chart leaves unset by default (the flags' defaults then hold).
fn deployment_env(deployment: &Value, namespace: &str, identity: &str) -> BTreeMap<String, String> {
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let mut env = BTreeMap::new();
    for var in container["env"].as_array().expect("the controller's env") {
        let name = var["name"].as_str().unwrap().to_string();
        if let Some(value) = var["value"].as_str() {
            env.insert(name, value.to_string());
        } else if let Some(path) = var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            let value = match path {
                "metadata.namespace" => namespace,
                "metadata.name" => identity,
                other => panic!("{name}: a fieldRef to {other} this test does not provide"),
            };
            env.insert(name, value.to_string());
        }
    }
    env
}

/// A kubeconfig for the chart's ServiceAccount: a bound token from the TokenRequest API and the cluster CA, no
/// client certificate, so the API server authorizes every call by the chart's RBAC.
fn service_account_kubeconfig(cp: &ControlPlane, namespace: &str, name: &str, dir: &Path) -> PathBuf {
    let token =
        output(
            cp.kubectl()
                .args(["create", "token", name, "--namespace", namespace, "--duration=2h"]),
        );
    let path = dir.join("karpenter-sa.kubeconfig");
    let ca = cp.run_dir.join("pki/ca.crt");
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "real", "cluster": {"server": cp.server, "certificate-authority": ca}}],
        "users": [{"name": name, "user": {"token": token.trim()}}],
        "contexts": [{"name": "real", "context": {"cluster": "real", "user": name, "namespace": namespace}}],
        "current-context": "real",
    });
    fs::write(&path, config.to_string()).unwrap();
    path
}

/// A controller process; killed however the test ends.
struct Controller {
    identity: &'static str,
    /// Which start of this identity (a restarted replica keeps its name, as a restarted container does).
    start: usize,
    child: Child,
    log: PathBuf,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Controller {
    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Fails with the log's tail when the process has exited.
    fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            panic!(
                "the controller {} exited ({status}); {}:\n{}",
                self.identity,
                self.log.display(),
                lines[lines.len().saturating_sub(40)..].join("\n")
            );
        }
    }

    /// SIGKILL, as a crash or an OOM kill ends a process: no hand-back, no Lease release.
    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    fn sigterm_and_wait(&mut self, within: Duration) -> Option<ExitStatus> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -TERM {}: {status}", self.child.id());
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }
}

/// Polls `check` every second until it holds, one of `controllers` exits, or `within`; returns how long it took.
fn wait_for(
    controllers: &mut [&mut Controller],
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> Result<(), String>,
) -> Duration {
    let started = Instant::now();
    loop {
        for controller in controllers.iter_mut() {
            controller.assert_running();
        }
        let last = match check() {
            Ok(()) => return started.elapsed(),
            Err(state) => state,
        };
        if started.elapsed() >= within {
            let tails: Vec<String> = controllers
                .iter()
                .map(|c| {
                    let log = c.log();
                    let lines: Vec<&str> = log.lines().collect();
                    format!(
                        "the log's tail of {} ({}):\n{}",
                        c.identity,
                        c.log.display(),
                        lines[lines.len().saturating_sub(60)..].join("\n")
                    )
                })
                .collect();
            panic!(
                "timed out after {within:?} waiting for {what}; last seen: {last}\n{}",
                tails.join("\n")
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Starts `karpenter` with the chart's arguments and environment as replica `identity` (its `start`th start).
fn spawn_controller(
    identity: &'static str,
    start: usize,
    args: &[String],
    env: &BTreeMap<String, String>,
    kubeconfig: &Path,
) -> Controller {
    // Outside the control plane's run directory, which the next start removes: the log outlives a failure.
    let log = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{identity}-{start}.log"));
    let log_file = fs::File::create(&log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("KUBECONFIG")
        .envs(env)
        .env("METRICS_PORT", free_port().to_string())
        .env("HEALTH_PROBE_PORT", free_port().to_string())
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .spawn()
        .unwrap();
    eprintln!("controller {identity}: {args:?}, log {}", log.display());
    Controller {
        identity,
        start,
        child,
        log,
    }
}

/// The Lease's holder, if any.
fn lease_holder(cp: &ControlPlane, namespace: &str, lease: &str) -> Option<String> {
    items(cp, &["leases", "--namespace", namespace])
        .iter()
        .find(|l| l["metadata"]["name"] == lease)
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
}

/// The app's pods: how many are Running on a node.
fn running_pods(cp: &ControlPlane) -> usize {
    items(
        cp,
        &[
            "pods",
            "--namespace",
            APP_NAMESPACE,
            "--selector",
            &format!("app={APP}"),
        ],
    )
    .iter()
    .filter(|p| p["status"]["phase"] == "Running" && p["spec"]["nodeName"].is_string())
    .count()
}

fn is_ready(node: &Value) -> bool {
    node["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// Lines of the log that show the API server refusing a call. A bare "403" is not enough: timestamps and
/// ports contain it; kube's error carries `code: 403` and a `Forbidden` reason.
fn forbidden_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("code: 403") || l.contains("Forbidden") || l.contains("forbidden"))
        .collect()
}

#[test]
fn with_the_charts_rbac_only_two_replicas_scale_up_replace_drifted_nodes_within_budget_and_pdb_fail_over_and_consolidate()
 {
    let cp = control_plane();
    let dir = cp.run_dir.join("real-cluster-test");
    fs::create_dir_all(&dir).unwrap();

    // 1. The chart's identity and permissions, nothing else of it (no image to run the Deployment).
    let chart = render_chart();
    let rbac: Vec<Value> = chart
        .iter()
        .filter(|o| {
            matches!(
                o["kind"].as_str(),
                Some("ServiceAccount" | "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding")
            )
        })
        .cloned()
        .collect();
    let kinds: Vec<&str> = rbac.iter().filter_map(|o| o["kind"].as_str()).collect();
    for kind in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ] {
        assert!(kinds.contains(&kind), "the chart renders no {kind}: {kinds:?}");
    }
    apply(cp, &json!({"apiVersion": "v1", "kind": "List", "items": rbac}));
    let account = the(&chart, "ServiceAccount");
    let namespace = account["metadata"]["namespace"].as_str().unwrap().to_string();
    let account_name = account["metadata"]["name"].as_str().unwrap().to_string();
    // The kwok cloud provider plays EC2 by creating the Node a kubelet would register, which no production
    // chart grants (on AWS the kubelet creates it); this one rule, bound to the chart's ServiceAccount, is the
    // whole difference, as upstream's kwok deployment adds it to its chart.
    apply(
        cp,
        &json!({"apiVersion": "v1", "kind": "List", "items": [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "karpenter-kwok-provider"},
                "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["create"]}],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "karpenter-kwok-provider"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "karpenter-kwok-provider"},
                "subjects": [{"kind": "ServiceAccount", "name": account_name, "namespace": namespace}],
            },
        ]}),
    );
    let deployment = the(&chart, "Deployment");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"], account_name,
        "the Deployment runs as the chart's ServiceAccount"
    );

    // 2. A kubeconfig with that ServiceAccount's token: the API server enforces the chart's RBAC.
    let kubeconfig = service_account_kubeconfig(cp, &namespace, &account_name, &dir);
    let can_i = |verb_resource: &[&str]| {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["auth", "can-i"])
            .args(verb_resource)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
    };
    assert!(
        can_i(&["create", "nodeclaims.karpenter.sh"]),
        "the chart grants creating NodeClaims"
    );
    assert!(
        !can_i(&["get", "secrets", "--namespace", "default"]),
        "the token must be the ServiceAccount's, not the admin's"
    );

    // 3. Two replicas as the chart's Deployment runs them, but kwok as the cloud and local ports.
    let env = deployment_env(deployment, &namespace, FIRST);
    assert_eq!(
        env.get("DISABLE_LEADER_ELECTION").map(String::as_str),
        Some("false")
    );
    assert_eq!(env.get("LEADER_ELECTION_NAMESPACE"), Some(&namespace));
    let lease_name = env["LEADER_ELECTION_NAME"].clone();
    let mut args: Vec<String> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let cloud = args
        .iter()
        .position(|a| a == "--cloud-provider")
        .expect("the chart passes --cloud-provider")
        + 1;
    args[cloud] = "kwok".into();
    let mut first = spawn_controller(FIRST, 1, &args, &env, &kubeconfig);
    wait_for(
        &mut [&mut first],
        "the first replica to take the Lease",
        Duration::from_secs(60),
        || {
            let holder = lease_holder(cp, &namespace, &lease_name);
            (holder.as_deref() == Some(FIRST))
                .then_some(())
                .ok_or(format!("Lease {namespace}/{lease_name} holder {holder:?}"))
        },
    );
    let mut second = spawn_controller(
        SECOND,
        1,
        &args,
        &deployment_env(deployment, &namespace, SECOND),
        &kubeconfig,
    );

    // 4. A NodePool of nodes of at most 4 vCPUs (several are needed): drift replaces at most DRIFT_BUDGET nodes
    // at once, empty nodes go at once.
    apply(
        cp,
        &json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "role": "KarpenterNodeRole-real-cluster-test",
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "real-cluster-test"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "real-cluster-test"}}],
            },
        }),
    );
    let node_pool = |generation: &str| {
        json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "template": {
                    "metadata": {"labels": {"example.com/generation": generation}},
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                        "requirements": [
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                            {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lt", "values": ["5"]},
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                        ],
                    },
                },
                "disruption": {
                    "consolidationPolicy": "WhenEmpty",
                    "consolidateAfter": "5s",
                    "budgets": [
                        {"nodes": DRIFT_BUDGET.to_string(), "reasons": ["Drifted"]},
                        {"nodes": "100%", "reasons": ["Empty"]},
                    ],
                },
            },
        })
    };
    apply(cp, &node_pool("1"));
    apply(
        cp,
        &json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": APP, "namespace": APP_NAMESPACE},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": APP}},
                "template": {
                    "metadata": {"labels": {"app": APP}},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{
                            "name": APP,
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}},
                        }],
                    },
                },
            },
        }),
    );
    apply(
        cp,
        &json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": APP, "namespace": APP_NAMESPACE},
            "spec": {"maxUnavailable": MAX_UNAVAILABLE, "selector": {"matchLabels": {"app": APP}}},
        }),
    );

    // 5. Scale up: NodeClaims launched, their kwok Nodes Ready, every pod Running on them.
    output(cp.kubectl().args([
        "scale",
        "deployment",
        APP,
        "--namespace",
        APP_NAMESPACE,
        &format!("--replicas={REPLICAS}"),
    ]));
    let scale_up = wait_for(
        &mut [&mut first, &mut second],
        &format!("{REPLICAS} pods Running on kwok nodes"),
        Duration::from_secs(600),
        || {
            let claims = items(cp, &["nodeclaims"]);
            let nodes = items(cp, &["nodes", "--selector", "karpenter.sh/kwok=true"]);
            let ready = nodes.iter().filter(|n| is_ready(n)).count();
            let running = running_pods(cp);
            let state = format!(
                "{} NodeClaims, {ready}/{} Nodes Ready, {running}/{REPLICAS} pods Running",
                claims.len(),
                nodes.len()
            );
            (running == REPLICAS && ready == claims.len() && !claims.is_empty())
                .then_some(())
                .ok_or(state)
        },
    );
    let nodes = items(cp, &["nodes", "--selector", "karpenter.sh/kwok=true"]);
    let claims = items(cp, &["nodeclaims"]);
    eprintln!(
        "scale-up: {REPLICAS} pods Running on {} kwok Nodes ({} NodeClaims) in {scale_up:.1?}",
        nodes.len(),
        claims.len()
    );
    assert!(
        nodes.len() > DRIFT_BUDGET,
        "{REPLICAS} pods of 250m on nodes of at most 4 vCPUs need more nodes than the drift budget, got {}",
        nodes.len()
    );
    for node in &nodes {
        let cpus: f64 = node["metadata"]["labels"]["karpenter.k8s.aws/instance-cpu"]
            .as_str()
            .and_then(|c| c.parse().ok())
            .unwrap_or(f64::MAX);
        assert!(cpus <= 4.0, "a node outside the NodePool's requirements: {node}");
        assert_eq!(
            node["metadata"]["annotations"]["kwok.x-k8s.io/node"], "fake",
            "kwok plays the kubelet of the provider's Nodes"
        );
    }

    // 6. Drift: the NodePool's template changes, every old node is replaced, never more than DRIFT_BUDGET at
    // once, and the real Eviction API holds the PDB throughout. Midway the leader gets SIGTERM: the standby
    // takes the Lease and finishes the work the first left in flight. The first then restarts (as its container
    // would) and waits as the standby; later, with a command in flight, the new leader is killed outright
    // (SIGKILL: no hand-back, no Lease release) and the restarted replica takes the Lease once it expires and
    // finishes the drift from what the cluster shows.
    apply(cp, &node_pool("2"));
    let old_claims: Vec<String> = claims
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    let mut most_disrupted_at_once = 0;
    let mut pdb_checks = 0;
    let mut handed_over: Option<Duration> = None;
    let mut restarted: Option<Controller> = None;
    let mut checks_since_handover = 0;
    let mut crashed: Option<(Duration, String)> = None;
    let drift = wait_for(
        &mut [],
        "every drifted node to be replaced",
        Duration::from_secs(900),
        || {
            // The replicas that should be running now (wait_for cannot hold them: some are stopped here).
            if crashed.is_none() {
                second.assert_running();
            }
            if let Some(r) = restarted.as_mut() {
                r.assert_running();
            }
            let claims = items(cp, &["nodeclaims"]);
            let old: Vec<&Value> = claims
                .iter()
                .filter(|c| old_claims.iter().any(|o| c["metadata"]["name"] == o.as_str()))
                .collect();
            let disrupted = old
                .iter()
                .filter(|c| c["metadata"]["deletionTimestamp"].is_string())
                .count();
            most_disrupted_at_once = most_disrupted_at_once.max(disrupted);
            assert!(
                disrupted <= DRIFT_BUDGET,
                "{disrupted} old NodeClaims are being deleted at once, over the Drifted budget of {DRIFT_BUDGET}"
            );
            let pdb =
                output(
                    cp.kubectl()
                        .args(["get", "pdb", APP, "--namespace", APP_NAMESPACE, "-o", "json"]),
                );
            let pdb: Value = serde_json::from_str(&pdb).unwrap();
            let (healthy, desired) = (
                pdb["status"]["currentHealthy"].as_i64().unwrap_or_default(),
                pdb["status"]["desiredHealthy"].as_i64().unwrap_or_default(),
            );
            assert!(
                healthy >= desired,
                "the PDB was broken: {healthy} healthy pods, {desired} desired"
            );
            pdb_checks += 1;
            let nodes = items(cp, &["nodes", "--selector", "karpenter.sh/kwok=true"]);

            // The first replica leaves once drift is under way (a replacement launched or an old node going).
            if handed_over.is_none() && (disrupted > 0 || claims.len() > old_claims.len()) {
                let status = first.sigterm_and_wait(Duration::from_secs(30));
                assert!(
                    status.is_some_and(|s| s.success()),
                    "the first replica did not exit 0 within 30 s of SIGTERM: {status:?}"
                );
                let left = Instant::now();
                while lease_holder(cp, &namespace, &lease_name).as_deref() != Some(SECOND) {
                    assert!(
                        left.elapsed() < Duration::from_secs(60),
                        "the standby did not take the Lease within 60 s of the leader's exit"
                    );
                    std::thread::sleep(Duration::from_millis(200));
                }
                handed_over = Some(left.elapsed());
                eprintln!(
                    "failover: {SECOND} holds the Lease {:.1?} after {FIRST} exited mid-drift \
                     ({disrupted} old NodeClaims being deleted, {} NodeClaims)",
                    left.elapsed(),
                    claims.len()
                );
                // The first comes back, as its container would, and waits as the standby.
                restarted = Some(spawn_controller(FIRST, 2, &args, &env, &kubeconfig));
            } else if handed_over.is_some() && crashed.is_none() {
                checks_since_handover += 1;
                // Mid-command: an old node tainted for disruption whose NodeClaim is not yet deleted (its
                // replacement is launching), or, failing that moment, old nodes being drained.
                let tainted_waiting: Vec<String> = nodes
                    .iter()
                    .filter(|n| has_disrupted_taint(n))
                    .filter_map(|n| n["metadata"]["name"].as_str())
                    .filter(|name| {
                        !claims.iter().any(|c| {
                            c["status"]["nodeName"] == *name && c["metadata"]["deletionTimestamp"].is_string()
                        })
                    })
                    .map(str::to_string)
                    .collect();
                let mid_command = if !tainted_waiting.is_empty() {
                    Some(format!(
                        "{} tainted for disruption, waiting for a replacement",
                        tainted_waiting.join(", ")
                    ))
                } else if disrupted > 0 && checks_since_handover >= 5 {
                    Some(format!("{disrupted} old NodeClaims being drained"))
                } else {
                    None
                };
                if let Some(what) = mid_command {
                    second.kill();
                    let killed = Instant::now();
                    while lease_holder(cp, &namespace, &lease_name).as_deref() != Some(FIRST) {
                        assert!(
                            killed.elapsed() < Duration::from_secs(90),
                            "the restarted replica did not take the Lease within 90 s of the leader's SIGKILL"
                        );
                        restarted.as_mut().unwrap().assert_running();
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    eprintln!(
                        "crash: {SECOND} killed mid-command ({what}); the restarted {FIRST} holds the Lease \
                         {:.1?} later",
                        killed.elapsed()
                    );
                    crashed = Some((killed.elapsed(), what));
                }
            }
            let new_ready = nodes
                .iter()
                .filter(|n| is_ready(n) && n["metadata"]["labels"]["example.com/generation"] == "2")
                .count();
            let tainted = nodes.iter().filter(|n| has_disrupted_taint(n)).count();
            let running = running_pods(cp);
            let state = format!(
                "{} old NodeClaims left ({disrupted} being deleted), {new_ready}/{} Nodes of the new template Ready \
                 ({tainted} tainted for disruption), {running}/{REPLICAS} pods Running",
                old.len(),
                nodes.len()
            );
            // Done when no old node is left, every node is of the new template, untainted, and runs the pods.
            (old.is_empty() && new_ready == nodes.len() && tainted == 0 && running == REPLICAS)
                .then_some(())
                .ok_or(state)
        },
    );
    assert!(
        handed_over.is_some(),
        "drift finished before the first replica could be stopped midway"
    );
    let Some((takeover, what)) = crashed else {
        panic!("drift finished before the leader could be killed mid-command");
    };
    let mut leader = restarted.expect("the first replica restarted");
    eprintln!(
        "drift: {} nodes replaced in {drift:.1?}, at most {most_disrupted_at_once} at once (budget {DRIFT_BUDGET}), \
         PDB held at {pdb_checks} checks; leader killed mid-command ({what}), taken over in {takeover:.1?}",
        old_claims.len()
    );
    assert!(
        most_disrupted_at_once > 0,
        "no old NodeClaim was ever seen being deleted"
    );

    // 7. Scale down: the empty nodes are consolidated away by the restarted replica, now the leader; nothing the
    // killed leader launched is left behind.
    output(cp.kubectl().args([
        "scale",
        "deployment",
        APP,
        "--namespace",
        APP_NAMESPACE,
        "--replicas=0",
    ]));
    let nodes_before = items(cp, &["nodes", "--selector", "karpenter.sh/kwok=true"]).len();
    let scale_down = wait_for(
        &mut [&mut leader],
        "the empty nodes to be consolidated away",
        Duration::from_secs(600),
        || {
            let claims = items(cp, &["nodeclaims"]).len();
            let nodes = items(cp, &["nodes", "--selector", "karpenter.sh/kwok=true"]).len();
            let pods = running_pods(cp);
            (claims == 0 && nodes == 0)
                .then_some(())
                .ok_or(format!("{claims} NodeClaims, {nodes} Nodes, {pods} pods Running"))
        },
    );
    eprintln!("scale-down: {nodes_before} nodes consolidated away in {scale_down:.1?}");

    // 8. Every call any replica made was allowed by the chart's RBAC; the leader stops cleanly too.
    let status = leader.sigterm_and_wait(Duration::from_secs(30));
    for controller in [&first, &second, &leader] {
        let log = controller.log();
        let forbidden = forbidden_lines(&log);
        assert!(
            forbidden.is_empty(),
            "the API server refused {} calls of {} (start {}) under the chart's RBAC ({}):\n{}",
            forbidden.len(),
            controller.identity,
            controller.start,
            controller.log.display(),
            forbidden.join("\n")
        );
    }
    assert!(
        status.is_some_and(|s| s.success()),
        "the restarted replica did not exit 0 within 30 s of SIGTERM: {status:?}"
    );
}

/// Whether the node carries the taint a voluntary disruption puts on it before draining.
fn has_disrupted_taint(node: &Value) -> bool {
    node["spec"]["taints"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["key"] == "karpenter.sh/disrupted"))
}
