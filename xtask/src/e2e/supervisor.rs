//! Keeps a real controller process in step with the `karpenter` Deployment's pod, as a kubelet would keep its
//! container: when kwok reports the pod Running, the controller starts with the pod's environment (values, field
//! and resource references resolved as the kubelet resolves them) and the pod's name as its host name; when the
//! pod is deleted it gets SIGTERM and, after the pod's grace period, SIGKILL; when it exits on its own it is
//! counted as a crash and started again. One process at a time (the Deployment's rollout removes the old pod
//! before it creates the new one), so the ports the pod declares are free for the process that serves them.

use std::{
    collections::BTreeMap,
    fs::OpenOptions,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context, anyhow, bail};
use karpenter_e2e::control_plane::ControlPlane;
use nix::{sys::signal::Signal, unistd::Pid};
use serde_json::Value;

use super::stand_in::{CONTAINER, INSTANCE_LABEL, NAMESPACE};

/// How often the pods are read.
const POLL: Duration = Duration::from_millis(500);
/// The Lease both controllers elect their leader on.
const LEASE: &str = "karpenter-leader-election";

/// The controller binary and how it is started.
#[derive(Clone)]
pub struct Program {
    binary: PathBuf,
    kind: ProgramKind,
}

#[derive(Clone, Copy)]
enum ProgramKind {
    /// `karpenter controller --cloud-provider kwok`; it takes its Lease identity from HOSTNAME as in a pod.
    Rust,
    /// Upstream's KWOK controller; controller-runtime takes its identity from the host name, so the process
    /// runs in a UTS namespace of its own named after the pod.
    Go,
}

impl Program {
    pub fn rust(binary: PathBuf) -> Self {
        Self {
            binary,
            kind: ProgramKind::Rust,
        }
    }

    pub fn go(binary: PathBuf) -> Self {
        Self {
            binary,
            kind: ProgramKind::Go,
        }
    }

    fn command(&self, pod: &str, kubeconfig: &Path) -> Command {
        let mut command = match self.kind {
            ProgramKind::Rust => {
                let mut command = Command::new(&self.binary);
                command.args(["controller", "--cloud-provider", "kwok"]);
                command
            }
            ProgramKind::Go => {
                let mut command = Command::new("unshare");
                command
                    .args(["--uts", "--", "sh", "-c", r#"hostname "$0" && exec "$@""#, pod])
                    .arg(&self.binary)
                    // In a pod, controller-runtime reads the namespace from the service account's mount; out of
                    // one it must be told.
                    .env("LEADER_ELECTION_NAMESPACE", NAMESPACE);
                command
            }
        };
        command.env("KUBECONFIG", kubeconfig).env("HOSTNAME", pod);
        command
    }
}

/// A controller process and the pod it plays.
struct Process {
    pod: String,
    uid: String,
    child: Child,
    grace: Duration,
}

/// A process that exited while its pod still ran.
#[derive(Debug, Clone)]
pub struct Crash {
    pub pod: String,
    pub status: String,
    pub log: PathBuf,
}

pub struct Supervisor {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Crash>>>,
    started: mpsc::Receiver<String>,
    kubectl: Box<dyn Fn() -> Command + Send>,
}

impl Supervisor {
    pub fn start(cp: &ControlPlane, program: Program, logs: PathBuf) -> anyhow::Result<Self> {
        if !program.binary.is_file() {
            bail!(
                "the controller binary {} does not exist",
                program.binary.display()
            );
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (started_tx, started) = mpsc::channel();
        let kubeconfig = cp.kubeconfig.clone();
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("e2e-supervisor".into())
            .spawn(move || supervise(&kubeconfig, &program, &logs, &thread_stop, &started_tx))?;
        let kubeconfig = cp.kubeconfig.clone();
        Ok(Self {
            stop,
            thread: Some(thread),
            started,
            kubectl: Box::new(move || kubectl(&kubeconfig)),
        })
    }

    /// Waits until a controller process runs and its pod holds the Lease.
    pub fn wait_for_leader(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let pod = self
            .started
            .recv_timeout(timeout)
            .map_err(|_| anyhow!("no controller pod ran within {timeout:?} (see the Deployment's events)"))?;
        while Instant::now() < deadline {
            let out = (self.kubectl)()
                .args([
                    "get",
                    "lease",
                    LEASE,
                    "-n",
                    NAMESPACE,
                    "-o",
                    "jsonpath={.spec.holderIdentity}",
                ])
                .output()?;
            let holder = String::from_utf8_lossy(&out.stdout);
            if holder.split('_').next() == Some(pod.as_str()) {
                return Ok(());
            }
            std::thread::sleep(POLL);
        }
        bail!("the controller of pod {pod} did not take the {LEASE} Lease within {timeout:?}")
    }

    /// Stops the controller and returns the crashes seen.
    pub fn stop(mut self) -> Vec<Crash> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or_default()
    }
}

fn kubectl(kubeconfig: &Path) -> Command {
    let mut command = Command::new("kubectl");
    command.arg("--kubeconfig").arg(kubeconfig).stdin(Stdio::null());
    command
}

fn supervise(
    kubeconfig: &Path,
    program: &Program,
    logs: &Path,
    stop: &AtomicBool,
    started: &mpsc::Sender<String>,
) -> Vec<Crash> {
    let mut running: Option<Process> = None;
    let mut crashes = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let pods = match controller_pods(kubeconfig) {
            Ok(pods) => pods,
            Err(e) => {
                eprintln!("supervisor: reading the controller pods: {e:#}");
                std::thread::sleep(POLL);
                continue;
            }
        };
        if let Some(process) = &mut running {
            let pod = pods.iter().find(|p| p.uid == process.uid);
            if pod.is_none_or(|p| p.deleting) {
                if let Some(mut process) = running.take() {
                    terminate(&mut process);
                }
            } else if let Ok(Some(status)) = process.child.try_wait() {
                let log = logs.join(format!("{}.log", process.pod));
                eprintln!(
                    "supervisor: the controller of pod {} exited ({status}); see {}",
                    process.pod,
                    log.display()
                );
                crashes.push(Crash {
                    pod: process.pod.clone(),
                    status: status.to_string(),
                    log,
                });
                running = None;
            }
        }
        if running.is_none()
            && let Some(pod) = pods.iter().find(|p| p.running && !p.deleting)
        {
            match start(kubeconfig, program, logs, pod) {
                Ok(process) => {
                    let _ = started.send(process.pod.clone());
                    running = Some(process);
                }
                Err(e) => eprintln!("supervisor: starting the controller of pod {}: {e:#}", pod.name),
            }
        }
        std::thread::sleep(POLL);
    }
    if let Some(mut process) = running.take() {
        terminate(&mut process);
    }
    crashes
}

/// What the supervisor reads of a controller pod.
struct PodView {
    name: String,
    uid: String,
    running: bool,
    deleting: bool,
    grace: Duration,
    object: Value,
}

fn controller_pods(kubeconfig: &Path) -> anyhow::Result<Vec<PodView>> {
    let (key, value) = INSTANCE_LABEL;
    let out = kubectl(kubeconfig)
        .args([
            "get",
            "pods",
            "-n",
            NAMESPACE,
            "-l",
            &format!("{key}={value}"),
            "-o",
            "json",
        ])
        .output()?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr));
    }
    let list: Value = serde_json::from_slice(&out.stdout)?;
    let mut pods: Vec<PodView> = list["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|pod| PodView {
            name: pod["metadata"]["name"].as_str().unwrap_or_default().to_string(),
            uid: pod["metadata"]["uid"].as_str().unwrap_or_default().to_string(),
            running: pod["status"]["phase"] == "Running",
            deleting: !pod["metadata"]["deletionTimestamp"].is_null(),
            grace: Duration::from_secs(
                pod["spec"]["terminationGracePeriodSeconds"]
                    .as_u64()
                    .unwrap_or(30),
            ),
            object: pod.clone(),
        })
        .collect();
    // The newest first: after a rollout the new pod is the one to run.
    pods.sort_by(|a, b| {
        b.object["metadata"]["creationTimestamp"]
            .as_str()
            .cmp(&a.object["metadata"]["creationTimestamp"].as_str())
    });
    Ok(pods)
}

/// In the logs folder: a link to the log of the process running now, which kwok serves as the controller
/// container's log (the run's ClusterLogs, `stand_in::kwok_kubelet_config`).
pub const CURRENT_LOG: &str = "controller.log";

fn start(kubeconfig: &Path, program: &Program, logs: &Path, pod: &PodView) -> anyhow::Result<Process> {
    let env = container_env(&pod.object)?;
    let log_path = logs.join(format!("{}.log", pod.name));
    let open = |path: &Path| {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))
    };
    let log = open(&log_path)?;
    // The same lines in the CRI log format a kubelet keeps (`<time> <stream> F <line>`), which is what kwok
    // serves to `kubectl logs` (the suites print the controller's log after a failed spec).
    let cri_path = logs.join(format!("{}.cri.log", pod.name));
    let cri = Arc::new(std::sync::Mutex::new(open(&cri_path)?));
    let mut command = program.command(&pod.name, kubeconfig);
    command
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .with_context(|| format!("starting {}", program.binary.display()))?;
    if let Some(stdout) = child.stdout.take() {
        copy_lines(stdout, "stdout", log.try_clone()?, Arc::clone(&cri));
    }
    if let Some(stderr) = child.stderr.take() {
        copy_lines(stderr, "stderr", log, cri);
    }
    // What `kubectl logs` of the controller's pod shows (kwok serves this file, see `CURRENT_LOG`): the
    // running process's log.
    let current = logs.join(CURRENT_LOG);
    let _ = std::fs::remove_file(&current);
    std::os::unix::fs::symlink(&cri_path, &current)
        .with_context(|| format!("linking {}", current.display()))?;
    eprintln!(
        "supervisor: pod {} runs as process {} (log {})",
        pod.name,
        child.id(),
        log_path.display()
    );
    Ok(Process {
        pod: pod.name.clone(),
        uid: pod.uid.clone(),
        child,
        grace: pod.grace,
    })
}

/// Copies a process's output, line by line, to its log as written and to its CRI-format log, on a thread that
/// ends with the output.
fn copy_lines(
    output: impl std::io::Read + Send + 'static,
    stream: &'static str,
    mut log: std::fs::File,
    cri: Arc<std::sync::Mutex<std::fs::File>>,
) {
    use std::io::{BufRead, Write};
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(output).lines().map_while(Result::ok) {
            let _ = writeln!(log, "{line}");
            let stamp = jiff::Timestamp::now();
            if let Ok(mut cri) = cri.lock() {
                let _ = writeln!(cri, "{stamp} {stream} F {line}");
            }
        }
    });
}

/// SIGTERM, then SIGKILL once the grace period has passed.
fn terminate(process: &mut Process) {
    let Ok(pid) = i32::try_from(process.child.id()) else {
        return;
    };
    let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGTERM);
    let deadline = Instant::now() + process.grace;
    while Instant::now() < deadline {
        if matches!(process.child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "supervisor: pod {}'s controller outlived its grace period; killing it",
        process.pod
    );
    let _ = process.child.kill();
    let _ = process.child.wait();
}

/// The controller container's environment as the kubelet would give it.
fn container_env(pod: &Value) -> anyhow::Result<BTreeMap<String, String>> {
    let containers = pod["spec"]["containers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let container = containers
        .iter()
        .find(|c| c["name"] == CONTAINER)
        .ok_or_else(|| anyhow!("the pod has no container named {CONTAINER}"))?;
    let mut env = BTreeMap::new();
    for var in container["env"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let name = var["name"].as_str().unwrap_or_default().to_string();
        let value = if let Some(value) = var["value"].as_str() {
            value.to_string()
        } else if let Some(field) = var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            field_value(pod, field).ok_or_else(|| anyhow!("env {name}: field {field} is not supported"))?
        } else if var["valueFrom"]["resourceFieldRef"].is_object() {
            resource_value(container, &var["valueFrom"]["resourceFieldRef"])
                .with_context(|| format!("env {name}"))?
        } else if var["valueFrom"].is_object() {
            bail!("env {name}: only values, fieldRef and resourceFieldRef are supported here");
        } else {
            String::new()
        };
        env.insert(name, value);
    }
    Ok(env)
}

fn field_value(pod: &Value, field: &str) -> Option<String> {
    let value = match field {
        "metadata.name" => &pod["metadata"]["name"],
        "metadata.namespace" => &pod["metadata"]["namespace"],
        "metadata.uid" => &pod["metadata"]["uid"],
        "spec.nodeName" => &pod["spec"]["nodeName"],
        "spec.serviceAccountName" => &pod["spec"]["serviceAccountName"],
        "status.podIP" => &pod["status"]["podIP"],
        "status.hostIP" => &pod["status"]["hostIP"],
        _ => return None,
    };
    Some(value.as_str().unwrap_or_default().to_string())
}

/// A resourceFieldRef: the container's request or limit divided by the divisor, rounded up, as the kubelet does.
fn resource_value(container: &Value, reference: &Value) -> anyhow::Result<String> {
    let resource = reference["resource"].as_str().unwrap_or_default();
    let (kind, name) = resource
        .split_once('.')
        .ok_or_else(|| anyhow!("resource {resource:?} is not limits.X or requests.X"))?;
    let quantity = container["resources"][kind][name]
        .as_str()
        .ok_or_else(|| anyhow!("the container sets no {resource}"))?;
    let value = parse_quantity(quantity)?;
    let divisor = match reference["divisor"].as_str() {
        None | Some("0") => 1.0,
        Some(d) => parse_quantity(d)?,
    };
    Ok(format!("{}", (value / divisor).ceil()))
}

/// A Kubernetes quantity (`2Gi`, `500m`, `1`, `1e3`) as a number.
fn parse_quantity(text: &str) -> anyhow::Result<f64> {
    let suffixes: [(&str, f64); 12] = [
        ("Ki", 1024.0),
        ("Mi", 1024.0_f64.powi(2)),
        ("Gi", 1024.0_f64.powi(3)),
        ("Ti", 1024.0_f64.powi(4)),
        ("Pi", 1024.0_f64.powi(5)),
        ("Ei", 1024.0_f64.powi(6)),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
    ];
    let (number, factor) = suffixes
        .iter()
        .find_map(|(suffix, factor)| text.strip_suffix(suffix).map(|n| (n, *factor)))
        .unwrap_or((text, 1.0));
    let number: f64 = number
        .parse()
        .map_err(|_| anyhow!("{text:?} is not a quantity"))?;
    Ok(number * factor)
}

/// A log file's last lines, for a failure message.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_environment_is_resolved_as_the_kubelet_resolves_it() {
        let pod = json!({
            "metadata": {"name": "karpenter-abc", "namespace": "kube-system"},
            "spec": {"containers": [{
                "name": CONTAINER,
                "env": [
                    {"name": "LOG_LEVEL", "value": "debug"},
                    {"name": "SYSTEM_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "MEMORY_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "0"}}},
                    {"name": "CPU_REQUESTS", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1"}}},
                    {"name": "CPU_MILLIS", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
                ],
                "resources": {"requests": {"cpu": "500m"}, "limits": {"memory": "2Gi"}},
            }]},
        });
        let env = container_env(&pod).unwrap();
        assert_eq!(env["LOG_LEVEL"], "debug");
        assert_eq!(env["SYSTEM_NAMESPACE"], "kube-system");
        assert_eq!(env["MEMORY_LIMIT"], "2147483648");
        // Half a CPU in whole CPUs rounds up, as the kubelet's does.
        assert_eq!(env["CPU_REQUESTS"], "1");
        assert_eq!(env["CPU_MILLIS"], "500");
    }

    #[test]
    fn an_environment_source_the_supervisor_cannot_resolve_is_an_error() {
        let pod = json!({"spec": {"containers": [{"name": CONTAINER, "env": [
            {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ]}]}});
        let error = container_env(&pod).unwrap_err().to_string();
        assert!(error.contains("env SECRET"), "{error}");
    }
}
