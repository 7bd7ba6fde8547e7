//! The EC2NodeClass controller: a kube-runtime `Controller` over EC2NodeClasses, also woken by NodeClaims
//! (so a deleting class notices its last NodeClaim going). [`reconcile`] for one class:
//! - being deleted: waits while NodeClaims still reference it, then deletes its launch templates and the
//!   instance profile Karpenter made for its `spec.role`, and removes the `karpenter.k8s.aws/termination`
//!   finalizer;
//! - otherwise: adds the finalizer, resolves the selector terms ([`super::resolve`]; capacity reservations
//!   only with the ReservedCapacity gate on; their instance counts, the subnets' free address counts and the
//!   placement group are handed to the CloudProvider), creates or adopts the instance profile for `spec.role`
//!   ([`crate::instance_profile`]), runs the EC2 dry-run authorization checks on what was resolved
//!   ([`super::dry_run`], cached for 30 minutes), writes the status ([`super::status::compute_status`]) through the status subresource when it changed, writes the
//!   `karpenter.k8s.aws/ec2nodeclass-hash` and `-hash-version` annotations (re-hashing the class's NodeClaims
//!   first when the class carried another hash version, [`super::hash`]), hands the class to the
//!   CloudProvider's cache (launches and drift read it), and requeues after the refresh interval (upstream
//!   re-resolves subnets every minute and AMIs every few; a class with capacity reservation terms every minute,
//!   which keeps the reservations' instance counts current).
//!
//! The finalizer's decisions, the NodeClaims a class has and the hash annotations' rules are
//! karpenter-nodeclass's ([`karpenter_nodeclass::finalizer`], [`karpenter_nodeclass::claims`],
//! [`karpenter_nodeclass::hash`]); what is done on the way out (launch templates, instance profile) is this
//! controller's.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use karpenter_api::ec2nodeclass::{EC2NodeClass, EC2NodeClassStatus};
use karpenter_api::labels::AWS_NODECLASS_FINALIZER;
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_nodeclass::claims::{class_of, node_claims_using};
use karpenter_nodeclass::finalizer::{Deletion, TerminationFinalizer, set_finalizers};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::capacity_reservations::CAPACITY_RESERVATION_REFRESH;
use crate::client::AwsClients;
use crate::error::AwsError;
use crate::instance_profile::InstanceProfiles;
use crate::launch_template::LaunchTemplates;
use crate::node_classes::NodeClassCache;
use crate::placement_groups::ResolvedPlacementGroups;
use crate::settings::AwsSettings;

use super::dry_run::DryRunCache;
use super::hash::EC2NODECLASS_HASH;
use super::status::Resolution;

/// How long a deleting class waits before looking at its NodeClaims again (they also wake it).
pub const NODE_CLAIM_WAIT: Duration = Duration::from_secs(10);
/// The requeue after a failed reconcile.
pub const ERROR_REQUEUE: Duration = Duration::from_secs(30);
/// The field manager of the controller's patches.
pub const FIELD_MANAGER: &str = "karpenter-ec2nodeclass";
/// The finalizer that holds an EC2NodeClass while NodeClaims use it.
pub const TERMINATION: TerminationFinalizer = TerminationFinalizer(AWS_NODECLASS_FINALIZER);

/// What the controller needs of the CloudProvider: the clients and caches a class's resolution reads and
/// fills. A trait, implemented by [`crate::cloud_provider::AwsCloudProvider`], so this controller does not
/// depend on the provider, which depends on this module's [`super::resolve`] and [`super::status`].
#[async_trait::async_trait]
pub trait NodeClassBackend: Send + Sync {
    fn clients(&self) -> &AwsClients;
    fn settings(&self) -> &AwsSettings;
    /// The Kubernetes minor version (`1.33`) AMI aliases resolve for.
    fn kubernetes_version(&self) -> String;
    fn launch_templates(&self) -> LaunchTemplates;
    fn instance_profiles(&self) -> InstanceProfiles;
    /// The classes launches and drift read, as this controller last resolved them.
    fn node_class_cache(&self) -> &Arc<NodeClassCache>;
    fn placement_groups(&self) -> &Arc<ResolvedPlacementGroups>;
    fn dry_run_cache(&self) -> &Arc<DryRunCache>;
    /// Hands what `resolution` found for `node_class` to launches: EC2's instance counts of its capacity
    /// reservations, its subnets' free addresses, its placement group.
    fn record_resolution(&self, node_class: &EC2NodeClass, resolution: &Resolution);
    /// Creates (or adopts) the instance profile of a class with `spec.role` and no `spec.instanceProfile`;
    /// None for other classes.
    async fn ensure_instance_profile(&self, node_class: &EC2NodeClass) -> Option<Result<String, AwsError>>;
}

/// What the controller works with.
pub struct Context {
    pub client: kube::Client,
    pub provider: Arc<dyn NodeClassBackend>,
}

/// The status as a merge patch: every field present, so an emptied list or a dropped instance profile is
/// written too.
fn status_patch(status: &EC2NodeClassStatus) -> serde_json::Value {
    json!({"status": {
        "amis": status.amis,
        "subnets": status.subnets,
        "securityGroups": status.security_groups,
        "capacityReservations": status.capacity_reservations,
        "instanceProfile": status.instance_profile,
        "conditions": status.conditions,
    }})
}

/// Reconciles one EC2NodeClass; see the module documentation.
pub async fn reconcile(class: Arc<EC2NodeClass>, ctx: Arc<Context>) -> Result<Action, AwsError> {
    let api: Api<EC2NodeClass> = Api::all(ctx.client.clone());
    let name = class.name_any();

    if class.metadata.deletion_timestamp.is_some() {
        let claims = node_claims_using::<EC2NodeClass>(&ctx.client, &name).await?;
        match TERMINATION.on_deletion(&class.metadata, claims) {
            Deletion::WaitForNodeClaims(claims) => {
                tracing::info!(
                    ec2nodeclass = %name, node_claims = claims.len(),
                    "WaitingOnNodeClaimTermination: the EC2NodeClass is deleted once its NodeClaims are"
                );
                return Ok(Action::requeue(NODE_CLAIM_WAIT));
            }
            Deletion::Finalize => {
                // Its launch templates and the instance profile Karpenter made for the role go with the class.
                ctx.provider.launch_templates().delete_class(&name).await?;
                if class.spec.instance_profile.is_none() && class.spec.role.is_some() {
                    ctx.provider.instance_profiles().delete(&name).await?;
                }
                set_finalizers(&api, &class, TERMINATION.removed(&class.metadata)).await?;
            }
            Deletion::Released => {}
        }
        ctx.provider.node_class_cache().remove(&name);
        ctx.provider.placement_groups().remove(&name);
        ctx.provider.dry_run_cache().remove(&name);
        return Ok(Action::await_change());
    }

    let mut class = (*class).clone();
    if let Some(finalizers) = TERMINATION.added(&class.metadata) {
        set_finalizers(&api, &class, finalizers).await?;
        // The patch bumped the resourceVersion; later writes need no precondition.
    }

    let now = Timestamp::now();
    let settings = ctx.provider.settings();
    let mut resolution = super::resolve(
        ctx.provider.clients(),
        &class,
        &ctx.provider.kubernetes_version(),
        settings.reserved_capacity,
        now,
    )
    .await;
    ctx.provider.record_resolution(&class, &resolution);
    resolution.instance_profile = ctx.provider.ensure_instance_profile(&class).await;
    // The dry runs are built from what was resolved, so they come after it.
    let resolved = super::status::compute_status(&class, &resolution, now);
    resolution.dry_run = super::dry_run::check_authorization(
        &ctx.provider.clients().ec2,
        ctx.provider.settings(),
        ctx.provider.dry_run_cache(),
        &class,
        &resolved,
    )
    .await;
    let status = super::status::compute_status(&class, &resolution, now);
    if class.status.as_ref() != Some(&status) {
        api.patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Merge(&status_patch(&status)),
        )
        .await?;
    }

    // Before the class takes the current version annotation: a failed re-hash is retried next reconcile.
    if super::hash::class_needs_rehash(&class) {
        let rehashed = super::hash::rehash_node_claims(&ctx.client, &class).await?;
        if rehashed > 0 {
            tracing::info!(ec2nodeclass = %name, node_claims = rehashed, "re-hashed NodeClaims stamped by another EC2NodeClass hash version");
        }
    }
    if let Some(annotations) = EC2NODECLASS_HASH.class_annotations(class.annotations(), &class.hash()) {
        let patch = json!({"metadata": {"annotations": annotations}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }

    let has_reservation_terms = class
        .spec
        .capacity_reservation_selector_terms
        .as_ref()
        .is_some_and(|terms| !terms.is_empty());
    class.status = Some(status);
    ctx.provider.node_class_cache().insert(class);
    if let Some(err) = resolution.into_error() {
        // The status says what failed; the error makes the controller retry sooner.
        return Err(err);
    }
    let mut requeue = settings
        .subnet_refresh_interval
        .min(settings.ami_refresh_interval);
    if settings.reserved_capacity && has_reservation_terms {
        requeue = requeue.min(CAPACITY_RESERVATION_REFRESH);
    }
    Ok(Action::requeue(requeue))
}

/// How often instance profiles of deleted EC2NodeClasses are looked for.
pub const INSTANCE_PROFILE_GC_INTERVAL: Duration = Duration::from_secs(600);

/// Deletes the cluster's instance profiles whose EC2NodeClass no longer exists. Returns their names.
pub async fn garbage_collect_instance_profiles(
    client: &kube::Client,
    provider: &dyn NodeClassBackend,
) -> Result<Vec<String>, AwsError> {
    let classes = Api::<EC2NodeClass>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let existing = classes.items.iter().map(ResourceExt::name_any).collect();
    provider.instance_profiles().garbage_collect(&existing).await
}

/// Runs [`garbage_collect_instance_profiles`] every [`INSTANCE_PROFILE_GC_INTERVAL`].
pub async fn run_instance_profile_gc(client: kube::Client, provider: Arc<dyn NodeClassBackend>) {
    let mut ticks = tokio::time::interval(INSTANCE_PROFILE_GC_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if let Err(err) = garbage_collect_instance_profiles(&client, provider.as_ref()).await {
            tracing::warn!(category = err.category(), error = %err, "garbage-collecting instance profiles");
        }
    }
}

/// How often unused launch templates are looked for.
pub const LAUNCH_TEMPLATE_GC_INTERVAL: Duration = Duration::from_secs(300);

/// Deletes the cluster's launch templates whose EC2NodeClass no longer exists, and those unused for the
/// template cache's TTL ([`crate::launch_template::LaunchTemplates::garbage_collect`]). Returns their names.
pub async fn garbage_collect_launch_templates(
    client: &kube::Client,
    provider: &dyn NodeClassBackend,
) -> Result<Vec<String>, AwsError> {
    let classes = Api::<EC2NodeClass>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let existing = classes.items.iter().map(ResourceExt::name_any).collect();
    provider
        .launch_templates()
        .garbage_collect(&existing, std::time::Instant::now(), Timestamp::now())
        .await
}

/// Runs [`garbage_collect_launch_templates`] every [`LAUNCH_TEMPLATE_GC_INTERVAL`].
pub async fn run_launch_template_gc(client: kube::Client, provider: Arc<dyn NodeClassBackend>) {
    let mut ticks = tokio::time::interval(LAUNCH_TEMPLATE_GC_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if let Err(err) = garbage_collect_launch_templates(&client, provider.as_ref()).await {
            tracing::warn!(category = err.category(), error = %err, "garbage-collecting launch templates");
        }
    }
}

/// Retries a failed reconcile after [`ERROR_REQUEUE`].
pub fn error_policy(class: Arc<EC2NodeClass>, err: &AwsError, _ctx: Arc<Context>) -> Action {
    tracing::warn!(ec2nodeclass = %class.name_any(), category = err.category(), error = %err, "reconciling");
    Action::requeue(ERROR_REQUEUE)
}

/// Runs the controller until the watch streams end (the runtime drops it on shutdown).
pub async fn run(ctx: Arc<Context>) {
    let classes: Api<EC2NodeClass> = Api::all(ctx.client.clone());
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    Controller::new(classes, watcher::Config::default())
        .watches(claims, watcher::Config::default(), |claim: NodeClaim| {
            class_of::<EC2NodeClass>(&claim)
        })
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(error = %err, "EC2NodeClass controller");
            }
        })
        .await;
}
