//! Leader election on a coordination.k8s.io/v1 Lease, the way client-go does it: only the holder runs the
//! controllers; a replica may take the Lease once its holder has not renewed it for `leaseDurationSeconds` as
//! measured on the replica's own clock (so clocks need not agree); every write carries the resourceVersion it
//! read, so two replicas can never both succeed.
//!
//! Written here rather than taken from kube-lease-manager because that crate measures expiry with the system
//! clock: on the simulator's virtual clock a failover test would wait real seconds.

use std::{sync::Arc, time::Duration};

use jiff::Timestamp;
use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
};
use karpenter_core::clock::Clock;
use karpenter_state::api_errors::is_conflict;
use kube::{Api, Client, api::PostParams};

/// client-go's defaults, which upstream Karpenter keeps.
#[derive(Debug, Clone, Copy)]
pub struct LeaseTimings {
    /// How long a holder's claim lasts without renewal.
    pub lease_duration: Duration,
    /// A holder that has not renewed for this long gives up (and the process exits).
    pub renew_deadline: Duration,
    /// Between attempts to acquire or renew.
    pub retry_period: Duration,
}

impl Default for LeaseTimings {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// The holder and renew time last read, and when (on our clock) they last changed.
#[derive(Debug, Clone, PartialEq)]
struct Observed {
    holder: Option<String>,
    renew_time: Option<Timestamp>,
    at: Timestamp,
}

/// Whether `identity` may write itself into the Lease now.
fn may_take(spec: Option<&LeaseSpec>, identity: &str, observed_at: Timestamp, now: Timestamp) -> bool {
    let Some(spec) = spec else { return true };
    match spec.holder_identity.as_deref() {
        None | Some("") => true,
        Some(holder) if holder == identity => true,
        Some(_) => {
            let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15).max(1));
            now.as_second() >= observed_at.as_second() + duration
        }
    }
}

/// One replica's side of the election.
pub struct LeaderElection {
    api: Api<Lease>,
    name: String,
    identity: String,
    clock: Arc<dyn Clock>,
    timings: LeaseTimings,
    observed: Option<Observed>,
}

impl LeaderElection {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        clock: Arc<dyn Clock>,
        timings: LeaseTimings,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            clock,
            timings,
            observed: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Waits until this replica holds the Lease. Errors other than conflicts are retried.
    pub async fn acquire(&mut self) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "acquired the leader lease");
                    return;
                }
                Ok(false) => {}
                Err(error) => tracing::warn!(lease = %self.name, %error, "leader election"),
            }
            tokio::time::sleep(self.timings.retry_period).await;
        }
    }

    /// Renews the Lease every retry period; returns once it could not be renewed for the renew deadline or
    /// another replica took it. The caller must then stop acting as leader (the binary exits).
    pub async fn hold(&mut self) {
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.timings.retry_period).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renewal = tokio::time::Instant::now(),
                Ok(false) => {
                    tracing::error!(lease = %self.name, identity = %self.identity, "the leader lease was taken by another replica");
                    return;
                }
                Err(error) => {
                    tracing::warn!(lease = %self.name, %error, "renewing the leader lease");
                    if last_renewal.elapsed() >= self.timings.renew_deadline {
                        tracing::error!(lease = %self.name, "could not renew the leader lease before the deadline");
                        return;
                    }
                }
            }
        }
    }

    /// Gives the Lease up so another replica takes over at once (on a clean shutdown).
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        let mut lease = self.api.get(&self.name).await?;
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(self.clock.now()));
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await?;
        Ok(())
    }

    /// One attempt: `Ok(true)` when we hold the Lease afterwards.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let now = self.clock.now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.claim(None, now)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(e) if is_conflict(&e) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone();
        let seen = Observed {
            holder: spec.as_ref().and_then(|s| s.holder_identity.clone()),
            renew_time: spec.as_ref().and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
            at: now,
        };
        let observed_at = match &self.observed {
            Some(o) if o.holder == seen.holder && o.renew_time == seen.renew_time => o.at,
            _ => {
                self.observed = Some(seen);
                now
            }
        };
        if !may_take(spec.as_ref(), &self.identity, observed_at, now) {
            return Ok(false);
        }
        lease.spec = Some(self.claim(spec.as_ref(), now));
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The spec with us as holder, renewed now.
    fn claim(&self, previous: Option<&LeaseSpec>, now: Timestamp) -> LeaseSpec {
        let ours = previous.and_then(|s| s.holder_identity.as_deref()) == Some(self.identity.as_str());
        let transitions = previous.and_then(|s| s.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(i32::try_from(self.timings.lease_duration.as_secs()).unwrap_or(15)),
            acquire_time: if ours {
                previous.and_then(|s| s.acquire_time.clone())
            } else {
                Some(MicroTime(now))
            },
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(if ours || previous.is_none() {
                transitions
            } else {
                transitions + 1
            }),
            ..LeaseSpec::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn held_by(holder: &str) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_free_or_own_lease_may_be_taken() {
        assert!(may_take(None, "a", ts(0), ts(0)));
        assert!(may_take(Some(&LeaseSpec::default()), "a", ts(0), ts(0)));
        assert!(may_take(Some(&held_by("a")), "a", ts(0), ts(0)));
    }

    #[test]
    fn anothers_lease_only_after_it_went_unrenewed_for_its_duration_on_our_clock() {
        let spec = held_by("b");
        assert!(!may_take(Some(&spec), "a", ts(100), ts(114)));
        assert!(may_take(Some(&spec), "a", ts(100), ts(115)));
    }
}
