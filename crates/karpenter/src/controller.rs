//! `karpenter controller` (also what `karpenter` with no subcommand runs): the controllers against a real API
//! server, leader-elected, with /metrics and the probes. Settings come from flags or their environment
//! variables (see `karpenter controller --help` and docs/reference/settings.md).

use std::{path::PathBuf, sync::Arc};

use anyhow::{Context, Result, anyhow};
use clap::{Args, ValueEnum};
use karpenter_api::{kwoknodeclass, label_policy::LabelPolicy};
use karpenter_aws_catalog::aws_catalog_once;
use karpenter_core::{
    catalog::CatalogFile,
    clock::{Clock, SystemClock},
    snapshot::BuildOptions,
};
use karpenter_kwok::KwokCloudProvider;
use karpenter_operator::{
    ControllerParts, ControllerTask, Operator, Settings, aws_settings::AwsArgs, kube_client, logging,
};
use karpenter_state::{ClusterState, Watched};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// `--cloud-provider`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CloudProviderKind {
    /// EC2 (needs a binary built with the `aws` feature, as the container image is).
    Aws,
    /// No cloud: each launch creates a Node object directly (for KWOK clusters, `karpenter simulate --serve`
    /// and benchmarks). NodePools of a KWOKNodeClass (karpenter.kwok.sh/v1alpha1) launch as upstream's KWOK
    /// provider, from --kwok-instance-types; NodePools of an EC2NodeClass from --kwok-aws-catalog.
    Kwok,
}

#[derive(Debug, Args)]
pub struct ControllerArgs {
    #[command(flatten)]
    pub settings: Settings,
    /// Which cloud to launch nodes in.
    #[arg(long, env = "CLOUD_PROVIDER", value_enum, default_value = "aws")]
    pub cloud_provider: CloudProviderKind,
    /// A kubeconfig file; default: in-cluster configuration, else $KUBECONFIG or ~/.kube/config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// kwok: upstream KWOK's instance types (its kwok/cloudprovider/instance_types.json format) for NodePools
    /// of a KWOKNodeClass; default: that file in the Go module cache
    /// ($GOMODCACHE/sigs.k8s.io/karpenter@v1.15.0/..., fetched by `go mod download sigs.k8s.io/karpenter@v1.15.0`).
    #[arg(long, alias = "instance-types-file-path", env = "INSTANCE_TYPES_FILE_PATH")]
    pub kwok_instance_types: Option<PathBuf>,
    /// kwok: a catalog JSON file (the format `cargo xtask catalog` writes) for NodePools of an EC2NodeClass;
    /// default: the embedded AWS catalog of us-east-1.
    #[arg(long, env = "KWOK_AWS_CATALOG")]
    pub kwok_aws_catalog: Option<PathBuf>,
    #[command(flatten)]
    pub aws: AwsArgs,
}

/// The controllers' client (rate-limited by KUBE_CLIENT_QPS and KUBE_CLIENT_BURST, a pod eviction sent once)
/// and leader election's, built by `karpenter_operator::kube_client`.
async fn clients(kubeconfig: Option<&PathBuf>, settings: &Settings) -> Result<(kube::Client, kube::Client)> {
    let config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no in-cluster configuration and no kubeconfig")?,
    };
    let limited = kube_client::controllers_client(config.clone(), settings)
        .context("building the Kubernetes client")?;
    let lease = kube_client::lease_client(config).context("building the Kubernetes client")?;
    Ok((limited, lease))
}

fn catalog(path: Option<&PathBuf>) -> Result<CatalogFile> {
    match path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("KWOK_AWS_CATALOG {}", path.display()))?;
            CatalogFile::from_json_str(&text).map_err(|e| anyhow!("KWOK_AWS_CATALOG {}: {e}", path.display()))
        }
        None => {
            aws_catalog_once("us-east-1", &Default::default()).map_err(|e| anyhow!("embedded catalog: {e}"))
        }
    }
}

/// The AWS provider's settings from its flags (validated by the provider, naming the variable).
#[cfg(feature = "aws")]
fn aws_settings(args: &AwsArgs, reserved_capacity: bool) -> karpenter_aws::AwsSettings {
    let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
    karpenter_aws::AwsSettings {
        cluster_name: args.cluster_name.clone(),
        cluster_endpoint: some(&args.cluster_endpoint),
        cluster_ca_bundle: some(&args.cluster_ca_bundle),
        isolated_vpc: args.isolated_vpc,
        vm_memory_overhead_percent: args.vm_memory_overhead_percent,
        interruption_queue: some(&args.interruption_queue),
        reserved_enis: args.reserved_enis,
        disable_dry_run: args.disable_dry_run,
        ami_refresh_interval: args.ami_refresh_interval,
        subnet_refresh_interval: args.subnet_refresh_interval,
        region: args.aws_region.clone(),
        endpoint_override: args.aws_endpoint_url.clone(),
        reserved_capacity,
        ..karpenter_aws::AwsSettings::default()
    }
}

pub fn run(args: &ControllerArgs) -> Result<String> {
    args.settings.validate()?;
    logging::init(args.settings.log_level)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let served = runtime.block_on(serve(args));
    // Tasks still running (watches, servers) are dropped; a blocking call that never returns does not keep a
    // stopping process alive.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    served?;
    Ok(String::new())
}

async fn serve(args: &ControllerArgs) -> Result<()> {
    // Installed first, so a signal that arrives during start-up is not lost: it stops the process cleanly
    // as soon as the operator runs.
    let signals = Signals::install()?;
    let (client, lease_client) = clients(args.kubeconfig.as_ref(), &args.settings).await?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let settings = args.settings.clone();
    // Only the AWS provider adds tasks and an interruption source.
    #[cfg_attr(not(feature = "aws"), allow(unused_mut))]
    let mut provider_tasks: Vec<ControllerTask> = Vec::new();
    #[cfg_attr(not(feature = "aws"), allow(unused_mut))]
    let mut interruption = None;
    #[cfg(feature = "aws")]
    let mut aws_provider = None;
    let (cloud, build, watched) = match args.cloud_provider {
        CloudProviderKind::Kwok => {
            let catalog = catalog(args.kwok_aws_catalog.as_ref())?;
            // KWOK's instance labels are well known as upstream makes them: a pod selects them and a NodePool
            // requires them without declaring them (EC2NodeClass types do not define them, so never match).
            let mut extra_well_known_labels = catalog.well_known_labels.clone();
            extra_well_known_labels.extend(kwoknodeclass::WELL_KNOWN_LABELS.map(String::from));
            let build = BuildOptions {
                label_policy: LabelPolicy::Aws,
                extra_well_known_labels,
                ..BuildOptions::default()
            };
            let cloud = KwokCloudProvider::new(
                client.clone(),
                catalog,
                args.kwok_instance_types.as_deref(),
                Arc::clone(&clock),
            )?
            .as_dyn();
            (cloud, build, Watched::default())
        }
        #[cfg(feature = "aws")]
        CloudProviderKind::Aws => {
            let runtime = karpenter_aws::AwsProvider::start(
                aws_settings(&args.aws, args.settings.feature_gates.reserved_capacity),
                client.clone(),
            )
            .await?;
            interruption = runtime.interruption_source_dyn();
            let cloud = runtime.cloud_provider_dyn();
            aws_provider = Some(Arc::clone(&runtime.cloud_provider));
            provider_tasks.extend(runtime.tasks.into_iter().map(|t| (t.name, t.future)));
            let build = BuildOptions {
                label_policy: LabelPolicy::Aws,
                ..BuildOptions::default()
            };
            let watched = Watched {
                ec2_node_classes: true,
                ..Watched::default()
            };
            (cloud, build, watched)
        }
        #[cfg(not(feature = "aws"))]
        CloudProviderKind::Aws => {
            return Err(anyhow!(
                "--cloud-provider aws: this karpenter binary was built without the `aws` feature \
                 (cargo build --features aws; the container image has it)"
            ));
        }
    };
    let watched = Watched {
        node_overlays: settings.feature_gates.node_overlay,
        capacity_buffers: settings.feature_gates.capacity_buffer,
        workload_selectors: !settings.scheduler_config.default_constraints().is_empty(),
        ..watched
    };
    if watched.workload_selectors {
        tracing::info!(
            default_topology_spread_constraints = ?settings.scheduler_config.default_constraints(),
            "SCHEDULER_CONFIG is set: pods that declare no topology spread constraints are simulated with these, \
             each with the selector kube-scheduler deduces for it"
        );
    }
    let state = ClusterState::new(watched);
    // NodeClaims the scheduler gave overlaid prices launch by them (CreateFleet's prioritized strategies).
    #[cfg(feature = "aws")]
    if let Some(provider) = aws_provider.filter(|_| settings.feature_gates.node_overlay) {
        provider.set_launch_prices(Arc::new(karpenter_state::CachedLaunchPrices::new(
            state.clone(),
            build.label_policy,
        )));
    }
    let parts = ControllerParts {
        client,
        state,
        cloud,
        clock,
        interruption,
        build,
        settings,
        observer: None,
    };
    tracing::info!(cloud_provider = ?args.cloud_provider, settings = ?args.settings.describe(), "starting");
    let mut operator = Operator::new(parts);
    operator.provider_tasks = provider_tasks;
    operator.lease_client = Some(lease_client);
    operator.run(signals.first()).await?;
    Ok(())
}

/// SIGTERM (what the kubelet sends to stop the pod: a rollout, an eviction, a scale-down) and SIGINT (Ctrl-C).
/// As PID 1 in the image the process has no default handler for either: without these it would sit out the
/// termination grace period and be killed holding the Lease.
struct Signals {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                terminate: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
                interrupt: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// The name of the next signal.
    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.terminate.recv() => "SIGTERM",
                _ = self.interrupt.recv() => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }

    /// Completes on the first signal, which starts a clean shutdown (bounded by the operator's
    /// `SHUTDOWN_DEADLINE`); a second signal exits at once, as a crash would (the Lease is not released).
    async fn first(mut self) {
        let signal = self.next().await;
        tracing::info!(signal, deadline = ?karpenter_operator::SHUTDOWN_DEADLINE, "signal received: shutting down");
        tokio::spawn(async move {
            let signal = self.next().await;
            tracing::warn!(signal, "second signal: exiting without a clean shutdown");
            std::process::exit(1);
        });
    }
}
