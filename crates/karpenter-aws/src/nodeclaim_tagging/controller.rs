//! The tagging controller (upstream's `nodeclaim.tagging`), every [`TAGGING_INTERVAL`]: tags each launched
//! NodeClaim's instance with what names it, at most one CreateTags per [`TaggingContext::create_tags_interval`]
//! (upstream: one a second). [`tagging_actions`] decides, [`reconcile`] carries the decisions out.
//!
//! - A claim with a Node gets `karpenter.sh/nodeclaim`, `Name` (the Node's name) and `eks:eks-cluster-name`,
//!   then the `karpenter.k8s.aws/tagged: "true"` annotation, after which it is left alone.
//! - A claim still registering gets `karpenter.sh/nodeclaim` when its instance is not known to carry it (its
//!   tagging after a batched launch failed, or the process restarted since the launch): garbage collection
//!   must not take the instance for an orphan meanwhile.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use karpenter_api::labels::{AWS_GROUP, AWS_TAG_EKS_CLUSTER_NAME, AWS_TAGGED_ANNOTATION};
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_state::api_errors::ignore_not_found;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::{InstanceTagLedger, InstanceTagger};
use crate::error::AwsError;
use crate::instance::parse_provider_id;
use crate::tags::node_claim_tags;

/// How often NodeClaims are checked.
pub const TAGGING_INTERVAL: Duration = Duration::from_secs(30);
/// Upstream's rate: one CreateTags a second.
pub const CREATE_TAGS_INTERVAL: Duration = Duration::from_secs(1);
/// How long the ledger keeps an instance no NodeClaim records (its claim's launch may not have recorded it
/// yet), by default: NodeClaim registration's timeout.
pub const UNOWNED_GRACE: Duration = Duration::from_secs(15 * 60);
/// The field manager of the annotation patches.
pub const FIELD_MANAGER: &str = "karpenter-nodeclaim-tagging";

/// What the controller works with.
pub struct TaggingContext {
    pub client: kube::Client,
    pub tagger: Arc<dyn InstanceTagger>,
    pub ledger: Arc<InstanceTagLedger>,
    pub cluster_name: String,
    /// The least time between two CreateTags calls ([`CREATE_TAGS_INTERVAL`]).
    pub create_tags_interval: Duration,
    /// How long the ledger keeps an instance no NodeClaim records ([`UNOWNED_GRACE`]).
    pub unowned_grace: Duration,
}

/// Tags for one NodeClaim's instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagAction {
    pub node_claim: String,
    pub instance_id: String,
    pub tags: BTreeMap<String, String>,
    /// Whether the claim has a Node, so the tags are complete and the claim is annotated afterwards.
    pub registered: bool,
}

/// The actions for `claims`; `is_applied` says whether an instance is known to carry its NodeClaim tag.
/// Claims of other providers, being deleted, already annotated or not launched are skipped.
pub fn tagging_actions(
    claims: &[NodeClaim],
    is_applied: impl Fn(&str) -> bool,
    cluster_name: &str,
) -> Vec<TagAction> {
    claims
        .iter()
        .filter(|claim| {
            claim.spec.node_class_ref.group == AWS_GROUP
                && claim.metadata.deletion_timestamp.is_none()
                && claim.annotations().get(AWS_TAGGED_ANNOTATION).map(String::as_str) != Some("true")
        })
        .filter_map(|claim| {
            let status = claim.status.as_ref()?;
            let instance_id = parse_provider_id(status.provider_id.as_deref()?).ok()?;
            let name = claim.name_any();
            match status.node_name.as_deref() {
                Some(node) => {
                    let mut tags = node_claim_tags(&name, Some(node));
                    tags.insert(AWS_TAG_EKS_CLUSTER_NAME.into(), cluster_name.into());
                    Some(TagAction {
                        node_claim: name,
                        instance_id: instance_id.to_string(),
                        tags,
                        registered: true,
                    })
                }
                None if !is_applied(instance_id) => Some(TagAction {
                    tags: node_claim_tags(&name, None),
                    node_claim: name,
                    instance_id: instance_id.to_string(),
                    registered: false,
                }),
                None => None,
            }
        })
        .collect()
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaggingOutcome {
    /// Registered claims whose instance got its tags, now annotated.
    pub tagged: Vec<String>,
    /// Registering claims whose instance got its NodeClaim tag.
    pub named: Vec<String>,
    /// Claims whose CreateTags failed (tried again next pass).
    pub failed: Vec<String>,
}

/// One pass: reads the NodeClaims, carries out [`tagging_actions`], and forgets ledger entries no claim
/// records anymore. A failed CreateTags is logged and left for the next pass.
pub async fn reconcile(ctx: &TaggingContext) -> Result<TaggingOutcome, AwsError> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let claims = api.list(&ListParams::default()).await?.items;
    let owned: HashSet<&str> = claims
        .iter()
        .filter_map(|c| c.status.as_ref()?.provider_id.as_deref())
        .filter_map(|id| parse_provider_id(id).ok())
        .collect();
    ctx.ledger
        .forget_unowned(&owned, Instant::now(), ctx.unowned_grace);

    let annotate = json!({"metadata": {"annotations": {AWS_TAGGED_ANNOTATION: "true"}}});
    let params = PatchParams::apply(FIELD_MANAGER);
    let mut outcome = TaggingOutcome::default();
    let actions = tagging_actions(&claims, |id| ctx.ledger.is_applied(id), &ctx.cluster_name);
    for (n, action) in actions.into_iter().enumerate() {
        if n > 0 {
            tokio::time::sleep(ctx.create_tags_interval).await;
        }
        if let Err(err) = ctx.tagger.tag_instance(&action.instance_id, &action.tags).await {
            tracing::warn!(
                nodeclaim = %action.node_claim, instance = %action.instance_id, error = %err,
                "tagging a NodeClaim's instance; trying again next pass"
            );
            outcome.failed.push(action.node_claim);
            continue;
        }
        if !action.registered {
            ctx.ledger.record_applied(&action.instance_id, Instant::now());
            outcome.named.push(action.node_claim);
            continue;
        }
        // Deleted meanwhile: nothing left to mark.
        ignore_not_found(
            api.patch(&action.node_claim, &params, &Patch::Merge(&annotate))
                .await,
        )?;
        ctx.ledger.forget(&action.instance_id);
        outcome.tagged.push(action.node_claim);
    }
    Ok(outcome)
}

/// [`reconcile`] every [`TAGGING_INTERVAL`] until dropped; a failed pass is logged and retried next time.
pub async fn run(ctx: TaggingContext) {
    let mut ticks = tokio::time::interval(TAGGING_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if let Err(err) = reconcile(&ctx).await {
            tracing::warn!(error = %err, category = err.category(), "nodeclaim tagging pass");
        }
    }
}

#[cfg(test)]
mod tests;
