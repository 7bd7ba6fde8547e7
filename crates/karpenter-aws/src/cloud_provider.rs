//! [`AwsCloudProvider`]: core's `CloudProvider` on EC2, assembled from this crate's parts.
//!
//! - `create`: reads the claim's EC2NodeClass (fresh, from the [`NodeClassSource`]); a missing, deleting or
//!   not-Ready class is `NodeClassNotReady`. The class's status (AMIs, subnets, security groups, instance
//!   profile) is used when the EC2NodeClass controller has written one, else the class is resolved here. Then
//!   [`plan_launch`] picks the offerings, a launch template is ensured for the AMI (created at most once per
//!   cache TTL; one found missing at launch is created again and the launch retried once), and an instant
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

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karpenter_api::common::{ConditionStatus, ResourceList};
use karpenter_api::ec2nodeclass::{
    AmiFamily, EC2NODECLASS_HASH_VERSION, EC2NodeClass, EC2NodeClassStatus, conditions,
};
use karpenter_api::labels::{
    AWS_CAPACITY_RESERVATION_ID_LABEL, AWS_CAPACITY_RESERVATION_INTERRUPTIBLE_LABEL,
    AWS_CAPACITY_RESERVATION_TYPE_LABEL, AWS_EC2NODECLASS_HASH_ANNOTATION,
    AWS_EC2NODECLASS_HASH_VERSION_ANNOTATION, AWS_EC2NODECLASS_LABEL, AWS_GROUP, AWS_INSTANCE_TENANCY_LABEL,
    AWS_TAG_NODECLAIM, AWS_ZONE_ID_LABEL, CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL,
    PRICE_OVERLAY_APPLIED_ANNOTATION, RESOURCE_EFA, ZONE_LABEL,
};
use karpenter_api::nodeclaim::{NodeClaim, NodeClaimStatus};
use karpenter_api::nodepool::NodePool;
use karpenter_api::quantity::format_milli;
use karpenter_core::catalog::{CatalogFile, CatalogInstanceType, Quantities, RequirementOperator};
use karpenter_core::cloudprovider::{
    CloudProvider, CloudProviderError, InstanceSummary, LaunchPrices, NodeClassKind, RepairPolicy,
};
use karpenter_core::disruption::drift::DriftProvider;

use crate::capacity::capacity_settings;
use crate::capacity_reservations::offerings::{add_reserved_offerings, withdraw_reservation};
use crate::capacity_reservations::{ReservationAvailability, ReservationSlot, reservation_type_label};
use crate::client::AwsClients;
use crate::drift::drift_reason;
use crate::error::AwsError;
use crate::fleet_batcher::{Ec2Fleet, FleetBatchOptions, FleetBatcher};
use crate::instance::{
    Ec2Instance, InstanceCache, InstancePlacementGroup, get_instance, list_instances, parse_provider_id,
    terminate_instance,
};
use crate::instance_profile::InstanceProfiles;
use crate::instance_types::InstanceTypeProvider;
use crate::launch::{LaunchOverride, LaunchRequest};
use crate::launch_plan::{LaunchPlan, plan_launch};
use crate::launch_template::{LaunchTemplateCache, LaunchTemplateSpec, LaunchTemplates, TemplatePlacement};
use crate::node_claim::{instance_summary, instance_to_node_claim};
use crate::node_classes::{NodeClassCache, NodeClassSource};
use crate::nodeclaim_tagging::InstanceTagLedger;
use crate::nodeclass::dry_run::DryRunCache;
use crate::nodeclass::resolve;
use crate::nodeclass::status::{Resolution, compute_status};
use crate::placement_groups::{
    PLACEMENT_GROUP_ID_LABEL, PLACEMENT_GROUP_PARTITION_LABEL, PlacementGroup, PlacementStrategy,
    PlacementTarget, ResolvedPlacementGroups, cluster_zone, describe_placement_group, launch_placement,
};
use crate::pod_addressing::PodAddressing;
use crate::pricing::PricingProvider;
use crate::settings::AwsSettings;
use crate::subnet_ips::SubnetIps;
use crate::tags::launch_tags;
use crate::tenancy::{self, claim_tenancy};
use crate::unavailable_offerings::UnavailableOfferings;
use crate::userdata::{self, ClusterInfo, UserDataInput, kubelet_labels};
use karpenter_metrics::{InstanceTypeLabels, InstanceTypeOfferingLabels, NodeClassLabels};

/// CreateFleet's error code for a launch template that does not exist.
const LAUNCH_TEMPLATE_NOT_FOUND: &str = "InvalidLaunchTemplateName.NotFoundException";

/// Whether `claim` requests EFA devices, so its templates need EFA interfaces (unless its class lists its own).
fn requests_efa(claim: &NodeClaim) -> bool {
    claim
        .spec
        .resources
        .requests
        .as_ref()
        .and_then(|requests| requests.get(RESOURCE_EFA))
        .and_then(|quantity| karpenter_api::quantity::parse_milli(&quantity.0).ok())
        .is_some_and(|milli| milli > 0)
}

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

fn resource_list(quantities: &Quantities) -> ResourceList {
    quantities
        .iter()
        .filter(|(_, milli)| **milli != 0)
        .map(|(resource, milli)| (resource.clone(), Quantity(format_milli(resource, *milli))))
        .collect()
}

/// `karpenter_ec2nodeclasses_userdata_bytes{nodeclass}`; warns from 90% of EC2's 16 KiB limit.
fn record_user_data_size(node_class: &str, bytes: usize) {
    if bytes * 10 >= userdata::USER_DATA_LIMIT_BYTES * 9 {
        tracing::warn!(
            ec2nodeclass = node_class,
            bytes,
            limit = userdata::USER_DATA_LIMIT_BYTES,
            "the user data is close to EC2's limit"
        );
    }
    karpenter_metrics::metrics()
        .ec2nodeclasses_userdata_bytes
        .get_or_create(&NodeClassLabels {
            nodeclass: node_class.to_string(),
        })
        .set(i64::try_from(bytes).unwrap_or(i64::MAX));
}

/// The instance type gauges from `catalog`: each type's vCPUs and memory, and each offering's availability and
/// price (`karpenter_cloudprovider_instance_type_*`).
pub fn record_catalog_metrics(catalog: &[CatalogInstanceType]) {
    let metrics = karpenter_metrics::metrics();
    for entry in catalog {
        let labels = InstanceTypeLabels {
            instance_type: entry.name.clone(),
        };
        let capacity = |resource: &str| entry.capacity.get(resource).copied().unwrap_or(0) / 1000;
        metrics
            .cloudprovider_instance_type_cpu_cores
            .get_or_create(&labels)
            .set(capacity("cpu"));
        metrics
            .cloudprovider_instance_type_memory_bytes
            .get_or_create(&labels)
            .set(capacity("memory"));
        for offering in &entry.offerings {
            let labels = InstanceTypeOfferingLabels {
                instance_type: entry.name.clone(),
                capacity_type: offering.capacity_type.clone(),
                zone: offering.zone.clone(),
            };
            metrics
                .cloudprovider_instance_type_offering_available
                .get_or_create(&labels)
                .set(i64::from(offering.available));
            metrics
                .cloudprovider_instance_type_offering_price_estimate
                .get_or_create(&labels)
                .set(offering.price);
        }
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

    /// Where launches read NodeOverlay prices from: a NodeClaim marked `karpenter.sh/price-overlay-applied` is
    /// launched with CreateFleet's prioritized strategies, its offerings prioritized by these prices.
    pub fn set_launch_prices(&self, prices: Arc<dyn LaunchPrices>) {
        *self.launch_prices.write().unwrap_or_else(PoisonError::into_inner) = Some(prices);
    }

    /// `catalog` repriced by the NodeOverlays of the claim's NodePool, when the claim was scheduled by overlaid
    /// prices; whether CreateFleet is to launch by priority.
    fn apply_launch_prices(&self, claim: &NodeClaim, catalog: &mut Vec<CatalogInstanceType>) -> bool {
        let marked = claim.metadata.annotations.as_ref().is_some_and(|a| {
            a.get(PRICE_OVERLAY_APPLIED_ANNOTATION)
                .is_some_and(|v| v == "true")
        });
        if !marked {
            return false;
        }
        let prices = self
            .launch_prices
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let node_pool = claim.metadata.labels.as_ref().and_then(|l| l.get(NODEPOOL_LABEL));
        if let (Some(prices), Some(node_pool)) = (prices, node_pool) {
            let mut file = CatalogFile {
                well_known_labels: Vec::new(),
                instance_types: std::mem::take(catalog),
                node_pool_types: Default::default(),
            };
            let repriced = prices.apply(node_pool, &mut file);
            *catalog = file.instance_types;
            tracing::debug!(
                nodeclaim = claim.metadata.name.as_deref().unwrap_or_default(),
                node_pool = %node_pool,
                repriced,
                "launching by NodeOverlay prices"
            );
        }
        // As upstream, the mark alone switches the strategies: the overlays may have changed since the claim
        // was scheduled, and the priorities are then the prices EC2 would have ordered by anyway.
        true
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

    /// Takes EC2's instance counts of the capacity reservations `resolution` found.
    pub fn record_capacity_reservations(&self, resolution: &Resolution) {
        if let Some(Ok(discovery)) = &resolution.capacity_reservations {
            self.reservations.record_reported(
                discovery
                    .reservations
                    .iter()
                    .map(|r| (r.status.id.as_str(), r.available_instance_count)),
                discovery.asked_at,
            );
        }
    }

    /// Free IP addresses per subnet, net of launches in flight.
    pub fn subnet_ips(&self) -> &Arc<SubnetIps> {
        &self.subnet_ips
    }

    /// Takes EC2's free address counts of the subnets `resolution` found.
    pub fn record_subnet_addresses(&self, resolution: &Resolution) {
        if let Some(counts) = &resolution.subnet_addresses {
            self.subnet_ips.record_reported(counts);
        }
    }

    /// The placement group each class's selector resolved to.
    pub fn placement_groups(&self) -> &Arc<ResolvedPlacementGroups> {
        &self.placement_groups
    }

    /// Keeps what `resolution` found of `node_class`'s placement group (a failed lookup keeps the previous
    /// answer; a class without a selector has none).
    pub fn record_placement_group(&self, node_class: &EC2NodeClass, resolution: &Resolution) {
        let name = node_class.metadata.name.clone().unwrap_or_default();
        match (
            &node_class.spec.placement_group_selector,
            &resolution.placement_group,
        ) {
            (None, _) => self.placement_groups.remove(&name),
            (Some(selector), Some(Ok(group))) => self.placement_groups.record(&name, selector, group.clone()),
            (Some(_), _) => {}
        }
    }

    /// The available placement group `node_class` launches into, as last resolved; None when it selects none
    /// or it is not known (yet) to be available.
    fn class_placement_group(&self, node_class: &EC2NodeClass) -> Option<PlacementGroup> {
        let selector = node_class.spec.placement_group_selector.as_ref()?;
        let name = node_class.metadata.name.as_deref().unwrap_or_default();
        self.placement_groups.available_group(name, selector)
    }

    /// The EC2NodeClasses' dry-run verdicts ([`crate::nodeclass::dry_run`]).
    pub fn dry_run_cache(&self) -> &Arc<DryRunCache> {
        &self.dry_runs
    }

    pub fn instance_cache(&self) -> &Arc<InstanceCache> {
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

    pub fn set_kubernetes_version(&self, version: impl Into<String>) {
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
    pub async fn refresh_prices(&self) -> Result<(), AwsError> {
        let spot = self.pricing.update_spot(&self.clients.ec2).await;
        let on_demand = self.pricing.update_on_demand(&self.clients.pricing).await;
        self.record_catalog_metrics();
        spot.and(on_demand).map(|_| ())
    }

    /// The class's instance types (every discovered type, available or not), with its capacity reservations
    /// as reserved offerings.
    pub fn catalog_for(&self, node_class: &EC2NodeClass) -> Result<Vec<CatalogInstanceType>, AwsError> {
        self.catalog_with(node_class, node_class.status.as_ref())
    }

    /// [`AwsCloudProvider::catalog_for`] with the class's reservations from `status` (a launch may have
    /// resolved the class itself).
    fn catalog_with(
        &self,
        node_class: &EC2NodeClass,
        status: Option<&EC2NodeClassStatus>,
    ) -> Result<Vec<CatalogInstanceType>, AwsError> {
        let now = Instant::now();
        let mut catalog = self.instance_types.list(
            &capacity_settings(node_class, &self.settings),
            PodAddressing::of_class(&node_class.spec),
            &self.pricing,
            &self.unavailable,
            now,
        )?;
        if self.settings.reserved_capacity
            && let Some(status) = status
        {
            add_reserved_offerings(
                &mut catalog,
                &status.capacity_reservations,
                &self.reservations,
                &self.unavailable,
                &self.pricing,
                now,
            );
        }
        // Instances launch with nested virtualization on only where the processor supports it.
        if node_class
            .spec
            .cpu_options
            .as_ref()
            .is_some_and(|cpu| cpu.nested_virtualization_enabled())
        {
            catalog.retain(|t| self.instance_types.supports_nested_virtualization(&t.name));
        }
        let zones = node_class.zones();
        // Before the class has subnets every zone is possible; after, only theirs.
        if !zones.is_empty() {
            for offering in catalog.iter_mut().flat_map(|t| t.offerings.iter_mut()) {
                offering.available &= zones.contains(&offering.zone);
            }
        }
        if let Some(group) = self.class_placement_group(node_class) {
            let requirements = group.requirements();
            for entry in &mut catalog {
                Arc::make_mut(&mut entry.requirements).extend(requirements.iter().cloned());
            }
            // A cluster group stays in the zone of its first instance.
            if let Some(zone) = cluster_zone_of(&self.instances, &group) {
                for offering in catalog.iter_mut().flat_map(|t| t.offerings.iter_mut()) {
                    offering.available &= offering.zone == zone;
                }
            }
        }
        Ok(catalog)
    }

    /// The class named `name`, fresh from the source; also refreshes the drift cache.
    async fn node_class(&self, name: &str) -> Result<Option<Arc<EC2NodeClass>>, CloudProviderError> {
        match self.node_classes.get(name).await {
            Ok(Some(class)) => Ok(Some(self.node_class_cache.insert(class))),
            Ok(None) => {
                self.node_class_cache.remove(name);
                Ok(None)
            }
            Err(err) => Err(CloudProviderError::Transient(err.to_string())),
        }
    }

    /// The status a launch uses: the controller's when it resolved everything, else resolved now.
    async fn launch_status(
        &self,
        node_class: &EC2NodeClass,
    ) -> Result<EC2NodeClassStatus, CloudProviderError> {
        let name = node_class.metadata.name.clone().unwrap_or_default();
        if let Some(ready) = node_class.condition(conditions::READY)
            && ready.status != ConditionStatus::True
        {
            return Err(not_ready(&name, format!("{}: {}", ready.reason, ready.message)));
        }
        if let Some(status) = &node_class.status
            && !status.amis.is_empty()
            && !status.subnets.is_empty()
            && !status.security_groups.is_empty()
        {
            return Ok(status.clone());
        }
        let mut resolution = resolve(
            &self.clients,
            node_class,
            &self.kubernetes_version(),
            self.settings.reserved_capacity,
            Timestamp::now(),
        )
        .await;
        self.record_capacity_reservations(&resolution);
        self.record_subnet_addresses(&resolution);
        self.record_placement_group(node_class, &resolution);
        resolution.instance_profile = self.ensure_instance_profile(node_class).await;
        if let Some(err) = resolution.error() {
            return Err(CloudProviderError::Transient(format!(
                "resolving EC2NodeClass {name}: {err}"
            )));
        }
        let status = compute_status(node_class, &resolution, Timestamp::now());
        let unready: Vec<String> = status
            .conditions
            .iter()
            .filter(|c| c.type_ != conditions::READY && c.status != ConditionStatus::True)
            .map(|c| format!("{}: {}", c.reason, c.message))
            .collect();
        if unready.is_empty() {
            Ok(status)
        } else {
            Err(not_ready(&name, unready.join("; ")))
        }
    }

    /// The placement group a launch of `node_class` goes into: none without a selector; the resolved group when
    /// it is available; resolved now when the controller has not yet (a launch right after start-up).
    async fn launch_placement_group(
        &self,
        node_class: &EC2NodeClass,
    ) -> Result<Option<PlacementGroup>, CloudProviderError> {
        let Some(selector) = &node_class.spec.placement_group_selector else {
            return Ok(None);
        };
        let name = node_class.metadata.name.clone().unwrap_or_default();
        let group = match self.placement_groups.get(&name, selector) {
            Some(resolution) => resolution.group,
            None => {
                let group = describe_placement_group(&self.clients.ec2, selector)
                    .await
                    .map_err(|e| {
                        CloudProviderError::Transient(format!("resolving EC2NodeClass {name}: {e}"))
                    })?;
                self.placement_groups.record(&name, selector, group.clone());
                group
            }
        };
        match group {
            Some(group) if group.is_available() => Ok(Some(group)),
            Some(group) => Err(not_ready(
                &name,
                format!(
                    "placement group {} ({}) is {}, not available",
                    group.name, group.id, group.state
                ),
            )),
            None => Err(not_ready(
                &name,
                format!(
                    "PlacementGroupNotFound: {}",
                    crate::placement_groups::selector_json(selector)
                ),
            )),
        }
    }

    /// The partition EC2 put `instance_id` in, read back once (best effort: a launch does not fail for it).
    async fn launched_partition(&self, instance_id: &str) -> Option<i32> {
        match get_instance(&self.clients.ec2, instance_id).await {
            Ok(instance) => instance.placement_group.and_then(|g| g.partition),
            Err(err) => {
                tracing::warn!(instance = instance_id, error = %err, "reading the partition of a launched instance");
                None
            }
        }
    }

    async fn launch(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        let class_name = claim.spec.node_class_ref.name.clone();
        let node_class = self
            .node_class(&class_name)
            .await?
            .ok_or_else(|| not_ready(&class_name, "EC2NodeClass not found"))?;
        if node_class.metadata.deletion_timestamp.is_some() {
            return Err(not_ready(&class_name, "EC2NodeClass is being deleted"));
        }
        let status = self.launch_status(&node_class).await?;
        let placement_group = self.launch_placement_group(&node_class).await?;
        let mut catalog = self
            .catalog_with(&node_class, Some(&status))
            .map_err(|e| not_ready(&class_name, e.to_string()))?;
        let prioritized = self.apply_launch_prices(claim, &mut catalog);
        let addressing = PodAddressing::of_class(&node_class.spec);
        let (mut plan, reservation_slot) =
            self.plan_and_take_reservation(claim, &mut catalog, &status, addressing)?;
        let placement = placement_group
            .as_ref()
            .map(|group| launch_placement(claim, group))
            .transpose()?;
        // The subnets are chosen again as the addresses are leased: another launch may have taken some since.
        let subnet_lease = self.subnet_ips.lease(&status.subnets, &plan.addresses);
        if !plan.use_subnets(&subnet_lease.subnets()) {
            return Err(CloudProviderError::InsufficientCapacity {
                message: format!(
                    "no subnet of EC2NodeClass {class_name} has free IP addresses in the zones of the offerings \
                     NodeClaim {} allows",
                    claim.metadata.name.as_deref().unwrap_or_default()
                ),
                offerings: Vec::new(),
            });
        }

        let mut resolved_class = (*node_class).clone();
        resolved_class.status = Some(status.clone());
        let overrides = self
            .ensure_launch_templates(claim, &resolved_class, &plan, placement.as_ref(), &catalog)
            .await?;
        let template_name = overrides
            .first()
            .and_then(|o| o.launch_template_name.clone())
            .unwrap_or_default();

        let claim_name = claim.metadata.name.clone().unwrap_or_default();
        let node_pool = claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(NODEPOOL_LABEL))
            .cloned()
            .unwrap_or_default();
        let mut tags = launch_tags(
            &self.settings.cluster_name,
            &node_pool,
            &class_name,
            node_class.spec.tags.as_ref(),
        );
        tags.insert(AWS_TAG_NODECLAIM.into(), claim_name);
        let mut request = LaunchRequest {
            launch_template_name: template_name,
            capacity_type: plan.capacity_type.clone(),
            reservation: plan.reservation.clone(),
            overrides,
            tags: tags.clone(),
            zone_ids: status
                .subnets
                .iter()
                .filter_map(|s| Some((s.zone.clone(), s.zone_id.clone()?)))
                .collect(),
            context: node_class.spec.context.clone(),
            prioritized,
        };
        let launched = match self.fleet.launch(&request).await {
            Err(CloudProviderError::Create { reason, .. }) if reason == LAUNCH_TEMPLATE_NOT_FOUND => {
                // A cached template was deleted behind our back (by hand, or by another process's garbage
                // collection): forget the request's templates, create them again and try once more.
                let templates = self.launch_templates();
                templates.forget(&request.launch_template_name);
                for name in request
                    .overrides
                    .iter()
                    .filter_map(|o| o.launch_template_name.as_ref())
                {
                    templates.forget(name);
                }
                request.overrides = self
                    .ensure_launch_templates(claim, &resolved_class, &plan, placement.as_ref(), &catalog)
                    .await?;
                self.fleet.launch(&request).await?
            }
            other => other?,
        };
        if let Some(slot) = reservation_slot {
            slot.launched(Instant::now());
        }
        subnet_lease.launched(&launched.zone, Instant::now());

        let partition = match &placement {
            Some(PlacementTarget {
                partition: Some(pinned),
                ..
            }) => Some(*pinned),
            Some(target) if target.group.strategy == Some(PlacementStrategy::Partition) => {
                self.launched_partition(&launched.instance_id).await
            }
            _ => None,
        };
        let image_id = plan
            .overrides
            .iter()
            .find(|o| o.instance_type == launched.instance_type && o.zone == launched.zone)
            .and_then(|o| o.image_id.clone())
            .unwrap_or_else(|| plan.image_id.clone());
        let instance = Ec2Instance {
            id: launched.instance_id.clone(),
            instance_type: launched.instance_type.clone(),
            zone: launched.zone.clone(),
            capacity_type: launched.capacity_type.clone(),
            capacity_reservation_id: plan.reservation.as_ref().map(|r| r.id.clone()),
            state: "pending".into(),
            image_id: Some(image_id),
            launch_time: Some(Timestamp::now()),
            private_dns_name: None,
            subnet_id: plan.subnets.get(&launched.zone).cloned(),
            security_group_ids: status.security_groups.iter().map(|g| g.id.clone()).collect(),
            placement_group: placement.as_ref().map(|target| InstancePlacementGroup {
                id: Some(target.group.id.clone()),
                name: Some(target.group.name.clone()),
                partition,
            }),
            tags,
        };
        self.instances.insert(instance.clone());
        let entry = catalog.iter().find(|t| t.name == launched.instance_type);
        Ok(self.hydrate(claim, &node_class, &status, &instance, entry))
    }

    /// The launch plan for `claim`; for a reserved plan also one instance of its reservation, taken so that
    /// concurrent launches do not count on the same one. A reservation another launch emptied since `catalog`
    /// was built is withdrawn from it and the claim planned again (each round withdraws one reservation).
    fn plan_and_take_reservation(
        &self,
        claim: &NodeClaim,
        catalog: &mut [CatalogInstanceType],
        status: &EC2NodeClassStatus,
        addressing: PodAddressing,
    ) -> Result<(LaunchPlan, Option<ReservationSlot>), CloudProviderError> {
        loop {
            let plan = plan_launch(
                claim,
                catalog,
                &status.amis,
                &self.subnet_ips.choose(&status.subnets),
                &status.capacity_reservations,
                addressing,
            )?;
            let Some(target) = &plan.reservation else {
                return Ok((plan, None));
            };
            match self.reservations.try_take(&target.id) {
                Some(slot) => return Ok((plan, Some(slot))),
                None => withdraw_reservation(catalog, &target.id),
            }
        }
    }

    /// The cluster's launch templates, through the cache launches share.
    pub fn launch_templates(&self) -> LaunchTemplates {
        LaunchTemplates::new(
            self.clients.ec2.clone(),
            self.settings.cluster_name.clone(),
            Arc::clone(&self.launch_template_cache),
        )
    }

    /// The instance profiles Karpenter manages for this cluster's role-based EC2NodeClasses.
    pub fn instance_profiles(&self) -> InstanceProfiles {
        InstanceProfiles::new(
            self.clients.iam.clone(),
            self.settings.cluster_name.clone(),
            self.clients.region.clone(),
        )
    }

    /// Creates (or adopts) the instance profile of a class with `spec.role` and no `spec.instanceProfile`;
    /// None for other classes.
    pub async fn ensure_instance_profile(
        &self,
        node_class: &EC2NodeClass,
    ) -> Option<Result<String, AwsError>> {
        if node_class.spec.instance_profile.is_some() {
            return None;
        }
        let role = node_class.spec.role.as_deref()?;
        let name = node_class.metadata.name.clone().unwrap_or_default();
        Some(self.instance_profiles().ensure(&name, role).await)
    }

    /// What user data is generated from about the cluster.
    pub fn cluster_info(&self) -> ClusterInfo {
        ClusterInfo {
            name: self.settings.cluster_name.clone(),
            endpoint: self.settings.cluster_endpoint.clone(),
            ca_bundle: self.settings.cluster_ca_bundle.clone(),
            service_cidr: self.settings.service_cidr(),
            dns_ip: self.settings.cluster_dns_ip.clone(),
        }
    }

    /// Ensures the launch templates of `plan` and returns its overrides, each naming its template: one template
    /// per distinct user data, which differs by the max pods of the instance types (the AMI is set per override).
    async fn ensure_launch_templates(
        &self,
        claim: &NodeClaim,
        node_class: &EC2NodeClass,
        plan: &LaunchPlan,
        placement: Option<&PlacementTarget>,
        catalog: &[CatalogInstanceType],
    ) -> Result<Vec<LaunchOverride>, CloudProviderError> {
        let class_name = node_class.metadata.name.clone().unwrap_or_default();
        let family = node_class.spec.ami_family();
        let cluster = self.cluster_info();
        let labels = claim.metadata.labels.clone().unwrap_or_default();
        let mut taints = claim.spec.taints.clone();
        taints.extend(claim.spec.startup_taints.iter().cloned());
        // Keyed by max pods (the user data) and EFA interfaces (the network interfaces).
        let mut templates: HashMap<(Option<i64>, i32), String> = HashMap::new();
        // A class that lists its own interfaces keeps them, EFA or not.
        let wants_efa = requests_efa(claim) && node_class.spec.network_interfaces.is_none();
        let mut overrides = plan.overrides.clone();
        for o in &mut overrides {
            let efa_count = if wants_efa {
                catalog
                    .iter()
                    .find(|t| t.name == o.instance_type)
                    .and_then(|t| t.capacity.get(RESOURCE_EFA))
                    .and_then(|milli| i32::try_from(milli / 1000).ok())
                    .unwrap_or(0)
            } else {
                0
            };
            let max_pods = (family != AmiFamily::Custom)
                .then(|| {
                    catalog
                        .iter()
                        .find(|t| t.name == o.instance_type)
                        .and_then(|t| t.capacity.get("pods"))
                        .map(|milli| milli / 1000)
                })
                .flatten();
            if let Some(name) = templates.get(&(max_pods, efa_count)) {
                o.launch_template_name = Some(name.clone());
                continue;
            }
            let input = UserDataInput {
                cluster: &cluster,
                kubelet: node_class.spec.kubelet.as_ref(),
                max_pods,
                labels: kubelet_labels(&labels),
                taints: taints.clone(),
                custom: node_class.spec.user_data.as_deref(),
                instance_store_raid0: node_class.spec.instance_store_raid0(),
            };
            let user_data = userdata::generate(family, &input).map_err(|e| CloudProviderError::Create {
                reason: "UserDataGenerationFailed".into(),
                message: format!("EC2NodeClass {class_name}: {e}"),
            })?;
            if let Some(data) = &user_data {
                record_user_data_size(&class_name, data.len());
            }
            let mut template =
                LaunchTemplateSpec::from_node_class(node_class, &plan.image_id, &self.settings.cluster_name)?
                    .with_efa_interfaces(efa_count);
            template.user_data = user_data.map(|d| userdata::base64_encode(d.as_bytes()));
            template.capacity_reservation = plan.reservation.clone();
            template.placement = placement.map(|target| TemplatePlacement {
                group_id: target.group.id.clone(),
                partition: target.partition,
            });
            template.tenancy = (claim_tenancy(&claim.spec.requirements) == tenancy::DEDICATED)
                .then(|| tenancy::DEDICATED.to_string());
            let name = self
                .launch_templates()
                .ensure(&template, Instant::now())
                .await
                .map_err(|e| {
                    let message = format!(
                        "EC2NodeClass {class_name}: launch template {}: {e}",
                        template.name()
                    );
                    match e {
                        AwsError::Throttled { .. } | AwsError::Unreachable { .. } => {
                            CloudProviderError::Transient(message)
                        }
                        _ => CloudProviderError::Create {
                            reason: "LaunchTemplateCreationFailed".into(),
                            message,
                        },
                    }
                })?;
            templates.insert((max_pods, efa_count), name.clone());
            o.launch_template_name = Some(name);
        }
        Ok(overrides)
    }

    /// `claim` as launched: see the module documentation.
    fn hydrate(
        &self,
        claim: &NodeClaim,
        node_class: &EC2NodeClass,
        status: &EC2NodeClassStatus,
        instance: &Ec2Instance,
        entry: Option<&CatalogInstanceType>,
    ) -> NodeClaim {
        let mut hydrated = claim.clone();
        let labels = hydrated.metadata.labels.get_or_insert_with(BTreeMap::new);
        for requirement in entry.iter().flat_map(|t| t.requirements.iter()) {
            if requirement.operator == RequirementOperator::In
                && let [value] = requirement.values.as_slice()
            {
                labels.insert(requirement.key.clone(), value.clone());
            }
        }
        labels.insert(INSTANCE_TYPE_LABEL.into(), instance.instance_type.clone());
        labels.insert(ZONE_LABEL.into(), instance.zone.clone());
        labels.insert(CAPACITY_TYPE_LABEL.into(), instance.capacity_type.clone());
        // Every type offers both tenancies; the claim's requirements chose one (see `crate::tenancy`).
        labels.insert(
            AWS_INSTANCE_TENANCY_LABEL.into(),
            claim_tenancy(&claim.spec.requirements).into(),
        );
        // The type admits every reservation label once it has a reservation, and every partition of its
        // placement group; the launch decides which apply.
        for key in [
            AWS_CAPACITY_RESERVATION_ID_LABEL,
            AWS_CAPACITY_RESERVATION_TYPE_LABEL,
            AWS_CAPACITY_RESERVATION_INTERRUPTIBLE_LABEL,
            PLACEMENT_GROUP_ID_LABEL,
            PLACEMENT_GROUP_PARTITION_LABEL,
        ] {
            labels.remove(key);
        }
        if let Some(group) = &instance.placement_group {
            if let Some(id) = &group.id {
                labels.insert(PLACEMENT_GROUP_ID_LABEL.into(), id.clone());
            }
            if let Some(partition) = group.partition {
                labels.insert(PLACEMENT_GROUP_PARTITION_LABEL.into(), partition.to_string());
            }
        }
        if let Some(reservation) = instance
            .capacity_reservation_id
            .as_ref()
            .and_then(|id| status.capacity_reservations.iter().find(|r| r.id == *id))
        {
            labels.insert(AWS_CAPACITY_RESERVATION_ID_LABEL.into(), reservation.id.clone());
            labels.insert(
                AWS_CAPACITY_RESERVATION_TYPE_LABEL.into(),
                reservation_type_label(reservation.reservation_type).into(),
            );
            labels.insert(
                AWS_CAPACITY_RESERVATION_INTERRUPTIBLE_LABEL.into(),
                reservation.interruptible.to_string(),
            );
        }
        if let Some(zone_id) = status
            .subnets
            .iter()
            .find(|s| s.zone == instance.zone)
            .and_then(|s| s.zone_id.clone())
        {
            labels.insert(AWS_ZONE_ID_LABEL.into(), zone_id);
        }
        let annotations = hydrated.metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(AWS_EC2NODECLASS_HASH_ANNOTATION.into(), node_class.hash());
        annotations.insert(
            AWS_EC2NODECLASS_HASH_VERSION_ANNOTATION.into(),
            EC2NODECLASS_HASH_VERSION.into(),
        );
        let claim_status = hydrated.status.get_or_insert_with(NodeClaimStatus::default);
        claim_status.provider_id = Some(instance.provider_id());
        claim_status.image_id = instance.image_id.clone();
        claim_status.capacity = entry.map(|t| resource_list(&t.capacity));
        claim_status.allocatable = entry.map(|t| resource_list(&t.allocatable()));
        hydrated
    }

    /// The catalog under the settings of class `class_name` when it is known, else the defaults.
    fn catalog_of_class(&self, class_name: Option<&String>) -> Vec<CatalogInstanceType> {
        let class = class_name.and_then(|n| self.node_class_cache.get(n));
        let settings = class.as_ref().map_or_else(
            || crate::capacity::default_capacity_settings(&self.settings),
            |c| capacity_settings(c, &self.settings),
        );
        let addressing = class
            .as_ref()
            .map_or_else(PodAddressing::default, |c| PodAddressing::of_class(&c.spec));
        self.instance_types
            .list(
                &settings,
                addressing,
                &self.pricing,
                &self.unavailable,
                Instant::now(),
            )
            .unwrap_or_default()
    }

    /// Every instance of this cluster, refreshing the instance cache drift reads.
    async fn cluster_instances(&self) -> Result<Vec<Ec2Instance>, CloudProviderError> {
        let mut instances = list_instances(&self.clients.ec2, &self.settings.cluster_name).await?;
        // An instance still waiting for its NodeClaim tag is its claim's all the same: garbage collection
        // must see it named.
        self.fleet.tag_ledger().overlay(&mut instances);
        self.instances.replace_all(&instances);
        Ok(instances)
    }

    /// Instances as NodeClaims; each class's catalog is computed once, not once per instance.
    fn to_node_claims(&self, instances: &[Ec2Instance]) -> Vec<NodeClaim> {
        let mut catalogs: HashMap<Option<&String>, Vec<CatalogInstanceType>> = HashMap::new();
        let now = Timestamp::now();
        instances
            .iter()
            .map(|instance| {
                let class_name = instance.tags.get(AWS_EC2NODECLASS_LABEL);
                let catalog = catalogs
                    .entry(class_name)
                    .or_insert_with(|| self.catalog_of_class(class_name));
                let entry = catalog.iter().find(|t| t.name == instance.instance_type);
                instance_to_node_claim(instance, entry, now)
            })
            .collect()
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
        let provider_id = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .ok_or_else(|| {
                CloudProviderError::NodeClaimNotFound(claim.metadata.name.clone().unwrap_or_default())
            })?;
        let id = parse_provider_id(provider_id)?;
        let result = terminate_instance(&self.clients.ec2, id).await;
        if matches!(result, Err(AwsError::NotFound { .. })) {
            self.instances.remove(id);
        }
        Ok(result?)
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        let id = parse_provider_id(provider_id)?;
        match get_instance(&self.clients.ec2, id).await {
            Ok(mut instance) => {
                self.fleet
                    .tag_ledger()
                    .overlay(std::slice::from_mut(&mut instance));
                self.instances.insert(instance.clone());
                let catalog = self.catalog_of_class(instance.tags.get(AWS_EC2NODECLASS_LABEL));
                let entry = catalog.iter().find(|t| t.name == instance.instance_type);
                Ok(instance_to_node_claim(&instance, entry, Timestamp::now()))
            }
            Err(err) => {
                if matches!(err, AwsError::NotFound { .. }) {
                    self.instances.remove(id);
                }
                Err(err.into())
            }
        }
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        let instances = self.cluster_instances().await?;
        Ok(self.to_node_claims(&instances))
    }

    async fn list_instances(&self) -> Result<Vec<InstanceSummary>, CloudProviderError> {
        let instances = self.cluster_instances().await?;
        Ok(instances.iter().map(instance_summary).collect())
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

/// The zone of cluster group `group`: where the instances in it that Karpenter knows run.
fn cluster_zone_of(instances: &InstanceCache, group: &PlacementGroup) -> Option<String> {
    if group.strategy != Some(PlacementStrategy::Cluster) {
        return None;
    }
    let member = instances.find(|i| i.is_in_placement_group(&group.id, &group.name))?;
    cluster_zone(group, [&member])
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

    #[test]
    fn catalog_gauges_and_user_data_sizes_are_recorded() {
        use karpenter_core::catalog::CatalogOffering;
        let entry = CatalogInstanceType {
            name: "metrics-test.large".into(),
            capacity: [
                ("cpu".to_string(), 2000),
                ("memory".to_string(), 8 * 1024 * 1024 * 1024 * 1000),
            ]
            .into(),
            offerings: vec![CatalogOffering {
                zone: "us-west-2a".into(),
                capacity_type: "spot".into(),
                price: 0.025,
                available: false,
                reservation_id: None,
                reservation_capacity: None,
            }],
            requirements: Default::default(),
            overhead: karpenter_core::catalog::CatalogOverhead::default(),
        };
        record_catalog_metrics(&[entry]);
        record_user_data_size("metrics-test", 1234);
        let metrics = karpenter_metrics::metrics();
        let labels = InstanceTypeLabels {
            instance_type: "metrics-test.large".into(),
        };
        assert_eq!(
            metrics
                .cloudprovider_instance_type_cpu_cores
                .get_or_create(&labels)
                .get(),
            2
        );
        assert_eq!(
            metrics
                .cloudprovider_instance_type_memory_bytes
                .get_or_create(&labels)
                .get(),
            8 * 1024 * 1024 * 1024
        );
        let offering = InstanceTypeOfferingLabels {
            instance_type: "metrics-test.large".into(),
            capacity_type: "spot".into(),
            zone: "us-west-2a".into(),
        };
        assert_eq!(
            metrics
                .cloudprovider_instance_type_offering_available
                .get_or_create(&offering)
                .get(),
            0
        );
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"karpenter_cloudprovider_instance_type_offering_price_estimate{instance_type="metrics-test.large",capacity_type="spot",zone="us-west-2a"} 0.025"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"karpenter_ec2nodeclasses_userdata_bytes{nodeclass="metrics-test"} 1234"#),
            "{text}"
        );
    }
}
