//! Terminating NodeClaims. A NodeClaim carries the `karpenter.sh/termination` finalizer from its launch on, so
//! deleting it (by a disruption command, expiration, or `kubectl delete nodeclaim`) only marks it; this
//! controller then, as upstream's terminator does:
//! 1. taints its Node `karpenter.sh/disrupted:NoSchedule`, so nothing new lands there;
//! 2. drains it through the Eviction API, which honours PodDisruptionBudgets (a 429 is retried on the next
//!    pass): non-critical pods first, then critical ones (priority of system-cluster-critical and above);
//!    DaemonSet and mirror pods, finished pods and pods tolerating the disrupted taint stay; once the
//!    NodeClaim's terminationGracePeriod has run out, pods still there are deleted instead of evicted; a pod
//!    whose own terminationGracePeriodSeconds would overrun that deadline is deleted early, its grace clamped
//!    to the time left, so it is gone by the deadline (the `karpenter.sh/nodeclaim-termination-timestamp`
//!    annotation, which node repair sets to "now", brings the deadline forward);
//! 3. waits until no VolumeAttachment names the node (skipped once the deadline has passed), except those of
//!    pods the drain leaves behind (see [`volumes`]);
//! 4. deletes the instance through the cloud provider and waits until the provider reports it gone, deletes
//!    the Node, removes the Node's finalizer and then the NodeClaim's.
//!
//! A Node that is not Ready and whose instance the provider no longer has skips steps 1 to 3: no kubelet is
//! left to finish its pods, so it goes at once and the pod garbage collector removes them.
//!
//! The Node carries the same finalizer from its registration on (the lifecycle controller adds it), so
//! `kubectl delete node` only marks it: the terminator then deletes its NodeClaim and the steps above run, the
//! Node going last. A Node being deleted whose NodeClaim is already gone (or never existed) is released at
//! once (see [`node_finalizer`]).

mod claim_conditions;
mod drain;
mod error;
pub mod events;
pub mod node_finalizer;
pub mod taint;
mod terminator;
mod volumes;

pub use drain::{DrainPlan, PodDeletion, drain_plan};
pub use error::TerminationError;
pub use terminator::{TerminationPass, Terminator};
