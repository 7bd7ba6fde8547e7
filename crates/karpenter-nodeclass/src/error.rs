//! The crate's one error type: the API server failing a read or a write the node-class machinery makes.

#[derive(Debug, thiserror::Error)]
pub enum NodeClassError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

impl NodeClassError {
    /// A short, stable name for metrics labels and events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Kube(_) => "KubeAPI",
        }
    }
}
