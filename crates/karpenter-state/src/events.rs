//! Kubernetes Events, deduplicated (shared by the controllers that report on what they see every pass:
//! disruption, repair, interruption, the AWS reservation lifecycle): an identical event (same object, reason and
//! message) is published at most once per window of the controller's clock (upstream's recorder: 2 minutes), so
//! a condition that holds for hours does not write an Event every pass.
//!
//! Events are written as events.k8s.io/v1 objects directly, not through kube-runtime's `Recorder`, which keeps
//! every Event it wrote for six minutes to count repeats in a series: with a DisruptionBlocked event on each of
//! 5,000 nodes that cache held 10 MiB or more of the controller's memory. Here only the key of each event, its
//! object's name and its count are kept; a repeat within [`SERIES_WINDOW`] of the last one is a patch of that
//! Event's `series` (count and last time), as the Kubernetes event libraries do, and a new Event otherwise.

use std::{collections::HashMap, sync::Arc};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::{
    api::{core::v1::ObjectReference, events::v1::Event},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
};
use karpenter_core::clock::Clock;
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;
use tokio::sync::Mutex;

use crate::api_errors::is_not_found;

/// How long an identical event is suppressed.
pub const DEDUPE_WINDOW: SignedDuration = SignedDuration::from_secs(120);

/// How long after its last occurrence an event is counted in its series rather than written anew (the
/// Kubernetes event libraries' six minutes).
pub const SERIES_WINDOW: SignedDuration = SignedDuration::from_secs(360);

/// The reporting controller named on every event.
const REPORTER: &str = "karpenter";

/// The smallest size at which the deduplication map is pruned.
const PRUNE_MIN: usize = 1024;

/// An event written before: where it is, what it said and how often it happened.
struct Written {
    namespace: String,
    name: String,
    message: String,
    count: i32,
    last: Timestamp,
    /// How long a repeat is suppressed.
    window: SignedDuration,
}

/// How an event is deduplicated when the default (same object, reason and message for [`DEDUPE_WINDOW`]) is not
/// what upstream does: `FailedScheduling` is one per pod for five minutes whatever the reason says,
/// `NoCompatibleInstanceTypes` one per NodePool a minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dedupe<'a> {
    /// What identifies a repeat besides the object and the reason; `None`: the message.
    pub key: Option<&'a str>,
    pub window: SignedDuration,
}

impl Default for Dedupe<'_> {
    fn default() -> Self {
        Self {
            key: None,
            window: DEDUPE_WINDOW,
        }
    }
}

/// Publishes events as `karpenter`, deduplicated (see the module documentation).
pub struct DedupedRecorder {
    client: Client,
    clock: Arc<dyn Clock>,
    written: Mutex<WrittenEvents>,
}

/// The events written within the series window.
struct WrittenEvents {
    /// (object uid or name, reason, message or dedupe key) to the Event written for it.
    by_key: HashMap<(String, String, String), Written>,
    /// The size at which expired entries are next dropped (doubling, so pruning costs O(1) per call overall).
    prune_at: usize,
}

/// How an event is to be written.
enum Write {
    New,
    /// One more in the series of the Event `name`, now `count` strong.
    Repeat {
        namespace: String,
        name: String,
        count: i32,
    },
}

impl DedupedRecorder {
    pub fn new(client: Client, clock: Arc<dyn Clock>) -> Self {
        Self {
            client,
            clock,
            written: Mutex::new(WrittenEvents {
                by_key: HashMap::new(),
                prune_at: PRUNE_MIN,
            }),
        }
    }

    /// Publishes a Warning on `regarding` unless the same was published within the window. Returns whether it
    /// was published. A failure to publish is logged, not returned: an event is never worth failing a pass for.
    pub async fn warn(&self, regarding: &ObjectReference, reason: &str, message: &str) -> bool {
        self.publish("Warning", regarding, reason, message, Dedupe::default())
            .await
    }

    /// Publishes a Normal event, as [`DedupedRecorder::warn`] does a Warning.
    pub async fn normal(&self, regarding: &ObjectReference, reason: &str, message: &str) -> bool {
        self.publish("Normal", regarding, reason, message, Dedupe::default())
            .await
    }

    /// Publishes a Warning deduplicated as `dedupe` says.
    pub async fn warn_deduped(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        message: &str,
        dedupe: Dedupe<'_>,
    ) -> bool {
        self.publish("Warning", regarding, reason, message, dedupe).await
    }

    /// Publishes a Normal event deduplicated as `dedupe` says.
    pub async fn normal_deduped(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        message: &str,
        dedupe: Dedupe<'_>,
    ) -> bool {
        self.publish("Normal", regarding, reason, message, dedupe).await
    }

    async fn publish(
        &self,
        type_: &str,
        regarding: &ObjectReference,
        reason: &str,
        message: &str,
        dedupe: Dedupe<'_>,
    ) -> bool {
        let now = self.clock.now();
        let object = regarding
            .uid
            .clone()
            .or_else(|| regarding.name.clone())
            .unwrap_or_default();
        let key = (
            object,
            reason.to_string(),
            dedupe.key.unwrap_or(message).to_string(),
        );
        let write = {
            let mut written = self.written.lock().await;
            let write = match written.by_key.get(&key) {
                Some(w) if now.duration_since(w.last) < w.window => return false,
                // A series counts the same message only: another one is an Event of its own.
                Some(w) if now.duration_since(w.last) < SERIES_WINDOW && w.message == message => {
                    Write::Repeat {
                        namespace: w.namespace.clone(),
                        name: w.name.clone(),
                        count: w.count + 1,
                    }
                }
                _ => Write::New,
            };
            // Forget expired entries now and then, not on every call: a pass may report thousands of nodes.
            if written.by_key.len() >= written.prune_at {
                written
                    .by_key
                    .retain(|_, w| now.duration_since(w.last) < SERIES_WINDOW.max(w.window));
                written.prune_at = (written.by_key.len() * 2).max(PRUNE_MIN);
            }
            // Reserved until written: a publish of the same event meanwhile (another task's) is suppressed, not
            // written twice.
            let reserved = Written {
                namespace: String::new(),
                name: String::new(),
                message: message.to_string(),
                count: 0,
                last: now,
                window: dedupe.window,
            };
            let previous = written.by_key.insert(key.clone(), reserved);
            (write, previous)
        };
        let (write, previous) = write;
        let outcome = match write {
            Write::Repeat {
                namespace,
                name,
                count,
            } => match self.repeat(&namespace, &name, count, now).await {
                // The Event expired or was deleted meanwhile: write it anew.
                Err(e) if is_not_found(&e) => self
                    .create(type_, regarding, reason, message, now)
                    .await
                    .map(|name| (namespace, name, 1)),
                result => result.map(|()| (namespace, name, count)),
            },
            Write::New => {
                let namespace = namespace_of(regarding);
                self.create(type_, regarding, reason, message, now)
                    .await
                    .map(|name| (namespace, name, 1))
            }
        };
        match outcome {
            Ok((namespace, name, count)) => {
                self.written.lock().await.by_key.insert(
                    key,
                    Written {
                        namespace,
                        name,
                        message: message.to_string(),
                        count,
                        last: now,
                        window: dedupe.window,
                    },
                );
            }
            Err(error) => {
                tracing::debug!(%error, reason, "publishing an event failed");
                // Not written: the next publish tries again.
                let mut written = self.written.lock().await;
                match previous {
                    Some(previous) => written.by_key.insert(key, previous),
                    None => written.by_key.remove(&key),
                };
            }
        }
        true
    }

    /// Writes a new Event and returns its name.
    async fn create(
        &self,
        type_: &str,
        regarding: &ObjectReference,
        reason: &str,
        message: &str,
        now: Timestamp,
    ) -> Result<String, kube::Error> {
        let event = new_event(type_, regarding, reason, message, now);
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let created = api.create(&PostParams::default(), &event).await?;
        Ok(created.metadata.name.unwrap_or_default())
    }

    /// Counts one more occurrence in the series of Event `name`.
    async fn repeat(
        &self,
        namespace: &str,
        name: &str,
        count: i32,
        now: Timestamp,
    ) -> Result<(), kube::Error> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let patch = json!({"series": {"count": count, "lastObservedTime": MicroTime(now)}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop)
    }
}

/// Where an event about `regarding` lives: its object's namespace, or `default` for a cluster-scoped object (as
/// the Kubernetes event libraries file them).
fn namespace_of(regarding: &ObjectReference) -> String {
    regarding
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// `now` in nanoseconds, or one more than the last value handed out if that is not later.
fn unique_nanos(now: Timestamp) -> i64 {
    use std::sync::atomic::{AtomicI64, Ordering};
    static LAST: AtomicI64 = AtomicI64::new(i64::MIN);
    let wanted = i64::try_from(now.as_nanosecond()).unwrap_or(i64::MAX);
    let previous = LAST
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
            Some(wanted.max(last.saturating_add(1)))
        })
        .unwrap_or(wanted);
    wanted.max(previous.saturating_add(1))
}

/// The Event for one occurrence at `now`.
fn new_event(type_: &str, regarding: &ObjectReference, reason: &str, message: &str, now: Timestamp) -> Event {
    let object = regarding.name.as_deref().unwrap_or("event");
    Event {
        metadata: ObjectMeta {
            // The name the Kubernetes event libraries give: the object's name and the time in hex nanoseconds,
            // made unique in this process so two events on one object at the same instant (a virtual clock, or a
            // coarse one) do not collide and lose the second.
            name: Some(format!("{object}.{:x}", unique_nanos(now))),
            namespace: Some(namespace_of(regarding)),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some(type_.into()),
        reason: Some(reason.into()),
        action: Some(reason.into()),
        note: Some(message.into()),
        regarding: Some(regarding.clone()),
        reporting_controller: Some(REPORTER.into()),
        reporting_instance: Some(REPORTER.into()),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use karpenter_sim::{ApiServer, VirtualClock};
    use kube::api::ListParams;

    use super::*;

    fn node(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    /// (regarding name, type, reason, note, series count) of every event.
    async fn events(client: &Client) -> Vec<(String, String, String, String, i32)> {
        let mut out: Vec<_> = Api::<Event>::all(client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|e| {
                (
                    e.regarding.and_then(|r| r.name).unwrap_or_default(),
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.note.unwrap_or_default(),
                    e.series.map_or(1, |s| s.count),
                )
            })
            .collect();
        out.sort();
        out
    }

    #[tokio::test(start_paused = true)]
    async fn repeats_are_suppressed_for_two_minutes_then_counted_in_a_series_then_written_anew() {
        let clock = VirtualClock::starting_at("2026-01-01T00:00:00Z".parse().unwrap());
        let server = ApiServer::new(clock);
        let client = server.client();
        let recorder = DedupedRecorder::new(client.clone(), Arc::new(clock));
        let n1 = node("n1");
        let blocked = |count| {
            (
                "n1".to_string(),
                "Warning".to_string(),
                "DisruptionBlocked".to_string(),
                "pdb prevents".to_string(),
                count,
            )
        };

        assert!(recorder.warn(&n1, "DisruptionBlocked", "pdb prevents").await);
        assert!(
            !recorder.warn(&n1, "DisruptionBlocked", "pdb prevents").await,
            "suppressed"
        );
        assert!(
            recorder
                .normal(&node("n2"), "Unconsolidatable", "no cheaper node")
                .await
        );
        assert_eq!(
            events(&client).await,
            [
                blocked(1),
                (
                    "n2".to_string(),
                    "Normal".to_string(),
                    "Unconsolidatable".to_string(),
                    "no cheaper node".to_string(),
                    1
                )
            ]
        );

        // After the dedupe window but within the series window: the same Event counts twice.
        tokio::time::advance(Duration::from_secs(150)).await;
        assert!(recorder.warn(&n1, "DisruptionBlocked", "pdb prevents").await);
        let listed = events(&client).await;
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0], blocked(2));

        // Long after: a new Event.
        tokio::time::advance(Duration::from_secs(600)).await;
        assert!(recorder.warn(&n1, "DisruptionBlocked", "pdb prevents").await);
        let listed = events(&client).await;
        assert_eq!(listed.len(), 3);
        assert_eq!(listed[..2], [blocked(1), blocked(2)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_keyed_event_is_suppressed_for_its_window_whatever_its_message() {
        let clock = VirtualClock::starting_at("2026-01-01T00:00:00Z".parse().unwrap());
        let server = ApiServer::new(clock);
        let client = server.client();
        let recorder = DedupedRecorder::new(client.clone(), Arc::new(clock));
        let pod = node("web-0");
        let per_pod = Dedupe {
            key: Some("uid-web-0"),
            window: SignedDuration::from_secs(300),
        };
        assert!(
            recorder
                .warn_deduped(&pod, "FailedScheduling", "first", per_pod)
                .await
        );
        tokio::time::advance(Duration::from_secs(200)).await;
        assert!(
            !recorder
                .warn_deduped(&pod, "FailedScheduling", "second", per_pod)
                .await,
            "another message within the window is suppressed too"
        );
        tokio::time::advance(Duration::from_secs(100)).await;
        assert!(
            recorder
                .warn_deduped(&pod, "FailedScheduling", "second", per_pod)
                .await
        );
        let notes: Vec<_> = events(&client).await.into_iter().map(|e| (e.3, e.4)).collect();
        assert_eq!(notes, [("first".to_string(), 1), ("second".to_string(), 1)]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_same_event_published_at_once_twice_is_written_once() {
        let clock = VirtualClock::starting_at("2026-01-01T00:00:00Z".parse().unwrap());
        let server = ApiServer::new(clock);
        let client = server.client();
        let recorder = DedupedRecorder::new(client.clone(), Arc::new(clock));
        let n1 = node("n1");
        let (a, b) = tokio::join!(
            recorder.warn(&n1, "FailedScheduling", "no place"),
            recorder.warn(&n1, "FailedScheduling", "no place")
        );
        assert!(a ^ b, "one of them is suppressed");
        assert_eq!(events(&client).await.len(), 1);
    }
}
