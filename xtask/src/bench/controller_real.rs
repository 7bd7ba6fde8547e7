//! `cargo xtask bench controller --real [--nodes N]`: the controller's memory and provisioning latency on a real
//! Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, the end-to-end
//! tests' `karpenter_e2e::control_plane`, started privately in `target/bench/control-plane/` and stopped at the end).
//!
//! The cluster: one EC2NodeClass and one NodePool `default` (m5.xlarge only, on-demand, amd64;
//! WhenEmptyOrUnderutilized after 30 s, upstream's default 10% budget), a node-exporter DaemonSet (50m / 64Mi)
//! in kube-system and 30 Deployments over 5 namespaces, each of `N` pods of 125m / 256Mi, at 0 replicas. A
//! m5.xlarge holds exactly 30 of these beside the DaemonSet pod (3,920m allocatable), so N nodes' worth of pods
//! need N nodes.
//!
//! **Scale-up** (row `real-scale-up-<N>n-<P>p`): the release binary `karpenter controller --cloud-provider kwok`
//! starts with the admin kubeconfig and leader election off; once its /readyz answers, every Deployment is scaled
//! to N replicas at once. The real controller-manager creates the pods, kube-scheduler marks them Unschedulable,
//! the controller launches NodeClaims (kwok plays EC2: the provider creates the Node, kwok its kubelet), the
//! scheduler binds the pods and kwok runs them. Measured from the scale request: the first and the last NodeClaim
//! seen (the last is the provisioning latency of the whole wave), and every workload pod Running (bound and
//! started: the latency a user sees, which includes the controller-manager's, the scheduler's and kwok's work on
//! 2 shared cores); every pod Ready (the Deployments' readyReplicas) too when it comes first, else how many were
//! Ready then (kwok does not make a pod Ready again once the node-lifecycle controller marked it NotReady for a
//! late heartbeat). The DaemonSet is `system-node-critical`, as cluster DaemonSets are, so kube-scheduler makes
//! room for it on a node the workload filled first. Then the run waits for [`super::controller`]'s disruption
//! passes; peak_rss is the controller's VmHWM over the whole run. Killed midway, the run takes its control plane
//! and controller with it (a watchdog per process), keeping the logs.
//!
//! **Restart** (row `real-restart-<N>n-<P>p`): a fresh controller on the full cluster, measured exactly as the
//! karpenter-sim row `controller-<N>n-<P>p` (ready, then disruption passes and a garbage collection), which this
//! command also prints for the same N: the two differ only in the API server behind the controller (and in the
//! cluster's composition: the simulated one adds a second DaemonSet and PDBs).
//!
//! The control plane's own peak memory (kube-apiserver, etcd) is printed for context. Logs:
//! target/bench/controller-real.log, target/bench/controller-real-restart.log and the control plane's in
//! target/bench/control-plane/logs/ (kept when the run fails).

use std::{
    collections::BTreeMap,
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, anyhow, bail};
use karpenter_e2e::control_plane::{self, ControlPlane, StartOptions};
use serde_json::{Value, json};

use super::controller::{
    Controller, bench_dir, free_port, http_get, metric_sum, proc_cpu_seconds, proc_status_bytes, reconciles,
    spawn_controller, watch_controller,
};

/// Deployments of the workload (each scaled to N replicas for N nodes).
const DEPLOYMENTS: usize = 30;
const NAMESPACES: usize = 5;
/// Pods of 125m: 30 of them and the DaemonSet's 50m fill a m5.xlarge's 3,920m; a 31st does not fit.
const POD_CPU: &str = "125m";
const POD_MEMORY: &str = "256Mi";
const INSTANCE_TYPE: &str = "m5.xlarge";
const PODS_PER_NODE: usize = 30;
const POLL: Duration = Duration::from_secs(3);
const READY_TIMEOUT: Duration = Duration::from_secs(300);
const SCALE_UP_TIMEOUT: Duration = Duration::from_secs(45 * 60);
/// Disruption passes to wait for once every pod is Ready.
const PASSES_AFTER_SCALE_UP: u64 = 3;
const PASSES_TIMEOUT: Duration = Duration::from_secs(300);
const MIB: f64 = 1024.0 * 1024.0;

/// What the scale-up run measured.
pub(super) struct ScaleUpRow {
    pub(super) nodes: usize,
    pub(super) pods: usize,
    pub(super) node_claims: usize,
    pub(super) ready_seconds: f64,
    pub(super) first_claim_seconds: f64,
    pub(super) last_claim_seconds: f64,
    /// From the scale request to every workload pod Running.
    pub(super) all_running_seconds: f64,
    /// To every pod Ready, when that came first (see the loop in [`real`]).
    pub(super) all_ready_seconds: Option<f64>,
    pub(super) ready_at_end: usize,
    pub(super) peak_rss_bytes: u64,
    pub(super) rss_after_scale_up_bytes: u64,
    pub(super) cpu_seconds: f64,
    pub(super) reconciles: BTreeMap<String, u64>,
    pub(super) disruption_decisions: u64,
}

/// What the restart run measured (the same figures as the karpenter-sim memory row).
pub(super) struct RestartRow {
    pub(super) ready_seconds: f64,
    pub(super) rss_at_ready_bytes: u64,
    pub(super) peak_rss_bytes: u64,
    pub(super) cpu_seconds: f64,
    pub(super) run_seconds: f64,
    pub(super) reconciles: BTreeMap<String, u64>,
    pub(super) disruption_seconds_mean: Option<f64>,
    pub(super) disruption_decisions: u64,
}

pub(super) struct RealRows {
    pub(super) scale_up: ScaleUpRow,
    pub(super) restart: RestartRow,
    /// Peak RSS of the control plane's processes at the end, by name.
    pub(super) control_plane_peak_bytes: BTreeMap<String, u64>,
}

impl RealRows {
    pub(super) fn to_json(&self) -> String {
        let s = &self.scale_up;
        let r = &self.restart;
        json!({
            "workload": format!("real-{}n-{}p", s.nodes, s.pods),
            "nodes": s.nodes,
            "pods": s.pods,
            "scale_up": {
                "node_claims": s.node_claims,
                "ready_seconds": s.ready_seconds,
                "first_claim_seconds": s.first_claim_seconds,
                "last_claim_seconds": s.last_claim_seconds,
                "all_pods_running_seconds": s.all_running_seconds,
                "all_pods_ready_seconds": s.all_ready_seconds,
                "pods_ready_at_end": s.ready_at_end,
                "peak_rss_bytes": s.peak_rss_bytes,
                "rss_after_scale_up_bytes": s.rss_after_scale_up_bytes,
                "cpu_seconds": s.cpu_seconds,
                "reconciles": s.reconciles,
                "disruption_decisions": s.disruption_decisions,
            },
            "restart": {
                "ready_seconds": r.ready_seconds,
                "rss_at_ready_bytes": r.rss_at_ready_bytes,
                "peak_rss_bytes": r.peak_rss_bytes,
                "cpu_seconds": r.cpu_seconds,
                "run_seconds": r.run_seconds,
                "reconciles": r.reconciles,
                "disruption_seconds_mean": r.disruption_seconds_mean,
                "disruption_decisions": r.disruption_decisions,
            },
            "control_plane_peak_rss_bytes": self.control_plane_peak_bytes,
        })
        .to_string()
    }

    pub(super) fn print(&self) {
        let s = &self.scale_up;
        let r = &self.restart;
        println!(
            "{:<28} {:>5} {:>6} {:>6} {:>8} {:>11} {:>10} {:>11} {:>9} {:>9} {:>7} {:>5}",
            "REAL SCALE-UP",
            "NODES",
            "PODS",
            "CLAIMS",
            "READY S",
            "1ST CLAIM S",
            "LAST CLM S",
            "PODS RUN S",
            "PEAK MiB",
            "AFTER MiB",
            "CPU S",
            "CMDS"
        );
        println!(
            "{:<28} {:>5} {:>6} {:>6} {:>8.2} {:>11.1} {:>10.1} {:>11.1} {:>9.1} {:>9.1} {:>7.1} {:>5}",
            format!("real-scale-up-{}n-{}p", s.nodes, s.pods),
            s.nodes,
            s.pods,
            s.node_claims,
            s.ready_seconds,
            s.first_claim_seconds,
            s.last_claim_seconds,
            s.all_running_seconds,
            s.peak_rss_bytes as f64 / MIB,
            s.rss_after_scale_up_bytes as f64 / MIB,
            s.cpu_seconds,
            s.disruption_decisions,
        );
        match s.all_ready_seconds {
            Some(ready) => println!("every pod Ready {ready:.1} s after the scale request"),
            None => println!(
                "{} of {} pods Ready when every pod was Running (the rest marked NotReady after a late kwok heartbeat)",
                s.ready_at_end, s.pods
            ),
        }
        println!(
            "{:<28} {:>8} {:>9} {:>9} {:>7} {:>8} {:>6} {:>3} {:>9} {:>5}",
            "REAL RESTART",
            "READY S",
            "READY MiB",
            "PEAK MiB",
            "CPU S",
            "RUN S",
            "PASSES",
            "GCS",
            "PASS S",
            "CMDS"
        );
        println!(
            "{:<28} {:>8.2} {:>9.1} {:>9.1} {:>7.1} {:>8.1} {:>6} {:>3} {:>9} {:>5}",
            format!("real-restart-{}n-{}p", s.nodes, s.pods),
            r.ready_seconds,
            r.rss_at_ready_bytes as f64 / MIB,
            r.peak_rss_bytes as f64 / MIB,
            r.cpu_seconds,
            r.run_seconds,
            r.reconciles.get("disruption").copied().unwrap_or(0),
            r.reconciles
                .get("nodeclaim.garbagecollection")
                .copied()
                .unwrap_or(0),
            r.disruption_seconds_mean
                .map_or("-".into(), |s| format!("{s:.3}")),
            r.disruption_decisions,
        );
        let control_plane: Vec<String> = self
            .control_plane_peak_bytes
            .iter()
            .map(|(name, bytes)| format!("{name} {:.0} MiB", *bytes as f64 / MIB))
            .collect();
        println!("control plane peak RSS: {}", control_plane.join(", "));
        println!();
    }
}

/// Stops the private control plane however the run ends.
struct ControlPlaneGuard {
    root: PathBuf,
    run_dir: PathBuf,
    keep_logs: bool,
}

impl Drop for ControlPlaneGuard {
    fn drop(&mut self) {
        if self.keep_logs {
            // `stop` removes the run directory; keep the logs of a failed run beside it.
            let logs = self.run_dir.join("logs");
            let kept = self.run_dir.with_file_name("control-plane-logs");
            let _ = fs::remove_dir_all(&kept);
            if let Err(e) = copy_dir(&logs, &kept) {
                eprintln!("warning: cannot keep the control plane's logs: {e}");
            } else {
                eprintln!("the control plane's logs are in {}", kept.display());
            }
        }
        if let Err(e) = control_plane::stop(&self.root, &self.run_dir) {
            eprintln!("warning: stopping the bench control plane: {e}");
        }
    }
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        fs::copy(entry.path(), to.join(entry.file_name()))?;
    }
    Ok(())
}

/// `kubectl` with the control plane's admin kubeconfig; stdout, or an error with stderr.
fn kubectl(cp: &ControlPlane, args: &[&str], input: Option<&Value>) -> Result<String> {
    let mut child = cp
        .kubectl()
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run kubectl")?;
    if let Some(input) = input {
        child
            .stdin
            .take()
            .context("kubectl's stdin")?
            .write_all(input.to_string().as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "kubectl {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn apply(cp: &ControlPlane, items: Vec<Value>) -> Result<()> {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    kubectl(cp, &["apply", "--server-side", "-f", "-"], Some(&list)).map(drop)
}

/// The objects of the workload, every Deployment at 0 replicas.
fn workload() -> Vec<Value> {
    let mut items: Vec<Value> = (0..NAMESPACES)
        .map(|i| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("team-{i}")}}))
        .collect();
    items.push(json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "KarpenterNodeRole-bench",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
        },
    }));
    items.push(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [INSTANCE_TYPE]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                ],
            }},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "30s"},
        },
    }));
    let pod_spec = |cpu: &str, memory: &str, tolerate_all: bool| {
        let mut spec = json!({
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "app",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }],
        });
        if tolerate_all {
            spec["tolerations"] = json!([{"operator": "Exists"}]);
        }
        spec
    };
    items.push(json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "node-exporter", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": "node-exporter"}},
            "template": {
                "metadata": {"labels": {"app": "node-exporter"}},
                // As cluster DaemonSets run: kube-scheduler preempts a workload pod for it on a node the workload
                // filled first, so the node's 31st pod goes Pending and gets a node of its own. Without it, 31
                // workload pods pack a node whose DaemonSet pod arrived late, that pod stays Pending for good,
                // and N nodes' worth of pods fit on fewer nodes.
                "spec": with_priority(pod_spec("50m", "64Mi", true), "system-node-critical"),
            },
        },
    }));
    for i in 0..DEPLOYMENTS {
        let name = format!("app-{i}");
        items.push(json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": format!("team-{}", i % NAMESPACES)},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": pod_spec(POD_CPU, POD_MEMORY, false),
                },
            },
        }));
    }
    items
}

fn with_priority(mut spec: Value, class: &str) -> Value {
    spec["priorityClassName"] = json!(class);
    spec
}

/// Workload pods in phase Running (bound, and started by kwok), from the server's table (names only, not whole
/// pods: tens of thousands of them every poll would load the API server the run measures).
fn running_pods(cp: &ControlPlane) -> Result<usize> {
    Ok(kubectl(
        cp,
        &[
            "get",
            "pods",
            "--all-namespaces",
            "--field-selector=status.phase=Running,metadata.namespace!=kube-system",
            "--no-headers",
        ],
        None,
    )?
    .lines()
    .filter(|l| !l.trim().is_empty())
    .count())
}

/// Ready pods of the Deployments, and how many they want.
fn deployment_pods(cp: &ControlPlane) -> Result<(usize, usize)> {
    let text = kubectl(
        cp,
        &[
            "get",
            "deployments",
            "--all-namespaces",
            "-o",
            "jsonpath={range .items[*]}{.status.readyReplicas} {.spec.replicas}{\"\\n\"}{end}",
        ],
        None,
    )?;
    let (mut ready, mut wanted) = (0, 0);
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        // An unset readyReplicas prints nothing: the line then holds only spec.replicas.
        let (a, b) = (fields.next(), fields.next());
        let (r, w) = match (a, b) {
            (Some(r), Some(w)) => (r, w),
            (Some(w), None) => ("0", w),
            _ => continue,
        };
        ready += r.parse::<usize>().unwrap_or(0);
        wanted += w.parse::<usize>().unwrap_or(0);
    }
    Ok((ready, wanted))
}

fn node_claims(cp: &ControlPlane) -> Result<usize> {
    Ok(kubectl(cp, &["get", "nodeclaims", "-o", "name"], None)?
        .lines()
        .filter(|l| !l.is_empty())
        .count())
}

/// Peak RSS of each control plane process (from the run directory's PID file).
fn control_plane_peaks(cp: &ControlPlane) -> BTreeMap<String, u64> {
    fs::read_to_string(cp.run_dir.join("pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(name, pid)| Some((name.to_string(), pid.trim().parse::<u32>().ok()?)))
        .map(|(name, pid)| (name, proc_status_bytes(pid, "VmHWM")))
        .collect()
}

/// Scrapes /metrics until the disruption controller has reconciled `passes` more times than at the call.
async fn wait_for_passes(controller: &Controller, metrics_port: u16, passes: u64) -> Result<String> {
    let pid = controller.pid();
    let scrape = || async {
        match http_get(metrics_port, "/metrics").await {
            Ok((200, body)) => Some(body),
            _ => None,
        }
    };
    let passes_in = |text: &str| reconciles(text).get("disruption").copied().unwrap_or(0);
    let start = scrape().await.map_or(0, |t| passes_in(&t));
    let started = Instant::now();
    let mut text = String::new();
    while started.elapsed() < PASSES_TIMEOUT {
        tokio::time::sleep(POLL).await;
        if !Path::new(&format!("/proc/{pid}")).exists() {
            bail!("the controller exited (see target/bench/controller-real.log)");
        }
        if let Some(body) = scrape().await {
            text = body;
            if passes_in(&text) >= start + passes {
                return Ok(text);
            }
        }
    }
    eprintln!("warning: fewer than {passes} disruption passes within {PASSES_TIMEOUT:?}; stopping anyway");
    Ok(text)
}

/// `pids` are stopped once this process exits, however it exits.
fn outlived_by_nothing(pids: &[u32]) -> Result<()> {
    control_plane::kill_when_owner_exits(std::process::id(), pids, None).map_err(|e| anyhow!("{e}"))
}

pub(super) async fn real(karpenter: &Path, nodes: usize) -> Result<RealRows> {
    let root = crate::workspace_root();
    let run_dir = bench_dir()?.join("control-plane");
    let started = Instant::now();
    let cp = ControlPlane::start(&root, &run_dir, StartOptions::default()).map_err(|e| anyhow!("{e}"))?;
    let mut guard = ControlPlaneGuard {
        root: root.clone(),
        run_dir: cp.run_dir.clone(),
        keep_logs: true,
    };
    // The guard stops it when the run ends; this, when the run is killed (Ctrl-C, a timeout) and no drop runs.
    outlived_by_nothing(&control_plane::control_plane_pids(&cp.run_dir).map_err(|e| anyhow!("{e}"))?)?;
    eprintln!(
        "bench controller --real: control plane up at {} in {:.1?}",
        cp.server,
        started.elapsed()
    );
    // The release binary may be rebuilt by another cargo command while this runs: run a copy of it.
    let binary = bench_dir()?.join("karpenter-real");
    fs::copy(karpenter, &binary).with_context(|| format!("cannot copy {}", karpenter.display()))?;
    apply(&cp, workload())?;

    let (metrics_port, probes_port) = (free_port()?, free_port()?);
    let launched = Instant::now();
    let controller = spawn_controller(
        &binary,
        &cp.kubeconfig,
        metrics_port,
        probes_port,
        "controller-real.log",
    )?;
    let pid = controller.pid();
    outlived_by_nothing(&[pid])?;
    loop {
        if launched.elapsed() > READY_TIMEOUT {
            bail!("the controller was not ready within {READY_TIMEOUT:?} (target/bench/controller-real.log)");
        }
        if !Path::new(&format!("/proc/{pid}")).exists() {
            bail!("the controller exited before it was ready (target/bench/controller-real.log)");
        }
        if let Ok((200, _)) = http_get(probes_port, "/readyz").await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ready_seconds = launched.elapsed().as_secs_f64();

    // Scale every Deployment at once.
    let pods = nodes * PODS_PER_NODE;
    let replicas = format!("--replicas={}", pods / DEPLOYMENTS);
    let scaled = Instant::now();
    for i in 0..NAMESPACES {
        let namespace = format!("--namespace=team-{i}");
        kubectl(
            &cp,
            &["scale", "deployment", "--all", &namespace, &replicas],
            None,
        )?;
    }
    let (mut first_claim, mut last_claim, mut claims) = (None, 0.0, 0);
    let mut last_report = Instant::now();
    let mut running = 0;
    // Ends when every pod runs: kwok's pods, once Running, are not made Ready again when the node-lifecycle
    // controller marks them NotReady after a late kwok heartbeat (which a loaded 2-core machine does see at 1,000
    // nodes), so the Deployments' readyReplicas may never reach the total although every pod runs.
    let (all_running_seconds, all_ready_seconds, ready_at_end) = loop {
        tokio::time::sleep(POLL).await;
        if !Path::new(&format!("/proc/{pid}")).exists() {
            bail!("the controller exited during the scale-up (target/bench/controller-real.log)");
        }
        let now = scaled.elapsed().as_secs_f64();
        let seen = node_claims(&cp)?;
        if seen > 0 && first_claim.is_none() {
            first_claim = Some(now);
        }
        if seen != claims {
            claims = seen;
            last_claim = now;
        }
        let (ready, wanted) = deployment_pods(&cp)?;
        if wanted == pods && ready == pods {
            break (now, Some(now), ready);
        }
        if last_report.elapsed() >= Duration::from_secs(30) {
            running = running_pods(&cp)?;
            eprintln!(
                "bench controller --real: {now:.0} s: {claims} NodeClaims, {running}/{wanted} pods Running, \
                 {ready} Ready, controller RSS {:.1} MiB",
                proc_status_bytes(pid, "VmRSS") as f64 / MIB
            );
            last_report = Instant::now();
            if wanted == pods && running == pods {
                break (now, None, ready);
            }
        }
        if scaled.elapsed() > SCALE_UP_TIMEOUT {
            bail!(
                "only {running}/{pods} pods Running ({ready} Ready) after {SCALE_UP_TIMEOUT:?} ({claims} \
                 NodeClaims); see target/bench/controller-real.log"
            );
        }
    };
    let rss_after_scale_up_bytes = proc_status_bytes(pid, "VmRSS");
    eprintln!(
        "bench controller --real: {pods} pods Running after {all_running_seconds:.1} s ({ready_at_end} Ready) on \
         {claims} NodeClaims; waiting for {PASSES_AFTER_SCALE_UP} disruption passes"
    );
    let text = wait_for_passes(&controller, metrics_port, PASSES_AFTER_SCALE_UP).await?;
    let scale_up = ScaleUpRow {
        nodes,
        pods,
        node_claims: node_claims(&cp)?,
        ready_seconds,
        first_claim_seconds: first_claim.unwrap_or(f64::NAN),
        last_claim_seconds: last_claim,
        all_running_seconds,
        all_ready_seconds,
        ready_at_end,
        peak_rss_bytes: proc_status_bytes(pid, "VmHWM"),
        rss_after_scale_up_bytes,
        cpu_seconds: proc_cpu_seconds(pid),
        reconciles: reconciles(&text),
        disruption_decisions: metric_sum(&text, "karpenter_voluntary_disruption_decisions_total", &[])
            .unwrap_or(0.0) as u64,
    };
    controller.stop()?;

    // A fresh controller on the full cluster, as the karpenter-sim memory row measures one.
    let (metrics_port, probes_port) = (free_port()?, free_port()?);
    let restarted = Instant::now();
    let controller = spawn_controller(
        &binary,
        &cp.kubeconfig,
        metrics_port,
        probes_port,
        "controller-real-restart.log",
    )?;
    let pid = controller.pid();
    outlived_by_nothing(&[pid])?;
    let observed = watch_controller(&controller, metrics_port, probes_port, restarted).await?;
    let restart = RestartRow {
        ready_seconds: observed.ready_seconds,
        rss_at_ready_bytes: observed.rss_at_ready_bytes,
        peak_rss_bytes: proc_status_bytes(pid, "VmHWM"),
        cpu_seconds: proc_cpu_seconds(pid),
        run_seconds: restarted.elapsed().as_secs_f64(),
        reconciles: observed.reconciles,
        disruption_seconds_mean: observed.disruption_seconds_mean,
        disruption_decisions: observed.disruption_decisions,
    };
    controller.stop()?;
    let control_plane_peak_bytes = control_plane_peaks(&cp);
    let _ = fs::remove_file(&binary);
    guard.keep_logs = false;
    drop(guard);
    Ok(RealRows {
        scale_up,
        restart,
        control_plane_peak_bytes,
    })
}

/// Whether `command` is on PATH (kubectl is needed; the control plane needs Go and openssl and says so).
pub(super) fn require_kubectl() -> Result<()> {
    let found = Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        bail!("`bench controller --real` needs kubectl on PATH (https://kubernetes.io/docs/tasks/tools/)");
    }
    Ok(())
}
