//! Several `InterruptionSource`s as one, for the one interruption controller: on AWS the SQS queue's (when
//! `INTERRUPTION_QUEUE` is set) and the instance status poller's ([`crate::instance_status`]).
//!
//! `receive` answers with the first batch any source has ready. Each source keeps its own contract: a source is
//! asked again (which tells it its last batch was acted on: the queue then deletes its messages) only once the
//! controller asks the merged source again after that source's batch, and the receives of the other sources stay
//! in flight meanwhile: never dropped half-way (a long poll that has received messages keeps them), only polled
//! again. `not_handled` and `claimed` go to the source whose batch the controller is handling. The merged source
//! closes once every source has.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;

use async_trait::async_trait;
use karpenter_core::cloudprovider::{InterruptionEvent, InterruptionSource};
use tokio::sync::Mutex;

type Receiving = Pin<Box<dyn Future<Output = Option<Vec<InterruptionEvent>>> + Send>>;

/// No batch handed out yet.
const NONE: usize = usize::MAX;

/// One source's state.
enum Slot {
    /// To be asked (at first, and after its batch was handed out).
    Idle,
    Receiving(Receiving),
    /// It returned None.
    Closed,
}

/// The sources as one: see the module documentation.
pub struct MergedInterruptionSource {
    sources: Vec<Arc<dyn InterruptionSource>>,
    slots: Mutex<Vec<Slot>>,
    /// The source whose batch was handed out last ([`NONE`] before the first).
    last: AtomicUsize,
}

impl std::fmt::Debug for MergedInterruptionSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MergedInterruptionSource")
            .field("sources", &self.sources.len())
            .finish_non_exhaustive()
    }
}

impl MergedInterruptionSource {
    pub fn new(sources: Vec<Arc<dyn InterruptionSource>>) -> Self {
        let slots = sources.iter().map(|_| Slot::Idle).collect();
        Self {
            sources,
            slots: Mutex::new(slots),
            last: AtomicUsize::new(NONE),
        }
    }

    /// The source whose batch the controller is handling.
    fn last_source(&self) -> Option<&Arc<dyn InterruptionSource>> {
        self.sources.get(self.last.load(Ordering::SeqCst))
    }
}

#[async_trait]
impl InterruptionSource for MergedInterruptionSource {
    async fn receive(&self) -> Option<Vec<InterruptionEvent>> {
        let mut slots = self.slots.lock().await;
        for (slot, source) in slots.iter_mut().zip(&self.sources) {
            if matches!(slot, Slot::Idle) {
                let source = Arc::clone(source);
                *slot = Slot::Receiving(Box::pin(async move { source.receive().await }));
            }
        }
        // Polled in place: a receive of the merged source that is dropped leaves the sources' in flight.
        // The search starts after the source served last, so a busy source does not starve the others.
        let start = self.last.load(Ordering::SeqCst).wrapping_add(1);
        let (index, events) = std::future::poll_fn(|cx| {
            let count = slots.len();
            let mut open = false;
            for offset in 0..count {
                let index = (start + offset) % count;
                let Slot::Receiving(receiving) = &mut slots[index] else {
                    continue;
                };
                match receiving.as_mut().poll(cx) {
                    Poll::Ready(Some(events)) => {
                        slots[index] = Slot::Idle;
                        return Poll::Ready(Some((index, events)));
                    }
                    Poll::Ready(None) => slots[index] = Slot::Closed,
                    Poll::Pending => open = true,
                }
            }
            if open { Poll::Pending } else { Poll::Ready(None) }
        })
        .await?;
        self.last.store(index, Ordering::SeqCst);
        Some(events)
    }

    async fn not_handled(&self, event: &InterruptionEvent) {
        if let Some(source) = self.last_source() {
            source.not_handled(event).await;
        }
    }

    async fn claimed(&self, event: &InterruptionEvent) {
        if let Some(source) = self.last_source() {
            source.claimed(event).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;
    use std::time::Duration;

    use karpenter_core::cloudprovider::InterruptionKind;

    use super::*;

    /// Hands out its batches after their delays, recording every call; closes after the last.
    struct Scripted {
        name: &'static str,
        batches: StdMutex<Vec<(Duration, Vec<InterruptionEvent>)>>,
        calls: Arc<StdMutex<Vec<String>>>,
    }

    impl Scripted {
        fn new(
            name: &'static str,
            batches: Vec<(u64, &str)>,
            calls: &Arc<StdMutex<Vec<String>>>,
        ) -> Arc<Self> {
            let mut batches: Vec<(Duration, Vec<InterruptionEvent>)> = batches
                .into_iter()
                .map(|(secs, id)| (Duration::from_secs(secs), vec![event(id)]))
                .collect();
            batches.reverse();
            Arc::new(Self {
                name,
                batches: StdMutex::new(batches),
                calls: Arc::clone(calls),
            })
        }

        fn record(&self, what: String) {
            self.calls.lock().unwrap().push(format!("{} {what}", self.name));
        }
    }

    fn event(id: &str) -> InterruptionEvent {
        InterruptionEvent {
            provider_id: id.into(),
            kind: InterruptionKind::SpotInterruption,
            at: jiff::Timestamp::UNIX_EPOCH,
        }
    }

    #[async_trait]
    impl InterruptionSource for Scripted {
        async fn receive(&self) -> Option<Vec<InterruptionEvent>> {
            self.record("receive".into());
            let next = self.batches.lock().unwrap().pop();
            let (delay, events) = next?;
            tokio::time::sleep(delay).await;
            Some(events)
        }

        async fn not_handled(&self, event: &InterruptionEvent) {
            self.record(format!("not_handled {}", event.provider_id));
        }

        async fn claimed(&self, event: &InterruptionEvent) {
            self.record(format!("claimed {}", event.provider_id));
        }
    }

    fn ids(events: Option<Vec<InterruptionEvent>>) -> Vec<String> {
        events.unwrap().into_iter().map(|e| e.provider_id).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn batches_come_as_they_are_ready_and_each_source_is_asked_again_only_after_its_own() {
        let calls = Arc::new(StdMutex::new(Vec::new()));
        let queue = Scripted::new("queue", vec![(20, "q1"), (20, "q2")], &calls);
        let poller = Scripted::new("poller", vec![(0, "p1"), (60, "p2")], &calls);
        let merged = MergedInterruptionSource::new(vec![queue.clone(), poller.clone()]);
        let started = tokio::time::Instant::now();

        assert_eq!(ids(merged.receive().await), ["p1"]);
        merged.claimed(&event("p1")).await;
        assert_eq!(ids(merged.receive().await), ["q1"]);
        assert_eq!(started.elapsed(), Duration::from_secs(20));
        merged.not_handled(&event("q1")).await;
        assert_eq!(ids(merged.receive().await), ["q2"]);
        assert_eq!(started.elapsed(), Duration::from_secs(40));
        assert_eq!(ids(merged.receive().await), ["p2"]);
        assert_eq!(started.elapsed(), Duration::from_secs(60));
        assert!(merged.receive().await.is_none(), "both closed");
        assert_eq!(
            *calls.lock().unwrap(),
            [
                "queue receive",
                "poller receive",
                "poller claimed p1",
                // The poller's second receive is asked once p1 was handled; the queue's first is still in flight.
                "poller receive",
                "queue not_handled q1",
                "queue receive",
                "queue receive",
                "poller receive",
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_receive_leaves_the_sources_receives_in_flight() {
        let calls = Arc::new(StdMutex::new(Vec::new()));
        let queue = Scripted::new("queue", vec![(20, "q1")], &calls);
        let merged = MergedInterruptionSource::new(vec![queue]);
        let timed_out = tokio::time::timeout(Duration::from_secs(10), merged.receive()).await;
        assert!(timed_out.is_err());
        assert_eq!(ids(merged.receive().await), ["q1"]);
        assert_eq!(*calls.lock().unwrap(), ["queue receive"], "asked once");
    }
}
