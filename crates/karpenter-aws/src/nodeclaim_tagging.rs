//! The `karpenter.sh/nodeclaim` tag that names an instance's NodeClaim (and `Name`, once it has a Node).
//!
//! Garbage collection takes an instance without that tag for one no NodeClaim owns and terminates it, so the
//! tag must get there, and until it does the provider must not show the instance without it:
//! - a launch alone carries the tag in its CreateFleet; a batched launch gets it through CreateTags right
//!   after ([`crate::fleet_batcher`]), retried with backoff ([`TagRetry`], [`tag_with_retries`]);
//! - the [`InstanceTagLedger`] remembers which launched instances carry their tag and which still wait for it;
//!   `CloudProvider::get` and `list` show a waiting instance with its tag ([`InstanceTagLedger::overlay`]), so
//!   garbage collection sees who owns it;
//! - the tagging controller ([`controller`], upstream's `nodeclaim.tagging`) applies what is missing later:
//!   the NodeClaim tag of a claim still registering whose instance is not known to carry it (a failed
//!   tagging, or any instance after a restart), and once the claim has a Node, `Name`,
//!   `karpenter.sh/nodeclaim` and `eks:eks-cluster-name`, marking the claim `karpenter.k8s.aws/tagged: "true"`
//!   as upstream does.

pub mod controller;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use karpenter_api::labels::AWS_TAG_NODECLAIM;

use crate::error::AwsError;
use crate::instance::Ec2Instance;
use crate::tags::create_tags;

/// Adds tags to instances: EC2's CreateTags, or a fake in tests.
#[async_trait]
pub trait InstanceTagger: Send + Sync + 'static {
    async fn tag_instance(&self, instance_id: &str, tags: &BTreeMap<String, String>) -> Result<(), AwsError>;
}

#[async_trait]
impl InstanceTagger for aws_sdk_ec2::Client {
    async fn tag_instance(&self, instance_id: &str, tags: &BTreeMap<String, String>) -> Result<(), AwsError> {
        create_tags(self, instance_id, tags).await
    }
}

/// How often and how patiently a launched instance's tagging is tried again. Every error is retried: right
/// after a launch CreateTags may not find the instance yet (`InvalidInstanceID.NotFound`, EC2's eventual
/// consistency), and throttling and network errors pass too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagRetry {
    /// Calls in all, the first included (at least one).
    pub attempts: u32,
    /// The wait before the second call; each later wait is `factor` times the previous.
    pub first_backoff: Duration,
    pub factor: u32,
}

impl Default for TagRetry {
    /// Three calls, 200 ms and 800 ms apart: about a second at most before the launches of the batch are
    /// answered (the tagging controller keeps trying after that).
    fn default() -> Self {
        Self {
            attempts: 3,
            first_backoff: Duration::from_millis(200),
            factor: 4,
        }
    }
}

impl TagRetry {
    /// The waits between calls, in order.
    pub fn backoffs(self) -> impl Iterator<Item = Duration> {
        let calls = self.attempts.max(1);
        std::iter::successors(Some(self.first_backoff), move |wait| {
            Some(wait.saturating_mul(self.factor))
        })
        .take(usize::try_from(calls - 1).unwrap_or(usize::MAX))
    }
}

/// Tags instance `instance_id` with `tags`, calling again after each failure as `retry` says; the last error
/// when every call failed.
pub async fn tag_with_retries<T: InstanceTagger + ?Sized>(
    tagger: &T,
    instance_id: &str,
    tags: &BTreeMap<String, String>,
    retry: TagRetry,
) -> Result<(), AwsError> {
    let mut backoffs = retry.backoffs();
    loop {
        match tagger.tag_instance(instance_id, tags).await {
            Ok(()) => return Ok(()),
            Err(err) => match backoffs.next() {
                Some(wait) => {
                    tracing::debug!(instance = instance_id, error = %err, ?wait, "tagging an instance; trying again");
                    tokio::time::sleep(wait).await;
                }
                None => return Err(err),
            },
        }
    }
}

/// Whether a launched instance is known to carry its NodeClaim tag.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TagState {
    /// Not yet: these are the tags EC2 should have.
    Waiting(BTreeMap<String, String>),
    Applied,
}

#[derive(Debug, Clone)]
struct Entry {
    state: TagState,
    since: Instant,
}

/// Instance id → whether its NodeClaim tag is on it, for the instances this process launched or tagged. Share
/// it as `Arc<InstanceTagLedger>`.
#[derive(Debug, Default)]
pub struct InstanceTagLedger {
    entries: Mutex<HashMap<String, Entry>>,
}

impl InstanceTagLedger {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Instance `instance_id` should carry `tags` and may not yet.
    pub fn record_waiting(&self, instance_id: &str, tags: BTreeMap<String, String>, now: Instant) {
        self.lock().insert(
            instance_id.to_string(),
            Entry {
                state: TagState::Waiting(tags),
                since: now,
            },
        );
    }

    /// Instance `instance_id` carries its NodeClaim tag.
    pub fn record_applied(&self, instance_id: &str, now: Instant) {
        self.lock().insert(
            instance_id.to_string(),
            Entry {
                state: TagState::Applied,
                since: now,
            },
        );
    }

    pub fn is_applied(&self, instance_id: &str) -> bool {
        self.lock()
            .get(instance_id)
            .is_some_and(|e| e.state == TagState::Applied)
    }

    /// The tags instance `instance_id` waits for, if it does.
    pub fn waiting(&self, instance_id: &str) -> Option<BTreeMap<String, String>> {
        match &self.lock().get(instance_id)?.state {
            TagState::Waiting(tags) => Some(tags.clone()),
            TagState::Applied => None,
        }
    }

    pub fn forget(&self, instance_id: &str) {
        self.lock().remove(instance_id);
    }

    /// Shows each of `instances` that waits for its tags with them, as the provider's answers should; one that
    /// EC2 describes with its NodeClaim tag already is recorded applied.
    pub fn overlay(&self, instances: &mut [Ec2Instance]) {
        let mut entries = self.lock();
        for instance in instances {
            let Some(entry) = entries.get_mut(&instance.id) else {
                continue;
            };
            let TagState::Waiting(tags) = &entry.state else {
                continue;
            };
            if instance.tags.get(AWS_TAG_NODECLAIM) == tags.get(AWS_TAG_NODECLAIM) {
                entry.state = TagState::Applied;
            } else {
                instance
                    .tags
                    .extend(tags.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
    }

    /// Forgets the instances recorded more than `grace` before `now` that are not in `owned` (the instances
    /// the cluster's NodeClaims record): their claims are gone, or never recorded them in time. The grace
    /// covers a launch whose claim has not recorded its instance yet.
    pub fn forget_unowned(&self, owned: &HashSet<&str>, now: Instant, grace: Duration) {
        self.lock().retain(|id, entry| {
            owned.contains(id.as_str()) || now.saturating_duration_since(entry.since) <= grace
        });
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests;
