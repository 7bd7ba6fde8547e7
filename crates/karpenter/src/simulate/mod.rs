//! `karpenter simulate`: the real controllers against karpenter-sim (an in-memory API server, simulated
//! cloud, kube-scheduler and kubelets) on a virtual clock, so a simulated hour of a cluster takes seconds and
//! gives the same result every run. Prints progress to stderr and a summary (or `-o json`), and draws nodes and
//! cost over time with `--chart`.

mod chart;
mod run;
mod scenario;
mod serve;

use std::{fmt::Write as _, io::Write as _};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};

pub use run::Summary;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SimulateOutput {
    Table,
    Json,
}

#[derive(Debug, Clone, Args)]
#[command(after_help = "\
The built-in scenario (worker-heavy): a queue consumer on a spot NodePool scaled from 0 to 400 replicas beside a
small on-demand NodePool for add-ons, a PDB of maxUnavailable 25%, three spot interruptions during the peak, then
a scale back to zero; one simulated hour on the embedded AWS us-east-1 catalog.

Scenario files (--scenario) set NodePools, workloads and events over time; the format is in docs/simulate.md
and config/scenarios/worker-heavy.yaml is the built-in scenario written as one.

--serve keeps a simulated cluster running on 127.0.0.1 in real time, with the controllers, and writes a
kubeconfig for kubectl.

Examples:
  karpenter simulate
  karpenter simulate -o json --chart nodes.svg
  karpenter simulate --scenario config/scenarios/worker-heavy.yaml --minutes 20
  karpenter simulate --serve --kubeconfig /tmp/sim.kubeconfig")]
pub struct SimulateArgs {
    /// How to print the summary; json is one object (nodesLaunched, costTotal, costPerHourPeak,
    /// podPendingSecondsP50, podPendingSecondsP99, disruptionsByReason, evictions, pdbViolations,
    /// simulatedSeconds, wallSeconds, ...).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = SimulateOutput::Table)]
    pub output: SimulateOutput,
    /// Write an SVG chart of running nodes and cost per hour over time to this file.
    #[arg(long, value_name = "PATH")]
    pub chart: Option<std::path::PathBuf>,
    /// Do not print progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Stop after this many simulated minutes (default: the scenario's whole hour).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub minutes: Option<u64>,
    /// Run this scenario file instead of the built-in one.
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<std::path::PathBuf>,
    /// Keep a simulated cluster (API server, kubelets, scheduler, cloud) and the controllers running on
    /// 127.0.0.1 in real time until Ctrl-C, for kubectl.
    #[arg(long, requires = "kubeconfig")]
    pub serve: bool,
    /// With --serve: where to write the kubeconfig of the simulated cluster.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// With --serve: the API server's port (default: any free port).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// With --serve: run only the simulated cluster, without Karpenter's controllers (to run
    /// `karpenter controller --cloud-provider kwok --kubeconfig PATH` against it).
    #[arg(long, requires = "serve")]
    pub without_controllers: bool,
}

/// Runs the scenario on a paused-time runtime and renders the summary.
pub fn run(args: &SimulateArgs) -> Result<String> {
    if args.serve {
        return serve::run(args);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .context("cannot start the simulation runtime")?;
    let scenario = match &args.scenario {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            scenario::parse(&text).with_context(|| format!("scenario {}", path.display()))?
        }
        None => scenario::worker_heavy(),
    };
    let quiet = args.quiet;
    let duration = args
        .minutes
        .map_or(scenario.duration, |m| std::time::Duration::from_secs(m * 60));
    let summary = runtime.block_on(run::run(&scenario, duration, |line| {
        if !quiet {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
    }))?;
    if let Some(path) = &args.chart {
        let title = format!(
            "karpenter simulate: {} (nodes and cost per hour)",
            summary.scenario
        );
        std::fs::write(path, chart::svg(&title, &summary.samples))
            .with_context(|| format!("cannot write the chart to {}", path.display()))?;
    }
    Ok(match args.output {
        SimulateOutput::Json => {
            let mut s = serde_json::to_string_pretty(&summary).context("cannot encode the summary")?;
            s.push('\n');
            s
        }
        SimulateOutput::Table => table(&summary),
    })
}

fn table(s: &Summary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Scenario {}: {} simulated seconds in {:.1}s",
        s.scenario, s.simulated_seconds, s.wall_seconds
    );
    let _ = writeln!(out, "Nodes launched: {}", s.nodes_launched);
    for (instance_type, n) in &s.nodes_launched_by_type {
        let _ = writeln!(out, "  {instance_type:<16} {n}");
    }
    let _ = writeln!(
        out,
        "Cost: {:.4} in total, peak {:.4}/h",
        s.cost_total, s.cost_per_hour_peak
    );
    let _ = writeln!(
        out,
        "Pod pending time: p50 {:.0}s, p99 {:.0}s",
        s.pod_pending_seconds_p50, s.pod_pending_seconds_p99
    );
    let reasons: Vec<String> = s
        .disruptions_by_reason
        .iter()
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    let _ = writeln!(
        out,
        "Disruptions: {}",
        if reasons.is_empty() {
            "none".to_string()
        } else {
            reasons.join(", ")
        }
    );
    let _ = writeln!(
        out,
        "Evictions: {}; PDB violations: {}",
        s.evictions, s.pdb_violations
    );
    out
}
