//! Garbage collection, both ways, every 2 minutes as upstream:
//! - an instance of this cluster that no NodeClaim owns is terminated: no claim of its name (a launch whose
//!   claim was lost, a controller killed between CreateFleet and the status write), or a claim of its name
//!   that records another instance (a second launch after a failed status write);
//! - a launched NodeClaim whose instance the provider no longer lists is deleted (the instance was terminated
//!   behind Karpenter's back), so its Node is drained and its pods find room elsewhere.

use std::{collections::HashSet, sync::Arc, time::Duration};

use karpenter_api::nodeclaim::NodeClaim;
use karpenter_core::cloudprovider::CloudProvider;
use karpenter_state::ClusterState;
use kube::{Api, Client, ResourceExt, api::DeleteParams};

use crate::ProvisionerError;

/// What one collection did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Collected {
    /// Provider IDs of instances terminated for want of a NodeClaim.
    pub instances: Vec<String>,
    /// NodeClaims deleted for want of an instance.
    pub node_claims: Vec<String>,
}

/// The garbage collector's context.
pub struct GarbageCollector {
    client: Client,
    state: ClusterState,
    cloud: Arc<dyn CloudProvider>,
    pub interval: Duration,
}

impl GarbageCollector {
    pub fn new(client: Client, state: ClusterState, cloud: Arc<dyn CloudProvider>) -> Self {
        Self {
            client,
            state,
            cloud,
            interval: Duration::from_secs(120),
        }
    }

    pub async fn run(&self) {
        loop {
            tokio::time::sleep(self.interval).await;
            if !self.state.synced() {
                continue;
            }
            let mut timer = karpenter_metrics::metrics().reconcile("nodeclaim.garbagecollection");
            match self.collect().await {
                Ok(c) if c != Collected::default() => {
                    tracing::info!(
                        controller = "nodeclaim.garbagecollection",
                        ?c,
                        "garbage collected"
                    )
                }
                Ok(_) => {}
                Err(error) => {
                    timer.failed();
                    tracing::warn!(controller = "nodeclaim.garbagecollection", category = error.category(), %error, "garbage collection failed")
                }
            }
        }
    }

    pub async fn collect(&self) -> Result<Collected, ProvisionerError> {
        let mut collected = Collected::default();
        let claims = self.state.node_claims.all();
        // A claim's instance is the one its status records; before the launch is recorded, any instance
        // carrying its name (the launch in flight).
        let recorded: std::collections::HashMap<String, Option<String>> = claims
            .iter()
            .map(|c| {
                (
                    c.name_any(),
                    c.status.as_ref().and_then(|s| s.provider_id.clone()),
                )
            })
            .collect();
        let instances = self.cloud.list().await?;
        let running: HashSet<String> = instances
            .iter()
            .filter_map(|i| i.status.as_ref()?.provider_id.clone())
            .collect();
        for instance in &instances {
            let id = instance.status.as_ref().and_then(|s| s.provider_id.as_deref());
            let owned = match recorded.get(&instance.name_any()) {
                None => false,
                Some(None) => true,
                Some(Some(recorded)) => Some(recorded.as_str()) == id,
            };
            if owned {
                continue;
            }
            match self.cloud.delete(instance).await {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
            if let Some(id) = instance.status.as_ref().and_then(|s| s.provider_id.clone()) {
                collected.instances.push(id);
            }
        }
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        for claim in &claims {
            let Some(id) = claim.status.as_ref().and_then(|s| s.provider_id.as_deref()) else {
                continue;
            };
            if running.contains(id) || claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            match api.delete(&claim.name_any(), &DeleteParams::default()).await {
                Ok(_) => collected.node_claims.push(claim.name_any()),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(collected)
    }
}
