//! The crate's one error type.

/// What can go wrong keeping the cache.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The watch of a kind failed; the watcher retries with backoff, this is what it reported.
    #[error("watching {kind}: {source}")]
    Watch {
        kind: &'static str,
        #[source]
        source: kube::runtime::watcher::Error,
    },
}

impl StateError {
    /// A short, stable name for metrics labels.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Watch { .. } => "WatchError",
        }
    }
}
