//! `create`, the AWS launch path: [`AwsCloudProvider::launch`] and its steps, in the order it takes them,
//! then the NodeClaim hydrated from the launched instance ([`AwsCloudProvider::hydrate`]).

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use jiff::Timestamp;
use karpenter_api::common::ConditionStatus;
use karpenter_api::ec2nodeclass::{EC2NODECLASS_HASH_VERSION, EC2NodeClass, EC2NodeClassStatus, conditions};
use karpenter_api::labels::{
    AWS_CAPACITY_RESERVATION_ID_LABEL, AWS_CAPACITY_RESERVATION_INTERRUPTIBLE_LABEL,
    AWS_CAPACITY_RESERVATION_TYPE_LABEL, AWS_EC2NODECLASS_HASH_ANNOTATION,
    AWS_EC2NODECLASS_HASH_VERSION_ANNOTATION, AWS_INSTANCE_TENANCY_LABEL, AWS_TAG_NODECLAIM,
    AWS_ZONE_ID_LABEL, CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL,
    PRICE_OVERLAY_APPLIED_ANNOTATION, ZONE_LABEL,
};
use karpenter_api::nodeclaim::{NodeClaim, NodeClaimStatus};
use karpenter_core::catalog::{CatalogFile, CatalogInstanceType, RequirementOperator};
use karpenter_core::cloudprovider::{CloudProviderError, LaunchPrices};

use crate::capacity_reservations::offerings::withdraw_reservation;
use crate::capacity_reservations::{ReservationSlot, reservation_type_label};
use crate::instance::{Ec2Instance, InstancePlacementGroup, get_instance};
use crate::launch::{LaunchOverride, LaunchRequest, LaunchedInstance};
use crate::launch_plan::{LaunchPlan, plan_launch};
use crate::nodeclass::resolve;
use crate::nodeclass::status::compute_status;
use crate::placement_groups::{
    PLACEMENT_GROUP_ID_LABEL, PLACEMENT_GROUP_PARTITION_LABEL, PlacementGroup, PlacementStrategy,
    PlacementTarget, describe_placement_group, launch_placement,
};
use crate::pod_addressing::PodAddressing;
use crate::subnet_ips::SubnetLease;
use crate::tags::launch_tags;
use crate::tenancy::claim_tenancy;

use super::launch_templates::TemplateInputs;
use super::{AwsCloudProvider, not_ready};
use crate::node_claim::resource_list;

/// CreateFleet's error code for a launch template that does not exist.
const LAUNCH_TEMPLATE_NOT_FOUND: &str = "InvalidLaunchTemplateName.NotFoundException";

impl AwsCloudProvider {
    /// `create`: launches one instance for `claim` and returns the claim hydrated from it (see the module
    /// documentation of [`crate::cloud_provider`]). The steps, in order:
    /// 1. [`Self::launchable_class`]: the claim's EC2NodeClass, read fresh.
    /// 2. [`Self::launch_status`]: the class's AMIs, subnets, security groups and reservations.
    /// 3. [`Self::launch_placement_group`]: the placement group it launches into, if any.
    /// 4. The class's catalog ([`Self::catalog_with`]), repriced by NodeOverlays ([`Self::apply_launch_prices`]).
    /// 5. [`Self::plan_and_take_reservation`]: the offerings and AMIs to send, and a reserved instance to use.
    /// 6. [`Self::lease_subnets`]: the subnet of each zone, its addresses leased until EC2 counts them.
    /// 7. [`Self::ensure_launch_templates`]: a launch template per distinct user data and interfaces.
    /// 8. [`Self::fleet_request`] and [`Self::create_fleet`]: CreateFleet, batched, retried once when a
    ///    template was deleted behind the cache's back.
    /// 9. [`Self::launched_instance`]: the instance as launched, cached; [`Self::hydrate`]: the claim from it.
    pub(super) async fn launch(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        let node_class = self.launchable_class(claim).await?;
        let status = self.launch_status(&node_class).await?;
        let placement_group = self.launch_placement_group(&node_class).await?;
        let mut catalog = self
            .catalog_with(&node_class, Some(&status))
            .map_err(|e| not_ready(&claim.spec.node_class_ref.name, e.to_string()))?;
        let prioritized = self.apply_launch_prices(claim, &mut catalog);
        let addressing = PodAddressing::of_class(&node_class.spec);
        let (mut plan, reservation_slot) =
            self.plan_and_take_reservation(claim, &mut catalog, &status, addressing)?;
        let placement = placement_group
            .as_ref()
            .map(|group| launch_placement(claim, group))
            .transpose()?;
        let subnet_lease = self.lease_subnets(claim, &status, &mut plan)?;

        let mut resolved_class = (*node_class).clone();
        resolved_class.status = Some(status.clone());
        let template_inputs = TemplateInputs {
            claim,
            node_class: &resolved_class,
            plan: &plan,
            placement: placement.as_ref(),
            catalog: &catalog,
        };
        let overrides = self.ensure_launch_templates(&template_inputs).await?;
        let mut request = self.fleet_request(claim, &node_class, &status, &plan, overrides, prioritized);
        let launched = self.create_fleet(&mut request, &template_inputs).await?;
        if let Some(slot) = reservation_slot {
            slot.launched(Instant::now());
        }
        subnet_lease.launched(&launched.zone, Instant::now());

        let instance = self
            .launched_instance(&launched, &plan, &status, placement.as_ref(), request.tags)
            .await;
        self.instances.insert(instance.clone());
        let entry = catalog.iter().find(|t| t.name == launched.instance_type);
        Ok(self.hydrate(claim, &node_class, &status, &instance, entry))
    }

    /// The claim's EC2NodeClass, fresh from the source; a missing or deleting class is `NodeClassNotReady`.
    async fn launchable_class(&self, claim: &NodeClaim) -> Result<Arc<EC2NodeClass>, CloudProviderError> {
        let class_name = &claim.spec.node_class_ref.name;
        let node_class = self
            .node_class(class_name)
            .await?
            .ok_or_else(|| not_ready(class_name, "EC2NodeClass not found"))?;
        if node_class.metadata.deletion_timestamp.is_some() {
            return Err(not_ready(class_name, "EC2NodeClass is being deleted"));
        }
        Ok(node_class)
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
        self.record_resolution(node_class, &resolution);
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

    /// Leases the addresses `plan` will use from the class's subnets. The subnets are chosen again as the
    /// addresses are leased: another launch may have taken some since the plan was made.
    fn lease_subnets(
        &self,
        claim: &NodeClaim,
        status: &EC2NodeClassStatus,
        plan: &mut LaunchPlan,
    ) -> Result<SubnetLease, CloudProviderError> {
        let subnet_lease = self.subnet_ips.lease(&status.subnets, &plan.addresses);
        if !plan.use_subnets(&subnet_lease.subnets()) {
            return Err(CloudProviderError::InsufficientCapacity {
                message: format!(
                    "no subnet of EC2NodeClass {} has free IP addresses in the zones of the offerings \
                     NodeClaim {} allows",
                    claim.spec.node_class_ref.name,
                    claim.metadata.name.as_deref().unwrap_or_default()
                ),
                offerings: Vec::new(),
            });
        }
        Ok(subnet_lease)
    }

    /// The CreateFleet input for `plan` under the templates of `overrides`, tagged for the cluster, the NodePool,
    /// the class and the claim.
    fn fleet_request(
        &self,
        claim: &NodeClaim,
        node_class: &EC2NodeClass,
        status: &EC2NodeClassStatus,
        plan: &LaunchPlan,
        overrides: Vec<LaunchOverride>,
        prioritized: bool,
    ) -> LaunchRequest {
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
            &claim.spec.node_class_ref.name,
            node_class.spec.tags.as_ref(),
        );
        tags.insert(AWS_TAG_NODECLAIM.into(), claim_name);
        LaunchRequest {
            launch_template_name: template_name,
            capacity_type: plan.capacity_type.clone(),
            reservation: plan.reservation.clone(),
            overrides,
            tags,
            zone_ids: status
                .subnets
                .iter()
                .filter_map(|s| Some((s.zone.clone(), s.zone_id.clone()?)))
                .collect(),
            context: node_class.spec.context.clone(),
            prioritized,
        }
    }

    /// Sends `request` through the fleet batcher ([`crate::fleet_batcher`], [`crate::launch`]). A cached
    /// template deleted behind our back (by hand, or by another process's garbage collection) fails the launch
    /// with [`LAUNCH_TEMPLATE_NOT_FOUND`]: the request's templates are forgotten, created again from
    /// `templates`, and the request sent once more.
    async fn create_fleet(
        &self,
        request: &mut LaunchRequest,
        templates: &TemplateInputs<'_>,
    ) -> Result<LaunchedInstance, CloudProviderError> {
        match self.fleet.launch(request).await {
            Err(CloudProviderError::Create { reason, .. }) if reason == LAUNCH_TEMPLATE_NOT_FOUND => {
                let cache = self.launch_templates();
                cache.forget(&request.launch_template_name);
                for name in request
                    .overrides
                    .iter()
                    .filter_map(|o| o.launch_template_name.as_ref())
                {
                    cache.forget(name);
                }
                request.overrides = self.ensure_launch_templates(templates).await?;
                self.fleet.launch(request).await
            }
            other => other,
        }
    }

    /// The instance EC2 launched as `get` would describe it (pending, in the plan's subnet of its zone, with
    /// its AMI, reservation and placement group), for the instance cache drift reads until EC2 is asked. A
    /// partition group's partition is read back from EC2 unless the claim pinned one.
    async fn launched_instance(
        &self,
        launched: &LaunchedInstance,
        plan: &LaunchPlan,
        status: &EC2NodeClassStatus,
        placement: Option<&PlacementTarget>,
        tags: BTreeMap<String, String>,
    ) -> Ec2Instance {
        let partition = match placement {
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
        Ec2Instance {
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
            placement_group: placement.map(|target| InstancePlacementGroup {
                id: Some(target.group.id.clone()),
                name: Some(target.group.name.clone()),
                partition,
            }),
            tags,
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
        claim_status.capacity = entry.map(|t| Arc::new(resource_list(&t.capacity)));
        claim_status.allocatable = entry.map(|t| Arc::new(resource_list(&t.allocatable())));
        hydrated
    }
}
