//! The reasons of the Events termination publishes, upstream's.

/// Normal, on a pod: the Eviction API accepted its eviction.
pub const EVICTED: &str = "Evicted";
/// Normal, on a pod: deleted so that its grace period ends by the node's deadline.
pub const DISRUPTED: &str = "Disrupted";
/// Warning, on a Node: pods are still waited for, or a PodDisruptionBudget refused an eviction.
pub const FAILED_DRAINING: &str = "FailedDraining";
/// Normal, on a Node: drained, but VolumeAttachments still name it.
pub const AWAITING_VOLUME_DETACHMENT: &str = "AwaitingVolumeDetachment";
/// Warning, on a Node and its NodeClaim: the NodeClaim has a termination deadline, by which every pod will be
/// deleted.
pub const TERMINATION_GRACE_PERIOD_EXPIRING: &str = "TerminationGracePeriodExpiring";
