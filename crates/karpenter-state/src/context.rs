//! What every controller is built on, assembled once by the operator: the API client, the state cache and the
//! clock (the system's, or the simulation's virtual one). Each controller keeps its own copy (all three are
//! cheap handles onto shared state) and makes its own Events recorder from it, so each dedupes only its own
//! events, as when each built one from its constructor's arguments.

use std::sync::Arc;

use karpenter_core::clock::Clock;
use kube::Client;

use crate::{ClusterState, events::DedupedRecorder};

/// The API client, state cache and clock a controller works with.
#[derive(Clone)]
pub struct ControllerContext {
    pub client: Client,
    pub state: ClusterState,
    pub clock: Arc<dyn Clock>,
}

impl ControllerContext {
    pub fn new(client: Client, state: ClusterState, clock: Arc<dyn Clock>) -> Self {
        Self { client, state, clock }
    }

    /// A new Events recorder writing through the client, timed by the clock.
    pub fn recorder(&self) -> DedupedRecorder {
        DedupedRecorder::new(self.client.clone(), Arc::clone(&self.clock))
    }
}

impl std::fmt::Debug for ControllerContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerContext").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::{
        core::v1::{Node, ObjectReference},
        events::v1::Event,
    };
    use karpenter_sim::{ApiServer, VirtualClock};
    use kube::{Api, api::ListParams};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn clones_share_the_cache_and_clock_and_each_recorder_dedupes_its_own_events() {
        let start = "2026-01-01T00:00:00Z".parse().unwrap();
        let clock = VirtualClock::starting_at(start);
        let server = ApiServer::new(clock);
        let cx = ControllerContext::new(server.client(), ClusterState::default(), Arc::new(clock));
        let copy = cx.clone();
        let node: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": "n1"}})).unwrap();
        cx.state.nodes.apply(node.into());
        assert!(copy.state.nodes.get("n1").is_some());
        assert_eq!(copy.clock.now(), start);

        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some("n1".into()),
            uid: Some("uid-n1".into()),
            ..ObjectReference::default()
        };
        let (first, second) = (cx.recorder(), copy.recorder());
        assert!(first.normal(&regarding, "Tested", "once").await);
        assert!(
            !first.normal(&regarding, "Tested", "once").await,
            "a repeat within the window"
        );
        assert!(
            second.normal(&regarding, "Tested", "once").await,
            "another controller's recorder"
        );
        let events = Api::<Event>::all(cx.client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        assert_eq!(events.len(), 2);
        assert!(
            events
                .iter()
                .all(|e| e.event_time.as_ref().map(|t| t.0) == Some(start))
        );
    }
}
