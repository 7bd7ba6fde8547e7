//! `karpenter schedule`: what Karpenter would do for the pending pods of a cluster snapshot. It reads the
//! snapshot, the instance-type catalog and the controller settings, runs the very scheduling simulation the
//! provisioner runs, and prints the NodeClaims it would create, the pods it would put on existing nodes and
//! why every other pod stays pending.

pub mod output;
pub mod table;

use std::{collections::BTreeMap, io::Write as _};

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
    #[command(flatten)]
    pub input: input::InputArgs,
}

/// Runs the command, writing notes to stderr as they come and returning the rendered output.
pub fn run(args: &ScheduleArgs) -> Result<String> {
    let mut stderr = std::io::stderr().lock();
    // One line per note, whatever the message holds, so `grep` and line counts work on stderr.
    let mut note = |line: String| {
        let line = line.replace(['\n', '\r'], " ");
        let _ = writeln!(stderr, "note: {line}");
    };

    let loaded = args.input.load(&mut note)?;
    let (snapshot, catalog, options) = (&loaded.snapshot, &loaded.catalog, &loaded.options);

    // Budgets, consolidateAfter and expireAfter read the clock; placing pods does not, so `schedule` only
    // checks that --now parses. The same flag drives `disrupt`.
    let _decision_time = args.input.now();

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
    render(&out, args.input.output)
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
