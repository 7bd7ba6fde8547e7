//! Well-known labels, annotations, taints, finalizers and tags, with the same keys upstream Karpenter uses, so
//! existing manifests, dashboards and tooling keep working.

/// The API group of NodePool and NodeClaim.
pub const GROUP: &str = "karpenter.sh";
/// The API group of EC2NodeClass.
pub const AWS_GROUP: &str = "karpenter.k8s.aws";

// --- karpenter.sh labels --------------------------------------------------------------------------------------
pub const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";
pub const CAPACITY_TYPE_LABEL: &str = "karpenter.sh/capacity-type";
pub const INITIALIZED_LABEL: &str = "karpenter.sh/initialized";
pub const REGISTERED_LABEL: &str = "karpenter.sh/registered";
pub const DO_NOT_SYNC_TAINTS_LABEL: &str = "karpenter.sh/do-not-sync-taints";

pub const CAPACITY_TYPE_SPOT: &str = "spot";
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";
/// The values `karpenter.sh/capacity-type` may take.
pub const CAPACITY_TYPES: [&str; 3] = [
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_SPOT,
    CAPACITY_TYPE_RESERVED,
];

// --- Kubernetes well-known labels -----------------------------------------------------------------------------
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";
pub const ARCH_LABEL: &str = "kubernetes.io/arch";
pub const OS_LABEL: &str = "kubernetes.io/os";
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
pub const WINDOWS_BUILD_LABEL: &str = "node.kubernetes.io/windows-build";

/// Labels a pod may select without the NodePool declaring them: every launched node carries them.
pub const WELL_KNOWN_LABELS: [&str; 8] = [
    NODEPOOL_LABEL,
    ZONE_LABEL,
    REGION_LABEL,
    INSTANCE_TYPE_LABEL,
    ARCH_LABEL,
    OS_LABEL,
    CAPACITY_TYPE_LABEL,
    WINDOWS_BUILD_LABEL,
];

/// Deprecated label keys and the stable keys they mean.
pub const NORMALIZED_LABELS: [(&str, &str); 6] = [
    ("failure-domain.beta.kubernetes.io/zone", ZONE_LABEL),
    ("failure-domain.beta.kubernetes.io/region", REGION_LABEL),
    ("beta.kubernetes.io/arch", ARCH_LABEL),
    ("beta.kubernetes.io/os", OS_LABEL),
    ("beta.kubernetes.io/instance-type", INSTANCE_TYPE_LABEL),
    ("topology.ebs.csi.aws.com/zone", ZONE_LABEL),
];

/// Returns the stable key for a deprecated alias, or the key itself.
pub fn normalize_label_key(key: &str) -> &str {
    NORMALIZED_LABELS
        .iter()
        .find(|(alias, _)| *alias == key)
        .map_or(key, |(_, stable)| stable)
}

// --- resources ------------------------------------------------------------------------------------------------
pub const RESOURCE_CPU: &str = "cpu";
pub const RESOURCE_MEMORY: &str = "memory";
pub const RESOURCE_EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const RESOURCE_PODS: &str = "pods";
/// The pseudo-resource NodePool limits use to cap the node count.
pub const RESOURCE_NODES: &str = "nodes";
pub const RESOURCE_NVIDIA_GPU: &str = "nvidia.com/gpu";
pub const RESOURCE_AMD_GPU: &str = "amd.com/gpu";
pub const RESOURCE_AWS_NEURON: &str = "aws.amazon.com/neuron";
pub const RESOURCE_AWS_NEURON_CORE: &str = "aws.amazon.com/neuroncore";
pub const RESOURCE_HABANA_GAUDI: &str = "habana.ai/gaudi";
pub const RESOURCE_AWS_POD_ENI: &str = "vpc.amazonaws.com/pod-eni";
pub const RESOURCE_EFA: &str = "vpc.amazonaws.com/efa";
pub const RESOURCE_PRIVATE_IPV4: &str = "vpc.amazonaws.com/PrivateIPv4Address";

// --- annotations ----------------------------------------------------------------------------------------------
pub const DO_NOT_DISRUPT_ANNOTATION: &str = "karpenter.sh/do-not-disrupt";
pub const NODEPOOL_HASH_ANNOTATION: &str = "karpenter.sh/nodepool-hash";
pub const NODEPOOL_HASH_VERSION_ANNOTATION: &str = "karpenter.sh/nodepool-hash-version";
pub const NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION: &str = "karpenter.sh/nodeclaim-termination-timestamp";
pub const NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION: &str = "karpenter.sh/nodeclaim-min-values-relaxed";
pub const REQUESTED_DRA_DRIVERS_ANNOTATION: &str = "karpenter.sh/requested-dra-drivers";
pub const PRICE_OVERLAY_APPLIED_ANNOTATION: &str = "karpenter.sh/price-overlay-applied";
pub const CAPACITY_OVERLAY_APPLIED_ANNOTATION: &str = "karpenter.sh/capacity-overlay-applied";
pub const CAPACITY_BUFFER_FAKE_POD_ANNOTATION: &str = "karpenter.sh/capacity-buffer-fake-pod";
pub const CAPACITY_BUFFER_NAME_ANNOTATION: &str = "karpenter.sh/capacity-buffer-name";
pub const CAPACITY_BUFFER_NAMESPACE_ANNOTATION: &str = "karpenter.sh/capacity-buffer-namespace";
pub const PROVIDER_COMPATIBILITY_ANNOTATION: &str = "compatibility.karpenter.sh/provider";
/// Respected Kubernetes annotation: the cost of deleting a pod, used to order disruption candidates.
pub const POD_DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";
/// A static pod's mirror in the API server: the kubelet owns it, nothing drains or counts it.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// On a NodeClaim: the Node's boot ID before Karpenter asked the provider to reboot it. A different boot ID
/// means the reboot happened, so it is not asked for again; removed when the reboot ends.
pub const REBOOT_PRE_BOOT_ID_ANNOTATION: &str = "karpenter.sh/reboot-pre-boot-id";
/// On a NodeClaim: a duration (`1m0s`) bounding the drain before a reboot, from when it was committed; pods
/// still on the node then stay on it through the reboot. Unset, the drain waits as long as pods remain.
pub const REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION: &str = "karpenter.sh/reboot-termination-grace-period";

// --- taints and finalizers ------------------------------------------------------------------------------------
/// Put on nodes being disrupted or terminated (effect NoSchedule).
pub const DISRUPTED_TAINT_KEY: &str = "karpenter.sh/disrupted";
/// Put on a Node while Karpenter reboots it (effect NoSchedule): nothing new lands there until it comes back.
pub const REBOOTING_TAINT_KEY: &str = "karpenter.sh/rebooting";
/// Expected on a Node when its kubelet registers (effect NoExecute); Karpenter removes it.
pub const UNREGISTERED_TAINT_KEY: &str = "karpenter.sh/unregistered";
/// Kubernetes' own taints that come and go while a node starts; scheduling ignores them.
pub const KNOWN_EPHEMERAL_TAINT_KEYS: [&str; 4] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
    UNREGISTERED_TAINT_KEY,
];
/// Taint keys with this prefix are ephemeral too (readiness gates of node agents).
pub const EPHEMERAL_TAINT_PREFIX: &str = "readiness.k8s.io/";
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";

// --- AWS ------------------------------------------------------------------------------------------------------
pub const AWS_INSTANCE_TENANCY_LABEL: &str = "karpenter.k8s.aws/instance-tenancy";
pub const AWS_CAPACITY_RESERVATION_TYPE_LABEL: &str = "karpenter.k8s.aws/capacity-reservation-type";
pub const AWS_CAPACITY_RESERVATION_ID_LABEL: &str = "karpenter.k8s.aws/capacity-reservation-id";
pub const AWS_CAPACITY_RESERVATION_INTERRUPTIBLE_LABEL: &str =
    "karpenter.k8s.aws/capacity-reservation-interruptible";
pub const AWS_EC2NODECLASS_LABEL: &str = "karpenter.k8s.aws/ec2nodeclass";
pub const AWS_ZONE_ID_LABEL: &str = "topology.k8s.aws/zone-id";
pub const AWS_EC2NODECLASS_HASH_ANNOTATION: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
pub const AWS_EC2NODECLASS_HASH_VERSION_ANNOTATION: &str = "karpenter.k8s.aws/ec2nodeclass-hash-version";
pub const AWS_TAGGED_ANNOTATION: &str = "karpenter.k8s.aws/tagged";
pub const AWS_CLUSTER_NAME_TAGGED_ANNOTATION: &str = "compatibility.karpenter.k8s.aws/cluster-name-tagged";
pub const AWS_INSTANCE_PROFILE_NAME_ANNOTATION: &str = "karpenter.k8s.aws/instance-profile-name";
pub const AWS_NODECLASS_FINALIZER: &str = "karpenter.k8s.aws/termination";
pub const AWS_TAG_CLUSTER_PREFIX: &str = "kubernetes.io/cluster/";
pub const AWS_TAG_EKS_CLUSTER_NAME: &str = "eks:eks-cluster-name";
pub const AWS_TAG_NODECLAIM: &str = "karpenter.sh/nodeclaim";

/// The instance-shape labels of the karpenter.k8s.aws domain (selectable by pods and NodeOverlays).
pub const AWS_INSTANCE_LABELS: [&str; 22] = [
    "karpenter.k8s.aws/instance-encryption-in-transit-supported",
    "karpenter.k8s.aws/nitro-sandbox",
    "karpenter.k8s.aws/instance-category",
    "karpenter.k8s.aws/instance-hypervisor",
    "karpenter.k8s.aws/instance-family",
    "karpenter.k8s.aws/instance-generation",
    "karpenter.k8s.aws/instance-local-nvme",
    "karpenter.k8s.aws/instance-size",
    "karpenter.k8s.aws/instance-cpu",
    "karpenter.k8s.aws/instance-cpu-manufacturer",
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
    "karpenter.k8s.aws/instance-memory",
    "karpenter.k8s.aws/instance-ebs-bandwidth",
    "karpenter.k8s.aws/instance-network-bandwidth",
    "karpenter.k8s.aws/instance-gpu-name",
    "karpenter.k8s.aws/instance-gpu-manufacturer",
    "karpenter.k8s.aws/instance-gpu-count",
    "karpenter.k8s.aws/instance-gpu-memory",
    "karpenter.k8s.aws/instance-accelerator-name",
    "karpenter.k8s.aws/instance-accelerator-manufacturer",
    "karpenter.k8s.aws/instance-accelerator-count",
    "karpenter.k8s.aws/instance-capability-flex",
];

/// The karpenter.k8s.aws keys NodePool labels and requirements and NodeClaim requirements may use: the
/// instance-shape labels plus tenancy, capacity reservations, the node class and placement groups.
pub fn aws_allowed_nodepool_keys() -> impl Iterator<Item = &'static str> {
    [
        AWS_INSTANCE_TENANCY_LABEL,
        AWS_CAPACITY_RESERVATION_TYPE_LABEL,
        AWS_CAPACITY_RESERVATION_ID_LABEL,
        AWS_CAPACITY_RESERVATION_INTERRUPTIBLE_LABEL,
        AWS_EC2NODECLASS_LABEL,
        "karpenter.k8s.aws/placement-group-id",
        "karpenter.k8s.aws/placement-group-partition",
    ]
    .into_iter()
    .chain(AWS_INSTANCE_LABELS)
}

/// The karpenter.k8s.aws keys NodeOverlay requirements may use: the node class and the instance-shape labels (no
/// tenancy, capacity-reservation or placement-group keys).
pub fn aws_allowed_overlay_keys() -> impl Iterator<Item = &'static str> {
    std::iter::once(AWS_EC2NODECLASS_LABEL).chain(AWS_INSTANCE_LABELS)
}
