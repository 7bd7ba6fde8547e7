//! The static capacity controller (upstream's `provisioning.static` and `static.deprovisioning`, behind the
//! StaticCapacity feature gate): every NodePool with `spec.replicas` is kept at that many NodeClaims. A pass
//! reads the state cache; core decides ([`karpenter_core::static_capacity`]) how many to create, within
//! `limits.nodes` and only while the NodePool is Ready, and which surplus NodeClaims to delete when replicas go
//! down; this module creates and deletes them. `kubectl scale nodepool x --replicas=N` works through the CRD's
//! scale subresource (`.spec.replicas`, with `.status.nodes` written by [`crate::nodepool_status`]).
//!
//! The cache lags behind the API server by a watch event: NodeClaims this controller just created or deleted
//! are remembered for [`EXPECTATION_TTL`] (or until the cache shows them), so the next pass neither creates
//! them again nor picks more surplus.
//!
//! With the gate off, [`StaticCapacityController::report_inert`] logs once per static NodePool that nothing
//! keeps its replicas, and the NodePool stays as it is.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use karpenter_api::{nodeclaim::NodeClaim, nodepool::NodePool};
use karpenter_core::{
    clock::Clock,
    cloudprovider::CloudProvider,
    snapshot::{BuildOptions, static_node_claims},
    static_capacity::{StaticPool, choose_surplus, static_pools, surplus_candidates},
};
use karpenter_state::api_errors::ignore_not_found;
use karpenter_state::{
    ClusterState, ControllerContext,
    periodic::{run_synced, run_synced_untimed},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, PostParams},
};
use tokio::time::Instant;

use crate::{ProvisionerError, catalog::catalog_for};

/// How long a NodeClaim this controller created or deleted is counted as such when the cache does not show
/// it yet.
pub const EXPECTATION_TTL: Duration = Duration::from_secs(30);

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StaticPass {
    /// Names of the NodeClaims created.
    pub created: Vec<String>,
    /// Names of the NodeClaims deleted as surplus.
    pub deleted: Vec<String>,
}

/// NodeClaims created or deleted lately (tokio time), until the cache shows them.
#[derive(Debug, Default)]
struct Expectations {
    /// NodePool -> NodeClaims created for it.
    created: HashMap<String, Vec<(String, Instant)>>,
    deleted: HashMap<String, Instant>,
}

impl Expectations {
    /// Forgets what the cache shows now (`claims`: name -> being deleted) or what is older than the TTL.
    fn settle(&mut self, claims: &HashMap<String, bool>, now: Instant) {
        let fresh = |at: &Instant| now.saturating_duration_since(*at) < EXPECTATION_TTL;
        for created in self.created.values_mut() {
            created.retain(|(name, at)| !claims.contains_key(name) && fresh(at));
        }
        self.created.retain(|_, c| !c.is_empty());
        self.deleted
            .retain(|name, at| claims.get(name).is_some_and(|deleting| !deleting) && fresh(at));
    }

    fn in_flight(&self, pool: &str) -> i64 {
        self.created
            .get(pool)
            .map_or(0, |c| i64::try_from(c.len()).unwrap_or(i64::MAX))
    }
}

/// The static capacity controller's context.
pub struct StaticCapacityController {
    cx: ControllerContext,
    cloud: Arc<dyn CloudProvider>,
    build: BuildOptions,
    expectations: Mutex<Expectations>,
    /// What was last said per NodePool about why it cannot reach its replicas (the node limit, no instance
    /// type): said again only when it changes, not every pass.
    told: Mutex<HashMap<String, String>>,
    /// Between passes (tokio time).
    pub interval: Duration,
}

impl StaticCapacityController {
    pub fn new(cx: ControllerContext, cloud: Arc<dyn CloudProvider>, build: BuildOptions) -> Self {
        Self {
            cx,
            cloud,
            build,
            expectations: Mutex::new(Expectations::default()),
            told: Mutex::new(HashMap::new()),
            interval: Duration::from_secs(2),
        }
    }

    /// Runs passes until the future is dropped; a failed pass is logged and the next one retries.
    pub async fn run(&self) {
        run_synced(&self.cx.state, "static.capacity", self.interval, || async {
            match self.pass().await {
                Ok(pass) if pass != StaticPass::default() => {
                    tracing::info!(controller = "static.capacity", created = ?pass.created, deleted = ?pass.deleted, "kept static NodePools at their replicas");
                    true
                }
                Ok(_) => true,
                Err(error) => {
                    tracing::warn!(controller = "static.capacity", category = error.category(), %error, "static capacity pass failed; retrying");
                    false
                }
            }
        })
        .await;
    }

    /// One pass over every static NodePool in the cache.
    pub async fn pass(&self) -> Result<StaticPass, ProvisionerError> {
        if !self.cx.state.synced() {
            return Err(ProvisionerError::NotSynced);
        }
        // Most clusters have no static NodePool: no snapshot of their pods is taken for nothing every pass.
        if self.cx.state.node_pools.filter(NodePool::is_static).is_empty() {
            return Ok(StaticPass::default());
        }
        let snapshot = self.cx.state.snapshot();
        let kinds = self.cloud.supported_node_classes();
        let managed = |p: &NodePool| {
            let r = &p.spec.template.spec.node_class_ref;
            kinds.iter().any(|k| k.group == r.group && k.kind == r.kind)
        };
        let claims: HashMap<String, bool> = snapshot
            .node_claims
            .iter()
            .map(|c| (c.name_any(), c.metadata.deletion_timestamp.is_some()))
            .collect();
        let (deleted, in_flight): (HashSet<String>, HashMap<String, i64>) = {
            let mut expected = self.lock();
            expected.settle(&claims, Instant::now());
            let in_flight = expected
                .created
                .keys()
                .map(|p| (p.clone(), expected.in_flight(p)))
                .collect();
            (expected.deleted.keys().cloned().collect(), in_flight)
        };
        let by_name: HashMap<&str, &NodePool> = snapshot
            .node_pools
            .iter()
            .filter(|p| managed(p))
            .filter_map(|p| Some((p.metadata.name.as_deref()?, p)))
            .collect();
        let mut pass = StaticPass::default();
        let mut first_error = None;
        for pool in static_pools(&snapshot, &deleted, self.build.unevaluated_nodepools) {
            let Some(object) = by_name.get(pool.name.as_str()) else {
                continue;
            };
            let in_flight = in_flight.get(&pool.name).copied().unwrap_or(0);
            let result = if pool.surplus() > 0 {
                self.shed(&snapshot, &pool, &deleted, &mut pass).await
            } else {
                self.fill(&snapshot, object, &pool, in_flight, &mut pass).await
            };
            if let Err(error) = result {
                tracing::warn!(controller = "static.capacity", nodepool = %pool.name, %error, "keeping replicas failed");
                first_error.get_or_insert(error);
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(pass),
        }
    }

    /// Whether `why` is news for NodePool `pool` (and remembers it).
    fn tell(&self, pool: &str, why: &str) -> bool {
        let mut told = self
            .told
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if told.get(pool).is_some_and(|w| w == why) {
            return false;
        }
        told.insert(pool.to_string(), why.to_string());
        true
    }

    fn forget(&self, pool: &str) {
        self.told
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(pool);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Expectations> {
        self.expectations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Creates the NodeClaims `pool` is short of.
    async fn fill(
        &self,
        snapshot: &karpenter_core::snapshot::Snapshot,
        object: &NodePool,
        pool: &StaticPool,
        in_flight: i64,
        pass: &mut StaticPass,
    ) -> Result<(), ProvisionerError> {
        let count = pool.to_create(in_flight);
        if pool.limited(in_flight) {
            let nodes = pool.active + pool.deleting + in_flight;
            if self.tell(&pool.name, "the NodePool node limit is reached") {
                tracing::info!(controller = "static.capacity", nodepool = %pool.name, replicas = pool.replicas, nodes, limit = ?pool.node_limit, "NodePool node limit reached");
            }
        }
        if count <= 0 {
            if !pool.limited(in_flight) {
                self.forget(&pool.name);
            }
            return Ok(());
        }
        let catalog = catalog_for(self.cloud.as_ref(), std::slice::from_ref(object)).await?;
        let built = static_node_claims(
            snapshot,
            &catalog,
            &self.build,
            object,
            usize::try_from(count).unwrap_or(0),
        );
        let notes: Vec<String> = built.notes.iter().map(ToString::to_string).collect();
        if notes.is_empty() && !pool.limited(in_flight) {
            self.forget(&pool.name);
        }
        if !notes.is_empty() && self.tell(&pool.name, &notes.join("; ")) {
            for note in &notes {
                tracing::warn!(controller = "static.capacity", nodepool = %pool.name, %note, "static NodePool");
            }
        }
        let api: Api<NodeClaim> = Api::all(self.cx.client.clone());
        for claim in &built.node_claims {
            let created = api.create(&PostParams::default(), claim).await?;
            let name = created.name_any();
            self.lock()
                .created
                .entry(pool.name.clone())
                .or_default()
                .push((name.clone(), Instant::now()));
            karpenter_metrics::metrics()
                .nodeclaims_created
                .get_or_create(&karpenter_metrics::NodeClaimCreatedLabels {
                    reason: "provisioning".into(),
                    nodepool: pool.name.clone(),
                    min_values_relaxed: "false".into(),
                })
                .inc();
            pass.created.push(name);
        }
        Ok(())
    }

    /// Deletes the NodeClaims `pool` has beyond its replicas, the ones cheapest to lose first.
    async fn shed(
        &self,
        snapshot: &karpenter_core::snapshot::Snapshot,
        pool: &StaticPool,
        deleted: &HashSet<String>,
        pass: &mut StaticPass,
    ) -> Result<(), ProvisionerError> {
        let candidates = surplus_candidates(snapshot, &pool.name, deleted, self.cx.clock.now());
        let chosen = choose_surplus(&candidates, usize::try_from(pool.surplus()).unwrap_or(0));
        tracing::info!(controller = "static.capacity", nodepool = %pool.name, replicas = pool.replicas, active = pool.active, deleting = chosen.len(), "deleting NodeClaims beyond the replica count");
        let api: Api<NodeClaim> = Api::all(self.cx.client.clone());
        for i in chosen {
            let name = &candidates[i].node_claim;
            ignore_not_found(api.delete(name, &DeleteParams::default()).await)?;
            self.lock().deleted.insert(name.clone(), Instant::now());
            pass.deleted.push(name.clone());
        }
        Ok(())
    }

    /// With the gate off: says once per static NodePool, as the cache shows them, that nothing keeps its
    /// replicas. Runs until dropped.
    pub async fn report_inert(state: ClusterState) {
        let mut told = HashSet::new();
        run_synced_untimed(&state, Duration::from_secs(30), || {
            for pool in state.node_pools.all() {
                if pool.is_static() && told.insert(pool.name_any()) {
                    tracing::warn!(nodepool = %pool.name_any(), replicas = ?pool.spec.replicas, "NodePool sets replicas but the StaticCapacity feature gate is off: no NodeClaims are created or removed for it");
                }
            }
            std::future::ready(())
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_last_until_the_cache_shows_them_or_they_expire() {
        let start = Instant::now();
        let mut e = Expectations::default();
        e.created
            .entry("fixed".into())
            .or_default()
            .extend([("a".into(), start), ("b".into(), start)]);
        e.deleted.insert("c".into(), start);
        e.deleted.insert("d".into(), start);
        let claims: HashMap<String, bool> =
            [("a".into(), false), ("c".into(), false), ("d".into(), true)].into();
        e.settle(&claims, start);
        assert_eq!(e.in_flight("fixed"), 1, "a is in the cache now");
        assert!(e.deleted.contains_key("c"), "the cache still shows c active");
        assert!(!e.deleted.contains_key("d"), "the cache shows d deleting");
        e.settle(&claims, start + EXPECTATION_TTL);
        assert_eq!(e.in_flight("fixed"), 0);
        assert!(e.deleted.is_empty());
    }
}
