//! The operator's errors.

/// What stops the controller process.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// A setting that parsed but makes no sense; named by its environment variable.
    #[error("invalid setting {setting}: {message}")]
    Setting { setting: &'static str, message: String },
    #[error("cannot serve {what} on port {port}: {source}")]
    Bind {
        what: &'static str,
        port: u16,
        source: std::io::Error,
    },
    #[error("the leader lease {0} was lost")]
    LeaseLost(String),
    #[error("controller {0} stopped")]
    ControllerStopped(&'static str),
    #[error("logging: {0}")]
    Logging(String),
}

impl OperatorError {
    /// A stable name for metrics and events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Setting { .. } => "Setting",
            Self::Bind { .. } => "Bind",
            Self::LeaseLost(_) => "LeaseLost",
            Self::ControllerStopped(_) => "ControllerStopped",
            Self::Logging(_) => "Logging",
        }
    }
}
