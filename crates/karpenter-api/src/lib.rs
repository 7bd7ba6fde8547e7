//! Karpenter's API types: karpenter.sh/v1 NodePool and NodeClaim, karpenter.sh/v1alpha1 NodeOverlay,
//! autoscaling.x-k8s.io/v1beta1 CapacityBuffer and karpenter.k8s.aws/v1 EC2NodeClass, with their CRD schemas
//! (OpenAPI and CEL rules), defaults and a `validate()` per kind that applies the same rules in Rust.
//!
//! No I/O here: the CLI, the controllers and `cargo xtask crds` all build on these types.

pub mod quantity;
