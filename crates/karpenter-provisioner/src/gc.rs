//! Garbage collection, both ways, every 2 minutes as upstream:
//! - an instance of this cluster that no NodeClaim owns is terminated: no claim records its provider ID and
//!   either no claim has its name (a launch whose claim was lost, a controller killed between CreateFleet and
//!   the status write) or the claim of its name records another instance (a second launch after a failed
//!   status write). An instance launched less than [`INSTANCE_GRACE`] ago is left alone, as upstream does: its
//!   claim's status or its NodeClaim tag (a batched launch is tagged after CreateFleet) may still be on the
//!   way;
//! - a launched NodeClaim whose instance the provider no longer lists is deleted (the instance was terminated
//!   behind Karpenter's back), so its Node is drained and its pods find room elsewhere.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use jiff::Timestamp;
use karpenter_api::nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
use karpenter_core::{
    clock::Clock,
    cloudprovider::{CloudProvider, InstanceSummary},
};
use karpenter_state::api_errors::ignore_not_found;
use karpenter_state::{ControllerContext, periodic::run_synced};
use kube::{Api, ResourceExt, api::DeleteParams};

use crate::ProvisionerError;

/// What one collection did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Collected {
    /// Provider IDs of instances terminated for want of a NodeClaim.
    pub instances: Vec<String>,
    /// NodeClaims deleted for want of an instance.
    pub node_claims: Vec<String>,
}

/// How old an instance must be before it is collected for want of a NodeClaim (upstream: 30 s).
pub const INSTANCE_GRACE: Duration = Duration::from_secs(30);

/// The garbage collector's context.
pub struct GarbageCollector {
    cx: ControllerContext,
    cloud: Arc<dyn CloudProvider>,
    pub interval: Duration,
}

/// Who owns the instances: each NodeClaim's name with the provider ID its status records (`None` before the
/// launch is recorded), and every recorded provider ID.
struct Owners {
    by_name: HashMap<String, Option<String>>,
    provider_ids: HashSet<String>,
}

impl Owners {
    fn of(claims: &[Arc<NodeClaim>]) -> Self {
        let by_name: HashMap<String, Option<String>> = claims
            .iter()
            .map(|c| {
                (
                    c.name_any(),
                    c.status.as_ref().and_then(|s| s.provider_id.clone()),
                )
            })
            .collect();
        let provider_ids = by_name.values().flatten().cloned().collect();
        Self {
            by_name,
            provider_ids,
        }
    }

    /// Whether `instance` (as the provider lists it) is to be terminated at `now`.
    fn is_orphan(&self, instance: &InstanceSummary, now: Timestamp) -> bool {
        if self.provider_ids.contains(&instance.provider_id) {
            return false;
        }
        let grace = jiff::SignedDuration::try_from(INSTANCE_GRACE).unwrap_or_default();
        if instance
            .launched_at
            .is_some_and(|at| now.duration_since(at) < grace)
        {
            return false;
        }
        match instance.node_claim.as_ref().and_then(|n| self.by_name.get(n)) {
            None => true,
            // The claim's launch is in flight: this is its instance.
            Some(None) => false,
            Some(Some(recorded)) => *recorded != instance.provider_id,
        }
    }
}

/// The NodeClaim `CloudProvider::delete` terminates an orphan instance through: its name and provider ID.
fn claim_of_orphan(instance: &InstanceSummary) -> NodeClaim {
    let mut claim = NodeClaim::new(
        instance.node_claim.as_deref().unwrap_or_default(),
        NodeClaimSpec::default(),
    );
    claim.status = Some(NodeClaimStatus {
        provider_id: Some(instance.provider_id.clone()),
        ..NodeClaimStatus::default()
    });
    claim
}

impl GarbageCollector {
    pub fn new(cx: ControllerContext, cloud: Arc<dyn CloudProvider>) -> Self {
        Self {
            cx,
            cloud,
            interval: Duration::from_secs(120),
        }
    }

    pub async fn run(&self) {
        // The first pass waits one interval too.
        tokio::time::sleep(self.interval).await;
        run_synced(&self.cx.state, "nodeclaim.garbagecollection", self.interval, || async {
            match self.collect().await {
                Ok(c) => {
                    if c != Collected::default() {
                        tracing::info!(controller = "nodeclaim.garbagecollection", ?c, "garbage collected");
                    }
                    true
                }
                Err(error) => {
                    tracing::warn!(controller = "nodeclaim.garbagecollection", category = error.category(), %error, "garbage collection failed");
                    false
                }
            }
        })
        .await;
    }

    pub async fn collect(&self) -> Result<Collected, ProvisionerError> {
        let mut collected = Collected::default();
        let claims = self.cx.state.node_claims.all();
        let owners = Owners::of(&claims);
        let instances = self.cloud.list_instances().await?;
        let running: HashSet<&str> = instances.iter().map(|i| i.provider_id.as_str()).collect();
        let now = self.cx.clock.now();
        for instance in &instances {
            if !owners.is_orphan(instance, now) {
                continue;
            }
            match self.cloud.delete(&claim_of_orphan(instance)).await {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
            collected.instances.push(instance.provider_id.clone());
        }
        let api: Api<NodeClaim> = Api::all(self.cx.client.clone());
        for claim in &claims {
            let Some(id) = claim.status.as_ref().and_then(|s| s.provider_id.as_deref()) else {
                continue;
            };
            if running.contains(id) || claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if ignore_not_found(api.delete(&claim.name_any(), &DeleteParams::default()).await)?.is_some() {
                collected.node_claims.push(claim.name_any());
            }
        }
        Ok(collected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-01-01T00:10:00Z";

    fn claim(name: &str, provider_id: Option<&str>) -> Arc<NodeClaim> {
        let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": name},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
        }))
        .unwrap();
        claim.status = Some(NodeClaimStatus {
            provider_id: provider_id.map(str::to_string),
            ..NodeClaimStatus::default()
        });
        Arc::new(claim)
    }

    /// An instance as the provider lists it: named after the NodeClaim its tag names, launched at `launched`.
    fn instance(name: &str, provider_id: &str, launched: &str) -> InstanceSummary {
        InstanceSummary {
            provider_id: provider_id.into(),
            node_claim: Some(name.into()),
            launched_at: Some(launched.parse().unwrap()),
        }
    }

    #[test]
    fn an_instance_is_an_orphan_only_when_no_claim_owns_it_and_it_is_past_the_grace() {
        let now: Timestamp = NOW.parse().unwrap();
        let old = "2026-01-01T00:00:00Z";
        let owners = Owners::of(&[claim("recorded", Some("aws:///a/i-1")), claim("in-flight", None)]);
        assert!(!owners.is_orphan(&instance("recorded", "aws:///a/i-1", old), now));
        assert!(
            !owners.is_orphan(&instance("in-flight", "aws:///a/i-2", old), now),
            "the launch of a claim with no provider ID yet"
        );
        assert!(
            owners.is_orphan(&instance("gone", "aws:///a/i-3", old), now),
            "no claim of its name or provider ID"
        );
        assert!(
            owners.is_orphan(&instance("recorded", "aws:///a/i-4", old), now),
            "a second launch for a claim that records another instance"
        );
        // A batched launch whose NodeClaim tag has not been applied yet: listed under another name, but its
        // claim records its provider ID.
        assert!(!owners.is_orphan(&instance("i-1", "aws:///a/i-1", old), now));
        assert!(
            !owners.is_orphan(&instance("gone", "aws:///a/i-5", "2026-01-01T00:09:45Z"), now),
            "launched 15 s ago: its claim may not be written yet"
        );
        assert!(owners.is_orphan(&instance("gone", "aws:///a/i-6", "2026-01-01T00:09:29Z"), now));
        let untagged = InstanceSummary {
            node_claim: None,
            ..instance("", "aws:///a/i-7", old)
        };
        assert!(
            owners.is_orphan(&untagged, now),
            "no NodeClaim tag and no claim records it"
        );
    }
}
