//! [`ClusterState`]: one projected store per kind decisions read, the synced gate, and snapshots.

use std::{
    collections::BTreeMap,
    fmt::Debug,
    future::Future,
    pin::Pin,
    sync::{Arc, LazyLock, Mutex, PoisonError},
};

use futures::future::join_all;
use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{Namespace, Node, NodeStatus, PersistentVolume, PersistentVolumeClaim, Pod},
    policy::v1::PodDisruptionBudget,
    storage::v1::{CSINode, StorageClass, VolumeAttachment},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::{
    capacitybuffer::CapacityBuffer, ec2nodeclass::EC2NodeClass, nodeclaim::NodeClaim,
    nodeoverlay::NodeOverlay, nodepool::NodePool,
};
use karpenter_core::snapshot::{CompactPod, PodSharing, Snapshot};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use crate::{Keyed, ProjectedStore, reflect};

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
    /// Read by termination (a drained node's instance waits for its volumes to detach), not by snapshots.
    pub volume_attachments: ProjectedStore<VolumeAttachment>,
    pub namespaces: ProjectedStore<Namespace>,
    pub ec2_node_classes: ProjectedStore<EC2NodeClass>,
    pub node_overlays: ProjectedStore<NodeOverlay>,
    pub capacity_buffers: ProjectedStore<CapacityBuffer>,
    /// Pod startup and bind durations, fed by the pod watch and the provisioner.
    pub pod_timing: crate::PodTiming,
    watched: Watched,
}

/// Drops what no decision reads and what is often most of an object: managedFields.
fn without_managed_fields<K: Resource>(mut obj: K) -> K {
    obj.meta_mut().managed_fields = None;
    obj
}

/// A map rebuilt from its entries. The decoder inserts one entry at a time in key order, which leaves each
/// B-tree node it splits about half empty; `collect` builds the tree from sorted entries with its nodes full.
/// On the forty-odd labels of a Karpenter node and its NodeClaim that saved 2.6 MiB of each kind's heap at
/// 5,000 nodes (`cargo xtask bench controller`: Nodes 41.7 to 39.1 MiB, NodeClaims 45.3 to 42.7).
fn repacked<V>(map: Option<BTreeMap<String, V>>) -> Option<BTreeMap<String, V>> {
    map.map(|m| m.into_iter().collect())
}

/// Repacks the maps every object has (see [`repacked`]).
fn repack_metadata(meta: &mut ObjectMeta) {
    meta.labels = repacked(meta.labels.take());
    meta.annotations = repacked(meta.annotations.take());
}

/// A watched Node as the cache keeps it: of its status only what decisions and metrics read (capacity,
/// allocatable, conditions, phase), with its maps repacked. Its image list, addresses, node info, daemon
/// endpoints and attached volumes are a kilobyte or more per node that nothing here reads; writes to Nodes are
/// patches, never the cached object sent back.
fn project_node(node: Node) -> Node {
    let mut node = without_managed_fields(node);
    repack_metadata(&mut node.metadata);
    if let Some(status) = node.status.take() {
        node.status = Some(NodeStatus {
            allocatable: repacked(status.allocatable),
            capacity: repacked(status.capacity),
            conditions: status.conditions,
            phase: status.phase,
            ..NodeStatus::default()
        });
    }
    node
}

/// A watched NodeClaim as the cache keeps it: whole, but without managedFields and with its maps repacked
/// (see [`repacked`]).
fn project_node_claim(claim: NodeClaim) -> NodeClaim {
    let mut claim = without_managed_fields(claim);
    repack_metadata(&mut claim.metadata);
    if let Some(status) = claim.status.as_mut() {
        status.capacity = repacked(status.capacity.take());
        status.allocatable = repacked(status.allocatable.take());
    }
    claim
}

/// A watched Pod as the cache keeps it: compact, with its template shared with the other replicas of its
/// workload (one copy of their labels, owners, containers' resources, tolerations, affinity and conditions
/// instead of one per pod).
fn project_pod(pod: Pod) -> CompactPod {
    static SHARING: LazyLock<Mutex<PodSharing>> = LazyLock::new(Mutex::default);
    let mut pod = CompactPod::from(pod);
    pod.share(&mut SHARING.lock().unwrap_or_else(PoisonError::into_inner));
    pod
}

type Watch = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Watches every object of kind `K` in the cluster into `store`, without managedFields.
fn watch_all<K>(client: &Client, store: &ProjectedStore<K>, kind: &'static str) -> Watch
where
    K: Resource<DynamicType = ()> + Keyed + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    Box::pin(reflect(
        Api::<K>::all(client.clone()),
        store.clone(),
        kind,
        without_managed_fields,
    ))
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
        let mut watches = vec![
            Box::pin(crate::reflect::reflect_pods(
                Api::<Pod>::all(client.clone()),
                self.pods.clone(),
                self.pod_timing.clone(),
                project_pod,
            )) as Watch,
            Box::pin(reflect(
                Api::<Node>::all(client.clone()),
                self.nodes.clone(),
                "Node",
                project_node,
            )),
            Box::pin(reflect(
                Api::<NodeClaim>::all(client.clone()),
                self.node_claims.clone(),
                "NodeClaim",
                project_node_claim,
            )),
            watch_all(&client, &self.node_pools, "NodePool"),
            watch_all(&client, &self.daemon_sets, "DaemonSet"),
            watch_all(&client, &self.pdbs, "PodDisruptionBudget"),
            watch_all(&client, &self.pvcs, "PersistentVolumeClaim"),
            watch_all(&client, &self.pvs, "PersistentVolume"),
            watch_all(&client, &self.storage_classes, "StorageClass"),
            watch_all(&client, &self.csi_nodes, "CSINode"),
            watch_all(&client, &self.volume_attachments, "VolumeAttachment"),
            watch_all(&client, &self.namespaces, "Namespace"),
        ];
        if self.watched.ec2_node_classes {
            watches.push(watch_all(&client, &self.ec2_node_classes, "EC2NodeClass"));
        }
        if self.watched.node_overlays {
            watches.push(watch_all(&client, &self.node_overlays, "NodeOverlay"));
        }
        if self.watched.capacity_buffers {
            watches.push(watch_all(&client, &self.capacity_buffers, "CapacityBuffer"));
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
            && self.volume_attachments.is_ready()
            && self.namespaces.is_ready()
            && (!self.watched.ec2_node_classes || self.ec2_node_classes.is_ready())
            && (!self.watched.node_overlays || self.node_overlays.is_ready())
            && (!self.watched.capacity_buffers || self.capacity_buffers.is_ready())
    }

    /// The cluster as it is now, for one decision. Pods, Nodes and NodeClaims are shared with the cache (pointer
    /// copies); the other kinds, far fewer, are cloned.
    pub fn snapshot(&self) -> Snapshot {
        fn owned<T: Clone + Keyed>(store: &ProjectedStore<T>) -> Vec<T> {
            store.all().iter().map(|o| T::clone(o)).collect()
        }
        Snapshot {
            pods: self.pods.all(),
            nodes: self.nodes.all(),
            node_claims: self.node_claims.all(),
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
