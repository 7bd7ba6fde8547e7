//! The heap the controller's state cache holds, by kind: a `ClusterState` synced in this process on the same
//! simulated cluster the controller watches, counted by xtask's allocator ([`crate::heap`]). The controller's
//! resident memory is this plus its code, runtime and allocator; the breakdown says which kind to shrink.

use std::time::Duration;

use anyhow::{Result, bail};
use karpenter_sim::ApiServer;
use karpenter_state::{ClusterState, Watched};

/// Heap bytes per kind.
pub struct CacheHeap {
    pub pods: usize,
    pub nodes: usize,
    pub node_claims: usize,
    /// Every other kind the cache holds.
    pub rest: usize,
    /// Grown while the cache synced but not freed with it, so held by something other than its stores: the
    /// process-wide tables pods' shared parts are looked up in, and the in-process API server that served the
    /// sync. Not in [`CacheHeap::total`]; it was counted in the rest until 2026-12-07.
    pub outside: usize,
}

impl CacheHeap {
    pub fn total(&self) -> usize {
        self.pods + self.nodes + self.node_claims + self.rest
    }
}

/// Syncs a cache on `api` until it holds `pods` pods, stops its watches and measures what each kind frees.
pub async fn measure(api: &ApiServer, pods: usize, timeout: Duration) -> Result<CacheHeap> {
    let before = crate::heap::allocated_bytes();
    let mut state = ClusterState::new(Watched::default());
    let watch = tokio::spawn({
        let (state, client) = (state.clone(), api.client());
        async move { state.watch(client).await }
    });
    let synced = async {
        while !(state.synced() && state.pods.len() == pods) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let outcome = tokio::time::timeout(timeout, synced).await;
    watch.abort();
    // The watches hold the stores too: wait until they are dropped, so each kind below frees what it holds.
    let _ = watch.await;
    if outcome.is_err() {
        bail!("the in-process state cache did not sync within {timeout:?}");
    }
    let held = crate::heap::allocated_bytes().saturating_sub(before);
    let freed_by = |drop_it: &mut dyn FnMut()| {
        let at = crate::heap::allocated_bytes();
        drop_it();
        at.saturating_sub(crate::heap::allocated_bytes())
    };
    let pods = freed_by(&mut || drop(std::mem::take(&mut state.pods)));
    let nodes = freed_by(&mut || drop(std::mem::take(&mut state.nodes)));
    let node_claims = freed_by(&mut || drop(std::mem::take(&mut state.node_claims)));
    let rest = freed_by(&mut || drop(std::mem::take(&mut state)));
    Ok(CacheHeap {
        pods,
        nodes,
        node_claims,
        rest,
        outside: held.saturating_sub(pods + nodes + node_claims + rest),
    })
}
