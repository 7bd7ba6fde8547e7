//! Project tasks: `cargo xtask crds [--check]`, `cargo xtask catalog [--check]`.

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

mod catalog;
mod crds;

#[derive(Parser)]
#[command(name = "xtask", about = "Project tasks for karpenter-rs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write the CRDs generated from the API types into crds/ and the karpenter-crd chart.
    Crds {
        /// Fail instead of writing when a committed file is stale.
        #[arg(long)]
        check: bool,
    },
    /// Build the embedded AWS instance-type catalog from ../shared/data/aws.
    Catalog {
        /// Fail instead of writing when the committed data file is stale.
        #[arg(long)]
        check: bool,
        /// The folder holding instance-types.json, on-demand-prices.json and zones.json.
        #[arg(long, default_value = "../shared/data/aws")]
        data: PathBuf,
    },
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let root = workspace_root();
    match cli.command {
        Command::Crds { check } => crds::run(&root, check),
        Command::Catalog { check, data } => {
            let data = if data.is_absolute() { data } else { root.join(data) };
            catalog::run(&data, &root.join("crates/karpenter-core/data"), check)
        }
    }
}
