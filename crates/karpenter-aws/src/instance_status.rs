//! The instance status poller: EC2's DescribeInstanceStatus, asked every minute, says which running instances
//! fail their status checks or have a scheduled event, and each one a NodeClaim of the cluster owns is handed to
//! the interruption controller, which replaces it as upstream's `interruption.instancestatus` controller does
//! (aws/karpenter-provider-aws `pkg/controllers/interruption/instancestatus_controller.go`,
//! `pkg/providers/instancestatus`).
//!
//! How the instances reach the controller: [`InstanceStatusSource`] is a second core `InterruptionSource`, and
//! [`crate::runtime`] hands the controller it and the SQS queue's as one
//! ([`crate::merged_interruptions::MergedInterruptionSource`]). So an impaired instance goes through exactly the
//! handling a queue message gets (the NodeClaim looked up by instance ID, its Events, its deletion and the
//! `karpenter_nodeclaims_disrupted_total` count, API errors logged) without a second copy of it, and the poller
//! runs whether or not an interruption queue is configured, as upstream's does.
//!
//! What counts, as upstream decides it ([`unhealthy_instances`]):
//! - three DescribeInstanceStatus queries, each paginated, their instances merged by ID: `instance-status.status`
//!   impaired, `system-status.status` impaired, and `event.code` any of the scheduled event codes (EC2 ANDs
//!   filters of different names, so one query could not OR them). Only running instances are reported (the
//!   call's default), and the account's instances are all asked about: the controller ignores those no NodeClaim
//!   owns;
//! - of an instance's instance, system and attached-EBS status details, those `failed` since at least
//!   [`UNHEALTHY_THRESHOLD`] (2 minutes; a detail without an `ImpairedSince` has failed for long enough), and
//!   every scheduled event it lists, whatever its times (a scheduled event means the host is to be vacated, as
//!   for the queue's scheduled changes);
//! - one [`InterruptionEvent`] per category that has such a detail: `InstanceStatus` becomes
//!   [`InterruptionKind::InstanceStatusImpaired`] and `SystemStatus` [`InterruptionKind::SystemStatusImpaired`]
//!   (the controller terminates the NodeClaim forcefully: its termination timestamp set to now before it is
//!   deleted, so the drain does not wait on disruption budgets), `EventStatus`
//!   [`InterruptionKind::ScheduledEvent`] (deleted, drained within budgets). Failed EBS checks are not acted on
//!   (upstream cannot yet tell a node's volumes from its pods'). The event's time is the instance's earliest
//!   impairment (a scheduled event counts from when it was seen).
//!
//! The metric `karpenter_interruption_instance_status_unhealthy_total{category}` counts an instance and
//! category once, when the controller first finds a NodeClaim of the cluster for it
//! ([`InterruptionSource::claimed`]), with an info log naming both; a pair no longer reported by a poll is
//! forgotten, so an instance that becomes unhealthy again later is counted again.
//!
//! Polling: at once when the controller first asks, then [`POLL_INTERVAL`] after the controller has handled the
//! previous poll's events (upstream requeues a minute after each reconcile). A failed poll is logged and tried
//! again at the next interval. When IAM does not allow ec2:DescribeInstanceStatus (UnauthorizedOperation) the
//! poller logs an error saying to update the policy and restart, and stops, as upstream's does.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_ec2::types::{EventCode, Filter, InstanceStatus, StatusType, SummaryStatus};
use jiff::Timestamp;
use karpenter_core::cloudprovider::{InterruptionEvent, InterruptionKind, InterruptionSource};
use tokio::sync::{Mutex, watch};

use crate::error::AwsError;

/// How often the instances' status is asked (upstream's `InstanceStatusInterval`).
pub const POLL_INTERVAL: Duration = Duration::from_secs(60);

/// How long a status check must have failed before the instance is acted on (upstream's
/// `UnhealthyThreshold`).
pub const UNHEALTHY_THRESHOLD: Duration = Duration::from_secs(120);

/// EC2's error code for a call IAM does not allow.
const UNAUTHORIZED: &str = "UnauthorizedOperation";

/// The DescribeInstanceStatus categories a detail belongs to, named as upstream's metric label names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StatusCategory {
    InstanceStatus,
    SystemStatus,
    /// A scheduled event (reboot, maintenance, retirement, stop).
    EventStatus,
    /// Attached EBS volumes: reported, never acted on.
    EbsStatus,
}

impl StatusCategory {
    /// The `category` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InstanceStatus => "InstanceStatus",
            Self::SystemStatus => "SystemStatus",
            Self::EventStatus => "EventStatus",
            Self::EbsStatus => "EBSStatus",
        }
    }

    /// The interruption a failure of this category is; None for EBS.
    pub fn kind(self) -> Option<InterruptionKind> {
        match self {
            Self::InstanceStatus => Some(InterruptionKind::InstanceStatusImpaired),
            Self::SystemStatus => Some(InterruptionKind::SystemStatusImpaired),
            Self::EventStatus => Some(InterruptionKind::ScheduledEvent),
            Self::EbsStatus => None,
        }
    }

    /// The category an interruption of `kind` came from, for the kinds the poller reports.
    pub fn of_kind(kind: InterruptionKind) -> Option<Self> {
        match kind {
            InterruptionKind::InstanceStatusImpaired => Some(Self::InstanceStatus),
            InterruptionKind::SystemStatusImpaired => Some(Self::SystemStatus),
            InterruptionKind::ScheduledEvent => Some(Self::EventStatus),
            _ => None,
        }
    }
}

/// One failed status check, or one scheduled event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedCheck {
    pub category: StatusCategory,
    /// The check's name (`reachability`) or the event's code (`instance-retirement`).
    pub name: String,
    /// Since when it has failed; a scheduled event, since the poll that saw it. None when EC2 does not say.
    pub impaired_since: Option<Timestamp>,
}

/// An instance EC2 reports unhealthy for long enough to act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnhealthyInstance {
    pub instance_id: String,
    /// The earliest impairment of its checks (the poll's time when none says).
    pub impaired_since: Timestamp,
    pub checks: Vec<FailedCheck>,
}

impl UnhealthyInstance {
    /// The categories its checks failed in.
    pub fn categories(&self) -> BTreeSet<StatusCategory> {
        self.checks.iter().map(|c| c.category).collect()
    }

    /// One event per category that is acted on (not EBS), keyed by the bare instance ID as the queue's are.
    pub fn events(&self) -> Vec<InterruptionEvent> {
        self.categories()
            .into_iter()
            .filter_map(StatusCategory::kind)
            .map(|kind| InterruptionEvent {
                provider_id: self.instance_id.clone(),
                kind,
                at: self.impaired_since,
            })
            .collect()
    }
}

/// The three queries whose instances are merged: impaired instance status, impaired system status, and the
/// scheduled event codes (filters of different names are ANDed, so each is its own query).
pub fn status_filters() -> [Filter; 3] {
    let impaired = [SummaryStatus::Impaired.as_str().to_string()];
    let events = [
        EventCode::InstanceReboot,
        EventCode::SystemReboot,
        EventCode::SystemMaintenance,
        EventCode::InstanceRetirement,
        EventCode::InstanceStop,
    ]
    .map(|code| code.as_str().to_string());
    [
        Filter::builder()
            .name("instance-status.status")
            .set_values(Some(impaired.to_vec()))
            .build(),
        Filter::builder()
            .name("system-status.status")
            .set_values(Some(impaired.to_vec()))
            .build(),
        Filter::builder()
            .name("event.code")
            .set_values(Some(events.to_vec()))
            .build(),
    ]
}

fn timestamp(time: Option<&aws_smithy_types::DateTime>) -> Option<Timestamp> {
    time.and_then(|t| Timestamp::new(t.secs(), t.subsec_nanos().try_into().unwrap_or(0)).ok())
}

/// The instances of `statuses` (DescribeInstanceStatus's answers, an instance's first answer kept) to act on at
/// `now`, with the checks that make them so: see the module documentation. Sorted by instance ID.
pub fn unhealthy_instances(statuses: &[InstanceStatus], now: Timestamp) -> Vec<UnhealthyInstance> {
    let threshold = jiff::SignedDuration::try_from(UNHEALTHY_THRESHOLD).unwrap_or_default();
    let long_enough = |since: Option<Timestamp>| since.is_none_or(|t| now.duration_since(t) >= threshold);
    let mut by_id: BTreeMap<&str, &InstanceStatus> = BTreeMap::new();
    for status in statuses {
        if let Some(id) = status.instance_id() {
            by_id.entry(id).or_insert(status);
        }
    }
    let mut unhealthy = Vec::new();
    for (id, status) in by_id {
        let mut checks = Vec::new();
        let summaries = [
            (StatusCategory::InstanceStatus, status.instance_status()),
            (StatusCategory::SystemStatus, status.system_status()),
        ];
        for (category, summary) in summaries {
            for detail in summary.map(|s| s.details()).unwrap_or_default() {
                if detail.status() == Some(&StatusType::Failed) {
                    checks.push(FailedCheck {
                        category,
                        name: detail.name().map(|n| n.as_str().to_string()).unwrap_or_default(),
                        impaired_since: timestamp(detail.impaired_since()),
                    });
                }
            }
        }
        for detail in status
            .attached_ebs_status()
            .map(|s| s.details())
            .unwrap_or_default()
        {
            if detail.status() == Some(&StatusType::Failed) {
                checks.push(FailedCheck {
                    category: StatusCategory::EbsStatus,
                    name: detail.name().map(|n| n.as_str().to_string()).unwrap_or_default(),
                    impaired_since: timestamp(detail.impaired_since()),
                });
            }
        }
        checks.retain(|c| long_enough(c.impaired_since));
        // Every scheduled event is a failure, from the moment it is seen.
        checks.extend(status.events().iter().map(|event| FailedCheck {
            category: StatusCategory::EventStatus,
            name: event.code().map(|c| c.as_str().to_string()).unwrap_or_default(),
            impaired_since: Some(now),
        }));
        if checks.is_empty() {
            continue;
        }
        let impaired_since = checks
            .iter()
            .filter_map(|c| c.impaired_since)
            .min()
            .unwrap_or(now);
        unhealthy.push(UnhealthyInstance {
            instance_id: id.to_string(),
            impaired_since,
            checks,
        });
    }
    unhealthy
}

/// DescribeInstanceStatus, every page: what the poller asks EC2 (a trait so tests can answer instead).
#[async_trait]
pub trait InstanceStatusApi: Send + Sync {
    /// The running instances matching `filter`.
    async fn statuses(&self, filter: Filter) -> Result<Vec<InstanceStatus>, AwsError>;
}

#[async_trait]
impl InstanceStatusApi for aws_sdk_ec2::Client {
    async fn statuses(&self, filter: Filter) -> Result<Vec<InstanceStatus>, AwsError> {
        let mut pages = self
            .describe_instance_status()
            .filters(filter)
            .into_paginator()
            .send();
        let mut statuses = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| AwsError::from_sdk("DescribeInstanceStatus", e))?;
            statuses.extend(page.instance_statuses().iter().cloned());
        }
        Ok(statuses)
    }
}

/// The instances to act on now: the three queries' answers, merged, judged at `now`.
pub async fn poll(api: &dyn InstanceStatusApi, now: Timestamp) -> Result<Vec<UnhealthyInstance>, AwsError> {
    let mut statuses = Vec::new();
    for filter in status_filters() {
        statuses.extend(api.statuses(filter).await?);
    }
    Ok(unhealthy_instances(&statuses, now))
}

/// What the poller remembers between polls.
#[derive(Debug, Default)]
struct PollState {
    /// A poll has been made: the next waits for the interval.
    polled: bool,
    /// (instance, category) pairs already counted in the metric.
    counted: HashSet<(String, StatusCategory)>,
    /// Pairs the controller found NodeClaims for since the last poll.
    claimed: HashSet<(String, StatusCategory)>,
    /// The last poll's events were handed to the controller.
    handed_out: bool,
}

/// The poller as core's `InterruptionSource`: see the module documentation.
pub struct InstanceStatusSource {
    api: Arc<dyn InstanceStatusApi>,
    interval: Duration,
    state: Mutex<PollState>,
    shutdown: watch::Sender<bool>,
}

impl std::fmt::Debug for InstanceStatusSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstanceStatusSource")
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

impl InstanceStatusSource {
    /// Polls `api` every [`POLL_INTERVAL`].
    pub fn new(api: Arc<dyn InstanceStatusApi>) -> Self {
        Self::with_interval(api, POLL_INTERVAL)
    }

    /// Polls every `interval` (tests).
    pub fn with_interval(api: Arc<dyn InstanceStatusApi>, interval: Duration) -> Self {
        Self {
            api,
            interval,
            state: Mutex::new(PollState::default()),
            shutdown: watch::Sender::new(false),
        }
    }

    /// Makes every pending and later `receive` return None.
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Forgets the counted pairs the last poll's events did not find claimed again, now that the controller
    /// has handled them (upstream prunes at the end of each reconcile).
    async fn prune_counted(&self) {
        let mut state = self.state.lock().await;
        if state.handed_out {
            let claimed = std::mem::take(&mut state.claimed);
            state.counted.retain(|pair| claimed.contains(pair));
            state.handed_out = false;
        }
    }
}

#[async_trait]
impl InterruptionSource for InstanceStatusSource {
    async fn receive(&self) -> Option<Vec<InterruptionEvent>> {
        self.prune_counted().await;
        let mut shutdown = self.shutdown.subscribe();
        loop {
            if *shutdown.borrow() {
                return None;
            }
            let polled_before = std::mem::replace(&mut self.state.lock().await.polled, true);
            if polled_before {
                tokio::select! {
                    () = tokio::time::sleep(self.interval) => {}
                    _ = shutdown.wait_for(|stop| *stop) => return None,
                }
            }
            let polled = tokio::select! {
                polled = poll(self.api.as_ref(), Timestamp::now()) => polled,
                _ = shutdown.wait_for(|stop| *stop) => return None,
            };
            match polled {
                Ok(unhealthy) => {
                    let events: Vec<InterruptionEvent> =
                        unhealthy.iter().flat_map(UnhealthyInstance::events).collect();
                    tracing::debug!(
                        unhealthy = unhealthy.len(),
                        events = events.len(),
                        "polled the instances' status with DescribeInstanceStatus"
                    );
                    let mut state = self.state.lock().await;
                    if events.is_empty() {
                        // Nothing is unhealthy: what was counted is healthy again.
                        state.counted.clear();
                        continue;
                    }
                    state.handed_out = true;
                    return Some(events);
                }
                Err(err) if err.code() == Some(UNAUTHORIZED) => {
                    tracing::error!(
                        error = %err,
                        "ec2:DescribeInstanceStatus permission is not allowed: instances failing their status checks \
                         are not replaced; update the controller's IAM policy (deploy/cloudformation.yaml grants it) \
                         and restart the Karpenter deployment to enable instance status health checks"
                    );
                    let _ = shutdown.wait_for(|stop| *stop).await;
                    return None;
                }
                Err(err) => tracing::warn!(
                    error = %err,
                    retry_in = ?self.interval,
                    "polling the instances' status with DescribeInstanceStatus"
                ),
            }
        }
    }

    async fn claimed(&self, event: &InterruptionEvent) {
        let Some(category) = StatusCategory::of_kind(event.kind) else {
            return;
        };
        let pair = (event.provider_id.clone(), category);
        let mut state = self.state.lock().await;
        state.claimed.insert(pair.clone());
        if state.counted.insert(pair) {
            tracing::info!(
                instance_id = %event.provider_id,
                category = category.as_str(),
                "detected unhealthy instance owned by cluster"
            );
            karpenter_metrics::metrics()
                .interruption_instance_status_unhealthy
                .get_or_create(&karpenter_metrics::StatusCategoryLabels {
                    category: category.as_str().to_string(),
                })
                .inc();
        }
    }
}

#[cfg(test)]
mod tests;
