//! The crate's one error type.

use karpenter_core::cloudprovider::CloudProviderError;

#[derive(Debug, thiserror::Error)]
pub enum DisruptionError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cloud provider: {0}")]
    CloudProvider(#[from] CloudProviderError),
}

impl DisruptionError {
    /// A short, stable name for metrics labels and events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Kube(_) => "KubeAPI",
            Self::CloudProvider(e) => e.category(),
        }
    }
}
