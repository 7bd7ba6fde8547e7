//! `karpenter simulate`: the real controllers against karpenter-sim (an in-memory API server, simulated
//! cloud, kube-scheduler and kubelets) on a virtual clock, so a simulated hour of a cluster takes seconds and
//! gives the same result every run. Prints progress to stderr and a summary (or `-o json`), and draws nodes and
//! cost over time with `--chart`.

mod chart;
mod run;
mod scenario;

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

Examples:
  karpenter simulate
  karpenter simulate -o json --chart nodes.svg")]
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
}

/// Runs the scenario on a paused-time runtime and renders the summary.
pub fn run(args: &SimulateArgs) -> Result<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .context("cannot start the simulation runtime")?;
    let scenario = scenario::worker_heavy();
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
