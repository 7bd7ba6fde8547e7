//! CreateFleet calls batched over a short window, as upstream's CreateFleet batcher does: launches with the
//! same fleet input that arrive while a batch is open go out as one CreateFleet for as many instances, and the
//! instances it returns are handed out one per launch. A batch closes when no launch has joined it for the
//! idle time (35 ms), when it has been open for the longest wait (1 s), or when it holds the most launches
//! (1000), so a launch alone waits at most the idle time.
//!
//! The fleet input is the [`LaunchRequest`] without the `karpenter.sh/nodeclaim` tag, which names one
//! instance: a launch alone is sent with it, exactly as it came; a batch is sent without it and each instance
//! gets its NodeClaim's tag through CreateTags afterwards, tried again with backoff when it fails
//! ([`FleetBatchOptions::tag_retry`]). The [`InstanceTagLedger`] records each launched instance as tagged, or as
//! waiting for its tag until the tagging controller applies it ([`crate::nodeclaim_tagging`]); the provider
//! shows a waiting instance with its tag meanwhile. Launches the fleet could not fill get the fleet's
//! capacity error (the offerings it found out of capacity are marked unavailable once, for all of them), or the
//! call's error when CreateFleet itself failed. Launches into a capacity reservation are not batched: each
//! holds one instance of its reservation and is sent alone, at once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use karpenter_api::labels::AWS_TAG_NODECLAIM;
use karpenter_core::cloudprovider::CloudProviderError;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use crate::error::AwsError;
use crate::launch::{FleetResult, LaunchRequest, LaunchedInstance, launch_instances};
use crate::nodeclaim_tagging::{InstanceTagLedger, InstanceTagger, TagRetry, tag_with_retries};
use crate::unavailable_offerings::UnavailableOfferings;

/// When a batch closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetBatchOptions {
    /// Closes after this long without a new launch.
    pub idle: Duration,
    /// Closes after this long open, however many launches keep arriving.
    pub max_wait: Duration,
    /// Closes when it holds this many launches.
    pub max_launches: usize,
    /// How a batched instance's NodeClaim tag is tried again.
    pub tag_retry: TagRetry,
    /// The `batcher` label of the batch metrics (`karpenter_cloudprovider_batcher_batch_size` and
    /// `_batch_time_seconds`).
    pub batcher: &'static str,
}

impl Default for FleetBatchOptions {
    /// Upstream's CreateFleet batcher: 35 ms idle, 1 s at most, 1000 launches.
    fn default() -> Self {
        Self {
            idle: Duration::from_millis(35),
            max_wait: Duration::from_secs(1),
            max_launches: 1000,
            tag_retry: TagRetry::default(),
            batcher: "create_fleet",
        }
    }
}

/// Where a batch goes: EC2 ([`Ec2Fleet`]), or a fake in tests. Its [`InstanceTagger`] tags batched instances.
#[async_trait]
pub trait FleetApi: InstanceTagger {
    /// `count` instances of `request` with one CreateFleet.
    async fn launch(&self, request: &LaunchRequest, count: i32) -> Result<FleetResult, CloudProviderError>;
}

/// CreateFleet and CreateTags on EC2; capacity errors mark offerings unavailable in the shared cache.
pub struct Ec2Fleet {
    ec2: aws_sdk_ec2::Client,
    unavailable: Arc<UnavailableOfferings>,
}

impl Ec2Fleet {
    pub fn new(ec2: aws_sdk_ec2::Client, unavailable: Arc<UnavailableOfferings>) -> Self {
        Self { ec2, unavailable }
    }
}

#[async_trait]
impl FleetApi for Ec2Fleet {
    async fn launch(&self, request: &LaunchRequest, count: i32) -> Result<FleetResult, CloudProviderError> {
        launch_instances(
            &self.ec2,
            request,
            count,
            &self.unavailable,
            std::time::Instant::now(),
        )
        .await
    }
}

#[async_trait]
impl InstanceTagger for Ec2Fleet {
    async fn tag_instance(&self, instance_id: &str, tags: &BTreeMap<String, String>) -> Result<(), AwsError> {
        self.ec2.tag_instance(instance_id, tags).await
    }
}

type Reply = oneshot::Sender<Result<LaunchedInstance, CloudProviderError>>;

/// One launch waiting in a batch.
struct Waiter {
    /// The tags only its instance gets (its NodeClaim's name).
    instance_tags: BTreeMap<String, String>,
    reply: Reply,
}

struct Batch {
    id: u64,
    /// The fleet input its launches share.
    request: LaunchRequest,
    waiters: Vec<Waiter>,
    last_arrival: Instant,
    /// Wakes the batch's timer when the batch is full.
    full: Arc<Notify>,
}

#[derive(Default)]
struct OpenBatches {
    next_id: u64,
    batches: Vec<Batch>,
}

/// Batches launches into CreateFleet calls; see the module documentation.
pub struct FleetBatcher<F: FleetApi> {
    fleet: Arc<F>,
    options: FleetBatchOptions,
    open: Arc<Mutex<OpenBatches>>,
    ledger: Arc<InstanceTagLedger>,
}

impl<F: FleetApi> std::fmt::Debug for FleetBatcher<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetBatcher")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// `request` without the tags that name one instance, and those tags.
fn split_instance_tags(mut request: LaunchRequest) -> (LaunchRequest, BTreeMap<String, String>) {
    let instance_tags = request.tags.remove_entry(AWS_TAG_NODECLAIM).into_iter().collect();
    (request, instance_tags)
}

/// CloudProviderError is not Clone; every launch of a failed batch gets its own copy.
fn copy_error(err: &CloudProviderError) -> CloudProviderError {
    match err {
        CloudProviderError::NodeClaimNotFound(name) => CloudProviderError::NodeClaimNotFound(name.clone()),
        CloudProviderError::InsufficientCapacity { message, offerings } => {
            CloudProviderError::InsufficientCapacity {
                message: message.clone(),
                offerings: offerings.clone(),
            }
        }
        CloudProviderError::NodeClassNotReady { name, reason } => CloudProviderError::NodeClassNotReady {
            name: name.clone(),
            reason: reason.clone(),
        },
        CloudProviderError::Create { reason, message } => CloudProviderError::Create {
            reason: reason.clone(),
            message: message.clone(),
        },
        CloudProviderError::Transient(message) => CloudProviderError::Transient(message.clone()),
    }
}

impl<F: FleetApi> FleetBatcher<F> {
    pub fn new(fleet: F, options: FleetBatchOptions) -> Self {
        Self {
            fleet: Arc::new(fleet),
            options,
            open: Arc::default(),
            ledger: Arc::default(),
        }
    }

    /// Which launched instances carry their NodeClaim tag, and which wait for it.
    pub fn tag_ledger(&self) -> &Arc<InstanceTagLedger> {
        &self.ledger
    }

    /// Launches one instance of `request`, in a batch with the launches of the same fleet input that arrive
    /// meanwhile.
    pub async fn launch(&self, request: &LaunchRequest) -> Result<LaunchedInstance, CloudProviderError> {
        if request.reservation.is_some() {
            let result = self.fleet.launch(request, 1).await?;
            let launched = result
                .instances
                .first()
                .cloned()
                .ok_or_else(|| result.failure(request))?;
            if request.tags.contains_key(AWS_TAG_NODECLAIM) {
                self.ledger
                    .record_applied(&launched.instance_id, std::time::Instant::now());
            }
            return Ok(launched);
        }
        let (shared, instance_tags) = split_instance_tags(request.clone());
        let (reply, answer) = oneshot::channel();
        let waiter = Waiter { instance_tags, reply };
        let now = Instant::now();
        let new_batch = {
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            let max_launches = self.options.max_launches.max(1);
            match open
                .batches
                .iter_mut()
                .find(|b| b.request == shared && b.waiters.len() < max_launches)
            {
                Some(batch) => {
                    batch.waiters.push(waiter);
                    batch.last_arrival = now;
                    if batch.waiters.len() >= max_launches {
                        batch.full.notify_one();
                    }
                    None
                }
                None => {
                    let id = open.next_id;
                    open.next_id += 1;
                    let full = Arc::new(Notify::new());
                    if max_launches == 1 {
                        full.notify_one();
                    }
                    open.batches.push(Batch {
                        id,
                        request: shared,
                        waiters: vec![waiter],
                        last_arrival: now,
                        full: Arc::clone(&full),
                    });
                    Some((id, full))
                }
            }
        };
        if let Some((id, full)) = new_batch {
            // The batch runs on its own task, so it launches even if the launch that opened it is dropped.
            tokio::spawn(run_batch(
                Arc::clone(&self.open),
                Arc::clone(&self.fleet),
                Arc::clone(&self.ledger),
                self.options,
                id,
                now,
                full,
            ));
        }
        answer.await.unwrap_or_else(|_| {
            Err(CloudProviderError::Transient(
                "the CreateFleet batch ended without an answer".into(),
            ))
        })
    }
}

/// Waits until batch `id` closes, takes it out of the open batches and sends it.
async fn run_batch<F: FleetApi>(
    open: Arc<Mutex<OpenBatches>>,
    fleet: Arc<F>,
    ledger: Arc<InstanceTagLedger>,
    options: FleetBatchOptions,
    id: u64,
    opened: Instant,
    full: Arc<Notify>,
) {
    let batch = loop {
        let deadline = {
            let mut open = open.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(position) = open.batches.iter().position(|b| b.id == id) else {
                return;
            };
            let batch = &open.batches[position];
            let deadline = (batch.last_arrival + options.idle).min(opened + options.max_wait);
            if batch.waiters.len() >= options.max_launches || Instant::now() >= deadline {
                break open.batches.swap_remove(position);
            }
            deadline
        };
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => {}
            () = full.notified() => {}
        }
    };
    record_batch(options.batcher, batch.waiters.len(), opened.elapsed());
    send_batch(fleet.as_ref(), &ledger, options.tag_retry, batch).await;
}

/// A batch's size and how long it was open, as upstream's batcher metrics count them.
fn record_batch(batcher: &str, size: usize, open_for: Duration) {
    let metrics = karpenter_metrics::metrics();
    let labels = karpenter_metrics::BatcherLabels {
        batcher: batcher.to_string(),
    };
    metrics
        .cloudprovider_batcher_batch_size
        .get_or_create(&labels)
        .observe(size as f64);
    metrics
        .cloudprovider_batcher_batch_time_seconds
        .get_or_create(&labels)
        .observe(open_for.as_secs_f64());
}

/// One CreateFleet for the batch's launches, and each launch's answer.
async fn send_batch<F: FleetApi>(fleet: &F, ledger: &InstanceTagLedger, tag_retry: TagRetry, batch: Batch) {
    // A launch given up on meanwhile gets no instance: nothing would own it.
    let waiters: Vec<Waiter> = batch
        .waiters
        .into_iter()
        .filter(|w| !w.reply.is_closed())
        .collect();
    let alone = waiters.len() == 1;
    let request = match waiters.as_slice() {
        [] => return,
        // Alone: exactly the launch's own request, its instance tags included.
        [only] => {
            let mut request = batch.request.clone();
            request.tags.extend(only.instance_tags.clone());
            request
        }
        _ => batch.request.clone(),
    };
    let count = i32::try_from(waiters.len()).unwrap_or(i32::MAX);
    let result = match fleet.launch(&request, count).await {
        Ok(result) => result,
        Err(err) => {
            for waiter in waiters {
                let _ = waiter.reply.send(Err(copy_error(&err)));
            }
            return;
        }
    };
    if result.instances.len() > waiters.len() {
        tracing::warn!(
            asked = waiters.len(),
            launched = result.instances.len(),
            "CreateFleet launched more instances than asked for; the extra ones belong to no NodeClaim"
        );
    }
    let mut instances = result.instances.iter();
    let assigned: Vec<(Waiter, Option<&LaunchedInstance>)> =
        waiters.into_iter().map(|w| (w, instances.next())).collect();
    let launched = assigned
        .iter()
        .filter_map(|(waiter, instance)| Some((waiter, (*instance)?)))
        .filter(|(waiter, _)| !waiter.instance_tags.is_empty());
    if alone {
        for (_, instance) in launched {
            ledger.record_applied(&instance.instance_id, std::time::Instant::now());
        }
    } else {
        let tagging = launched.map(|(waiter, instance)| async move {
            // Waiting from now on, so that the provider shows the instance with its tag even while it is tried.
            let id = &instance.instance_id;
            ledger.record_waiting(id, waiter.instance_tags.clone(), std::time::Instant::now());
            match tag_with_retries(fleet, id, &waiter.instance_tags, tag_retry).await {
                Ok(()) => ledger.record_applied(id, std::time::Instant::now()),
                Err(err) => tracing::warn!(
                    instance = %id, error = %err, attempts = tag_retry.attempts,
                    "tagging a batch-launched instance with its NodeClaim failed; the tagging controller \
                     applies it later"
                ),
            }
        });
        futures::future::join_all(tagging).await;
    }
    for (waiter, instance) in assigned {
        let answer = match instance {
            Some(instance) => Ok(instance.clone()),
            None => Err(result.failure(&request)),
        };
        let _ = waiter.reply.send(answer);
    }
}

#[cfg(test)]
mod tests;
