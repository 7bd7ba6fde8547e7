//! Leader election on a coordination.k8s.io/v1 Lease, the way client-go does it: only the holder runs the
//! controllers; a replica may take the Lease once its holder has not renewed it for `leaseDurationSeconds` as
//! measured on the replica's own clock (so clocks need not agree); every write carries the resourceVersion it
//! read, so two replicas can never both succeed.
//!
//! Two replicas never act as leader at once. A holder renews from the moment it acquires the Lease (while its
//! cache syncs too, see `Operator::run`), and gives up leading once `renew_deadline` has passed since the
//! attempt that last wrote it into the Lease began, a renewal request still unanswered then included (it is
//! abandoned). Another replica counts the `lease_duration` from no earlier than it saw that write, so the holder
//! stops `lease_duration - renew_deadline` (5 s by default) before anyone else may take over: time for its
//! controllers to be cancelled, and room for the two clocks to run at slightly different rates.
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
use tokio::time::Instant;

/// client-go's defaults, which upstream Karpenter keeps.
#[derive(Debug, Clone, Copy)]
pub struct LeaseTimings {
    /// How long a holder's claim lasts without renewal.
    pub lease_duration: Duration,
    /// A holder that has not renewed for this long gives up (and the process exits), a renewal request still
    /// unanswered then included. Must be shorter than `lease_duration`: the difference is the margin by which
    /// the old leader has stopped before a new one may start.
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
    /// When the attempt that last wrote us into the Lease began (tokio's clock). Its write landed no earlier, so
    /// no other replica can count the Lease as expired sooner than `lease_duration` after this instant; the
    /// renew deadline is counted from here.
    renewed_at: Option<Instant>,
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
            renewed_at: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Waits until this replica holds the Lease. Errors other than conflicts are retried, and so is an attempt
    /// that has not answered within the renew deadline (a request that hangs must not stall the election).
    pub async fn acquire(&mut self) {
        loop {
            match tokio::time::timeout(self.timings.renew_deadline, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "acquired the leader lease");
                    return;
                }
                Ok(Ok(false)) => {}
                Ok(Err(error)) => tracing::warn!(lease = %self.name, %error, "leader election"),
                Err(_) => tracing::warn!(
                    lease = %self.name,
                    deadline = ?self.timings.renew_deadline,
                    "acquiring the leader lease did not answer in time"
                ),
            }
            tokio::time::sleep(self.timings.retry_period).await;
        }
    }

    /// Renews the Lease every retry period; returns once another replica took it, or once the renew deadline
    /// has passed since the attempt that last wrote us into the Lease began. Call it right after [`Self::acquire`]
    /// and keep it running for as long as this replica acts as leader, whatever else it waits for: the caller
    /// must stop acting as leader when it returns (the binary exits).
    ///
    /// A renewal that has not answered by the deadline is abandoned rather than awaited: it may still land, or
    /// never, and waiting for it would keep this replica leading past the point where another may take the
    /// Lease (`lease_duration` after it last saw a renewal).
    pub async fn hold(&mut self) {
        let renewed_at = *self.renewed_at.get_or_insert_with(Instant::now);
        let mut deadline = renewed_at + self.timings.renew_deadline;
        loop {
            tokio::time::sleep_until((Instant::now() + self.timings.retry_period).min(deadline)).await;
            if Instant::now() >= deadline {
                tracing::error!(lease = %self.name, "could not renew the leader lease before the deadline");
                return;
            }
            match tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => {
                    if let Some(renewed_at) = self.renewed_at {
                        deadline = renewed_at + self.timings.renew_deadline;
                    }
                }
                Ok(Ok(false)) => {
                    tracing::error!(lease = %self.name, identity = %self.identity, "the leader lease was taken by another replica");
                    return;
                }
                Ok(Err(error)) => tracing::warn!(lease = %self.name, %error, "renewing the leader lease"),
                Err(_) => {
                    tracing::error!(
                        lease = %self.name,
                        deadline = ?self.timings.renew_deadline,
                        "renewing the leader lease did not answer before the deadline"
                    );
                    return;
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
        let started = Instant::now();
        let held = self.try_acquire_or_renew_once().await?;
        if held {
            self.renewed_at = Some(started);
        }
        Ok(held)
    }

    async fn try_acquire_or_renew_once(&mut self) -> Result<bool, kube::Error> {
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

    mod hanging_api_server {
        use std::{
            future::Future,
            pin::Pin,
            sync::atomic::{AtomicBool, Ordering},
            task::{Context, Poll},
        };

        use karpenter_sim::{ApiServer, VirtualClock};

        use super::*;

        type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

        /// A service that passes requests on, except while its switch is on: then it takes them and never
        /// answers (a connection that stalls, an API server that hangs).
        #[derive(Clone)]
        struct Stalls<S> {
            inner: S,
            on: Arc<AtomicBool>,
        }

        impl<S, R> tower::Service<R> for Stalls<S>
        where
            S: tower::Service<R>,
            S::Response: 'static,
            S::Error: 'static,
            S::Future: Send + 'static,
        {
            type Response = S::Response;
            type Error = S::Error;
            type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

            fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
                self.inner.poll_ready(cx)
            }

            fn call(&mut self, request: R) -> Self::Future {
                if self.on.load(Ordering::SeqCst) {
                    return Box::pin(std::future::pending());
                }
                Box::pin(self.inner.call(request))
            }
        }

        /// The simulated API server; the elections' clients reach it through [`Stalls`] (they send only Lease
        /// requests), the test reads it directly.
        struct Hanging {
            api: ApiServer,
            hang: Arc<AtomicBool>,
            clock: Arc<dyn Clock>,
        }

        impl Hanging {
            fn new() -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
                let clock = Arc::new(VirtualClock::starting_at("2026-01-01T00:00:00Z".parse()?));
                Ok(Self {
                    api: ApiServer::new(Arc::clone(&clock)),
                    hang: Arc::new(AtomicBool::new(false)),
                    clock,
                })
            }

            fn client(&self) -> Client {
                let service = Stalls {
                    inner: self.api.service(),
                    on: Arc::clone(&self.hang),
                };
                Client::new(service, "default")
            }

            fn election(&self, identity: &str) -> LeaderElection {
                LeaderElection::new(
                    self.client(),
                    "kube-system",
                    "lease",
                    identity,
                    Arc::clone(&self.clock),
                    LeaseTimings::default(),
                )
            }

            fn hang(&self, on: bool) {
                self.hang.store(on, Ordering::SeqCst);
            }

            async fn renew_time(&self) -> Result<Option<Timestamp>, kube::Error> {
                let lease = Api::<Lease>::namespaced(self.api.client(), "kube-system")
                    .get("lease")
                    .await?;
                Ok(lease.spec.and_then(|s| s.renew_time).map(|t| t.0))
            }
        }

        #[tokio::test(start_paused = true)]
        async fn a_renewal_that_never_answers_ends_the_hold_at_the_renew_deadline() -> TestResult {
            let server = Hanging::new()?;
            let mut election = server.election("a");
            let start = Instant::now();
            election.acquire().await;
            assert_eq!(start.elapsed(), Duration::ZERO);

            // Renewals at 2 s and 4 s succeed; from 5 s on every Lease request hangs (the one at 6 s first).
            let (returned_after, ()) = tokio::join!(
                async {
                    tokio::time::timeout(Duration::from_secs(60), election.hold())
                        .await
                        .map(|()| start.elapsed())
                },
                async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    server.hang(true);
                }
            );
            // The hanging renewal is abandoned 10 s (the renew deadline) after the last successful one began,
            // not awaited: the Lease still says 4 s, so another replica may take it from 19 s on (15 s later),
            // and by then this one has stopped for 5 s.
            assert_eq!(returned_after.ok(), Some(Duration::from_secs(14)));
            server.hang(false);
            let renewed = server.renew_time().await?.ok_or("the Lease has no renewTime")?;
            let acquired: Timestamp = "2026-01-01T00:00:04Z".parse()?;
            assert_eq!(renewed, acquired);
            Ok(())
        }

        #[tokio::test(start_paused = true)]
        async fn a_hold_started_late_counts_the_deadline_from_the_acquisition() -> TestResult {
            let server = Hanging::new()?;
            let mut election = server.election("a");
            let start = Instant::now();
            election.acquire().await;
            server.hang(true);
            // Whatever the caller did between acquiring and holding (a cache sync) counts against the deadline.
            tokio::time::sleep(Duration::from_secs(7)).await;
            tokio::time::timeout(Duration::from_secs(60), election.hold())
                .await
                .map_err(|_| "still holding a minute later")?;
            assert_eq!(start.elapsed(), Duration::from_secs(10));
            Ok(())
        }

        #[tokio::test(start_paused = true)]
        async fn an_acquisition_that_never_answers_is_abandoned_and_tried_again() -> TestResult {
            let server = Hanging::new()?;
            let mut election = server.election("a");
            let start = Instant::now();
            server.hang(true);
            let (acquired, ()) = tokio::join!(
                tokio::time::timeout(Duration::from_secs(60), election.acquire()),
                async {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    server.hang(false);
                }
            );
            acquired.map_err(|_| "still acquiring a minute later")?;
            // The first attempt is given up at 10 s; the next, a retry period later, succeeds.
            assert_eq!(start.elapsed(), Duration::from_secs(12));
            assert!(server.renew_time().await?.is_some());
            Ok(())
        }
    }
}
