//! The one entry point the binary calls: [`AwsProvider::start`] validates the settings, builds the AWS
//! clients, learns the Kubernetes version, discovers instance types (failing start-up when EC2 cannot be
//! reached, as upstream's connectivity check does), opens the interruption queue when one is configured, and
//! returns the CloudProvider, the InterruptionSource (the instance status poller, merged with the queue when
//! there is one: [`crate::instance_status`]) and the tasks to run (the EC2NodeClass controller,
//! the periodic refreshes, the NodeClaim tagging controller, and with the ReservedCapacity gate the capacity
//! reservation lifecycle). Nothing runs
//! until the binary spawns the tasks, typically once elected leader.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use karpenter_core::clock::SystemClock;
use karpenter_core::cloudprovider::{CloudProvider, InterruptionSource};

use crate::capacity_reservations::lifecycle::{self, ReservationLifecycleContext};
use crate::client::{AwsClients, ClientOptions};
use crate::cloud_provider::AwsCloudProvider;
use crate::error::AwsError;
use crate::instance_status::InstanceStatusSource;
use crate::interruption_queue::InterruptionQueue;
use crate::interruption_source::SqsInterruptionSource;
use crate::merged_interruptions::MergedInterruptionSource;
use crate::node_classes::KubeNodeClasses;
use crate::nodeclaim_tagging::controller::{self as tagging, TaggingContext};
use crate::nodeclass::controller::{self, Context, NodeClassBackend};
use crate::settings::AwsSettings;

/// How often the Kubernetes version is asked again (upstream: 5 minutes).
pub const VERSION_REFRESH: Duration = Duration::from_secs(300);

/// A long-running task, named for logs.
pub struct NamedTask {
    pub name: &'static str,
    pub future: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl std::fmt::Debug for NamedTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamedTask")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// What [`AwsProvider::start`] returns.
#[derive(Debug)]
pub struct AwsRuntime {
    pub cloud_provider: Arc<AwsCloudProvider>,
    /// Set when `INTERRUPTION_QUEUE` is.
    pub interruption_source: Option<Arc<SqsInterruptionSource>>,
    /// The instance status poller, with or without a queue (as upstream runs it).
    pub instance_status: Arc<InstanceStatusSource>,
    /// The two as the one source the interruption controller reads.
    pub interruptions: Arc<MergedInterruptionSource>,
    /// The EC2NodeClass controller, the refresh loops, garbage collection and NodeClaim tagging, and with the
    /// ReservedCapacity gate the capacity reservation lifecycle; each runs until dropped.
    pub tasks: Vec<NamedTask>,
}

impl AwsRuntime {
    /// The provider as the controllers hold it.
    pub fn cloud_provider_dyn(&self) -> Arc<dyn CloudProvider> {
        self.cloud_provider.clone()
    }

    /// The interruption source as the interruption controller holds it: the queue's events and the instance
    /// status poller's, merged. Always set (the poller runs without a queue too); the one value for the one
    /// controller.
    pub fn interruption_source_dyn(&self) -> Option<Arc<dyn InterruptionSource>> {
        Some(self.interruptions.clone())
    }
}

/// Builds the AWS provider.
#[derive(Debug, Clone, Copy)]
pub struct AwsProvider;

/// `1.33` from the API server's version (EKS reports minors like `33+`).
pub async fn kubernetes_version(client: &kube::Client) -> Result<String, AwsError> {
    let info = client.apiserver_version().await?;
    let digits = |s: &str| s.chars().take_while(char::is_ascii_digit).collect::<String>();
    let (major, minor) = (digits(&info.major), digits(&info.minor));
    if major.is_empty() || minor.is_empty() {
        return Err(AwsError::Kube(format!(
            "cannot read the Kubernetes version from major {:?}, minor {:?}",
            info.major, info.minor
        )));
    }
    Ok(format!("{major}.{minor}"))
}

impl AwsProvider {
    /// Starts the provider with clients from the default credential chain (region and endpoint from
    /// `settings`).
    ///
    /// The cluster endpoint nodes join comes from `CLUSTER_ENDPOINT`, else from EKS's DescribeCluster (see
    /// [`resolve_cluster_endpoint`]). The CA bundle comes from `CLUSTER_CA_BUNDLE`; else, with the endpoint
    /// given, from the Kubernetes configuration the client was most likely built from (`kube::Config::infer`:
    /// the kubeconfig, else the in-cluster service account, whose CA is the cluster's), as upstream takes it;
    /// else from DescribeCluster with the endpoint.
    pub async fn start(mut settings: AwsSettings, kube_client: kube::Client) -> Result<AwsRuntime, AwsError> {
        settings.validate()?;
        if settings.cluster_endpoint.is_some() && settings.cluster_ca_bundle.is_none() {
            match kube::Config::infer().await {
                Ok(config) => fill_ca_bundle_from_config(&mut settings, &config),
                Err(err) => tracing::warn!(
                    error = %err,
                    "no Kubernetes configuration to take the cluster CA bundle from; set CLUSTER_CA_BUNDLE"
                ),
            }
        }
        let options = ClientOptions {
            region: settings.region.clone(),
            endpoint_url: settings.endpoint_override.clone(),
            ..ClientOptions::default()
        };
        let clients = AwsClients::new(&options).await?;
        Self::start_with_clients(settings, clients, kube_client).await
    }

    /// [`AwsProvider::start`] with clients built by the caller (tests point them at an emulator).
    pub async fn start_with_clients(
        settings: AwsSettings,
        clients: AwsClients,
        kube_client: kube::Client,
    ) -> Result<AwsRuntime, AwsError> {
        settings.validate()?;
        let mut settings = settings;
        resolve_cluster_endpoint(&mut settings, &clients.eks).await?;
        if settings.cluster_dns_ip.is_none() {
            settings.cluster_dns_ip = cluster_dns_ip(&kube_client).await;
        }
        let version = match &settings.kubernetes_version {
            Some(version) => version.clone(),
            None => kubernetes_version(&kube_client).await?,
        };
        let fixed_version = settings.kubernetes_version.is_some();
        let provider = AwsCloudProvider::new(
            settings.clone(),
            clients.clone(),
            Arc::new(KubeNodeClasses::new(kube_client.clone())),
        )?;
        provider.set_kubernetes_version(version);
        let types = provider.refresh_instance_types().await?;
        tracing::info!(instance_types = types, region = %clients.region, "discovered EC2 instance types");
        let provider = Arc::new(provider);
        // The EC2NodeClass controller and its garbage collectors see the provider through their narrow trait.
        let node_class_backend: Arc<dyn NodeClassBackend> = provider.clone();

        let interruption_source = match &settings.interruption_queue {
            Some(name) => {
                // Looked up when first polled: a missing or unreadable queue is logged and retried by the
                // source without holding up the rest of the controller.
                let queue = InterruptionQueue::named(clients.sqs.clone(), name.clone());
                Some(Arc::new(SqsInterruptionSource::new(
                    queue,
                    clients.ec2.clone(),
                    Arc::clone(provider.instance_cache()),
                    Arc::clone(provider.unavailable_offerings()),
                )))
            }
            None => None,
        };
        let instance_status = Arc::new(InstanceStatusSource::new(Arc::new(clients.ec2.clone())));
        let mut sources: Vec<Arc<dyn InterruptionSource>> = Vec::new();
        if let Some(queue) = &interruption_source {
            sources.push(queue.clone());
        }
        sources.push(instance_status.clone());
        let interruptions = Arc::new(MergedInterruptionSource::new(sources));

        let mut tasks = vec![
            NamedTask {
                name: "ec2nodeclass",
                future: Box::pin(controller::run(Arc::new(Context {
                    client: kube_client.clone(),
                    provider: Arc::clone(&node_class_backend),
                }))),
            },
            NamedTask {
                name: "instancetype-and-pricing-refresh",
                future: Box::pin(refresh_catalog(Arc::clone(&provider))),
            },
            NamedTask {
                name: "launchtemplate-garbage-collection",
                future: Box::pin(controller::run_launch_template_gc(
                    kube_client.clone(),
                    Arc::clone(&node_class_backend),
                )),
            },
        ];
        tasks.push(NamedTask {
            name: "nodeclaim-tagging",
            future: Box::pin(tagging::run(TaggingContext {
                client: kube_client.clone(),
                tagger: Arc::new(clients.ec2.clone()),
                ledger: Arc::clone(provider.tag_ledger()),
                cluster_name: settings.cluster_name.clone(),
                create_tags_interval: tagging::CREATE_TAGS_INTERVAL,
                unowned_grace: tagging::UNOWNED_GRACE,
            })),
        });
        if !settings.isolated_vpc {
            // IAM has no VPC endpoint: an isolated VPC cannot list profiles (upstream skips this there too).
            tasks.push(NamedTask {
                name: "instanceprofile-garbage-collection",
                future: Box::pin(controller::run_instance_profile_gc(
                    kube_client.clone(),
                    Arc::clone(&node_class_backend),
                )),
            });
        }
        if settings.reserved_capacity {
            tasks.push(NamedTask {
                name: "capacityreservation-lifecycle",
                future: Box::pin(lifecycle::run(ReservationLifecycleContext::new(
                    kube_client.clone(),
                    Arc::new(SystemClock),
                ))),
            });
        }
        if !fixed_version {
            tasks.push(NamedTask {
                name: "kubernetes-version-refresh",
                future: Box::pin(refresh_version(Arc::clone(&provider), kube_client)),
            });
        }
        Ok(AwsRuntime {
            cloud_provider: provider,
            interruption_source,
            instance_status,
            interruptions,
            tasks,
        })
    }
}

/// The CA bundle of `config` where `settings` has none.
pub fn fill_ca_bundle_from_config(settings: &mut AwsSettings, config: &kube::Config) {
    if settings.cluster_ca_bundle.is_none()
        && let Some(certificates) = config.root_cert.as_ref().filter(|c| !c.is_empty())
    {
        settings.cluster_ca_bundle = Some(crate::userdata::ca_bundle_from_der(certificates));
    }
}

/// Fills `settings.cluster_endpoint` (and `cluster_ca_bundle` when that is unset too) from EKS's
/// DescribeCluster of `settings.cluster_name` when `CLUSTER_ENDPOINT` is not set, as upstream does. Called once,
/// at start-up: the provider keeps the answer in its settings. The address the controller itself reaches the
/// API server at is no substitute: in a cluster it is the `kubernetes` Service, which a booting node cannot
/// reach. Fails, naming the setting, when the endpoint can be neither discovered nor given.
pub async fn resolve_cluster_endpoint(
    settings: &mut AwsSettings,
    eks: &aws_sdk_eks::Client,
) -> Result<(), AwsError> {
    if settings.cluster_endpoint.is_some() {
        return Ok(());
    }
    let unresolved = |reason: String| {
        AwsError::Config(format!(
            "settings.clusterEndpoint (CLUSTER_ENDPOINT) is not set and the endpoint of cluster {:?} could not be \
             discovered with eks:DescribeCluster: {reason}; set settings.clusterEndpoint (CLUSTER_ENDPOINT) to the \
             API server URL nodes join, or let the controller call eks:DescribeCluster on the cluster",
            settings.cluster_name
        ))
    };
    let output = eks
        .describe_cluster()
        .name(&settings.cluster_name)
        .send()
        .await
        .map_err(|e| unresolved(AwsError::from_sdk("DescribeCluster", e).to_string()))?;
    let cluster = output
        .cluster()
        .ok_or_else(|| unresolved("the answer has no cluster".into()))?;
    let endpoint = cluster
        .endpoint()
        .filter(|e| !e.is_empty())
        .ok_or_else(|| unresolved("the cluster has no endpoint yet (is it still being created?)".into()))?;
    settings.cluster_endpoint = Some(endpoint.trim_end_matches('/').to_string());
    if settings.cluster_ca_bundle.is_none() {
        settings.cluster_ca_bundle = cluster
            .certificate_authority()
            .and_then(|ca| ca.data())
            .filter(|data| !data.is_empty())
            .map(str::to_string);
    }
    // The discovered endpoint is checked as a configured one would be.
    settings.validate()?;
    tracing::info!(
        cluster = %settings.cluster_name,
        endpoint = settings.cluster_endpoint.as_deref().unwrap_or_default(),
        "discovered the cluster endpoint with eks:DescribeCluster"
    );
    Ok(())
}

/// The ClusterIP of the `kube-system/kube-dns` Service, if there is one.
pub async fn cluster_dns_ip(client: &kube::Client) -> Option<String> {
    let services: kube::Api<k8s_openapi::api::core::v1::Service> =
        kube::Api::namespaced(client.clone(), "kube-system");
    match services.get_opt("kube-dns").await {
        Ok(service) => service
            .and_then(|s| s.spec)
            .and_then(|spec| spec.cluster_ip)
            .filter(|ip| !ip.is_empty() && ip != "None"),
        Err(err) => {
            tracing::warn!(error = %err, "reading the kube-dns Service for the cluster DNS address");
            None
        }
    }
}

/// Prices now (start-up used the static table), then prices and instance types every refresh interval.
async fn refresh_catalog(provider: Arc<AwsCloudProvider>) {
    let mut ticks = tokio::time::interval(provider.settings().instance_type_refresh_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        if let Err(err) = provider.refresh_prices().await {
            tracing::warn!(error = %err, "refreshing prices; the previous prices stay in use");
        }
        ticks.tick().await;
        if let Err(err) = provider.refresh_instance_types().await {
            tracing::warn!(error = %err, "refreshing instance types; the previous ones stay in use");
        }
    }
}

async fn refresh_version(provider: Arc<AwsCloudProvider>, client: kube::Client) {
    let mut ticks = tokio::time::interval(VERSION_REFRESH);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match kubernetes_version(&client).await {
            Ok(version) => provider.set_kubernetes_version(version),
            Err(err) => tracing::warn!(error = %err, "reading the Kubernetes version"),
        }
    }
}
