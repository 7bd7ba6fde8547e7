//! The CloudProvider contract: how the controllers launch, find and remove capacity, and what a provider tells
//! decisions (instance types, drift, repair policies). AWS (`karpenter-aws`) and the simulator (`karpenter-sim`)
//! implement it; core only declares it, so decisions stay free of I/O.
//!
//! The shape follows upstream's `cloudprovider.CloudProvider`:
//! - [`CloudProvider::create`] launches capacity for a NodeClaim's requirements and requests and returns the
//!   claim hydrated from what was launched (`status.providerID`, `status.capacity`/`allocatable`,
//!   `status.imageID`, and labels resolved from the chosen offering: instance type, zone, capacity type);
//! - [`CloudProvider::delete`] terminates by provider ID and answers [`CloudProviderError::NodeClaimNotFound`]
//!   once the instance is gone (the termination controller retries until then);
//! - [`CloudProvider::get`] and [`CloudProvider::list`] find the provider's instances of this cluster as
//!   NodeClaims; [`CloudProvider::list_instances`] lists only who each instance is and when it was launched,
//!   which is all garbage collection compares with the NodeClaims (thousands of full NodeClaims at once would
//!   be tens of MiB every two minutes);
//! - [`CloudProvider::instance_types`] lists every instance type a NodePool could launch, available or not, in
//!   the provider-neutral catalog form that decisions intern;
//! - [`CloudProvider::reboot`] restarts a NodeClaim's instance in place, for the repair policies a provider lists
//!   in [`CloudProvider::reboot_policies`] (upstream's `RebootNode` repair action); a provider without reboots
//!   answers [`RebootError::NotImplemented`], the default;
//! - drift beyond the NodePool's (AMI, subnets, security groups, ...) comes through [`DriftProvider`], answered
//!   from the provider's caches so a disruption pass never waits on the cloud.

use std::time::Duration;

use async_trait::async_trait;
use karpenter_api::{nodeclaim::NodeClaim, nodepool::NodePool};

use crate::{
    catalog::{CatalogFile, CatalogInstanceType},
    disruption::drift::DriftProvider,
};

/// The prices NodeOverlays set, for a cloud provider that can ask its cloud to launch in a given order (AWS:
/// CreateFleet's prioritized allocation strategies). A NodeClaim marked `karpenter.sh/price-overlay-applied` was
/// given its instance types by overlaid prices; the provider's own catalog has the cloud's. The controller gives
/// the provider one of these that reads the cluster's NodeOverlays and NodePools (feature gate NodeOverlay).
pub trait LaunchPrices: Send + Sync {
    /// Reprices the offerings of `catalog` as NodePool `node_pool` sees them after the NodeOverlays; how many
    /// offerings changed (0 when the NodePool is unknown or no overlay applies).
    fn apply(&self, node_pool: &str, catalog: &mut CatalogFile) -> usize;
}

/// A node condition that, held for `toleration`, makes a node unhealthy enough to be repaired (replaced) when
/// the NodeRepair feature gate is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairPolicy {
    pub condition_type: String,
    /// "False", "True" or "Unknown".
    pub condition_status: String,
    pub toleration: Duration,
}

/// What repair does about a node whose condition matched a policy past its toleration (upstream's
/// `RepairAction`). When policies of both kinds are due on one node, the more disruptive one wins: a replacement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RepairAction {
    /// Restart the instance in place: the same NodeClaim and Node, drained first, with a new boot.
    RebootNode,
    /// Delete the NodeClaim; the provisioner replaces the capacity.
    ReplaceNode,
}

impl RepairAction {
    /// Upstream's name of the action (`RebootNode`, `ReplaceNode`), for logs and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RebootNode => "RebootNode",
            Self::ReplaceNode => "ReplaceNode",
        }
    }
}

/// A repair policy whose remedy is a reboot rather than a replacement (upstream: a `RepairPolicy` with action
/// `RebootNode`). `termination_grace_period` bounds the drain before the reboot, counted from when the reboot
/// was committed; pods still on the node then ride the reboot. `None` drains for as long as pods remain
/// (unless the NodeClaim sets a terminationGracePeriod, which then bounds it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebootPolicy {
    pub policy: RepairPolicy,
    pub termination_grace_period: Option<Duration>,
}

/// Why a reboot was not accepted. The reboot controller fails a reboot at once on
/// [`RebootError::NotImplemented`], [`RebootError::Rejected`] and a NodeClaim whose instance is gone, and retries
/// anything else (within its issuance timeout). Its own type rather than variants of [`CloudProviderError`],
/// which providers match exhaustively.
#[derive(Debug, thiserror::Error)]
pub enum RebootError {
    /// The provider cannot reboot instances (upstream's `NodeRebootNotImplementedError`).
    #[error("reboot is not implemented by this cloud provider")]
    NotImplemented,
    /// The provider refused the reboot in a way retrying cannot fix, e.g. a missing permission (upstream's
    /// `NodeRebootFailedError`).
    #[error("reboot rejected: {0}")]
    Rejected(String),
    #[error(transparent)]
    Provider(#[from] CloudProviderError),
}

impl RebootError {
    /// Whether retrying the same request cannot succeed.
    pub fn is_terminal(&self) -> bool {
        match self {
            Self::NotImplemented | Self::Rejected(_) => true,
            Self::Provider(e) => e.is_not_found(),
        }
    }
}

/// An instance as garbage collection sees it: its provider ID, the NodeClaim its tag names, when it was
/// launched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceSummary {
    pub provider_id: String,
    /// The NodeClaim the instance was launched for (`None` when its tag is missing).
    pub node_claim: Option<String>,
    pub launched_at: Option<jiff::Timestamp>,
}

impl InstanceSummary {
    /// The summary of an instance the provider reports as a NodeClaim; `None` without a provider ID.
    pub fn of_claim(claim: &NodeClaim) -> Option<Self> {
        Some(Self {
            provider_id: claim.status.as_ref()?.provider_id.clone()?,
            node_claim: claim.metadata.name.clone().filter(|n| !n.is_empty()),
            launched_at: claim.metadata.creation_timestamp.as_ref().map(|t| t.0),
        })
    }
}

/// A NodeClass kind a provider serves (`karpenter.k8s.aws/EC2NodeClass`); NodePools and NodeClaims naming
/// another kind are not this provider's and are left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClassKind {
    pub group: &'static str,
    pub kind: &'static str,
}

/// An offering a launch found without capacity, so the provider marks it unavailable for a while and the
/// next scheduling round picks another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnavailableOffering {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
}

/// What can go wrong talking to a cloud. The categories are stable: metrics and events carry
/// [`CloudProviderError::category`].
#[derive(Debug, thiserror::Error)]
pub enum CloudProviderError {
    /// The instance (or the NodeClaim's provider ID) does not exist, or no longer does.
    #[error("NodeClaim {0} has no instance (not found)")]
    NodeClaimNotFound(String),
    /// No offering the claim allows had capacity; `offerings` are the ones tried.
    #[error("insufficient capacity: {message}")]
    InsufficientCapacity {
        message: String,
        offerings: Vec<UnavailableOffering>,
    },
    /// The NodeClass the claim names cannot launch yet (AMIs, subnets or security groups unresolved).
    #[error("NodeClass {name} is not ready: {reason}")]
    NodeClassNotReady { name: String, reason: String },
    /// A launch failed for a reason the NodeClaim's Launched condition reports.
    #[error("{reason}: {message}")]
    Create { reason: String, message: String },
    /// Throttling, timeouts and other errors worth retrying with backoff.
    #[error("{0}")]
    Transient(String),
}

impl CloudProviderError {
    /// A short, stable name for metrics labels and event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Self::NodeClaimNotFound(_) => "NodeClaimNotFound",
            Self::InsufficientCapacity { .. } => "InsufficientCapacity",
            Self::NodeClassNotReady { .. } => "NodeClassNotReady",
            Self::Create { .. } => "CreateError",
            Self::Transient(_) => "Transient",
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NodeClaimNotFound(_))
    }
}

/// What an interruption message says is about to happen to an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InterruptionKind {
    /// The spot instance is reclaimed in about two minutes.
    SpotInterruption,
    /// The spot instance is at elevated risk of interruption (informational).
    Rebalance,
    /// Maintenance is scheduled for the instance.
    ScheduledChange,
    /// The instance is stopping or stopped.
    InstanceStopping,
    /// The instance is shutting down or terminated.
    InstanceTerminating,
    /// The instance's capacity reservation is reclaiming it (an interruptible reservation or a capacity block
    /// ending): handled as a spot interruption is.
    CapacityReservationInterruption,
    /// EC2's instance status checks have failed for a while (DescribeInstanceStatus): the instance is broken,
    /// so its NodeClaim is terminated forcefully (drained without waiting on disruption budgets).
    InstanceStatusImpaired,
    /// EC2's system status checks (the host under the instance) have failed for a while: terminated forcefully
    /// as [`InterruptionKind::InstanceStatusImpaired`] is.
    SystemStatusImpaired,
    /// DescribeInstanceStatus lists a scheduled event for the instance (reboot, maintenance, retirement, stop):
    /// its NodeClaim is replaced as for a scheduled change.
    ScheduledEvent,
}

/// One interruption message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterruptionEvent {
    pub provider_id: String,
    pub kind: InterruptionKind,
    /// When it was delivered.
    pub at: jiff::Timestamp,
}

/// Where interruption messages come from: the SQS queue on AWS, the simulated cloud in `karpenter simulate`.
/// The interruption controller acts on them the same way whatever the source.
#[async_trait]
pub trait InterruptionSource: Send + Sync {
    /// Waits for the next messages; `None` once the source is closed. Calling it again says the events it
    /// returned were acted on (a queue deletes their messages), except those reported with
    /// [`InterruptionSource::not_handled`].
    async fn receive(&self) -> Option<Vec<InterruptionEvent>>;

    /// The controller could not act on `event` (an API error): a source that can keep its message for a retry
    /// does, instead of discarding it as handled.
    async fn not_handled(&self, _event: &InterruptionEvent) {}

    /// A NodeClaim of the cluster owns `event`'s instance, and the controller acted on it (or found it being
    /// deleted already): a source that counts only the cluster's instances (the instance status poller) learns
    /// which of its events were.
    async fn claimed(&self, _event: &InterruptionEvent) {}
}

/// A cloud Karpenter launches nodes in. See the module documentation.
#[async_trait]
pub trait CloudProvider: DriftProvider + Send + Sync {
    /// "aws", "sim", ...; also the `provider` label of metrics.
    fn name(&self) -> &'static str;

    /// Launches capacity for `claim` and returns it hydrated from what was launched.
    async fn create(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError>;

    /// Terminates the claim's instance; [`CloudProviderError::NodeClaimNotFound`] once it is gone.
    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudProviderError>;

    /// The instance behind a provider ID, as a NodeClaim.
    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError>;

    /// Every instance of this cluster the provider knows, as NodeClaims.
    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError>;

    /// Every instance of this cluster the provider knows, as summaries: the same instances as
    /// [`CloudProvider::list`] without building a NodeClaim for each. Providers that hold many instances
    /// answer it directly; the default summarises `list`.
    async fn list_instances(&self) -> Result<Vec<InstanceSummary>, CloudProviderError> {
        Ok(self
            .list()
            .await?
            .iter()
            .filter_map(InstanceSummary::of_claim)
            .collect())
    }

    /// Every instance type `node_pool` could launch, available or not, with offerings and prices.
    async fn instance_types(
        &self,
        node_pool: &NodePool,
    ) -> Result<Vec<CatalogInstanceType>, CloudProviderError>;

    /// Conditions that make a node eligible for repair (a replacement), and for how long.
    fn repair_policies(&self) -> Vec<RepairPolicy>;

    /// Conditions a reboot clears, so repair reboots the node in place instead of replacing it (two reboots
    /// within a day that did not clear it, and the next repair replaces it). None by default.
    fn reboot_policies(&self) -> Vec<RebootPolicy> {
        Vec::new()
    }

    /// Restarts the claim's instance in place. Returns once the provider accepted the request; the reboot
    /// controller watches the Node come back with a new boot ID. `operation_id` is the same for every call of
    /// one reboot, so a provider can make a retried request change nothing. The default:
    /// [`RebootError::NotImplemented`].
    async fn reboot(&self, claim: &NodeClaim, operation_id: &str) -> Result<(), RebootError> {
        let _ = (claim, operation_id);
        Err(RebootError::NotImplemented)
    }

    /// The NodeClass kinds this provider serves, the default first.
    fn supported_node_classes(&self) -> Vec<NodeClassKind>;

    /// Whether a controller of this provider keeps a `Ready` condition on its NodeClasses (AWS resolves subnets,
    /// security groups and AMIs first). A provider with nothing to resolve (kwok) writes none, so one of its
    /// NodeClasses that exists and is not being deleted counts as ready; otherwise its NodePools, which launch only
    /// when Ready, would never launch.
    fn node_classes_report_readiness(&self) -> bool {
        true
    }

    /// [`CloudProvider::node_classes_report_readiness`] for one kind, for a provider that serves kinds of both
    /// sorts (kwok: a KWOKNodeClass carries a Ready condition, its CRD defaults one; an EC2NodeClass there has
    /// none). The default answers for every kind alike.
    fn node_class_reports_readiness(&self, kind: &NodeClassKind) -> bool {
        let _ = kind;
        self.node_classes_report_readiness()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_summary_keeps_what_identifies_the_instance() {
        let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abcde", "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"node.kubernetes.io/instance-type": "m5.large"}},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
            "status": {"providerID": "aws:///us-east-1a/i-0abc"},
        }))
        .unwrap();
        assert_eq!(
            InstanceSummary::of_claim(&claim),
            Some(InstanceSummary {
                provider_id: "aws:///us-east-1a/i-0abc".into(),
                node_claim: Some("default-abcde".into()),
                launched_at: Some("2026-01-01T00:00:00Z".parse().unwrap()),
            })
        );
        // An instance without its NodeClaim tag is reported with an empty name: no claim.
        claim.metadata.name = Some(String::new());
        assert_eq!(InstanceSummary::of_claim(&claim).unwrap().node_claim, None);
        // Without a provider ID there is nothing to collect.
        claim.status = None;
        assert_eq!(InstanceSummary::of_claim(&claim), None);
    }

    #[test]
    fn only_a_reboot_retrying_cannot_fix_is_terminal() {
        assert!(RebootError::NotImplemented.is_terminal());
        assert!(RebootError::Rejected("no permission".into()).is_terminal());
        assert!(RebootError::from(CloudProviderError::NodeClaimNotFound("a".into())).is_terminal());
        assert!(!RebootError::from(CloudProviderError::Transient("throttled".into())).is_terminal());
        assert!(
            RepairAction::ReplaceNode > RepairAction::RebootNode,
            "replacing is the more disruptive"
        );
        assert_eq!(RepairAction::RebootNode.as_str(), "RebootNode");
    }

    #[test]
    fn error_categories_are_stable_names() {
        let e = CloudProviderError::InsufficientCapacity {
            message: "no m5.large in us-east-1a".into(),
            offerings: vec![UnavailableOffering {
                instance_type: "m5.large".into(),
                zone: "us-east-1a".into(),
                capacity_type: "spot".into(),
            }],
        };
        assert_eq!(e.category(), "InsufficientCapacity");
        assert_eq!(e.to_string(), "insufficient capacity: no m5.large in us-east-1a");
        assert!(CloudProviderError::NodeClaimNotFound("a".into()).is_not_found());
        assert_eq!(
            CloudProviderError::Create {
                reason: "LaunchFailed".into(),
                message: "x".into()
            }
            .category(),
            "CreateError"
        );
    }
}
