//! Leader election holds under a slow cache sync, on the real control plane (kube-apiserver, etcd, ... of
//! `karpenter_e2e::control_plane`, reached through `kubectl proxy`): two replicas run `Operator::run` as
//! `karpenter controller` does, with upstream's Lease timings (15 s duration, 10 s renew deadline, 2 s retry).
//! Replica "a" acquires the Lease first, but its client answers the LIST of NodePools 30 s late, so its state
//! cache takes twice the lease duration to sync; replica "b", on a client without the delay, keeps trying to
//! acquire all the while.
//!
//! "a" must renew the Lease while it syncs: "b" never holds it, "a" starts its controllers once synced and still
//! the holder, and only when "a" shuts down does "b" take over and start its own. Without renewals during the
//! sync, "b" takes the Lease 15 s in and starts its controllers, and "a" starts its own beside them at 30 s.
//!
//! Each replica's controllers include a marker task, started with the others, that records when it started,
//! whether its cache had synced and who held the Lease then, and when it was stopped; the test samples the
//! Lease's holder and renewTime every 250 ms.
//!
//! Needs Go (to build the control plane once), `openssl` and `kubectl`; fails, never skips, when one is missing.

use std::{
    future::Future,
    io::{BufRead, BufReader},
    pin::Pin,
    process::{Child, Stdio},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use karpenter_api::label_policy::LabelPolicy;
use karpenter_core::{catalog::CatalogFile, clock::SystemClock, snapshot::BuildOptions};
use karpenter_e2e::{
    CATALOG, TestResult,
    control_plane::{self, ControlPlane},
};
use karpenter_operator::{ControllerParts, ControllerTask, LeaseTimings, Operator, OperatorError, Settings};
use karpenter_sim::{SimCloudOptions, SimCloudProvider};
use karpenter_state::{ClusterState, Watched};
use kube::{Api, client::ClientBuilder};
use tokio::{sync::oneshot, task::JoinHandle, time::Instant};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// How late replica "a"'s client answers its LIST of NodePools: twice the lease duration.
const SYNC_DELAY: Duration = Duration::from_secs(30);
/// What "a" lists late: the NodePools its state cache watches (any watched kind would do).
const DELAYED_PATH: &str = "/apis/karpenter.sh/v1/nodepools";
const LEASE_NAMESPACE: &str = "kube-system";
const LEASE_NAME: &str = "leader-slow-sync";

fn control_plane() -> &'static ControlPlane {
    match control_plane::shared() {
        Ok(cp) => cp,
        Err(e) => panic!("cannot start the test control plane: {e}"),
    }
}

/// `kubectl proxy` to the real server: plain HTTP on 127.0.0.1, killed on drop.
struct Proxy {
    child: Child,
    url: String,
}

impl Proxy {
    fn start(cp: &ControlPlane) -> Result<Self, Error> {
        let mut child = cp
            .kubectl()
            .args(["proxy", "--port=0", "--address=127.0.0.1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("kubectl proxy has no stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        // "Starting to serve on 127.0.0.1:PORT"
        let Some(addr) = line.trim().rsplit(' ').next().filter(|a| a.contains(':')) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("unexpected kubectl proxy output {line:?}").into());
        };
        Ok(Self {
            child,
            url: format!("http://{addr}"),
        })
    }

    /// A client through the proxy; `delay_lists` holds back the answer to every LIST (a GET of the collection
    /// that is not a watch) of [`DELAYED_PATH`] by [`SYNC_DELAY`] and counts them.
    fn client(&self, delay_lists: Option<Arc<AtomicUsize>>) -> Result<kube::Client, Error> {
        let builder = ClientBuilder::try_from(kube::Config::new(self.url.parse()?))?;
        Ok(match delay_lists {
            Some(delayed) => builder.with_layer(&SlowLists { delayed }).build(),
            None => builder.build(),
        })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A tower layer on the test's client: the LIST of [`DELAYED_PATH`] answers [`SYNC_DELAY`] late, as from an
/// API server under load or a cluster with very many objects of that kind.
struct SlowLists {
    delayed: Arc<AtomicUsize>,
}

impl<S> tower::Layer<S> for SlowLists {
    type Service = SlowListsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SlowListsService {
            inner,
            delayed: Arc::clone(&self.delayed),
        }
    }
}

struct SlowListsService<S> {
    inner: S,
    delayed: Arc<AtomicUsize>,
}

impl<S, B> tower::Service<http::Request<B>> for SlowListsService<S>
where
    S: tower::Service<http::Request<B>>,
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

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let uri = request.uri();
        let list = request.method() == http::Method::GET
            && uri.path() == DELAYED_PATH
            && !uri
                .query()
                .unwrap_or_default()
                .split('&')
                .any(|p| p == "watch=true");
        let answer = self.inner.call(request);
        if !list {
            return Box::pin(answer);
        }
        self.delayed.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            tokio::time::sleep(SYNC_DELAY).await;
            answer.await
        })
    }
}

/// What a replica's marker task saw when its controllers started.
#[derive(Debug, Clone)]
struct Started {
    at: Instant,
    synced: bool,
    holder: Option<String>,
}

/// Records when it is dropped: when the marker task, and so the replica's controllers, were stopped.
struct OnDrop(Arc<Mutex<Option<Instant>>>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        *lock(&self.0) = Some(Instant::now());
    }
}

/// One controller process: `Operator::run` with leader election on, no HTTP servers, the simulated cloud.
struct Replica {
    started: Arc<Mutex<Option<Started>>>,
    /// When its controllers were stopped.
    stopped: Arc<Mutex<Option<Instant>>>,
    /// When `Operator::run` returned.
    ended: Arc<Mutex<Option<Instant>>>,
    task: Option<JoinHandle<Result<(), OperatorError>>>,
    shutdown: Option<oneshot::Sender<()>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The holder, renewTime and acquireTime of the Lease now.
async fn lease(
    leases: &Api<Lease>,
) -> Result<(Option<String>, Option<Timestamp>, Option<Timestamp>), kube::Error> {
    let spec = leases.get_opt(LEASE_NAME).await?.and_then(|l| l.spec);
    Ok(match spec {
        Some(s) => (
            s.holder_identity.filter(|h| !h.is_empty()),
            s.renew_time.map(|t| t.0),
            s.acquire_time.map(|t| t.0),
        ),
        None => (None, None, None),
    })
}

/// A controller the leader runs beside the others: records when it started, whether the cache had synced and
/// who held the Lease then (read on `observer`, a client without the delay), then waits to be stopped and
/// records when it was.
fn marker(
    state: ClusterState,
    observer: kube::Client,
    started: Arc<Mutex<Option<Started>>>,
    stopped: Arc<Mutex<Option<Instant>>>,
) -> ControllerTask {
    (
        "test.leadership-marker",
        Box::pin(async move {
            let _stopped = OnDrop(stopped);
            let at = Instant::now();
            let synced = state.synced();
            let leases = Api::<Lease>::namespaced(observer, LEASE_NAMESPACE);
            let holder = match lease(&leases).await {
                Ok((holder, _, _)) => holder,
                Err(error) => Some(format!("(cannot read the Lease: {error})")),
            };
            *lock(&started) = Some(Started { at, synced, holder });
            std::future::pending::<()>().await;
        }),
    )
}

impl Replica {
    fn start(identity: &str, client: kube::Client, observer: kube::Client) -> Result<Self, Error> {
        let catalog = CatalogFile::from_json_str(CATALOG)?;
        let clock = Arc::new(SystemClock);
        let cloud = SimCloudProvider::new(catalog, clock.clone(), SimCloudOptions::default());
        let state = ClusterState::new(Watched::default());
        let parts = ControllerParts {
            client,
            state: state.clone(),
            cloud: cloud.as_dyn(),
            clock,
            interruption: None,
            build: BuildOptions {
                label_policy: LabelPolicy::Core,
                extra_well_known_labels: cloud.catalog().well_known_labels.clone(),
                ..BuildOptions::default()
            },
            settings: Settings {
                identity: identity.to_string(),
                leader_election_name: LEASE_NAME.to_string(),
                leader_election_namespace: LEASE_NAMESPACE.to_string(),
                ..Settings::default()
            },
            observer: None,
        };
        let started = Arc::new(Mutex::new(None));
        let stopped = Arc::new(Mutex::new(None));
        let ended = Arc::new(Mutex::new(None));
        let operator = Operator {
            provider_tasks: vec![marker(
                state,
                observer,
                Arc::clone(&started),
                Arc::clone(&stopped),
            )],
            serve_http: false,
            lease_timings: LeaseTimings::default(),
            ..Operator::new(parts)
        };
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn({
            let ended = Arc::clone(&ended);
            async move {
                let outcome = operator
                    .run(async move {
                        let _ = rx.await;
                    })
                    .await;
                *lock(&ended) = Some(Instant::now());
                outcome
            }
        });
        Ok(Self {
            started,
            stopped,
            ended,
            task: Some(task),
            shutdown: Some(tx),
        })
    }

    fn started(&self) -> Option<Started> {
        lock(&self.started).clone()
    }

    fn stopped(&self) -> Option<Instant> {
        *lock(&self.stopped)
    }

    fn ended(&self) -> Option<Instant> {
        *lock(&self.ended)
    }

    /// Stops the process cleanly (the Lease is released) and returns how `Operator::run` ended.
    async fn shutdown(&mut self) -> Result<(), Error> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.task.take() {
            Some(task) => Ok(task.await??),
            None => Ok(()),
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// One look at the Lease.
#[derive(Debug, Clone)]
struct Sample {
    after: Duration,
    holder: Option<String>,
    renew_time: Option<Timestamp>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_cache_syncs_slower_than_the_lease_duration_keeps_the_lease_and_leads_alone()
-> TestResult {
    let cp = control_plane();
    let proxy = Proxy::start(cp)?;
    let observer = proxy.client(None)?;
    let leases = Api::<Lease>::namespaced(observer.clone(), LEASE_NAMESPACE);
    assert_eq!(lease(&leases).await?.0, None, "a fresh Lease");

    let delayed = Arc::new(AtomicUsize::new(0));
    let begin = Instant::now();
    let mut a = Replica::start("a", proxy.client(Some(Arc::clone(&delayed)))?, observer.clone())?;
    let mut samples: Vec<Sample> = Vec::new();
    let sample = async |samples: &mut Vec<Sample>| -> Result<(), Error> {
        let (holder, renew_time, _) = lease(&leases).await?;
        samples.push(Sample {
            after: begin.elapsed(),
            holder,
            renew_time,
        });
        Ok(())
    };

    // "a" takes the Lease; "b" starts once it has (so "a" is the one to lead).
    while lease(&leases).await?.0.as_deref() != Some("a") {
        assert!(
            begin.elapsed() < Duration::from_secs(30),
            "a did not take the Lease"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, _, acquired) = lease(&leases).await?;
    let acquired = acquired.ok_or("the Lease has no acquireTime")?;
    let mut b = Replica::start("b", observer.clone(), observer.clone())?;

    // While "a" syncs (30 s), "b" tries every 2 s; "a" must keep renewing.
    while a.started().is_none() {
        assert!(
            begin.elapsed() < SYNC_DELAY + Duration::from_secs(60),
            "a never started its controllers; samples: {samples:#?}"
        );
        assert!(a.ended().is_none(), "a stopped while syncing: {samples:#?}");
        sample(&mut samples).await?;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let a_started = a.started().ok_or("a has not started")?;
    assert!(
        delayed.load(Ordering::SeqCst) >= 1,
        "a's LIST of NodePools was not delayed"
    );
    assert!(
        a_started.at.duration_since(begin) >= SYNC_DELAY,
        "a's cache synced {:?} after it started, sooner than the delayed LIST answers",
        a_started.at.duration_since(begin)
    );
    assert!(
        a_started.synced,
        "a started its controllers before its cache synced"
    );
    assert_eq!(
        a_started.holder.as_deref(),
        Some("a"),
        "a started its controllers while not holding the Lease; samples: {samples:#?}"
    );
    let b_during_sync = b.started();
    assert!(
        b_during_sync.is_none(),
        "b started its controllers while a held the Lease and synced: {b_during_sync:?}; samples: {samples:#?}"
    );

    // "a" leads alone for another lease duration.
    let leading_until = Instant::now() + LeaseTimings::default().lease_duration;
    while Instant::now() < leading_until {
        assert!(
            a.ended().is_none() && a.stopped().is_none(),
            "a stopped leading: {samples:#?}"
        );
        sample(&mut samples).await?;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let b_while_a_led = b.started();
    assert!(
        b_while_a_led.is_none(),
        "b started its controllers while a led: {b_while_a_led:?}"
    );
    let foreign: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.holder.as_deref() != Some("a"))
        .collect();
    assert!(
        foreign.is_empty(),
        "while a acquired, synced and led, the Lease was held by another: {foreign:#?}"
    );
    // Renewed throughout the sync, not only once synced: the renewTimes seen span it, and none is older than
    // a lease duration when sampled.
    let renewals: Vec<Timestamp> = samples.iter().filter_map(|s| s.renew_time).collect();
    let last_before_start = samples
        .iter()
        .filter(|s| s.after < a_started.at.duration_since(begin))
        .filter_map(|s| s.renew_time)
        .max()
        .ok_or("no sample during the sync")?;
    let renewed_during_sync = last_before_start.duration_since(acquired);
    assert!(
        renewed_during_sync >= jiff::SignedDuration::from_secs(20),
        "the Lease acquired at {acquired} was last renewed at {last_before_start} before a synced"
    );
    let mut distinct = renewals.clone();
    distinct.dedup();
    assert!(
        distinct.len() >= 10,
        "a renewed only {} times in {:?}",
        distinct.len(),
        begin.elapsed()
    );

    // "a" shuts down: it stops its controllers, then releases the Lease, and "b" takes over at once and starts
    // its own, after those of "a" stopped.
    a.shutdown().await?;
    let a_ended = a.ended().ok_or("a's run has not returned")?;
    let a_stopped = a.stopped().ok_or("a's controllers were not stopped")?;
    let b_started = loop {
        if let Some(started) = b.started() {
            break started;
        }
        assert!(
            a_ended.elapsed() < Duration::from_secs(10),
            "b did not take over within 10 s of a's shutdown"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        b_started.at > a_stopped,
        "b started its controllers before a stopped its own"
    );
    assert!(b_started.synced);
    assert_eq!(b_started.holder.as_deref(), Some("b"));
    assert!(b.ended().is_none(), "b keeps leading");
    b.shutdown().await?;
    Ok(())
}
