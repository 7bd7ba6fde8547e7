//! The AWS CloudProvider: what Karpenter learns from and asks of EC2 and friends. The only crate besides the
//! binary that depends on aws-sdk-*.
//!
//! - [`ami`]: AMI aliases (al2023@latest) resolved through the public SSM parameters.
//! - [`client`]: aws-sdk clients from aws-config (region, endpoint override, credentials, retry policy).
//! - [`error`]: [`AwsError`] with a stable `category()`, and its mapping into core's `CloudProviderError`.
//! - [`instance`]: finding, listing and terminating the instances behind NodeClaims.
//! - [`node_claim`]: an instance as the NodeClaim `CloudProvider::get`/`list` answer with.
//! - [`instance_types`]: DescribeInstanceTypes/-Offerings into `CatalogInstanceType`s with core's capacity maths.
//! - [`pricing`]: on-demand (Pricing API) and spot (DescribeSpotPriceHistory) prices, with a static fallback.
//! - [`selectors`], [`subnets`], [`security_groups`]: what an EC2NodeClass's selector terms select.
//! - [`tags`]: the tags on what Karpenter launches.
//! - [`unavailable_offerings`]: offerings recently out of capacity.
//! - [`launch`]: launch templates from an EC2NodeClass and instant CreateFleet, with ICE handling.
//! - [`interruption`]: the SQS EventBridge messages the interruption controller consumes.
//! - [`interruption_queue`]: receiving and deleting them.
//!
//! Not wired into the binary yet. Tests: unit tests beside the code, and tests/moto.rs against a local moto
//! server started per test by tests/moto/harness.py (python3 with `moto[server]==5.2.5` from .ci/requirements.txt;
//! the tests skip, saying so, when either is missing).

pub mod ami;
pub mod capacity;
pub mod client;
pub mod cloud_provider;
pub mod drift;
pub mod error;
pub mod instance;
pub mod instance_types;
pub mod interruption;
pub mod interruption_queue;
pub mod interruption_source;
pub mod launch;
pub mod launch_plan;
pub mod node_claim;
pub mod node_classes;
pub mod nodeclass;
pub mod pricing;
pub mod security_groups;
pub mod selectors;
pub mod settings;
pub mod subnets;
pub mod tags;
pub mod unavailable_offerings;

pub use client::{AwsClients, ClientOptions};
pub use cloud_provider::AwsCloudProvider;
pub use error::AwsError;
pub use instance::Ec2Instance;
pub use instance_types::InstanceTypeProvider;
pub use interruption::{InstanceState, InterruptionKind, InterruptionMessage, parse_interruption_message};
pub use interruption_queue::{InterruptionQueue, ReceivedMessage};
pub use node_classes::{KubeNodeClasses, NodeClassCache, NodeClassSource};
pub use pricing::{PriceSource, PricingProvider, PricingStatus};
pub use settings::AwsSettings;
pub use unavailable_offerings::UnavailableOfferings;
