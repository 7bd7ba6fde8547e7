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

//!
//! The API server and what runs on it (`apiserver`, `cluster`, `kubelet`, `scheduler`, `workloads`) are the
//! `apiserver` feature (on by default): the kwok cloud provider (`karpenter-kwok`) needs only the clock and the
//! simulated cloud, so a production image does not carry an API server.

#[cfg(feature = "apiserver")]
pub mod apiserver;
pub mod clock;
pub mod cloud;
#[cfg(feature = "apiserver")]
pub mod cluster;
#[cfg(feature = "apiserver")]
mod error;
#[cfg(feature = "apiserver")]
pub mod kubelet;
#[cfg(feature = "apiserver")]
mod objects;
pub mod rng;
#[cfg(feature = "apiserver")]
pub mod scheduler;
#[cfg(feature = "apiserver")]
pub mod workloads;

#[cfg(feature = "apiserver")]
pub use apiserver::{ApiServer, ApiServerOptions};
pub use clock::{Clock, SystemClock, VirtualClock};
pub use cloud::{InterruptionEvent, InterruptionKind, OfferingKey, SimCloudOptions, SimCloudProvider};
#[cfg(feature = "apiserver")]
pub use cluster::{SimCluster, SimOptions};
#[cfg(feature = "apiserver")]
pub use error::{ApiStatus, Error};
#[cfg(feature = "apiserver")]
pub use kubelet::KubeletOptions;
#[cfg(feature = "apiserver")]
pub use workloads::WorkloadOptions;
