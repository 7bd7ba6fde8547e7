//! The KWOK provider's errors: reading upstream's instance-type catalog. Launch, list and delete failures are
//! core's `CloudProviderError`, as for every provider.

use std::path::PathBuf;

/// What can go wrong loading the KWOK instance types. [`KwokError::category`] is stable.
#[derive(Debug, thiserror::Error)]
pub enum KwokError {
    /// The catalog file named by a flag or INSTANCE_TYPES_FILE_PATH cannot be read.
    #[error("KWOK instance types {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// No file was named and the Go module cache does not hold upstream's catalog.
    #[error(
        "KWOK instance types: {path} does not exist; fetch upstream's module with `go mod download \
         {module}` (or name a file with --kwok-instance-types / INSTANCE_TYPES_FILE_PATH)"
    )]
    ModuleMissing { path: PathBuf, module: String },
    /// The file is not upstream's instance_types.json format; `field` is the JSON path of the problem.
    #[error("KWOK instance types {source_name}: {field}: {message}")]
    Invalid {
        source_name: String,
        field: String,
        message: String,
    },
}

impl KwokError {
    /// A short, stable name for logs and metrics.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Read { .. } => "CatalogUnreadable",
            Self::ModuleMissing { .. } => "CatalogModuleMissing",
            Self::Invalid { .. } => "CatalogInvalid",
        }
    }
}
