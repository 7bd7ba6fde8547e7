//! The crate's one error type.

use karpenter_core::cloudprovider::CloudProviderError;
use karpenter_nodeclass::NodeClassError;

#[derive(Debug, thiserror::Error)]
pub enum ProvisionerError {
    /// The state cache has not completed its first list: deciding now could launch for pods that already
    /// have a place.
    #[error("the cluster state is not synced yet")]
    NotSynced,
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cloud provider: {0}")]
    CloudProvider(#[from] CloudProviderError),
    #[error("encoding {what}: {source}")]
    Encode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
}

impl ProvisionerError {
    /// A short, stable name for metrics labels and events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::NotSynced => "NotSynced",
            Self::Kube(_) => "KubeAPI",
            Self::CloudProvider(e) => e.category(),
            Self::Encode { .. } => "Encode",
        }
    }
}

/// A node class lookup's API error is the provisioner's own Kubernetes API error (same category).
impl From<NodeClassError> for ProvisionerError {
    fn from(error: NodeClassError) -> Self {
        match error {
            NodeClassError::Kube(e) => Self::Kube(e),
        }
    }
}
