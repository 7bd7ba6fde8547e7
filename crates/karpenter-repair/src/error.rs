//! The crate's one error type.

#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    /// The state cache has not completed its first list: a half-filled cache could make a healthy NodePool
    /// look mostly unhealthy, or hide the nodes the circuit breaker must count.
    #[error("the cluster state is not synced yet")]
    NotSynced,
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Draining a node for its reboot failed.
    #[error("draining for a reboot: {0}")]
    Drain(#[from] karpenter_termination::TerminationError),
}

impl RepairError {
    /// A short, stable name for metrics labels and events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::NotSynced => "NotSynced",
            Self::Kube(_) => "KubeAPI",
            Self::Drain(e) => e.category(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_are_stable_names() {
        assert_eq!(RepairError::NotSynced.category(), "NotSynced");
    }
}
