//! `cargo xtask bench schedule [--json] [--pods N]` (`bench schedule --upstream`, upstream's scheduler and ours
//! on the same workloads in one table, is in [`upstream`]; `bench disrupt` and `bench controller` are in their own
//! modules): the scheduling benchmarks of benchmarks.md, run through
//! the same path the CLI takes (Kubernetes objects -> `Snapshot` -> `build_schedule_inputs` -> `schedule`).
//!
//! - upstream's `scheduling_benchmark_test.go` (§1.1): the 400-type fake catalog, the five-class diverse pods
//!   at 1000, 5000, 10000 and 20000, and 4000 preference pods under Respect and Ignore;
//! - the KWOK e2e workloads (§1.3): Basic, Hostname spread and Wide on the KWOK catalog narrowed to 30 types.
//!
//! Only `schedule` is timed (wall clock; best of 3 runs up to 5000 pods, one run above), as upstream times
//! only `Solve`. Each run reports pods/s, the node count against a node lower bound and the cost against the
//! LP lower bound of §4.2 ([`bounds`]). Pods come from a fixed, published seed ([`workloads::SEED`]) through
//! our own SplitMix64, so every run of every build sees the same pods.
//!
//! Timings are only meaningful in a release build: `cargo run --release -p xtask -- bench schedule`.

mod bounds;
mod cache_heap;
mod catalogs;
mod controller;
mod controller_cluster;
mod controller_real;
mod disrupt;
mod disrupt_workloads;
mod report;
mod upstream;
mod workloads;

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::{Args, Subcommand, builder::RangedU64ValueParser};
use karpenter_api::label_policy::LabelPolicy;
use karpenter_core::{
    scheduling::{PreferencePolicy, SchedulingSettings, schedule},
    snapshot::{BuildOptions, Snapshot, build_schedule_inputs},
};

use report::Row;
use workloads::Workload;

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Time the scheduling simulation on upstream's benchmark workloads and the KWOK e2e workloads.
    Schedule {
        /// Print one JSON object per run per line instead of a table.
        #[arg(long)]
        json: bool,
        /// Run only the diverse workload, at this many pods.
        #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..),
              conflicts_with = "upstream")]
        pods: Option<usize>,
        /// Compare with upstream: build upstream's scheduler from the pinned Go module (tests/upstream-bench,
        /// sigs.k8s.io/karpenter v1.15.0, GOTOOLCHAIN=go1.27.3), run it and ours on the same catalog and pods
        /// (upstream's benchmark workloads: diverse at --sizes, 4000 preference pods Respect and Ignore), and
        /// print one Markdown table of both sides' time, pods/s, nodes and cost with the ratios. Needs Go.
        /// Upstream's side takes about ten minutes on 2 cores (its 20,000-pod row four).
        #[arg(long)]
        upstream: bool,
        /// With --upstream: the diverse workload sizes, comma-separated.
        #[arg(long, value_name = "N,..", value_delimiter = ',', requires = "upstream",
              default_value = "1000,5000,10000,20000",
              value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
        sizes: Vec<usize>,
        /// With --upstream: leave out the two preference workloads.
        #[arg(long, requires = "upstream")]
        no_preferences: bool,
        /// With --upstream: also build and run upstream's own benchmark binary (`go test -c -tags
        /// test_performance` of its scheduling package) on the same sizes, list its times and check that its
        /// node counts equal those of upstream's side of the table (doubles upstream's run time).
        #[arg(long, requires = "upstream")]
        upstream_benchmark: bool,
    },
    /// Time a disruption pass (build_disruption_inputs + disruption_pass) on generated clusters of 100, 1000
    /// and 5000 nodes x NodePools x hostname spread.
    Disrupt {
        /// Print one JSON object per run per line instead of a table.
        #[arg(long)]
        json: bool,
        /// Run only the clusters of this many nodes (default: 100, 1000, 5000, then 20000, whose one row
        /// simulates every candidate of 600,000 pods).
        #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
        nodes: Option<usize>,
        /// Run only the workloads whose name (the WORKLOAD column, e.g. disrupt-5000n-1p-0s-30ppn-full)
        /// contains this text.
        #[arg(long, value_name = "SUBSTRING")]
        only: Option<String>,
        /// Skip the `karpenter disrupt` CLI runs of the rows of 5000 nodes and more (and the release build of the
        /// `karpenter` binary they need); CLI S and CLI MiB are then "-".
        #[arg(long)]
        skip_cli: bool,
        /// Keep the kubectl-style dumps the CLI rows run on (target/bench/disrupt-WORKLOAD.json), to profile
        /// `karpenter disrupt --snapshot` on them.
        #[arg(long)]
        keep_dumps: bool,
    },
    /// The controller's figures: peak memory of the release `karpenter controller --cloud-provider kwok`
    /// against a simulated cluster of 5000 nodes and 150,000 pods, and the time from the end of the batch
    /// window to the NodeClaims created for 10,000 pending pods.
    Controller {
        /// Print one JSON object per run per line instead of a table.
        #[arg(long)]
        json: bool,
        /// Nodes of the memory run (30 pods each; default 5000).
        #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
        nodes: Option<usize>,
        /// Pending pods of the provisioning runs (default 10000).
        #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
        pending: Option<usize>,
        /// Skip the memory run.
        #[arg(long)]
        skip_memory: bool,
        /// Skip the provisioning runs.
        #[arg(long)]
        skip_provision: bool,
        /// Measure on a real control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok; built
        /// from tests/control-plane once): scale 30 Deployments from 0 to N x 30 pods (default N = 1000) and
        /// time the NodeClaims and the pods Ready, then restart the controller on the full cluster; then the
        /// karpenter-sim memory row of the same size (unless --skip-memory). Needs Go, openssl and kubectl.
        #[arg(long)]
        real: bool,
    },
}

/// Diverse-pod sizes of upstream's BenchmarkScheduling{1000,5000,10000,20000}.
const DIVERSE_SIZES: [usize; 4] = [1000, 5000, 10000, 20000];
/// Upstream's makePreferencePods(4000).
const PREFERENCE_PODS: usize = 4000;
/// Sizes up to this are run three times and the best time kept; larger ones once.
const BEST_OF_THREE_UP_TO: usize = 5000;

pub fn run(args: &BenchArgs) -> Result<()> {
    match &args.command {
        BenchCommand::Schedule {
            json,
            upstream: true,
            sizes,
            no_preferences,
            upstream_benchmark,
            ..
        } => upstream::run(&upstream::Options {
            json: *json,
            sizes: sizes.clone(),
            preferences: !*no_preferences,
            benchmark: *upstream_benchmark,
        }),
        BenchCommand::Schedule { json, pods, .. } => run_schedule(*json, *pods),
        BenchCommand::Disrupt {
            json,
            nodes,
            only,
            skip_cli,
            keep_dumps,
        } => disrupt::run(&disrupt::Options {
            json: *json,
            nodes: *nodes,
            only: only.clone(),
            skip_cli: *skip_cli,
            keep_dumps: *keep_dumps,
        }),
        BenchCommand::Controller {
            json,
            nodes,
            pending,
            skip_memory,
            skip_provision,
            real,
        } => controller::run(&controller::Options {
            json: *json,
            nodes: *nodes,
            pending: *pending,
            skip_memory: *skip_memory,
            skip_provision: *skip_provision,
            real: *real,
        }),
    }
}

fn run_schedule(json: bool, pods: Option<usize>) -> Result<()> {
    if cfg!(debug_assertions) {
        eprintln!(
            "warning: xtask was built without optimisations; these timings mean little. \
             Run `cargo run --release -p xtask -- bench schedule` instead."
        );
    }
    let fake = &catalogs::fake_catalog(catalogs::FAKE_INSTANCE_TYPES);
    let kwok = &catalogs::kwok_catalog();
    // Workloads are generated one at a time and dropped after their run, so each run's peak RSS is its own.
    type Make<'a> = Box<dyn Fn() -> Workload + 'a>;
    let mut plan: Vec<Make<'_>> = Vec::new();
    match pods {
        Some(n) => plan.push(Box::new(move || workloads::diverse(n, fake))),
        None => {
            for n in DIVERSE_SIZES {
                plan.push(Box::new(move || workloads::diverse(n, fake)));
            }
            for policy in [PreferencePolicy::Respect, PreferencePolicy::Ignore] {
                plan.push(Box::new(move || {
                    workloads::preferences(PREFERENCE_PODS, policy, fake)
                }));
            }
            plan.push(Box::new(|| workloads::kwok_basic(kwok)));
            plan.push(Box::new(|| workloads::kwok_hostname_spread(kwok)));
            plan.push(Box::new(|| workloads::kwok_wide(kwok)));
        }
    }
    let mut rows = Vec::with_capacity(plan.len());
    if !json {
        report::print_table_header();
    }
    for make in &plan {
        let row = run_workload(make())?;
        if json {
            println!("{}", row.to_json());
        } else {
            report::print_table_row(&row);
        }
        rows.push(row);
    }
    if !json {
        report::print_table_footer(&rows);
    }
    Ok(())
}

/// Builds the workload's snapshot and scheduling input (untimed), then times `schedule` (best of three up to
/// [`BEST_OF_THREE_UP_TO`] pods, one run above).
fn run_workload(workload: Workload) -> Result<Row> {
    let runs = if workload.requests.len() <= BEST_OF_THREE_UP_TO {
        3
    } else {
        1
    };
    run_workload_runs(workload, runs)
}

/// [`run_workload`] with the best of `runs` timed runs.
fn run_workload_runs(mut workload: Workload, runs: usize) -> Result<Row> {
    let mut snapshot = Snapshot::default();
    let notes = snapshot.add_documents(workload.take_documents(), &workload.name);
    let options = BuildOptions {
        settings: SchedulingSettings {
            preference_policy: workload.preference_policy,
            ..SchedulingSettings::default()
        },
        label_policy: LabelPolicy::Core,
        extra_well_known_labels: Vec::new(),
        capacity_buffers: false,
        node_overlays: false,
        unevaluated_nodepools: true,
        default_spread: Vec::new(),
    };
    let inputs = build_schedule_inputs(&snapshot, &workload.catalog, &options);
    drop(snapshot);
    for note in notes.iter().chain(&inputs.notes) {
        eprintln!("note: {}: {}: {}", workload.name, note.object, note.message);
    }
    let pods = workload.requests.len();
    if inputs.input.pods.len() != pods {
        bail!(
            "{}: {} pods generated but only {} reached the scheduler (see the notes above)",
            workload.name,
            pods,
            inputs.input.pods.len()
        );
    }

    report::reset_peak_rss();
    let mut best = Duration::MAX;
    let mut first = None;
    for _ in 0..runs.max(1) {
        let mut interner = inputs.interner.clone();
        let start = Instant::now();
        let results = schedule(&inputs.input, &mut interner, &inputs.table);
        best = best.min(start.elapsed());
        first.get_or_insert(results);
    }
    let peak_rss_bytes = report::peak_rss_bytes();
    let Some(results) = first else {
        bail!("{}: no run", workload.name)
    };
    if !results.pod_errors.is_empty() {
        eprintln!(
            "warning: {}: {} pod(s) left pending; first: {} ({})",
            workload.name,
            results.pod_errors.len(),
            results
                .pod_errors
                .first()
                .map(|(p, _)| inputs.pod_names[*p].as_str())
                .unwrap_or_default(),
            results
                .pod_errors
                .first()
                .map(|(_, e)| e.as_str())
                .unwrap_or_default(),
        );
    }

    let nodes = results.new_node_claims.len();
    let cost: f64 = results
        .new_node_claims
        .iter()
        .filter_map(|c| c.launch.as_ref())
        .map(|l| l.offering.price)
        .sum();
    let bound = bounds::lower_bounds(&workload);
    let seconds = best.as_secs_f64();
    Ok(Row {
        workload: workload.name.clone(),
        pods,
        threads: 1,
        seconds,
        pods_per_second: if seconds > 0.0 {
            pods as f64 / seconds
        } else {
            f64::INFINITY
        },
        nodes,
        node_lower_bound: bound.nodes,
        cost_per_hour: cost,
        cost_lower_bound: bound.cost,
        peak_rss_bytes,
        pending: results.pod_errors.len(),
    })
}
