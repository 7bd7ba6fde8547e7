//! [`KwokCloudProvider`], what `karpenter controller --cloud-provider kwok` runs: instances are Node objects that
//! kwok plays. The NodePool's node class picks the behaviour:
//!
//! - a `karpenter.kwok.sh/v1alpha1` KWOKNodeClass gets upstream's KWOK provider: its instance-type catalog, its
//!   Nodes ([`crate::launch`]) created `spec.nodeRegistrationDelay` after the launch, `kwok://` provider IDs, a
//!   missing class as insufficient capacity and a `Ready=False` one as NodeClassNotReady, its repair policies
//!   and its reboot (a new boot ID);
//! - a `karpenter.k8s.aws/v1` EC2NodeClass gets the AWS catalog ([`crate::aws_catalog`]), so manifests written for
//!   EKS run unchanged.

use std::{
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::{
    kwoknodeclass::{self as kwok, KWOKNodeClass},
    labels,
    nodeclaim::{NodeClaim, NodeClaimStatus},
    nodepool::NodePool,
};
use karpenter_core::{
    catalog::{CatalogFile, CatalogInstanceType},
    clock::Clock,
    cloudprovider::{
        CloudProvider, CloudProviderError, InstanceSummary, NodeClassKind, RebootError, RebootPolicy,
        RepairPolicy,
    },
    disruption::drift::DriftProvider,
};
use karpenter_nodeclass::{NodeClassReadiness, condition_readiness};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams},
};

use crate::{
    aws_catalog::{AwsCatalogKwok, process_seed},
    catalog_file::{self, GoEnv},
    error::KwokError,
    launch::{self, Draw, PROVIDER_ID_PREFIX},
};

/// The node class kind of upstream's KWOK provider.
pub const KWOK_NODE_CLASS: NodeClassKind = NodeClassKind {
    group: kwok::KWOK_GROUP,
    kind: kwok::KIND,
};
const EC2_NODE_CLASS: NodeClassKind = NodeClassKind {
    group: labels::AWS_GROUP,
    kind: "EC2NodeClass",
};

/// Nodes per list request.
const LIST_PAGE: u32 = 100;
/// Tries at creating a delayed Node before giving up (client-go's DefaultBackoff: 4 steps from 10 ms, x5).
const CREATE_TRIES: u32 = 4;

/// The KWOK catalog, or why there is none (reported on every KWOKNodeClass NodePool, so a controller serving
/// only EC2NodeClass NodePools starts without it).
type KwokCatalog = Result<Arc<Vec<CatalogInstanceType>>, Arc<KwokError>>;

/// See the module documentation.
pub struct KwokCloudProvider {
    aws: AwsCatalogKwok,
    kwok_types: KwokCatalog,
    client: Client,
    draw: Mutex<Draw>,
}

fn transient(e: kube::Error) -> CloudProviderError {
    CloudProviderError::Transient(e.to_string())
}

fn is_kwok_class(group: &str, kind: &str) -> bool {
    group == KWOK_NODE_CLASS.group && kind == KWOK_NODE_CLASS.kind
}

/// A KWOKNodeClass Node as the NodeClaim the cloud reports for it; its hostname label names the claim.
fn as_claim(node: &Node) -> Result<NodeClaim, CloudProviderError> {
    let name = node
        .labels()
        .get(labels::HOSTNAME_LABEL)
        .cloned()
        .unwrap_or_default();
    claim_of_node(node, name)
}

/// Deletes kwok Node `name`, the instance of `provider_id`. The Node is the instance: once it is marked deleted
/// only finalizers (Karpenter's, which waits for this very answer) hold it, so the instance counts as gone
/// (NodeClaimNotFound), as `get` and `list` say; a Node already gone is too.
pub(crate) async fn delete_node(
    nodes: &Api<Node>,
    name: &str,
    provider_id: &str,
) -> Result<(), CloudProviderError> {
    let gone = || Err(CloudProviderError::NodeClaimNotFound(provider_id.to_string()));
    match nodes.delete(name, &DeleteParams::default()).await {
        Ok(pending)
            if pending
                .as_ref()
                .left()
                .is_some_and(|n| n.metadata.deletion_timestamp.is_some()) =>
        {
            gone()
        }
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => gone(),
        Err(e) => Err(transient(e)),
    }
}

/// A kwok Node as the NodeClaim `name` the cloud reports for it: the Node's labels, annotations, creation time,
/// provider ID, capacity and allocatable (both kwok modes report their Nodes this way).
pub(crate) fn claim_of_node(node: &Node, name: String) -> Result<NodeClaim, CloudProviderError> {
    let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name},
        "spec": {"requirements": [], "nodeClassRef": {"group": "", "kind": "", "name": ""}},
    }))
    .map_err(|e| CloudProviderError::Transient(e.to_string()))?;
    claim.metadata.labels = Some(node.labels().clone());
    claim.metadata.annotations = Some(node.annotations().clone());
    claim.metadata.creation_timestamp = node.metadata.creation_timestamp.clone();
    let status = node.status.as_ref();
    claim.status = Some(NodeClaimStatus {
        provider_id: node.spec.as_ref().and_then(|s| s.provider_id.clone()),
        node_name: Some(node.name_any()),
        capacity: status.and_then(|s| s.capacity.clone()).map(Arc::new),
        allocatable: status.and_then(|s| s.allocatable.clone()).map(Arc::new),
        ..NodeClaimStatus::default()
    });
    Ok(claim)
}

fn is_kwok_node(node: &Node) -> bool {
    node.metadata.deletion_timestamp.is_none()
        && node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .is_some_and(|id| id.starts_with(PROVIDER_ID_PREFIX))
}

impl KwokCloudProvider {
    /// The provider with `aws_catalog` for EC2NodeClass NodePools and the KWOK catalog read from `kwok_types`
    /// (else the Go module cache). A file that was named and cannot be read is an error; a module cache without
    /// upstream's catalog is not, until a KWOKNodeClass NodePool asks for instance types.
    pub fn new(
        client: Client,
        aws_catalog: CatalogFile,
        kwok_types: Option<&Path>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, KwokError> {
        let kwok_types = match catalog_file::load(kwok_types, &GoEnv::from_process()) {
            Ok(types) => Ok(Arc::new(types)),
            Err(e @ KwokError::ModuleMissing { .. }) => {
                tracing::warn!(error = %e, "KWOKNodeClass NodePools have no instance types");
                Err(Arc::new(e))
            }
            Err(e) => return Err(e),
        };
        Ok(Self::with_kwok_types(
            client,
            aws_catalog,
            kwok_types.map_err(|e| Arc::clone(&e)),
            clock,
        ))
    }

    /// As [`KwokCloudProvider::new`] with the KWOK catalog given.
    pub fn with_kwok_types(
        client: Client,
        aws_catalog: CatalogFile,
        kwok_types: Result<Arc<Vec<CatalogInstanceType>>, Arc<KwokError>>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let seed = process_seed();
        Self {
            aws: AwsCatalogKwok::with_seed(client.clone(), aws_catalog, clock, seed),
            kwok_types,
            client,
            draw: Mutex::new(Draw::new(seed)),
        }
    }

    pub fn as_dyn(self) -> Arc<dyn CloudProvider> {
        Arc::new(self)
    }

    fn kwok_types(&self) -> Result<&Arc<Vec<CatalogInstanceType>>, CloudProviderError> {
        self.kwok_types.as_ref().map_err(|e| CloudProviderError::Create {
            reason: e.category().into(),
            message: e.to_string(),
        })
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Upstream's KWOK launch: resolve the class, pick the offering, create the Node (after the class's delay).
    async fn create_kwok(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        let types = self.kwok_types()?;
        let node = {
            let mut draw = self.draw.lock().unwrap_or_else(|p| p.into_inner());
            let (it, offering) = launch::choose(claim, types, &mut draw)?;
            launch::node_for(claim, it, offering, &mut draw)
        };
        let class_name = &claim.spec.node_class_ref.name;
        // Read untyped: upstream's class may have no spec, which the typed decoder would refuse.
        let resource = ApiResource::erase::<KWOKNodeClass>(&());
        let classes: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let class = match classes.get_opt(class_name).await {
            Ok(Some(object)) => {
                let value =
                    serde_json::to_value(object).map_err(|e| CloudProviderError::Transient(e.to_string()))?;
                KWOKNodeClass::from_value(value).map_err(|e| CloudProviderError::Create {
                    reason: "NodeClassInvalid".into(),
                    message: format!("KWOKNodeClass {class_name}: {e}"),
                })?
            }
            // Upstream: a class that does not exist (or a kind the API server does not serve) is capacity that
            // cannot be had, so the NodeClaim is deleted and the pods tried elsewhere.
            Ok(None) => {
                return Err(CloudProviderError::InsufficientCapacity {
                    message: format!(
                        "resolving node class from nodeclaim: KWOKNodeClass {class_name} not found"
                    ),
                    offerings: Vec::new(),
                });
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                return Err(CloudProviderError::InsufficientCapacity {
                    message: format!("resolving node class from nodeclaim: KWOKNodeClass {class_name}: {s}"),
                    offerings: Vec::new(),
                });
            }
            Err(e) => return Err(transient(e)),
        };
        // The CRD's pattern keeps a bad delay out of a real API server; one that got in anyway is reported by
        // object and field rather than launched with a guessed delay.
        if let Err(problems) = class.validate() {
            return Err(CloudProviderError::Create {
                reason: "NodeClassInvalid".into(),
                message: problems.to_string(),
            });
        }
        if let NodeClassReadiness::NotReady { message, .. } = condition_readiness(&class) {
            return Err(CloudProviderError::NodeClassNotReady {
                name: class_name.clone(),
                reason: message,
            });
        }
        let hydrated = as_claim(&node)?;
        let delay = class.registration_delay();
        if delay.is_zero() {
            // Created now, so a failure is the launch's and is retried by the lifecycle with no Node left behind.
            self.nodes()
                .create(&PostParams::default(), &node)
                .await
                .map_err(transient)?;
        } else {
            // As upstream: the instance "boots" for the delay, then registers; a Node that never appears is a
            // registration failure the lifecycle's timeout handles, as for a real instance.
            let nodes = self.nodes();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let mut wait = Duration::from_millis(10);
                for attempt in 1..=CREATE_TRIES {
                    match nodes.create(&PostParams::default(), &node).await {
                        Ok(_) => return,
                        Err(error) if attempt == CREATE_TRIES => {
                            tracing::error!(node = node.name_any(), %error, "failed creating node from nodeclaim");
                        }
                        Err(_) => {
                            tokio::time::sleep(wait).await;
                            wait *= 5;
                        }
                    }
                }
            });
        }
        Ok(hydrated)
    }

    /// Calls `f` with every KWOKNodeClass Node (`kwok://` provider IDs) not being deleted, page by page.
    async fn for_each_kwok_node(
        &self,
        mut f: impl FnMut(&Node) -> Result<(), CloudProviderError>,
    ) -> Result<(), CloudProviderError> {
        let mut params = ListParams::default()
            .labels(&format!("{}={}", kwok::KWOK_NODE_KEY, kwok::KWOK_NODE_VALUE))
            .limit(LIST_PAGE);
        let nodes = self.nodes();
        loop {
            let page = nodes.list(&params).await.map_err(transient)?;
            for node in page.items.iter().filter(|n| is_kwok_node(n)) {
                f(node)?;
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(()),
            }
        }
    }
}

/// Upstream's KWOK reboot: the instance restarts in place, which kwok shows as a new boot ID on the Node
/// (`kwok-<operation>`, so a retried request for the same reboot changes nothing). kwok's simulated kubelet never
/// goes NotReady, so the node is back as soon as the reboot controller sees the new boot ID.
pub(crate) async fn reboot_node(
    nodes: &Api<Node>,
    claim: &NodeClaim,
    operation_id: &str,
) -> Result<(), RebootError> {
    let node = claim
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            RebootError::Rejected(format!(
                "rebooting NodeClaim {}: its node is not registered",
                claim.name_any()
            ))
        })?;
    let patch = serde_json::json!({"status": {"nodeInfo": {"bootID": format!("kwok-{operation_id}")}}});
    match nodes
        .patch_status(&node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Err(CloudProviderError::NodeClaimNotFound(node).into()),
        Err(e) => Err(transient(e).into()),
    }
}

/// The condition upstream's KWOK reboots a node for (`KWOKRebootRequiredCondition`).
pub const KWOK_REBOOT_REQUIRED_CONDITION: &str = "KWOKRebootRequired";

/// KWOK's reboot policies, the same in both node class modes.
pub(crate) fn reboot_policies() -> Vec<RebootPolicy> {
    vec![RebootPolicy {
        policy: RepairPolicy {
            condition_type: KWOK_REBOOT_REQUIRED_CONDITION.into(),
            condition_status: "True".into(),
            toleration: Duration::from_secs(30),
        },
        termination_grace_period: Some(Duration::from_secs(60)),
    }]
}

impl DriftProvider for KwokCloudProvider {
    /// Neither mode has drift beyond the NodePool's.
    fn is_drifted(&self, _claim: &NodeClaim) -> Option<String> {
        None
    }
}

#[async_trait]
impl CloudProvider for KwokCloudProvider {
    fn name(&self) -> &'static str {
        "kwok"
    }

    async fn create(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        let r = &claim.spec.node_class_ref;
        if is_kwok_class(&r.group, &r.kind) {
            self.create_kwok(claim).await
        } else {
            self.aws.create(claim).await
        }
    }

    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudProviderError> {
        let provider_id = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .ok_or_else(|| CloudProviderError::NodeClaimNotFound(claim.name_any()))?;
        let Some(name) = provider_id
            .strip_prefix(PROVIDER_ID_PREFIX)
            .filter(|n| !n.contains('/'))
        else {
            return self.aws.delete(claim).await;
        };
        delete_node(&self.nodes(), name, &provider_id).await
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        let Some(name) = provider_id
            .strip_prefix(PROVIDER_ID_PREFIX)
            .filter(|n| !n.contains('/'))
        else {
            return self.aws.get(provider_id).await;
        };
        match self.nodes().get_opt(name).await.map_err(transient)? {
            Some(node) if is_kwok_node(&node) => as_claim(&node),
            _ => Err(CloudProviderError::NodeClaimNotFound(provider_id.to_string())),
        }
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        let mut claims = self.aws.list().await?;
        self.for_each_kwok_node(|node| {
            claims.push(as_claim(node)?);
            Ok(())
        })
        .await?;
        Ok(claims)
    }

    async fn list_instances(&self) -> Result<Vec<InstanceSummary>, CloudProviderError> {
        let mut instances = self.aws.list_instances().await?;
        self.for_each_kwok_node(|node| {
            instances.extend(InstanceSummary::of_claim(&as_claim(node)?));
            Ok(())
        })
        .await?;
        Ok(instances)
    }

    async fn instance_types(
        &self,
        node_pool: &NodePool,
    ) -> Result<Vec<CatalogInstanceType>, CloudProviderError> {
        let r = &node_pool.spec.template.spec.node_class_ref;
        if !is_kwok_class(&r.group, &r.kind) {
            return self.aws.instance_types(node_pool).await;
        }
        self.kwok_types.as_ref().map(|t| t.as_ref().clone()).map_err(|e| {
            CloudProviderError::NodeClassNotReady {
                name: r.name.clone(),
                reason: e.to_string(),
            }
        })
    }

    /// Upstream KWOK's policies that replace the node (its 45-second termination grace period for
    /// `KWOKUnhealthy` has no place here: repair drains a node it replaces without waiting).
    fn repair_policies(&self) -> Vec<RepairPolicy> {
        let policy = |condition_type: &str, condition_status: &str, secs: u64| RepairPolicy {
            condition_type: condition_type.into(),
            condition_status: condition_status.into(),
            toleration: Duration::from_secs(secs),
        };
        vec![
            policy("Ready", "False", 10 * 60),
            policy("Ready", "Unknown", 10 * 60),
            policy("KWOKUnhealthy", "True", 30),
        ]
    }

    /// Upstream KWOK's simulated reboot-clearable fault: `KWOKRebootRequired=True` for 30 seconds reboots the
    /// node, its drain bounded to a minute.
    fn reboot_policies(&self) -> Vec<RebootPolicy> {
        reboot_policies()
    }

    async fn reboot(&self, claim: &NodeClaim, operation_id: &str) -> Result<(), RebootError> {
        reboot_node(&self.nodes(), claim, operation_id).await
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        vec![KWOK_NODE_CLASS, EC2_NODE_CLASS]
    }

    /// An EC2NodeClass here has no controller writing its status, so it is ready while it exists; a
    /// KWOKNodeClass's status is defaulted to Ready by its CRD and read as upstream reads it.
    fn node_classes_report_readiness(&self) -> bool {
        false
    }

    fn node_class_reports_readiness(&self, kind: &NodeClassKind) -> bool {
        is_kwok_class(kind.group, kind.kind)
    }
}

#[cfg(test)]
mod tests;
