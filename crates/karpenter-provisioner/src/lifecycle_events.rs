//! The Warnings the lifecycle writes on a NodeClaim whose launch failed, as upstream's: `InsufficientCapacityError`
//! when no offering the claim allows had capacity (the claim is then deleted, so the event is what is left to
//! tell a user why), `NodeClassNotReady` when its node class cannot launch yet. Both read
//! "NodeClaim <name> event: <the provider's error>", the error cut to 300 characters. Pure.

use karpenter_core::cloudprovider::CloudProviderError;

pub const INSUFFICIENT_CAPACITY_ERROR: &str = "InsufficientCapacityError";
pub const NODE_CLASS_NOT_READY: &str = "NodeClassNotReady";
/// On a NodeClaim whose Node registered without the `karpenter.sh/unregistered` taint.
pub const UNREGISTERED_TAINT_MISSING: &str = "UnregisteredTaintMissing";

/// What [`UNREGISTERED_TAINT_MISSING`] says.
pub fn unregistered_taint_missing_message() -> String {
    format!(
        "The Node registered without the {}:NoExecute taint, which keeps pods off a Karpenter node until its \
         labels and taints are synced",
        karpenter_api::labels::UNREGISTERED_TAINT_KEY
    )
}

/// How much of the provider's error an event carries (upstream's).
const MAX_ERROR_CHARS: usize = 300;

/// The event reason for a launch that failed with `error`, if it is one upstream reports.
pub fn launch_failure_reason(error: &CloudProviderError) -> Option<&'static str> {
    match error {
        CloudProviderError::InsufficientCapacity { .. } => Some(INSUFFICIENT_CAPACITY_ERROR),
        CloudProviderError::NodeClassNotReady { .. } => Some(NODE_CLASS_NOT_READY),
        _ => None,
    }
}

/// "NodeClaim <claim> event: <error>", the error cut to [`MAX_ERROR_CHARS`] with "..." after.
pub fn launch_failure_message(claim: &str, error: &CloudProviderError) -> String {
    let text = error.to_string();
    let text = match text.char_indices().nth(MAX_ERROR_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    };
    format!("NodeClaim {claim} event: {text}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_capacity_names_the_claim_and_the_error() {
        let error = CloudProviderError::InsufficientCapacity {
            message: "no capacity for small-instance-type spot in test-zone-1".into(),
            offerings: Vec::new(),
        };
        assert_eq!(launch_failure_reason(&error), Some("InsufficientCapacityError"));
        assert_eq!(
            launch_failure_message("default-x7k2p", &error),
            "NodeClaim default-x7k2p event: insufficient capacity: no capacity for small-instance-type spot in \
             test-zone-1"
        );
    }

    #[test]
    fn a_node_class_not_ready_is_reported_and_other_failures_are_not() {
        let error = CloudProviderError::NodeClassNotReady {
            name: "default".into(),
            reason: "no subnets".into(),
        };
        assert_eq!(launch_failure_reason(&error), Some("NodeClassNotReady"));
        assert_eq!(
            launch_failure_reason(&CloudProviderError::Transient("throttled".into())),
            None
        );
    }

    #[test]
    fn a_long_error_is_cut_to_300_characters() {
        let error = CloudProviderError::Transient("x".repeat(400));
        let message = launch_failure_message("c", &error);
        assert_eq!(message, format!("NodeClaim c event: {}...", "x".repeat(300)));
    }
}
