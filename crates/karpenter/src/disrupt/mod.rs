//! `karpenter disrupt`: what the next disruption pass would carry out on a cluster snapshot, and why every other
//! managed node is left alone. It runs the very pass the disruption controller runs, at `--now`.

pub mod output;
pub mod table;

use std::{collections::BTreeMap, io::Write as _};

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
    #[command(flatten)]
    pub input: input::InputArgs,
}

/// Runs the command, writing notes to stderr and returning the rendered output.
pub fn run(args: &DisruptArgs) -> Result<String> {
    let mut stderr = std::io::stderr().lock();
    let mut note = |line: String| {
        let line = line.replace(['\n', '\r'], " ");
        let _ = writeln!(stderr, "note: {line}");
    };
    let input::Loaded {
        settings,
        catalog,
        snapshot,
        options,
    } = args.input.load(&mut note)?;
    let now = args.input.now();
    let nodepool_hashes: BTreeMap<String, String> = snapshot
        .node_pools
        .iter()
        .filter_map(|np| np.metadata.name.clone().map(|name| (name, np.hash())))
        .collect();
    let mut inputs = build_disruption_inputs(&snapshot, &catalog, &options, &NoProviderDrift, now);
    // The pass reads only the inputs; the objects they came from can go before it runs.
    drop(snapshot);
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

    let out = DisruptOutput::new(&inputs, &result, &nodepool_hashes);
    Ok(match args.input.output {
        OutputFormat::Json => {
            let mut s = serde_json::to_string_pretty(&out).context("cannot encode the output as JSON")?;
            s.push('\n');
            s
        }
        OutputFormat::Yaml => serde_saphyr::to_string(&out).context("cannot encode the output as YAML")?,
        OutputFormat::Table => table::render(&out),
    })
}
