//! [`Keyed`] for every kind the cache holds: Kubernetes objects by their metadata, pods by what their compact
//! form keeps of it.

use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet},
    core::v1::{
        Namespace, Node, PersistentVolume, PersistentVolumeClaim, PodTemplate, ReplicationController, Service,
    },
    policy::v1::PodDisruptionBudget,
    storage::v1::{CSINode, StorageClass, VolumeAttachment},
};
use karpenter_api::{
    capacitybuffer::CapacityBuffer, ec2nodeclass::EC2NodeClass, nodeclaim::NodeClaim,
    nodeoverlay::NodeOverlay, nodepool::NodePool,
};
use karpenter_core::snapshot::{CompactNode, CompactPod};

use crate::projected_store::Keyed;

macro_rules! keyed_by_metadata {
    ($($kind:ty),* $(,)?) => {$(
        impl Keyed for $kind {
            fn key_namespace(&self) -> Option<&str> {
                self.metadata.namespace.as_deref()
            }

            fn key_name(&self) -> &str {
                self.metadata.name.as_deref().unwrap_or_default()
            }
        }
    )*};
}

keyed_by_metadata!(
    Node,
    NodeClaim,
    NodePool,
    DaemonSet,
    PodDisruptionBudget,
    PersistentVolumeClaim,
    PersistentVolume,
    StorageClass,
    CSINode,
    Namespace,
    EC2NodeClass,
    NodeOverlay,
    CapacityBuffer,
    VolumeAttachment,
    PodTemplate,
    Deployment,
    StatefulSet,
    ReplicaSet,
    Service,
    ReplicationController,
);

impl Keyed for CompactNode {
    fn key_namespace(&self) -> Option<&str> {
        None
    }

    fn key_name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
}

impl Keyed for CompactPod {
    fn key_namespace(&self) -> Option<&str> {
        self.metadata.namespace.as_deref()
    }

    fn key_name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
}
