//! Label sets, one struct per distinct set of label names (field names are the label names).

use prometheus_client::encoding::EncodeLabelSet;

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildInfoLabels {
    pub version: String,
    pub goversion: String,
    pub goarch: String,
    pub commit: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeClaimCreatedLabels {
    /// `provisioning` or `disruption` (a replacement).
    pub reason: String,
    pub nodepool: String,
    pub min_values_relaxed: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeClaimTerminatedLabels {
    pub nodepool: String,
    pub capacity_type: String,
    pub zone: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeClaimDisruptedLabels {
    /// `empty`, `underutilized`, `drifted`, `expired`, `interrupted`, `unhealthy`.
    pub reason: String,
    pub nodepool: String,
    pub capacity_type: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    pub nodepool: String,
    pub zone: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodePoolLabels {
    pub nodepool: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabels {
    /// The HTTP status code of the eviction request (`200`, `429`, ...).
    pub code: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

/// A reboot's terminal result.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloudProviderLabels {
    pub controller: String,
    pub method: String,
    pub provider: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloudProviderErrorLabels {
    pub controller: String,
    pub method: String,
    pub provider: String,
    /// `InsufficientCapacityError`, `NodeClaimNotFoundError`, `NodeClassNotReadyError` or empty.
    pub error: String,
}

/// One AWS API call: its service (`EC2`, `SSM`, ...) and operation (`CreateFleet`).
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AwsSdkOperationLabels {
    pub service: String,
    pub operation: String,
}

/// One AWS API call and how it ended: `OK`, AWS's error code, the HTTP status, or `Timeout`,
/// `ConnectionError`, `ClientError` when no answer came.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AwsSdkRequestLabels {
    pub service: String,
    pub operation: String,
    pub code: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `delete` or `replace`.
    pub decision: String,
    pub reason: String,
    /// `single`, `multi` or empty for non-consolidation methods.
    pub consolidation_type: String,
}

/// `single` or `multi`.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConsolidationTypeLabels {
    pub consolidation_type: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvaluationLabels {
    pub reason: String,
    pub consolidation_type: String,
}

/// A cloud provider batcher: `create_fleet` for the AWS CreateFleet batcher.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BatcherLabels {
    pub batcher: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub controller: String,
    /// `success`, `error`, `requeue`.
    pub result: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MessageTypeLabels {
    pub message_type: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusCategoryLabels {
    /// The DescribeInstanceStatus category that failed: `InstanceStatus`, `SystemStatus` or `EventStatus`.
    pub category: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UnhealthyLabels {
    pub condition: String,
    pub nodepool: String,
    pub capacity_type: String,
    pub image_id: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodePoolResourceLabels {
    pub nodepool: String,
    pub resource_type: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceTypeLabels {
    pub resource_type: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaderLabels {
    pub name: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodePoolReasonLabels {
    pub nodepool: String,
    pub reason: String,
}

/// An instance type offering: the AWS provider's offering gauges.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InstanceTypeOfferingLabels {
    pub instance_type: String,
    /// `spot`, `on-demand` or `reserved`.
    pub capacity_type: String,
    pub zone: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InstanceTypeLabels {
    pub instance_type: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LaunchFailureLabels {
    pub zone: String,
    pub zone_id: String,
    pub capacity_type: String,
    /// The EC2 error code (`InsufficientInstanceCapacity`, ...).
    pub reason: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeClassLabels {
    pub nodeclass: String,
}

/// No labels, for a histogram exported without any.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NoLabels {}
