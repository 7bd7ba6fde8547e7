//! The AWS CloudProvider: what Karpenter learns from and asks of EC2 and friends. The only crate besides the
//! binary that depends on aws-sdk-*.
//!
//! - [`client`]: aws-sdk clients from aws-config (region, endpoint override, credentials, retry policy).
//! - [`error`]: [`AwsError`] with a stable `category()`, and its mapping into core's `CloudProviderError`.

pub mod client;
pub mod error;

pub use client::{AwsClients, ClientOptions};
pub use error::AwsError;
