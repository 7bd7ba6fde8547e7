//! Terminating NodeClaims. A NodeClaim carries the `karpenter.sh/termination` finalizer from its launch on, so
//! deleting it (by a disruption command, expiration, or `kubectl delete nodeclaim`) only marks it; this
//! controller then, as upstream's terminator does:
//! 1. taints its Node `karpenter.sh/disrupted:NoSchedule`, so nothing new lands there;
//! 2. drains it through the Eviction API, which honours PodDisruptionBudgets (a 429 is retried on the next
//!    pass): non-critical pods first, then critical ones (priority of system-cluster-critical and above);
//!    DaemonSet and mirror pods, finished pods and pods tolerating the disrupted taint stay; once the
//!    NodeClaim's terminationGracePeriod has run out, pods still there are deleted instead of evicted;
//! 3. when no pod is left to leave, deletes the instance through the cloud provider and waits until the
//!    provider reports it gone, deletes the Node, and removes the finalizer.
//!
//! Not here yet (issue 6): VolumeAttachment waits, early deletion of pods whose own grace would overrun the
//! terminationGracePeriod, the Node's own finalizer.

mod drain;
mod error;
pub mod taint;
mod terminator;

pub use drain::{DrainPlan, drain_plan};
pub use error::TerminationError;
pub use terminator::{TerminationPass, Terminator};
