//! The disruption controller: every 10 seconds (upstream's poll) it runs core's disruption pass over the state
//! cache's snapshot and carries out what the pass decides, one command at a time, as upstream's orchestration
//! queue does:
//! 1. the candidates' Nodes are tainted `karpenter.sh/disrupted:NoSchedule`, so nothing new lands on them (and
//!    the next passes see them as disrupting, inside their budgets);
//! 2. replacements, if the command has any, are created as NodeClaims and must become Initialized;
//! 3. then the candidate NodeClaims are deleted, and the terminator drains them within PDBs;
//! 4. if a replacement fails (deleted for lack of capacity, or not initialized within the timeout), the
//!    candidates are untainted and the replacements left are deleted: the cluster is as it was.
//!
//! Expired NodeClaims the pass reports are deleted at once (expiration is forceful and not budgeted).
//!
//! Before an emptiness or consolidation command is carried out, the decision is taken again 15 s later and the
//! command is abandoned unless it is unchanged ([`validation`]). Every tick also keeps the NodeClaims'
//! `Drifted` and `Consolidatable` conditions ([`claim_conditions`]), and nodes the pass leaves alone for a
//! reason worth telling get deduplicated `DisruptionBlocked` or `Unconsolidatable` events ([`blocked_events`]).
//!
//! A command lives in memory only: after a restart or a leader change, the `karpenter.sh/disrupted` taints a
//! previous process left on nodes it had not yet deleted are removed, and the pass decides afresh. The
//! TerminateFirstDrift gate deletes drifted candidates before their replacements launch.

pub mod blocked_events;
pub mod claim_conditions;
pub mod command_events;
mod controller;
mod error;
mod pass_metrics;
mod process_memory;
pub mod validation;

pub use controller::{DisruptionController, DisruptionSettings, InFlight, Tick};
pub use error::DisruptionError;
