//! The controller process (`karpenter controller`): settings ([`settings`]), JSON logs ([`logging`]),
//! `/metrics` and the probes on every replica ([`health`], [`state_metrics`]), leader election on a Lease
//! ([`leader`]), and the controllers the leader runs, assembled once in [`controllers`] for the binary,
//! `karpenter simulate` and the end-to-end tests alike.
//!
//! Start-up order, as upstream: settings validated (a bad one stops the process naming it), servers bound,
//! the state cache watching (on every replica, so a standby is ready to take over), the Lease acquired, the
//! cache synced, then the controllers. Losing the Lease, or any controller loop ending, ends [`Operator::run`]
//! with an error and the binary exits non-zero: a restarted process starts clean rather than half-led.
//! Asked to stop (the binary: SIGTERM or SIGINT), it stops the controllers, releases the Lease and returns
//! `Ok` within [`SHUTDOWN_DEADLINE`], and the binary exits 0.

pub mod aws_settings;
pub mod controllers;
mod error;
pub mod health;
pub mod kube_client;
pub mod leader;
pub mod logging;
pub mod metered_cloud;
pub mod rate_limit;
pub mod settings;
pub mod state_metrics;

use std::{future::Future, time::Duration};

use karpenter_metrics::{BuildInfoLabels, LeaderLabels, metrics};
use tokio::task::JoinSet;

pub use controllers::{ControllerParts, ControllerTask, Observer, controller_tasks};
pub use error::OperatorError;
pub use leader::{LeaderElection, LeaseTimings};
pub use settings::Settings;

/// On shutdown, how long the controllers have to stop (a disruption pass or a scheduling simulation is not
/// interrupted mid-computation; it stops at its next await) before the Lease is released regardless.
pub const STOP_DEADLINE: Duration = Duration::from_secs(10);
/// On shutdown, how long releasing the Lease may take (an API server that does not answer must not hold the
/// process past the pod's termination grace period).
pub const RELEASE_DEADLINE: Duration = Duration::from_secs(5);
/// The longest a clean shutdown takes once asked: within the kubelet's default 30-second termination grace
/// period, so the process exits by itself rather than being killed with the Lease still held.
pub const SHUTDOWN_DEADLINE: Duration =
    Duration::from_secs(STOP_DEADLINE.as_secs() + RELEASE_DEADLINE.as_secs());

/// One controller process.
pub struct Operator {
    pub parts: ControllerParts,
    /// Loops the cloud provider adds (the EC2NodeClass controller, price refreshes, ...), run by the leader
    /// beside the core controllers.
    pub provider_tasks: Vec<ControllerTask>,
    /// Bind METRICS_PORT and HEALTH_PROBE_PORT (off in in-process tests that run several replicas).
    pub serve_http: bool,
    pub lease_timings: LeaseTimings,
    /// The client leader election uses; `None`: the controllers' client. The binary passes one without the
    /// KUBE_CLIENT_QPS limit so renewals never wait behind the controllers' requests.
    pub lease_client: Option<kube::Client>,
}

/// This replica's name in the Lease: POD_NAME (the chart sets it), else HOSTNAME, else one made from the pid.
pub fn default_identity(settings: &Settings) -> String {
    if !settings.identity.is_empty() {
        return settings.identity.clone();
    }
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| format!("karpenter-{}", std::process::id()))
}

impl Operator {
    pub fn new(parts: ControllerParts) -> Self {
        Self {
            parts,
            provider_tasks: Vec::new(),
            serve_http: true,
            lease_timings: LeaseTimings::default(),
            lease_client: None,
        }
    }

    /// Runs until `shutdown` completes (then the controllers are stopped, the Lease released so a standby takes
    /// over at once, and `Ok`, all within [`SHUTDOWN_DEADLINE`]) or something makes this replica unfit to lead
    /// (then the error). Dropping the future stops everything at once, as a crash would.
    ///
    /// With leader election on, the Lease is renewed from the moment it is acquired, while the cache syncs as
    /// well, and the controllers start only once the cache has synced with the Lease still held; see [`leader`]
    /// for why two replicas then never act at once.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), OperatorError> {
        let Self {
            parts,
            provider_tasks,
            serve_http,
            lease_timings,
            lease_client,
        } = self;
        let settings = parts.settings.clone();
        settings.validate()?;
        metrics()
            .build_info
            .get_or_create_owned(&BuildInfoLabels {
                version: env!("CARGO_PKG_VERSION").into(),
                goversion: String::new(),
                goarch: std::env::consts::ARCH.into(),
                commit: option_env!("KARPENTER_COMMIT").unwrap_or_default().into(),
            })
            .set(1);

        // Every task of this replica; dropping the set aborts them.
        let mut background = JoinSet::new();
        if serve_http {
            let observe = !settings.disable_cluster_state_observability;
            let (metrics_listener, metrics_addr) = health::bind("metrics", settings.metrics_port).await?;
            let (probes_listener, probes_addr) =
                health::bind("health probes", settings.health_probe_port).await?;
            tracing::info!(%metrics_addr, %probes_addr, "serving /metrics, /healthz and /readyz");
            background.spawn(health::serve(
                metrics_listener,
                health::metrics_router(observe.then(|| parts.state.clone())),
            ));
            background.spawn(health::serve(
                probes_listener,
                health::probes_router(parts.state.clone()),
            ));
        }
        background.spawn({
            let (state, client) = (parts.state.clone(), parts.client.clone());
            async move { state.watch(client).await }
        });

        let identity = default_identity(&settings);
        let lease_name = settings.leader_election_name.clone();
        let mut election = (!settings.disable_leader_election).then(|| {
            LeaderElection::new(
                lease_client.unwrap_or_else(|| parts.client.clone()),
                settings.lease_namespace(),
                &lease_name,
                &identity,
                std::sync::Arc::clone(&parts.clock),
                lease_timings,
            )
        });
        // The series' own handle, not the family's read guard, so this future stays Send.
        let leader_gauge = metrics()
            .leader_election_master_status
            .get_or_create_owned(&LeaderLabels {
                name: lease_name.clone(),
            });
        leader_gauge.set(0);

        tokio::pin!(shutdown);
        if let Some(election) = election.as_mut() {
            tracing::info!(lease = %lease_name, %identity, "waiting for the leader lease");
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                () = election.acquire() => {}
            }
            leader_gauge.set(1);
        }

        let mut controllers = JoinSet::new();
        let outcome = {
            // From the moment the Lease is ours it is renewed, by this one loop, until this replica stops leading:
            // while the cache syncs as well as while the controllers run. A sync that outlasted the lease duration
            // unrenewed would let a standby take the Lease and start its controllers, and ours would start beside
            // them once synced. Losing the Lease before the cache has synced means the controllers never start.
            let hold = async {
                match election.as_mut() {
                    Some(election) => election.hold().await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(hold);
            let synced = async {
                while !parts.state.synced() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            };
            let stopped_before_leading = tokio::select! {
                // A lost Lease wins over a sync that completes at the same moment.
                biased;
                () = &mut shutdown => Some(Ok(())),
                () = &mut hold => Some(Err(OperatorError::LeaseLost(lease_name.clone()))),
                () = synced => None,
            };
            match stopped_before_leading {
                Some(outcome) => outcome,
                None => {
                    // (Already 1 with leader election on: it tells whether this replica holds the Lease.)
                    leader_gauge.set(1);
                    tracing::info!(%identity, "leading: starting the controllers");
                    for (name, task) in controller_tasks(&parts).into_iter().chain(provider_tasks) {
                        controllers.spawn(async move {
                            task.await;
                            name
                        });
                    }
                    tokio::select! {
                        () = &mut shutdown => Ok(()),
                        () = &mut hold => Err(OperatorError::LeaseLost(lease_name.clone())),
                        Some(stopped) = controllers.join_next() => Err(OperatorError::ControllerStopped(
                            stopped.unwrap_or("a controller that panicked"),
                        )),
                    }
                }
            }
        };
        leader_gauge.set(0);
        if outcome.is_ok() {
            tracing::info!(%identity, "shutting down: stopping the controllers");
        }
        // No new work: every controller is cancelled where it waits. A command half carried out is left as a
        // crash would leave it, which the next leader recovers from (the disruption controller removes the
        // `karpenter.sh/disrupted` taints of candidates not yet deleted; a drain or a launch is picked up from
        // the NodeClaim's finalizer and status). Waiting for the tasks to be gone, not just told to go, keeps
        // any request of ours from landing after the Lease is released and the next leader has begun.
        controllers.abort_all();
        if tokio::time::timeout(STOP_DEADLINE, async {
            while controllers.join_next().await.is_some() {}
        })
        .await
        .is_err()
        {
            tracing::warn!(
                deadline = ?STOP_DEADLINE,
                "a controller did not stop before the deadline; releasing the lease anyway"
            );
        }
        if outcome.is_ok()
            && let Some(election) = election.as_mut()
        {
            match tokio::time::timeout(RELEASE_DEADLINE, election.release()).await {
                Ok(Ok(())) => tracing::info!(lease = %lease_name, %identity, "released the leader lease"),
                Ok(Err(error)) => tracing::warn!(%error, "releasing the leader lease"),
                Err(_) => {
                    tracing::warn!(deadline = ?RELEASE_DEADLINE, "releasing the leader lease timed out")
                }
            }
        }
        outcome
    }
}
