//! The one error type of the AWS provider, with a stable [`AwsError::category`] for metric labels and events,
//! and the mapping from aws-sdk errors (by their AWS error code) into it and into core's
//! [`CloudProviderError`].

use std::error::Error as StdError;

use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use karpenter_core::cloudprovider::CloudProviderError;

/// AWS error codes that mean "slow down". The SDK's retry strategy already backs off on them; an error that
/// still carries one after the retries is reported as [`AwsError::Throttled`].
pub const THROTTLING_CODES: [&str; 11] = [
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "RequestThrottled",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "EC2ThrottledException",
    "SlowDown",
];

/// EC2 error codes that mean "no capacity for this offering right now" (upstream's
/// `awserrors.IsUnfulfillableCapacity` set).
pub const UNFULFILLABLE_CAPACITY_CODES: [&str; 6] = [
    "InsufficientInstanceCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
];

/// The EC2 error code of a launch into a capacity reservation that has no instances left.
pub const RESERVATION_CAPACITY_EXCEEDED: &str = "ReservationCapacityExceeded";

/// Everything that can go wrong in the AWS provider.
#[derive(Debug, thiserror::Error)]
pub enum AwsError {
    /// AWS answered with an error code that is not throttling or not-found.
    #[error("{operation}: {code}: {message}")]
    Api {
        operation: &'static str,
        code: String,
        message: String,
    },
    /// AWS kept throttling after the SDK's retries.
    #[error("{operation}: throttled ({code}): {message}")]
    Throttled {
        operation: &'static str,
        code: String,
        message: String,
    },
    /// The resource does not exist (`*.NotFound`, `NoSuchEntity`, ...).
    #[error("{operation}: not found ({code}): {message}")]
    NotFound {
        operation: &'static str,
        code: String,
        message: String,
    },
    /// No answer: connection refused, timeout, a response that is not AWS's (an HTML error page), or a request
    /// the SDK could not build.
    #[error("{operation}: {message}")]
    Unreachable {
        operation: &'static str,
        message: String,
    },
    /// AWS answered, but the answer lacks something the provider needs or cannot be read.
    #[error("{what}: {message}")]
    InvalidResponse { what: String, message: String },
    /// An SQS message that is not an interruption event Karpenter understands; the caller logs, counts and
    /// deletes it.
    #[error("interruption message: {0}")]
    InterruptionMessage(String),
    /// A NodeClaim's provider ID that does not name an EC2 instance.
    #[error("{0:?} is not an AWS provider ID")]
    InvalidProviderId(String),
    /// Bad provider configuration (settings, embedded data).
    #[error("configuration: {0}")]
    Config(String),
    /// The Kubernetes API server refused or failed a request (reading EC2NodeClasses, writing their status).
    #[error("kubernetes: {0}")]
    Kube(String),
}

impl AwsError {
    /// A short, stable name for metrics labels and event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Api { .. } => "ApiError",
            Self::Throttled { .. } => "Throttled",
            Self::NotFound { .. } => "NotFound",
            Self::Unreachable { .. } => "Unreachable",
            Self::InvalidResponse { .. } => "InvalidResponse",
            Self::InterruptionMessage(_) => "InvalidInterruptionMessage",
            Self::InvalidProviderId(_) => "InvalidProviderID",
            Self::Config(_) => "Configuration",
            Self::Kube(_) => "KubernetesApi",
        }
    }

    /// The AWS error code, when AWS answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Api { code, .. } | Self::Throttled { code, .. } | Self::NotFound { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Maps an aws-sdk error of `operation` by its error code.
    pub fn from_sdk<E, R>(operation: &'static str, err: SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        let code = err.code().map(str::to_string);
        let message = err
            .message()
            .map(str::to_string)
            .unwrap_or_else(|| DisplayErrorContext(&err).to_string());
        // A service error carries AWS's code; transport failures, timeouts and unparseable answers (moto's
        // HTML 500 for unimplemented APIs) do not.
        match code {
            Some(code) => Self::from_code(operation, code, message),
            None => Self::Unreachable { operation, message },
        }
    }

    /// Classifies an AWS error code.
    pub fn from_code(operation: &'static str, code: String, message: String) -> Self {
        if is_throttling_code(&code) {
            Self::Throttled {
                operation,
                code,
                message,
            }
        } else if is_not_found_code(&code) {
            Self::NotFound {
                operation,
                code,
                message,
            }
        } else {
            Self::Api {
                operation,
                code,
                message,
            }
        }
    }
}

impl From<kube::Error> for AwsError {
    fn from(err: kube::Error) -> Self {
        Self::Kube(err.to_string())
    }
}

/// The node-class machinery's API errors (the EC2NodeClass finalizer, re-hashing) are the provider's own.
impl From<karpenter_nodeclass::NodeClassError> for AwsError {
    fn from(err: karpenter_nodeclass::NodeClassError) -> Self {
        match err {
            karpenter_nodeclass::NodeClassError::Kube(err) => Self::from(err),
        }
    }
}

/// Whether an AWS error code means throttling.
pub fn is_throttling_code(code: &str) -> bool {
    THROTTLING_CODES.contains(&code)
}

/// Whether an AWS error code means the resource does not exist.
pub fn is_not_found_code(code: &str) -> bool {
    code.ends_with(".NotFound")
        || code.ends_with("NotFoundException")
        || code == "NoSuchEntity"
        || code == "ParameterNotFound"
        || code == "AWS.SimpleQueueService.NonExistentQueue"
}

/// Whether an EC2 error code means the offering has no capacity now.
pub fn is_unfulfillable_capacity_code(code: &str) -> bool {
    UNFULFILLABLE_CAPACITY_CODES.contains(&code)
}

/// Whether an EC2 error code on a launch into a capacity reservation means the reservation is full (or EC2
/// lacks capacity for it): the reserved offering is then unavailable for a while.
pub fn is_reservation_capacity_code(code: &str) -> bool {
    code == RESERVATION_CAPACITY_EXCEEDED || is_unfulfillable_capacity_code(code)
}

/// The mapping for instance operations (get, list, delete): NotFound means the instance is gone, and so is a
/// provider ID that names no EC2 instance (the NodeClaim has no instance of ours). Launches map their errors
/// themselves (`launch::create_fleet`).
impl From<AwsError> for CloudProviderError {
    fn from(err: AwsError) -> Self {
        match err {
            AwsError::Throttled { .. } | AwsError::Unreachable { .. } | AwsError::Kube(_) => {
                Self::Transient(err.to_string())
            }
            AwsError::NotFound { .. } | AwsError::InvalidProviderId(_) => {
                Self::NodeClaimNotFound(err.to_string())
            }
            other => Self::Create {
                reason: other.category().to_string(),
                message: other.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_classified_and_categories_are_stable() {
        let throttled =
            AwsError::from_code("DescribeInstances", "RequestLimitExceeded".into(), "slow".into());
        assert_eq!(throttled.category(), "Throttled");
        assert_eq!(throttled.code(), Some("RequestLimitExceeded"));
        let missing = AwsError::from_code(
            "DescribeInstances",
            "InvalidInstanceID.NotFound".into(),
            "no".into(),
        );
        assert_eq!(missing.category(), "NotFound");
        let other = AwsError::from_code("CreateFleet", "InvalidParameterValue".into(), "bad".into());
        assert_eq!(other.category(), "ApiError");
        assert_eq!(other.to_string(), "CreateFleet: InvalidParameterValue: bad");
        assert!(is_unfulfillable_capacity_code("InsufficientInstanceCapacity"));
        assert!(!is_unfulfillable_capacity_code("InvalidParameterValue"));
        assert!(is_reservation_capacity_code("ReservationCapacityExceeded"));
        assert!(is_reservation_capacity_code("InsufficientInstanceCapacity"));
        assert!(!is_unfulfillable_capacity_code("ReservationCapacityExceeded"));
    }

    #[test]
    fn provider_errors_keep_their_meaning() {
        let transient: CloudProviderError =
            AwsError::from_code("CreateFleet", "Throttling".into(), "x".into()).into();
        assert_eq!(transient.category(), "Transient");
        let not_found: CloudProviderError = AwsError::from_code(
            "DescribeInstances",
            "InvalidInstanceID.NotFound".into(),
            "x".into(),
        )
        .into();
        assert!(not_found.is_not_found());
        let create: CloudProviderError = AwsError::Config("bad".into()).into();
        assert_eq!(create.category(), "CreateError");
    }
}
