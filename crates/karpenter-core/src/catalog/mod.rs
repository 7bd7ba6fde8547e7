//! The instance-type catalog: the catalog file format that `karpenter schedule --instance-types` reads
//! (architecture.md, "The catalog file"): `CatalogFile` and its parts, parsed with errors that name the
//! instance type and field; quantities as exact milli-units; `allocatable = capacity - overhead`. The embedded
//! AWS catalog used when no file is given is built into this format by the karpenter-aws-catalog crate.

pub mod file;

pub use file::{
    CatalogFile, CatalogInstanceType, CatalogOffering, CatalogOverhead, CatalogRequirement, Quantities,
    RequirementOperator,
};

/// Why a catalog could not be read or built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// The text is not JSON at all.
    #[error("catalog file is not valid JSON: {0}")]
    Json(String),
    /// A problem outside any instance type; `path` is the field (`wellKnownLabels[2]`, `instanceTypes`).
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    /// A problem inside `instanceTypes[index]`; `field` is the path within it (`capacity.memory`).
    #[error("instanceTypes[{index}] ({name}): {field}: {message}")]
    InstanceType {
        index: usize,
        name: String,
        field: String,
        message: String,
    },
}
