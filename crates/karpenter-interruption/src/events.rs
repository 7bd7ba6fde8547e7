//! The Kubernetes Events an interruption raises, with upstream's reasons and messages
//! (aws/karpenter-provider-aws `pkg/controllers/interruption/events`): one on the NodeClaim and one on its Node
//! for what the message says, and one on each when the NodeClaim is deleted for it.

use karpenter_core::cloudprovider::InterruptionKind;

/// An event's reason and message, on the NodeClaim and on its Node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterruptionEventText {
    /// A Warning, or else a Normal event.
    pub warning: bool,
    pub reason: &'static str,
    pub node_claim_message: &'static str,
    pub node_message: &'static str,
}

impl InterruptionEventText {
    /// A Warning with the same message on both objects.
    const fn both(reason: &'static str, message: &'static str) -> Self {
        Self {
            warning: true,
            reason,
            node_claim_message: message,
            node_message: message,
        }
    }
}

/// The event a message of `kind` raises: a Warning, but the rebalance recommendation's Normal
/// `SpotRebalanceRecommendation`. A scheduled change and every kind the instance status poller reports (failed
/// instance or system status checks, a scheduled event) raise `InstanceUnhealthy`, as upstream's do.
pub fn kind_event(kind: InterruptionKind) -> InterruptionEventText {
    match kind {
        InterruptionKind::SpotInterruption => {
            InterruptionEventText::both("SpotInterrupted", "Spot interruption warning was triggered")
        }
        InterruptionKind::ScheduledChange
        | InterruptionKind::InstanceStatusImpaired
        | InterruptionKind::SystemStatusImpaired
        | InterruptionKind::ScheduledEvent => InterruptionEventText::both(
            "InstanceUnhealthy",
            "An unhealthy warning was triggered for the instance",
        ),
        InterruptionKind::CapacityReservationInterruption => InterruptionEventText::both(
            "CapacityReservationInstanceInterrupted",
            "Capacity reservation interruption warning was triggered",
        ),
        InterruptionKind::Rebalance => InterruptionEventText {
            warning: false,
            ..InterruptionEventText::both(
                "SpotRebalanceRecommendation",
                "Spot rebalance recommendation was triggered",
            )
        },
        InterruptionKind::InstanceStopping => {
            InterruptionEventText::both("InstanceStopping", "Instance is stopping")
        }
        InterruptionKind::InstanceTerminating => {
            InterruptionEventText::both("InstanceTerminating", "Instance is terminating")
        }
    }
}

/// The Warning raised when an interruption deletes the NodeClaim.
pub const TERMINATING_ON_INTERRUPTION: InterruptionEventText = InterruptionEventText {
    warning: true,
    reason: "TerminatingOnInterruption",
    node_claim_message: "Interruption triggered termination for the NodeClaim",
    node_message: "Interruption triggered termination for the Node",
};
