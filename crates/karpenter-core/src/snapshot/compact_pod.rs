//! The few fields of a Pod that scheduling and disruption decisions read, kept instead of the whole object.
//!
//! A k8s-openapi `Pod` is 2 KiB of struct before any string, each `Container` another 2 KiB and each `Volume`
//! 3 KiB; a cluster of 150,000 pods would need gigabytes for fields nothing reads (probes, env, images, mounts,
//! container statuses, last-applied annotations). [`CompactPod`] has the same shape and field names as the
//! Kubernetes object for what it keeps, so it decodes straight from `kubectl get -o json` text (serde skips
//! the rest) and the conversion code reads it exactly as it would the full object. The controller's state
//! cache converts watched Pods with `From<Pod>`.
//!
//! What the replicas of a workload have in common is held behind `Arc`s: the metadata group (namespace, labels,
//! annotations, owners), the template (the spec but the node name) and the conditions. [`CompactPod::share`]
//! swaps them for equal ones other pods already hold, so a cache of 150,000 pods stores each workload's once.
//! Decoding goes through flat text forms (`PodMetaText`, `PodSpecText`) so errors keep their field paths.
//!
//! Kept: name, namespace, labels, owner references, creation and deletion times, the annotations a
//! decision reads ([`is_relevant_annotation`]); node name, node selector, affinity, tolerations, topology
//! spread, priority, host network, each container's name, resources, ports and restart policy, pod-level resources and
//! overhead, volumes backed by a PersistentVolumeClaim (directly or ephemeral); phase, start time, nominated
//! node and each condition's type, status and reason. Not kept: the uid, which no decision reads (72 bytes a
//! pod, 10 MiB of a 150,000-pod cache). The node name is shared with the node's other pods
//! ([`CompactPod::share`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::{
    api::core::v1::{
        Affinity, Container, ContainerPort, EphemeralVolumeSource, PersistentVolumeClaimVolumeSource, Pod,
        PodCondition, PodSpec, PodStatus, ResourceRequirements, Toleration, TopologySpreadConstraint, Volume,
    },
    apimachinery::pkg::{
        api::resource::Quantity,
        apis::meta::v1::{ObjectMeta, OwnerReference, Time},
    },
};
use karpenter_api::labels;

use crate::sharing::ShareCache;
use serde::{Deserialize, Deserializer};

/// A Pod reduced to what decisions read; see the module documentation.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct CompactPod {
    pub metadata: CompactPodMeta,
    pub spec: Option<CompactPodSpec>,
    pub status: Option<CompactPodStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "PodMetaText")]
pub struct CompactPodMeta {
    pub name: Option<String>,
    /// The pod's UID, which tells a pod from a later one of the same name (a StatefulSet's replacement).
    pub uid: PodUid,
    pub creation_timestamp: Option<Time>,
    pub deletion_timestamp: Option<Time>,
    /// Namespace, labels, annotations and owners, which the replicas of a workload share (see
    /// [`CompactPod::share`]); read through `Deref`.
    pub group: Arc<CompactPodGroupMeta>,
}

impl std::ops::Deref for CompactPodMeta {
    type Target = CompactPodGroupMeta;

    fn deref(&self) -> &CompactPodGroupMeta {
        &self.group
    }
}

impl std::ops::DerefMut for CompactPodMeta {
    /// Copies a shared group first.
    fn deref_mut(&mut self) -> &mut CompactPodGroupMeta {
        Arc::make_mut(&mut self.group)
    }
}

/// A pod's UID in 16 bytes: the UUID's own bytes, or a hash of a UID that is not a UUID; all zero when the pod has
/// none. Only compared (repeat detection), never sent back, so the string (36 bytes and an allocation per cached
/// pod) is not kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PodUid([u8; 16]);

impl PodUid {
    pub fn new(uid: Option<&str>) -> Self {
        let Some(uid) = uid.filter(|u| !u.is_empty()) else {
            return Self::default();
        };
        let hex: Vec<u8> = uid.bytes().filter(|b| *b != b'-').collect();
        let mut out = [0u8; 16];
        let parsed = hex.len() == 32
            && hex.chunks(2).zip(out.iter_mut()).all(|(pair, byte)| {
                let text = std::str::from_utf8(pair).unwrap_or("");
                u8::from_str_radix(text, 16).map(|b| *byte = b).is_ok()
            });
        if parsed {
            return Self(out);
        }
        // Not a UUID (a hand-written snapshot): two FNV-1a hashes, which tell different strings apart as well.
        let fnv = |seed: u64| {
            uid.bytes()
                .fold(seed, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
        };
        out[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_le_bytes());
        out[8..].copy_from_slice(&fnv(0x8422_2325_cbf2_9ce4).to_le_bytes());
        Self(out)
    }

    /// Whether the pod had no UID.
    pub fn is_unknown(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl std::fmt::Display for PodUid {
    /// Hex digits (a UUID's, without dashes).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// The metadata the replicas of a workload have in common.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompactPodGroupMeta {
    pub namespace: Option<String>,
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
    pub owner_references: Option<Vec<OwnerReference>>,
}

/// Pod metadata as written, which [`CompactPodMeta`] splits. Decoding goes through this flat form rather than
/// `#[serde(flatten)]` because flatten buffers the input and a decoding error would lose its field path.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct PodMetaText {
    name: Option<String>,
    uid: Option<String>,
    namespace: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    #[serde(deserialize_with = "relevant_annotations")]
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
}

impl From<PodMetaText> for CompactPodMeta {
    fn from(m: PodMetaText) -> Self {
        Self {
            uid: PodUid::new(m.uid.as_deref()),
            name: m.name,
            creation_timestamp: m.creation_timestamp,
            deletion_timestamp: m.deletion_timestamp,
            group: Arc::new(CompactPodGroupMeta {
                namespace: m.namespace,
                labels: m.labels,
                annotations: m.annotations,
                owner_references: m.owner_references,
            }),
        }
    }
}

/// A pod's spec: its node, and everything else as [`CompactPodTemplate`], which the replicas of a workload
/// share (see [`CompactPod::share`]). Fields of the template read through `Deref`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "PodSpecText")]
pub struct CompactPodSpec {
    /// Shared with the node's other pods (see [`CompactPod::share`]).
    pub node_name: Option<Arc<str>>,
    pub template: Arc<CompactPodTemplate>,
}

/// A pod spec as written, which [`CompactPodSpec`] splits (flat for the reason given at [`PodMetaText`]).
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct PodSpecText {
    node_name: Option<String>,
    node_selector: Option<BTreeMap<String, String>>,
    affinity: Option<Box<Affinity>>,
    tolerations: Option<Vec<Toleration>>,
    topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    priority: Option<i32>,
    priority_class_name: Option<String>,
    host_network: Option<bool>,
    termination_grace_period_seconds: Option<i64>,
    containers: Vec<CompactContainer>,
    init_containers: Option<Vec<CompactContainer>>,
    resources: Option<ResourceRequirements>,
    overhead: Option<BTreeMap<String, Quantity>>,
    #[serde(deserialize_with = "claim_volumes")]
    volumes: Option<Vec<CompactVolume>>,
}

impl From<PodSpecText> for CompactPodSpec {
    fn from(s: PodSpecText) -> Self {
        Self {
            node_name: s.node_name.map(Arc::from),
            template: Arc::new(CompactPodTemplate {
                node_selector: s.node_selector,
                affinity: s.affinity,
                tolerations: s.tolerations,
                topology_spread_constraints: s.topology_spread_constraints,
                priority: s.priority,
                priority_class_name: s.priority_class_name,
                host_network: s.host_network,
                termination_grace_period_seconds: s.termination_grace_period_seconds,
                containers: s.containers,
                init_containers: s.init_containers,
                resources: s.resources,
                overhead: s.overhead,
                volumes: s.volumes,
            }),
        }
    }
}

impl std::ops::Deref for CompactPodSpec {
    type Target = CompactPodTemplate;

    fn deref(&self) -> &CompactPodTemplate {
        &self.template
    }
}

impl std::ops::DerefMut for CompactPodSpec {
    /// Copies a shared template first.
    fn deref_mut(&mut self) -> &mut CompactPodTemplate {
        Arc::make_mut(&mut self.template)
    }
}

/// What a pod's template decides: its spec but the node name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompactPodTemplate {
    pub node_selector: Option<BTreeMap<String, String>>,
    pub affinity: Option<Box<Affinity>>,
    pub tolerations: Option<Vec<Toleration>>,
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    pub priority: Option<i32>,
    /// The drain moves pods of the system-*-critical classes last.
    pub priority_class_name: Option<String>,
    /// Host-network pods use their container ports on the node.
    pub host_network: Option<bool>,
    /// How long the pod's containers get to stop (the drain clamps it to the node's deadline).
    pub termination_grace_period_seconds: Option<i64>,
    pub containers: Vec<CompactContainer>,
    pub init_containers: Option<Vec<CompactContainer>>,
    /// Pod-level resources (the PodLevelResources feature).
    pub resources: Option<ResourceRequirements>,
    pub overhead: Option<BTreeMap<String, Quantity>>,
    pub volumes: Option<Vec<CompactVolume>>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CompactContainer {
    pub name: String,
    pub resources: Option<ResourceRequirements>,
    pub ports: Option<Vec<ContainerPort>>,
    /// `Always` on an init container makes it a sidecar.
    pub restart_policy: Option<String>,
}

/// A volume backed by a PersistentVolumeClaim; other volume kinds (configMap, secret, projected, emptyDir, ...)
/// do not affect where a pod can run and are dropped.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CompactVolume {
    pub name: String,
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
    pub ephemeral: Option<Box<EphemeralVolumeSource>>,
}

impl CompactVolume {
    fn uses_a_claim(&self) -> bool {
        self.persistent_volume_claim.is_some() || self.ephemeral.is_some()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CompactPodStatus {
    pub phase: Option<String>,
    pub start_time: Option<Time>,
    /// The node the scheduler (or Karpenter's provisioner) means this pod for; that node is not disrupted.
    pub nominated_node_name: Option<String>,
    /// Shared: most running pods have the same conditions (see [`CompactPod::share`]).
    pub conditions: Option<Arc<Vec<CompactPodCondition>>>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct CompactPodCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    /// `Unschedulable` on PodScheduled=False marks a pod the provisioner should find room for.
    pub reason: Option<String>,
}

/// Annotations a decision reads: Karpenter's own (`karpenter.sh/do-not-disrupt`, the capacity-buffer marker,
/// ...), the mirror-pod marker and the ReplicaSet pod-deletion cost. Everything else, notably
/// `kubectl.kubernetes.io/last-applied-configuration` (a copy of the whole object), is dropped.
pub fn is_relevant_annotation(key: &str) -> bool {
    key.strip_prefix(labels::GROUP)
        .is_some_and(|k| k.starts_with('/'))
        || key.starts_with("autoscaling.x-k8s.io/")
        || key == labels::MIRROR_POD_ANNOTATION
        || key == labels::POD_DELETION_COST_ANNOTATION
}

fn keep_relevant(annotations: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    let kept: BTreeMap<String, String> = annotations
        .into_iter()
        .filter(|(k, _)| is_relevant_annotation(k))
        .collect();
    (!kept.is_empty()).then_some(kept)
}

fn relevant_annotations<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    Ok(Option::<BTreeMap<String, String>>::deserialize(deserializer)?.and_then(keep_relevant))
}

/// `items` converted into a vector of exactly their number. `into_iter().map(..).collect()` would reuse the
/// source's buffer when the types' alignment allows, keeping a `Container`'s 2 KiB per element for a 150-byte
/// [`CompactContainer`]: with 150,000 pods that is hundreds of megabytes held for nothing.
fn compact_vec<T, U: From<T>>(items: impl IntoIterator<Item = T>) -> Vec<U> {
    let mut out = Vec::new();
    out.extend(items.into_iter().map(U::from));
    out.shrink_to_fit();
    out
}

fn keep_claim_volumes(volumes: impl IntoIterator<Item = CompactVolume>) -> Option<Vec<CompactVolume>> {
    let mut kept = Vec::new();
    kept.extend(volumes.into_iter().filter(CompactVolume::uses_a_claim));
    kept.shrink_to_fit();
    (!kept.is_empty()).then_some(kept)
}

fn claim_volumes<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Vec<CompactVolume>>, D::Error> {
    Ok(Option::<Vec<CompactVolume>>::deserialize(deserializer)?.and_then(keep_claim_volumes))
}

/// The caches [`CompactPod::share`] draws from.
#[derive(Debug, Default)]
pub struct PodSharing {
    templates: ShareCache<CompactPodTemplate>,
    groups: ShareCache<CompactPodGroupMeta>,
    conditions: ShareCache<Vec<CompactPodCondition>>,
    node_names: ShareCache<str>,
}

impl CompactPod {
    /// `namespace/name`, as decisions and messages name a pod.
    pub fn id(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.as_deref().unwrap_or("default"),
            self.metadata.name.as_deref().unwrap_or("<unnamed>")
        )
    }

    /// Replaces this pod's shareable parts (metadata group, template, conditions, node name) with equal ones already in
    /// `sharing`, held by other pods (the replicas of its workload), so each is stored once.
    pub fn share(&mut self, sharing: &mut PodSharing) {
        self.metadata.group = sharing.groups.share(Arc::clone(&self.metadata.group));
        if let Some(spec) = self.spec.as_mut() {
            spec.template = sharing.templates.share(Arc::clone(&spec.template));
            if let Some(node) = spec.node_name.as_mut() {
                *node = sharing.node_names.share(Arc::clone(node));
            }
        }
        if let Some(conditions) = self.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            *conditions = sharing.conditions.share(Arc::clone(conditions));
        }
    }
}

impl From<Pod> for CompactPod {
    fn from(pod: Pod) -> Self {
        Self {
            metadata: pod.metadata.into(),
            spec: pod.spec.map(Into::into),
            status: pod.status.map(Into::into),
        }
    }
}

impl From<ObjectMeta> for CompactPodMeta {
    fn from(meta: ObjectMeta) -> Self {
        Self {
            uid: PodUid::new(meta.uid.as_deref()),
            name: meta.name,
            creation_timestamp: meta.creation_timestamp,
            deletion_timestamp: meta.deletion_timestamp,
            group: Arc::new(CompactPodGroupMeta {
                namespace: meta.namespace,
                labels: meta.labels,
                annotations: meta.annotations.and_then(keep_relevant),
                owner_references: meta.owner_references,
            }),
        }
    }
}

impl From<PodSpec> for CompactPodSpec {
    fn from(mut spec: PodSpec) -> Self {
        let node_name = spec.node_name.take().map(Arc::from);
        Self {
            node_name,
            template: Arc::new(spec.into()),
        }
    }
}

impl From<PodSpec> for CompactPodTemplate {
    fn from(spec: PodSpec) -> Self {
        Self {
            node_selector: spec.node_selector,
            affinity: spec.affinity.map(Box::new),
            tolerations: spec.tolerations,
            topology_spread_constraints: spec.topology_spread_constraints,
            priority: spec.priority,
            priority_class_name: spec.priority_class_name,
            host_network: spec.host_network,
            termination_grace_period_seconds: spec.termination_grace_period_seconds,
            containers: compact_vec(spec.containers),
            init_containers: spec.init_containers.map(compact_vec),
            resources: spec.resources,
            overhead: spec.overhead,
            volumes: spec
                .volumes
                .and_then(|vs| keep_claim_volumes(vs.into_iter().map(CompactVolume::from))),
        }
    }
}

impl From<&PodSpec> for CompactPodSpec {
    /// For pod templates (DaemonSets, CapacityBuffers), which stay whole in the snapshot; there are few of them,
    /// so a copy of the whole spec is cheap.
    fn from(spec: &PodSpec) -> Self {
        spec.clone().into()
    }
}

impl From<Container> for CompactContainer {
    fn from(c: Container) -> Self {
        Self {
            name: c.name,
            resources: c.resources,
            ports: c.ports,
            restart_policy: c.restart_policy,
        }
    }
}

impl From<Volume> for CompactVolume {
    fn from(v: Volume) -> Self {
        Self {
            name: v.name,
            persistent_volume_claim: v.persistent_volume_claim,
            ephemeral: v.ephemeral.map(Box::new),
        }
    }
}

impl From<PodStatus> for CompactPodStatus {
    fn from(status: PodStatus) -> Self {
        Self {
            phase: status.phase,
            start_time: status.start_time,
            nominated_node_name: status.nominated_node_name,
            conditions: status.conditions.map(|c| Arc::new(compact_vec(c))),
        }
    }
}

impl From<PodCondition> for CompactPodCondition {
    fn from(c: PodCondition) -> Self {
        Self {
            type_: c.type_,
            status: c.status,
            reason: c.reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_uid_keeps_a_uuid_and_tells_other_strings_apart() {
        let uuid = PodUid::new(Some("0B8C5B0E-2f6e-4c1a-9d3e-5a7b9c1d2e3f"));
        assert_eq!(uuid.to_string(), "0b8c5b0e2f6e4c1a9d3e5a7b9c1d2e3f");
        assert_eq!(uuid, PodUid::new(Some("0b8c5b0e2f6e4c1a9d3e5a7b9c1d2e3f")));
        assert_ne!(PodUid::new(Some("u-1")), PodUid::new(Some("u-2")));
        assert!(!PodUid::new(Some("u-1")).is_unknown());
        assert!(PodUid::new(None).is_unknown() && PodUid::new(Some("")).is_unknown());
        // Cached pods carry it, whichever way they were read.
        let pod: CompactPod = serde_json::from_str(KUBECTL_POD).unwrap_or_default();
        assert_eq!(pod.metadata.uid, PodUid::new(Some("u-1")));
    }

    const KUBECTL_POD: &str = r#"{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web-7d4b9c-abcde", "namespace": "shop", "uid": "u-1",
            "labels": {"app": "web"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{\"huge\": true}",
                "karpenter.sh/do-not-disrupt": "true",
                "controller.kubernetes.io/pod-deletion-cost": "10"
            },
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c", "uid": "rs", "controller": true}],
            "creationTimestamp": "2026-12-01T10:00:00Z"
        },
        "spec": {
            "nodeName": "n1",
            "containers": [{
                "name": "app", "image": "nginx", "env": [{"name": "A", "value": "b"}],
                "resources": {"requests": {"cpu": "250m"}},
                "ports": [{"containerPort": 80, "hostPort": 8080}],
                "volumeMounts": [{"name": "data", "mountPath": "/d"}],
                "livenessProbe": {"httpGet": {"path": "/", "port": 80}}
            }],
            "volumes": [
                {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}}
            ],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            "priority": 5
        },
        "status": {
            "phase": "Running", "startTime": "2026-12-01T10:00:05Z", "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T10:00:09Z"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "nginx", "imageID": "x"}]
        }
    }"#;

    fn full() -> Pod {
        match serde_json::from_str(KUBECTL_POD) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn decoding_keeps_what_decisions_read_and_drops_the_rest() {
        let pod: CompactPod = match serde_json::from_str(KUBECTL_POD) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            [
                "controller.kubernetes.io/pod-deletion-cost",
                "karpenter.sh/do-not-disrupt"
            ]
        );
        let spec = pod.spec.as_ref().map_or_else(Default::default, Clone::clone);
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert_eq!(spec.containers.len(), 1);
        assert_eq!(spec.containers[0].ports.as_ref().map(Vec::len), Some(1));
        let volumes = spec.volumes.clone().unwrap_or_default();
        assert_eq!(volumes.len(), 1, "only the claim-backed volume is kept");
        assert_eq!(volumes[0].name, "data");
        assert_eq!(spec.priority, Some(5));
        let status = pod.status.as_ref().map_or_else(Default::default, Clone::clone);
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(
            status.conditions.map(|c| c[0].type_.clone()).as_deref(),
            Some("Ready")
        );
    }

    #[test]
    fn converting_a_watched_pod_gives_what_decoding_gives() {
        let decoded: CompactPod = match serde_json::from_str(KUBECTL_POD) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(CompactPod::from(full()), decoded);
    }

    #[test]
    fn replicas_share_one_copy_of_what_they_have_in_common() {
        let mut sharing = PodSharing::default();
        let mut first = CompactPod::from(full());
        let mut replica = full();
        replica.metadata.name = Some("web-7d4b9c-fghij".into());
        replica.spec.as_mut().unwrap().node_name = Some("n2".into());
        let mut replica = CompactPod::from(replica);
        let mut bigger = full();
        bigger.metadata.name = Some("web-7d4b9c-klmno".into());
        bigger.spec.as_mut().unwrap().containers[0].resources = Some(ResourceRequirements {
            requests: Some([("cpu".to_string(), Quantity("2".into()))].into()),
            ..Default::default()
        });
        let mut bigger = CompactPod::from(bigger);
        for pod in [&mut first, &mut replica, &mut bigger] {
            pod.share(&mut sharing);
        }

        let spec = |p: &CompactPod| p.spec.clone().unwrap();
        assert!(Arc::ptr_eq(&first.metadata.group, &replica.metadata.group));
        assert!(Arc::ptr_eq(&spec(&first).template, &spec(&replica).template));
        assert_eq!(
            spec(&replica).node_name.as_deref(),
            Some("n2"),
            "the node is the pod's own"
        );
        assert_eq!(replica.metadata.name.as_deref(), Some("web-7d4b9c-fghij"));
        let conditions = |p: &CompactPod| p.status.clone().unwrap().conditions.unwrap();
        assert!(Arc::ptr_eq(&conditions(&first), &conditions(&bigger)));
        assert!(
            !Arc::ptr_eq(&spec(&first).template, &spec(&bigger).template),
            "a different request is a different template"
        );
        assert_eq!(
            spec(&bigger).containers[0].resources,
            Some(ResourceRequirements {
                requests: Some([("cpu".to_string(), Quantity("2".into()))].into()),
                ..Default::default()
            })
        );

        // Writing through a shared part copies it: the other replica is unchanged.
        replica.metadata.labels = Some([("app".to_string(), "other".to_string())].into());
        assert_eq!(
            first
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .map(String::as_str),
            Some("web")
        );
    }
}
