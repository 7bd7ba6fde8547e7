//! A simulated cluster for tests and `karpenter simulate`.
//!
//! - [`apiserver`]: an in-memory Kubernetes API server, reachable in-process by `kube::Client` and over HTTP by
//!   kubectl.
//! - [`clock`]: the time source everything in the simulation reads (system or virtual).

pub mod apiserver;
pub mod clock;
mod error;

pub use apiserver::{ApiServer, ApiServerOptions};
pub use clock::{Clock, SystemClock, VirtualClock};
pub use error::{ApiStatus, Error};
