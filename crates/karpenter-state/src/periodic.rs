//! The loop of every periodic controller: once the state cache is synced, run a pass timed as one reconcile
//! of `controller` (`controller_runtime_reconcile_*`), then sleep `interval`; before the cache is synced, only
//! sleep (a pass on a partial cache would act on what it has not seen yet).
//!
//! Three shapes of the one loop, so that each controller keeps the metrics it has:
//! - [`run_synced`]: gated on the sync, each pass timed;
//! - [`run_synced_untimed`]: gated on the sync, not timed (the controllers upstream does not count as
//!   reconcilers, or that count themselves);
//! - [`run_timed`]: every pass timed, not gated (the pass itself answers what it does before the sync);
//!   [`run_timed_waking`] also cuts the sleep short when what it watches changes.
//!
//! A controller whose first pass waits one interval sleeps that long before entering the loop.

use std::{future::Future, time::Duration};

use crate::ClusterState;

/// Runs `pass` every `interval` until the future is dropped. `pass` answers whether it succeeded; a failed pass
/// counts as a reconcile error and the next one retries.
pub async fn run_synced<F, Fut>(state: &ClusterState, controller: &'static str, interval: Duration, pass: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    run(Some(state), Some(controller), interval, pass).await;
}

/// As [`run_synced`], without timing the passes: a pass reports its own failures.
pub async fn run_synced_untimed<F, Fut>(state: &ClusterState, interval: Duration, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    run(Some(state), None, interval, || {
        let pass = pass();
        async move {
            pass.await;
            true
        }
    })
    .await;
}

/// Runs `pass` every `interval`, synced or not, each pass timed as one reconcile of `controller` (a failed one,
/// `pass` answering false, as a reconcile error).
pub async fn run_timed<F, Fut>(controller: &'static str, interval: Duration, pass: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    run(None, Some(controller), interval, pass).await;
}

/// [`run_timed`], with the sleep cut short (checked every [`WAKE_CHECK`]) once `version` moves: a change that
/// decisions must answer promptly (a NodePool edited, so its NodeClaims drift) starts the next pass within about
/// a second instead of up to `interval` later, while a quiet cluster is still passed over only every `interval`.
pub async fn run_timed_waking<F, Fut, V>(
    controller: &'static str,
    interval: Duration,
    version: V,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
    V: Fn() -> u64,
{
    loop {
        let seen = version();
        let mut timer = karpenter_metrics::metrics().reconcile(controller);
        if !pass().await {
            timer.failed();
        }
        drop(timer);
        let wake_at = tokio::time::Instant::now() + interval;
        loop {
            let now = tokio::time::Instant::now();
            if now >= wake_at || version() != seen {
                break;
            }
            tokio::time::sleep(WAKE_CHECK.min(wake_at - now)).await;
        }
    }
}

/// How often [`run_timed_waking`] looks for a change while it sleeps.
pub const WAKE_CHECK: Duration = Duration::from_secs(1);

/// The loop: a pass when `gate` (if any) is synced, timed as `controller` (if any), then a sleep.
async fn run<F, Fut>(
    gate: Option<&ClusterState>,
    controller: Option<&'static str>,
    interval: Duration,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    loop {
        if gate.is_none_or(ClusterState::synced) {
            let mut timer = controller.map(|c| karpenter_metrics::metrics().reconcile(c));
            if !pass().await
                && let Some(timer) = timer.as_mut()
            {
                timer.failed();
            }
            // The reconcile is recorded here, before the sleep.
            drop(timer);
        }
        tokio::time::sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    const INTERVAL: Duration = Duration::from_secs(10);

    /// A cache whose every (default-watched) kind has completed its first list.
    fn synced() -> ClusterState {
        let state = ClusterState::default();
        state.pods.relist_done();
        state.nodes.relist_done();
        state.node_claims.relist_done();
        state.node_pools.relist_done();
        state.daemon_sets.relist_done();
        state.pdbs.relist_done();
        state.pvcs.relist_done();
        state.pvs.relist_done();
        state.storage_classes.relist_done();
        state.csi_nodes.relist_done();
        state.volume_attachments.relist_done();
        state.namespaces.relist_done();
        assert!(state.synced());
        state
    }

    /// How many passes of `run` start in the first 25 seconds (paused time: at 0, 10 and 20 when they run).
    async fn passes(
        run: impl FnOnce(Arc<AtomicUsize>) -> std::pin::Pin<Box<dyn Future<Output = ()>>>,
    ) -> usize {
        let count = Arc::new(AtomicUsize::new(0));
        let looping = run(Arc::clone(&count));
        let _ = tokio::time::timeout(Duration::from_secs(25), looping).await;
        count.load(Ordering::SeqCst)
    }

    fn counting(count: &Arc<AtomicUsize>, ok: bool) -> impl Future<Output = bool> + use<> {
        let count = Arc::clone(count);
        async move {
            count.fetch_add(1, Ordering::SeqCst);
            ok
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_waking_loop_passes_again_within_a_second_of_a_change() {
        let version = Arc::new(AtomicUsize::new(0));
        let count = Arc::new(AtomicUsize::new(0));
        let looping = {
            let (version, count) = (Arc::clone(&version), Arc::clone(&count));
            async move {
                run_timed_waking(
                    "test.waking",
                    INTERVAL,
                    || version.load(Ordering::SeqCst) as u64,
                    || counting(&count, true),
                )
                .await
            }
        };
        let task = tokio::spawn(looping);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(count.load(Ordering::SeqCst), 1, "the first pass at once");
        // Quiet: the next pass only after the interval.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(count.load(Ordering::SeqCst), 1);
        // A change 5 s in: a pass within a second, not at 10 s.
        version.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(count.load(Ordering::SeqCst), 2);
        // Quiet again: the interval counts from that pass.
        tokio::time::sleep(Duration::from_secs(8)).await;
        assert_eq!(count.load(Ordering::SeqCst), 2);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(count.load(Ordering::SeqCst), 3);
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn synced_loops_pass_only_once_the_cache_is_synced() {
        let unsynced = ClusterState::default();
        let timed = passes(|n| {
            Box::pin(
                async move { run_synced(&unsynced, "test.unsynced", INTERVAL, || counting(&n, true)).await },
            )
        })
        .await;
        let unsynced = ClusterState::default();
        let untimed = passes(|n| {
            Box::pin(async move {
                run_synced_untimed(&unsynced, INTERVAL, || {
                    let pass = counting(&n, true);
                    async move {
                        pass.await;
                    }
                })
                .await
            })
        })
        .await;
        assert_eq!((timed, untimed), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn synced_loops_pass_then_sleep() {
        let state = synced();
        let timed = passes(|n| {
            let state = state.clone();
            Box::pin(async move { run_synced(&state, "test.synced", INTERVAL, || counting(&n, true)).await })
        })
        .await;
        let untimed = passes(|n| {
            let state = state.clone();
            Box::pin(async move {
                run_synced_untimed(&state, INTERVAL, || {
                    let pass = counting(&n, true);
                    async move {
                        pass.await;
                    }
                })
                .await
            })
        })
        .await;
        assert_eq!((timed, untimed), (3, 3));
    }

    #[tokio::test(start_paused = true)]
    async fn the_timed_loop_passes_synced_or_not() {
        let ran = passes(|n| {
            Box::pin(async move { run_timed("test.ungated", INTERVAL, || counting(&n, false)).await })
        })
        .await;
        assert_eq!(ran, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn timed_passes_are_counted_as_reconciles_and_failures_as_errors() {
        let state = synced();
        let looping = run_synced(&state, "test.periodic.failing", INTERVAL, || async { false });
        let _ = tokio::time::timeout(Duration::from_secs(25), looping).await;
        let m = karpenter_metrics::metrics();
        let controller = karpenter_metrics::ControllerLabels {
            controller: "test.periodic.failing".into(),
        };
        assert_eq!(m.reconcile_errors.get_or_create(&controller).get(), 3);
    }
}
