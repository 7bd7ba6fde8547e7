//! The AWS-catalog mode of the KWOK provider, for NodePools whose nodeClassRef is an EC2NodeClass: `create` picks
//! an offering from the AWS catalog (or a catalog file) as the simulated cloud does and creates the Node through
//! the API server at once (Ready, with the `karpenter.sh/unregistered` taint a real node registers with); `list`,
//! `get` and `delete` read and delete those Nodes. It lets the same manifests as on EKS run against any API server
//! (a kind cluster with KWOK, or `karpenter simulate --serve`) without a cloud, and drives the controller's
//! memory and latency benchmarks. Nothing runs on these nodes unless something like KWOK plays their kubelets.
//! KWOKNodeClass NodePools are upstream's KWOK provider's ([`crate::provider`]).

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Taint};
use karpenter_api::{labels, nodeclaim::NodeClaim, nodepool::NodePool};
use karpenter_core::{
    catalog::{CatalogFile, CatalogInstanceType},
    clock::Clock,
    cloudprovider::{
        CloudProvider, CloudProviderError, InstanceSummary, NodeClassKind, RebootError, RebootPolicy,
        RepairPolicy,
    },
    disruption::drift::DriftProvider,
};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, ObjectMeta, PostParams},
};

use karpenter_sim::{SimCloudOptions, SimCloudProvider};

/// The annotation upstream KWOK uses to take a Node over.
pub const KWOK_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// Labels every Node this provider creates (how `list` finds them).
pub const KWOK_LABEL: &str = "karpenter.sh/kwok";
/// Names, on each Node this provider creates, the NodeClaim it was launched for.
const NODECLAIM_LABEL: &str = "karpenter.sh/nodeclaim";

/// Nodes per list request.
const LIST_PAGE: u32 = 100;

/// See the module documentation.
pub struct AwsCatalogKwok {
    offerings: SimCloudProvider,
    nodes: Api<Node>,
}

fn transient(e: kube::Error) -> CloudProviderError {
    CloudProviderError::Transient(e.to_string())
}

/// The Node name of a provider ID (`sim:///zone/i-0abc` names Node `i-0abc`).
fn node_name(provider_id: &str) -> &str {
    provider_id.rsplit('/').next().unwrap_or(provider_id)
}

/// A Node as the NodeClaim the cloud reports for it.
fn as_claim(node: &Node) -> Result<NodeClaim, CloudProviderError> {
    let name = node.labels().get(NODECLAIM_LABEL).cloned().unwrap_or_default();
    crate::provider::claim_of_node(node, name)
}

/// A Node as the instance summary garbage collection reads; `None` without a provider ID.
fn summary_of(node: &Node) -> Option<InstanceSummary> {
    Some(InstanceSummary {
        provider_id: node.spec.as_ref()?.provider_id.clone()?,
        node_claim: node
            .labels()
            .get(NODECLAIM_LABEL)
            .filter(|n| !n.is_empty())
            .cloned(),
        launched_at: node.metadata.creation_timestamp.as_ref().map(|t| t.0),
    })
}

impl AwsCatalogKwok {
    /// Calls `f` with every Node of this cloud that is not being deleted, page by page: a cluster of thousands
    /// of Nodes is otherwise one response body and every Node decoded at once, tens of MiB the controller's
    /// memory would peak on at each garbage collection.
    async fn for_each_node(
        &self,
        mut f: impl FnMut(&Node) -> Result<(), CloudProviderError>,
    ) -> Result<(), CloudProviderError> {
        let mut params = ListParams::default()
            .labels(&format!("{KWOK_LABEL}=true"))
            .limit(LIST_PAGE);
        loop {
            let page = self.nodes.list(&params).await.map_err(transient)?;
            for node in page
                .items
                .iter()
                .filter(|n| n.metadata.deletion_timestamp.is_none())
            {
                f(node)?;
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(()),
            }
        }
    }

    pub fn new(client: Client, catalog: CatalogFile, clock: Arc<dyn Clock>) -> Self {
        Self::with_seed(client, catalog, clock, process_seed())
    }

    /// As [`AwsCatalogKwok::new`], its instance IDs drawn from `seed`. Instances are Nodes on a shared API
    /// server that outlive the process: two processes (a restarted controller, a standby taking over) must
    /// not draw the same IDs, or each launch of the second collides with a Node the first created.
    pub fn with_seed(client: Client, catalog: CatalogFile, clock: Arc<dyn Clock>, seed: u64) -> Self {
        let options = SimCloudOptions {
            launch_latency: Duration::ZERO,
            seed,
            ..SimCloudOptions::default()
        };
        Self {
            offerings: SimCloudProvider::new(catalog, clock, options),
            nodes: Api::all(client),
        }
    }

    pub fn as_dyn(self) -> Arc<dyn CloudProvider> {
        Arc::new(self)
    }
}

/// A seed no other process shares: the wall clock's nanoseconds mixed with the process ID.
pub(crate) fn process_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (nanos ^ (u64::from(std::process::id()) << 40)) | 1
}

impl DriftProvider for AwsCatalogKwok {
    fn is_drifted(&self, _claim: &NodeClaim) -> Option<String> {
        None
    }
}

#[async_trait]
impl CloudProvider for AwsCatalogKwok {
    fn name(&self) -> &'static str {
        "kwok"
    }

    async fn create(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        let hydrated = self.offerings.create(claim).await?;
        let status = hydrated.status.clone().unwrap_or_default();
        let provider_id = status.provider_id.clone().unwrap_or_default();
        let name = node_name(&provider_id).to_string();
        let mut node_labels = hydrated.labels().clone();
        node_labels.insert(labels::HOSTNAME_LABEL.into(), name.clone());
        node_labels.insert(KWOK_LABEL.into(), "true".into());
        node_labels.insert(NODECLAIM_LABEL.into(), hydrated.name_any());
        let mut taints = vec![Taint {
            key: "karpenter.sh/unregistered".into(),
            effect: "NoExecute".into(),
            ..Taint::default()
        }];
        let api_taints = hydrated.spec.taints.iter().chain(&hydrated.spec.startup_taints);
        taints.extend(api_taints.filter_map(|t| {
            serde_json::to_value(t)
                .ok()
                .and_then(|v| serde_json::from_value(v).ok())
        }));
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name),
                labels: Some(node_labels),
                annotations: Some(BTreeMap::from([(
                    KWOK_ANNOTATION.to_string(),
                    "fake".to_string(),
                )])),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(provider_id.clone()),
                taints: Some(taints),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                capacity: status.capacity.as_deref().cloned(),
                allocatable: status.allocatable.as_deref().cloned(),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    reason: Some("KubeletReady".into()),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
        };
        if let Err(error) = self.nodes.create(&PostParams::default(), &node).await {
            // No instance came of it: its offering's capacity is not held by a Node that does not exist.
            self.offerings.terminate_instance(&provider_id);
            return Err(transient(error));
        }
        Ok(hydrated)
    }

    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudProviderError> {
        let provider_id = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .ok_or_else(|| CloudProviderError::NodeClaimNotFound(claim.name_any()))?;
        let _ = self.offerings.terminate_instance(&provider_id);
        crate::provider::delete_node(&self.nodes, node_name(&provider_id), &provider_id).await
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        match self
            .nodes
            .get_opt(node_name(provider_id))
            .await
            .map_err(transient)?
        {
            Some(node) if node.metadata.deletion_timestamp.is_none() => as_claim(&node),
            _ => Err(CloudProviderError::NodeClaimNotFound(provider_id.to_string())),
        }
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        let mut claims = Vec::new();
        self.for_each_node(|node| {
            claims.push(as_claim(node)?);
            Ok(())
        })
        .await?;
        Ok(claims)
    }

    async fn list_instances(&self) -> Result<Vec<InstanceSummary>, CloudProviderError> {
        let mut instances = Vec::new();
        self.for_each_node(|node| {
            instances.extend(summary_of(node));
            Ok(())
        })
        .await?;
        Ok(instances)
    }

    async fn instance_types(
        &self,
        node_pool: &NodePool,
    ) -> Result<Vec<CatalogInstanceType>, CloudProviderError> {
        self.offerings.instance_types(node_pool).await
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        self.offerings.repair_policies()
    }

    /// kwok's reboot-clearable fault, as in the KWOKNodeClass mode.
    fn reboot_policies(&self) -> Vec<RebootPolicy> {
        crate::provider::reboot_policies()
    }

    async fn reboot(&self, claim: &NodeClaim, operation_id: &str) -> Result<(), RebootError> {
        crate::provider::reboot_node(&self.nodes, claim, operation_id).await
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        self.offerings.supported_node_classes()
    }

    /// kwok resolves nothing for a NodeClass, and no controller of it writes a Ready condition.
    fn node_classes_report_readiness(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_sim::{ApiServer, VirtualClock};

    type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    /// The simulator's 3-type test catalog and a virtual clock at the start of 2026.
    fn fixture() -> Result<(CatalogFile, Arc<dyn Clock>), Error> {
        let catalog =
            CatalogFile::from_json_str(include_str!("../../karpenter-sim/tests/fixtures/catalog.json"))?;
        let clock: Arc<dyn Clock> = Arc::new(VirtualClock::starting_at("2026-01-01T00:00:00Z".parse()?));
        Ok((catalog, clock))
    }

    /// NodeClaim `name` of NodePool `default` and EC2NodeClass `default`.
    fn claim(name: &str) -> Result<NodeClaim, serde_json::Error> {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
        }))
    }

    /// Launches claim `name`: the launched claim and its provider ID.
    async fn launch(kwok: &AwsCatalogKwok, name: &str) -> Result<(NodeClaim, String), Error> {
        let launched = kwok.create(&claim(name)?).await?;
        let provider_id = launched
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default();
        Ok((launched, provider_id))
    }

    #[tokio::test(start_paused = true)]
    async fn instances_are_nodes_created_listed_and_deleted_through_the_api() -> TestResult {
        let (catalog, clock) = fixture()?;
        let api = ApiServer::new(Arc::clone(&clock));
        let kwok = AwsCatalogKwok::new(api.client(), catalog, clock);
        let (launched, provider_id) = launch(&kwok, "default-abcde").await?;
        let node = Api::<Node>::all(api.client())
            .get(node_name(&provider_id))
            .await?;
        assert_eq!(
            node.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
            Some(provider_id.as_str())
        );
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        assert!(taints.iter().any(|t| t.key == "karpenter.sh/unregistered"));
        assert_eq!(
            node.labels().get("karpenter.sh/nodepool").map(String::as_str),
            Some("default")
        );

        let listed = kwok.list().await?;
        assert_eq!(listed.len(), 1);
        assert_eq!(kwok.get(&provider_id).await?.name_any(), "default-abcde");

        kwok.delete(&launched).await?;
        assert!(kwok.get(&provider_id).await.is_err_and(|e| e.is_not_found()));
        assert!(kwok.delete(&launched).await.is_err_and(|e| e.is_not_found()));
        Ok(())
    }

    /// A restarted controller (or the standby taking the Lease) is a new provider over the same Nodes: its
    /// launches must not draw the IDs of Nodes the previous process created, or every one fails AlreadyExists.
    #[tokio::test(start_paused = true)]
    async fn a_restarted_provider_launches_under_instance_ids_of_its_own() -> TestResult {
        let (catalog, clock) = fixture()?;
        let api = ApiServer::new(Arc::clone(&clock));
        let before = AwsCatalogKwok::new(api.client(), catalog.clone(), Arc::clone(&clock));
        for i in 0..3 {
            before.create(&claim(&format!("before-{i}"))?).await?;
        }
        drop(before);
        let after = AwsCatalogKwok::new(api.client(), catalog, clock);
        for i in 0..3 {
            after.create(&claim(&format!("after-{i}"))?).await?;
        }
        let mut names: Vec<String> = after.list().await?.iter().map(|c| c.name_any()).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "after-0", "after-1", "after-2", "before-0", "before-1", "before-2"
            ]
        );
        Ok(())
    }

    /// Karpenter's finalizer on the Node (its instance here) holds it after the DELETE; the instance still counts
    /// as gone, or the terminator, which lifts that finalizer only once the instance is gone, would wait forever.
    #[tokio::test(start_paused = true)]
    async fn a_node_held_by_a_finalizer_is_a_terminated_instance() -> TestResult {
        let (catalog, clock) = fixture()?;
        let api = ApiServer::new(Arc::clone(&clock));
        let kwok = AwsCatalogKwok::new(api.client(), catalog, clock);
        let (launched, provider_id) = launch(&kwok, "default-fghij").await?;
        let nodes = Api::<Node>::all(api.client());
        nodes
            .patch(
                node_name(&provider_id),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(
                    serde_json::json!({"metadata": {"finalizers": [labels::TERMINATION_FINALIZER]}}),
                ),
            )
            .await?;

        assert!(kwok.delete(&launched).await.is_err_and(|e| e.is_not_found()));
        let held = nodes.get(node_name(&provider_id)).await?;
        assert!(held.metadata.deletion_timestamp.is_some());
        assert!(kwok.get(&provider_id).await.is_err_and(|e| e.is_not_found()));
        assert!(kwok.delete(&launched).await.is_err_and(|e| e.is_not_found()));
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn list_reads_every_page_of_nodes() -> TestResult {
        let (catalog, clock) = fixture()?;
        let server = ApiServer::new(VirtualClock::starting_at("2026-01-01T00:00:00Z".parse()?));
        let nodes: Api<Node> = Api::all(server.client());
        let count = 2 * LIST_PAGE as usize + 1;
        for i in 0..count {
            let node: Node = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("i-{i:05}"),
                    "labels": {KWOK_LABEL: "true", NODECLAIM_LABEL: format!("claim-{i:05}")}},
                "spec": {"providerID": format!("kwok://us-east-1a/i-{i:05}")},
            }))?;
            nodes.create(&PostParams::default(), &node).await?;
        }
        // A Node without the label is not an instance of this cloud.
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({"metadata": {"name": "other"}}))?,
            )
            .await?;
        let kwok = AwsCatalogKwok::new(server.client(), catalog, clock);
        let listed = kwok.list().await?;
        assert_eq!(listed.len(), count, "every page is read");
        let names: std::collections::BTreeSet<String> = listed.iter().map(|c| c.name_any()).collect();
        assert_eq!(names.len(), count, "no Node is listed twice");
        let last = count - 1;
        assert!(names.contains(&format!("claim-{last:05}")));
        // Garbage collection's summaries: the same instances, each with its claim and provider ID.
        let summaries = kwok.list_instances().await?;
        assert_eq!(summaries.len(), count);
        let summary = summaries
            .iter()
            .find(|s| s.provider_id == format!("kwok://us-east-1a/i-{last:05}"))
            .expect("the last page's Node is summarised");
        assert_eq!(summary.node_claim, Some(format!("claim-{last:05}")));
        Ok(())
    }
}
