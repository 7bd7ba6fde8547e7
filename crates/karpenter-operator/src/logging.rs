//! JSON logs on stdout, one object per line: `timestamp`, `level`, `message`, `target` (the module, where
//! upstream has `logger`) and every structured field (`controller`, `lease`, `error`, ...) beside them.

use tracing_subscriber::{EnvFilter, fmt};

use crate::{OperatorError, settings::LogLevel};

/// Installs the process's log subscriber at `level`; `RUST_LOG`, when set, refines it per module.
pub fn init(level: LogLevel) -> Result<(), OperatorError> {
    let level = match level {
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warn => "warn",
        LogLevel::Error => "error",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
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
