//! The node-class machinery every kind shares, so EC2NodeClass, KWOKNodeClass and any kind a provider serves
//! are read and held the same way (upstream core does this generically over `status.Object`):
//!
//! - [`object`]: a class's status conditions, whatever its kind ([`NodeClassObject`], implemented for the typed
//!   kinds and for a `DynamicObject` read through discovery); [`claims`]: which NodeClaims use a class;
//! - [`mod@readiness`]: what a class's `Ready` condition says, as NodePools' `NodeClassReady` and launches read it
//!   ([`NodeClassReadiness`]); [`lookup`] finds the class a NodePool's reference names and reads it;
//! - [`conditions`]: the `Ready` root condition a class controller writes over its dependents, and transition
//!   times kept while a condition's status stays;
//! - [`hash`]: a class's hash annotations and the re-hashing of its NodeClaims after a hash-version change;
//! - [`finalizer`]: the finalizer that holds a class while NodeClaims still use it.
//!
//! Decisions are pure functions over objects; the few functions that talk to the API server are async and take
//! the client. What a provider resolves for its class (EC2: subnets, security groups, AMIs, instance profile, dry
//! runs) stays in the provider's crate, which uses these parts.

pub mod claims;
pub mod conditions;
pub mod error;
pub mod finalizer;
pub mod hash;
pub mod lookup;
pub mod object;
pub mod readiness;

pub use error::NodeClassError;
pub use finalizer::{Deletion, TerminationFinalizer};
pub use hash::HashAnnotations;
pub use lookup::{NodeClassLookup, ObservedNodeClass};
pub use object::{ConditionRef, NodeClassObject};
pub use readiness::{NodeClassReadiness, condition_readiness, readiness};
