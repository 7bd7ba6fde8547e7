//! Pods: which ones the simulation places, and their conversion into the scheduler's [`Pod`].
//!
//! Pending: unbound, not owned by a DaemonSet, not a mirror pod, not terminal, not terminating. Pods on a node
//! being deleted are placed again with them (unless DaemonSet or mirror pods; StatefulSet pods even while
//! terminating, since their replacement cannot start before they are gone). Every other pod on a usable node
//! stays there: its requests come off the node, and (unless terminating) it counts for topology.

use std::{
    cmp::Reverse,
    collections::{BTreeMap, HashMap, HashSet},
    sync::Arc,
};

use k8s_openapi::api::core::v1::{PodAffinityTerm, TopologySpreadConstraint};
use karpenter_api::labels;

use crate::{
    requirements::{Operator, Requirements, Symbol},
    resources::Resources,
    scheduling::{AffinityTerm, HostPort, Labels, Pod, PodShape, SelectorOperator, SpreadConstraint},
    snapshot::pod_requests::pod_requests,
};

use super::{
    Snapshot,
    compact_pod::{CompactPod, CompactPodSpec},
    context::{Context, describe},
    default_spread::DefaultSpread,
    nodes::NodeSet,
    selectors::{NamespaceIndex, fold_label_keys, label_selector},
    taints::tolerations,
    volumes::{PodVolumes, VolumeIndex},
};

const MIRROR_ANNOTATION: &str = labels::MIRROR_POD_ANNOTATION;

fn owner_kind(pod: &CompactPod, kind: &str) -> Option<String> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == kind)
        .map(|o| o.name.clone())
}

pub(super) fn daemon_set_owner(pod: &CompactPod) -> Option<(String, String)> {
    owner_kind(pod, "DaemonSet").map(|n| {
        (
            pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
            n,
        )
    })
}

pub(crate) fn is_mirror(pod: &CompactPod) -> bool {
    owner_kind(pod, "Node").is_some()
        || pod
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
}

pub(crate) fn is_terminal(pod: &CompactPod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

pub(crate) fn is_terminating(pod: &CompactPod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

pub(crate) fn node_name(pod: &CompactPod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// `namespace/name`.
pub(super) fn pod_id(pod: &CompactPod) -> String {
    pod.id()
}

fn object(pod: &CompactPod) -> String {
    describe(
        "Pod",
        Some(pod.metadata.namespace.as_deref().unwrap_or("default")),
        pod.metadata.name.as_deref(),
    )
}

/// A pod staying on a usable node.
pub(super) struct Bound<'s> {
    pub pod: &'s CompactPod,
    /// Index into the node set.
    pub node: usize,
}

pub(super) struct Classified<'s> {
    /// To place: pending pods, then pods from nodes being deleted.
    pub pending: Vec<&'s CompactPod>,
    pub bound: Vec<Bound<'s>>,
}

/// Sorts the snapshot's pods in one pass.
pub(super) fn classify<'s>(snapshot: &'s Snapshot, nodes: &NodeSet<'_>) -> Classified<'s> {
    let mut pending = Vec::new();
    let mut rescheduled = Vec::new();
    // Most pods are bound (150,000 on a large cluster): sized once rather than doubled up to it.
    let mut bound = Vec::with_capacity(snapshot.pods.len());
    for pod in snapshot.pods.iter().map(|p| &**p) {
        if is_terminal(pod) {
            continue;
        }
        let ignored_owner = || daemon_set_owner(pod).is_some() || is_mirror(pod);
        match node_name(pod) {
            None => {
                if !is_terminating(pod) && !ignored_owner() {
                    pending.push(pod);
                }
            }
            Some(node) if nodes.is_deleting(node) => {
                let active = !is_terminating(pod) || owner_kind(pod, "StatefulSet").is_some();
                if active && !ignored_owner() {
                    rescheduled.push(pod);
                }
            }
            Some(node) => {
                if let Some(node) = nodes.index_of(node) {
                    bound.push(Bound { pod, node });
                }
            }
        }
    }
    pending.extend(rescheduled);
    Classified { pending, bound }
}

/// What a pod already on a node contributes to it.
pub(super) struct BoundParts {
    pub requests: Resources,
    pub host_ports: Vec<HostPort>,
    /// `(driver, namespace/pvc)`.
    pub csi: Vec<(Symbol, String)>,
    /// Namespace, labels and required anti-affinity terms; `None` for a terminating pod, which topology ignores.
    pub topology: Option<(Symbol, Labels, Vec<AffinityTerm>)>,
    pub daemon_set: Option<(String, String)>,
}

/// Converts pods, remembering namespace-selector results across pods.
pub(super) struct PodConverter<'a, 's> {
    namespaces: &'a NamespaceIndex<'s>,
    volumes: &'a VolumeIndex<'s>,
    namespace_cache: HashMap<String, Vec<Symbol>>,
    /// kube-scheduler's default topology spread constraints, for pods with none of their own.
    default_spread: DefaultSpread<'s>,
    /// The distinct shapes converted so far.
    shapes: HashSet<Arc<PodShape>>,
}

impl<'a, 's> PodConverter<'a, 's> {
    pub fn new(
        namespaces: &'a NamespaceIndex<'s>,
        volumes: &'a VolumeIndex<'s>,
        default_spread: DefaultSpread<'s>,
    ) -> Self {
        Self {
            namespaces,
            volumes,
            default_spread,
            namespace_cache: HashMap::new(),
            shapes: HashSet::new(),
        }
    }

    /// A pod to place, or `None` with a note saying why it is skipped.
    pub fn convert_pending(&mut self, cx: &mut Context, pod: &CompactPod) -> Option<Pod> {
        let result = self
            .volumes
            .pod_volumes(pod, true, &mut cx.interner)
            .and_then(|volumes| {
                for w in &volumes.warnings {
                    cx.note(object(pod), w.clone());
                }
                self.convert(cx, pod, volumes)
            });
        match result {
            Ok(p) => Some(p),
            Err(e) => {
                cx.note(object(pod), format!("{e}; not scheduled"));
                None
            }
        }
    }

    fn convert(&mut self, cx: &mut Context, pod: &CompactPod, volumes: PodVolumes) -> Result<Pod, String> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let spec = pod.spec.as_ref().ok_or("the pod has no spec")?;
        let requests = pod_requests(spec, &mut cx.table).map_err(|e| e.to_string())?;
        let pod_labels = pod.metadata.labels.as_ref();
        let interner = &mut cx.interner;

        let base_requirements = Requirements::from_labels(
            spec.node_selector
                .iter()
                .flatten()
                .map(|(k, v)| (k.as_str(), v.as_str())),
            interner,
        );
        let node_affinity = spec.affinity.as_ref().and_then(|a| a.node_affinity.as_ref());
        let required_terms = node_affinity
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
            .map(|r| r.node_selector_terms.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|t| Requirements::from_node_selector_term(t, interner))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("required node affinity: {e}"))?;
        let mut preferred_terms = node_affinity
            .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref())
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|p| {
                Ok((
                    p.weight,
                    Requirements::from_node_selector_term(&p.preference, interner)?,
                ))
            })
            .collect::<Result<Vec<_>, crate::requirements::RequirementError>>()
            .map_err(|e| format!("preferred node affinity: {e}"))?;
        preferred_terms.sort_by_key(|(w, _)| Reverse(*w));

        // Upstream refuses a pod that asks to stay off Karpenter's nodes (its strict requirements: the node
        // selector and the first required term).
        let strict = match required_terms.first() {
            Some(t) => base_requirements.intersect(t),
            None => base_requirements.clone(),
        };
        if strict
            .get(cx.keys.nodepool)
            .is_some_and(|r| r.operator() == Operator::DoesNotExist)
        {
            return Err(format!(
                "it is configured not to run on a Karpenter node (requirement {} DoesNotExist)",
                labels::NODEPOOL_LABEL
            ));
        }

        let defaults = self.default_spread.for_pod(pod);
        let constraints = defaults
            .as_deref()
            .or(spec.topology_spread_constraints.as_deref())
            .unwrap_or_default();
        let spread = spread(cx, constraints, pod_labels)?;
        let pod_affinity = spec.affinity.as_ref().and_then(|a| a.pod_affinity.as_ref());
        let pod_anti_affinity = spec.affinity.as_ref().and_then(|a| a.pod_anti_affinity.as_ref());
        let affinity = self.terms(
            cx,
            namespace,
            pod_labels,
            slice(pod_affinity.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())),
        )?;
        let anti_affinity = self.terms(
            cx,
            namespace,
            pod_labels,
            slice(
                pod_anti_affinity
                    .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()),
            ),
        )?;
        let mut preferred_affinity = Vec::new();
        for w in pod_affinity
            .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref())
            .into_iter()
            .flatten()
        {
            preferred_affinity.push((
                w.weight,
                self.term(cx, namespace, pod_labels, &w.pod_affinity_term)?,
            ));
        }
        preferred_affinity.sort_by_key(|(w, _)| Reverse(*w));
        let mut preferred_anti_affinity = Vec::new();
        for w in pod_anti_affinity
            .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref())
            .into_iter()
            .flatten()
        {
            preferred_anti_affinity.push((
                w.weight,
                self.term(cx, namespace, pod_labels, &w.pod_affinity_term)?,
            ));
        }
        preferred_anti_affinity.sort_by_key(|(w, _)| Reverse(*w));

        let csi_volumes = count_by_driver(
            volumes
                .csi
                .iter()
                .map(|(d, id)| (cx.interner.intern(d), id.as_str())),
        );
        let shape = PodShape {
            namespace: cx.interner.intern(namespace),
            labels: pod_labels_of(pod_labels, cx),
            requests,
            base_requirements,
            volume_requirements: volumes.requirements,
            required_terms,
            preferred_terms,
            tolerations: tolerations(spec.tolerations.as_deref(), &mut cx.interner),
            spread,
            affinity,
            anti_affinity,
            preferred_affinity,
            preferred_anti_affinity,
            host_ports: host_ports(spec, cx),
            csi_volumes,
            priority: spec.priority.unwrap_or(0),
        };
        Ok(Pod::shared(pod_id(pod), self.share(shape)))
    }

    /// `shape`, or an equal one converted before (the replicas of a workload), so they share one allocation.
    fn share(&mut self, shape: PodShape) -> Arc<PodShape> {
        if let Some(existing) = self.shapes.get(&shape) {
            return Arc::clone(existing);
        }
        let shape = Arc::new(shape);
        self.shapes.insert(Arc::clone(&shape));
        shape
    }

    fn terms(
        &mut self,
        cx: &mut Context,
        namespace: &str,
        pod_labels: Option<&BTreeMap<String, String>>,
        terms: &[PodAffinityTerm],
    ) -> Result<Vec<AffinityTerm>, String> {
        terms
            .iter()
            .map(|t| self.term(cx, namespace, pod_labels, t))
            .collect()
    }

    fn term(
        &mut self,
        cx: &mut Context,
        namespace: &str,
        pod_labels: Option<&BTreeMap<String, String>>,
        term: &PodAffinityTerm,
    ) -> Result<AffinityTerm, String> {
        let interner = &mut cx.interner;
        let context = |e: String| format!("pod affinity term on {}: {e}", term.topology_key);
        let mut selector = label_selector(term.label_selector.as_ref(), interner).map_err(context)?;
        let match_keys = term.match_label_keys.as_deref().unwrap_or_default();
        fold_label_keys(
            &mut selector,
            match_keys,
            pod_labels,
            SelectorOperator::In,
            interner,
        );
        let mismatch_keys = term.mismatch_label_keys.as_deref().unwrap_or_default();
        fold_label_keys(
            &mut selector,
            mismatch_keys,
            pod_labels,
            SelectorOperator::NotIn,
            interner,
        );
        let namespaces = self
            .namespaces
            .scope(
                namespace,
                term.namespaces.as_deref(),
                term.namespace_selector.as_ref(),
                interner,
                &mut self.namespace_cache,
            )
            .map_err(context)?;
        Ok(AffinityTerm {
            topology_key: interner.intern_key(&term.topology_key),
            selector,
            namespaces,
        })
    }

    /// What a pod already on a node contributes: problems are noted and leave out only the part they affect.
    pub fn bound_parts(&mut self, cx: &mut Context, pod: &CompactPod) -> BoundParts {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let spec = pod.spec.as_ref();
        let requests = match spec.map(|s| pod_requests(s, &mut cx.table)) {
            Some(Ok(r)) => r,
            Some(Err(e)) => {
                cx.note(
                    object(pod),
                    format!("{e}; its requests are not counted on its node"),
                );
                Resources::zero()
            }
            None => Resources::zero(),
        };
        let host_ports = spec.map(|s| host_ports(s, cx)).unwrap_or_default();
        let csi = match self.volumes.pod_volumes(pod, false, &mut cx.interner) {
            Ok(v) => v
                .csi
                .into_iter()
                .map(|(d, id)| (cx.interner.intern(&d), id))
                .collect(),
            Err(_) => Vec::new(),
        };
        let topology = (!is_terminating(pod)).then(|| {
            let pod_labels = pod.metadata.labels.as_ref();
            let mut anti = Vec::new();
            let required = spec
                .and_then(|s| s.affinity.as_ref())
                .and_then(|a| a.pod_anti_affinity.as_ref())
                .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
            for t in required.into_iter().flatten() {
                match self.term(cx, namespace, pod_labels, t) {
                    Ok(t) => anti.push(t),
                    Err(e) => cx.note(object(pod), format!("{e}; the term is ignored")),
                }
            }
            (cx.interner.intern(namespace), pod_labels_of(pod_labels, cx), anti)
        });
        BoundParts {
            requests,
            host_ports,
            csi,
            topology,
            daemon_set: daemon_set_owner(pod),
        }
    }
}

/// A pod's topology spread constraints (its own, or the cluster's defaults with its deduced selector) as the
/// scheduler reads them.
fn spread(
    cx: &mut Context,
    constraints: &[TopologySpreadConstraint],
    pod_labels: Option<&BTreeMap<String, String>>,
) -> Result<Vec<SpreadConstraint>, String> {
    let mut out = Vec::with_capacity(constraints.len());
    for tsc in constraints {
        let interner = &mut cx.interner;
        let mut selector = label_selector(tsc.label_selector.as_ref(), interner)
            .map_err(|e| format!("topology spread on {}: {e}", tsc.topology_key))?;
        let keys = tsc.match_label_keys.as_deref().unwrap_or_default();
        fold_label_keys(&mut selector, keys, pod_labels, SelectorOperator::In, interner);
        out.push(SpreadConstraint {
            topology_key: interner.intern_key(&tsc.topology_key),
            max_skew: u32::try_from(tsc.max_skew).unwrap_or(0).max(1),
            min_domains: tsc.min_domains.and_then(|m| u32::try_from(m).ok()),
            hard: tsc.when_unsatisfiable != "ScheduleAnyway",
            selector,
            honor_node_affinity: tsc.node_affinity_policy.as_deref() != Some("Ignore"),
            honor_node_taints: tsc.node_taints_policy.as_deref() == Some("Honor"),
        });
    }
    Ok(out)
}

fn slice<T>(list: Option<&Vec<T>>) -> &[T] {
    list.map(Vec::as_slice).unwrap_or_default()
}

fn pod_labels_of(labels: Option<&BTreeMap<String, String>>, cx: &mut Context) -> Labels {
    Labels::new(
        labels
            .iter()
            .flat_map(|l| l.iter())
            .map(|(k, v)| (cx.interner.intern(k), cx.interner.intern(v)))
            .collect(),
    )
}

/// Volumes per driver, a PVC used twice counting once.
fn count_by_driver<'i>(volumes: impl Iterator<Item = (Symbol, &'i str)>) -> Vec<(Symbol, u32)> {
    let mut seen: Vec<(Symbol, &str)> = volumes.collect();
    seen.sort_unstable();
    seen.dedup();
    let mut out: Vec<(Symbol, u32)> = Vec::new();
    for (driver, _) in seen {
        match out.last_mut() {
            Some((d, n)) if *d == driver => *n += 1,
            _ => out.push((driver, 1)),
        }
    }
    out
}

/// Host ports of the containers and sidecars (`hostIP` "" or 0.0.0.0 binds every address; protocol defaults to
/// TCP; with host networking every container port is a host port).
pub(super) fn host_ports(spec: &CompactPodSpec, cx: &mut Context) -> Vec<HostPort> {
    let host_network = spec.host_network == Some(true);
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let mut out = Vec::new();
    for c in spec.containers.iter().chain(sidecars) {
        for p in c.ports.iter().flatten() {
            let port = match p.host_port {
                Some(hp) if hp > 0 => hp,
                _ if host_network => p.container_port,
                _ => continue,
            };
            let Ok(port) = u16::try_from(port) else { continue };
            let ip = match p.host_ip.as_deref() {
                None | Some("" | "0.0.0.0") => cx.keys.wildcard_ip,
                Some(ip) => cx.interner.intern(ip),
            };
            let protocol = match p.protocol.as_deref() {
                None | Some("") => cx.keys.tcp,
                Some(proto) => cx.interner.intern(proto),
            };
            out.push(HostPort { ip, port, protocol });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::{BuildOptions, ScheduleInputs, build_schedule_inputs};
    use crate::scheduling::{NamespaceScope, SelectorOperator};

    fn build(objects: &[&str]) -> ScheduleInputs {
        build_schedule_inputs(&snapshot(objects), &catalog(), &BuildOptions::default())
    }

    #[test]
    fn pending_pods_exclude_daemonset_mirror_terminal_and_terminating() {
        let ds_pod = pending_pod("kube-system", "ds", "100m", "").replace(
            "metadata: {",
            "metadata: {ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: agent, uid: u1}], ",
        );
        let mirror = pending_pod("kube-system", "mirror", "100m", "").replace(
            "metadata: {",
            "metadata: {annotations: {kubernetes.io/config.mirror: x}, ",
        );
        let done = format!(
            "{}status: {{phase: Succeeded}}\n",
            pending_pod("default", "done", "100m", "")
        );
        let terminating = pending_pod("default", "bye", "100m", "").replace(
            "metadata: {",
            "metadata: {deletionTimestamp: \"2024-01-01T00:00:00Z\", ",
        );
        let built = build(&[
            &ds_pod,
            &mirror,
            &done,
            &terminating,
            &pending_pod("default", "web", "100m", ""),
        ]);
        assert_eq!(built.pod_names, vec!["default/web"]);
    }

    #[test]
    fn pods_on_deleting_nodes_are_rescheduled() {
        let deleting = node("old", "", "").replace(
            "metadata:\n",
            "metadata:\n  deletionTimestamp: \"2024-01-01T00:00:00Z\"\n",
        );
        let disrupted = node(
            "tainted",
            "",
            "taints: [{key: karpenter.sh/disrupted, effect: NoSchedule}]",
        );
        let sts_terminating = bound_pod("default", "db-0", "old", "100m", "").replace(
            "metadata: {",
            "metadata: {deletionTimestamp: \"2024-01-01T00:00:00Z\", ownerReferences: [{apiVersion: apps/v1, kind: StatefulSet, name: db, uid: u}], ",
        );
        let ds_pod = bound_pod("default", "agent-x", "old", "100m", "").replace(
            "metadata: {",
            "metadata: {ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: agent, uid: u2}], ",
        );
        let built = build(&[
            &deleting,
            &disrupted,
            &bound_pod("default", "a", "old", "100m", ""),
            &bound_pod("default", "b", "tainted", "100m", ""),
            &sts_terminating,
            &ds_pod,
            &pending_pod("default", "new", "100m", ""),
        ]);
        assert_eq!(
            built.pod_names,
            vec!["default/new", "default/a", "default/b", "default/db-0"]
        );
        assert!(
            built.node_names.is_empty(),
            "nodes being deleted are not places to schedule"
        );
    }

    #[test]
    fn nodepool_does_not_exist_pods_are_skipped_with_a_note() {
        let affinity = "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchExpressions: [{key: karpenter.sh/nodepool, operator: DoesNotExist}]\n";
        let built = build(&[&pending_pod("default", "managed-elsewhere", "100m", affinity)]);
        assert!(built.input.pods.is_empty());
        assert_eq!(built.notes.len(), 1);
        assert!(
            built.notes[0]
                .message
                .contains("karpenter.sh/nodepool DoesNotExist")
        );
    }

    #[test]
    fn bound_pods_reduce_available_and_join_topology() {
        let anti = "  affinity:\n    podAntiAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}\n";
        let built = build(&[
            &node("n1", "", ""),
            &bound_pod("default", "web", "n1", "1500m", anti),
        ]);
        assert_eq!(built.node_names, vec!["n1"]);
        let n = &built.input.existing[0];
        assert_eq!(n.available.cpu(), 2500);
        assert_eq!(n.available.pods(), 9000);
        assert_eq!(built.input.bound_pods.len(), 1);
        let b = &built.input.bound_pods[0];
        assert_eq!(b.node, 0);
        assert_eq!(b.anti_affinity.len(), 1);
        assert_eq!(
            b.anti_affinity[0].namespaces,
            NamespaceScope::Only(vec![built.interner.lookup("default").unwrap()])
        );
    }

    #[test]
    fn match_label_keys_fold_into_the_selector() {
        let spread = "  topologySpreadConstraints:\n  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: web}}, matchLabelKeys: [pod-template-hash, absent]}\n";
        let pod = pending_pod("default", "web", "100m", spread)
            .replace("labels: {app: web}", "labels: {app: web, pod-template-hash: abc}");
        let built = build(&[&pod]);
        let s = &built.input.pods[0].spread[0];
        let i = &built.interner;
        assert!(!s.hard);
        assert!(
            s.honor_node_affinity && !s.honor_node_taints,
            "defaults: nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore"
        );
        assert_eq!(s.selector.expressions.len(), 2);
        let hash = s
            .selector
            .expressions
            .iter()
            .find(|e| e.key == i.lookup("pod-template-hash").unwrap())
            .unwrap();
        assert_eq!(hash.operator, SelectorOperator::In);
        assert_eq!(hash.values, vec![i.lookup("abc").unwrap()]);
    }

    #[test]
    fn node_affinity_terms_are_alternatives_and_preferences_heaviest_first() {
        let affinity = "  nodeSelector: {beta.kubernetes.io/arch: amd64}\n  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchExpressions: [{key: size, operator: In, values: [small]}]\n        - matchExpressions: [{key: size, operator: In, values: [large]}]\n      preferredDuringSchedulingIgnoredDuringExecution:\n      - {weight: 1, preference: {matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [test-zone-1]}]}}\n      - {weight: 50, preference: {matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [test-zone-2]}]}}\n";
        let built = build(&[&pending_pod("default", "web", "100m", affinity)]);
        let p = &built.input.pods[0];
        let i = &built.interner;
        let arch = i.lookup_key("kubernetes.io/arch").unwrap();
        assert_eq!(
            p.base_requirements.single_value(arch),
            i.lookup("amd64"),
            "deprecated keys are normalised"
        );
        assert_eq!(p.required_terms.len(), 2);
        assert_eq!(
            p.preferred_terms.iter().map(|(w, _)| *w).collect::<Vec<_>>(),
            vec![50, 1]
        );
    }

    #[test]
    fn pod_affinity_namespaces_resolve_against_namespace_objects() {
        let ns = |name: &str, team: &str| {
            format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}, labels: {{team: {team}}}}}\n")
        };
        let affinity = "  affinity:\n    podAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - {topologyKey: topology.kubernetes.io/zone, labelSelector: {matchLabels: {app: db}}, namespaceSelector: {matchLabels: {team: data}}}\n      preferredDuringSchedulingIgnoredDuringExecution:\n      - {weight: 10, podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: cache}}, namespaceSelector: {}}}\n      - {weight: 90, podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: cache}}, namespaces: [other]}}\n";
        let built = build(&[
            &ns("a", "data"),
            &ns("b", "web"),
            &ns("c", "data"),
            &pending_pod("b", "web", "100m", affinity),
        ]);
        let p = &built.input.pods[0];
        let i = &built.interner;
        let mut data = vec![i.lookup("a").unwrap(), i.lookup("c").unwrap()];
        data.sort_unstable();
        assert_eq!(p.affinity[0].namespaces, NamespaceScope::Only(data));
        assert_eq!(p.preferred_affinity[0].0, 90);
        assert_eq!(
            p.preferred_affinity[0].1.namespaces,
            NamespaceScope::Only(vec![i.lookup("other").unwrap()])
        );
        assert_eq!(p.preferred_affinity[1].1.namespaces, NamespaceScope::All);
    }

    #[test]
    fn host_ports_default_to_tcp_on_every_address() {
        let ports = "  containers:\n  - name: c\n    ports:\n    - {containerPort: 80, hostPort: 8080}\n    - {containerPort: 53, hostPort: 53, protocol: UDP, hostIP: 10.0.0.1}\n    - {containerPort: 9000}\n";
        let pod = pending_pod("default", "web", "100m", "").replace(
            "  containers: [{name: c, resources: {requests: {cpu: \"100m\"}}}]\n",
            ports,
        );
        let built = build(&[&pod]);
        let hp = &built.input.pods[0].host_ports;
        let i = &built.interner;
        assert_eq!(hp.len(), 2);
        assert_eq!(
            (hp[0].ip, hp[0].port, hp[0].protocol),
            (i.lookup("").unwrap(), 8080, i.lookup("TCP").unwrap())
        );
        assert_eq!(
            (hp[1].ip, hp[1].protocol),
            (i.lookup("10.0.0.1").unwrap(), i.lookup("UDP").unwrap())
        );
    }

    #[test]
    fn tolerations_and_priority_are_kept() {
        let extra = "  priority: 1000\n  tolerations: [{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}]\n";
        let built = build(&[&pending_pod("default", "web", "100m", extra)]);
        let p = &built.input.pods[0];
        assert_eq!(p.priority, 1000);
        assert_eq!(p.tolerations.len(), 1);
        assert_eq!(p.requests.cpu(), 100);
    }
}
