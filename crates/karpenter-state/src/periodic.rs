//! The loop of every periodic controller: once the state cache is synced, run a pass timed as one reconcile
//! of `controller` (`controller_runtime_reconcile_*`), then sleep `interval`; before the cache is synced, only
//! sleep (a pass on a partial cache would act on what it has not seen yet).

use std::{future::Future, time::Duration};

use crate::ClusterState;

/// Runs `pass` every `interval` until the future is dropped. `pass` answers whether it succeeded; a failed pass
/// counts as a reconcile error and the next one retries.
pub async fn run_synced<F, Fut>(
    state: &ClusterState,
    controller: &'static str,
    interval: Duration,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    loop {
        if state.synced() {
            let mut timer = karpenter_metrics::metrics().reconcile(controller);
            if !pass().await {
                timer.failed();
            }
        }
        tokio::time::sleep(interval).await;
    }
}
