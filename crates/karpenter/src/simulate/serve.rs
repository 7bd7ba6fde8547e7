//! `karpenter simulate --serve`: a simulated cluster on 127.0.0.1 in real time, with the controllers, until
//! Ctrl-C; a person points kubectl at the kubeconfig it writes, applies a NodePool, scales a deployment and
//! watches nodes appear.

use std::{
    net::{Ipv4Addr, SocketAddr},
    sync::Arc,
};

use anyhow::{Context, Result, anyhow};
use karpenter_api::label_policy::LabelPolicy;
use karpenter_aws_catalog::aws_catalog;
use karpenter_core::snapshot::BuildOptions;
use karpenter_operator::{ControllerParts, Settings, controller_tasks};
use karpenter_sim::{SimCluster, SimOptions, VirtualClock};
use karpenter_state::{ClusterState, Watched};

use super::SimulateArgs;

pub fn run(args: &SimulateArgs) -> Result<String> {
    let kubeconfig = args
        .kubeconfig
        .clone()
        .ok_or_else(|| anyhow!("--serve needs --kubeconfig PATH"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(async {
        let catalog =
            aws_catalog("us-east-1", &Default::default()).map_err(|e| anyhow!("embedded catalog: {e}"))?;
        let build = BuildOptions {
            label_policy: LabelPolicy::Aws,
            extra_well_known_labels: catalog.well_known_labels.clone(),
            ..BuildOptions::default()
        };
        // Not paused: the virtual clock follows real time.
        let clock = Arc::new(VirtualClock::starting_at(jiff::Timestamp::now()));
        let sim = SimCluster::start(SimOptions::new(catalog, clock));
        let http = sim
            .api()
            .serve_http(SocketAddr::from((Ipv4Addr::LOCALHOST, args.port)))
            .await
            .context("serving the simulated API server")?;
        http.write_kubeconfig(&kubeconfig)
            .with_context(|| format!("writing {}", kubeconfig.display()))?;
        let mut tasks = Vec::new();
        if !args.without_controllers {
            let state = ClusterState::new(Watched::default());
            let parts = ControllerParts {
                client: sim.client(),
                state: state.clone(),
                cloud: sim.cloud_provider(),
                clock: sim.clock(),
                interruption: Some(sim.cloud().interruption_source()),
                build,
                settings: Settings::default(),
                observer: None,
            };
            tasks.push(tokio::spawn({
                let client = sim.client();
                async move { state.watch(client).await }
            }));
            tasks.extend(
                controller_tasks(&parts)
                    .into_iter()
                    .map(|(_, task)| tokio::spawn(task)),
            );
        }
        eprintln!(
            "Simulated cluster on {} ({}); kubeconfig written to {}.\n\
             Try: kubectl --kubeconfig {} apply -f config/nodepool-general-purpose.yaml ; Ctrl-C stops it.",
            http.url(),
            if args.without_controllers {
                "without Karpenter's controllers"
            } else {
                "with Karpenter's controllers"
            },
            kubeconfig.display(),
            kubeconfig.display(),
        );
        tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
        tasks.iter().for_each(tokio::task::JoinHandle::abort);
        http.shutdown().await;
        sim.shutdown().await;
        Ok::<_, anyhow::Error>(String::new())
    })
}
