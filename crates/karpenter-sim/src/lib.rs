//! A simulated cluster for tests and `karpenter simulate`.
//!
//! - [`apiserver`]: an in-memory Kubernetes API server, reachable in-process by `kube::Client` and over HTTP by
//!   kubectl.
//! - [`clock`]: the time source everything in the simulation reads (system or virtual).
//! - [`cloud`]: a simulated cloud provider over an instance-type catalog (launches, ICE, interruptions, cost).

pub mod apiserver;
pub mod clock;
pub mod cloud;
mod error;

pub use apiserver::{ApiServer, ApiServerOptions};
pub use clock::{Clock, SystemClock, VirtualClock};
pub use error::{ApiStatus, Error};
