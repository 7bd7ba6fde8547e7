//! JSON logs on stdout, one object per line: `timestamp`, `level`, `message`, `target` (the module, where
//! upstream has `logger`) and every structured field (`controller`, `lease`, `error`, ...) beside them.

use tracing_subscriber::{EnvFilter, fmt};

use crate::{OperatorError, settings::LogLevel};

/// Installs the process's log subscriber at `level`; `RUST_LOG`, when set, refines it per module.
pub fn init(level: LogLevel) -> Result<(), OperatorError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(directives(level)));
    fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_target(true)
        .with_env_filter(filter)
        .with_writer(std::io::stdout)
        .try_init()
        .map_err(|e| OperatorError::Logging(e.to_string()))
}

/// The filter `LOG_LEVEL` stands for. `debug` is Karpenter's own debug logging, as upstream's is: the libraries
/// under it (the HTTP client's connection pool, TLS handshakes, request buffering) stay at `info`, or every API
/// request would log several lines and drown what Karpenter says (`RUST_LOG` still reaches them).
fn directives(level: LogLevel) -> &'static str {
    match level {
        // A target matches a directive it starts with: `karpenter` covers every `karpenter_*` crate.
        LogLevel::Debug => "info,karpenter=debug",
        LogLevel::Info => "info",
        LogLevel::Warn => "warn",
        LogLevel::Error => "error",
    }
}

#[cfg(test)]
mod tests {
    use tracing::Level;
    use tracing_subscriber::{Registry, layer::SubscriberExt};

    use super::*;

    /// Whether an event of `target` at `level` is written under `LOG_LEVEL`.
    fn logged(log_level: LogLevel, target: &'static str, level: Level) -> bool {
        let subscriber = Registry::default().with(EnvFilter::new(directives(log_level)));
        let mut seen = false;
        tracing::subscriber::with_default(subscriber, || {
            // Targets must be literals in the macros: one event per case.
            seen = match (target, level) {
                ("karpenter_core::scheduling", Level::DEBUG) => {
                    tracing::enabled!(target: "karpenter_core::scheduling", Level::DEBUG)
                }
                ("karpenter", Level::DEBUG) => tracing::enabled!(target: "karpenter", Level::DEBUG),
                ("tower::buffer::worker", Level::DEBUG) => {
                    tracing::enabled!(target: "tower::buffer::worker", Level::DEBUG)
                }
                ("hyper_util::client::legacy::pool", Level::INFO) => {
                    tracing::enabled!(target: "hyper_util::client::legacy::pool", Level::INFO)
                }
                _ => false,
            };
        });
        seen
    }

    #[test]
    fn debug_is_karpenters_own_and_libraries_stay_at_info() {
        assert!(logged(
            LogLevel::Debug,
            "karpenter_core::scheduling",
            Level::DEBUG
        ));
        assert!(logged(LogLevel::Debug, "karpenter", Level::DEBUG));
        assert!(!logged(LogLevel::Debug, "tower::buffer::worker", Level::DEBUG));
        assert!(logged(
            LogLevel::Debug,
            "hyper_util::client::legacy::pool",
            Level::INFO
        ));
        assert!(!logged(
            LogLevel::Info,
            "karpenter_core::scheduling",
            Level::DEBUG
        ));
    }
}
