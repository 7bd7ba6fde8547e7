//! Disruption decisions: which nodes may be taken away, for what reason, within which budgets.
//!
//! - [`budgets`]: how many nodes of a NodePool may be disrupted now, per reason;
//! - [`protection`]: the do-not-disrupt annotation and PodDisruptionBudgets as eviction applies them.

pub mod budgets;
pub mod protection;
