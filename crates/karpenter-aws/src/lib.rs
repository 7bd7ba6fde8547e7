//! The AWS CloudProvider: what Karpenter learns from and asks of EC2 and friends. The only crate besides the
//! binary that depends on aws-sdk-*.
//!
//! # Entry point for the binary
//! ```text
//! let settings = AwsSettings { cluster_name, reserved_capacity, .. };   // flags/env (FEATURE_GATES); settings.rs
//! let runtime = AwsProvider::start(settings, kube_client).await?;        // validates, connects, discovers
//! let cloud: Arc<dyn CloudProvider> = runtime.cloud_provider_dyn();
//! let interruptions: Option<Arc<dyn InterruptionSource>> = runtime.interruption_source_dyn();
//! for task in runtime.tasks { tokio::spawn(task.future); }             // EC2NodeClass controller, refreshes
//! ```
//! [`runtime::AwsProvider::start`] fails on invalid settings (the message names the environment variable),
//! when EC2 cannot be reached, or when the interruption queue does not exist.
//!
//! # The launch path
//! `CloudProvider::create` is `AwsCloudProvider::launch` in `src/cloud_provider/launch.rs`: one method per
//! step (class lookup, its resolved status, placement group, catalog, [`launch_plan`] with a capacity
//! reservation slot, subnet lease, launch templates with [`userdata`] via [`launch_template`], CreateFleet via
//! [`fleet_batcher`] and [`launch`], and the NodeClaim from the launched instance). `get`/`list`/`delete` are
//! in `src/cloud_provider/instances.rs`, `instance_types` in `src/cloud_provider/node_classes.rs`.
//!
//! # Modules
//! - [`cloud_provider`]: [`AwsCloudProvider`], core's `CloudProvider` and `DriftProvider` on EC2.
//! - [`runtime`]: [`runtime::AwsProvider::start`] and the tasks it returns.
//! - [`settings`]: [`AwsSettings`] and their validation.
//! - [`nodeclass`]: the EC2NodeClass controller (status, conditions, finalizer, hash annotations), with the EC2
//!   dry-run authorization checks behind ValidationSucceeded ([`nodeclass::dry_run`], `DISABLE_DRY_RUN`).
//! - [`interruption_source`]: core's `InterruptionSource` over the SQS queue; [`instance_status`]: another over
//!   DescribeInstanceStatus (instances failing their status checks or with a scheduled event), polled every
//!   minute; [`merged_interruptions`]: both as the one source the interruption controller reads.
//! - [`launch_plan`]: the offerings, subnets and AMIs one launch sends (after upstream's launch filters: no
//!   exotic types when ordinary ones serve, no spot dearer than on-demand); [`launch_template`]: launch templates
//!   (block devices, metadata options, network interfaces with EFA, IPv4 prefixes and connection tracking,
//!   nested virtualization, tags, content-hashed names), their cache and garbage collection; [`launch`]:
//!   instant CreateFleet, with ICE handling; [`fleet_batcher`]: launches of the same fleet input within 35 ms
//!   sent as one CreateFleet; [`subnet_ips`]: the subnet each zone launches into (most free IP addresses, net
//!   of launches in flight); [`drift`]: AMI, subnet, security group, static-hash, capacity reservation and
//!   placement group drift.
//! - [`node_classes`]: where EC2NodeClasses are read from and cached; [`capacity`]: a class's capacity settings;
//!   [`pod_addressing`]: secondary IPs or IPv4 prefix delegation (a class with `ipPrefixCount`), and the max
//!   pods and subnet addresses that follow.
//! - [`placement_groups`]: `spec.placementGroupSelector` resolved with DescribePlacementGroups (the
//!   PlacementGroupReady condition), the group's id and partitions as instance-type requirements and node
//!   labels, launches into it through the launch template, a cluster group's zone, and PlacementGroupDrift.
//! - [`capacity_reservations`]: on-demand capacity reservations and capacity blocks (ReservedCapacity gate):
//!   discovery into `status.capacityReservations`, the instances each can still take, `reserved` offerings,
//!   and the lifecycle loop (NodeClaims whose reservation ended become on-demand; capacity blocks drained 40
//!   minutes before their end; a `CapacityReservationEnded` or `CapacityBlockExpiring` Event on each);
//!   launches into them go through [`launch_plan`], [`launch_template`] and [`launch`].
//! - [`userdata`]: the launch templates' user data per AMI family (AL2023 nodeadm, Bottlerocket TOML, AL2
//!   bootstrap.sh, Windows PowerShell), merged with `spec.userData`.
//! - [`instance_profile`]: the instance profiles created for `spec.role`, deleted with their class and
//!   garbage-collected when their class is gone.
//! - [`ami`]: AMI aliases (al2023, al2, bottlerocket, windows20xx) resolved through the public SSM parameters.
//! - [`permissions`]: every AWS action the provider calls, which deploy/cloudformation.yaml must grant
//!   (tests/iam_policy.rs checks both ways; the moto tests sign as a principal holding exactly those policies).
//! - [`client`]: aws-sdk clients from aws-config (region, endpoint override, credentials, retry policy), each
//!   recording [`sdk_metrics`] (calls by service, operation and error code, and their durations).
//! - [`error`]: [`AwsError`] with a stable `category()`, and its mapping into core's `CloudProviderError`.
//! - [`instance`]: finding, listing and terminating the instances behind NodeClaims, and their cache.
//! - [`node_claim`]: an instance as the NodeClaim `CloudProvider::get`/`list` answer with.
//! - [`nodeclaim_tagging`]: the `karpenter.sh/nodeclaim` tag on every launched instance: retried after a
//!   batched launch, shown by `get`/`list` until EC2 has it, and applied later by the tagging controller
//!   (upstream's `nodeclaim.tagging`, which also adds `Name` and marks the claim `karpenter.k8s.aws/tagged`).
//! - [`instance_types`]: DescribeInstanceTypes/-Offerings into `CatalogInstanceType`s with core's capacity maths.
//! - [`pricing`]: on-demand (Pricing API) and spot (DescribeSpotPriceHistory) prices, with a static fallback.
//! - [`selectors`], [`subnets`], [`security_groups`]: what an EC2NodeClass's selector terms select.
//! - [`tags`]: the tags on what Karpenter launches.
//! - [`counted_capacity`]: EC2's count of a subnet's addresses or a reservation's instances, net of launches.
//! - [`unavailable_offerings`]: offerings recently out of capacity, and capacity reservations found full or
//!   interrupted.
//! - [`interruption`]: the SQS EventBridge messages; [`interruption_queue`]: receiving and deleting them.
//!
//! Not done here: a cluster placement group's zone is learnt only from the instances Karpenter launched or listed
//! in it (EC2 does not report it), and the partition EC2 picks is read back once right after the launch (no
//! registration hook waits for it). The addresses a launch is counted on to use are
//! the smallest max pods of its types (VPC CNI secondary IPs), or whole /28 prefixes for them when the class
//! sets `ipPrefixCount` ([`pod_addressing`]); the CNI's custom networking is not modelled.
//!
//! Tests: unit tests beside the code; tests/iam_policy.rs (every action the provider calls is granted by the
//! controller policies of deploy/cloudformation.yaml, and nothing else is); and tests/moto.rs against a local
//! moto server started per test by tests/moto/harness.py, with IAM enforced: the provider signs as a principal
//! holding exactly the template's controller policies. The tests provision the pinned `moto[server]==5.2.5`
//! into `target/moto-venv` themselves (python3 with its venv module is all they need; without it they fail,
//! naming the package to install), with karpenter-sim's in-memory API server for the Kubernetes side.

// The module map above is for contributors: it links crate-private modules too, which
// `cargo doc --document-private-items` renders.
#![allow(rustdoc::private_intra_doc_links)]

// Modules are `pub` when the binary or the integration tests (tests/) use them, else `pub(crate)`.

// The provider's start-up and its connection to AWS.
pub mod client;
pub(crate) mod error;
pub mod permissions;
pub mod runtime;
pub mod sdk_metrics;
pub(crate) mod settings;

// The launch path: `cloud_provider/launch.rs` (see above), and what it calls.
pub(crate) mod cloud_provider;
pub(crate) mod counted_capacity;
pub mod fleet_batcher;
pub mod launch;
pub(crate) mod launch_plan;
pub mod launch_template;
pub(crate) mod subnet_ips;
pub mod tags;
pub(crate) mod tenancy;
pub mod userdata;

// Instances, the NodeClaims they answer as, their tags and drift.
pub(crate) mod drift;
pub mod instance;
pub(crate) mod node_claim;
pub mod nodeclaim_tagging;

// EC2NodeClasses: the controller, what their selectors resolve to, and what they configure.
pub mod ami;
pub(crate) mod capacity;
pub(crate) mod capacity_reservations;
pub mod instance_profile;
pub(crate) mod node_classes;
pub mod nodeclass;
pub mod placement_groups;
pub mod pod_addressing;
pub mod security_groups;
pub(crate) mod selectors;
pub mod subnets;

// Instance types, their offerings and prices.
pub mod instance_types;
pub(crate) mod pricing;
pub(crate) mod unavailable_offerings;

// Interruption: the SQS queue and its messages, the instance status poller, and both as one source.
pub mod instance_status;
pub(crate) mod interruption;
pub(crate) mod interruption_queue;
pub mod interruption_source;
pub mod merged_interruptions;

pub use client::{AwsClients, ClientOptions};
pub use cloud_provider::AwsCloudProvider;
pub use error::AwsError;
pub use instance::Ec2Instance;
pub use instance_types::InstanceTypeProvider;
pub use interruption::{InstanceState, InterruptionKind, InterruptionMessage, parse_interruption_message};
pub use interruption_queue::{InterruptionQueue, ReceivedMessage};
pub use node_classes::{KubeNodeClasses, NodeClassCache, NodeClassSource};
pub use pricing::{PriceSource, PricingProvider, PricingStatus};
pub use runtime::{AwsProvider, AwsRuntime};
pub use settings::AwsSettings;
pub use unavailable_offerings::UnavailableOfferings;
