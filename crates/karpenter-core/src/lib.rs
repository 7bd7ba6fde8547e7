//! The pure, synchronous heart of Karpenter: a compact model of a cluster, the requirements algebra, resources,
//! the instance-type catalog and its capacity maths. No I/O, no async, no clock reads: every decision is a
//! function of its inputs. The one async item is the [`cloudprovider::CloudProvider`] trait, declared here for
//! providers to implement and controllers to call; nothing in core calls it.

pub mod catalog;
pub mod clock;
pub mod cloudprovider;
pub mod consistency;
pub mod disruption;
pub mod instance_type;
pub mod provisioning;
pub mod requirements;
pub mod resources;
pub mod scheduler_config;
pub mod scheduling;
pub mod sharing;
pub mod snapshot;
pub mod static_capacity;
