//! The interruption controller. Messages come through core's `InterruptionSource` (the SQS queue on AWS, the
//! simulated cloud in `karpenter simulate`) and are acted on as upstream does:
//! - a spot interruption warning, a scheduled change or a state change (stopping, terminated) deletes the
//!   instance's NodeClaim at once: the terminator taints and drains the Node within PDBs while the instance
//!   still runs, and the provisioner makes room for the evicted pods straight away (no consolidation wait);
//! - a rebalance recommendation is logged only;
//! - a message for an instance no NodeClaim owns is ignored (it is not this cluster's).
//!
//! Not here yet (issue 6): marking the interrupted spot offering unavailable (the provider's cache), events
//! and metrics per message kind.

use std::sync::Arc;

use karpenter_api::nodeclaim::NodeClaim;
use karpenter_core::cloudprovider::{InterruptionEvent, InterruptionKind, InterruptionSource};
use karpenter_state::ClusterState;
use kube::{Api, Client, ResourceExt, api::DeleteParams};

/// What the controller did with one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// The NodeClaim (named) was deleted.
    Deleted(String),
    /// Informational (rebalance recommendation), or the NodeClaim is already being deleted.
    Noted,
    /// No NodeClaim owns the instance.
    NotOurs,
}

/// The controller's context.
pub struct InterruptionController {
    client: Client,
    state: ClusterState,
    source: Arc<dyn InterruptionSource>,
}

impl InterruptionController {
    pub fn new(client: Client, state: ClusterState, source: Arc<dyn InterruptionSource>) -> Self {
        Self {
            client,
            state,
            source,
        }
    }

    /// Handles messages until the source closes. A message that fails is logged; the next ones go on.
    pub async fn run(&self) {
        while let Some(events) = self.source.receive().await {
            for event in events {
                match self.handle(&event).await {
                    Ok(handled) => {
                        tracing::info!(provider_id = %event.provider_id, kind = ?event.kind, ?handled, "interruption")
                    }
                    Err(error) => {
                        tracing::warn!(provider_id = %event.provider_id, %error, "interruption not handled")
                    }
                }
            }
        }
    }

    pub async fn handle(&self, event: &InterruptionEvent) -> Result<Handled, kube::Error> {
        let claim = self.state.node_claims.all().into_iter().find(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|p| p == event.provider_id)
        });
        let Some(claim) = claim else {
            return Ok(Handled::NotOurs);
        };
        if event.kind == InterruptionKind::Rebalance || claim.metadata.deletion_timestamp.is_some() {
            return Ok(Handled::Noted);
        }
        let name = claim.name_any();
        match Api::<NodeClaim>::all(self.client.clone())
            .delete(&name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(Handled::Deleted(name)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Handled::Noted),
            Err(e) => Err(e),
        }
    }
}
