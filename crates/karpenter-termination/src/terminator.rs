//! The terminator's loop: one step per deleted NodeClaim per pass (see the crate documentation).

use std::{collections::HashMap, sync::Arc, time::Duration};

use k8s_openapi::api::{
    core::v1::{Node, Pod},
    storage::v1::VolumeAttachment,
};
use karpenter_api::{labels, nodeclaim::NodeClaim};
use karpenter_core::{
    clock::Clock,
    cloudprovider::CloudProvider,
    disruption::expiration::{clamped_pod_grace_seconds, pod_delete_at, termination_deadline},
    snapshot::CompactPod,
};
use karpenter_state::ClusterState;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams},
};
use serde_json::json;

use crate::{
    TerminationError,
    drain::drain_plan,
    node_finalizer::{has_finalizer, remove_node_finalizer},
    taint::add_disrupted_taint,
};

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TerminationPass {
    /// `namespace/name` of pods evicted (or, past the grace period, deleted).
    pub evicted: Vec<String>,
    /// `namespace/name: why` of evictions the API refused this pass (a PodDisruptionBudget).
    pub blocked: Vec<String>,
    /// NodeClaims whose instance is gone and whose finalizer was removed.
    pub terminated: Vec<String>,
    /// `claim: volume attachments` of drained nodes waiting for their volumes to detach.
    pub awaiting_volumes: Vec<String>,
    /// NodeClaims deleted because someone deleted their Node (`kubectl delete node`).
    pub deleted_for_node: Vec<String>,
    /// Nodes whose finalizer was removed: their instance is gone, or no NodeClaim of theirs is left to
    /// terminate it.
    pub released_nodes: Vec<String>,
}

/// The VolumeAttachments still naming `node` (their CSI driver has not detached the volume yet).
async fn attached_volumes(client: &Client, node: &str) -> Result<Vec<String>, TerminationError> {
    let attachments: Api<VolumeAttachment> = Api::all(client.clone());
    Ok(attachments
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|va| va.spec.node_name == node && va.metadata.deletion_timestamp.is_none())
        .map(|va| va.name_any())
        .collect())
}

/// The terminator's context.
pub struct Terminator {
    client: Client,
    state: ClusterState,
    cloud: Arc<dyn CloudProvider>,
    clock: Arc<dyn Clock>,
    /// How often deleted NodeClaims are looked at (tokio time).
    pub interval: Duration,
}

/// Kubernetes' default `terminationGracePeriodSeconds`.
const DEFAULT_POD_GRACE_SECONDS: i64 = 30;

/// When the node must be empty: the earlier of deletion + the claim's terminationGracePeriod and the
/// `karpenter.sh/nodeclaim-termination-timestamp` annotation (node repair sets it to "now" to drain at once).
fn drain_deadline(claim: &NodeClaim) -> Option<jiff::Timestamp> {
    let from_grace = claim
        .metadata
        .deletion_timestamp
        .as_ref()
        .and_then(|t| termination_deadline(claim, t.0));
    let annotated = claim
        .annotations()
        .get(labels::NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION)
        .and_then(|v| v.parse::<jiff::Timestamp>().ok());
    match (from_grace, annotated) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `karpenter_nodeclaims_terminated_total`, `karpenter_nodes_terminated_total` and the termination duration,
/// once a claim's finalizer is gone.
fn record_termination(claim: &NodeClaim, had_node: bool, now: jiff::Timestamp) {
    let m = karpenter_metrics::metrics();
    let label = |key: &str| claim.labels().get(key).cloned().unwrap_or_default();
    let (nodepool, zone) = (
        label(labels::NODEPOOL_LABEL),
        label("topology.kubernetes.io/zone"),
    );
    m.nodeclaims_terminated
        .get_or_create(&karpenter_metrics::NodeClaimTerminatedLabels {
            nodepool: nodepool.clone(),
            capacity_type: label("karpenter.sh/capacity-type"),
            zone: zone.clone(),
        })
        .inc();
    if had_node {
        m.nodes_terminated
            .get_or_create(&karpenter_metrics::NodeLabels {
                nodepool: nodepool.clone(),
                zone,
            })
            .inc();
    }
    if let Some(deleted) = claim.metadata.deletion_timestamp.as_ref() {
        m.nodeclaims_termination_duration_seconds
            .get_or_create(&karpenter_metrics::NodePoolLabels { nodepool })
            .observe(now.duration_since(deleted.0).as_secs_f64().max(0.0));
    }
}

fn key(pod: &CompactPod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

impl Terminator {
    pub fn new(
        client: Client,
        state: ClusterState,
        cloud: Arc<dyn CloudProvider>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            client,
            state,
            cloud,
            clock,
            interval: Duration::from_secs(1),
        }
    }

    /// Runs passes until the future is dropped.
    pub async fn run(&self) {
        loop {
            if self.state.synced() {
                let _timer = karpenter_metrics::metrics().reconcile("nodeclaim.termination");
                self.pass().await;
            }
            tokio::time::sleep(self.interval).await;
        }
    }

    /// One step for every Node being deleted that carries the finalizer, then for every NodeClaim being
    /// deleted that still carries it.
    pub async fn pass(&self) -> TerminationPass {
        let mut done = TerminationPass::default();
        let deleted_nodes = self
            .state
            .nodes
            .filter(|n| n.metadata.deletion_timestamp.is_some() && has_finalizer(n));
        if !deleted_nodes.is_empty() {
            let by_provider_id: HashMap<String, Arc<NodeClaim>> = self
                .state
                .node_claims
                .all()
                .into_iter()
                .filter_map(|c| Some((c.status.as_ref()?.provider_id.clone()?, c)))
                .collect();
            for node in deleted_nodes {
                if let Err(error) = self.node_step(&node, &by_provider_id, &mut done).await {
                    tracing::warn!(node = %node.name_any(), category = error.category(), %error, "node termination step failed");
                }
            }
        }
        for claim in self.state.node_claims.all() {
            let ours = claim
                .finalizers()
                .iter()
                .any(|f| f == labels::TERMINATION_FINALIZER);
            if claim.metadata.deletion_timestamp.is_none() || !ours {
                continue;
            }
            if let Err(error) = self.step(&claim, &mut done).await {
                tracing::warn!(nodeclaim = %claim.name_any(), category = error.category(), %error, "termination step failed");
            }
        }
        done
    }

    /// A Node deleted while it carries the finalizer (`kubectl delete node`): its NodeClaim is deleted, and the
    /// claim's termination (drain, volumes, instance) releases the Node at its end. A Node whose NodeClaim is
    /// gone, or is being deleted without the finalizer (so no termination of ours will run), is released now:
    /// otherwise nothing ever would.
    async fn node_step(
        &self,
        node: &Node,
        by_provider_id: &HashMap<String, Arc<NodeClaim>>,
        done: &mut TerminationPass,
    ) -> Result<(), TerminationError> {
        let cached = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_ref())
            .and_then(|id| by_provider_id.get(id))
            .cloned();
        let claim = match cached {
            Some(claim) => Some(claim),
            None => self.owning_claim(node).await?,
        };
        match claim {
            Some(claim) if claim.metadata.deletion_timestamp.is_none() => {
                let claims: Api<NodeClaim> = Api::all(self.client.clone());
                match claims.delete(&claim.name_any(), &DeleteParams::default()).await {
                    Ok(_) => done.deleted_for_node.push(claim.name_any()),
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Some(claim)
                if claim
                    .finalizers()
                    .iter()
                    .any(|f| f == labels::TERMINATION_FINALIZER) => {}
            _ => {
                if remove_node_finalizer(&self.client, node).await? {
                    done.released_nodes.push(node.name_any());
                }
            }
        }
        Ok(())
    }

    /// The NodeClaim the Node's owner reference names, read from the API server: the cache has no claim with
    /// the Node's provider ID, and releasing the Node while its claim still exists would leave the instance
    /// running behind an already deleted Node.
    async fn owning_claim(&self, node: &Node) -> Result<Option<Arc<NodeClaim>>, TerminationError> {
        let Some(owner) = node
            .owner_references()
            .iter()
            .find(|o| o.kind == "NodeClaim" && o.api_version.starts_with("karpenter.sh/"))
        else {
            return Ok(None);
        };
        let claims: Api<NodeClaim> = Api::all(self.client.clone());
        Ok(claims
            .get_opt(&owner.name)
            .await?
            .filter(|c| c.metadata.uid.as_deref() == Some(owner.uid.as_str()))
            .map(Arc::new))
    }

    async fn step(&self, claim: &NodeClaim, done: &mut TerminationPass) -> Result<(), TerminationError> {
        let node_name = claim.status.as_ref().and_then(|s| s.node_name.clone());
        let node = node_name.as_deref().and_then(|n| self.state.nodes.get(n));
        // A Node whose kubelet stopped reporting and whose instance the provider no longer has cannot be
        // drained (no kubelet will finish its pods' deletions): it goes without draining, its pods then removed
        // by the pod garbage collector, as upstream does and kube-controller-manager's node lifecycle would.
        let drainable = match &node {
            Some(node) => !self.instance_gone(claim, node).await?,
            None => false,
        };
        if let Some(node) = node.as_ref().filter(|_| drainable) {
            add_disrupted_taint(&self.client, node).await?;
            let node_name = node.name_any();
            let mut pods: Vec<Arc<CompactPod>> = self
                .state
                .pods
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node_name.as_str()));
            // In name order, so evictions go out in the same order every run.
            pods.sort_unstable_by_key(|p| key(p));
            let plan = drain_plan(&pods);
            if plan.remaining > 0 {
                let deadline = drain_deadline(claim);
                let now = self.clock.now();
                for pod in &plan.evict {
                    // A pod whose own grace period would overrun the node's deadline is deleted directly, with
                    // its grace clamped to the time left, so it is gone by the deadline whatever its PDB says.
                    let own_grace = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.termination_grace_period_seconds)
                        .unwrap_or(DEFAULT_POD_GRACE_SECONDS);
                    let delete_with = deadline
                        .filter(|d| now >= pod_delete_at(*d, own_grace))
                        .map(|d| clamped_pod_grace_seconds(d, now, own_grace));
                    self.evict(pod, delete_with, done).await?;
                }
                return Ok(());
            }
            // Volumes detach before the instance goes (so a StatefulSet's volume can attach elsewhere), unless
            // the node's deadline has passed.
            let past_deadline = drain_deadline(claim).is_some_and(|d| self.clock.now() >= d);
            if !past_deadline {
                let attached = attached_volumes(&self.client, &node.name_any()).await?;
                if !attached.is_empty() {
                    done.awaiting_volumes
                        .push(format!("{}: {}", claim.name_any(), attached.join(", ")));
                    return Ok(());
                }
            }
        }
        // Drained (or never had a Node): the instance goes, and only once it is gone does the claim.
        match self.cloud.delete(claim).await {
            Ok(()) => return Ok(()),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
        if let Some(node) = &node {
            let nodes: Api<Node> = Api::all(self.client.clone());
            match nodes.delete(&node.name_any(), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
            // The instance is gone, so the Node may go too. Before the claim's own finalizer: were that removed
            // first and this patch then failed, the Node would wait for the node pass's fallback instead.
            if remove_node_finalizer(&self.client, node).await? {
                done.released_nodes.push(node.name_any());
            }
        }
        let finalizers: Vec<&String> = claim
            .finalizers()
            .iter()
            .filter(|f| *f != labels::TERMINATION_FINALIZER)
            .collect();
        let claims: Api<NodeClaim> = Api::all(self.client.clone());
        claims
            .patch(
                &claim.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
            )
            .await?;
        record_termination(claim, node.is_some(), self.clock.now());
        done.terminated.push(claim.name_any());
        Ok(())
    }

    /// The Node is not Ready and the cloud provider reports its instance gone. A Ready Node's kubelet still
    /// runs whatever the provider says, so the provider is asked only about Nodes that are not Ready.
    async fn instance_gone(&self, claim: &NodeClaim, node: &Node) -> Result<bool, TerminationError> {
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True");
        let Some(provider_id) = claim.status.as_ref().and_then(|s| s.provider_id.as_deref()) else {
            return Ok(false);
        };
        if ready {
            return Ok(false);
        }
        match self.cloud.get(provider_id).await {
            Ok(_) => Ok(false),
            Err(e) if e.is_not_found() => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    /// Evicts a pod (deletes it once the grace period is over); a refusal because of a PodDisruptionBudget is
    /// recorded and retried on the next pass.
    async fn evict(
        &self,
        pod: &CompactPod,
        delete_with_grace: Option<i64>,
        done: &mut TerminationPass,
    ) -> Result<(), TerminationError> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let result = if let Some(grace) = delete_with_grace {
            let grace = u32::try_from(grace.max(0)).unwrap_or(u32::MAX);
            pods.delete(name, &DeleteParams::default().grace_period(grace))
                .await
                .map(|_| ())
        } else {
            pods.evict(name, &EvictParams::default()).await.map(|_| ())
        };
        let code = match &result {
            Ok(()) => "200".to_string(),
            Err(kube::Error::Api(s)) => s.code.to_string(),
            Err(_) => "error".to_string(),
        };
        karpenter_metrics::metrics()
            .pods_eviction_requests
            .get_or_create(&karpenter_metrics::CodeLabels { code })
            .inc();
        match result {
            Ok(()) => done.evicted.push(key(pod)),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(kube::Error::Api(s)) if s.code == 429 => {
                done.blocked.push(format!("{}: {}", key(pod), s.message))
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::catalog::CatalogFile;
    use karpenter_sim::{ApiServer, SimCloudOptions, SimCloudProvider, SystemClock};
    use kube::api::PostParams;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    const CATALOG: &str = include_str!("../../karpenter-sim/tests/fixtures/catalog.json");

    struct Fixture {
        _server: ApiServer,
        client: Client,
        state: ClusterState,
        cloud: SimCloudProvider,
        terminator: Terminator,
    }

    fn fixture() -> Result<Fixture, Box<dyn std::error::Error>> {
        let server = ApiServer::new(SystemClock);
        let client = server.client();
        let state = ClusterState::default();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let cloud = SimCloudProvider::new(
            CatalogFile::from_json_str(CATALOG)?,
            clock.clone(),
            SimCloudOptions::default(),
        );
        let terminator = Terminator::new(client.clone(), state.clone(), cloud.as_dyn(), clock);
        Ok(Fixture {
            _server: server,
            client,
            state,
            cloud,
            terminator,
        })
    }

    impl Fixture {
        /// A NodeClaim `name` with the finalizer, launched at the simulated cloud; in the API server only.
        async fn launched_claim(&self, name: &str) -> Result<NodeClaim, Box<dyn std::error::Error>> {
            let claim: NodeClaim = serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name, "finalizers": [labels::TERMINATION_FINALIZER]},
                "spec": {"requirements": [],
                         "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
            }))?;
            let claims: Api<NodeClaim> = Api::all(self.client.clone());
            let created = claims.create(&PostParams::default(), &claim).await?;
            let launched = self.cloud.create(&created).await?;
            let provider_id = launched.status.and_then(|s| s.provider_id);
            let status = json!({"status": {"providerID": provider_id, "nodeName": format!("node-{name}")}});
            Ok(claims
                .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
                .await?)
        }

        /// Node `name` with the finalizer, owned by `owner` when given, then deleted as `kubectl delete node`
        /// does; in the API server only.
        async fn deleted_node(
            &self,
            name: &str,
            provider_id: &str,
            owner: Option<&NodeClaim>,
        ) -> Result<Node, Box<dyn std::error::Error>> {
            let owners: Vec<_> = owner
                .map(|c| {
                    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                                "name": c.name_any(), "uid": c.uid().unwrap_or_default()})
                })
                .into_iter()
                .collect();
            let node: Node = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "finalizers": [labels::TERMINATION_FINALIZER], "ownerReferences": owners},
                "spec": {"providerID": provider_id}
            }))?;
            let nodes: Api<Node> = Api::all(self.client.clone());
            nodes.create(&PostParams::default(), &node).await?;
            nodes.delete(name, &DeleteParams::default()).await?;
            Ok(nodes.get(name).await?)
        }

        /// The cache catches up with the API server on these objects.
        async fn refresh(&self, node: &str, claim: &str) -> Result<(), kube::Error> {
            match Api::<Node>::all(self.client.clone()).get_opt(node).await? {
                Some(n) => self.state.nodes.apply(n),
                None => self.state.nodes.delete(node),
            }
            match Api::<NodeClaim>::all(self.client.clone()).get_opt(claim).await? {
                Some(c) => self.state.node_claims.apply(c),
                None => self.state.node_claims.delete(claim),
            }
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_deleted_node_has_its_claim_deleted_and_goes_only_after_the_instance() -> TestResult {
        let f = fixture()?;
        let claim = f.launched_claim("a").await?;
        let provider_id = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .ok_or("no instance")?;
        f.deleted_node("node-a", &provider_id, Some(&claim)).await?;
        f.refresh("node-a", "a").await?;

        let first = f.terminator.pass().await;
        assert_eq!(first.deleted_for_node, ["a"]);
        let claims: Api<NodeClaim> = Api::all(f.client.clone());
        let nodes: Api<Node> = Api::all(f.client.clone());
        let deleting = claims.get("a").await?;
        assert!(deleting.metadata.deletion_timestamp.is_some());

        // The claim's termination: the instance is asked to go; the Node waits for it.
        f.refresh("node-a", "a").await?;
        let second = f.terminator.pass().await;
        assert!(second.deleted_for_node.is_empty(), "{second:?}");
        assert!(second.released_nodes.is_empty(), "{second:?}");
        assert!(f.cloud.instance(&provider_id).is_some_and(|i| !i.is_running()));
        assert!(nodes.get_opt("node-a").await?.is_some());

        // The provider reports the instance gone: the Node is released, then the claim.
        f.refresh("node-a", "a").await?;
        let third = f.terminator.pass().await;
        assert_eq!(third.released_nodes, ["node-a"]);
        assert_eq!(third.terminated, ["a"]);
        assert!(nodes.get_opt("node-a").await?.is_none());
        assert!(claims.get_opt("a").await?.is_none());
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_deleted_node_whose_claim_is_gone_or_never_was_is_released() -> TestResult {
        let f = fixture()?;
        let nodes: Api<Node> = Api::all(f.client.clone());
        f.deleted_node("orphan", "sim:///test-zone-1/i-orphan", None)
            .await?;
        f.refresh("orphan", "none").await?;
        // Owned by a claim the API server no longer has.
        let gone = f.launched_claim("gone").await?;
        let gone_id = gone
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default();
        f.deleted_node("node-gone", &gone_id, Some(&gone)).await?;
        let claims: Api<NodeClaim> = Api::all(f.client.clone());
        claims
            .patch(
                "gone",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await?;
        claims.delete("gone", &DeleteParams::default()).await?;
        f.refresh("node-gone", "gone").await?;

        let mut pass = f.terminator.pass().await;
        pass.released_nodes.sort();
        assert_eq!(pass.released_nodes, ["node-gone", "orphan"]);
        assert!(pass.deleted_for_node.is_empty());
        assert!(nodes.get_opt("orphan").await?.is_none());
        assert!(nodes.get_opt("node-gone").await?.is_none());
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_deleted_node_whose_claim_the_cache_has_not_seen_is_held_for_it() -> TestResult {
        let f = fixture()?;
        let claim = f.launched_claim("unseen").await?;
        let provider_id = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default();
        f.deleted_node("node-unseen", &provider_id, Some(&claim)).await?;
        // Only the Node is in the cache: the owner reference leads to the claim in the API server.
        f.state
            .nodes
            .apply(Api::<Node>::all(f.client.clone()).get("node-unseen").await?);

        let pass = f.terminator.pass().await;
        assert_eq!(pass.deleted_for_node, ["unseen"]);
        assert!(pass.released_nodes.is_empty());
        let node = Api::<Node>::all(f.client.clone()).get("node-unseen").await?;
        assert!(has_finalizer(&node));
        Ok(())
    }
}
