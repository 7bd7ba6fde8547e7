//! A simulated cluster for tests and `karpenter simulate`.
//!
//! - [`apiserver`]: an in-memory Kubernetes API server, reachable in-process by `kube::Client` and over HTTP by
//!   kubectl.
//! - [`clock`]: the time source everything in the simulation reads (system or virtual).
//! - [`cloud`]: a simulated cloud provider over an instance-type catalog (launches, ICE, interruptions, cost).
//! - [`kubelet`]: simulated kubelets (node registration, readiness, pod start and graceful stop) and node
//!   lifecycle.
//! - [`scheduler`]: a simulated kube-scheduler using core's scheduling predicates against existing nodes.
//! - [`workloads`]: Deployment, ReplicaSet, DaemonSet and Job controllers.
//! - [`cluster`]: [`SimCluster`], all of the above on one clock.

pub mod apiserver;
pub mod clock;
pub mod cloud;
pub mod cluster;
mod error;
pub mod kubelet;
pub mod kwok;
mod objects;
pub mod scheduler;
pub mod workloads;

pub use apiserver::{ApiServer, ApiServerOptions};
pub use clock::{Clock, SystemClock, VirtualClock};
pub use cloud::{InterruptionEvent, InterruptionKind, OfferingKey, SimCloudOptions, SimCloudProvider};
pub use cluster::{SimCluster, SimOptions};
pub use error::{ApiStatus, Error};
pub use kubelet::KubeletOptions;
pub use kwok::KwokCloudProvider;
pub use workloads::WorkloadOptions;
