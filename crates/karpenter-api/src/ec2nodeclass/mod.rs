//! EC2NodeClass (karpenter.k8s.aws/v1): the AWS settings of the nodes a NodePool launches — where they go
//! (subnets, security groups, capacity reservations, placement group), what they run (AMIs, user data, kubelet
//! settings), their identity (role or instance profile), storage, networking and instance metadata options.
//!
//! The types follow the released v1.14.1 API (kubelet is the typed struct, not the later open map). Fields the
//! API server defaults (`metadataOptions`) are optional here and read through accessors that apply the same
//! defaults, so a manifest round-trips through these types without fields appearing.
//!
//! Fields upstream declares as enum-constrained strings (`amiFamily`, `volumeType`, `httpTokens`, ...) stay
//! strings here, as in upstream's Go types: a manifest with a bad value still decodes, and [`EC2NodeClass::validate`]
//! names every bad field at once instead of the decoder stopping at the first. Typed views are available through
//! accessors ([`EC2NodeClass::ami_family`], [`EC2NodeClassSpec::metadata_options`], ...).
//!
//! Every schema and CEL rule of the CRD is applied again, in Rust, by [`EC2NodeClass::validate`]; the messages
//! are shared (see [`messages`]) so `kubectl apply` and our own checks explain a problem the same way.

mod hash;
mod validate;

use std::{collections::BTreeMap, fmt, str::FromStr};

use k8s_openapi::{
    api::core::v1::NodeSelectorRequirement,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, ConditionStatus, find_condition};

pub use hash::{canonical_json, fnv1a64};

/// The version of the EC2NodeClass hash, written next to the hash on NodeClaims
/// (`karpenter.k8s.aws/ec2nodeclass-hash-version`).
///
/// Deliberately not upstream's `"v6"`: our hash is computed differently (FNV-1a over canonical JSON, not Go's
/// hashstructure), so a hash written by upstream Karpenter can never equal ours. A distinct version makes nodes
/// migrated from upstream be re-hashed in place (the drift controller treats a version mismatch as "recompute")
/// instead of being reported as drifted and replaced.
pub const EC2NODECLASS_HASH_VERSION: &str = "v6-rs1";

/// The group of EC2NodeClass.
pub const GROUP: &str = "karpenter.k8s.aws";
/// The kind.
pub const KIND: &str = "EC2NodeClass";

/// Condition types of an EC2NodeClass. All but `Ready` are its dependents; `Ready` is True when they all are.
pub mod conditions {
    pub const AMIS_READY: &str = "AMIsReady";
    pub const SUBNETS_READY: &str = "SubnetsReady";
    pub const SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
    pub const INSTANCE_PROFILE_READY: &str = "InstanceProfileReady";
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
    /// Only part of the set when `spec.placementGroupSelector` is set.
    pub const PLACEMENT_GROUP_READY: &str = "PlacementGroupReady";
    /// Only part of the set when the ReservedCapacity feature gate is on.
    pub const CAPACITY_RESERVATIONS_READY: &str = "CapacityReservationsReady";
    pub const READY: &str = "Ready";
}

/// Reasons the node class controllers set on False conditions.
pub mod reasons {
    pub const AMI_NOT_FOUND: &str = "AMINotFound";
    pub const UNSUPPORTED_ALIAS: &str = "UnsupportedAlias";
    pub const SUBNETS_NOT_FOUND: &str = "SubnetsNotFound";
    pub const SECURITY_GROUPS_NOT_FOUND: &str = "SecurityGroupsNotFound";
    pub const PLACEMENT_GROUP_NOT_FOUND: &str = "PlacementGroupNotFound";
    pub const PLACEMENT_GROUP_RESOLUTION_FAILED: &str = "PlacementGroupResolutionFailed";
    pub const INSTANCE_PROFILE_NOT_FOUND: &str = "InstanceProfileNotFound";
    pub const CREATE_FLEET_AUTH_CHECK_FAILED: &str = "CreateFleetAuthCheckFailed";
    pub const CREATE_LAUNCH_TEMPLATE_AUTH_CHECK_FAILED: &str = "CreateLaunchTemplateAuthCheckFailed";
    pub const RUN_INSTANCES_AUTH_CHECK_FAILED: &str = "RunInstancesAuthCheckFailed";
    pub const DEPENDENCIES_NOT_READY: &str = "DependenciesNotReady";
    pub const TAG_VALIDATION_FAILED: &str = "TagValidationFailed";
    pub const INVALID_KUBELET_CONFIGURATION: &str = "InvalidKubeletConfiguration";
    pub const UNSUPPORTED_KUBELET_CONFIGURATION: &str = "UnsupportedKubeletConfiguration";
    pub const DRY_RUN_DISABLED: &str = "DryRunDisabled";
    pub const USER_DATA_SIZE_LIMIT_EXCEEDED: &str = "UserDataSizeLimitExceeded";
    pub const CLUSTER_CIDR_RESOLUTION_FAILED: &str = "ClusterCIDRResolutionFailed";
}

/// The messages of the CRD's CEL rules, shared with [`EC2NodeClass::validate`].
pub mod messages {
    pub const ROLE_XOR_INSTANCE_PROFILE: &str = "exactly one of 'role' or 'instanceProfile' must be set";
    pub const ROLE_EMPTY: &str = "'role' must not be empty";
    pub const INSTANCE_PROFILE_EMPTY: &str = "'instanceProfile' must not be empty";
    pub const AMI_FAMILY_REQUIRED: &str = "'amiFamily' is required unless an amiSelectorTerm uses an 'alias'";
    pub const AMI_FAMILY_MATCHES_ALIAS: &str =
        "with an 'alias' amiSelectorTerm, 'amiFamily' may only be the alias' family or 'Custom'";

    pub const SELECTOR_TAGS_EMPTY: &str = "selector tag keys and values must not be empty";
    pub const SUBNET_TERM_EMPTY: &str = "each subnetSelectorTerm must set 'tags' or 'id'";
    pub const SUBNET_ID_EXCLUSIVE: &str =
        "'id' is mutually exclusive with 'tags' in a subnetSelectorTerm (rejected when every term sets both)";
    pub const SECURITY_GROUP_TERM_EMPTY: &str =
        "each securityGroupSelectorTerm must set 'tags', 'id' or 'name'";
    pub const SECURITY_GROUP_ID_EXCLUSIVE: &str = "'id' is mutually exclusive with other fields of a securityGroupSelectorTerm (rejected when every term combines them)";
    pub const SECURITY_GROUP_NAME_EXCLUSIVE: &str = "'name' is mutually exclusive with other fields of a securityGroupSelectorTerm (rejected when every term combines them)";
    pub const CAPACITY_RESERVATION_TERM_EMPTY: &str =
        "each capacityReservationSelectorTerm must set 'tags', 'id' or 'instanceMatchCriteria'";
    pub const CAPACITY_RESERVATION_ID_EXCLUSIVE: &str = "'id' is mutually exclusive with other fields of a capacityReservationSelectorTerm (rejected when every term combines them, or the list is empty)";
    pub const AMI_TERM_EMPTY: &str =
        "each amiSelectorTerm must set 'tags', 'id', 'name', 'alias' or 'ssmParameter'";
    pub const AMI_ID_EXCLUSIVE: &str =
        "'id' cannot be combined with 'alias', 'tags', 'name' or 'owner' in an amiSelectorTerm";
    pub const AMI_ALIAS_EXCLUSIVE: &str =
        "'alias' cannot be combined with 'id', 'tags', 'name' or 'owner' in an amiSelectorTerm";
    pub const AMI_ALIAS_ONLY_TERM: &str =
        "an amiSelectorTerm with an 'alias' must be the only amiSelectorTerm";
    pub const ALIAS_FORMAT: &str = "'alias' must have the form 'family@version'";
    pub const ALIAS_FAMILY: &str = "alias family must be one of 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'";
    pub const ALIAS_WINDOWS_LATEST: &str = "windows alias families only support the version 'latest'";
    pub const PLACEMENT_GROUP_ONE_OF: &str = "placementGroupSelector must set exactly one of 'name' or 'id'";

    pub const TAG_KEY_EMPTY: &str = "tag keys must not be empty";
    pub const TAG_RESERVED_EKS_CLUSTER_NAME: &str =
        "tag key 'eks:eks-cluster-name' is reserved for Karpenter";
    pub const TAG_RESERVED_CLUSTER: &str =
        "tag keys starting with 'kubernetes.io/cluster' are reserved for Karpenter";
    pub const TAG_RESERVED_NODEPOOL: &str = "tag key 'karpenter.sh/nodepool' is reserved for Karpenter";
    pub const TAG_RESERVED_NODECLAIM: &str = "tag key 'karpenter.sh/nodeclaim' is reserved for Karpenter";
    pub const TAG_RESERVED_EC2NODECLASS: &str =
        "tag key 'karpenter.k8s.aws/ec2nodeclass' is reserved for Karpenter";

    pub const KUBELET_IMAGE_GC: &str =
        "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent";
    pub const KUBELET_SOFT_NEEDS_GRACE: &str =
        "every evictionSoft signal needs a matching evictionSoftGracePeriod";
    pub const KUBELET_GRACE_NEEDS_SOFT: &str =
        "every evictionSoftGracePeriod signal needs a matching evictionSoft";
    pub const KUBELET_RESERVED_KEYS: &str =
        "reserved resources may only be 'cpu', 'memory', 'ephemeral-storage' or 'pid'";
    pub const KUBELET_RESERVED_NEGATIVE: &str = "reserved resource quantities must not be negative";
    pub const KUBELET_EVICTION_KEYS: &str = "eviction signals may only be 'memory.available', 'nodefs.available', \
         'nodefs.inodesFree', 'imagefs.available', 'imagefs.inodesFree' or 'pid.available'";

    pub const BDM_ONE_ROOT_VOLUME: &str = "at most one blockDeviceMapping may set 'rootVolume'";
    pub const EBS_SNAPSHOT_OR_SIZE: &str = "ebs must set 'snapshotID' or 'volumeSize'";
    pub const EBS_INIT_RATE_NEEDS_SNAPSHOT: &str =
        "'volumeInitializationRate' requires a non-empty 'snapshotID'";

    pub const NETWORK_INTERFACES_PRIMARY: &str = "networkInterfaces must include the primary interface (networkCardIndex 0, deviceIndex 0, interfaceType 'interface')";
    pub const NETWORK_INTERFACES_UNIQUE: &str =
        "networkInterfaces must not repeat a (networkCardIndex, deviceIndex) pair";
    pub const NETWORK_INTERFACES_ONE_EFA_ONLY: &str =
        "a network card may have at most one 'efa-only' interface";

    pub const CONNECTION_TRACKING_ONE: &str = "connectionTracking must set at least one timeout";
}

/// The values `spec.amiFamily` may take.
pub const AMI_FAMILIES: [&str; 7] = [
    "AL2",
    "AL2023",
    "Bottlerocket",
    "Custom",
    "Windows2019",
    "Windows2022",
    "Windows2025",
];
/// The families an `alias` amiSelectorTerm may name.
pub const ALIAS_FAMILIES: [&str; 6] = [
    "al2",
    "al2023",
    "bottlerocket",
    "windows2019",
    "windows2022",
    "windows2025",
];
/// The version of an alias that follows the newest release.
pub const ALIAS_VERSION_LATEST: &str = "latest";
/// Keys `kubelet.systemReserved` and `kubelet.kubeReserved` may use.
pub const RESERVED_RESOURCE_KEYS: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pid"];
/// Signals the kubelet eviction maps may use.
pub const EVICTION_SIGNALS: [&str; 6] = [
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];
/// EBS volume types.
pub const VOLUME_TYPES: [&str; 7] = ["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"];
/// `instanceStorePolicy` values.
pub const INSTANCE_STORE_POLICIES: [&str; 1] = ["RAID0"];
/// `networkInterfaces[].interfaceType` values.
pub const INTERFACE_TYPES: [&str; 2] = [INTERFACE_TYPE_INTERFACE, INTERFACE_TYPE_EFA_ONLY];
pub const INTERFACE_TYPE_INTERFACE: &str = "interface";
pub const INTERFACE_TYPE_EFA_ONLY: &str = "efa-only";
/// `instanceMatchCriteria` values.
pub const INSTANCE_MATCH_CRITERIA: [&str; 2] = ["open", "targeted"];
/// `enabled` / `disabled` switches (metadata endpoint, IPv6 endpoint, nested virtualization).
pub const ENABLED_DISABLED: [&str; 2] = ["enabled", "disabled"];
/// `metadataOptions.httpTokens` values.
pub const HTTP_TOKENS: [&str; 2] = ["required", "optional"];

/// Tag keys users may not set in `spec.tags` (Karpenter sets them), and the one reserved prefix.
pub const RESERVED_TAG_KEYS: [(&str, &str); 4] = [
    (
        crate::labels::AWS_TAG_EKS_CLUSTER_NAME,
        messages::TAG_RESERVED_EKS_CLUSTER_NAME,
    ),
    (crate::labels::NODEPOOL_LABEL, messages::TAG_RESERVED_NODEPOOL),
    (crate::labels::AWS_TAG_NODECLAIM, messages::TAG_RESERVED_NODECLAIM),
    (
        crate::labels::AWS_EC2NODECLASS_LABEL,
        messages::TAG_RESERVED_EC2NODECLASS,
    ),
];
/// Tag keys with this prefix are reserved (the cluster ownership tag).
pub const RESERVED_TAG_PREFIX: &str = "kubernetes.io/cluster";

/// Schema patterns (anchored; the Rust checks in `validate` implement the same languages by hand).
pub mod patterns {
    pub const SUBNET_ID: &str = r"^subnet-[0-9a-z]+$";
    pub const SECURITY_GROUP_ID: &str = r"^sg-[0-9a-z]+$";
    pub const AMI_ID: &str = r"^ami-[0-9a-z]+$";
    pub const CAPACITY_RESERVATION_ID: &str = r"^cr-[0-9a-z]+$";
    pub const PLACEMENT_GROUP_ID: &str = r"^pg-[0-9a-z]+$";
    pub const ACCOUNT_ID: &str = r"^[0-9]{12}$";
    /// 1–59000Gi, 1–64000G, 1–58Ti or 1–64T (the EBS limit of 64 TiB-ish, in the four units upstream accepts).
    pub const VOLUME_SIZE: &str = r"^(([1-9][0-9]{0,3}|[1-4][0-9]{4}|5[0-8][0-9]{3}|59000)Gi|([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-3][0-9]{3}|64000)G|([1-9]|[1-4][0-9]|5[0-8])Ti|([1-9]|[1-5][0-9]|6[0-4])T)$";
    /// A Kubernetes resource quantity.
    pub const QUANTITY: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
    /// An eviction threshold: a percentage (0–100, at most two decimals) or a quantity.
    pub const EVICTION_THRESHOLD: &str = r"^(([0-9]{1,2}(\.[0-9]{1,2})?|100(\.0{1,2})?)%|(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?)$";
    /// A Go duration (`metav1.Duration`), non-negative.
    pub const GO_DURATION: &str = r"^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$";
}

/// EC2NodeClass is the Schema for the EC2NodeClass API.
// clippy mistakes the `type_` keys of two `printcolumn(...)` lists for one duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.k8s.aws",
    version = "v1",
    kind = "EC2NodeClass",
    plural = "ec2nodeclasses",
    singular = "ec2nodeclass",
    shortname = "ec2nc",
    shortname = "ec2ncs",
    category = "karpenter",
    status = "EC2NodeClassStatus",
    doc = "EC2NodeClass is the Schema for the EC2NodeClass API",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Role", type_ = "string", json_path = ".spec.role", priority = 1)
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.role) != has(self.instanceProfile)", "message": messages::ROLE_XOR_INSTANCE_PROFILE},
    {"rule": "has(self.amiFamily) || self.amiSelectorTerms.exists(t, has(t.alias))",
     "message": messages::AMI_FAMILY_REQUIRED},
    // A map literal, not lowerAscii(): amiFamily has no maxLength, and the API server's cost estimate of a string
    // function on an unbounded string, once per term, would come close to the per-rule cost limit.
    {"rule": "!has(self.amiFamily) || self.amiFamily == 'Custom' || self.amiSelectorTerms.all(t, !has(t.alias) || (self.amiFamily in {'AL2': 'al2', 'AL2023': 'al2023', 'Bottlerocket': 'bottlerocket', 'Windows2019': 'windows2019', 'Windows2022': 'windows2022', 'Windows2025': 'windows2025'} && {'AL2': 'al2', 'AL2023': 'al2023', 'Bottlerocket': 'bottlerocket', 'Windows2019': 'windows2019', 'Windows2022': 'windows2022', 'Windows2025': 'windows2025'}[self.amiFamily] == t.alias.split('@')[0]))",
     "message": messages::AMI_FAMILY_MATCHES_ALIAS}
]))]
pub struct EC2NodeClassSpec {
    /// Subnet selector terms, ORed; the fields of one term are ANDed.
    #[schemars(
        length(min = 1, max = 30),
        extend("x-kubernetes-validations" = [
            {"rule": "self.all(t, has(t.tags) || has(t.id))", "message": messages::SUBNET_TERM_EMPTY},
            // `all`, not `exists`, as upstream: rejected only when every term combines them.
            {"rule": "!self.all(t, has(t.id) && has(t.tags))", "message": messages::SUBNET_ID_EXCLUSIVE}
        ])
    )]
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    /// Security group selector terms, ORed; the fields of one term are ANDed.
    #[schemars(
        length(min = 1, max = 30),
        extend("x-kubernetes-validations" = [
            {"rule": "self.all(t, has(t.tags) || has(t.id) || has(t.name))",
             "message": messages::SECURITY_GROUP_TERM_EMPTY},
            {"rule": "!self.all(t, has(t.id) && (has(t.tags) || has(t.name)))",
             "message": messages::SECURITY_GROUP_ID_EXCLUSIVE},
            {"rule": "!self.all(t, has(t.name) && (has(t.tags) || has(t.id)))",
             "message": messages::SECURITY_GROUP_NAME_EXCLUSIVE}
        ])
    )]
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    /// Capacity reservation selector terms, ORed (ReservedCapacity feature gate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 30),
        extend("x-kubernetes-validations" = [
            {"rule": "self.all(t, has(t.tags) || has(t.id) || has(t.instanceMatchCriteria))",
             "message": messages::CAPACITY_RESERVATION_TERM_EMPTY},
            {"rule": "!self.all(t, has(t.id) && (has(t.tags) || has(t.ownerID) || has(t.instanceMatchCriteria)))",
             "message": messages::CAPACITY_RESERVATION_ID_EXCLUSIVE}
        ])
    )]
    pub capacity_reservation_selector_terms: Option<Vec<CapacityReservationSelectorTerm>>,
    /// The placement group instances launch into, by name or id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group_selector: Option<PlacementGroupSelector>,
    /// Whether instances get a public IP address (subnet default when unset).
    #[serde(
        default,
        rename = "associatePublicIPAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub associate_public_ip_address: Option<bool>,
    /// How many IPv4 prefixes to assign to the primary network interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ip_prefix_count: Option<i32>,
    /// AMI selector terms, ORed; the fields of one term are ANDed.
    #[schemars(
        length(min = 1, max = 30),
        extend("x-kubernetes-validations" = [
            {"rule": "self.all(t, has(t.tags) || has(t.id) || has(t.name) || has(t.alias) || has(t.ssmParameter))",
             "message": messages::AMI_TERM_EMPTY},
            // `ssmParameter` may accompany `id` or `alias`, as upstream allows.
            {"rule": "!self.exists(t, has(t.id) && (has(t.alias) || has(t.tags) || has(t.name) || has(t.owner)))",
             "message": messages::AMI_ID_EXCLUSIVE},
            {"rule": "!self.exists(t, has(t.alias) && (has(t.id) || has(t.tags) || has(t.name) || has(t.owner)))",
             "message": messages::AMI_ALIAS_EXCLUSIVE},
            {"rule": "!self.exists(t, has(t.alias)) || self.size() == 1", "message": messages::AMI_ALIAS_ONLY_TERM}
        ])
    )]
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    /// The user data format and default block devices. Optional with an alias term (the alias' family is used);
    /// with an alias it may only be that family or `Custom`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = AMI_FAMILIES))]
    pub ami_family: Option<String>,
    /// User data, merged with Karpenter's own in the family's format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// The IAM role of the nodes; Karpenter manages an instance profile for it. Exclusive with instanceProfile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": messages::ROLE_EMPTY}]))]
    pub role: Option<String>,
    /// An existing instance profile for the nodes. Exclusive with role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": messages::INSTANCE_PROFILE_EMPTY}]))]
    pub instance_profile: Option<String>,
    /// Tags applied to instances, volumes, launch templates and the instance profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(k, k != '')", "message": messages::TAG_KEY_EMPTY},
        {"rule": "self.all(k, k != 'eks:eks-cluster-name')", "message": messages::TAG_RESERVED_EKS_CLUSTER_NAME},
        {"rule": "self.all(k, !k.startsWith('kubernetes.io/cluster'))", "message": messages::TAG_RESERVED_CLUSTER},
        {"rule": "self.all(k, k != 'karpenter.sh/nodepool')", "message": messages::TAG_RESERVED_NODEPOOL},
        {"rule": "self.all(k, k != 'karpenter.sh/nodeclaim')", "message": messages::TAG_RESERVED_NODECLAIM},
        {"rule": "self.all(k, k != 'karpenter.k8s.aws/ec2nodeclass')", "message": messages::TAG_RESERVED_EC2NODECLASS}
    ]))]
    pub tags: Option<BTreeMap<String, String>>,
    /// Kubelet settings for the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    /// Block devices of the instances (the family's defaults when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 50),
        extend("x-kubernetes-validations" = [
            {"rule": "self.filter(m, has(m.rootVolume) && m.rootVolume).size() <= 1",
             "message": messages::BDM_ONE_ROOT_VOLUME}
        ])
    )]
    pub block_device_mappings: Option<Vec<BlockDeviceMapping>>,
    /// How instance-store disks are used (`RAID0`: one array for containerd and kubelet state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = INSTANCE_STORE_POLICIES))]
    pub instance_store_policy: Option<String>,
    /// Explicit network interfaces (for EFA); the primary interface must be listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 150),
        extend("x-kubernetes-validations" = [
            {"rule": "self.exists(n, n.networkCardIndex == 0 && n.deviceIndex == 0 && n.interfaceType == 'interface')",
             "message": messages::NETWORK_INTERFACES_PRIMARY},
            {"rule": "self.all(a, self.filter(b, b.networkCardIndex == a.networkCardIndex && b.deviceIndex == a.deviceIndex).size() == 1)",
             "message": messages::NETWORK_INTERFACES_UNIQUE},
            {"rule": "self.all(a, a.interfaceType != 'efa-only' || self.filter(b, b.interfaceType == 'efa-only' && b.networkCardIndex == a.networkCardIndex).size() == 1)",
             "message": messages::NETWORK_INTERFACES_ONE_EFA_ONLY}
        ])
    )]
    pub network_interfaces: Option<Vec<NetworkInterface>>,
    /// Whether CloudWatch detailed monitoring is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// Instance metadata service options of the launch template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {
        "httpEndpoint": "enabled",
        "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "required"
    }))]
    pub metadata_options: Option<MetadataOptions>,
    /// Connection tracking timeouts of the primary network interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
    /// The EC2 Fleet `Context` reserved field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// CPU options of the instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_options: Option<CpuOptions>,
}

/// Selects subnets by tags or id.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetSelectorTerm {
    /// Tags the subnet must have; `*` as a value matches any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "maxProperties" = 20,
        "x-kubernetes-validations" = [{"rule": "self.all(k, k != '' && self[k] != '')", "message": messages::SELECTOR_TAGS_EMPTY}]
    ))]
    pub tags: Option<BTreeMap<String, String>>,
    /// The subnet id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^subnet-[0-9a-z]+$"))]
    pub id: Option<String>,
}

/// Selects security groups by tags, id or name.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupSelectorTerm {
    /// Tags the security group must have; `*` as a value matches any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "maxProperties" = 20,
        "x-kubernetes-validations" = [{"rule": "self.all(k, k != '' && self[k] != '')", "message": messages::SELECTOR_TAGS_EMPTY}]
    ))]
    pub tags: Option<BTreeMap<String, String>>,
    /// The security group id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^sg-[0-9a-z]+$"))]
    pub id: Option<String>,
    /// The security group name (the group's name, not its Name tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Selects capacity reservations by tags, id, owner and match criteria.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservationSelectorTerm {
    /// Tags the reservation must have; `*` as a value matches any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "maxProperties" = 20,
        "x-kubernetes-validations" = [{"rule": "self.all(k, k != '' && self[k] != '')", "message": messages::SELECTOR_TAGS_EMPTY}]
    ))]
    pub tags: Option<BTreeMap<String, String>>,
    /// The capacity reservation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^cr-[0-9a-z]+$"))]
    pub id: Option<String>,
    /// The AWS account that owns the reservation.
    #[serde(default, rename = "ownerID", skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]{12}$"))]
    pub owner_id: Option<String>,
    /// Which launches the reservation accepts: `open` or `targeted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = INSTANCE_MATCH_CRITERIA))]
    pub instance_match_criteria: Option<String>,
}

/// Selects the placement group instances launch into: exactly one of name or id.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.name) != has(self.id)", "message": messages::PLACEMENT_GROUP_ONE_OF}
]))]
pub struct PlacementGroupSelector {
    /// The placement group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The placement group id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^pg-[0-9a-z]+$"))]
    pub id: Option<String>,
}

/// Selects AMIs: an EKS-optimized alias, or by tags, id, name, owner or SSM parameter.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AmiSelectorTerm {
    /// An EKS-optimized AMI as `family@version` (`al2023@latest`, `bottlerocket@v1.20.0`); Windows families only
    /// support `latest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 30),
        extend("x-kubernetes-validations" = [
            {"rule": "self.matches('^[a-zA-Z0-9]+@.+$')", "message": messages::ALIAS_FORMAT},
            {"rule": "self.split('@')[0] in ['al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025']",
             "message": messages::ALIAS_FAMILY},
            {"rule": "!self.matches('^windows') || self.matches('^[a-z0-9]+@latest$')",
             "message": messages::ALIAS_WINDOWS_LATEST}
        ])
    )]
    pub alias: Option<String>,
    /// Tags the AMI must have; `*` as a value matches any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "maxProperties" = 20,
        "x-kubernetes-validations" = [{"rule": "self.all(k, k != '' && self[k] != '')", "message": messages::SELECTOR_TAGS_EMPTY}]
    ))]
    pub tags: Option<BTreeMap<String, String>>,
    /// The AMI id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^ami-[0-9a-z]+$"))]
    pub id: Option<String>,
    /// The AMI name (the image's name, not its Name tag); may contain wildcards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The AMI owner: an account id, `self`, `amazon` or `aws-marketplace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The name or ARN of an SSM parameter holding the AMI id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
}

/// Kubelet settings (the typed v1.14.1 form).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.imageGCHighThresholdPercent) || !has(self.imageGCLowThresholdPercent) || self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent",
     "message": messages::KUBELET_IMAGE_GC},
    {"rule": "!has(self.evictionSoft) || self.evictionSoft.all(k, has(self.evictionSoftGracePeriod) && k in self.evictionSoftGracePeriod)",
     "message": messages::KUBELET_SOFT_NEEDS_GRACE},
    {"rule": "!has(self.evictionSoftGracePeriod) || self.evictionSoftGracePeriod.all(k, has(self.evictionSoft) && k in self.evictionSoft)",
     "message": messages::KUBELET_GRACE_NEEDS_SOFT}
]))]
pub struct KubeletConfiguration {
    /// IP addresses of the cluster DNS servers.
    #[serde(default, rename = "clusterDNS", skip_serializing_if = "Option::is_none")]
    pub cluster_dns: Option<Vec<String>>,
    /// The most pods a node may run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_pods: Option<i32>,
    /// The most pods per CPU core; the lower of this and maxPods applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub pods_per_core: Option<i32>,
    /// Resources reserved for the OS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "additionalProperties" = {"type": "string", "pattern": patterns::QUANTITY},
        "x-kubernetes-validations" = [
            {"rule": "self.all(k, k in ['cpu', 'memory', 'ephemeral-storage', 'pid'])", "message": messages::KUBELET_RESERVED_KEYS},
            {"rule": "self.all(k, !self[k].startsWith('-'))", "message": messages::KUBELET_RESERVED_NEGATIVE}
        ]
    ))]
    pub system_reserved: Option<BTreeMap<String, String>>,
    /// Resources reserved for Kubernetes components.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "additionalProperties" = {"type": "string", "pattern": patterns::QUANTITY},
        "x-kubernetes-validations" = [
            {"rule": "self.all(k, k in ['cpu', 'memory', 'ephemeral-storage', 'pid'])", "message": messages::KUBELET_RESERVED_KEYS},
            {"rule": "self.all(k, !self[k].startsWith('-'))", "message": messages::KUBELET_RESERVED_NEGATIVE}
        ]
    ))]
    pub kube_reserved: Option<BTreeMap<String, String>>,
    /// Hard eviction thresholds by signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "additionalProperties" = {"type": "string", "pattern": patterns::EVICTION_THRESHOLD},
        "x-kubernetes-validations" = [
            {"rule": "self.all(k, k in ['memory.available', 'nodefs.available', 'nodefs.inodesFree', 'imagefs.available', 'imagefs.inodesFree', 'pid.available'])",
             "message": messages::KUBELET_EVICTION_KEYS}
        ]
    ))]
    pub eviction_hard: Option<BTreeMap<String, String>>,
    /// Soft eviction thresholds by signal; each needs a grace period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "additionalProperties" = {"type": "string", "pattern": patterns::EVICTION_THRESHOLD},
        "x-kubernetes-validations" = [
            {"rule": "self.all(k, k in ['memory.available', 'nodefs.available', 'nodefs.inodesFree', 'imagefs.available', 'imagefs.inodesFree', 'pid.available'])",
             "message": messages::KUBELET_EVICTION_KEYS}
        ]
    ))]
    pub eviction_soft: Option<BTreeMap<String, String>>,
    /// How long each soft threshold must hold before pods are evicted (Go durations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "additionalProperties" = {"type": "string", "pattern": patterns::GO_DURATION},
        "x-kubernetes-validations" = [
            {"rule": "self.all(k, k in ['memory.available', 'nodefs.available', 'nodefs.inodesFree', 'imagefs.available', 'imagefs.inodesFree', 'pid.available'])",
             "message": messages::KUBELET_EVICTION_KEYS}
        ]
    ))]
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    /// The longest grace period (seconds) given to pods evicted for a soft threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    /// Disk usage percent above which image garbage collection always runs.
    #[serde(
        default,
        rename = "imageGCHighThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Disk usage percent image garbage collection frees down to.
    #[serde(
        default,
        rename = "imageGCLowThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// Whether CPU CFS quota is enforced for containers with CPU limits.
    #[serde(default, rename = "cpuCFSQuota", skip_serializing_if = "Option::is_none")]
    pub cpu_cfs_quota: Option<bool>,
}

/// Instance metadata service options. Unset fields take the API server defaults, read through the accessors.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    /// `enabled` or `disabled` (default `enabled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ENABLED_DISABLED, "default" = "enabled"))]
    pub http_endpoint: Option<String>,
    /// The IPv6 metadata endpoint: `enabled` or `disabled` (default `disabled`).
    #[serde(default, rename = "httpProtocolIPv6", skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ENABLED_DISABLED, "default" = "disabled"))]
    pub http_protocol_ipv6: Option<String>,
    /// How many network hops a metadata PUT response may travel, 1 to 64 (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64), extend("default" = 1))]
    pub http_put_response_hop_limit: Option<i64>,
    /// `required` (IMDSv2 only) or `optional` (default `required`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = HTTP_TOKENS, "default" = "required"))]
    pub http_tokens: Option<String>,
}

impl MetadataOptions {
    pub const DEFAULT_HTTP_ENDPOINT: &'static str = "enabled";
    pub const DEFAULT_HTTP_PROTOCOL_IPV6: &'static str = "disabled";
    pub const DEFAULT_HTTP_PUT_RESPONSE_HOP_LIMIT: i64 = 1;
    pub const DEFAULT_HTTP_TOKENS: &'static str = "required";

    pub fn http_endpoint(&self) -> &str {
        self.http_endpoint
            .as_deref()
            .unwrap_or(Self::DEFAULT_HTTP_ENDPOINT)
    }

    pub fn http_protocol_ipv6(&self) -> &str {
        self.http_protocol_ipv6
            .as_deref()
            .unwrap_or(Self::DEFAULT_HTTP_PROTOCOL_IPV6)
    }

    pub fn http_put_response_hop_limit(&self) -> i64 {
        self.http_put_response_hop_limit
            .unwrap_or(Self::DEFAULT_HTTP_PUT_RESPONSE_HOP_LIMIT)
    }

    pub fn http_tokens(&self) -> &str {
        self.http_tokens.as_deref().unwrap_or(Self::DEFAULT_HTTP_TOKENS)
    }

    /// These options with every unset field filled with its default, as the API server stores them.
    pub fn with_defaults(&self) -> Self {
        Self {
            http_endpoint: Some(self.http_endpoint().to_string()),
            http_protocol_ipv6: Some(self.http_protocol_ipv6().to_string()),
            http_put_response_hop_limit: Some(self.http_put_response_hop_limit()),
            http_tokens: Some(self.http_tokens().to_string()),
        }
    }
}

/// A block device of the instances.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    /// The device name, for example `/dev/xvda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// The EBS volume of the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
    /// Whether this device holds the kubelet root directory (at most one may).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<bool>,
}

/// An EBS volume.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.snapshotID) || has(self.volumeSize)", "message": messages::EBS_SNAPSHOT_OR_SIZE},
    {"rule": "!has(self.volumeInitializationRate) || (has(self.snapshotID) && self.snapshotID != '')",
     "message": messages::EBS_INIT_RATE_NEEDS_SNAPSHOT}
]))]
pub struct BlockDevice {
    /// Whether the volume is deleted when the instance terminates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    /// Whether the volume is encrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// Provisioned IOPS (gp3, io1, io2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    /// The KMS key (id, alias or ARN) that encrypts the volume.
    #[serde(default, rename = "kmsKeyID", skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    /// The snapshot the volume is created from.
    #[serde(default, rename = "snapshotID", skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
    /// Provisioned throughput in MiB/s (gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    /// The rate (MiB/s, 100 to 300) at which the snapshot is loaded into the volume; needs snapshotID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 300))]
    pub volume_initialization_rate: Option<i32>,
    /// The volume size in Gi, G, Ti or T.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^(([1-9][0-9]{0,3}|[1-4][0-9]{4}|5[0-8][0-9]{3}|59000)Gi|([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-3][0-9]{3}|64000)G|([1-9]|[1-4][0-9]|5[0-8])Ti|([1-9]|[1-5][0-9]|6[0-4])T)$"
    ))]
    pub volume_size: Option<String>,
    /// The EBS volume type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = VOLUME_TYPES))]
    pub volume_type: Option<String>,
}

impl BlockDevice {
    /// The volume size in bytes, when set and well-formed.
    pub fn volume_size_bytes(&self) -> Option<i64> {
        let size = self.volume_size.as_deref()?;
        crate::quantity::parse_milli(size).ok().map(|milli| milli / 1000)
    }
}

/// A network interface of the instances.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    /// The network card the interface is attached to.
    #[schemars(range(min = 0))]
    pub network_card_index: i32,
    /// The device index of the interface on its card.
    #[schemars(range(min = 0))]
    pub device_index: i32,
    /// `interface` (ENA, optionally with EFA) or `efa-only`.
    #[schemars(extend("enum" = INTERFACE_TYPES))]
    pub interface_type: String,
}

/// Connection tracking timeouts (seconds) of the primary network interface.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || has(self.udpTimeout)",
     "message": messages::CONNECTION_TRACKING_ONE}
]))]
pub struct ConnectionTracking {
    /// Idle timeout of established TCP connections, 60 to 432000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 432000))]
    pub tcp_established_timeout: Option<i32>,
    /// Idle timeout of UDP flows seen in both directions more than once, 60 to 180.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 180))]
    pub udp_stream_timeout: Option<i32>,
    /// Idle timeout of other UDP flows, 30 to 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 60))]
    pub udp_timeout: Option<i32>,
}

/// CPU options of the instances.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuOptions {
    /// `enabled` restricts instance types to those supporting nested virtualization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ENABLED_DISABLED))]
    pub nested_virtualization: Option<String>,
}

impl CpuOptions {
    pub fn nested_virtualization_enabled(&self) -> bool {
        self.nested_virtualization.as_deref() == Some("enabled")
    }
}

// --- status -------------------------------------------------------------------------------------------------------

/// The resolved state of an EC2NodeClass.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassStatus {
    /// The subnets the subnet selector terms resolve to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<Subnet>,
    /// The security groups the security group selector terms resolve to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<SecurityGroup>,
    /// The capacity reservations the capacity reservation selector terms resolve to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservations: Vec<CapacityReservation>,
    /// The AMIs the AMI selector terms resolve to, each with the instance types it fits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amis: Vec<Ami>,
    /// The instance profile in use (managed for `role`, or the one named by `instanceProfile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// AMIsReady, SubnetsReady, SecurityGroupsReady, InstanceProfileReady, ValidationSucceeded,
    /// PlacementGroupReady, CapacityReservationsReady and Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A resolved subnet.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Subnet {
    /// The subnet id.
    pub id: String,
    /// Its availability zone.
    pub zone: String,
    /// Its availability zone id.
    #[serde(default, rename = "zoneID", skip_serializing_if = "Option::is_none")]
    pub zone_id: Option<String>,
}

/// A resolved security group.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroup {
    /// The security group id.
    pub id: String,
    /// The security group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A resolved AMI and the requirements of the instance types it can launch.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Ami {
    /// The AMI id.
    pub id: String,
    /// Whether the AMI is deprecated (used only when no other AMI fits).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deprecated: bool,
    /// The AMI name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The instance type requirements (architecture, GPU, ...) this AMI serves.
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub requirements: Vec<NodeSelectorRequirement>,
}

/// Which launches a capacity reservation accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InstanceMatchCriteria {
    /// Any launch of a matching instance type and zone uses it.
    #[default]
    Open,
    /// Only launches that target it by id use it.
    Targeted,
}

/// The kind of capacity reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CapacityReservationType {
    /// An on-demand capacity reservation.
    #[default]
    Default,
    /// A capacity block (time-bound, ends with the instances reclaimed).
    CapacityBlock,
}

/// The state of a capacity reservation. Capacity blocks become `expiring` 40 minutes before they end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CapacityReservationState {
    #[default]
    Active,
    Expiring,
}

/// A resolved capacity reservation.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservation {
    /// The availability zone of the reservation.
    pub availability_zone: String,
    /// When the reservation ends, if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    /// The reservation id.
    #[schemars(regex(pattern = r"^cr-[0-9a-z]+$"))]
    pub id: String,
    /// Which launches the reservation accepts.
    pub instance_match_criteria: InstanceMatchCriteria,
    /// The instance type reserved.
    pub instance_type: String,
    /// The account that owns the reservation.
    #[serde(rename = "ownerID")]
    #[schemars(regex(pattern = r"^[0-9]{12}$"))]
    pub owner_id: String,
    /// `default` or `capacity-block`.
    #[serde(default)]
    #[schemars(extend("default" = "default"))]
    pub reservation_type: CapacityReservationType,
    /// Whether EC2 may interrupt instances in the reservation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interruptible: bool,
    /// `active`, or `expiring` for a capacity block close to its end.
    #[serde(default)]
    #[schemars(extend("default" = "active"))]
    pub state: CapacityReservationState,
}

// --- AMI families and aliases -------------------------------------------------------------------------------------

/// The AMI family: the user data format and the default block devices of the nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AmiFamily {
    AL2,
    AL2023,
    Bottlerocket,
    /// The user's own AMI and user data, passed through unchanged.
    Custom,
    Windows2019,
    Windows2022,
    Windows2025,
}

impl AmiFamily {
    pub const ALL: [AmiFamily; 7] = [
        Self::AL2,
        Self::AL2023,
        Self::Bottlerocket,
        Self::Custom,
        Self::Windows2019,
        Self::Windows2022,
        Self::Windows2025,
    ];

    /// The spelling of `spec.amiFamily`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AL2 => "AL2",
            Self::AL2023 => "AL2023",
            Self::Bottlerocket => "Bottlerocket",
            Self::Custom => "Custom",
            Self::Windows2019 => "Windows2019",
            Self::Windows2022 => "Windows2022",
            Self::Windows2025 => "Windows2025",
        }
    }

    /// The family's name in an alias (`al2023`); `Custom` has none.
    pub fn alias_name(self) -> Option<&'static str> {
        match self {
            Self::AL2 => Some("al2"),
            Self::AL2023 => Some("al2023"),
            Self::Bottlerocket => Some("bottlerocket"),
            Self::Custom => None,
            Self::Windows2019 => Some("windows2019"),
            Self::Windows2022 => Some("windows2022"),
            Self::Windows2025 => Some("windows2025"),
        }
    }

    /// The family an alias names (`al2023` → AL2023).
    pub fn from_alias_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.alias_name() == Some(name))
    }

    pub fn is_windows(self) -> bool {
        matches!(self, Self::Windows2019 | Self::Windows2022 | Self::Windows2025)
    }
}

impl fmt::Display for AmiFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `spec.amiFamily` held a value outside [`AMI_FAMILIES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown AMI family {0:?}")]
pub struct UnknownAmiFamily(pub String);

impl FromStr for AmiFamily {
    type Err = UnknownAmiFamily;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| UnknownAmiFamily(s.to_string()))
    }
}

/// An `alias` amiSelectorTerm: an EKS-optimized AMI family and version.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Alias {
    pub family: AmiFamily,
    /// A release version (`v20240625`) or `latest`.
    pub version: String,
}

/// Why an alias could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AliasError {
    #[error("{0}")]
    Format(&'static str),
    #[error("{0}")]
    Family(&'static str),
    #[error("{0}")]
    WindowsVersion(&'static str),
}

impl Alias {
    /// Parses `family@version` with the same rules as the CRD.
    pub fn parse(alias: &str) -> Result<Self, AliasError> {
        let (family, version) = alias
            .split_once('@')
            .ok_or(AliasError::Format(messages::ALIAS_FORMAT))?;
        if family.is_empty() || !family.bytes().all(|b| b.is_ascii_alphanumeric()) || version.is_empty() {
            return Err(AliasError::Format(messages::ALIAS_FORMAT));
        }
        let family = AmiFamily::from_alias_name(family).ok_or(AliasError::Family(messages::ALIAS_FAMILY))?;
        if family.is_windows() && version != ALIAS_VERSION_LATEST {
            return Err(AliasError::WindowsVersion(messages::ALIAS_WINDOWS_LATEST));
        }
        Ok(Self {
            family,
            version: version.to_string(),
        })
    }

    pub fn is_latest(&self) -> bool {
        self.version == ALIAS_VERSION_LATEST
    }
}

impl fmt::Display for Alias {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}@{}",
            self.family.alias_name().unwrap_or("custom"),
            self.version
        )
    }
}

// --- accessors ----------------------------------------------------------------------------------------------------

impl EC2NodeClassSpec {
    /// `metadataOptions` with every default applied (the whole object defaults when unset).
    pub fn metadata_options(&self) -> MetadataOptions {
        self.metadata_options.clone().unwrap_or_default().with_defaults()
    }

    /// The alias of the (only) alias term, if any and well-formed.
    pub fn alias(&self) -> Option<Alias> {
        self.ami_selector_terms
            .iter()
            .find_map(|t| t.alias.as_deref())
            .and_then(|a| Alias::parse(a).ok())
    }

    /// The AMI family in effect: `amiFamily` when set (with an alias it can only be the alias' family or
    /// `Custom`, and `Custom` keeps the alias' AMI but passes user data through), otherwise the alias' family.
    /// A spec with neither fails validation; `Custom` is returned for it.
    pub fn ami_family(&self) -> AmiFamily {
        if let Some(family) = self.ami_family.as_deref().and_then(|f| f.parse().ok()) {
            return family;
        }
        self.alias().map_or(AmiFamily::Custom, |a| a.family)
    }

    /// The tags, or an empty map.
    pub fn tags(&self) -> BTreeMap<String, String> {
        self.tags.clone().unwrap_or_default()
    }

    /// Whether the nodes use a role (Karpenter manages the instance profile) rather than an instance profile.
    pub fn uses_role(&self) -> bool {
        self.role.is_some()
    }

    /// The block device mappings, or none.
    pub fn block_device_mappings(&self) -> &[BlockDeviceMapping] {
        self.block_device_mappings.as_deref().unwrap_or_default()
    }

    /// The block device mapping holding the kubelet root directory, if one is marked.
    pub fn root_volume(&self) -> Option<&BlockDeviceMapping> {
        self.block_device_mappings()
            .iter()
            .find(|m| m.root_volume == Some(true))
    }

    /// Whether instance-store disks are assembled into a RAID0 array.
    pub fn instance_store_raid0(&self) -> bool {
        self.instance_store_policy.as_deref() == Some("RAID0")
    }

    /// The capacity reservation selector terms, or none.
    pub fn capacity_reservation_selector_terms(&self) -> &[CapacityReservationSelectorTerm] {
        self.capacity_reservation_selector_terms
            .as_deref()
            .unwrap_or_default()
    }
}

impl EC2NodeClass {
    /// See [`EC2NodeClassSpec::ami_family`].
    pub fn ami_family(&self) -> AmiFamily {
        self.spec.ami_family()
    }

    /// See [`EC2NodeClassSpec::alias`].
    pub fn alias(&self) -> Option<Alias> {
        self.spec.alias()
    }

    /// The conditions whose truth makes up `Ready`. PlacementGroupReady joins when a placement group is selected,
    /// CapacityReservationsReady when the ReservedCapacity feature gate is on.
    pub fn ready_dependents(&self, reserved_capacity_enabled: bool) -> Vec<&'static str> {
        let mut out = vec![
            conditions::AMIS_READY,
            conditions::SUBNETS_READY,
            conditions::SECURITY_GROUPS_READY,
            conditions::INSTANCE_PROFILE_READY,
            conditions::VALIDATION_SUCCEEDED,
        ];
        if self.spec.placement_group_selector.is_some() {
            out.push(conditions::PLACEMENT_GROUP_READY);
        }
        if reserved_capacity_enabled {
            out.push(conditions::CAPACITY_RESERVATIONS_READY);
        }
        out
    }

    /// A condition by type.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status
            .as_ref()
            .and_then(|s| find_condition(&s.conditions, type_))
    }

    /// Whether the Ready condition is True.
    pub fn is_ready(&self) -> bool {
        self.condition(conditions::READY)
            .is_some_and(|c| c.status == ConditionStatus::True)
    }

    /// The zones of the resolved subnets, deduplicated and sorted.
    pub fn zones(&self) -> Vec<String> {
        let mut zones: Vec<String> = self
            .status
            .iter()
            .flat_map(|s| s.subnets.iter().map(|s| s.zone.clone()))
            .collect();
        zones.sort();
        zones.dedup();
        zones
    }

    /// Zone name to zone id, from the resolved subnets.
    pub fn zone_ids(&self) -> BTreeMap<String, String> {
        self.status
            .iter()
            .flat_map(|s| s.subnets.iter())
            .filter_map(|s| s.zone_id.as_ref().map(|id| (s.zone.clone(), id.clone())))
            .collect()
    }

    /// The drift hash of this node class (see [`EC2NodeClass::hash_with_ca_bundle`]), without a CA bundle.
    pub fn hash(&self) -> String {
        self.hash_with_ca_bundle(None)
    }

    /// The drift hash: FNV-1a-64, as a decimal string, over the canonical JSON (sorted keys, arrays as sets,
    /// nulls and empty collections dropped) of the spec minus the fields that drift on their own or must not
    /// drift nodes (the selector terms, `placementGroupSelector`, `ipPrefixCount` and `amiFamily`), plus the
    /// resolved AMI family (so `amiFamily: AL2023` and an `al2023@…` alias without it hash alike) and the
    /// cluster CA bundle the user data embeds. `metadataOptions` is hashed with its defaults applied, so a
    /// defaulted and an undefaulted copy of the same object hash alike. Versioned by
    /// [`EC2NODECLASS_HASH_VERSION`].
    pub fn hash_with_ca_bundle(&self, ca_bundle: Option<&str>) -> String {
        hash::hash_spec(&self.spec, ca_bundle)
    }
}

/// The EC2NodeClass CRD.
///
/// The derive and the schema attributes express every field and rule; two things are adjusted afterwards, to
/// match the CRD upstream ships:
/// - `nullable: true`, which the derive puts on every `Option` field, is removed. Upstream's fields are not
///   nullable, so the API server drops an explicit `null` (it means "unset") instead of storing it, and CEL rules
///   never see a null (`has(self.role)` stays false for `role: null`).
/// - the root schema declares `apiVersion`, `kind` and `metadata` like every controller-gen CRD.
pub fn crd() -> CustomResourceDefinition {
    let derived = EC2NodeClass::crd();
    post_process(&derived).unwrap_or(derived)
}

fn post_process(crd: &CustomResourceDefinition) -> Option<CustomResourceDefinition> {
    let mut value = serde_json::to_value(crd).ok()?;
    let root = value.pointer_mut("/spec/versions/0/schema/openAPIV3Schema")?;
    strip_nullable(root);
    let properties = root.get_mut("properties")?.as_object_mut()?;
    properties.insert("apiVersion".into(), serde_json::json!({"type": "string"}));
    properties.insert("kind".into(), serde_json::json!({"type": "string"}));
    properties.insert("metadata".into(), serde_json::json!({"type": "object"}));
    serde_json::from_value(value).ok()
}

fn strip_nullable(node: &mut serde_json::Value) {
    match node {
        serde_json::Value::Object(map) => {
            map.remove("nullable");
            for (key, child) in map.iter_mut() {
                // `default` and `enum` hold data, not schemas.
                if key != "default" && key != "enum" && key != "x-kubernetes-validations" {
                    strip_nullable(child);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_nullable),
        _ => {}
    }
}
