//! [`AwsCloudProvider`]: core's `CloudProvider` on EC2, assembled from this crate's parts.
//!
//! Where each call lives (files of this directory):
//! - `mod.rs`: the struct, its constructor and accessors, and the `CloudProvider` and `DriftProvider` impls,
//!   which delegate to the files below.
//! - `launch.rs` (`create`): the launch path, `AwsCloudProvider::launch`, one named step per method.
//! - `launch_templates.rs`: the launch templates (and their user data) a launch names.
//! - `instances.rs` (`get`, `list`, `list_instances`, `delete`): the cluster's instances and the NodeClaims
//!   they answer as.
//! - `node_classes.rs` (`instance_types`): EC2NodeClass lookup, what the EC2NodeClass controller's
//!   resolutions leave for launches, instance profiles, and each class's catalog.
//! - `metrics.rs`: the instance type and user data gauges.
//!
//! What each call does:
//! - `create`: reads the claim's EC2NodeClass (fresh, from the [`NodeClassSource`]); a missing, deleting or
//!   not-Ready class is `NodeClassNotReady`. The class's status (AMIs, subnets, security groups, instance
//!   profile) is used when the EC2NodeClass controller has written one, else the class is resolved here. Then
//!   [`crate::launch_plan::plan_launch`] picks the offerings, a launch template is ensured for the AMI
//!   (created at most once per cache TTL; one found missing at launch is created again and the launch
//!   retried once), and an instant
//!   CreateFleet launches one instance ([`crate::launch`]: capacity errors mark offerings unavailable and surface as
//!   `InsufficientCapacity`), batched with the launches of the same fleet input that arrive within a few
//!   milliseconds ([`crate::fleet_batcher`]). Each zone launches into the subnet with the most free IP
//!   addresses, the addresses the launch will use leased from the shared [`SubnetIps`] until it fails or EC2
//!   counts them. A reserved launch first takes one instance of its capacity reservation from the shared
//!   [`ReservationAvailability`] (planning again without the reservation when another launch took its last
//!   one), and keeps it counted once launched. The claim comes back hydrated: provider ID
//!   `aws:///<zone>/<instance-id>`, the instance type's single-valued labels plus zone, zone ID and capacity
//!   type (and, in a reservation, its id and type labels; in a placement group, the group's id and the
//!   partition), image, capacity and allocatable, and the class's drift hash annotations. A class with a
//!   placement group launches into it ([`crate::placement_groups`]): the launch template names the group (and
//!   a partition the claim pins), and a partition group's instance is described once after the launch for the
//!   partition EC2 chose. A claim that rules out default tenancy gets a template with dedicated tenancy
//!   ([`crate::tenancy`]) and the `instance-tenancy` label says which; the class's `spec.context` goes into
//!   CreateFleet's `Context`.
//! - `delete`, `get`, `list`: by provider ID and by the cluster's tags; NodeClaimNotFound once terminated.
//! - `instance_types`: the discovered types under the NodePool's class's capacity settings, priced, with
//!   recently out-of-capacity offerings and zones without a subnet of the class unavailable, and with the
//!   ReservedCapacity gate on a `reserved` offering per capacity reservation of the class
//!   ([`crate::capacity_reservations::offerings`]); with a placement group, its id (and partitions) in every
//!   type's requirements, and for a cluster group only the zone its instances run in.
//! - Drift ([`crate::drift`]) from the caches of classes and instances the calls above keep.

mod instances;
mod launch;
mod launch_templates;
mod metrics;
mod node_classes;

pub(crate) use metrics::record_catalog_metrics;

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use karpenter_api::labels::AWS_GROUP;
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_api::nodepool::NodePool;
use karpenter_core::catalog::CatalogInstanceType;
use karpenter_core::cloudprovider::{
    CloudProvider, CloudProviderError, InstanceSummary, LaunchPrices, NodeClassKind, RepairPolicy,
};
use karpenter_core::disruption::drift::DriftProvider;

use crate::capacity_reservations::ReservationAvailability;
use crate::client::AwsClients;
use crate::drift::drift_reason;
use crate::error::AwsError;
use crate::fleet_batcher::{Ec2Fleet, FleetBatchOptions, FleetBatcher};
use crate::instance::{InstanceCache, parse_provider_id};
use crate::instance_types::InstanceTypeProvider;
use crate::launch_template::LaunchTemplateCache;
use crate::node_classes::{NodeClassCache, NodeClassSource};
use crate::nodeclaim_tagging::InstanceTagLedger;
use crate::nodeclass::dry_run::DryRunCache;
use crate::placement_groups::ResolvedPlacementGroups;
use crate::pricing::PricingProvider;
use crate::settings::AwsSettings;
use crate::subnet_ips::SubnetIps;
use crate::unavailable_offerings::UnavailableOfferings;

/// The Kubernetes version AMI aliases resolve for until the API server has been asked.
pub const DEFAULT_KUBERNETES_VERSION: &str = "1.33";

/// The AWS CloudProvider. Share it as `Arc<AwsCloudProvider>`; it coerces to `Arc<dyn CloudProvider>`.
pub struct AwsCloudProvider {
    settings: AwsSettings,
    clients: AwsClients,
    node_classes: Arc<dyn NodeClassSource>,
    node_class_cache: Arc<NodeClassCache>,
    instance_types: Arc<InstanceTypeProvider>,
    pricing: Arc<PricingProvider>,
    unavailable: Arc<UnavailableOfferings>,
    reservations: Arc<ReservationAvailability>,
    subnet_ips: Arc<SubnetIps>,
    placement_groups: Arc<ResolvedPlacementGroups>,
    dry_runs: Arc<DryRunCache>,
    instances: Arc<InstanceCache>,
    launch_template_cache: Arc<LaunchTemplateCache>,
    fleet: FleetBatcher<Ec2Fleet>,
    kubernetes_version: RwLock<String>,
    /// NodeOverlay prices for claims marked `karpenter.sh/price-overlay-applied` (set by the controller when
    /// the NodeOverlay gate is on; none in tests and tools that launch without a cluster).
    launch_prices: RwLock<Option<Arc<dyn LaunchPrices>>>,
}

impl std::fmt::Debug for AwsCloudProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCloudProvider")
            .field("cluster_name", &self.settings.cluster_name)
            .field("region", &self.clients.region)
            .finish_non_exhaustive()
    }
}

fn not_ready(name: &str, reason: impl Into<String>) -> CloudProviderError {
    CloudProviderError::NodeClassNotReady {
        name: name.to_string(),
        reason: reason.into(),
    }
}

impl AwsCloudProvider {
    /// A provider for `settings` over `clients`, reading EC2NodeClasses from `node_classes`. Instance types are
    /// empty until [`AwsCloudProvider::refresh_instance_types`] succeeds; prices start from the static table.
    pub fn new(
        settings: AwsSettings,
        clients: AwsClients,
        node_classes: Arc<dyn NodeClassSource>,
    ) -> Result<Self, AwsError> {
        let pricing = PricingProvider::new(clients.region.clone(), settings.isolated_vpc)?;
        let version = settings
            .kubernetes_version
            .clone()
            .unwrap_or_else(|| DEFAULT_KUBERNETES_VERSION.to_string());
        let unavailable = Arc::new(UnavailableOfferings::default());
        Ok(Self {
            instance_types: Arc::new(InstanceTypeProvider::new(clients.region.clone())),
            pricing: Arc::new(pricing),
            fleet: FleetBatcher::new(
                Ec2Fleet::new(clients.ec2.clone(), Arc::clone(&unavailable)),
                FleetBatchOptions::default(),
            ),
            unavailable,
            reservations: Arc::new(ReservationAvailability::default()),
            subnet_ips: Arc::new(SubnetIps::default()),
            placement_groups: Arc::new(ResolvedPlacementGroups::default()),
            dry_runs: Arc::new(DryRunCache::default()),
            instances: Arc::new(InstanceCache::default()),
            launch_template_cache: Arc::new(LaunchTemplateCache::default()),
            node_class_cache: Arc::new(NodeClassCache::default()),
            kubernetes_version: RwLock::new(version),
            launch_prices: RwLock::new(None),
            settings,
            clients,
            node_classes,
        })
    }

    pub fn settings(&self) -> &AwsSettings {
        &self.settings
    }

    pub fn clients(&self) -> &AwsClients {
        &self.clients
    }

    pub fn unavailable_offerings(&self) -> &Arc<UnavailableOfferings> {
        &self.unavailable
    }

    /// Which launched instances carry their NodeClaim tag, and which wait for it ([`crate::nodeclaim_tagging`]).
    pub fn tag_ledger(&self) -> &Arc<InstanceTagLedger> {
        self.fleet.tag_ledger()
    }

    /// How many instances each capacity reservation can still take.
    pub fn reservation_availability(&self) -> &Arc<ReservationAvailability> {
        &self.reservations
    }

    /// Free IP addresses per subnet, net of launches in flight.
    pub fn subnet_ips(&self) -> &Arc<SubnetIps> {
        &self.subnet_ips
    }

    /// The placement group each class's selector resolved to.
    pub fn placement_groups(&self) -> &Arc<ResolvedPlacementGroups> {
        &self.placement_groups
    }

    /// The EC2NodeClasses' dry-run verdicts ([`crate::nodeclass::dry_run`]).
    pub(crate) fn dry_run_cache(&self) -> &Arc<DryRunCache> {
        &self.dry_runs
    }

    pub(crate) fn instance_cache(&self) -> &Arc<InstanceCache> {
        &self.instances
    }

    pub fn node_class_cache(&self) -> &Arc<NodeClassCache> {
        &self.node_class_cache
    }

    pub fn pricing(&self) -> &Arc<PricingProvider> {
        &self.pricing
    }

    /// The Kubernetes minor version (`1.33`) AMI aliases resolve for.
    pub fn kubernetes_version(&self) -> String {
        self.kubernetes_version
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn set_kubernetes_version(&self, version: impl Into<String>) {
        *self
            .kubernetes_version
            .write()
            .unwrap_or_else(PoisonError::into_inner) = version.into();
    }

    /// Describes instance types, zones and offerings again. Returns how many launchable types were found.
    pub async fn refresh_instance_types(&self) -> Result<usize, AwsError> {
        let found = self.instance_types.refresh(&self.clients.ec2).await?;
        self.record_catalog_metrics();
        Ok(found)
    }

    /// [`record_catalog_metrics`] for the discovered types under the default capacity settings.
    pub fn record_catalog_metrics(&self) {
        record_catalog_metrics(&self.catalog_of_class(None));
    }

    /// Updates spot prices, and on-demand prices unless in an isolated VPC. Both are attempted; the first error
    /// is returned (the prices in use stay).
    pub(crate) async fn refresh_prices(&self) -> Result<(), AwsError> {
        let spot = self.pricing.update_spot(&self.clients.ec2).await;
        let on_demand = self.pricing.update_on_demand(&self.clients.pricing).await;
        self.record_catalog_metrics();
        spot.and(on_demand).map(|_| ())
    }
}

impl DriftProvider for AwsCloudProvider {
    fn is_drifted(&self, claim: &NodeClaim) -> Option<String> {
        let class = self.node_class_cache.get(&claim.spec.node_class_ref.name)?;
        let instance = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .and_then(|id| parse_provider_id(id).ok())
            .and_then(|id| self.instances.get(id));
        let placement_group = class.spec.placement_group_selector.as_ref().and_then(|selector| {
            self.placement_groups
                .get(&claim.spec.node_class_ref.name, selector)
        });
        drift_reason(
            claim,
            &class,
            instance.as_ref(),
            self.settings.reserved_capacity,
            placement_group.as_ref(),
        )
        .map(str::to_string)
    }
}

#[async_trait]
impl CloudProvider for AwsCloudProvider {
    fn name(&self) -> &'static str {
        "aws"
    }

    async fn create(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        self.launch(claim).await
    }

    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudProviderError> {
        self.terminate(claim).await
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        self.node_claim_of(provider_id).await
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        self.node_claims().await
    }

    async fn list_instances(&self) -> Result<Vec<InstanceSummary>, CloudProviderError> {
        self.instance_summaries().await
    }

    async fn instance_types(
        &self,
        node_pool: &NodePool,
    ) -> Result<Vec<CatalogInstanceType>, CloudProviderError> {
        let reference = &node_pool.spec.template.spec.node_class_ref;
        if reference.group != AWS_GROUP {
            return Ok(Vec::new());
        }
        // A NodePool whose class does not exist yet can launch nothing.
        let Some(class) = self.node_class(&reference.name).await? else {
            return Ok(Vec::new());
        };
        self.catalog_for(&class)
            .map_err(|e| not_ready(&reference.name, e.to_string()))
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        repair_policies()
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        vec![NodeClassKind {
            group: AWS_GROUP,
            kind: "EC2NodeClass",
        }]
    }
}

/// Upstream AWS's repair policies: the kubelet's Ready, and the node monitoring agent's conditions.
pub fn repair_policies() -> Vec<RepairPolicy> {
    let policy = |condition: &str, status: &str, minutes: u64| RepairPolicy {
        condition_type: condition.into(),
        condition_status: status.into(),
        toleration: Duration::from_secs(minutes * 60),
    };
    vec![
        policy("Ready", "False", 30),
        policy("Ready", "Unknown", 30),
        policy("AcceleratedHardwareReady", "False", 10),
        policy("StorageReady", "False", 30),
        policy("NetworkingReady", "False", 30),
        policy("KernelReady", "False", 30),
        policy("ContainerRuntimeReady", "False", 30),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repair_policies_are_upstreams() {
        let policies = repair_policies();
        assert_eq!(policies.len(), 7);
        assert_eq!(policies[2].condition_type, "AcceleratedHardwareReady");
        assert_eq!(policies[2].toleration, Duration::from_secs(600));
        assert!(
            policies
                .iter()
                .filter(|p| p.condition_type == "Ready")
                .all(|p| p.toleration.as_secs() == 1800)
        );
    }
}
