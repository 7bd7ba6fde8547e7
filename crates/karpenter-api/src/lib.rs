//! Karpenter's API types: karpenter.sh/v1 NodePool and NodeClaim, karpenter.sh/v1alpha1 NodeOverlay,
//! autoscaling.x-k8s.io/v1beta1 CapacityBuffer, karpenter.k8s.aws/v1 EC2NodeClass and karpenter.kwok.sh/v1alpha1
//! KWOKNodeClass, with their CRD schemas
//! (OpenAPI and CEL rules), defaults and a `validate()` per kind that applies the same rules in Rust.
//!
//! No I/O here: the CLI, the controllers and `cargo xtask crds` all build on these types.

pub mod capacitybuffer;
pub mod common;
pub mod crd;
pub mod quantity;

pub mod duration;
pub mod ec2nodeclass;
pub mod hash;
pub mod kwoknodeclass;
pub mod label_policy;
pub mod labels;
pub mod manifest;
pub mod nodeclaim;
pub mod nodeoverlay;
pub mod nodepool;
pub mod validation;
