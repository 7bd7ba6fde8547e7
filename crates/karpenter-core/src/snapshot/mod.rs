//! Turning Kubernetes objects into the scheduler's input: a [`Snapshot`] holds the objects as read (from files
//! for `karpenter schedule`, or from the state cache), and [`build_schedule_inputs`] converts them once, at the
//! edge, into the compact, interned [`SchedulingInput`] the simulator runs on.
//!
//! - `load`: reading YAML/JSON documents into a snapshot, noting unknown kinds and malformed objects;
//! - `context`: the interner, resource table and notes shared by every conversion;
//! - `selectors`: label selectors and the namespaces a pod-affinity term counts pods in;
//! - `taints`: taints and tolerations;
//! - `volumes`: PVC/PV/StorageClass topology and CSI drivers;
//! - `pods`: which pods are pending, bound or rescheduled, and the pod conversion;
//! - `daemonsets`: the DaemonSet pods every node runs;
//! - `nodes`: existing nodes and in-flight NodeClaims;
//! - `overlays`: NodeOverlay price and capacity changes;
//! - `nodepools`: NodePools as NodeClaim templates;
//! - `buffers`: CapacityBuffer placeholder pods, and what each buffer resolves to (for its status);
//! - `static_claims`: the NodeClaims a static NodePool is kept at;
//! - `disruption_view`: the projection disruption decisions read (nodes, protections, PDBs);
//! - `disruption_inputs`: everything a disruption pass reads (pools, claims, the base scheduling input).
//!
//! Everything is indexed once (pods by node, PVCs by namespace/name, ...) so conversion stays linear in the
//! snapshot's size.

mod buffers;
pub mod compact_node;
pub mod compact_pod;
mod context;
mod daemonsets;
mod default_spread;
mod disruption_inputs;
mod disruption_view;
mod load;
mod node_resources;
mod nodepools;
mod nodes;
mod overlay_prices;
mod overlays;
pub mod pod_requests;
pub(crate) mod pods;
mod selectors;
mod static_claims;
mod taints;
mod volumes;

#[cfg(test)]
pub(crate) mod test_support;

use std::{collections::HashMap, fmt, sync::Arc};

use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet},
    core::v1::{
        Namespace, PersistentVolume, PersistentVolumeClaim, PodTemplate, ReplicationController, Service,
        TopologySpreadConstraint,
    },
    policy::v1::PodDisruptionBudget,
    storage::v1::{CSINode, StorageClass},
};
use karpenter_api::{
    capacitybuffer::CapacityBuffer, ec2nodeclass::EC2NodeClass, label_policy::LabelPolicy,
    nodeclaim::NodeClaim, nodeoverlay::NodeOverlay, nodepool::NodePool,
};

use crate::{
    catalog::CatalogFile,
    instance_type::{self, InstanceType},
    requirements::{LabelInterner, WellKnownKeys},
    resources::ResourceTable,
    scheduling::{SchedulingInput, SchedulingSettings},
};

use context::Context;

pub use buffers::{BufferPods, BufferResolution, ResolvedBuffer, UnresolvedBuffer, resolve_buffers};
pub use compact_node::{
    CompactNode, CompactNodeMeta, CompactNodeStatus, LabelLookup, NodeLabels, NodeSharing, label_in,
};
pub use compact_pod::{CompactPod, CompactPodTemplate, PodSharing};

pub use disruption_inputs::{ClaimInfo, DisruptionInputs, PoolInfo, build_disruption_inputs};
pub use disruption_view::build_cluster_view;
pub use overlay_prices::apply_overlay_prices;
pub use overlays::{OverlayProblem, OverlayVerdict};
pub use static_claims::{StaticClaims, static_node_claims};

/// The Kubernetes objects a decision reads, as read from files or the state cache.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Shared, so a state cache can hand out snapshots without copying its pods.
    pub pods: Vec<Arc<CompactPod>>,
    /// Shared for the same reason: a decision reads its nodes and NodeClaims, it never changes them, and a cache
    /// of 5,000 of each would otherwise be copied (tens of MB) for every decision.
    pub nodes: Vec<Arc<CompactNode>>,
    pub node_claims: Vec<Arc<NodeClaim>>,
    pub node_pools: Vec<NodePool>,
    pub daemon_sets: Vec<DaemonSet>,
    pub pdbs: Vec<PodDisruptionBudget>,
    pub pvcs: Vec<PersistentVolumeClaim>,
    pub pvs: Vec<PersistentVolume>,
    pub storage_classes: Vec<StorageClass>,
    pub csi_nodes: Vec<CSINode>,
    pub namespaces: Vec<Namespace>,
    pub node_overlays: Vec<NodeOverlay>,
    pub capacity_buffers: Vec<CapacityBuffer>,
    pub ec2_node_classes: Vec<EC2NodeClass>,
    pub replica_sets: Vec<ReplicaSet>,
    pub stateful_sets: Vec<StatefulSet>,
    pub deployments: Vec<Deployment>,
    /// Services and ReplicationControllers: what, with ReplicaSets and StatefulSets, kube-scheduler deduces a
    /// pod's default topology spread selector from (only read with default constraints configured).
    pub services: Vec<Service>,
    pub replication_controllers: Vec<ReplicationController>,
    /// PodTemplates, which CapacityBuffers' `podTemplateRef` names.
    pub pod_templates: Vec<PodTemplate>,
    /// Nodes and in-flight NodeClaims, by name, that the provisioner's last round placed CapacityBuffer
    /// placeholder pods on (the state cache's; a snapshot read from files has placeholders only as pods):
    /// disruption leaves them be, as it does a node running placeholder pods.
    pub capacity_buffer_nodes: std::collections::HashSet<String>,
}

/// Something worth telling the user about the snapshot: an object skipped, ignored or only partly used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotNote {
    /// `Kind ns/name` (or `Kind name`), or `document 3 of file.yaml`.
    pub object: String,
    pub message: String,
}

impl SnapshotNote {
    pub fn new(object: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            object: object.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for SnapshotNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.message)
    }
}

/// How the snapshot is turned into scheduling input.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub settings: SchedulingSettings,
    /// Which label rules NodePools and NodeOverlays are validated against, and whether the AWS instance labels
    /// are well known.
    pub label_policy: LabelPolicy,
    /// More keys a pod may select without the NodePool declaring them (a catalog file's `wellKnownLabels`).
    pub extra_well_known_labels: Vec<String>,
    /// The CapacityBuffer feature gate.
    pub capacity_buffers: bool,
    /// The NodeOverlay feature gate.
    pub node_overlays: bool,
    /// Whether a NodePool whose status has no `Ready` condition yet launches NodeClaims. A NodePool whose `Ready`
    /// is False or Unknown never does (upstream's provisioner uses only NodePools whose `Ready` is True). The
    /// controller sets this to false, as upstream, where the NodePool status controller evaluates every
    /// NodePool within seconds; `karpenter schedule` keeps it true, since a NodePool written by hand for a
    /// snapshot has no status at all.
    pub unevaluated_nodepools: bool,
    /// kube-scheduler's default topology spread constraints (`SCHEDULER_CONFIG`), applied to each pod that
    /// declares none of its own, with a selector deduced per pod (see `default_spread`).
    pub default_spread: Vec<TopologySpreadConstraint>,
}

impl Default for BuildOptions {
    fn default() -> Self {
        Self {
            settings: SchedulingSettings::default(),
            label_policy: LabelPolicy::Aws,
            extra_well_known_labels: Vec::new(),
            capacity_buffers: false,
            node_overlays: false,
            unevaluated_nodepools: true,
            default_spread: Vec::new(),
        }
    }
}

/// The catalog's instance types interned in `cx`; a type that cannot be read is noted and left out.
fn intern_catalog(cx: &mut Context, catalog: &CatalogFile) -> Vec<Arc<InstanceType>> {
    intern_catalog_offered(cx, catalog).0
}

/// [`intern_catalog`], with which of the interned types each NodePool is offered.
fn intern_catalog_offered(
    cx: &mut Context,
    catalog: &CatalogFile,
) -> (Vec<Arc<InstanceType>>, nodepools::PoolOffers) {
    let mut instance_types: Vec<Arc<InstanceType>> = Vec::with_capacity(catalog.instance_types.len());
    let mut read = Vec::with_capacity(catalog.instance_types.len());
    for (i, it) in catalog.instance_types.iter().enumerate() {
        match instance_type::from_catalog(it, &mut cx.interner, &mut cx.table) {
            Ok(t) => {
                instance_types.push(Arc::new(t));
                read.push(i);
            }
            Err(e) => cx.note(format!("instance type {}", it.name), e.to_string()),
        }
    }
    let offers = nodepools::PoolOffers::new(&catalog.node_pool_types, &read);
    (instance_types, offers)
}

/// The scheduler's input and what is needed to read its answer back.
#[derive(Debug, Clone)]
pub struct ScheduleInputs {
    pub input: SchedulingInput,
    pub interner: LabelInterner,
    pub table: ResourceTable,
    /// Per `input.pods[i]`: `namespace/name`.
    pub pod_names: Vec<String>,
    /// Per `input.existing[i]`: the node's (or in-flight NodeClaim's) name.
    pub node_names: Vec<String>,
    /// Per `input.templates[i]`: the NodePool's name.
    pub template_names: Vec<String>,
    /// CapacityBuffer placeholder pods, per buffer: they follow the real pending pods in `input.pods` and are
    /// no pods of the cluster (no events, no nominations).
    pub buffer_pods: Vec<BufferPods>,
    pub notes: Vec<SnapshotNote>,
}

impl ScheduleInputs {
    /// Whether `input.pods[pod]` is a CapacityBuffer placeholder.
    pub fn is_buffer_pod(&self, pod: usize) -> bool {
        self.buffer_pods.first().is_some_and(|b| pod >= b.pods.start)
    }
}

/// Converts a snapshot into scheduling input: pending pods (and pods on nodes being deleted), existing nodes and
/// in-flight NodeClaims with what is left on them, and a NodeClaim template per NodePool with the catalog's
/// instance types it may launch.
pub fn build_schedule_inputs(
    snapshot: &Snapshot,
    catalog: &CatalogFile,
    options: &BuildOptions,
) -> ScheduleInputs {
    let mut cx = Context::new();
    let well_known = well_known_keys(&mut cx.interner, catalog, options);

    // The catalog is interned once; NodePools share these instance types (each offered its own versions).
    let (instance_types, offers) = intern_catalog_offered(&mut cx, catalog);
    // Nodes and in-flight claims look their type up by name: the first version of a name stands for it.
    let mut types_by_name: HashMap<&str, &Arc<InstanceType>> = HashMap::with_capacity(instance_types.len());
    for t in &instance_types {
        types_by_name.entry(t.name.as_str()).or_insert(t);
    }

    let namespaces = selectors::NamespaceIndex::new(&snapshot.namespaces);
    let volumes = volumes::VolumeIndex::new(snapshot);
    let pools: HashMap<&str, &NodePool> = snapshot
        .node_pools
        .iter()
        .filter_map(|p| Some((p.metadata.name.as_deref()?, p)))
        .collect();
    let daemons = daemonsets::DaemonPods::build(&mut cx, snapshot);

    let mut node_set = nodes::NodeSet::build(&mut cx, snapshot, &pools, &types_by_name);
    let default_spread = default_spread::DefaultSpread::new(snapshot, &options.default_spread);
    let mut converter = pods::PodConverter::new(&namespaces, &volumes, default_spread);
    let classified = pods::classify(snapshot, &node_set);
    let mut bound_pods = Vec::with_capacity(classified.bound.len());
    for bound in &classified.bound {
        if let Some(b) = node_set.add_bound_pod(&mut cx, &mut converter, &daemons, bound.pod, bound.node) {
            bound_pods.push(b);
        }
    }
    node_set.subtract_missing_daemons(&daemons);
    node_set.add_in_flight_claims(&mut cx, snapshot, &types_by_name, &daemons);

    let mut input_pods = Vec::with_capacity(classified.pending.len());
    let mut pod_names = Vec::with_capacity(classified.pending.len());
    for pod in &classified.pending {
        if let Some(p) = converter.convert_pending(&mut cx, pod) {
            pod_names.push(p.id.clone());
            input_pods.push(p);
        }
    }
    let mut buffer_pods = Vec::new();
    if options.capacity_buffers {
        for (buffer, pods) in buffers::buffer_pods(&mut cx, snapshot, &mut converter) {
            let start = input_pods.len();
            for p in pods {
                pod_names.push(p.id.clone());
                input_pods.push(p);
            }
            buffer_pods.push(BufferPods {
                buffer,
                pods: start..input_pods.len(),
            });
        }
    } else if !snapshot.capacity_buffers.is_empty() {
        cx.note(
            "CapacityBuffer",
            format!(
                "the CapacityBuffer feature gate is off: {} buffer(s) ignored",
                snapshot.capacity_buffers.len()
            ),
        );
    }

    let overlays = if options.node_overlays {
        overlays::usable_overlays(&mut cx, snapshot, options.label_policy, &instance_types)
    } else {
        if !snapshot.node_overlays.is_empty() {
            cx.note(
                "NodeOverlay",
                format!(
                    "the NodeOverlay feature gate is off: {} overlay(s) ignored",
                    snapshot.node_overlays.len()
                ),
            );
        }
        overlays::Overlays::default()
    };
    let usage = nodepools::pool_usage(&mut cx, snapshot, &node_set, &types_by_name);
    let (templates, template_names, skipped_nodepools) = nodepools::build_templates(
        &mut cx,
        &nodepools::TemplateSources {
            snapshot,
            policy: options.label_policy,
            instance_types: &instance_types,
            offers: &offers,
            overlays: &overlays,
            daemons: &daemons,
            usage: &usage,
            well_known: &well_known,
            unevaluated_nodepools: options.unevaluated_nodepools,
        },
    );

    let (existing, node_names) = node_set.finish();
    let Context {
        interner,
        table,
        notes,
        ..
    } = cx;
    ScheduleInputs {
        input: SchedulingInput {
            templates,
            existing,
            bound_pods,
            pods: input_pods,
            well_known,
            settings: options.settings.clone(),
            skipped_nodepools,
        },
        interner,
        table,
        pod_names,
        node_names,
        template_names,
        buffer_pods,
        notes,
    }
}

/// Whether each NodeOverlay of `snapshot` is applied, and why not (a validation failure naming the field, or a
/// conflict naming the overlay that wins it), judged over the snapshot's NodePools and the catalog's instance
/// types exactly as [`build_schedule_inputs`] applies overlays: what the NodeOverlay status controller writes.
/// In the order of `snapshot.node_overlays`.
pub fn node_overlay_verdicts(
    snapshot: &Snapshot,
    catalog: &CatalogFile,
    policy: LabelPolicy,
) -> Vec<OverlayVerdict> {
    let mut cx = Context::new();
    let instance_types = intern_catalog(&mut cx, catalog);
    overlays::usable_overlays(&mut cx, snapshot, policy, &instance_types).verdicts(&snapshot.node_overlays)
}

/// Why `pool` may not launch NodeClaims for want of readiness (its `Ready` condition False or Unknown, or absent
/// unless `unevaluated` allows that), or `None` when it may: the provisioner's rule, which static NodePools
/// follow too.
pub fn nodepool_not_ready(pool: &NodePool, unevaluated: bool) -> Option<String> {
    nodepools::not_ready(pool, unevaluated)
}

/// The core well-known keys, the AWS instance labels under the AWS policy, the catalog's `wellKnownLabels` and
/// any extra keys.
fn well_known_keys(
    interner: &mut LabelInterner,
    catalog: &CatalogFile,
    options: &BuildOptions,
) -> WellKnownKeys {
    let mut keys = WellKnownKeys::core(interner);
    if options.label_policy == LabelPolicy::Aws {
        for k in karpenter_api::labels::AWS_INSTANCE_LABELS {
            keys.insert(interner.intern_key(k));
        }
    }
    for k in catalog
        .well_known_labels
        .iter()
        .chain(&options.extra_well_known_labels)
    {
        keys.insert(interner.intern_key(k));
    }
    keys
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::test_support::*;
    use super::*;

    #[test]
    fn well_known_keys_follow_the_label_policy_and_extra_labels() {
        let snap = Snapshot::default();
        let mut options = BuildOptions {
            extra_well_known_labels: vec!["example.com/size".into()],
            ..Default::default()
        };
        let built = build_schedule_inputs(&snap, &catalog(), &options);
        let wk = &built.input.well_known;
        let i = &built.interner;
        assert!(wk.contains(i.lookup_key("karpenter.k8s.aws/instance-family").unwrap()));
        assert!(wk.contains(i.lookup_key("example.com/size").unwrap()));
        assert!(
            wk.contains(i.lookup_key("size").unwrap()),
            "the catalog's wellKnownLabels are included"
        );
        assert!(wk.contains(i.lookup_key("topology.kubernetes.io/zone").unwrap()));
        options.label_policy = LabelPolicy::Core;
        let built = build_schedule_inputs(&snap, &catalog(), &options);
        let family = built.interner.lookup_key("karpenter.k8s.aws/instance-family");
        assert!(family.is_none_or(|k| !built.input.well_known.contains(k)));
    }

    #[test]
    fn a_snapshot_schedules_end_to_end() {
        let snap = snapshot(&[DEFAULT_POOL, &pending_pod("default", "web", "500m", "")]);
        let mut built = build_schedule_inputs(&snap, &catalog(), &BuildOptions::default());
        assert!(built.notes.is_empty(), "{:?}", built.notes);
        assert_eq!(built.pod_names, vec!["default/web"]);
        assert_eq!(built.template_names, vec!["default"]);
        let results = crate::scheduling::schedule(&built.input, &mut built.interner, &built.table);
        assert!(results.pod_errors.is_empty(), "{:?}", results.pod_errors);
        assert_eq!(results.new_node_claims.len(), 1);
        assert_eq!(results.new_node_claims[0].pods, vec![0]);
    }

    #[test]
    fn each_nodepool_launches_the_versions_of_a_type_its_node_class_offers() {
        // Two node classes see "small" differently (their subnets are in different zones): pool "east" was
        // offered a version in test-zone-1 only, pool "west" one in test-zone-3 only.
        let pool = |name: &str| DEFAULT_POOL.replace("name: default}", &format!("name: {name}}}"));
        let mut catalog = catalog();
        catalog.instance_types.truncate(1);
        let mut west = catalog.instance_types[0].clone();
        catalog.instance_types[0]
            .offerings
            .retain(|o| o.zone == "test-zone-1");
        west.offerings.retain(|o| o.zone == "test-zone-3");
        catalog.instance_types.push(west);
        catalog.node_pool_types = [("east".to_string(), vec![0]), ("west".to_string(), vec![1])].into();
        let pod = |name: &str, pool: &str| {
            pending_pod(
                "default",
                name,
                "500m",
                &format!("  nodeSelector: {{karpenter.sh/nodepool: {pool}}}\n"),
            )
        };
        let snap = snapshot(&[&pool("east"), &pool("west"), &pod("a", "east"), &pod("b", "west")]);

        let mut built = build_schedule_inputs(&snap, &catalog, &BuildOptions::default());
        let results = crate::scheduling::schedule(&built.input, &mut built.interner, &built.table);

        assert!(results.pod_errors.is_empty(), "{:?}", results.pod_errors);
        let zones: BTreeMap<String, String> = results
            .new_node_claims
            .iter()
            .map(|c| {
                let launch = c.launch.as_ref().expect("a launch");
                (
                    built.template_names[c.template].clone(),
                    built.interner.resolve(launch.offering.zone).to_string(),
                )
            })
            .collect();
        assert_eq!(
            zones,
            BTreeMap::from([
                ("east".to_string(), "test-zone-1".to_string()),
                ("west".to_string(), "test-zone-3".to_string()),
            ])
        );
    }

    #[test]
    fn a_nodepool_that_is_not_ready_launches_nothing_and_the_pod_is_told_why() {
        let ready = |status: &str| {
            format!(
                "{DEFAULT_POOL}status:\n  conditions:\n  - {{type: Ready, status: \"{status}\", reason: UnhealthyDependents, message: NodeClassReady=False, lastTransitionTime: \"2026-01-01T00:00:00Z\"}}\n"
            )
        };
        let pod = pending_pod("default", "web", "500m", "");
        for status in ["False", "Unknown"] {
            let snap = snapshot(&[&ready(status), &pod]);
            let mut built = build_schedule_inputs(&snap, &catalog(), &BuildOptions::default());
            assert!(built.template_names.is_empty(), "{status}");
            let results = crate::scheduling::schedule(&built.input, &mut built.interner, &built.table);
            assert!(results.new_node_claims.is_empty());
            let error = &results.pod_errors[0].1;
            assert!(
                error.contains(&format!(
                    "NodePool \"default\" was skipped: it is not ready (Ready={status} (UnhealthyDependents): NodeClassReady=False)"
                )),
                "{error}"
            );
        }
        // Ready: used.
        let snap = snapshot(&[&ready("True"), &pod]);
        let built = build_schedule_inputs(&snap, &catalog(), &BuildOptions::default());
        assert_eq!(built.template_names, vec!["default"]);
        // No status yet: used by `karpenter schedule`, not by the controller (as upstream).
        let snap = snapshot(&[DEFAULT_POOL, &pod]);
        let strict = BuildOptions {
            unevaluated_nodepools: false,
            ..BuildOptions::default()
        };
        let mut built = build_schedule_inputs(&snap, &catalog(), &strict);
        assert!(built.template_names.is_empty());
        let results = crate::scheduling::schedule(&built.input, &mut built.interner, &built.table);
        assert!(
            results.pod_errors[0].1.contains("it has no Ready condition yet"),
            "{:?}",
            results.pod_errors
        );
    }
}
