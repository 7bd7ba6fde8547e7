//! The dry-run authorization checks behind an EC2NodeClass's ValidationSucceeded (upstream's validation
//! reconciler). Once the class's AMIs, subnets, security groups and instance profile are resolved, the
//! controller sends CreateFleet, CreateLaunchTemplate and RunInstances with `DryRun=true`, built the way a
//! launch of the class would build them: its launch template for one of its AMIs ([`LaunchTemplateSpec`]), a
//! subnet, its security groups and instance profile, and the launch tags. EC2 answers `DryRunOperation` when the
//! call would have been allowed, and `UnauthorizedOperation` when the controller's IAM policy refuses it (a
//! missing action, a condition on a tag or a resource), so a class nothing can be launched with says so before
//! the first launch fails.
//!
//! - Order of verdicts: a spec that breaks the CRD's rules keeps SpecValidationFailed and nothing is called;
//!   dependencies not resolved (AMIsReady, SubnetsReady, SecurityGroupsReady or InstanceProfileReady not True)
//!   give DependenciesNotReady; `DISABLE_DRY_RUN` gives True with reason DryRunDisabled; then the three calls
//!   in turn, the first that is refused naming its call (CreateFleetAuthCheckFailed, ...).
//! - Any error but `DryRunOperation` counts as refused, except throttling, an unreachable endpoint, and
//!   RunInstances not knowing an instance profile IAM has just created (IAM is eventually consistent, so
//!   upstream retries too): those decide nothing ([`DryRunOutcome::Inconclusive`]) and are asked again.
//! - Verdicts are cached per class for [`DRY_RUN_CACHE_TTL`], keyed by the class's hash and everything the
//!   calls were built from ([`cache`]), so the reconcile every minute does not call EC2 again; a changed class
//!   or resolution is checked at once.
//! - Each call is sent once, without the SDK's retries: a throttled check waits for the next reconcile.

pub mod cache;

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::types::{
    BlockDeviceMapping, EbsBlockDevice, HttpTokensState, IamInstanceProfileSpecification,
    InstanceMetadataEndpointState, InstanceMetadataOptionsRequest, InstanceMetadataProtocolState,
    InstanceType, ResourceType, Tag, TagSpecification, VolumeType,
};
use karpenter_api::common::{ConditionStatus, find_condition};
use karpenter_api::ec2nodeclass::{Ami, EC2NodeClass, EC2NodeClassStatus, conditions, fnv1a64, reasons};
use serde::Serialize;

use crate::error::AwsError;
use crate::launch::{LaunchOverride, LaunchRequest, create_fleet_request};
use crate::launch_template::{LaunchTemplateSpec, create_launch_template_request};
use crate::settings::AwsSettings;
use crate::tags::launch_tags;

pub use cache::DryRunCache;

/// How long a verdict is trusted (upstream's validation cache).
pub const DRY_RUN_CACHE_TTL: Duration = Duration::from_secs(30 * 60);

/// The error code of a dry run EC2 would have allowed.
pub const DRY_RUN_OPERATION: &str = "DryRunOperation";
/// What EC2 answers a dry run its caller's IAM policies refuse: the only answer that fails a class.
pub const UNAUTHORIZED_OPERATION: &str = "UnauthorizedOperation";

/// The conditions that must be True before the calls can be built.
const DEPENDENCIES: [&str; 4] = [
    conditions::AMIS_READY,
    conditions::SUBNETS_READY,
    conditions::SECURITY_GROUPS_READY,
    conditions::INSTANCE_PROFILE_READY,
];

/// One of the checked calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthCheck {
    CreateFleet,
    CreateLaunchTemplate,
    RunInstances,
}

impl AuthCheck {
    /// In the order they are sent (a launch's order).
    pub const ALL: [Self; 3] = [Self::CreateFleet, Self::CreateLaunchTemplate, Self::RunInstances];

    /// The EC2 operation.
    pub fn operation(self) -> &'static str {
        match self {
            Self::CreateFleet => "CreateFleet",
            Self::CreateLaunchTemplate => "CreateLaunchTemplate",
            Self::RunInstances => "RunInstances",
        }
    }

    /// The ValidationSucceeded reason when it is refused.
    pub fn failure_reason(self) -> &'static str {
        match self {
            Self::CreateFleet => reasons::CREATE_FLEET_AUTH_CHECK_FAILED,
            Self::CreateLaunchTemplate => reasons::CREATE_LAUNCH_TEMPLATE_AUTH_CHECK_FAILED,
            Self::RunInstances => reasons::RUN_INSTANCES_AUTH_CHECK_FAILED,
        }
    }
}

/// What the checks concluded about a class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DryRunOutcome {
    /// Every call would have been allowed.
    Authorized,
    /// `DISABLE_DRY_RUN`: nothing was checked.
    Disabled,
    /// The calls cannot be built yet: says what is missing.
    DependenciesNotReady(String),
    /// A call was refused: its reason and what EC2 said.
    Failed { reason: &'static str, message: String },
    /// Nothing could be decided now (throttled, unreachable, an instance profile IAM does not know yet).
    Inconclusive(String),
}

impl DryRunOutcome {
    /// Whether the verdict holds for the cache's lifetime (the others are asked again next time).
    pub fn is_cacheable(&self) -> bool {
        matches!(self, Self::Authorized | Self::Failed { .. })
    }
}

/// What the three calls are built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunInputs {
    /// The class's launch template for the AMI checked (image, security groups, instance profile, metadata
    /// options, block devices, tags, network interfaces).
    pub template: LaunchTemplateSpec,
    pub instance_type: String,
    pub subnet_id: String,
    pub zone: String,
    /// The class's other subnets, in its status's order: RunInstances tries them in turn when the first one's
    /// answer does not authorize it (a subnet may be full or gone; the policies are not per subnet).
    pub other_subnet_ids: Vec<String>,
    /// The tags of the instances, volumes and fleet (no NodePool yet: its tag is empty, as upstream's).
    pub tags: BTreeMap<String, String>,
}

impl DryRunInputs {
    /// The cache key of a class whose drift hash is `class_hash` checked with these inputs.
    pub fn cache_key(&self, class_hash: &str) -> String {
        let content = serde_json::to_vec(self).unwrap_or_default();
        format!("{class_hash}:{:016x}", fnv1a64(&content))
    }
}

/// A general-purpose type of `ami`'s architecture that every region offers.
fn instance_type_for(ami: &Ami) -> &'static str {
    let arm64 = ami
        .requirements
        .iter()
        .any(|r| r.key == "kubernetes.io/arch" && r.values.iter().flatten().any(|v| v == "arm64"));
    if arm64 { "m6g.large" } else { "m5.large" }
}

/// Whether `ami` runs plain instance types: GPU and accelerator variants require their devices to exist
/// (upstream prefers the standard variant too; their snapshots can outgrow the class's volumes).
fn is_standard(ami: &Ami) -> bool {
    ami.requirements.iter().all(|r| r.operator != "Exists")
}

/// The calls' inputs for `node_class` with `status` (as resolved so far) in cluster `cluster_name`; why not
/// yet when a dependency is not ready.
pub fn dry_run_inputs(
    node_class: &EC2NodeClass,
    status: &EC2NodeClassStatus,
    cluster_name: &str,
) -> Result<DryRunInputs, String> {
    let waiting: Vec<&str> = DEPENDENCIES
        .into_iter()
        .filter(|type_| {
            find_condition(&status.conditions, type_).is_none_or(|c| c.status != ConditionStatus::True)
        })
        .collect();
    if !waiting.is_empty() {
        return Err(format!("awaiting {}", waiting.join(", ")));
    }
    let ami = status
        .amis
        .iter()
        .find(|a| is_standard(a))
        .or_else(|| status.amis.first())
        .ok_or_else(|| "awaiting AMIs".to_string())?;
    let subnet = status
        .subnets
        .first()
        .ok_or_else(|| "awaiting subnets".to_string())?;
    let mut resolved = node_class.clone();
    resolved.status = Some(status.clone());
    // No NodePool is launching: the NodePool tag is empty, as in upstream's check, and present, as the
    // policies' conditions on karpenter.sh/nodepool require.
    let template = LaunchTemplateSpec::from_node_class(&resolved, &ami.id, cluster_name, "")
        .map_err(|e| e.to_string())?;
    if template.instance_profile.is_none() {
        return Err("awaiting the instance profile".into());
    }
    let class_name = node_class.metadata.name.as_deref().unwrap_or_default();
    Ok(DryRunInputs {
        instance_type: instance_type_for(ami).to_string(),
        subnet_id: subnet.id.clone(),
        zone: subnet.zone.clone(),
        other_subnet_ids: status.subnets.iter().skip(1).map(|s| s.id.clone()).collect(),
        tags: launch_tags(cluster_name, "", class_name, node_class.spec.tags.as_ref()),
        template,
    })
}

/// What `check`'s answer decides: nothing when it would have been allowed, else the outcome.
pub fn judge(check: AuthCheck, answer: Result<(), AwsError>) -> Option<DryRunOutcome> {
    let err = match answer {
        // EC2 never performs a dry run; an endpoint that did has accepted the call all the same.
        Ok(()) => return None,
        Err(err) if err.code() == Some(DRY_RUN_OPERATION) => return None,
        Err(err) => err,
    };
    let operation = check.operation();
    // As upstream reads it: a dry run answers DryRunOperation or UnauthorizedOperation; anything else (throttling,
    // an unreachable endpoint, an instance profile IAM does not know yet, an unexpected error) says nothing about
    // the policies, so it is asked again rather than held against the class for the cache's lifetime.
    Some(if err.code() == Some(UNAUTHORIZED_OPERATION) {
        DryRunOutcome::Failed {
            reason: check.failure_reason(),
            message: format!("ec2:{operation} dry run failed: {err}"),
        }
    } else {
        DryRunOutcome::Inconclusive(format!("ec2:{operation} dry run could not be judged: {err}"))
    })
}

/// The CreateFleet a launch of `inputs` sends: one on-demand override in the checked subnet.
fn fleet_request(inputs: &DryRunInputs) -> LaunchRequest {
    LaunchRequest {
        launch_template_name: inputs.template.name(),
        capacity_type: crate::instance_types::CAPACITY_TYPE_ON_DEMAND.to_string(),
        reservation: None,
        overrides: vec![LaunchOverride {
            instance_type: inputs.instance_type.clone(),
            zone: inputs.zone.clone(),
            subnet_id: inputs.subnet_id.clone(),
            price: 0.0,
            image_id: None,
            launch_template_name: None,
        }],
        tags: inputs.tags.clone(),
        zone_ids: BTreeMap::new(),
        context: None,
        prioritized: false,
    }
}

/// RunInstances in each of the class's subnets in turn until one is authorized, as upstream checks it; when none
/// is, the first subnet's answer is the verdict.
async fn run_instances_in_any_subnet(
    ec2: &aws_sdk_ec2::Client,
    inputs: &DryRunInputs,
) -> Result<(), AwsError> {
    let mut first_answer = None;
    for subnet_id in std::iter::once(&inputs.subnet_id).chain(&inputs.other_subnet_ids) {
        match send_run_instances(ec2, inputs, subnet_id).await {
            Ok(()) => return Ok(()),
            Err(err) if err.code() == Some(DRY_RUN_OPERATION) => return Ok(()),
            Err(err) => {
                first_answer.get_or_insert(err);
            }
        }
    }
    first_answer.map_or(Ok(()), Err)
}

/// A RunInstances of one instance from the template's parts, in `subnet_id`, tagged like a launch.
async fn send_run_instances(
    ec2: &aws_sdk_ec2::Client,
    inputs: &DryRunInputs,
    subnet_id: &str,
) -> Result<(), AwsError> {
    let template = &inputs.template;
    let tags: Vec<Tag> = inputs
        .tags
        .iter()
        .map(|(key, value)| Tag::builder().key(key).value(value).build())
        .collect();
    let metadata = &template.metadata_options;
    let devices: Vec<BlockDeviceMapping> = template
        .block_devices
        .iter()
        .map(|device| {
            BlockDeviceMapping::builder()
                .device_name(&device.device_name)
                .ebs(
                    EbsBlockDevice::builder()
                        .set_volume_size(device.volume_size_gib)
                        .set_volume_type(device.volume_type.as_deref().map(VolumeType::from))
                        .set_iops(device.iops)
                        .set_throughput(device.throughput)
                        .set_encrypted(device.encrypted)
                        .set_kms_key_id(device.kms_key_id.clone())
                        .set_delete_on_termination(device.delete_on_termination)
                        .set_snapshot_id(device.snapshot_id.clone())
                        .build(),
                )
                .build()
        })
        .collect();
    ec2.run_instances()
        .dry_run(true)
        .image_id(&template.image_id)
        .instance_type(InstanceType::from(inputs.instance_type.as_str()))
        .min_count(1)
        .max_count(1)
        .subnet_id(subnet_id)
        .set_security_group_ids(Some(template.security_group_ids.clone()))
        .set_iam_instance_profile(
            template
                .instance_profile
                .as_ref()
                .map(|name| IamInstanceProfileSpecification::builder().name(name).build()),
        )
        .metadata_options(
            InstanceMetadataOptionsRequest::builder()
                .http_endpoint(InstanceMetadataEndpointState::from(
                    metadata.http_endpoint.as_str(),
                ))
                .http_protocol_ipv6(InstanceMetadataProtocolState::from(
                    metadata.http_protocol_ipv6.as_str(),
                ))
                .http_put_response_hop_limit(metadata.http_put_response_hop_limit)
                .http_tokens(HttpTokensState::from(metadata.http_tokens.as_str()))
                .build(),
        )
        .set_block_device_mappings((!devices.is_empty()).then_some(devices))
        // Everything RunInstances creates is tagged, as a launch tags it: the controller policies allow creating
        // an instance, volume or network interface only with the cluster's tags in the request.
        .set_tag_specifications(Some(
            [
                ResourceType::Instance,
                ResourceType::Volume,
                ResourceType::NetworkInterface,
            ]
            .into_iter()
            .map(|kind| {
                TagSpecification::builder()
                    .resource_type(kind)
                    .set_tags(Some(tags.clone()))
                    .build()
            })
            .collect(),
        ))
        .customize()
        .config_override(single_attempt())
        .send()
        .await
        .map(drop)
        .map_err(|e| AwsError::from_sdk("RunInstances", e))
}

/// One attempt per call: the SDK's retries would only delay the next reconcile's answer.
fn single_attempt() -> aws_sdk_ec2::config::Builder {
    aws_sdk_ec2::config::Builder::default().retry_config(RetryConfig::disabled())
}

/// Sends `check` for `inputs` with `DryRun=true`.
async fn send(ec2: &aws_sdk_ec2::Client, check: AuthCheck, inputs: &DryRunInputs) -> Result<(), AwsError> {
    match check {
        AuthCheck::CreateFleet => create_fleet_request(ec2, &fleet_request(inputs), 1)
            .dry_run(true)
            .customize()
            .config_override(single_attempt())
            .send()
            .await
            .map(drop)
            .map_err(|e| AwsError::from_sdk("CreateFleet", e)),
        AuthCheck::CreateLaunchTemplate => create_launch_template_request(ec2, &inputs.template)
            .dry_run(true)
            .customize()
            .config_override(single_attempt())
            .send()
            .await
            .map(drop)
            .map_err(|e| AwsError::from_sdk("CreateLaunchTemplate", e)),
        AuthCheck::RunInstances => run_instances_in_any_subnet(ec2, inputs).await,
    }
}

/// Sends the three dry runs in turn; the first that decides something is the outcome.
pub async fn run_dry_runs(ec2: &aws_sdk_ec2::Client, inputs: &DryRunInputs) -> DryRunOutcome {
    for check in AuthCheck::ALL {
        if let Some(outcome) = judge(check, send(ec2, check, inputs).await) {
            return outcome;
        }
    }
    DryRunOutcome::Authorized
}

/// The dry-run verdict for `node_class` with `status` (its resolution so far, without this verdict), from the
/// cache when it holds one for the same inputs. None when the spec itself is invalid: that failure stands and
/// nothing is called. Takes only what it needs of the provider: EC2, the settings and the verdict cache.
pub async fn check_authorization(
    ec2: &aws_sdk_ec2::Client,
    settings: &AwsSettings,
    cache: &DryRunCache,
    node_class: &EC2NodeClass,
    status: &EC2NodeClassStatus,
) -> Option<DryRunOutcome> {
    if node_class.validate().is_err() {
        return None;
    }
    let mut inputs = match dry_run_inputs(node_class, status, &settings.cluster_name) {
        Ok(inputs) => inputs,
        Err(waiting) => return Some(DryRunOutcome::DependenciesNotReady(waiting)),
    };
    // The checked template is the one launches would create, IPv6 interfaces included, as upstream's check
    // goes through its launch template provider.
    inputs.template = inputs.template.with_ip_family(settings.cluster_ip_family());
    if settings.disable_dry_run {
        return Some(DryRunOutcome::Disabled);
    }
    let name = node_class.metadata.name.as_deref().unwrap_or_default();
    let key = inputs.cache_key(&node_class.hash());
    if let Some(cached) = cache.get(name, &key, std::time::Instant::now()) {
        return Some(cached);
    }
    let outcome = run_dry_runs(ec2, &inputs).await;
    if outcome.is_cacheable() {
        cache.insert(name, &key, outcome.clone(), std::time::Instant::now());
    }
    Some(outcome)
}

#[cfg(test)]
mod tests;
