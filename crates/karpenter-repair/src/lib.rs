//! Node repair, upstream's `node.health` controller (behind the NodeRepair feature gate; the binary decides
//! whether to start it): a Node whose condition matches one of the cloud provider's repair policies (for
//! example `Ready=False`) for longer than the policy's toleration is replaced. Its NodeClaim is annotated
//! `karpenter.sh/nodeclaim-termination-timestamp` = now, so the drain does not wait, and deleted; the
//! provisioner then finds room for the pods as for any other deleted node.
//!
//! A circuit breaker holds repair back in a NodePool where more than 20% of the nodes are unhealthy (the whole
//! cluster for nodes without a NodePool), emitting `NodeRepairBlocked` events: see [`plan`].
//!
//! - [`health`]: whether a node is unhealthy by a policy, and from when it may be repaired (pure);
//! - [`plan`]: which nodes to repair now and which NodePools are blocked (pure);
//! - [`NodeRepairController`]: the loop over the state cache that carries the plan out.

mod controller;
mod error;
pub mod health;
pub mod history;
pub mod plan;
pub mod reboot;

pub use controller::{NODE_REPAIR_BLOCKED, NodeRepairController, RepairPass};
pub use error::RepairError;
