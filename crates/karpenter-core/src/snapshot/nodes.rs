//! Existing nodes and in-flight NodeClaims as places a pod can go.
//!
//! A Node is skipped while being deleted (deletionTimestamp, or the `karpenter.sh/disrupted:NoSchedule` taint:
//! its pods are placed again); a cordoned one is kept, so its pods count for topology, but takes no new pods.
//! Its labels become single-value requirements; what is available is its allocatable minus the pods bound to it and minus the DaemonSet pods that will run there but are not bound yet;
//! known ephemeral taints are ignored, and so are startup taints until the node is initialized. Until then, too,
//! a resource the Node reports as zero or not at all (a GPU whose device plugin has not registered) counts at its
//! NodeClaim's allocatable ([`super::node_resources`]). A NodeClaim with no Node yet is a node too: its labels and
//! single-valued requirements, its allocatable (or its instance type's, from the catalog) minus DaemonSet overhead.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use super::compact_pod::CompactPod;
use super::{CompactNode, LabelLookup, label_in};
use karpenter_api::{labels, nodeclaim::NodeClaim, nodepool::NodePool};

use crate::{
    instance_type::InstanceType,
    requirements::{Requirement, Requirements, Symbol, WellKnownKeys},
    resources::Resources,
    scheduling::{BoundPod, ExistingNode, Labels},
};

use super::{
    Snapshot,
    context::{Context, describe},
    daemonsets::DaemonPods,
    node_resources::{ResourceField, is_initialized, node_resources},
    pods::PodConverter,
    taints::{api_taint, is_ephemeral, node_taint, same_taint},
};

/// Whether a Node is going away: deleted, or tainted by Karpenter's disruption.
pub(super) fn is_deleting(node: &CompactNode) -> bool {
    node.metadata.deletion_timestamp.is_some()
        || node
            .spec
            .iter()
            .flat_map(|s| s.taints.iter().flatten())
            .any(|t| t.key == labels::DISRUPTED_TAINT_KEY && t.effect == "NoSchedule")
}

/// The instance type a Node or NodeClaim carries in its labels.
pub(super) fn instance_type_of<'t, L: LabelLookup>(
    labels: Option<&L>,
    types: &HashMap<&str, &'t Arc<InstanceType>>,
) -> Option<&'t Arc<InstanceType>> {
    label_in(labels, labels::INSTANCE_TYPE_LABEL).and_then(|n| types.get(n).copied())
}

/// What a NodeClaim not launched yet is sure to offer: the smallest allocatable, resource by resource, of the
/// instance types its requirements allow. The provisioner only lists types that hold the claim's pods, so this
/// keeps the next round from launching again for pods already given a place.
fn smallest_allowed_allocatable(
    claim: &NodeClaim,
    types: &HashMap<&str, &Arc<InstanceType>>,
) -> Option<Resources> {
    let allowed = claim.spec.requirements.iter().find(|r| {
        r.key == labels::INSTANCE_TYPE_LABEL && r.operator == karpenter_api::common::Operator::In
    })?;
    let mut smallest: Option<Resources> = None;
    for it in allowed.values.iter().filter_map(|v| types.get(v.as_str())) {
        match smallest.as_mut() {
            Some(s) => s.min_assign(&it.allocatable),
            None => smallest = Some(it.allocatable.clone()),
        }
    }
    smallest
}

/// The nodes of the snapshot, built up as pods are assigned to them.
pub(super) struct NodeSet<'s> {
    existing: Vec<ExistingNode>,
    names: Vec<String>,
    /// Usable nodes by name.
    index: HashMap<&'s str, usize>,
    deleting: HashSet<&'s str>,
    /// Every Node's name and provider ID, to tell in-flight NodeClaims from registered ones.
    node_names: HashSet<&'s str>,
    /// Every Node's NodeClaim, by Node name.
    claims: HashMap<&'s str, &'s NodeClaim>,
    provider_ids: HashSet<&'s str>,
    /// Per usable node, the DaemonSets whose pod is already bound there.
    daemons_running: Vec<Vec<usize>>,
    /// `(node, namespace/pvc)` already counted against a CSI limit.
    volumes_seen: HashSet<(usize, String)>,
    /// Distinct (namespace, labels) of bound pods, numbered: [`BoundPod::label_set`].
    label_sets: HashMap<(Symbol, Labels), u32>,
}

impl<'s> NodeSet<'s> {
    pub fn build(
        cx: &mut Context,
        snapshot: &'s Snapshot,
        pools: &HashMap<&str, &NodePool>,
        types: &HashMap<&str, &Arc<InstanceType>>,
    ) -> Self {
        let claims_by_node: HashMap<&str, &NodeClaim> = snapshot
            .node_claims
            .iter()
            .map(std::sync::Arc::as_ref)
            .filter_map(|c| Some((c.status.as_ref()?.node_name.as_deref()?, c)))
            .collect();
        // A Node appears before the lifecycle records its name on the claim; the provider ID links them already.
        let claims_by_provider_id: HashMap<&str, &NodeClaim> = snapshot
            .node_claims
            .iter()
            .map(std::sync::Arc::as_ref)
            .filter_map(|c| Some((c.status.as_ref()?.provider_id.as_deref()?, c)))
            .collect();
        let csi_limits: HashMap<&str, Vec<(Symbol, u32)>> = snapshot
            .csi_nodes
            .iter()
            .filter_map(|c| {
                let limits = c
                    .spec
                    .drivers
                    .iter()
                    .filter_map(|d| {
                        let count = d.allocatable.as_ref()?.count?;
                        Some((cx.interner.intern(&d.name), u32::try_from(count).unwrap_or(0)))
                    })
                    .collect();
                Some((c.metadata.name.as_deref()?, limits))
            })
            .collect();
        let mut set = Self {
            existing: Vec::with_capacity(snapshot.nodes.len()),
            names: Vec::with_capacity(snapshot.nodes.len()),
            index: HashMap::with_capacity(snapshot.nodes.len()),
            deleting: HashSet::new(),
            node_names: HashSet::with_capacity(snapshot.nodes.len()),
            claims: HashMap::with_capacity(snapshot.node_claims.len()),
            provider_ids: HashSet::with_capacity(snapshot.nodes.len()),
            daemons_running: Vec::with_capacity(snapshot.nodes.len()),
            volumes_seen: HashSet::new(),
            label_sets: HashMap::new(),
        };
        for node in &snapshot.nodes {
            let Some(name) = node.metadata.name.as_deref() else {
                continue;
            };
            set.node_names.insert(name);
            let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
            if let Some(id) = provider_id {
                set.provider_ids.insert(id);
            }
            let claim = claims_by_node
                .get(name)
                .or_else(|| provider_id.and_then(|id| claims_by_provider_id.get(id)))
                .copied();
            if let Some(c) = claim {
                set.claims.insert(name, c);
            }
            if is_deleting(node) {
                set.deleting.insert(name);
                continue;
            }
            let pool = name_pool(node).and_then(|p| pools.get(p).copied());
            let mut existing = existing_node(cx, node, name, pool, claim, types, csi_limits.get(name));
            // A cordoned node takes no new pods, but its pods still count for topology.
            existing.schedulable = node.spec.as_ref().and_then(|s| s.unschedulable) != Some(true);
            set.index.insert(name, set.existing.len());
            set.existing.push(existing);
            set.names.push(name.to_string());
            set.daemons_running.push(Vec::new());
        }
        set
    }

    pub fn is_deleting(&self, name: &str) -> bool {
        self.deleting.contains(name)
    }

    /// The NodeClaim of the Node `name`, by its recorded node name or its provider ID.
    pub fn claim_of(&self, name: &str) -> Option<&'s NodeClaim> {
        self.claims.get(name).copied()
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// Whether a NodeClaim's Node is in the snapshot.
    pub fn has_node(&self, claim: &NodeClaim) -> bool {
        let status = claim.status.as_ref();
        status
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| self.node_names.contains(n))
            || status
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|p| self.provider_ids.contains(p))
    }

    /// Charges a bound pod to its node; returns it as topology sees it (unless it is terminating).
    pub fn add_bound_pod(
        &mut self,
        cx: &mut Context,
        converter: &mut PodConverter<'_, '_>,
        daemons: &DaemonPods,
        pod: &CompactPod,
        node: usize,
    ) -> Option<BoundPod> {
        let parts = converter.bound_parts(cx, pod);
        let n = &mut self.existing[node];
        n.available.sub_assign(&parts.requests);
        n.host_ports.extend(parts.host_ports);
        for (driver, id) in parts.csi {
            if self.volumes_seen.insert((node, id)) {
                match n.volumes_used.iter_mut().find(|(d, _)| *d == driver) {
                    Some((_, count)) => *count += 1,
                    None => n.volumes_used.push((driver, 1)),
                }
            }
        }
        if let Some(d) = parts.daemon_set.as_ref().and_then(|k| daemons.index_of(k)) {
            self.daemons_running[node].push(d);
        }
        let (namespace, labels, anti_affinity) = parts.topology?;
        // The replicas of a workload share one label set and one copy of its labels.
        let key = (namespace, labels);
        let (label_set, labels) = match self.label_sets.get_key_value(&key) {
            Some(((_, shared), &id)) => (id, shared.clone()),
            None => {
                let next = u32::try_from(self.label_sets.len()).unwrap_or(BoundPod::UNSHARED);
                let labels = key.1.clone();
                self.label_sets.insert(key, next);
                (next, labels)
            }
        };
        Some(BoundPod {
            namespace,
            labels,
            label_set,
            node,
            anti_affinity: anti_affinity.into(),
        })
    }

    /// Takes off each node the DaemonSet pods that will run there but are not bound yet.
    pub fn subtract_missing_daemons(&mut self, daemons: &DaemonPods) {
        let none = WellKnownKeys::none();
        for (i, node) in self.existing.iter_mut().enumerate() {
            for d in 0..daemons.pods.len() {
                if !self.daemons_running[i].contains(&d)
                    && daemons.runs_on(d, &node.taints, &node.requirements, &none)
                {
                    node.available.sub_assign(&daemons.pods[d].requests);
                }
            }
        }
    }

    /// Adds NodeClaims that have no Node yet (launched or launching), after the Nodes.
    pub fn add_in_flight_claims(
        &mut self,
        cx: &mut Context,
        snapshot: &Snapshot,
        types: &HashMap<&str, &Arc<InstanceType>>,
        daemons: &DaemonPods,
    ) {
        let none = WellKnownKeys::none();
        for claim in &snapshot.node_claims {
            if claim.metadata.deletion_timestamp.is_some() || self.has_node(claim) {
                continue;
            }
            let name = claim.metadata.name.clone().unwrap_or_default();
            let object = describe("NodeClaim", None, Some(&name));
            let labels = claim.metadata.labels.as_ref();
            let mut requirements = Requirements::from_labels(
                labels
                    .iter()
                    .flat_map(|l| l.iter())
                    .map(|(k, v)| (k.as_str(), v.as_str())),
                &mut cx.interner,
            );
            for r in claim.spec.requirements.iter() {
                match Requirement::from_api(r, &mut cx.interner) {
                    Ok(r) => {
                        if let Some(v) = r.single_value() {
                            requirements.add(Requirement::in_values(r.key(), [v]));
                        }
                    }
                    Err(e) => cx.note(object.clone(), format!("requirement ignored: {e}")),
                }
            }
            let instance_type = instance_type_of(labels, types).or_else(|| {
                let v = requirements.single_value(cx.keys.instance_type)?;
                types.get(cx.interner.resolve(v)).copied()
            });
            let status_allocatable = claim
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .filter(|a| !a.is_empty());
            let allocatable = match status_allocatable {
                Some(a) => match Resources::from_resource_list(a, &mut cx.table) {
                    Ok(r) => Some(r),
                    Err(e) => {
                        cx.note(object.clone(), format!("status.allocatable: {e}"));
                        None
                    }
                },
                None => None,
            }
            .or_else(|| instance_type.map(|it| it.allocatable.clone()))
            .or_else(|| smallest_allowed_allocatable(claim, types));
            let Some(mut available) = allocatable else {
                cx.note(
                    object,
                    "has no Node, no status.allocatable and no instance type the catalog knows; not used as a place for pods",
                );
                continue;
            };
            let nodepool = labels.and_then(|l| l.get(labels::NODEPOOL_LABEL)).cloned();
            let startup: &[karpenter_api::common::Taint] = &claim.spec.startup_taints;
            let taints: Vec<_> = claim
                .spec
                .taints
                .iter()
                .filter(|t| {
                    !is_ephemeral(&t.key)
                        && !startup
                            .iter()
                            .any(|s| s.key == t.key && s.value == t.value && s.effect == t.effect)
                })
                .map(|t| api_taint(t, &mut cx.interner))
                .collect();
            available.sub_assign(&daemons.overhead(&taints, &requirements, &none));
            self.existing.push(ExistingNode {
                name: name.clone(),
                hostname: cx.interner.intern(&name),
                requirements,
                available,
                taints,
                host_ports: Vec::new(),
                volume_limits: Vec::new(),
                volumes_used: Vec::new(),
                nodepool,
                schedulable: true,
                leaving: false,
            });
            self.names.push(name);
        }
    }

    pub fn finish(self) -> (Vec<ExistingNode>, Vec<String>) {
        (self.existing, self.names)
    }
}

fn name_pool(node: &CompactNode) -> Option<&str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::NODEPOOL_LABEL))
        .map(String::as_str)
}

fn existing_node(
    cx: &mut Context,
    node: &CompactNode,
    name: &str,
    pool: Option<&NodePool>,
    claim: Option<&NodeClaim>,
    types: &HashMap<&str, &Arc<InstanceType>>,
    csi_limits: Option<&Vec<(Symbol, u32)>>,
) -> ExistingNode {
    let object = describe("Node", None, Some(name));
    let labels = node.metadata.labels.as_ref();
    let requirements = Requirements::from_labels(
        labels
            .iter()
            .flat_map(|l| l.iter())
            .map(|(k, v)| (k.as_str(), v.as_str())),
        &mut cx.interner,
    );
    let initialized = is_initialized(node);
    let allocatable = node_resources(cx, node, claim, ResourceField::Allocatable);
    let available = allocatable
        .or_else(|| instance_type_of(labels, types).map(|it| it.allocatable.clone()))
        .unwrap_or_else(|| {
            cx.note(
                object,
                "has no status.allocatable and no instance type the catalog knows; nothing fits on it",
            );
            Resources::zero()
        });
    let nodepool = name_pool(node).map(str::to_string);
    // Until a managed node is initialized, its startup taints are expected to go away.
    let startup: Vec<&karpenter_api::common::Taint> = if nodepool.is_some() && !initialized {
        pool.iter()
            .flat_map(|p| p.spec.template.spec.startup_taints.iter())
            .chain(claim.iter().flat_map(|c| c.spec.startup_taints.iter()))
            .collect()
    } else {
        Vec::new()
    };
    // A node being rebooted comes back: its fence is no reason to launch capacity for the pods it displaced
    // (they wait for it), as upstream strips the reboot taint while the reboot is in progress.
    let rebooting = claim.is_some_and(karpenter_api::nodeclaim::is_rebooting);
    let taints = node
        .spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .filter(|t| !is_ephemeral(&t.key) && !startup.iter().any(|s| same_taint(t, s)))
        .filter(|t| !(rebooting && t.key == labels::REBOOTING_TAINT_KEY))
        .filter_map(|t| node_taint(t, &mut cx.interner))
        .collect();
    ExistingNode {
        name: name.to_string(),
        hostname: cx.interner.intern(name),
        requirements,
        available,
        taints,
        host_ports: Vec::new(),
        volume_limits: csi_limits.cloned().unwrap_or_default(),
        volumes_used: Vec::new(),
        nodepool,
        schedulable: true,
        leaving: false,
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::{BuildOptions, ScheduleInputs, build_schedule_inputs};

    fn build(objects: &[&str]) -> ScheduleInputs {
        build_schedule_inputs(&snapshot(objects), &catalog(), &BuildOptions::default())
    }

    #[test]
    fn deleting_and_disrupted_nodes_are_skipped_and_cordoned_ones_take_no_pods() {
        let deleting = node("gone", "", "").replace(
            "metadata:\n",
            "metadata:\n  deletionTimestamp: \"2024-01-01T00:00:00Z\"\n",
        );
        let built = build(&[
            &node("ok", "", ""),
            &node("cordoned", "", "unschedulable: true"),
            &node(
                "disrupted",
                "",
                "taints: [{key: karpenter.sh/disrupted, effect: NoSchedule}]",
            ),
            &deleting,
        ]);
        assert_eq!(built.node_names, vec!["ok", "cordoned"]);
        let schedulable: Vec<bool> = built.input.existing.iter().map(|n| n.schedulable).collect();
        assert_eq!(
            schedulable,
            [true, false],
            "a cordoned node keeps its pods' topology but takes no new pods"
        );
    }

    #[test]
    fn ephemeral_and_startup_taints_are_ignored_until_initialized() {
        let pool = DEFAULT_POOL.replace(
            "      requirements: []\n",
            "      requirements: []\n      startupTaints: [{key: example.com/agent, effect: NoSchedule}]\n",
        );
        let taints = "taints: [{key: node.kubernetes.io/not-ready, effect: NoSchedule}, {key: readiness.k8s.io/net, effect: NoSchedule}, {key: example.com/agent, effect: NoSchedule}, {key: dedicated, value: x, effect: NoSchedule}]";
        let built = build(&[
            &pool,
            &node("new", ", karpenter.sh/nodepool: default", taints),
            &node(
                "ready",
                ", karpenter.sh/nodepool: default, karpenter.sh/initialized: \"true\"",
                taints,
            ),
        ]);
        let keys = |n: usize| -> Vec<&str> {
            built.input.existing[n]
                .taints
                .iter()
                .map(|t| built.interner.resolve(t.key))
                .collect()
        };
        assert_eq!(keys(0), vec!["dedicated"]);
        assert_eq!(keys(1), vec!["example.com/agent", "dedicated"]);
        assert_eq!(built.input.existing[0].nodepool.as_deref(), Some("default"));
    }

    #[test]
    fn a_rebooting_nodes_fence_is_ignored_while_the_reboot_is_under_way() {
        let taints = "taints: [{key: karpenter.sh/rebooting, effect: NoSchedule}]";
        let claim = |status: &str| {
            format!(
                "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {{name: default-reg}}\nspec:\n  requirements: []\n  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\nstatus:\n  nodeName: n1\n  conditions: [{{type: Rebooting, status: \"{status}\", reason: RebootRequested, lastTransitionTime: \"2026-01-01T00:00:00Z\"}}]\n"
            )
        };
        for (status, kept) in [("True", 0), ("False", 1)] {
            let built = build(&[&node("n1", "", taints), &claim(status)]);
            assert_eq!(built.input.existing[0].taints.len(), kept, "Rebooting={status}");
        }
    }

    #[test]
    fn csinode_allocatable_becomes_volume_limits_and_bound_volumes_count() {
        let csinode = "apiVersion: storage.k8s.io/v1\nkind: CSINode\nmetadata: {name: n1}\nspec:\n  drivers: [{name: ebs.csi.aws.com, nodeID: i-1, allocatable: {count: 25}}]\n";
        let pvc = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data, namespace: default}\nspec: {storageClassName: gp3, volumeName: pv-1}\n";
        let pv = "apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: pv-1}\nspec: {csi: {driver: ebs.csi.aws.com, volumeHandle: v}}\n";
        let vol = "  volumes: [{name: d, persistentVolumeClaim: {claimName: data}}]\n";
        let built = build(&[
            &node("n1", "", ""),
            csinode,
            pvc,
            pv,
            &bound_pod("default", "a", "n1", "100m", vol),
            &bound_pod("default", "b", "n1", "100m", vol),
        ]);
        let n = &built.input.existing[0];
        let driver = built.interner.lookup("ebs.csi.aws.com").unwrap();
        assert_eq!(n.volume_limits, vec![(driver, 25)]);
        assert_eq!(
            n.volumes_used,
            vec![(driver, 1)],
            "a PVC shared by two pods counts once"
        );
    }

    #[test]
    fn in_flight_nodeclaim_becomes_an_existing_node() {
        let claim = "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata:\n  name: default-abc\n  labels: {karpenter.sh/nodepool: default}\nspec:\n  requirements:\n  - {key: node.kubernetes.io/instance-type, operator: In, values: [small]}\n  - {key: topology.kubernetes.io/zone, operator: In, values: [test-zone-1, test-zone-2]}\n  taints: [{key: dedicated, value: x, effect: NoSchedule}]\n  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n";
        let registered = "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {name: default-reg}\nspec:\n  requirements: []\n  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\nstatus: {nodeName: n1}\n";
        let ds = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent, namespace: kube-system}\nspec:\n  selector: {matchLabels: {app: agent}}\n  template:\n    metadata: {labels: {app: agent}}\n    spec:\n      tolerations: [{operator: Exists}]\n      containers: [{name: c, resources: {requests: {cpu: 100m}}}]\n";
        let built = build(&[&node("n1", "", ""), claim, registered, ds]);
        assert_eq!(built.node_names, vec!["n1", "default-abc"]);
        let c = &built.input.existing[1];
        let i = &built.interner;
        // small: 2 cpu - 100m kube-reserved - 100m DaemonSet.
        assert_eq!(c.available.cpu(), 1800);
        assert_eq!(c.nodepool.as_deref(), Some("default"));
        assert_eq!(
            c.requirements
                .single_value(i.lookup_key("node.kubernetes.io/instance-type").unwrap()),
            i.lookup("small")
        );
        assert!(
            !c.requirements
                .has(i.lookup_key("topology.kubernetes.io/zone").unwrap()),
            "only single values"
        );
        assert_eq!(c.taints.len(), 1);
        assert_eq!(c.hostname, i.lookup("default-abc").unwrap());
        // The DaemonSet has no pod on n1 yet, so it is charged there too.
        assert_eq!(built.input.existing[0].available.cpu(), 3900);
    }
}
