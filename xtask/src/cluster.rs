//! `cargo xtask cluster up|down|kubeconfig`: a real Kubernetes control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok, built from the pinned Go modules in `tests/control-plane/`) on
//! 127.0.0.1, with the CRDs of `crds/` installed. State, logs and PIDs live in `target/control-plane/run/`. The
//! code is the end-to-end tests' (`karpenter_e2e::control_plane`), so this is exactly what they run against.

use std::{path::Path, time::Instant};

use anyhow::anyhow;
use clap::Subcommand;
use karpenter_e2e::control_plane::{self, ControlPlane, StartOptions};

#[derive(Subcommand)]
pub enum ClusterCommand {
    /// Build the binaries if needed, start the control plane, install the CRDs, wait until ready, and print the
    /// admin kubeconfig's path. Prints the path of one already running.
    Up,
    /// Stop every process of the control plane and remove its state.
    Down,
    /// Print the admin kubeconfig's path (fails when no control plane is running).
    Kubeconfig,
}

pub fn run(root: &Path, command: &ClusterCommand) -> anyhow::Result<()> {
    let run_dir = control_plane::default_run_dir(root);
    let kubeconfig = run_dir.join("admin.kubeconfig");
    match command {
        ClusterCommand::Up => {
            if control_plane::is_running(root, &run_dir) {
                eprintln!("a control plane is already running in {}", run_dir.display());
            } else {
                let started = Instant::now();
                let cp = ControlPlane::start(
                    root,
                    &run_dir,
                    StartOptions {
                        detach: true,
                        ..StartOptions::default()
                    },
                )
                .map_err(|e| anyhow!(e))?;
                eprintln!(
                    "control plane up at {} in {:.1?}; logs in {}; `cargo xtask cluster down` stops it",
                    cp.server,
                    started.elapsed(),
                    cp.run_dir.join("logs").display()
                );
            }
            println!("{}", kubeconfig.display());
        }
        ClusterCommand::Down => {
            let stopped = control_plane::stop(root, &run_dir).map_err(|e| anyhow!(e))?;
            if stopped.is_empty() {
                eprintln!("no control plane was running");
            } else {
                let names: Vec<String> = stopped
                    .iter()
                    .map(|(name, pid)| format!("{name} ({pid})"))
                    .collect();
                eprintln!("stopped {}", names.join(", "));
            }
        }
        ClusterCommand::Kubeconfig => {
            if !control_plane::is_running(root, &run_dir) {
                anyhow::bail!("no control plane is running (`cargo xtask cluster up` starts one)");
            }
            println!("{}", kubeconfig.display());
        }
    }
    Ok(())
}
