//! Project tasks: `cargo xtask crds [--check]`, `cargo xtask docs [--check]`, `cargo xtask catalog [--check]`,
//! `cargo xtask bench schedule`, `cargo xtask bench disrupt`, `cargo xtask bench controller`,
//! `cargo xtask cluster up|down|kubeconfig` and `cargo xtask e2e upstream`.

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

mod bench;
mod catalog;
mod cluster;
mod crds;
mod docs;
mod e2e;
mod go;
mod heap;
mod measure;
mod reference;

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
    /// Write the API reference in docs/reference/, generated from the CRDs, and the settings and metrics
    /// references, generated from the controller's flags and metrics registry.
    Docs {
        /// Fail instead of writing when a committed page is stale.
        #[arg(long)]
        check: bool,
    },
    /// Benchmarks: `bench schedule [--json] [--pods N]`, `bench disrupt [--json] [--nodes N]`, `bench controller
    /// [--json]`, always timed in a release build.
    Bench(bench::BenchArgs),
    /// Build the embedded AWS instance-type catalog from ../shared/data/aws.
    Catalog {
        /// Fail instead of writing when the committed data file is stale.
        #[arg(long)]
        check: bool,
        /// The folder holding instance-types.json, on-demand-prices.json and zones.json.
        #[arg(long, default_value = "../shared/data/aws")]
        data: PathBuf,
    },
    /// A real Kubernetes control plane on 127.0.0.1 for tests: `cluster up|down|kubeconfig`.
    Cluster {
        #[command(subcommand)]
        command: cluster::ClusterCommand,
    },
    /// Upstream Karpenter's end-to-end suites against this controller or upstream's on the real control plane:
    /// `e2e upstream [--suite regression|disruption|performance|dra] [--focus RE] [--controller rust|go]`.
    E2e(e2e::E2eArgs),
    /// Run a command and print its wall time and peak RSS as JSON (used by the benches).
    #[command(hide = true)]
    Measure {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<String>,
    },
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Benchmarks mean nothing unoptimised: a debug xtask (what the `cargo xtask` alias builds) re-runs itself as a
/// release build and passes the exit code on.
fn rerun_in_release() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let status = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["run", "--release", "--quiet", "--package", "xtask", "--"])
        .args(&args)
        .current_dir(workspace_root())
        .status()?;
    std::process::exit(status.code().unwrap_or(1));
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if cfg!(debug_assertions) && matches!(cli.command, Command::Bench(_)) {
        return rerun_in_release();
    }
    let root = workspace_root();
    match cli.command {
        Command::Crds { check } => crds::run(&root, check),
        Command::Docs { check } => docs::run(&root, check),
        Command::Bench(args) => bench::run(&args),
        Command::Catalog { check, data } => {
            let data = if data.is_absolute() { data } else { root.join(data) };
            catalog::run(&data, &root.join("crates/karpenter-aws-catalog/data"), check)
        }
        Command::Cluster { command } => cluster::run(&root, &command),
        Command::E2e(args) => e2e::run(&root, &args),
        Command::Measure { command } => measure::run(&command),
    }
}
