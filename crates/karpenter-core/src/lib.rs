//! The pure, synchronous heart of Karpenter: a compact model of a cluster, the requirements algebra, resources,
//! the instance-type catalog and its capacity maths. No I/O, no async, no clock reads: every decision is a
//! function of its inputs.

pub mod catalog;
pub mod disruption;
pub mod instance_type;
pub mod requirements;
pub mod resources;
pub mod scheduling;
pub mod snapshot;
