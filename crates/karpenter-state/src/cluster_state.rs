//! [`ClusterState`]: one projected store per kind decisions read, the synced gate, and snapshots.

use std::{
    collections::HashSet,
    fmt::Debug,
    future::Future,
    pin::Pin,
    sync::{Arc, LazyLock, Mutex, PoisonError, RwLock},
};

use futures::future::join_all;
use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet},
    core::v1::{
        Container, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate,
        PodTemplateSpec, ReplicationController, ReplicationControllerSpec, Service, ServiceSpec,
    },
    policy::v1::PodDisruptionBudget,
    storage::v1::{CSINode, StorageClass, VolumeAttachment},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::common::{NodeSelectorRequirementWithMinValues, ResourceList};
use karpenter_api::{
    capacitybuffer::CapacityBuffer, ec2nodeclass::EC2NodeClass, nodeclaim::NodeClaim,
    nodeoverlay::NodeOverlay, nodepool::NodePool,
};
use karpenter_core::sharing::{ShareCache, repacked};
use karpenter_core::snapshot::{CompactNode, CompactPod, NodeSharing, PodSharing, Snapshot};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use crate::{Keyed, ProjectedStore, reflect};

/// Which optional kinds to watch (their CRDs may not be installed, or their feature gate is off).
#[derive(Debug, Clone, Copy, Default)]
pub struct Watched {
    pub ec2_node_classes: bool,
    pub node_overlays: bool,
    /// CapacityBuffers, and the PodTemplates, Deployments, StatefulSets and ReplicaSets they take their shape
    /// from.
    pub capacity_buffers: bool,
    /// The selectors of Services, ReplicaSets, StatefulSets and ReplicationControllers, from which each pod's
    /// default topology spread selector is deduced (with `SCHEDULER_CONFIG`'s default constraints).
    pub workload_selectors: bool,
}

/// The cache. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    pub pods: ProjectedStore<CompactPod>,
    pub nodes: ProjectedStore<CompactNode>,
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
    /// What CapacityBuffers take their pod shape and size from: watched only with the CapacityBuffer gate on,
    /// and kept without status and without what scheduling never reads of their pod templates
    /// ([`project_workload_template`]).
    pub pod_templates: ProjectedStore<PodTemplate>,
    pub deployments: ProjectedStore<Deployment>,
    /// With CapacityBuffers, with what their pod templates keep; for default topology spread alone, with their
    /// selectors only.
    pub stateful_sets: ProjectedStore<StatefulSet>,
    pub replica_sets: ProjectedStore<ReplicaSet>,
    /// Only their selectors, and only watched for default topology spread constraints.
    pub services: ProjectedStore<Service>,
    pub replication_controllers: ProjectedStore<ReplicationController>,
    /// Where the provisioner's last round put CapacityBuffer placeholder pods, for disruption.
    pub capacity_buffer_nodes: BufferNodes,
    /// Pod startup and bind durations, fed by the pod watch and the provisioner.
    pub pod_timing: crate::PodTiming,
    watched: Watched,
}

/// The nodes and in-flight NodeClaims, by name, that the provisioner's last round placed CapacityBuffer
/// placeholder pods on. Placeholders are no pods of the cluster, so a node kept for a buffer looks empty; with
/// this, snapshots tell disruption which ones to leave be (upstream skips nodes hosting buffer pods). Cloning
/// shares it.
#[derive(Debug, Clone, Default)]
pub struct BufferNodes(Arc<RwLock<HashSet<String>>>);

impl BufferNodes {
    /// Replaces the set with the last round's.
    pub fn set(&self, names: HashSet<String>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = names;
    }

    /// The set as it is now.
    pub fn get(&self) -> HashSet<String> {
        self.0.read().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// Drops what no decision reads and what is often most of an object: managedFields.
fn without_managed_fields<K: Resource>(mut obj: K) -> K {
    obj.meta_mut().managed_fields = None;
    obj
}

/// Repacks the maps every object has (see [`repacked`]).
fn repack_metadata(meta: &mut ObjectMeta) {
    meta.labels = repacked(meta.labels.take());
    meta.annotations = repacked(meta.annotations.take());
}

/// A watched Node as the cache keeps it: compact ([`CompactNode`]: of its status only what decisions and
/// metrics read), with the labels it shares with other nodes (its instance type's, zone's, NodePool's) held
/// once for all of them. Writes to Nodes are patches, never the cached object sent back.
fn project_node(node: Node) -> CompactNode {
    static SHARING: LazyLock<Mutex<NodeSharing>> = LazyLock::new(Mutex::default);
    let mut node = CompactNode::from(node);
    node.share(&mut SHARING.lock().unwrap_or_else(PoisonError::into_inner));
    node
}

/// A watched NodeClaim as the cache keeps it: whole, but without managedFields, with its maps repacked (see
/// [`repacked`]), and its requirements, capacity and allocatable shared with the claims that have the same
/// (those launched alike, those of one instance type).
fn project_node_claim(claim: NodeClaim) -> NodeClaim {
    static RESOURCES: LazyLock<Mutex<ShareCache<ResourceList>>> = LazyLock::new(Mutex::default);
    static REQUIREMENTS: LazyLock<Mutex<ShareCache<Vec<NodeSelectorRequirementWithMinValues>>>> =
        LazyLock::new(Mutex::default);
    let mut claim = without_managed_fields(claim);
    repack_metadata(&mut claim.metadata);
    claim.spec.requirements = REQUIREMENTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .share(Arc::clone(&claim.spec.requirements));
    if let Some(status) = claim.status.as_mut() {
        let mut shared = RESOURCES.lock().unwrap_or_else(PoisonError::into_inner);
        for list in [&mut status.capacity, &mut status.allocatable]
            .into_iter()
            .flatten()
        {
            let packed = Arc::new(list.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
            *list = shared.share(packed);
        }
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

/// `kubectl apply`'s copy of the whole object: often the largest annotation of a workload, and read by nothing
/// here.
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Metadata without managedFields and `kubectl apply`'s copy of the object.
fn strip_metadata(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
    repack_metadata(meta);
}

/// A workload's pod template as a CapacityBuffer's placeholder pods read it: per container only its name,
/// resources, ports and restart policy (what `CompactPodSpec` keeps); no volumes (a placeholder claims no
/// storage, and other volumes place nothing), env, commands, probes or mounts, which are most of a template.
fn project_workload_template(template: &mut PodTemplateSpec) {
    fn strip(c: &mut Container) {
        *c = Container {
            name: std::mem::take(&mut c.name),
            resources: c.resources.take(),
            ports: c.ports.take(),
            restart_policy: c.restart_policy.take(),
            ..Container::default()
        };
    }
    if let Some(meta) = template.metadata.as_mut() {
        strip_metadata(meta);
    }
    if let Some(spec) = template.spec.as_mut() {
        spec.containers.iter_mut().for_each(strip);
        spec.init_containers.iter_mut().flatten().for_each(strip);
        spec.ephemeral_containers = None;
        spec.volumes = None;
    }
}

fn project_pod_template(mut t: PodTemplate) -> PodTemplate {
    strip_metadata(&mut t.metadata);
    if let Some(template) = t.template.as_mut() {
        project_workload_template(template);
    }
    t
}

fn project_deployment(mut d: Deployment) -> Deployment {
    strip_metadata(&mut d.metadata);
    d.status = None;
    if let Some(spec) = d.spec.as_mut() {
        project_workload_template(&mut spec.template);
    }
    d
}

fn project_stateful_set(mut s: StatefulSet) -> StatefulSet {
    strip_metadata(&mut s.metadata);
    s.status = None;
    if let Some(spec) = s.spec.as_mut() {
        project_workload_template(&mut spec.template);
        // The claims belong to the real replicas; a placeholder claims no storage.
        spec.volume_claim_templates = None;
    }
    s
}

fn project_replica_set(mut r: ReplicaSet) -> ReplicaSet {
    strip_metadata(&mut r.metadata);
    r.status = None;
    if let Some(template) = r.spec.as_mut().and_then(|s| s.template.as_mut()) {
        project_workload_template(template);
    }
    r
}

/// A StatefulSet as deducing a pod's default spread selector reads it: its selector.
fn project_stateful_set_selector(s: StatefulSet) -> StatefulSet {
    StatefulSet {
        metadata: selector_metadata(s.metadata),
        spec: s.spec.map(|spec| k8s_openapi::api::apps::v1::StatefulSetSpec {
            selector: spec.selector,
            ..Default::default()
        }),
        status: None,
    }
}

fn project_replica_set_selector(r: ReplicaSet) -> ReplicaSet {
    ReplicaSet {
        metadata: selector_metadata(r.metadata),
        spec: r.spec.map(|spec| k8s_openapi::api::apps::v1::ReplicaSetSpec {
            selector: spec.selector,
            ..Default::default()
        }),
        status: None,
    }
}

fn project_service(s: Service) -> Service {
    Service {
        metadata: selector_metadata(s.metadata),
        spec: s.spec.map(|spec| ServiceSpec {
            selector: spec.selector,
            ..Default::default()
        }),
        status: None,
    }
}

fn project_replication_controller(r: ReplicationController) -> ReplicationController {
    ReplicationController {
        metadata: selector_metadata(r.metadata),
        spec: r.spec.map(|spec| ReplicationControllerSpec {
            selector: spec.selector,
            ..Default::default()
        }),
        status: None,
    }
}

/// Of an object read only for its selector, its name and namespace.
fn selector_metadata(meta: ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        ..ObjectMeta::default()
    }
}

type Watch = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What the cache keeps of a watched object.
type Projection<K> = fn(K) -> K;

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
            watches.push(Box::pin(reflect(
                Api::<PodTemplate>::all(client.clone()),
                self.pod_templates.clone(),
                "PodTemplate",
                project_pod_template,
            )));
            watches.push(Box::pin(reflect(
                Api::<Deployment>::all(client.clone()),
                self.deployments.clone(),
                "Deployment",
                project_deployment,
            )));
        }
        if self.watched.capacity_buffers || self.watched.workload_selectors {
            // A CapacityBuffer reads their templates; default topology spread only their selectors.
            let (stateful_set, replica_set): (Projection<StatefulSet>, Projection<ReplicaSet>) =
                if self.watched.capacity_buffers {
                    (project_stateful_set, project_replica_set)
                } else {
                    (project_stateful_set_selector, project_replica_set_selector)
                };
            watches.push(Box::pin(reflect(
                Api::<StatefulSet>::all(client.clone()),
                self.stateful_sets.clone(),
                "StatefulSet",
                stateful_set,
            )));
            watches.push(Box::pin(reflect(
                Api::<ReplicaSet>::all(client.clone()),
                self.replica_sets.clone(),
                "ReplicaSet",
                replica_set,
            )));
        }
        if self.watched.workload_selectors {
            watches.push(Box::pin(reflect(
                Api::<Service>::all(client.clone()),
                self.services.clone(),
                "Service",
                project_service,
            )));
            watches.push(Box::pin(reflect(
                Api::<ReplicationController>::all(client.clone()),
                self.replication_controllers.clone(),
                "ReplicationController",
                project_replication_controller,
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
            && self.volume_attachments.is_ready()
            && self.namespaces.is_ready()
            && (!self.watched.ec2_node_classes || self.ec2_node_classes.is_ready())
            && (!self.watched.node_overlays || self.node_overlays.is_ready())
            && (!self.watched.capacity_buffers
                || (self.capacity_buffers.is_ready()
                    && self.pod_templates.is_ready()
                    && self.deployments.is_ready()))
            && (!(self.watched.capacity_buffers || self.watched.workload_selectors)
                || (self.stateful_sets.is_ready() && self.replica_sets.is_ready()))
            && (!self.watched.workload_selectors
                || (self.services.is_ready() && self.replication_controllers.is_ready()))
    }

    /// The cluster as it is now, for one decision. Pods, Nodes and NodeClaims are shared with the cache (pointer
    /// copies); the other kinds, far fewer, are cloned.
    /// The cache's NodePools and NodeOverlays alone: what judging overlays (conflicts, launch prices, their
    /// status) needs. No overlays, no NodePools either: nothing to judge.
    pub fn node_overlay_snapshot(&self) -> Snapshot {
        let overlays = self.node_overlays.all();
        if overlays.is_empty() {
            return Snapshot::default();
        }
        Snapshot {
            node_pools: self.node_pools.all().iter().map(|p| (**p).clone()).collect(),
            node_overlays: overlays.iter().map(|o| (**o).clone()).collect(),
            ..Snapshot::default()
        }
    }

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
            // Empty unless the CapacityBuffer gate is on (StatefulSets and ReplicaSets also with default topology
            // spread constraints; nothing else reads them).
            pod_templates: owned(&self.pod_templates),
            deployments: owned(&self.deployments),
            stateful_sets: owned(&self.stateful_sets),
            replica_sets: owned(&self.replica_sets),
            // Empty unless default topology spread constraints are configured.
            services: owned(&self.services),
            replication_controllers: owned(&self.replication_controllers),
            capacity_buffer_nodes: self.capacity_buffer_nodes.get(),
        }
    }

    /// A pod by `namespace/name`.
    pub fn pod(&self, key: &str) -> Option<Arc<CompactPod>> {
        self.pods.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nodes_and_claims_of_one_instance_type_share_what_they_have_in_common() {
        let node = |name: &str| -> Node {
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {
                    "kubernetes.io/hostname": name, "node.kubernetes.io/instance-type": "m5.large"}},
                "status": {"capacity": {"cpu": "2", "memory": "8Gi"}, "allocatable": {"cpu": "1930m"}}
            }))
            .unwrap()
        };
        let (a, b) = (project_node(node("a")), project_node(node("b")));
        let capacity = |n: &CompactNode| n.status.as_ref().and_then(|s| s.capacity.clone());
        assert!(Arc::ptr_eq(&capacity(&a).unwrap(), &capacity(&b).unwrap()));
        assert_eq!(
            b.labels().get("kubernetes.io/hostname").map(String::as_str),
            Some("b")
        );
        assert_eq!(
            a.labels()
                .get("node.kubernetes.io/instance-type")
                .map(String::as_str),
            Some("m5.large")
        );

        let claim = |name: &str| -> NodeClaim {
            serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": name},
                "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                         "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                           "values": ["m5.large"]}]},
                "status": {"capacity": {"cpu": "2", "memory": "8Gi"}, "allocatable": {"cpu": "1930m"}}
            }))
            .unwrap()
        };
        let (c, d) = (project_node_claim(claim("c")), project_node_claim(claim("d")));
        let allocatable = |c: &NodeClaim| c.status.as_ref().and_then(|s| s.allocatable.clone());
        assert!(Arc::ptr_eq(&allocatable(&c).unwrap(), &allocatable(&d).unwrap()));
        assert!(Arc::ptr_eq(&c.spec.requirements, &d.spec.requirements));
        assert_eq!(c.spec.requirements[0].values, ["m5.large"]);
        assert_eq!(
            allocatable(&c).unwrap().get("cpu"),
            Some(&k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                "1930m".into()
            ))
        );
    }

    #[test]
    fn a_workload_is_kept_with_what_buffers_read_of_it() {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "api", "namespace": "ml", "generation": 3,
                "annotations": {(LAST_APPLIED_ANNOTATION): "{...}", "team": "ml"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
            "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "api"}},
                "template": {"metadata": {"labels": {"app": "api"}},
                    "spec": {
                        "containers": [{"name": "c", "image": "api:1", "env": [{"name": "A", "value": "b"}],
                            "command": ["serve"], "resources": {"requests": {"cpu": "500m"}},
                            "ports": [{"containerPort": 80, "hostPort": 8080}]}],
                        "initContainers": [{"name": "i", "image": "init", "restartPolicy": "Always",
                            "resources": {"requests": {"cpu": "100m"}}}],
                        "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}],
                        "nodeSelector": {"disk": "ssd"}}}},
            "status": {"replicas": 4, "readyReplicas": 4}
        }))
        .unwrap();
        let kept = project_deployment(d);
        assert_eq!(kept.status, None);
        assert_eq!(kept.metadata.managed_fields, None);
        assert_eq!(kept.metadata.generation, Some(3));
        assert_eq!(
            kept.metadata.annotations,
            Some([("team".to_string(), "ml".to_string())].into())
        );
        let spec = kept.spec.unwrap();
        assert_eq!(spec.replicas, Some(4));
        let pod = spec.template.spec.unwrap();
        let c = &pod.containers[0];
        assert_eq!(
            (c.name.as_str(), c.env.as_ref(), c.command.as_ref()),
            ("c", None, None)
        );
        assert_eq!(c.image, None);
        assert!(c.resources.as_ref().and_then(|r| r.requests.as_ref()).is_some());
        assert_eq!(c.ports.as_ref().map(Vec::len), Some(1));
        let init = &pod.init_containers.unwrap()[0];
        assert_eq!(init.restart_policy.as_deref(), Some("Always"));
        assert_eq!(pod.volumes, None);
        assert_eq!(
            pod.node_selector,
            Some([("disk".to_string(), "ssd".to_string())].into())
        );
        assert_eq!(
            spec.template.metadata.and_then(|m| m.labels),
            Some([("app".to_string(), "api".to_string())].into())
        );
    }
}
