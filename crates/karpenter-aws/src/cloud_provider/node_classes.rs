//! The EC2NodeClasses a provider launches for: lookup (fresh from the source, cached for drift), what the
//! EC2NodeClass controller's resolutions leave for launches (reservation counts, subnet addresses, placement
//! groups), instance profiles, and each class's catalog.

use std::sync::Arc;
use std::time::Instant;

use karpenter_api::ec2nodeclass::{EC2NodeClass, EC2NodeClassStatus};
use karpenter_core::catalog::CatalogInstanceType;
use karpenter_core::cloudprovider::CloudProviderError;

use crate::capacity::capacity_settings;
use crate::capacity_reservations::offerings::add_reserved_offerings;
use crate::client::AwsClients;
use crate::error::AwsError;
use crate::instance::InstanceCache;
use crate::instance_profile::InstanceProfiles;
use crate::launch_template::LaunchTemplates;
use crate::node_classes::NodeClassCache;
use crate::nodeclass::controller::NodeClassBackend;
use crate::nodeclass::dry_run::DryRunCache;
use crate::nodeclass::status::Resolution;
use crate::placement_groups::ResolvedPlacementGroups;
use crate::placement_groups::{PlacementGroup, PlacementStrategy, cluster_zone};
use crate::pod_addressing::PodAddressing;
use crate::settings::AwsSettings;

use super::AwsCloudProvider;

impl AwsCloudProvider {
    /// Hands what `resolution` found for `node_class` to launches: EC2's instance counts of its capacity
    /// reservations, its subnets' free addresses, its placement group. The EC2NodeClass controller's
    /// resolutions and a launch's own (before the controller wrote a status) both go through here.
    pub(crate) fn record_resolution(&self, node_class: &EC2NodeClass, resolution: &Resolution) {
        self.record_capacity_reservations(resolution);
        self.record_subnet_addresses(resolution);
        self.record_placement_group(node_class, resolution);
    }

    /// Takes EC2's instance counts of the capacity reservations `resolution` found.
    fn record_capacity_reservations(&self, resolution: &Resolution) {
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

    /// Takes EC2's free address counts of the subnets `resolution` found.
    pub fn record_subnet_addresses(&self, resolution: &Resolution) {
        if let Some(counts) = &resolution.subnet_addresses {
            self.subnet_ips.record_reported(counts);
        }
    }

    /// Keeps what `resolution` found of `node_class`'s placement group (a failed lookup keeps the previous
    /// answer; a class without a selector has none).
    fn record_placement_group(&self, node_class: &EC2NodeClass, resolution: &Resolution) {
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

    /// The class's instance types (every discovered type, available or not), with its capacity reservations
    /// as reserved offerings.
    pub fn catalog_for(&self, node_class: &EC2NodeClass) -> Result<Vec<CatalogInstanceType>, AwsError> {
        self.catalog_with(node_class, node_class.status.as_ref())
    }

    /// [`AwsCloudProvider::catalog_for`] with the class's reservations from `status` (a launch may have
    /// resolved the class itself).
    pub(super) fn catalog_with(
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
    pub(super) async fn node_class(
        &self,
        name: &str,
    ) -> Result<Option<Arc<EC2NodeClass>>, CloudProviderError> {
        match self.node_classes.get(name).await {
            Ok(Some(class)) => Ok(Some(self.node_class_cache.insert(class))),
            Ok(None) => {
                self.node_class_cache.remove(name);
                Ok(None)
            }
            Err(err) => Err(CloudProviderError::Transient(err.to_string())),
        }
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
    pub(crate) async fn ensure_instance_profile(
        &self,
        node_class: &EC2NodeClass,
    ) -> Option<Result<String, AwsError>> {
        if node_class.spec.instance_profile.is_some() {
            return None;
        }
        let role = node_class.spec.role.as_deref()?;
        let name = node_class.metadata.name.clone().unwrap_or_default();
        Some(
            self.instance_profiles()
                .ensure(&name, node_class.spec.tags.as_ref(), role)
                .await,
        )
    }

    /// The catalog under the settings of class `class_name` when it is known, else the defaults.
    pub(super) fn catalog_of_class(&self, class_name: Option<&String>) -> Vec<CatalogInstanceType> {
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
}

/// The EC2NodeClass controller's handles on the provider: each one the provider's own.
#[async_trait::async_trait]
impl NodeClassBackend for AwsCloudProvider {
    fn clients(&self) -> &AwsClients {
        AwsCloudProvider::clients(self)
    }

    fn settings(&self) -> &AwsSettings {
        AwsCloudProvider::settings(self)
    }

    fn kubernetes_version(&self) -> String {
        AwsCloudProvider::kubernetes_version(self)
    }

    fn launch_templates(&self) -> LaunchTemplates {
        AwsCloudProvider::launch_templates(self)
    }

    fn instance_profiles(&self) -> InstanceProfiles {
        AwsCloudProvider::instance_profiles(self)
    }

    fn node_class_cache(&self) -> &Arc<NodeClassCache> {
        AwsCloudProvider::node_class_cache(self)
    }

    fn placement_groups(&self) -> &Arc<ResolvedPlacementGroups> {
        AwsCloudProvider::placement_groups(self)
    }

    fn dry_run_cache(&self) -> &Arc<DryRunCache> {
        AwsCloudProvider::dry_run_cache(self)
    }

    fn record_resolution(&self, node_class: &EC2NodeClass, resolution: &Resolution) {
        AwsCloudProvider::record_resolution(self, node_class, resolution)
    }

    async fn ensure_instance_profile(&self, node_class: &EC2NodeClass) -> Option<Result<String, AwsError>> {
        AwsCloudProvider::ensure_instance_profile(self, node_class).await
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
