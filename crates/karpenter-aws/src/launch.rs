//! Launching instances: an instant CreateFleet over the cheapest offerings a NodeClaim allows, through the
//! launch templates of [`crate::launch_template`], for one instance ([`create_fleet`]) or for a batch of
//! launches with the same input ([`launch_instances`], used by [`crate::fleet_batcher`]). Offerings that come back with a capacity error are marked
//! unavailable; when nothing launched for lack of capacity the error is core's
//! `CloudProviderError::InsufficientCapacity`, which makes the next scheduling round pick something else.
//!
//! Follows upstream's `instance.Provider.Create` (pkg/providers/instance): spot uses the
//! price-capacity-optimized allocation strategy, on-demand lowest-price; a NodeClaim whose types NodeOverlays
//! repriced ([`LaunchRequest::prioritized`]) uses the prioritized variants instead (spot
//! capacity-optimized-prioritized, on-demand prioritized) with each override's priority its overlaid price, so
//! EC2 follows the overlaid order rather than its list prices; one TagSpecification each for the
//! instance, its volumes and the fleet. A launch into a capacity reservation ([`LaunchRequest::reservation`])
//! asks for on-demand capacity (`capacity-block` for a capacity block) through a launch template that targets
//! the reservation; when EC2 finds the reservation full (ReservationCapacityExceeded, or a capacity error) the
//! reservation's offering is marked unavailable and the error is InsufficientCapacity for capacity type
//! `reserved`, so the next round falls back to spot or on-demand.

use std::collections::BTreeMap;
use std::time::Instant;

use aws_sdk_ec2::operation::create_fleet::CreateFleetOutput;
use aws_sdk_ec2::operation::create_fleet::builders::CreateFleetFluentBuilder;
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest, FleetLaunchTemplateOverridesRequest,
    FleetLaunchTemplateSpecificationRequest, FleetOnDemandAllocationStrategy, FleetType, InstanceType,
    OnDemandOptionsRequest, ResourceType, SpotAllocationStrategy, SpotOptionsRequest, Tag, TagSpecification,
    TargetCapacitySpecificationRequest,
};
use karpenter_core::cloudprovider::{CloudProviderError, UnavailableOffering};

use crate::capacity_reservations::ReservationTarget;
use crate::error::{AwsError, is_reservation_capacity_code, is_unfulfillable_capacity_code};
use crate::instance_types::{CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT};
use crate::unavailable_offerings::UnavailableOfferings;

// Launch templates lived here first; callers still find them under this path.
pub use crate::launch_template::{LaunchTemplateSpec, ensure_launch_template};

fn tags(map: &BTreeMap<String, String>) -> Vec<Tag> {
    map.iter()
        .map(|(key, value)| Tag::builder().key(key).value(value).build())
        .collect()
}

/// One offering to try: an instance type in a zone, through one of the zone's subnets.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchOverride {
    pub instance_type: String,
    pub zone: String,
    pub subnet_id: String,
    /// The offering's price; overrides are tried cheapest first.
    pub price: f64,
    /// The AMI for this type when it differs from the launch template's (one fleet can then mix
    /// architectures, as upstream's one-template-per-AMI fleets do).
    pub image_id: Option<String>,
    /// The launch template for this override when it differs from the request's (types whose user data
    /// differs, for example in max pods, need their own template).
    pub launch_template_name: Option<String>,
}

/// A request for one instance.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchRequest {
    pub launch_template_name: String,
    /// `spot`, `on-demand` or `reserved`.
    pub capacity_type: String,
    /// The capacity reservation a `reserved` launch targets (its launch templates name it too).
    pub reservation: Option<ReservationTarget>,
    pub overrides: Vec<LaunchOverride>,
    /// Tags for the instance, its volumes and the fleet (karpenter.sh/nodepool, eks:eks-cluster-name, ...).
    pub tags: BTreeMap<String, String>,
    /// Zone → zone ID, for the `zone_id` label of launch failures.
    pub zone_ids: BTreeMap<String, String>,
    /// The EC2NodeClass's `spec.context`, CreateFleet's reserved `Context` field.
    pub context: Option<String>,
    /// The NodeClaim is marked `karpenter.sh/price-overlay-applied`: EC2 is to launch by the overrides'
    /// (overlaid) prices as priorities, not by its own prices.
    pub prioritized: bool,
}

/// `karpenter_cloudprovider_instance_launch_failures_total` for one failed offering.
pub fn record_launch_failure(zone: &str, zone_id: &str, capacity_type: &str, reason: &str) {
    karpenter_metrics::metrics()
        .cloudprovider_instance_launch_failures
        .get_or_create(&karpenter_metrics::LaunchFailureLabels {
            zone: zone.to_string(),
            zone_id: zone_id.to_string(),
            capacity_type: capacity_type.to_string(),
            reason: reason.to_string(),
        })
        .inc();
}

/// What was launched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchedInstance {
    pub instance_id: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
}

/// Launches one instance with an instant fleet. Capacity errors mark their offerings unavailable at `now`.
pub async fn create_fleet(
    ec2: &aws_sdk_ec2::Client,
    request: &LaunchRequest,
    unavailable: &UnavailableOfferings,
    now: Instant,
) -> Result<LaunchedInstance, CloudProviderError> {
    let result = launch_instances(ec2, request, 1, unavailable, now).await?;
    match result.instances.first() {
        Some(instance) => Ok(instance.clone()),
        None => Err(result.failure(request)),
    }
}

/// What one CreateFleet gave: the instances, and why the rest did not launch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetResult {
    pub instances: Vec<LaunchedInstance>,
    /// Offerings EC2 had no capacity for (now marked unavailable).
    pub unavailable: Vec<UnavailableOffering>,
    /// Other errors, as `code: message`.
    pub errors: Vec<String>,
}

impl FleetResult {
    /// The error of a launch of `request` that got no instance from this fleet: InsufficientCapacity when EC2
    /// reported only capacity errors (or none), else a failed launch.
    pub fn failure(&self, request: &LaunchRequest) -> CloudProviderError {
        if self.errors.is_empty() {
            CloudProviderError::InsufficientCapacity {
                message: format!(
                    "no {} capacity{} for {}",
                    request.capacity_type,
                    request
                        .reservation
                        .as_ref()
                        .map(|r| format!(" in capacity reservation {}", r.id))
                        .unwrap_or_default(),
                    if self.unavailable.is_empty() {
                        "the offerings asked for".to_string()
                    } else {
                        self.unavailable
                            .iter()
                            .map(|o| format!("{} in {}", o.instance_type, o.zone))
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ),
                offerings: self.unavailable.clone(),
            }
        } else {
            CloudProviderError::Create {
                reason: "LaunchFailed".into(),
                message: self.errors.join("; "),
            }
        }
    }
}

/// Launches `count` instances of `request` with one instant fleet. Capacity errors mark their offerings
/// unavailable at `now`. An error here means the call itself failed; a fleet that launched fewer says why in
/// its result.
pub async fn launch_instances(
    ec2: &aws_sdk_ec2::Client,
    request: &LaunchRequest,
    count: i32,
    unavailable: &UnavailableOfferings,
    now: Instant,
) -> Result<FleetResult, CloudProviderError> {
    if request.overrides.is_empty() {
        return Err(CloudProviderError::InsufficientCapacity {
            message: "no offering to launch".into(),
            offerings: Vec::new(),
        });
    }
    let output = send_create_fleet(ec2, request, count).await?;
    Ok(read_fleet_output(request, &output, unavailable, now))
}

async fn send_create_fleet(
    ec2: &aws_sdk_ec2::Client,
    request: &LaunchRequest,
    count: i32,
) -> Result<CreateFleetOutput, CloudProviderError> {
    create_fleet_request(ec2, request, count)
        .send()
        .await
        .map_err(|e| match AwsError::from_sdk("CreateFleet", e) {
            err @ (AwsError::Throttled { .. } | AwsError::Unreachable { .. }) => {
                CloudProviderError::Transient(err.to_string())
            }
            // A missing launch template or subnet is a failed launch, not a missing NodeClaim.
            err => CloudProviderError::Create {
                reason: err.code().unwrap_or("LaunchFailed").to_string(),
                message: err.to_string(),
            },
        })
}

/// The instant CreateFleet of `count` instances of `request`, ready to send (the EC2NodeClass dry runs send
/// the same request with `DryRun`).
pub fn create_fleet_request(
    ec2: &aws_sdk_ec2::Client,
    request: &LaunchRequest,
    count: i32,
) -> CreateFleetFluentBuilder {
    let spot = request.capacity_type == CAPACITY_TYPE_SPOT;
    // EC2 knows no "reserved" capacity: a reservation is filled with on-demand (or capacity-block) capacity.
    let target_capacity_type = match &request.reservation {
        Some(r) if r.is_capacity_block() => DefaultTargetCapacityType::CapacityBlock,
        Some(_) => DefaultTargetCapacityType::from(CAPACITY_TYPE_ON_DEMAND),
        None => DefaultTargetCapacityType::from(request.capacity_type.as_str()),
    };
    let overrides = sorted_overrides(request);
    // One launch template config per template, in the order of their cheapest override.
    let mut configs: Vec<(&str, Vec<&LaunchOverride>)> = Vec::new();
    for o in &overrides {
        let template = o
            .launch_template_name
            .as_deref()
            .unwrap_or(&request.launch_template_name);
        match configs.iter_mut().find(|(name, _)| *name == template) {
            Some((_, list)) => list.push(o),
            None => configs.push((template, vec![o])),
        }
    }
    let configs: Vec<FleetLaunchTemplateConfigRequest> = configs
        .into_iter()
        .map(|(template, list)| {
            FleetLaunchTemplateConfigRequest::builder()
                .launch_template_specification(
                    FleetLaunchTemplateSpecificationRequest::builder()
                        .launch_template_name(template)
                        .version("$Latest")
                        .build(),
                )
                .set_overrides(Some(
                    list.iter()
                        .map(|o| {
                            FleetLaunchTemplateOverridesRequest::builder()
                                .instance_type(InstanceType::from(o.instance_type.as_str()))
                                .subnet_id(&o.subnet_id)
                                .availability_zone(&o.zone)
                                .set_image_id(o.image_id.clone())
                                // EC2 launches the lowest priority number first; it reads priorities only
                                // under the prioritized strategies.
                                .set_priority(request.prioritized.then_some(o.price))
                                .build()
                        })
                        .collect(),
                ))
                .build()
        })
        .collect();
    let resources: &[ResourceType] = if request.tags.is_empty() {
        &[]
    } else {
        &[ResourceType::Instance, ResourceType::Volume, ResourceType::Fleet]
    };
    let tag_specifications: Vec<TagSpecification> = resources
        .iter()
        .cloned()
        .map(|resource| {
            TagSpecification::builder()
                .resource_type(resource)
                .set_tags(Some(tags(&request.tags)))
                .build()
        })
        .collect();
    let mut call = ec2
        .create_fleet()
        .r#type(FleetType::Instant)
        .set_launch_template_configs(Some(configs))
        .target_capacity_specification(
            TargetCapacitySpecificationRequest::builder()
                .total_target_capacity(count)
                .default_target_capacity_type(target_capacity_type)
                .build(),
        )
        .set_tag_specifications((!tag_specifications.is_empty()).then_some(tag_specifications))
        .set_context(request.context.clone());
    call = if spot {
        let strategy = if request.prioritized {
            SpotAllocationStrategy::CapacityOptimizedPrioritized
        } else {
            SpotAllocationStrategy::PriceCapacityOptimized
        };
        call.spot_options(
            SpotOptionsRequest::builder()
                .allocation_strategy(strategy)
                .build(),
        )
    } else {
        let strategy = if request.prioritized {
            FleetOnDemandAllocationStrategy::Prioritized
        } else {
            FleetOnDemandAllocationStrategy::LowestPrice
        };
        call.on_demand_options(
            OnDemandOptionsRequest::builder()
                .allocation_strategy(strategy)
                .build(),
        )
    };
    call
}

fn sorted_overrides(request: &LaunchRequest) -> Vec<LaunchOverride> {
    let mut overrides = request.overrides.clone();
    overrides.sort_by(|a, b| a.price.total_cmp(&b.price));
    overrides
}

/// The instances and errors of a CreateFleet answer to `request`; capacity errors mark their offerings
/// unavailable at `now`, and every error is counted in the launch failure metric.
pub fn read_fleet_output(
    request: &LaunchRequest,
    output: &CreateFleetOutput,
    unavailable: &UnavailableOfferings,
    now: Instant,
) -> FleetResult {
    let mut result = FleetResult::default();
    for error in output.errors() {
        let code = error.error_code().unwrap_or_default();
        let message = error.error_message().unwrap_or_default();
        let override_ = error.launch_template_and_overrides().and_then(|l| l.overrides());
        let instance_type = override_
            .and_then(|o| o.instance_type())
            .map(|t| t.as_str().to_string());
        let zone = override_.and_then(|o| o.availability_zone()).map(str::to_string);
        let capacity_type = match (&request.reservation, error.lifecycle()) {
            (None, Some(lifecycle)) => lifecycle.as_str().to_string(),
            _ => request.capacity_type.clone(),
        };
        let zone_name = zone.clone().unwrap_or_default();
        record_launch_failure(
            &zone_name,
            request.zone_ids.get(&zone_name).map_or("", String::as_str),
            &capacity_type,
            if code.is_empty() { "Unknown" } else { code },
        );
        if let Some(reservation) = &request.reservation
            && is_reservation_capacity_code(code)
        {
            unavailable.mark_reservation_unavailable(&reservation.id, now);
            result.unavailable.push(UnavailableOffering {
                instance_type: instance_type.unwrap_or_default(),
                zone: zone_name,
                capacity_type,
            });
            continue;
        }
        match (is_unfulfillable_capacity_code(code), instance_type, zone) {
            (true, Some(instance_type), Some(zone)) => {
                unavailable.mark_unavailable(&instance_type, &zone, &capacity_type, now);
                result.unavailable.push(UnavailableOffering {
                    instance_type,
                    zone,
                    capacity_type,
                });
            }
            _ => result.errors.push(format!("{code}: {message}")),
        }
    }

    let overrides = sorted_overrides(request);
    for instance in output.instances() {
        let Some(instance_type) = instance.instance_type().map(|t| t.as_str().to_string()) else {
            continue;
        };
        let Some(zone) = instance
            .availability_zone()
            .filter(|z| !z.is_empty())
            .or_else(|| {
                instance
                    .launch_template_and_overrides()
                    .and_then(|l| l.overrides())
                    .and_then(|o| o.availability_zone())
            })
            .or_else(|| {
                overrides
                    .iter()
                    .find(|o| o.instance_type == instance_type)
                    .map(|o| o.zone.as_str())
            })
            .map(str::to_string)
        else {
            continue;
        };
        let capacity_type = match (&request.reservation, instance.lifecycle()) {
            (None, Some(lifecycle)) => lifecycle.as_str().to_string(),
            _ => request.capacity_type.clone(),
        };
        // One entry may stand for several instances of the same offering.
        for instance_id in instance.instance_ids() {
            result.instances.push(LaunchedInstance {
                instance_id: instance_id.clone(),
                instance_type: instance_type.clone(),
                zone: zone.clone(),
                capacity_type: capacity_type.clone(),
            });
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(context: Option<&str>) -> LaunchRequest {
        LaunchRequest {
            launch_template_name: "karpenter.k8s.aws/template".into(),
            capacity_type: "on-demand".into(),
            reservation: None,
            overrides: vec![LaunchOverride {
                instance_type: "m5.large".into(),
                zone: "us-east-1a".into(),
                subnet_id: "subnet-a".into(),
                price: 0.096,
                image_id: None,
                launch_template_name: None,
            }],
            tags: BTreeMap::new(),
            zone_ids: BTreeMap::new(),
            context: context.map(str::to_string),
            prioritized: false,
        }
    }

    fn ec2() -> aws_sdk_ec2::Client {
        // A client that is never called: only the request is built.
        aws_sdk_ec2::Client::from_conf(
            aws_sdk_ec2::Config::builder()
                .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
                .region(aws_sdk_ec2::config::Region::new("us-east-1"))
                .build(),
        )
    }

    /// (instance type, priority) of each override of the built request, in order.
    fn priorities(call: &CreateFleetFluentBuilder) -> Vec<(String, Option<f64>)> {
        call.as_input()
            .get_launch_template_configs()
            .iter()
            .flatten()
            .flat_map(|c| c.overrides())
            .map(|o| {
                (
                    o.instance_type()
                        .map(|t| t.as_str().to_string())
                        .unwrap_or_default(),
                    o.priority(),
                )
            })
            .collect()
    }

    /// The on-demand and the spot allocation strategy of the built request.
    fn strategies(
        call: &CreateFleetFluentBuilder,
    ) -> (
        Option<FleetOnDemandAllocationStrategy>,
        Option<SpotAllocationStrategy>,
    ) {
        let input = call.as_input();
        (
            input
                .get_on_demand_options()
                .as_ref()
                .and_then(|o| o.allocation_strategy().cloned()),
            input
                .get_spot_options()
                .as_ref()
                .and_then(|o| o.allocation_strategy().cloned()),
        )
    }

    #[test]
    fn a_claim_repriced_by_node_overlays_launches_by_their_prices() {
        let mut overlaid = request(None);
        // The overlay made m6i.large the cheaper of the two; EC2's own prices have them level.
        overlaid.overrides.push(LaunchOverride {
            instance_type: "m6i.large".into(),
            price: 0.0864,
            ..overlaid.overrides[0].clone()
        });
        overlaid.prioritized = true;
        let call = create_fleet_request(&ec2(), &overlaid, 1);
        assert_eq!(
            strategies(&call).0,
            Some(FleetOnDemandAllocationStrategy::Prioritized)
        );
        assert_eq!(
            priorities(&call),
            vec![
                ("m6i.large".to_string(), Some(0.0864)),
                ("m5.large".to_string(), Some(0.096))
            ]
        );

        overlaid.capacity_type = "spot".into();
        let spot = create_fleet_request(&ec2(), &overlaid, 1);
        assert_eq!(
            strategies(&spot).1,
            Some(SpotAllocationStrategy::CapacityOptimizedPrioritized)
        );
    }

    #[test]
    fn a_claim_without_overlaid_prices_keeps_ec2_s_price_strategies() {
        let call = create_fleet_request(&ec2(), &request(None), 1);
        assert_eq!(
            strategies(&call).0,
            Some(FleetOnDemandAllocationStrategy::LowestPrice)
        );
        assert_eq!(priorities(&call), vec![("m5.large".to_string(), None)]);
        let mut spot = request(None);
        spot.capacity_type = "spot".into();
        let call = create_fleet_request(&ec2(), &spot, 1);
        assert_eq!(
            strategies(&call).1,
            Some(SpotAllocationStrategy::PriceCapacityOptimized)
        );
    }

    #[test]
    fn the_node_class_context_is_sent_in_create_fleet() {
        // A client that is never called: only the request is built.
        let ec2 = aws_sdk_ec2::Client::from_conf(
            aws_sdk_ec2::Config::builder()
                .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
                .region(aws_sdk_ec2::config::Region::new("us-east-1"))
                .build(),
        );
        let with = create_fleet_request(&ec2, &request(Some("ctx-0123456789")), 1);
        assert_eq!(with.as_input().get_context().as_deref(), Some("ctx-0123456789"));
        let without = create_fleet_request(&ec2, &request(None), 1);
        assert_eq!(without.as_input().get_context(), &None);
    }
}
