//! Core's `InterruptionSource` over the SQS interruption queue: long polls (20 s, up to 10 messages), parses
//! each message and hands the interruption controller one [`InterruptionEvent`] per affected instance, with
//! the BARE instance ID (`i-0abc...`) as `provider_id` (the controller matches claims whose provider ID ends
//! with `/<instance-id>`).
//!
//! - A spot interruption also marks the instance's spot offering unavailable (its type and zone from the
//!   provider's instance cache, else DescribeInstances), as upstream does, so the replacement goes elsewhere.
//! - A capacity reservation interruption is acted on as a spot interruption (core has no kind of its own for
//!   it: the NodeClaim is deleted, so cordoned, drained and replaced) and marks the reservation unavailable:
//!   the one the event names, else the instance's (cache, else DescribeInstances), so the replacement does
//!   not go back into capacity EC2 is reclaiming.
//! - A message that is not an interruption event is logged with its message ID, counted and deleted; an event
//!   that does not concern Karpenter (an instance starting) is deleted silently.
//! - Messages that were handed out are deleted at the next `receive` call, once the controller has acted on
//!   them: a controller that dies first gets them again after the visibility timeout. A message with an event
//!   the controller could not act on ([`InterruptionSource::not_handled`]: an API error deleting the NodeClaim)
//!   is not deleted: SQS delivers it again once its visibility timeout (20 s) has passed, and it is retried.
//! - The queue is looked up by name when first polled, not at start-up: a queue that does not exist yet or
//!   may not be read is logged, naming it, and polled again with the back-off below while the rest of the
//!   controller runs.
//! - Metrics: every deleted message counts in `karpenter_interruption_deleted_messages_total`, and an event's
//!   time from EventBridge to deletion is observed in `karpenter_interruption_message_queue_duration_seconds`
//!   (`karpenter_interruption_received_messages_total` is the interruption controller's).
//! - Receive errors back off (1 s doubling to 1 min) and retry; `receive` returns None only after
//!   [`SqsInterruptionSource::shutdown`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use jiff::Timestamp;
use karpenter_core::cloudprovider::{InterruptionEvent, InterruptionKind, InterruptionSource};
use tokio::sync::{Mutex, watch};

use crate::instance::{Ec2Instance, InstanceCache, get_instance};
use crate::instance_types::CAPACITY_TYPE_SPOT;
use crate::interruption::{InstanceState, InterruptionKind as MessageKind, InterruptionMessage};
use crate::interruption_queue::{InterruptionQueue, LONG_POLL};
use crate::unavailable_offerings::UnavailableOfferings;

const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Counters for the controller's metrics.
#[derive(Debug, Default)]
pub struct InterruptionSourceStats {
    pub received: AtomicU64,
    pub malformed: AtomicU64,
    pub ignored: AtomicU64,
    pub receive_errors: AtomicU64,
    pub delete_errors: AtomicU64,
}

/// The SQS-backed interruption source.
pub struct SqsInterruptionSource {
    queue: InterruptionQueue,
    ec2: aws_sdk_ec2::Client,
    instances: Arc<InstanceCache>,
    unavailable: Arc<UnavailableOfferings>,
    /// Messages handed out and not yet deleted.
    handed_out: Mutex<Vec<HandedOut>>,
    shutdown: watch::Sender<bool>,
    stats: InterruptionSourceStats,
}

impl std::fmt::Debug for SqsInterruptionSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsInterruptionSource")
            .field("queue", &self.queue.describe())
            .finish_non_exhaustive()
    }
}

/// A message the controller has, with the events it became.
#[derive(Debug)]
struct HandedOut {
    message_id: String,
    receipt_handle: String,
    event_time: Timestamp,
    events: Vec<InterruptionEvent>,
    /// The controller could not act on one of its events: left on the queue for a retry.
    failed: bool,
}

/// Core's kind for a parsed message's.
pub fn event_kind(kind: &MessageKind) -> InterruptionKind {
    match kind {
        MessageKind::SpotInterruption { .. } => InterruptionKind::SpotInterruption,
        MessageKind::RebalanceRecommendation => InterruptionKind::Rebalance,
        MessageKind::ScheduledChange { .. } => InterruptionKind::ScheduledChange,
        MessageKind::StateChange { state } => match state {
            InstanceState::Stopping | InstanceState::Stopped => InterruptionKind::InstanceStopping,
            InstanceState::ShuttingDown | InstanceState::Terminated => InterruptionKind::InstanceTerminating,
        },
        MessageKind::CapacityReservationInterruption { .. } => {
            InterruptionKind::CapacityReservationInterruption
        }
    }
}

/// One event per instance of `message`.
pub fn events_of(message: &InterruptionMessage) -> Vec<InterruptionEvent> {
    message
        .instance_ids
        .iter()
        .map(|id| InterruptionEvent {
            provider_id: id.clone(),
            kind: event_kind(&message.kind),
            at: message.time,
        })
        .collect()
}

impl SqsInterruptionSource {
    pub fn new(
        queue: InterruptionQueue,
        ec2: aws_sdk_ec2::Client,
        instances: Arc<InstanceCache>,
        unavailable: Arc<UnavailableOfferings>,
    ) -> Self {
        Self {
            queue,
            ec2,
            instances,
            unavailable,
            handed_out: Mutex::new(Vec::new()),
            shutdown: watch::Sender::new(false),
            stats: InterruptionSourceStats::default(),
        }
    }

    pub fn stats(&self) -> &InterruptionSourceStats {
        &self.stats
    }

    /// Makes every pending and later `receive` return None.
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    fn is_shut_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Deletes a message; counts it in `karpenter_interruption_deleted_messages_total` and, for an event,
    /// observes the time since the event in `karpenter_interruption_message_queue_duration_seconds`.
    async fn delete(&self, receipt_handle: &str, message_id: &str, event_time: Option<Timestamp>) {
        match self.queue.delete(receipt_handle).await {
            Ok(()) => record_deleted(event_time, Timestamp::now()),
            Err(err) => {
                self.stats.delete_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(message_id, error = %err, "deleting an interruption message");
            }
        }
    }

    /// Deletes what the controller has had since the last call, except what it could not act on.
    async fn delete_handed_out(&self) {
        let handed_out = std::mem::take(&mut *self.handed_out.lock().await);
        for message in handed_out {
            if message.failed {
                tracing::info!(
                    queue = %self.queue.describe(),
                    message_id = %message.message_id,
                    "an interruption message was not handled; it stays on the queue to be received again"
                );
                continue;
            }
            self.delete(
                &message.receipt_handle,
                &message.message_id,
                Some(message.event_time),
            )
            .await;
        }
    }

    /// The instance from the provider's cache, else from EC2.
    async fn find_instance(&self, instance_id: &str) -> Option<Ec2Instance> {
        match self.instances.get(instance_id) {
            Some(instance) => Some(instance),
            None => get_instance(&self.ec2, instance_id).await.ok(),
        }
    }

    /// Marks the reservations of a capacity reservation interruption unavailable.
    async fn mark_reservations_unavailable(&self, message: &InterruptionMessage) {
        let MessageKind::CapacityReservationInterruption { reservation_id } = &message.kind else {
            return;
        };
        let now = Instant::now();
        if let Some(id) = reservation_id {
            self.unavailable.mark_reservation_unavailable(id, now);
            return;
        }
        for instance_id in &message.instance_ids {
            match self
                .find_instance(instance_id)
                .await
                .and_then(|i| i.capacity_reservation_id)
            {
                Some(id) => self.unavailable.mark_reservation_unavailable(&id, now),
                None => tracing::debug!(
                    instance_id,
                    "capacity reservation interruption for an instance not found in a reservation"
                ),
            }
        }
    }

    /// Marks the spot offering of a reclaimed instance unavailable.
    async fn mark_spot_unavailable(&self, instance_id: &str) {
        match self.find_instance(instance_id).await {
            Some(instance) => self.unavailable.mark_unavailable(
                &instance.instance_type,
                &instance.zone,
                CAPACITY_TYPE_SPOT,
                Instant::now(),
            ),
            None => tracing::debug!(instance_id, "spot interruption for an instance not found"),
        }
    }

    /// One long poll: the events of the messages received, the malformed and irrelevant ones deleted.
    async fn poll(&self) -> Result<Vec<InterruptionEvent>, crate::AwsError> {
        let received = self.queue.receive(LONG_POLL).await?;
        let mut events = Vec::new();
        for message in received {
            self.stats.received.fetch_add(1, Ordering::Relaxed);
            match message.parsed {
                Err(err) => {
                    self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(message_id = %message.message_id, error = %err, "deleting an unreadable interruption message");
                    self.delete(&message.receipt_handle, &message.message_id, None)
                        .await;
                }
                Ok(None) => {
                    self.stats.ignored.fetch_add(1, Ordering::Relaxed);
                    self.delete(&message.receipt_handle, &message.message_id, None)
                        .await;
                }
                Ok(Some(parsed)) => {
                    if matches!(parsed.kind, MessageKind::SpotInterruption { .. }) {
                        for id in &parsed.instance_ids {
                            self.mark_spot_unavailable(id).await;
                        }
                    }
                    self.mark_reservations_unavailable(&parsed).await;
                    let parsed_events = events_of(&parsed);
                    events.extend(parsed_events.iter().cloned());
                    self.handed_out.lock().await.push(HandedOut {
                        message_id: message.message_id,
                        receipt_handle: message.receipt_handle,
                        event_time: parsed.time,
                        events: parsed_events,
                        failed: false,
                    });
                }
            }
        }
        Ok(events)
    }
}

/// The metrics of one deleted message: see the module documentation.
pub fn record_deleted(event_time: Option<Timestamp>, now: Timestamp) {
    let metrics = karpenter_metrics::metrics();
    metrics.interruption_deleted_messages.inc();
    if let Some(time) = event_time {
        let seconds = now.duration_since(time).as_secs_f64().max(0.0);
        metrics
            .interruption_message_queue_duration_seconds
            .get_or_create(&karpenter_metrics::NoLabels {})
            .observe(seconds);
    }
}

#[async_trait]
impl InterruptionSource for SqsInterruptionSource {
    async fn receive(&self) -> Option<Vec<InterruptionEvent>> {
        self.delete_handed_out().await;
        let mut shutdown = self.shutdown.subscribe();
        let mut backoff = INITIAL_BACKOFF;
        loop {
            if self.is_shut_down() {
                return None;
            }
            let polled = tokio::select! {
                polled = self.poll() => polled,
                _ = shutdown.wait_for(|stop| *stop) => return None,
            };
            match polled {
                Ok(events) if !events.is_empty() => return Some(events),
                Ok(_) => backoff = INITIAL_BACKOFF,
                Err(err) => {
                    self.stats.receive_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        queue = %self.queue.describe(),
                        error = %err,
                        retry_in = ?backoff,
                        "cannot receive from the interruption queue; interruptions are not handled until it can be read"
                    );
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        _ = shutdown.wait_for(|stop| *stop) => return None,
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    async fn not_handled(&self, event: &InterruptionEvent) {
        for message in self.handed_out.lock().await.iter_mut() {
            if message.events.contains(event) {
                message.failed = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deleted_messages_and_their_time_in_the_queue_are_recorded() {
        let metrics = karpenter_metrics::metrics();
        let before = metrics.interruption_deleted_messages.get();
        let sent: Timestamp = "2026-12-02T12:00:00Z".parse().unwrap();
        let deleted: Timestamp = "2026-12-02T12:00:42Z".parse().unwrap();
        record_deleted(Some(sent), deleted);
        record_deleted(None, deleted);
        assert_eq!(metrics.interruption_deleted_messages.get(), before + 2);
        let text = metrics.encode();
        assert!(
            text.contains("karpenter_interruption_message_queue_duration_seconds_sum 42.0"),
            "{text}"
        );
        assert!(text.contains("karpenter_interruption_deleted_messages_total "));
    }

    #[test]
    fn one_event_per_instance_with_the_bare_instance_id() {
        let message = InterruptionMessage {
            kind: MessageKind::ScheduledChange {
                event_type_code: "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED".into(),
            },
            instance_ids: vec!["i-01".into(), "i-02".into()],
            time: "2026-12-02T12:00:00Z".parse().unwrap(),
            event_id: "e".into(),
        };
        let events = events_of(&message);
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].provider_id, "i-02");
        assert_eq!(events[0].kind, InterruptionKind::ScheduledChange);
        assert_eq!(events[0].at, message.time);
        for (state, kind) in [
            (InstanceState::Stopping, InterruptionKind::InstanceStopping),
            (InstanceState::Stopped, InterruptionKind::InstanceStopping),
            (InstanceState::ShuttingDown, InterruptionKind::InstanceTerminating),
            (InstanceState::Terminated, InterruptionKind::InstanceTerminating),
        ] {
            assert_eq!(event_kind(&MessageKind::StateChange { state }), kind, "{state:?}");
        }
        assert_eq!(
            event_kind(&MessageKind::RebalanceRecommendation),
            InterruptionKind::Rebalance
        );
    }

    #[test]
    fn a_capacity_reservation_interruption_becomes_core_s_capacity_reservation_kind() {
        let message = InterruptionMessage {
            kind: MessageKind::CapacityReservationInterruption {
                reservation_id: Some("cr-0123456789abcdef0".into()),
            },
            instance_ids: vec!["i-0c0ffee0c0ffee000".into()],
            time: "2026-12-02T12:04:00Z".parse().unwrap(),
            event_id: "e".into(),
        };
        assert_eq!(
            events_of(&message),
            [InterruptionEvent {
                provider_id: "i-0c0ffee0c0ffee000".into(),
                kind: InterruptionKind::CapacityReservationInterruption,
                at: message.time,
            }]
        );
    }
}
