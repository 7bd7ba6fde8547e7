//! [`ClusterState`]: one projected store per kind decisions read, the synced gate, and snapshots.

use std::sync::Arc;

use futures::future::join_all;
use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod},
    policy::v1::PodDisruptionBudget,
    storage::v1::{CSINode, StorageClass},
};
use karpenter_api::{
    capacitybuffer::CapacityBuffer, ec2nodeclass::EC2NodeClass, nodeclaim::NodeClaim,
    nodeoverlay::NodeOverlay, nodepool::NodePool,
};
use karpenter_core::snapshot::{CompactPod, Snapshot};
use kube::{Api, Client, Resource};

use crate::{ProjectedStore, reflect};

/// Which optional kinds to watch (their CRDs may not be installed, or their feature gate is off).
#[derive(Debug, Clone, Copy, Default)]
pub struct Watched {
    pub ec2_node_classes: bool,
    pub node_overlays: bool,
    pub capacity_buffers: bool,
}

/// The cache. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    pub pods: ProjectedStore<CompactPod>,
    pub nodes: ProjectedStore<Node>,
    pub node_claims: ProjectedStore<NodeClaim>,
    pub node_pools: ProjectedStore<NodePool>,
    pub daemon_sets: ProjectedStore<DaemonSet>,
    pub pdbs: ProjectedStore<PodDisruptionBudget>,
    pub pvcs: ProjectedStore<PersistentVolumeClaim>,
    pub pvs: ProjectedStore<PersistentVolume>,
    pub storage_classes: ProjectedStore<StorageClass>,
    pub csi_nodes: ProjectedStore<CSINode>,
    pub namespaces: ProjectedStore<Namespace>,
    pub ec2_node_classes: ProjectedStore<EC2NodeClass>,
    pub node_overlays: ProjectedStore<NodeOverlay>,
    pub capacity_buffers: ProjectedStore<CapacityBuffer>,
    watched: Watched,
}

/// Drops what no decision reads and what is often most of an object: managedFields (and a Node's image list).
fn without_managed_fields<K: Resource>(mut obj: K) -> K {
    obj.meta_mut().managed_fields = None;
    obj
}

fn project_node(node: Node) -> Node {
    let mut node = without_managed_fields(node);
    if let Some(status) = node.status.as_mut() {
        status.images = None;
    }
    node
}

impl ClusterState {
    pub fn new(watched: Watched) -> Self {
        Self {
            watched,
            ..Self::default()
        }
    }

    /// Watches every kind until the returned future is dropped (the controller runs it as a task).
    pub async fn watch(&self, client: Client) {
        let c = || client.clone();
        let mut watches = vec![
            Box::pin(reflect(
                Api::<Pod>::all(c()),
                self.pods.clone(),
                "Pod",
                CompactPod::from,
            )) as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
            Box::pin(reflect(
                Api::<Node>::all(c()),
                self.nodes.clone(),
                "Node",
                project_node,
            )),
            Box::pin(reflect(
                Api::<NodeClaim>::all(c()),
                self.node_claims.clone(),
                "NodeClaim",
                without_managed_fields,
            )),
            Box::pin(reflect(
                Api::<NodePool>::all(c()),
                self.node_pools.clone(),
                "NodePool",
                without_managed_fields,
            )),
            Box::pin(reflect(
                Api::<DaemonSet>::all(c()),
                self.daemon_sets.clone(),
                "DaemonSet",
                without_managed_fields,
            )),
            Box::pin(reflect(
                Api::<PodDisruptionBudget>::all(c()),
                self.pdbs.clone(),
                "PodDisruptionBudget",
                without_managed_fields,
            )),
            Box::pin(reflect(
                Api::<PersistentVolumeClaim>::all(c()),
                self.pvcs.clone(),
                "PersistentVolumeClaim",
                without_managed_fields,
            )),
            Box::pin(reflect(
                Api::<PersistentVolume>::all(c()),
                self.pvs.clone(),
                "PersistentVolume",
                without_managed_fields,
            )),
            Box::pin(reflect(
                Api::<StorageClass>::all(c()),
                self.storage_classes.clone(),
                "StorageClass",
                without_managed_fields,
            )),
            Box::pin(reflect(
                Api::<CSINode>::all(c()),
                self.csi_nodes.clone(),
                "CSINode",
                without_managed_fields,
            )),
            Box::pin(reflect(
                Api::<Namespace>::all(c()),
                self.namespaces.clone(),
                "Namespace",
                without_managed_fields,
            )),
        ];
        if self.watched.ec2_node_classes {
            watches.push(Box::pin(reflect(
                Api::<EC2NodeClass>::all(c()),
                self.ec2_node_classes.clone(),
                "EC2NodeClass",
                without_managed_fields,
            )));
        }
        if self.watched.node_overlays {
            watches.push(Box::pin(reflect(
                Api::<NodeOverlay>::all(c()),
                self.node_overlays.clone(),
                "NodeOverlay",
                without_managed_fields,
            )));
        }
        if self.watched.capacity_buffers {
            watches.push(Box::pin(reflect(
                Api::<CapacityBuffer>::all(c()),
                self.capacity_buffers.clone(),
                "CapacityBuffer",
                without_managed_fields,
            )));
        }
        join_all(watches).await;
    }

    /// Whether every watched kind has completed its first list: decisions wait for this.
    pub fn synced(&self) -> bool {
        self.pods.is_ready()
            && self.nodes.is_ready()
            && self.node_claims.is_ready()
            && self.node_pools.is_ready()
            && self.daemon_sets.is_ready()
            && self.pdbs.is_ready()
            && self.pvcs.is_ready()
            && self.pvs.is_ready()
            && self.storage_classes.is_ready()
            && self.csi_nodes.is_ready()
            && self.namespaces.is_ready()
            && (!self.watched.ec2_node_classes || self.ec2_node_classes.is_ready())
            && (!self.watched.node_overlays || self.node_overlays.is_ready())
            && (!self.watched.capacity_buffers || self.capacity_buffers.is_ready())
    }

    /// The cluster as it is now, for one decision. Pods are shared with the cache (pointer copies); the other
    /// kinds, far fewer, are cloned.
    pub fn snapshot(&self) -> Snapshot {
        fn owned<T: Clone>(store: &ProjectedStore<T>) -> Vec<T> {
            store.all().iter().map(|o| T::clone(o)).collect()
        }
        Snapshot {
            pods: self.pods.all(),
            nodes: owned(&self.nodes),
            node_claims: owned(&self.node_claims),
            node_pools: owned(&self.node_pools),
            daemon_sets: owned(&self.daemon_sets),
            pdbs: owned(&self.pdbs),
            pvcs: owned(&self.pvcs),
            pvs: owned(&self.pvs),
            storage_classes: owned(&self.storage_classes),
            csi_nodes: owned(&self.csi_nodes),
            namespaces: owned(&self.namespaces),
            node_overlays: owned(&self.node_overlays),
            capacity_buffers: owned(&self.capacity_buffers),
            ec2_node_classes: owned(&self.ec2_node_classes),
            ..Snapshot::default()
        }
    }

    /// A pod by `namespace/name`.
    pub fn pod(&self, key: &str) -> Option<Arc<CompactPod>> {
        self.pods.get(key)
    }
}
