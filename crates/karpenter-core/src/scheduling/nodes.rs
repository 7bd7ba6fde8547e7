//! The places a pod can go: existing nodes (and in-flight NodeClaims that already have capacity), and the
//! NodeClaim templates of each NodePool from which new NodeClaims are opened.

use std::sync::Arc;

use crate::{
    instance_type::InstanceType,
    requirements::{Requirements, Symbol},
    resources::Resources,
};

use super::{
    daemon_overhead::DaemonOverheads,
    pod::{HostPort, Taint},
};

/// What a NodePool launches: its requirements, taints, labels, the instance types it may use, the DaemonSet
/// overhead of each and how much of its limits is left.
#[derive(Debug, Clone)]
pub struct NodePoolTemplate {
    pub name: String,
    pub weight: i32,
    /// NodePool requirements ∩ its template labels (as single-value requirements).
    pub requirements: Requirements,
    /// The template labels, copied onto NodeClaims.
    pub labels: Vec<(Symbol, Symbol)>,
    pub taints: Vec<Taint>,
    /// Taints a DaemonSet removes once the node starts; scheduling ignores them.
    pub startup_taints: Vec<Taint>,
    /// Instance types compatible with `requirements`, with at least one available offering it allows, ordered
    /// cheapest first.
    pub instance_types: Vec<Arc<InstanceType>>,
    /// The DaemonSet pods a new node runs, per instance type (indexed as `instance_types`).
    pub daemon_overheads: DaemonOverheads,
    /// What is left of `spec.limits` (None when unlimited), counting the `nodes` pseudo-resource separately.
    pub remaining: Option<Resources>,
    pub remaining_nodes: Option<i64>,
    /// What a NodeClaim made from this template carries besides its scheduling constraints.
    pub claim_metadata: ClaimMetadata,
}

/// The parts of a NodeClaim that come straight from the NodePool template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimMetadata {
    /// (group, kind, name) of the node class.
    pub node_class_ref: (String, String, String),
    pub annotations: Vec<(String, String)>,
    pub expire_after: Option<String>,
    pub termination_grace_period: Option<String>,
}

/// A node already in the cluster (or an in-flight NodeClaim whose capacity is known).
#[derive(Debug, Clone)]
pub struct ExistingNode {
    pub name: String,
    /// The node's hostname domain for topology.
    pub hostname: Symbol,
    /// The node's labels as single-value requirements.
    pub requirements: Requirements,
    /// allocatable - requests of the pods bound to it (and DaemonSet pods still to come).
    pub available: Resources,
    /// Taints pods must tolerate (startup and known ephemeral taints already left out).
    pub taints: Vec<Taint>,
    pub host_ports: Vec<HostPort>,
    /// CSI attach limits per driver, and volumes already attached, per driver.
    pub volume_limits: Vec<(Symbol, u32)>,
    pub volumes_used: Vec<(Symbol, u32)>,
    /// The NodePool that owns it, if Karpenter manages it.
    pub nodepool: Option<String>,
    /// False for a cordoned node: it takes no new pods, but its pods still count for topology.
    pub schedulable: bool,
    /// Removed by the disruption being simulated: it takes no pods and, unlike a cordoned node, is not a topology
    /// domain any more (kube-scheduler will not see it once it is gone), and the pods bound to it no longer count
    /// in topology or repel pods with their anti-affinity.
    pub leaving: bool,
}
