//! Kubernetes Events, deduplicated (shared by the controllers that report on what they see every pass:
//! disruption, repair): an identical event (same object, reason and message) is published at most
//! once per window of the controller's clock (upstream's recorder: 2 minutes), so a condition that holds for
//! hours does not write an Event every pass.

use std::{collections::HashMap, sync::Arc, time::Duration};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use karpenter_core::clock::Clock;
use kube::{
    Client,
    runtime::events::{Event, EventType, Recorder, Reporter},
};
use tokio::sync::Mutex;

/// How long an identical event is suppressed.
pub const DEDUPE_WINDOW: Duration = Duration::from_secs(120);

/// Publishes events as `karpenter`, deduplicated (see the module documentation).
pub struct DedupedRecorder {
    recorder: Recorder,
    clock: Arc<dyn Clock>,
    /// (object uid or name, reason, message) to when it was last published.
    published: Mutex<HashMap<(String, String, String), Timestamp>>,
    /// The size at which expired entries are next dropped (doubling, so pruning costs O(1) per call overall).
    prune_at: std::sync::atomic::AtomicUsize,
}

/// The smallest size at which the deduplication map is pruned.
const PRUNE_MIN: usize = 1024;

impl DedupedRecorder {
    pub fn new(client: Client, clock: Arc<dyn Clock>) -> Self {
        let reporter = Reporter {
            controller: "karpenter".into(),
            instance: None,
        };
        Self {
            recorder: Recorder::new(client, reporter),
            clock,
            published: Mutex::new(HashMap::new()),
            prune_at: std::sync::atomic::AtomicUsize::new(PRUNE_MIN),
        }
    }

    /// Publishes a Warning on `regarding` unless the same was published within the window. Returns whether it
    /// was published. A failure to publish is logged, not returned: an event is never worth failing a pass for.
    pub async fn warn(&self, regarding: &ObjectReference, reason: &str, message: &str) -> bool {
        self.publish(EventType::Warning, regarding, reason, message).await
    }

    /// Publishes a Normal event, as [`DedupedRecorder::warn`] does a Warning.
    pub async fn normal(&self, regarding: &ObjectReference, reason: &str, message: &str) -> bool {
        self.publish(EventType::Normal, regarding, reason, message).await
    }

    async fn publish(
        &self,
        type_: EventType,
        regarding: &ObjectReference,
        reason: &str,
        message: &str,
    ) -> bool {
        let now = self.clock.now();
        let object = regarding
            .uid
            .clone()
            .or_else(|| regarding.name.clone())
            .unwrap_or_default();
        let key = (object, reason.to_string(), message.to_string());
        let window = SignedDuration::try_from(DEDUPE_WINDOW).unwrap_or(SignedDuration::MAX);
        {
            let mut published = self.published.lock().await;
            if published
                .get(&key)
                .is_some_and(|at| now.duration_since(*at) < window)
            {
                return false;
            }
            published.insert(key, now);
            // Forget expired entries now and then, not on every call: a pass may report thousands of nodes.
            if published.len() >= self.prune_at.load(std::sync::atomic::Ordering::Relaxed) {
                published.retain(|_, at| now.duration_since(*at) < window);
                self.prune_at.store(
                    (published.len() * 2).max(PRUNE_MIN),
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
        }
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(message.to_string()),
            action: reason.to_string(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, regarding).await {
            tracing::debug!(%error, reason, "publishing an event failed");
        }
        true
    }
}
