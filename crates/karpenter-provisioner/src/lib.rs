//! Making room for pending pods.
//!
//! - [`provisioner`]: batches pending pods (an idle window and a maximum window, upstream's
//!   BATCH_IDLE_DURATION and BATCH_MAX_DURATION), runs core's scheduling simulation over the state cache's
//!   snapshot with the cloud provider's instance types, and creates the NodeClaims it asks for;
//! - [`lifecycle`]: takes each NodeClaim through launch (the cloud provider's `create`), registration (its Node
//!   appears: labels and taints synced, `karpenter.sh/unregistered` removed) and initialization (the Node is
//!   Ready, its startup and ephemeral taints are gone and the requested extended resources registered:
//!   [`initialization`]), recording upstream's conditions on the NodeClaim; a failed launch is retried after
//!   [`launch_backoff`]'s per-claim exponential back-off; a launch without capacity or with its node class not
//!   ready gets upstream's Warning on the claim ([`lifecycle_events`]);
//! - [`nominations`]: the `Nominated` event on each pod a NodeClaim was made for; [`scheduling_events`]:
//!   `FailedScheduling` on each pod a round found no place for, `NoCompatibleInstanceTypes` on a NodePool left no
//!   instance type;
//! - [`pending`]: which pods the provisioner acts on;
//! - [`podevents`]: `status.lastPodEventTime` on a NodeClaim when a pod binds to or leaves its Node;
//! - [`nodepool_status`] and [`nodepool_hash`]: each NodePool's status, and its hash annotations with the
//!   re-hashing of NodeClaims stamped by another hash version; [`registration_health`]: the pool's
//!   NodeRegistrationHealthy condition from the lifecycle's registrations and liveness deletions;
//! - [`consistency`]: each launched NodeClaim checked against its Node every 10 minutes (`ConsistentStateFound`,
//!   `FailedConsistencyCheck` events);
//! - [`gc`]: instances without NodeClaims are terminated, NodeClaims without instances deleted;
//! - [`nodeoverlay_status`]: each NodeOverlay's ValidationSucceeded and Ready conditions (the NodeOverlay gate):
//!   whether the scheduler applies it, or why not (a validation failure, or a conflict with an overlay of the
//!   same weight);
//! - [`static_capacity`]: static NodePools (`spec.replicas`, the StaticCapacity gate) kept at their replica
//!   count;
//! - [`capacity_buffer`]: CapacityBuffers (the CapacityBuffer gate): each buffer's status, and a provisioning
//!   round when a buffer changes and every 30 s while one keeps placeholder pods.

pub mod batcher;
pub mod capacity_buffer;
pub mod catalog;
pub mod consistency;
mod error;
pub mod gc;
pub mod initialization;
pub mod launch_backoff;
pub mod lifecycle;
pub mod lifecycle_events;
pub mod nodeoverlay_status;
pub mod nodepool_conditions;
pub mod nodepool_hash;
pub mod nodepool_resources;
pub mod nodepool_status;
pub mod nominations;
pub mod pending;
pub mod podevents;
pub mod provisioner;
pub mod registration_health;
pub mod scheduling_events;
pub mod static_capacity;

pub use error::ProvisionerError;
