//! `karpenter schedule`: what Karpenter would do for the pending pods of a cluster snapshot. It reads the
//! snapshot, the instance-type catalog and the controller settings, runs the very scheduling simulation the
//! provisioner runs, and prints the NodeClaims it would create, the pods it would put on existing nodes and
//! why every other pod stays pending.

pub mod output;
pub mod table;

use std::{collections::BTreeMap, io::Write as _, path::PathBuf};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use karpenter_core::{scheduling::schedule, snapshot::build_schedule_inputs};

use crate::input;
use output::{OutputContext, ScheduleOutput};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// The stable contract: one JSON document (nodeClaims, existingNodes, podErrors, summary).
    Json,
    /// The same structure as YAML.
    Yaml,
    /// A table for people: one row per new NodeClaim, then existing-node placements and pending pods.
    Table,
}

#[derive(Debug, Clone, Args)]
#[command(after_help = "\
Examples:
  karpenter schedule --snapshot cluster/ --instance-types catalog.json
  karpenter schedule --snapshot pods.yaml --snapshot nodepools.yaml --region us-west-2 -o table
  kubectl get pods,nodes,nodepools,nodeclaims,daemonsets -A -o yaml > snap.yaml
  karpenter schedule --snapshot snap.yaml --settings settings.yaml -o yaml

Exit status: 0 when the simulation ran (pods that stay pending are listed in podErrors), 1 when the input is
unusable (a file that cannot be read, a catalog that does not parse, a setting with a bad value).")]
pub struct ScheduleArgs {
    /// A YAML or JSON file, or a folder searched recursively for *.yaml, *.yml and *.json, holding Kubernetes
    /// objects as `kubectl get -o yaml` prints them (multi-document streams and `kind: List` accepted): Pods,
    /// Nodes, NodeClaims, NodePools, EC2NodeClasses, NodeOverlays, CapacityBuffers, DaemonSets, ReplicaSets,
    /// StatefulSets, Deployments, Services, PodDisruptionBudgets, PVCs, PVs, StorageClasses, CSINodes and
    /// Namespaces. Repeatable. Unbound pods not owned by a DaemonSet are the pending pods to place. Unknown
    /// kinds and malformed objects are reported on stderr and skipped.
    #[arg(long = "snapshot", value_name = "PATH", required = true)]
    pub snapshots: Vec<PathBuf>,

    /// A catalog file (JSON or YAML: {"wellKnownLabels": [...], "instanceTypes": [{name, requirements,
    /// capacity, overhead, offerings}]}) to use instead of the embedded AWS catalog.
    #[arg(long, value_name = "PATH", conflicts_with = "region")]
    pub instance_types: Option<PathBuf>,

    /// The region whose embedded AWS catalog to use when no --instance-types is given (us-east-1, us-west-2,
    /// eu-west-1).
    #[arg(long, value_name = "REGION", default_value = "us-east-1")]
    pub region: String,

    /// The time the decision is made at, as RFC 3339 (2026-01-02T15:04:05Z); defaults to the current time.
    #[arg(long, value_name = "RFC3339", value_parser = parse_now)]
    pub now: Option<jiff::Timestamp>,

    /// A YAML or JSON map of controller settings, in the controller's names: preferencePolicy
    /// (Respect|Ignore), minValuesPolicy (Strict|BestEffort), featureGates ({ReservedCapacity: true,
    /// NodeOverlay: false, CapacityBuffer: false}), vmMemoryOverheadPercent, reservedENIs; the environment
    /// names (PREFERENCE_POLICY, MIN_VALUES_POLICY, FEATURE_GATES: "ReservedCapacity=true,NodeOverlay=false",
    /// ...) work too.
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

/// Runs the command, writing notes to stderr as they come and returning the rendered output.
pub fn run(args: &ScheduleArgs) -> Result<String> {
    let mut stderr = std::io::stderr().lock();
    // One line per note, whatever the message holds, so `grep` and line counts work on stderr.
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
    let (snapshot, catalog, options) = (&loaded.snapshot, &loaded.catalog, &loaded.options);

    // Budgets, consolidateAfter and expireAfter read the clock; placing pods does not, so `schedule` only
    // checks that --now parses. The same flag drives `disrupt`.
    let _decision_time = args.now.unwrap_or_else(jiff::Timestamp::now);

    let mut inputs = build_schedule_inputs(snapshot, catalog, options);
    std::mem::take(&mut inputs.notes)
        .into_iter()
        .for_each(|n| note(format!("{}: {}", n.object, n.message)));

    let results = schedule(&inputs.input, &mut inputs.interner, &inputs.table);

    let nodepool_hashes: BTreeMap<String, String> = snapshot
        .node_pools
        .iter()
        .filter_map(|np| np.metadata.name.clone().map(|name| (name, np.hash())))
        .collect();
    let ctx = OutputContext {
        input: &inputs.input,
        interner: &inputs.interner,
        table: &inputs.table,
        nodepool_hashes: &nodepool_hashes,
    };
    let out = ScheduleOutput::new(&ctx, &results);
    render(&out, args.output)
}

/// Renders the output in `format`, ending with a newline.
pub fn render(out: &ScheduleOutput, format: OutputFormat) -> Result<String> {
    Ok(match format {
        OutputFormat::Json => {
            let mut s = serde_json::to_string_pretty(out).context("cannot encode the output as JSON")?;
            s.push('\n');
            s
        }
        OutputFormat::Yaml => serde_saphyr::to_string(out).context("cannot encode the output as YAML")?,
        OutputFormat::Table => table::render(out),
    })
}
