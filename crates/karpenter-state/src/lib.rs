//! The cluster-state cache the controllers decide over.
//!
//! kube-runtime watchers (list, then watch from the list's resourceVersion, relisting after a 410 or a dropped
//! stream, with backoff) feed one [`ProjectedStore`] per kind. Each object is turned into what decisions read as
//! it arrives (a Pod into a [`karpenter_core::snapshot::CompactPod`], so 150,000 pods fit in a few hundred
//! megabytes) and held behind an `Arc`, so [`ClusterState::snapshot`] hands a decision a
//! [`karpenter_core::snapshot::Snapshot`] by copying pointers, never objects.
//!
//! [`ClusterState::synced`] is the gate upstream calls `cluster.Synced()`: no provisioning or disruption decision
//! is made until every watched kind has completed its first list, so a half-filled cache is never mistaken for
//! an empty cluster.
//!
//! [`events::DedupedRecorder`] is here too: the Events recorder the controllers that report every pass share;
//! [`finalizers`], the optimistically locked finalizer writes the lifecycle and the terminator share;
//! [`api_errors`], the API server answers (not found, conflict) every controller branches on; and
//! [`ControllerContext`], the client, cache and clock the operator hands every controller.

pub mod api_errors;
mod cluster_state;
mod context;
mod error;
pub mod events;
pub mod finalizers;
mod keyed;
mod launch_prices;
pub mod periodic;
mod pod_timing;
mod projected_store;
mod reflect;

pub use cluster_state::{BufferNodes, ClusterState, Watched};
pub use context::ControllerContext;
pub use error::StateError;
pub use launch_prices::CachedLaunchPrices;
pub use pod_timing::PodTiming;
pub use projected_store::{Keyed, ObjectKey, ProjectedStore};
pub use reflect::reflect;
