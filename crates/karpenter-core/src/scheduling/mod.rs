//! The scheduling simulator: where pending pods go (existing nodes, NodeClaims opened during the simulation,
//! new NodeClaims per NodePool) and why a pod stays pending.
//!
//! - [`pod`]: the compact pod and its relaxable preferences;
//! - [`topology`]: spread, affinity and anti-affinity domain counting;
//! - [`nodes`]: existing nodes and NodePool templates;
//! - `node_overlay`: what one simulation placed on existing nodes, beside the input rather than in a copy;
//! - [`daemon_overhead`]: the DaemonSet pods a new node runs, per instance type;
//! - [`scheduler`]: the simulation loop, instance-type filtering, limits and launch choice.

mod claim_index;
pub mod daemon_overhead;
mod node_overlay;
pub mod nodes;
pub mod pod;
pub mod scheduler;
pub mod topology;

pub use daemon_overhead::{DaemonOverhead, DaemonOverheads};
pub use nodes::{ClaimMetadata, ExistingNode, NodePoolTemplate};
pub use pod::{
    AffinityTerm, HostPort, LabelSelector, Labels, NamespaceScope, Pod, PodShape, PreferencePolicy,
    Relaxation, SelectorExpression, SelectorOperator, SpreadConstraint, Taint, TaintEffect, Toleration,
};
pub use scheduler::{
    BoundPod, Launch, MinValuesPolicy, NewNodeClaim, SchedulingInput, SchedulingResults, SchedulingSettings,
    SimulationIndex, claim_labels, schedule, schedule_indexed,
};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod topology_tests;
