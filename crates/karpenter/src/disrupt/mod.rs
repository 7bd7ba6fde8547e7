//! `karpenter disrupt`: what the next disruption pass would carry out on a cluster snapshot, and why every other
//! managed node is left alone. It runs the very pass the disruption controller runs, at `--now`.

pub mod output;
pub mod table;

use std::{collections::BTreeMap, io::Write as _, path::PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use karpenter_core::{
    disruption::{
        drift::NoProviderDrift,
        pass::{PassSettings, disruption_pass},
    },
    snapshot::build_disruption_inputs,
};

use crate::{input, schedule::OutputFormat};
use output::DisruptOutput;

#[derive(Debug, Clone, Args)]
#[command(after_help = "\
Examples:
  kubectl get nodes,pods,nodeclaims,nodepools,pdb,daemonsets -A -o json > cluster.json
  karpenter disrupt --snapshot cluster.json --now 2026-12-02T10:00:00Z -o table
  karpenter disrupt --snapshot cluster/ --instance-types catalog.json --settings settings.yaml

Exit status: 0 when the pass ran (a pass that does nothing is a result), 1 when the input is unusable.")]
pub struct DisruptArgs {
    /// A YAML or JSON file, or a folder searched recursively for *.yaml, *.yml and *.json, holding the cluster's
    /// objects as `kubectl get -o yaml` prints them: Nodes, NodeClaims, NodePools, Pods,
    /// PodDisruptionBudgets, DaemonSets and the rest `schedule` reads. Repeatable.
    #[arg(long = "snapshot", value_name = "PATH", required = true)]
    pub snapshots: Vec<PathBuf>,

    /// A catalog file to use instead of the embedded AWS catalog (prices and offerings of replacements).
    #[arg(long, value_name = "PATH", conflicts_with = "region")]
    pub instance_types: Option<PathBuf>,

    /// The region whose embedded AWS catalog to use when no --instance-types is given.
    #[arg(long, value_name = "REGION", default_value = "us-east-1")]
    pub region: String,

    /// The time of the pass, as RFC 3339: budgets' cron windows, consolidateAfter, expireAfter and
    /// do-not-disrupt durations are evaluated at it. Defaults to the current time.
    #[arg(long, value_name = "RFC3339", value_parser = parse_now)]
    pub now: Option<jiff::Timestamp>,

    /// Controller settings, as for `schedule` (featureGates.SpotToSpotConsolidation, preferencePolicy, ...).
    #[arg(long, value_name = "PATH")]
    pub settings: Option<PathBuf>,

    /// Output format; json is the stable contract other tools read.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Json)]
    pub output: OutputFormat,
}

fn parse_now(s: &str) -> Result<jiff::Timestamp, String> {
    s.parse::<jiff::Timestamp>()
        .map_err(|e| format!("not an RFC 3339 time: {e}"))
}

/// Runs the command, writing notes to stderr and returning the rendered output.
pub fn run(args: &DisruptArgs) -> Result<String> {
    let mut stderr = std::io::stderr().lock();
    let mut note = |line: String| {
        let line = line.replace(['\n', '\r'], " ");
        let _ = writeln!(stderr, "note: {line}");
    };
    let loaded = input::load_all(
        &args.snapshots,
        args.instance_types.as_deref(),
        &args.region,
        args.settings.as_deref(),
        &mut note,
    )?;
    let (snapshot, settings) = (&loaded.snapshot, &loaded.settings);
    let now = args.now.unwrap_or_else(jiff::Timestamp::now);
    let mut inputs =
        build_disruption_inputs(snapshot, &loaded.catalog, &loaded.options, &NoProviderDrift, now);
    std::mem::take(&mut inputs.notes)
        .into_iter()
        .for_each(|n| note(format!("{}: {}", n.object, n.message)));

    let result = disruption_pass(
        &mut inputs,
        &PassSettings {
            now,
            spot_to_spot: settings.spot_to_spot,
        },
    );

    let nodepool_hashes: BTreeMap<String, String> = snapshot
        .node_pools
        .iter()
        .filter_map(|np| np.metadata.name.clone().map(|name| (name, np.hash())))
        .collect();
    let out = DisruptOutput::new(&inputs, &result, &nodepool_hashes);
    Ok(match args.output {
        OutputFormat::Json => {
            let mut s = serde_json::to_string_pretty(&out).context("cannot encode the output as JSON")?;
            s.push('\n');
            s
        }
        OutputFormat::Yaml => serde_saphyr::to_string(&out).context("cannot encode the output as YAML")?,
        OutputFormat::Table => table::render(&out),
    })
}
