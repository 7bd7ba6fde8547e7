//! `cargo xtask bench disrupt [--json] [--nodes N] [--only SUBSTRING] [--skip-cli]`: the consolidation harness of benchmarks.md §6 item 4 (the
//! grid of upstream's consolidation microbenchmarks, §1.2, at cluster scale), run through the path
//! `karpenter disrupt` takes: Kubernetes objects -> `Snapshot` -> `build_disruption_inputs` ->
//! `disruption_pass`, at the fixed time [`NOW`] with the embedded AWS us-east-1 catalog.
//!
//! Grid: {100, 1000} nodes x {1, 10, 50} NodePools x {0, 50, 100}% hostname spread, 10..=30 pods per node,
//! plus two full-coverage clusters at each size (full m5.xlarge nodes a NodePool limited to m5.xlarge cannot
//! consolidate, so single-node consolidation evaluates every candidate), without and with 100% hostname spread;
//! at 5000 nodes only (1 pool, 0%) and (10 pools, 50%), plus two 5000-node clusters with 30 pods per node
//! (150,000 pods; 1 pool, 0%), the second with full coverage. `--nodes N` runs only the grid at N nodes (N >= 5000: the reduced 5000-node
//! grid); `--only SUBSTRING` runs only the workloads whose name contains SUBSTRING. The clusters are described in [`disrupt_workloads`](super::disrupt_workloads); seed 42.
//!
//! Building the snapshot is untimed. `build_disruption_inputs` (build_seconds) and `disruption_pass`
//! (seconds) are timed once each, wall clock; total_seconds is their sum. inputs_bytes is the heap the inputs
//! hold, counted by xtask's allocator ([`crate::heap`]): what a controller keeps beside its cache during a pass.
//! peak_rss_bytes is this process's
//! VmHWM after the pass, reset once the snapshot is built; it includes the generated JSON documents the
//! bench holds, so it is an upper bound, not what a user sees.
//!
//! What a user sees is measured on the 5000-node rows: the cluster is written as one `kind: List` JSON file
//! (pods as `kubectl get -o json` prints them, about 3 KB each) and the release `karpenter disrupt` binary is
//! run on it through `xtask measure`: cli_seconds is its wall time (reading the file included) and
//! cli_peak_rss_bytes its peak RSS, the issue's "peak memory of `karpenter disrupt` on that snapshot".
//! `--skip-cli` skips those runs (and the release build of `karpenter` they need).

use std::{
    fs,
    io::{BufWriter, Write as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context, Result, anyhow, bail};
use karpenter_api::label_policy::LabelPolicy;
use karpenter_aws_catalog::aws_catalog;
use karpenter_core::{
    catalog::CatalogFile,
    disruption::{
        drift::NoProviderDrift,
        pass::{PassSettings, disruption_pass},
    },
    snapshot::{BuildOptions, Snapshot, build_disruption_inputs},
};
use serde_json::json;

use super::{
    disrupt_workloads::{self, ClusterSpec, NOW, PodsPerNode},
    report,
};

const POOLS: [usize; 3] = [1, 10, 50];
const SPREADS: [u32; 3] = [0, 50, 100];
const SIZES: [usize; 2] = [100, 1000];
const LARGE: usize = 5000;
/// The largest cluster: 20,000 nodes / 600,000 pods, only its every-candidate row (a minute or more each, and
/// about 3 GiB for the benchmark and as much for the CLI).
const HUGE: usize = 20_000;
const PODS_PER_NODE: PodsPerNode = PodsPerNode::Uniform(10, 30);

/// What one run measured.
struct Row {
    workload: String,
    nodes: usize,
    pods: usize,
    nodepools: usize,
    spread: u32,
    method: String,
    candidates_evaluated: usize,
    seconds: f64,
    build_seconds: f64,
    savings_per_hour: f64,
    commands: usize,
    peak_rss_bytes: u64,
    /// Heap bytes the disruption inputs hold (allocated by `build_disruption_inputs` and alive after it).
    inputs_bytes: usize,
    /// `karpenter disrupt` run as a user would, on the cluster written as one JSON List (5000-node rows only).
    cli: Option<CliRun>,
}

/// What `karpenter disrupt --snapshot FILE.json` measured, through `xtask measure`.
#[derive(serde::Deserialize)]
struct CliRun {
    seconds: f64,
    peak_rss_bytes: u64,
    success: bool,
    #[serde(skip)]
    snapshot_bytes: u64,
}

impl Row {
    fn to_json(&self) -> String {
        json!({
            "workload": self.workload,
            "nodes": self.nodes,
            "pods": self.pods,
            "nodepools": self.nodepools,
            "spread": self.spread,
            "method": self.method,
            "candidates_evaluated": self.candidates_evaluated,
            "seconds": self.seconds,
            "build_seconds": self.build_seconds,
            "total_seconds": self.seconds + self.build_seconds,
            "savings_per_hour": self.savings_per_hour,
            "commands": self.commands,
            "peak_rss_bytes": self.peak_rss_bytes,
            "inputs_bytes": self.inputs_bytes,
            "cli_seconds": self.cli.as_ref().map(|c| c.seconds),
            "cli_peak_rss_bytes": self.cli.as_ref().map(|c| c.peak_rss_bytes),
            "cli_snapshot_bytes": self.cli.as_ref().map(|c| c.snapshot_bytes),
        })
        .to_string()
    }
}

fn grid(nodes: usize) -> Vec<ClusterSpec> {
    let spec = |pools, spread, pods_per_node| ClusterSpec {
        nodes,
        pools,
        spread,
        pods_per_node,
        full_coverage: false,
    };
    // Every candidate evaluated by single-node consolidation, none consolidatable (the issue's coverage target).
    let full = ClusterSpec {
        full_coverage: true,
        ..spec(1, 0, PODS_PER_NODE)
    };
    let every_candidate_30ppn = ClusterSpec {
        pods_per_node: PodsPerNode::Fixed(30),
        ..full
    };
    if nodes >= HUGE {
        return vec![every_candidate_30ppn];
    }
    if nodes >= LARGE {
        return vec![
            spec(1, 0, PODS_PER_NODE),
            spec(10, 50, PODS_PER_NODE),
            spec(1, 0, PodsPerNode::Fixed(30)),
            // The controller benchmark's steady cluster in shape: every one of 5,000 candidates simulated.
            every_candidate_30ppn,
        ];
    }
    POOLS
        .iter()
        .flat_map(|&p| SPREADS.iter().map(move |&s| spec(p, s, PODS_PER_NODE)))
        .chain([full, ClusterSpec { spread: 100, ..full }])
        .collect()
}

/// What `bench disrupt` was asked to run.
pub struct Options {
    pub json: bool,
    /// Only the grid at this many nodes.
    pub nodes: Option<usize>,
    /// Only the workloads whose name contains this.
    pub only: Option<String>,
    /// Do not run the `karpenter disrupt` CLI on the 5000-node rows.
    pub skip_cli: bool,
    /// Keep the dumps the CLI rows run on.
    pub keep_dumps: bool,
}

pub fn run(options: &Options) -> Result<()> {
    let json = options.json;
    if cfg!(debug_assertions) {
        eprintln!(
            "warning: xtask was built without optimisations; these timings mean little. \
             Run `cargo run --release -p xtask -- bench disrupt` instead."
        );
    }
    let catalog = aws_catalog("us-east-1", &Default::default()).map_err(|e| anyhow!("{e}"))?;
    let mut plan: Vec<ClusterSpec> = match options.nodes {
        Some(n) => grid(n),
        None => SIZES
            .iter()
            .chain([&LARGE, &HUGE])
            .flat_map(|&n| grid(n))
            .collect(),
    };
    if let Some(only) = &options.only {
        plan.retain(|spec| spec.name().contains(only.as_str()));
        if plan.is_empty() {
            bail!("no workload's name contains {only:?}");
        }
    }
    let karpenter = if !options.skip_cli && plan.iter().any(|s| s.nodes >= LARGE) {
        Some(build_karpenter()?)
    } else {
        None
    };
    if !json {
        print_header();
    }
    for spec in &plan {
        let cli = karpenter.as_deref().filter(|_| spec.nodes >= LARGE);
        let row = run_one(spec, &catalog, cli, options.keep_dumps)?;
        if json {
            println!("{}", row.to_json());
        } else {
            print_row(&row);
        }
    }
    Ok(())
}

/// Builds the release `karpenter` binary the 5000-node rows run; returns its path.
pub(super) fn build_karpenter() -> Result<PathBuf> {
    let root = crate::workspace_root();
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "--quiet", "--package", "karpenter"])
        .current_dir(&root)
        .status()
        .context("cannot run cargo build")?;
    if !status.success() {
        bail!("cargo build --release -p karpenter failed");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    Ok(target.join("release/karpenter"))
}

/// Writes the cluster as one `kind: List` JSON file (what `kubectl get ... -o json` prints) and runs
/// `karpenter disrupt` on it through `xtask measure`, so the figures are the binary's own.
fn run_cli(
    karpenter: &Path,
    name: &str,
    spec: &ClusterSpec,
    catalog: &CatalogFile,
    keep_dump: bool,
) -> Result<CliRun> {
    let dir = crate::workspace_root().join("target/bench");
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let file = dir.join(format!("disrupt-{name}.json"));
    {
        let mut out = BufWriter::new(
            fs::File::create(&file).with_context(|| format!("cannot write {}", file.display()))?,
        );
        out.write_all(br#"{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":""},"items":["#)?;
        let mut first = true;
        disrupt_workloads::cluster(spec, catalog, |doc| {
            if !std::mem::take(&mut first) {
                out.write_all(b",")?;
            }
            serde_json::to_writer(&mut out, &doc)?;
            Ok(())
        })?;
        out.write_all(b"]}\n")?;
        out.flush()?;
    }
    let snapshot_bytes = fs::metadata(&file)?.len();
    let output = Command::new(std::env::current_exe()?)
        .arg("measure")
        .arg("--")
        .arg(karpenter)
        .args(["disrupt", "--snapshot"])
        .arg(&file)
        .args(["--now", NOW, "-o", "json"])
        .stderr(Stdio::null())
        .output()
        .context("cannot run xtask measure")?;
    let mut run: CliRun = serde_json::from_slice(&output.stdout).with_context(|| {
        format!(
            "xtask measure printed {:?}",
            String::from_utf8_lossy(&output.stdout)
        )
    })?;
    if !run.success {
        bail!("karpenter disrupt failed on {}", file.display());
    }
    run.snapshot_bytes = snapshot_bytes;
    if keep_dump {
        eprintln!("kept {}", file.display());
    } else {
        let _ = fs::remove_file(&file);
    }
    Ok(run)
}

fn run_one(
    spec: &ClusterSpec,
    catalog: &CatalogFile,
    karpenter: Option<&Path>,
    keep_dump: bool,
) -> Result<Row> {
    let name = spec.name();
    let cli = karpenter
        .map(|k| run_cli(k, &name, spec, catalog, keep_dump))
        .transpose()?;
    let mut snapshot = Snapshot::default();
    let mut notes = Vec::new();
    let mut document = 0;
    let pods = disrupt_workloads::cluster(spec, catalog, |doc| {
        document += 1;
        snapshot.add_value(doc, &|| format!("document {document} of {name}"), &mut notes);
        Ok(())
    })?;
    for note in &notes {
        eprintln!("note: {name}: {}: {}", note.object, note.message);
    }
    let now = NOW.parse().map_err(|e| anyhow!("bad time {NOW}: {e}"))?;
    let options = BuildOptions {
        label_policy: LabelPolicy::Aws,
        extra_well_known_labels: catalog.well_known_labels.clone(),
        ..BuildOptions::default()
    };

    report::reset_peak_rss();
    let heap_before = crate::heap::allocated_bytes();
    let start = Instant::now();
    let mut inputs = build_disruption_inputs(&snapshot, catalog, &options, &NoProviderDrift, now);
    let build_seconds = start.elapsed().as_secs_f64();
    let inputs_bytes = crate::heap::allocated_bytes().saturating_sub(heap_before);
    drop(snapshot);
    let start = Instant::now();
    let result = disruption_pass(
        &mut inputs,
        &PassSettings {
            now,
            spot_to_spot: false,
        },
    );
    let seconds = start.elapsed().as_secs_f64();
    let peak_rss_bytes = report::peak_rss_bytes();

    for note in &inputs.notes {
        eprintln!("note: {name}: {}: {}", note.object, note.message);
    }
    for error in &result.errors {
        eprintln!("warning: {name}: {error}");
    }
    if inputs.claims.iter().flatten().count() != spec.nodes {
        eprintln!(
            "warning: {name}: only {} of {} nodes are managed in the disruption inputs",
            inputs.claims.iter().flatten().count(),
            spec.nodes
        );
    }
    Ok(Row {
        workload: name,
        nodes: spec.nodes,
        pods,
        nodepools: spec.pools,
        spread: spec.spread,
        method: result
            .commands
            .first()
            .map_or("none", |c| c.method.as_str())
            .to_string(),
        candidates_evaluated: result.candidates_evaluated,
        seconds,
        build_seconds,
        savings_per_hour: result
            .commands
            .iter()
            .map(|c| c.savings_per_hour)
            .fold(0.0, |a, b| a + b),
        commands: result.commands.len(),
        peak_rss_bytes,
        inputs_bytes,
        cli,
    })
}

fn print_header() {
    println!(
        "{:<28} {:>5} {:>6} {:>4} {:>4} {:<26} {:>5} {:>9} {:>9} {:>9} {:>9} {:>4} {:>10} {:>8} {:>7} {:>8}",
        "WORKLOAD",
        "NODES",
        "PODS",
        "NP",
        "SPR%",
        "METHOD",
        "CANDS",
        "PASS S",
        "BUILD S",
        "MS/CAND",
        "SAVE $/H",
        "CMDS",
        "INPUTS MiB",
        "RSS MiB",
        "CLI S",
        "CLI MiB"
    );
}

fn print_row(r: &Row) {
    let per_candidate = if r.candidates_evaluated > 0 {
        format!("{:.2}", r.seconds * 1e3 / r.candidates_evaluated as f64)
    } else {
        "-".into()
    };
    println!(
        "{:<28} {:>5} {:>6} {:>4} {:>4} {:<26} {:>5} {:>9.4} {:>9.4} {:>9} {:>9.4} {:>4} {:>10.1} {:>8.1} {:>7} {:>8}",
        r.workload,
        r.nodes,
        r.pods,
        r.nodepools,
        r.spread,
        r.method,
        r.candidates_evaluated,
        r.seconds,
        r.build_seconds,
        per_candidate,
        r.savings_per_hour,
        r.commands,
        r.inputs_bytes as f64 / (1024.0 * 1024.0),
        r.peak_rss_bytes as f64 / (1024.0 * 1024.0),
        r.cli.as_ref().map_or("-".into(), |c| format!("{:.2}", c.seconds)),
        r.cli.as_ref().map_or("-".into(), |c| format!(
            "{:.1}",
            c.peak_rss_bytes as f64 / (1024.0 * 1024.0)
        )),
    );
}
