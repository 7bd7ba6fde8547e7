//! Disruption decisions: which nodes may be taken away, for what reason, within which budgets.
//!
//! - [`candidates`]: which nodes a pass may consider, and why the others are left alone;
//! - [`budgets`]: how many nodes of a NodePool may be disrupted now, per reason;
//! - [`protection`]: the do-not-disrupt annotation and PodDisruptionBudgets as eviction applies them;
//! - [`drift`]: whether a NodeClaim has drifted from its NodePool, catalog or node class, and why;
//! - [`expiration`]: when a NodeClaim expires, and the terminationGracePeriod deadline of a deleting node;
//! - [`consolidatable`]: from when a NodeClaim may be consolidated (consolidateAfter);
//! - [`consolidation`]: multi- and single-node consolidation: which nodes to delete or replace by one cheaper node;
//! - [`cost`]: what disrupting a pod or a node costs, and the order candidates are tried in;
//! - [`balanced`]: the Balanced policy's score, savings share over disruption share;
//! - [`pass`]: one disruption pass, the methods in upstream's order, and why every other node is left alone;
//! - [`resimulate`]: re-running the scheduler as if some nodes were gone.

pub mod balanced;
pub mod budgets;
pub mod candidates;
pub mod consolidatable;
pub mod consolidation;
pub mod cost;
pub mod drift;
pub mod expiration;
pub mod pass;
pub mod protection;
pub mod resimulate;
