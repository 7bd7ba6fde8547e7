//! `cargo xtask bench controller [--json] [--nodes N] [--pending N] [--skip-memory] [--skip-provision]`: the
//! controller's figures of issue 6, measured (never asserted).
//!
//! **Memory** (row `controller-<N>n-<P>p`): this process starts a karpenter-sim API server, fills it in process
//! with the steady cluster of [`controller_cluster::steady`] (5,000 kwok Nodes and NodeClaims, 150,000 Running
//! pods, DaemonSets, Deployments, ReplicaSets, PDBs), serves it over HTTP on 127.0.0.1 and runs the release
//! binary `karpenter controller --cloud-provider kwok --kubeconfig .. --disable-leader-election` against it.
//! It waits for `/readyz` to answer 200 (ready_seconds: process start to every kind listed), then until
//! `controller_runtime_reconcile_total{controller="disruption"}` reaches [`DISRUPTION_PASSES`] and the first
//! NodeClaim garbage collection (every 2 minutes, listing every instance of the cloud) has run beside them
//! (bounded by [`RUN_TIMEOUT`]), so the peak covers the controller's periodic work, not only its first passes,
//! scraping /metrics every [`SCRAPE_EVERY`], then stops it with SIGINT (SIGKILL after
//! [`STOP_TIMEOUT`]). peak_rss_bytes is the child's VmHWM read from /proc just before the signal (what
//! getrusage's ru_maxrss would report for it); rss_at_ready_bytes its VmRSS when /readyz first answered 200;
//! cpu_seconds its user + system time. Before the controller starts, a state cache is synced in this process
//! on the same cluster and its heap measured by kind (cache_heap_bytes; outside_cache_heap_bytes is what grew
//! beside it and was not freed with it; see [`cache_heap`]). The controller's log (stdout and stderr) goes to
//! target/bench/controller.log. To see where the memory goes, `KARPENTER_BENCH_WRAPPER="heaptrack -o
//! target/bench/controller"` runs the controller under that command (the row's memory figures are then the
//! wrapper's; read the profile with `heaptrack_print`).
//!
//! **Provisioning latency** (rows `provision-<workload>-<N>`): an API server holding one general-purpose
//! NodePool and N pending pods (`PodScheduled=False`, `Unschedulable`), a `ClusterState` synced on it through
//! the in-process client, then one `Provisioner::provision_once()` (snapshot, scheduling with the embedded AWS
//! us-east-1 catalog, NodeClaim creation through the API) timed: the time from the end of the batch window to
//! the NodeClaims created. Workloads: `deployments` (40 Deployments of various sizes, no constraints) and
//! upstream's `diverse` mix (one fifth hostname anti-affinity, so N/5 NodeClaims at least). snapshot_seconds
//! and schedule_seconds time, apart from the round, `ClusterState::snapshot` and the scheduling
//! (`build_schedule_inputs` + `schedule`) of the same pods, to show where the round's time goes (the rest is
//! NodeClaim creation through the API).

use std::{
    collections::BTreeMap,
    fs,
    net::{Ipv4Addr, SocketAddr, TcpListener},
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, anyhow, bail};
use karpenter_api::label_policy::LabelPolicy;
use karpenter_aws_catalog::aws_catalog;
use karpenter_core::{
    catalog::CatalogFile,
    clock::{Clock, SystemClock},
    scheduling::schedule,
    snapshot::{BuildOptions, build_schedule_inputs},
};
use karpenter_kwok::AwsCatalogKwok;
use karpenter_provisioner::{
    catalog::catalog_for,
    provisioner::{Provisioner, ProvisionerSettings},
};
use karpenter_sim::ApiServer;
use karpenter_state::{ClusterState, ControllerContext, Watched};
use nix::{
    sys::signal::{Signal, killpg},
    unistd::Pid,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{cache_heap, controller_cluster, controller_real, workloads};

/// Disruption reconciles to wait for once ready.
const DISRUPTION_PASSES: u64 = 3;
/// The reconcile label of garbage collection, and how many of its runs to wait for.
const GARBAGE_COLLECTION: &str = "nodeclaim.garbagecollection";
const GARBAGE_COLLECTIONS: u64 = 1;
const READY_TIMEOUT: Duration = Duration::from_secs(600);
const RUN_TIMEOUT: Duration = Duration::from_secs(300);
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
const SCRAPE_EVERY: Duration = Duration::from_secs(2);
const READY_POLL: Duration = Duration::from_millis(100);
const DEFAULT_NODES: usize = 5000;
/// Nodes of `--real` (30 pods each): issue 22's 1,000 nodes / 30,000 pods.
const DEFAULT_REAL_NODES: usize = 1000;
const PODS_PER_NODE: usize = 30;
const DEFAULT_PENDING: usize = 10_000;
const MIB: f64 = 1024.0 * 1024.0;

/// What the memory run measured.
struct MemoryRow {
    workload: String,
    nodes: usize,
    pods: usize,
    objects: usize,
    fill_seconds: f64,
    ready_seconds: f64,
    run_seconds: f64,
    peak_rss_bytes: u64,
    rss_at_ready_bytes: u64,
    cpu_seconds: f64,
    reconciles: BTreeMap<String, u64>,
    disruption_seconds_mean: Option<f64>,
    disruption_decisions: u64,
    nodeclaims_created: u64,
    cache: cache_heap::CacheHeap,
}

impl MemoryRow {
    fn to_json(&self) -> String {
        json!({
            "workload": self.workload,
            "nodes": self.nodes,
            "pods": self.pods,
            "objects": self.objects,
            "fill_seconds": self.fill_seconds,
            "ready_seconds": self.ready_seconds,
            "run_seconds": self.run_seconds,
            "peak_rss_bytes": self.peak_rss_bytes,
            "rss_at_ready_bytes": self.rss_at_ready_bytes,
            "cpu_seconds": self.cpu_seconds,
            "reconciles": self.reconciles,
            "disruption_seconds_mean": self.disruption_seconds_mean,
            "disruption_decisions": self.disruption_decisions,
            "nodeclaims_created": self.nodeclaims_created,
            "cache_heap_bytes": {
                "pods": self.cache.pods,
                "nodes": self.cache.nodes,
                "node_claims": self.cache.node_claims,
                "rest": self.cache.rest,
            },
            "outside_cache_heap_bytes": self.cache.outside,
        })
        .to_string()
    }
}

/// What one provisioning run measured.
struct ProvisionRow {
    workload: String,
    pending: usize,
    seconds: f64,
    node_claims: usize,
    scheduled: usize,
    unschedulable: usize,
    snapshot_seconds: f64,
    schedule_seconds: f64,
}

impl ProvisionRow {
    fn to_json(&self) -> String {
        json!({
            "workload": self.workload,
            "pods": self.pending,
            "seconds": self.seconds,
            "node_claims": self.node_claims,
            "scheduled": self.scheduled,
            "unschedulable": self.unschedulable,
            "snapshot_seconds": self.snapshot_seconds,
            "schedule_seconds": self.schedule_seconds,
        })
        .to_string()
    }
}

/// The options of `bench controller`.
pub struct Options {
    pub json: bool,
    pub nodes: Option<usize>,
    pub pending: Option<usize>,
    pub skip_memory: bool,
    pub skip_provision: bool,
    /// Measure on a real control plane with kwok instead (see [`super::controller_real`]), beside the
    /// karpenter-sim memory row of the same size.
    pub real: bool,
}

pub fn run(options: &Options) -> Result<()> {
    if cfg!(debug_assertions) {
        eprintln!(
            "warning: xtask was built without optimisations; these timings mean little. \
             Run `cargo run --release -p xtask -- bench controller` instead."
        );
    }
    let catalog = aws_catalog("us-east-1", &Default::default()).map_err(|e| anyhow!("{e}"))?;
    if options.real {
        return run_real(options, &catalog);
    }
    let karpenter = if options.skip_memory {
        None
    } else {
        Some(super::disrupt::build_karpenter()?)
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    if let Some(karpenter) = karpenter {
        let nodes = options.nodes.unwrap_or(DEFAULT_NODES);
        let row = runtime.block_on(memory(&karpenter, &catalog, nodes))?;
        if options.json {
            println!("{}", row.to_json());
        } else {
            print_memory(&row);
        }
    }
    if !options.skip_provision {
        let n = options.pending.unwrap_or(DEFAULT_PENDING);
        type MakePods = Box<dyn Fn() -> Vec<Value>>;
        let plan: [(&str, MakePods); 2] = [
            (
                "deployments",
                Box::new(move || controller_cluster::deployment_pods(n)),
            ),
            (
                "diverse",
                Box::new(move || workloads::diverse(n, &CatalogFile::default()).pods),
            ),
        ];
        if !options.json {
            println!(
                "{:<28} {:>6} {:>9} {:>7} {:>9} {:>7} {:>10} {:>10}",
                "WORKLOAD", "PODS", "SECONDS", "CLAIMS", "SCHEDULED", "LEFT", "SNAPSHOT S", "SCHEDULE S"
            );
        }
        for (name, make) in &plan {
            let row = runtime.block_on(provision(name, make(), &catalog))?;
            if options.json {
                println!("{}", row.to_json());
            } else {
                println!(
                    "{:<28} {:>6} {:>9.3} {:>7} {:>9} {:>7} {:>10.3} {:>10.3}",
                    row.workload,
                    row.pending,
                    row.seconds,
                    row.node_claims,
                    row.scheduled,
                    row.unschedulable,
                    row.snapshot_seconds,
                    row.schedule_seconds
                );
            }
        }
    }
    Ok(())
}

/// `--real`: the rows on a real control plane, then the karpenter-sim memory row of the same size.
fn run_real(options: &Options, catalog: &CatalogFile) -> Result<()> {
    controller_real::require_kubectl()?;
    let karpenter = super::disrupt::build_karpenter()?;
    let nodes = options.nodes.unwrap_or(DEFAULT_REAL_NODES);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let real = runtime.block_on(controller_real::real(&karpenter, nodes))?;
    if options.json {
        println!("{}", real.to_json());
    } else {
        real.print();
    }
    if !options.skip_memory {
        let row = runtime.block_on(memory(&karpenter, catalog, nodes))?;
        if options.json {
            println!("{}", row.to_json());
        } else {
            print_memory(&row);
        }
    }
    Ok(())
}

fn print_memory(r: &MemoryRow) {
    println!(
        "{:<28} {:>5} {:>6} {:>7} {:>8} {:>8} {:>8} {:>9} {:>9} {:>7} {:>6} {:>3} {:>9} {:>5}",
        "WORKLOAD",
        "NODES",
        "PODS",
        "OBJECTS",
        "FILL S",
        "READY S",
        "RUN S",
        "PEAK MiB",
        "READY MiB",
        "CPU S",
        "PASSES",
        "GCS",
        "PASS S",
        "CMDS"
    );
    println!(
        "{:<28} {:>5} {:>6} {:>7} {:>8.1} {:>8.2} {:>8.1} {:>9.1} {:>9.1} {:>7.1} {:>6} {:>3} {:>9} {:>5}",
        r.workload,
        r.nodes,
        r.pods,
        r.objects,
        r.fill_seconds,
        r.ready_seconds,
        r.run_seconds,
        r.peak_rss_bytes as f64 / MIB,
        r.rss_at_ready_bytes as f64 / MIB,
        r.cpu_seconds,
        r.reconciles.get("disruption").copied().unwrap_or(0),
        r.reconciles.get(GARBAGE_COLLECTION).copied().unwrap_or(0),
        r.disruption_seconds_mean
            .map_or("-".into(), |s| format!("{s:.3}")),
        r.disruption_decisions,
    );
    println!();
}

/// A free TCP port on 127.0.0.1 (bound then released; the controller binds it right after).
pub(super) fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// The child controller; killed (SIGKILL) and reaped when dropped, so no path leaves it running.
pub(super) struct Controller {
    child: Child,
}

impl Controller {
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGINT (the binary stops its controllers and exits), SIGKILL after [`STOP_TIMEOUT`]. Both go to the
    /// child's process group, so a profiling wrapper's controller gets them too.
    pub(super) fn stop(mut self) -> Result<()> {
        let pid = i32::try_from(self.child.id()).context("pid")?;
        let _ = killpg(Pid::from_raw(pid), Signal::SIGINT);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("warning: the controller did not stop within {STOP_TIMEOUT:?} of SIGINT; killing it");
        Ok(())
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            match i32::try_from(self.child.id()) {
                Ok(pid) => {
                    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                }
                Err(_) => {
                    let _ = self.child.kill();
                }
            }
        }
        let _ = self.child.wait();
    }
}

/// `key:  N kB` of /proc/PID/status, in bytes.
pub(super) fn proc_status_bytes(pid: u32, key: &str) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                let rest = l.strip_prefix(key)?.strip_prefix(':')?;
                rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
            })
        })
        .map_or(0, |kib| kib * 1024)
}

/// User + system CPU seconds of PID (fields 14 and 15 of /proc/PID/stat, in USER_HZ = 100 ticks).
pub(super) fn proc_cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    // After ')': state is field 3, so utime (14) and stime (15) are at 11 and 12.
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// GET `path` on 127.0.0.1:`port`: the status code and body (HTTP/1.1, connection closed).
pub(super) async fn http_get(port: u16, path: &str) -> Result<(u16, String)> {
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        anyhow::Ok(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(30), fetch)
        .await
        .map_err(|_| anyhow!("GET {path}: timed out"))??;
    let text = String::from_utf8_lossy(&response);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("GET {path}: no status line"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// The sum of every sample of `name` whose labels contain all of `labels` (`key="value"` strings).
pub(super) fn metric_sum(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (series, value) = match rest.rsplit_once(' ') {
            Some(parts) => parts,
            None => continue,
        };
        if !(series.is_empty() || series.starts_with('{')) || !labels.iter().all(|l| series.contains(l)) {
            continue;
        }
        if let Ok(v) = value.parse::<f64>() {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// controller_runtime_reconcile_total by controller.
pub(super) fn reconciles(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("controller_runtime_reconcile_total{") else {
            continue;
        };
        let Some(controller) = rest
            .split("controller=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
        else {
            continue;
        };
        let value = rest
            .rsplit_once(' ')
            .and_then(|(_, v)| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        *out.entry(controller.to_string()).or_insert(0) += value as u64;
    }
    out
}

pub(super) fn bench_dir() -> Result<PathBuf> {
    let dir = crate::workspace_root().join("target/bench");
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

/// Starts `karpenter controller --cloud-provider kwok` on `kubeconfig`, its output in target/bench/`log`.
pub(super) fn spawn_controller(
    karpenter: &Path,
    kubeconfig: &Path,
    metrics: u16,
    probes: u16,
    log: &str,
) -> Result<Controller> {
    let log_path = bench_dir()?.join(log);
    let log = fs::File::create(&log_path).with_context(|| format!("cannot write {}", log_path.display()))?;
    // A profiling aid (see the module documentation).
    let wrapper: Vec<String> = std::env::var("KARPENTER_BENCH_WRAPPER")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let mut command = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(karpenter);
            c
        }
        None => Command::new(karpenter),
    };
    let child = command
        .args([
            "controller",
            "--cloud-provider",
            "kwok",
            "--disable-leader-election",
        ])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--metrics-port", &metrics.to_string()])
        .args(["--health-probe-port", &probes.to_string()])
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: stopping it stops a wrapper's child too (see `Controller::stop`).
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot run {}", karpenter.display()))?;
    Ok(Controller { child })
}

async fn memory(karpenter: &Path, catalog: &CatalogFile, nodes: usize) -> Result<MemoryRow> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let api = ApiServer::new(clock);
    let start = Instant::now();
    let written = controller_cluster::steady(&api, catalog, nodes, PODS_PER_NODE)?;
    let fill_seconds = start.elapsed().as_secs_f64();
    eprintln!(
        "bench controller: {} objects ({} nodes, {} pods) written in {fill_seconds:.1} s",
        written.objects, written.nodes, written.pods
    );
    let http = api
        .serve_http(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .map_err(|e| anyhow!("serving the simulated API: {e}"))?;
    let cache = cache_heap::measure(&api, written.pods, READY_TIMEOUT).await?;
    eprintln!(
        "bench controller: a state cache of this cluster holds {:.1} MiB of heap: pods {:.1}, Nodes {:.1}, \
         NodeClaims {:.1}, the other kinds {:.1} ({:.1} MiB more grew while it synced and was not freed with it, \
         held elsewhere: the pod sharing tables, the in-process API server)",
        cache.total() as f64 / MIB,
        cache.pods as f64 / MIB,
        cache.nodes as f64 / MIB,
        cache.node_claims as f64 / MIB,
        cache.rest as f64 / MIB,
        cache.outside as f64 / MIB
    );
    let kubeconfig = bench_dir()?.join("controller.kubeconfig");
    http.write_kubeconfig(&kubeconfig).map_err(|e| anyhow!("{e}"))?;
    let (metrics_port, probes_port) = (free_port()?, free_port()?);

    let started = Instant::now();
    let controller = spawn_controller(
        karpenter,
        &kubeconfig,
        metrics_port,
        probes_port,
        "controller.log",
    )?;
    let pid = controller.pid();
    let measured = watch_controller(&controller, metrics_port, probes_port, started).await;
    let peak_rss_bytes = proc_status_bytes(pid, "VmHWM");
    let cpu_seconds = proc_cpu_seconds(pid);
    let run_seconds = started.elapsed().as_secs_f64();
    controller.stop()?;
    http.shutdown().await;
    let _ = fs::remove_file(&kubeconfig);
    let measured = measured?;
    Ok(MemoryRow {
        workload: format!("controller-{nodes}n-{}p", written.pods),
        nodes: written.nodes,
        pods: written.pods,
        objects: written.objects,
        fill_seconds,
        ready_seconds: measured.ready_seconds,
        run_seconds,
        peak_rss_bytes,
        rss_at_ready_bytes: measured.rss_at_ready_bytes,
        cpu_seconds,
        reconciles: measured.reconciles,
        disruption_seconds_mean: measured.disruption_seconds_mean,
        disruption_decisions: measured.disruption_decisions,
        nodeclaims_created: measured.nodeclaims_created,
        cache,
    })
}

pub(super) struct Observed {
    pub(super) ready_seconds: f64,
    pub(super) rss_at_ready_bytes: u64,
    pub(super) reconciles: BTreeMap<String, u64>,
    pub(super) disruption_seconds_mean: Option<f64>,
    pub(super) disruption_decisions: u64,
    pub(super) nodeclaims_created: u64,
}

/// Waits for /readyz, then for the disruption passes, scraping /metrics.
pub(super) async fn watch_controller(
    controller: &Controller,
    metrics_port: u16,
    probes_port: u16,
    started: Instant,
) -> Result<Observed> {
    let pid = controller.pid();
    let alive = || Path::new(&format!("/proc/{pid}")).exists();
    loop {
        if started.elapsed() > READY_TIMEOUT {
            bail!("the controller was not ready within {READY_TIMEOUT:?}");
        }
        if !alive() {
            bail!("the controller exited before it was ready (see its log in target/bench/)");
        }
        if let Ok((200, _)) = http_get(probes_port, "/readyz").await {
            break;
        }
        tokio::time::sleep(READY_POLL).await;
    }
    let ready_seconds = started.elapsed().as_secs_f64();
    let rss_at_ready_bytes = proc_status_bytes(pid, "VmRSS");
    eprintln!(
        "bench controller: ready after {ready_seconds:.2} s, RSS {:.1} MiB",
        rss_at_ready_bytes as f64 / MIB
    );
    let ready_at = Instant::now();
    let mut text = String::new();
    loop {
        tokio::time::sleep(SCRAPE_EVERY).await;
        if !alive() {
            bail!("the controller exited (see its log in target/bench/)");
        }
        match http_get(metrics_port, "/metrics").await {
            Ok((200, body)) => text = body,
            Ok((code, _)) => eprintln!("warning: /metrics answered {code}"),
            Err(e) => eprintln!("warning: {e}"),
        }
        let counts = reconciles(&text);
        let passes = counts.get("disruption").copied().unwrap_or(0);
        let collections = counts.get(GARBAGE_COLLECTION).copied().unwrap_or(0);
        if passes >= DISRUPTION_PASSES && collections >= GARBAGE_COLLECTIONS {
            break;
        }
        if ready_at.elapsed() > RUN_TIMEOUT {
            eprintln!(
                "warning: only {passes} disruption pass(es) and {collections} garbage collection(s) within \
                 {RUN_TIMEOUT:?} of ready; stopping anyway"
            );
            break;
        }
    }
    let disruption = ["controller=\"disruption\""];
    let sum = metric_sum(
        &text,
        "controller_runtime_reconcile_time_seconds_sum",
        &disruption,
    );
    let count = metric_sum(
        &text,
        "controller_runtime_reconcile_time_seconds_count",
        &disruption,
    );
    Ok(Observed {
        ready_seconds,
        rss_at_ready_bytes,
        reconciles: reconciles(&text),
        disruption_seconds_mean: sum.zip(count).filter(|(_, c)| *c > 0.0).map(|(s, c)| s / c),
        disruption_decisions: metric_sum(&text, "karpenter_voluntary_disruption_decisions_total", &[])
            .unwrap_or(0.0) as u64,
        nodeclaims_created: metric_sum(&text, "karpenter_nodeclaims_created_total", &[]).unwrap_or(0.0)
            as u64,
    })
}

async fn provision(name: &str, pods: Vec<Value>, catalog: &CatalogFile) -> Result<ProvisionRow> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let api = ApiServer::new(Arc::clone(&clock));
    controller_cluster::team_namespaces(&api)?;
    let written = controller_cluster::pending(&api, pods)?;
    let pending = written.pods;

    let state = ClusterState::new(Watched::default());
    let watch = tokio::spawn({
        let (state, client) = (state.clone(), api.client());
        async move { state.watch(client).await }
    });
    let synced = async {
        while !(state.synced() && state.pods.len() == pending) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let outcome = tokio::time::timeout(READY_TIMEOUT, synced).await;
    if outcome.is_err() {
        watch.abort();
        bail!("{name}: the state cache did not sync within {READY_TIMEOUT:?}");
    }

    let build = BuildOptions {
        label_policy: LabelPolicy::Aws,
        extra_well_known_labels: catalog.well_known_labels.clone(),
        ..BuildOptions::default()
    };
    let cloud = AwsCatalogKwok::new(api.client(), catalog.clone(), Arc::clone(&clock)).as_dyn();
    let provisioner = Provisioner::new(
        ControllerContext::new(api.client(), state.clone(), Arc::clone(&clock)),
        Arc::clone(&cloud),
        ProvisionerSettings {
            build: build.clone(),
            ..ProvisionerSettings::default()
        },
    );
    // Where the time goes: a snapshot of the cache as the round sees it, scheduled again after the round.
    let start = Instant::now();
    let snapshot = state.snapshot();
    let snapshot_seconds = start.elapsed().as_secs_f64();

    let start = Instant::now();
    let round = provisioner.provision_once().await;
    let seconds = start.elapsed().as_secs_f64();

    let pools = snapshot.node_pools.clone();
    let scheduling = async {
        let mut catalog = catalog_for(cloud.as_ref(), &pools).await?;
        catalog.well_known_labels = build.extra_well_known_labels.clone();
        let start = Instant::now();
        let mut inputs = build_schedule_inputs(&snapshot, &catalog, &build);
        let _ = schedule(&inputs.input, &mut inputs.interner, &inputs.table);
        anyhow::Ok(start.elapsed().as_secs_f64())
    };
    let schedule_seconds = scheduling.await;
    watch.abort();
    let round = round.map_err(|e| anyhow!("{name}: provisioning failed: {e}"))?;
    let unschedulable = round.unschedulable.len();
    if let Some(first) = round.unschedulable.first() {
        eprintln!("warning: {name}: {unschedulable} pod(s) left pending; first: {first}");
    }
    Ok(ProvisionRow {
        workload: format!("provision-{name}-{pending}"),
        pending: round.pending,
        seconds,
        node_claims: round.created.len(),
        scheduled: round.pending - unschedulable,
        unschedulable,
        snapshot_seconds,
        schedule_seconds: schedule_seconds?,
    })
}
