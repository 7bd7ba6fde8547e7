//! The Karpenter binary: `karpenter controller` (the controller itself, also run by `karpenter` with no
//! subcommand), `karpenter schedule` (the scheduling simulation over a cluster snapshot read from files),
//! `karpenter disrupt` (the next disruption pass over one) and `karpenter simulate` (the controllers on a
//! simulated cluster).

use std::{io::Write as _, process::ExitCode};

use clap::{Parser, Subcommand};

mod controller;
mod disrupt;
mod input;
mod json_stream;
mod schedule;
#[cfg(feature = "simulate")]
mod simulate;

/// jemalloc instead of glibc's malloc: with a cache of 150,000 pods turning over, glibc keeps freed memory in
/// fragmented arenas and the controller's RSS grows far past its live heap.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The live heap for `/metrics`: bytes jemalloc has handed out and not had back, as of a refreshed epoch.
#[cfg(not(target_env = "msvc"))]
fn live_heap_bytes() -> Option<u64> {
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    tikv_jemalloc_ctl::stats::allocated::read().ok().map(|b| b as u64)
}

#[derive(Parser)]
#[command(
    name = "karpenter",
    version,
    about = "Karpenter: just-in-time nodes for Kubernetes"
)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// With no subcommand, the controller runs with these settings.
    #[command(flatten)]
    controller: controller::ControllerArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller against a Kubernetes cluster (the default command).
    Controller(Box<controller::ControllerArgs>),
    /// Show what Karpenter would launch for the pending pods of a snapshot, and why any pod stays pending.
    Schedule(schedule::ScheduleArgs),
    /// Show what the next disruption pass would do on a snapshot, and why every other node is left alone.
    Disrupt(disrupt::DisruptArgs),
    /// Run the controllers against a simulated cluster and cloud on a virtual clock, and report what happened.
    #[cfg(feature = "simulate")]
    Simulate(simulate::SimulateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    #[cfg(not(target_env = "msvc"))]
    karpenter_metrics::set_heap_probe(live_heap_bytes);
    let result = match &cli.command {
        None => controller::run(&cli.controller),
        Some(Command::Controller(args)) => controller::run(args),
        Some(Command::Schedule(args)) => schedule::run(args),
        Some(Command::Disrupt(args)) => disrupt::run(args),
        #[cfg(feature = "simulate")]
        Some(Command::Simulate(args)) => simulate::run(args),
    };
    match result {
        Ok(text) => {
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (`| head`) is not an error worth reporting.
            let _ = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
