//! Which nodes a disruption pass may consider, and why the others are left alone.
//!
//! A candidate is a managed node (it has a NodeClaim and a NodePool), initialized, not already being deleted,
//! not nominated for a pending pod (`status.nominatedNodeName`: the pod is on its way there), not annotated `karpenter.sh/do-not-disrupt: "true"`, and holding no pod that blocks eviction. As upstream, any
//! active (neither terminal nor terminating) pod whose do-not-disrupt protection is active blocks, DaemonSet and
//! mirror pods included; then a PodDisruptionBudget blocks when it would refuse the eviction of a pod Karpenter
//! evicts (active, not a mirror pod, not tolerating the `karpenter.sh/disrupted` taint; DaemonSet pods are
//! evicted, last) — several PDBs on one pod always refuse. For the eventual
//! methods (drift), a NodeClaim with a terminationGracePeriod stays a candidate despite blocking pods: draining
//! honours the protections until the grace period ends. A node running CapacityBuffer placeholder pods is not a
//! candidate for emptiness or consolidation.

use std::sync::Arc;

use jiff::Timestamp;

use crate::{requirements::Symbol, scheduling::Labels, snapshot::CompactPod};

use super::protection::{PdbLimits, PdbView, PodDoNotDisrupt};

/// The disruption-relevant projection of a pod bound to a node.
#[derive(Debug, Clone)]
pub struct PodView {
    /// The pod as the snapshot holds it, shared: its `namespace/name` is only formatted when a message names it
    /// ([`PodView::id`]), rather than held as one more string per pod of the cluster.
    pub pod: Arc<CompactPod>,
    pub namespace: Symbol,
    pub labels: Labels,
    /// Index into `ClusterView::nodes` (32 bits: one view per pod of the cluster, so its size counts).
    pub node: u32,
    /// Owned by a DaemonSet, or a static (mirror) pod: needs no new place when its node goes.
    pub daemon_or_mirror: bool,
    /// A static (mirror) pod: the API server cannot evict it.
    pub mirror: bool,
    /// Succeeded or Failed.
    pub terminal: bool,
    /// Has a deletionTimestamp.
    pub terminating: bool,
    /// The Ready condition is True (a PDB with AlwaysAllow lets an unready pod go).
    pub ready: bool,
    pub do_not_disrupt: PodDoNotDisrupt,
    /// Tolerates `karpenter.sh/disrupted:NoSchedule`: stays on the node while it drains.
    pub tolerates_disrupted: bool,
}

impl PodView {
    /// `namespace/name`.
    pub fn id(&self) -> String {
        self.pod.id()
    }

    /// Whether draining the node would evict this pod (and so whether it must find a place elsewhere).
    pub fn is_reschedulable(&self) -> bool {
        !self.daemon_or_mirror && self.is_active() && !self.tolerates_disrupted
    }

    /// Neither terminal nor terminating: its do-not-disrupt annotation counts.
    pub fn is_active(&self) -> bool {
        !self.terminal && !self.terminating
    }

    /// Whether draining calls the Eviction API for it, so that PodDisruptionBudgets apply (DaemonSet pods too).
    pub fn is_evictable(&self) -> bool {
        self.is_active() && !self.mirror && !self.tolerates_disrupted
    }
}

/// The disruption-relevant projection of a node.
#[derive(Debug, Clone)]
pub struct NodeView {
    pub name: String,
    /// The NodeClaim behind it; `None` for nodes Karpenter does not manage.
    pub node_claim: Option<String>,
    /// The NodePool named by its `karpenter.sh/nodepool` label, when that NodePool exists.
    pub node_pool: Option<String>,
    pub initialized: bool,
    /// Being deleted, or tainted `karpenter.sh/disrupted` by a disruption in progress.
    pub deleting: bool,
    /// The Node or its NodeClaim has a deletionTimestamp (a disruption in progress aside): what expiration
    /// still deletes is the rest.
    pub deleted: bool,
    /// Its NodeClaim's `InstanceTerminating` condition is True: drained, and its instance already being
    /// terminated. Budgets no longer count it (as upstream).
    pub instance_terminating: bool,
    pub ready: bool,
    /// `karpenter.sh/do-not-disrupt: "true"` on the node.
    pub do_not_disrupt: bool,
    /// The NodeClaim sets a terminationGracePeriod.
    pub has_termination_grace_period: bool,
    /// Its NodeClaim is being rebooted (`Rebooting=True`): an in-place disruption is in flight, so no other
    /// method takes it, and it uses up the budgets until the reboot ends.
    pub rebooting: bool,
    /// Indices into `ClusterView::pods`.
    pub pods: Vec<usize>,
    /// Runs CapacityBuffer placeholder pods.
    pub holds_capacity_buffer: bool,
    /// A pending pod (`namespace/name`) the scheduler has nominated this node for: it is about to land here.
    pub nominated_for: Option<String>,
}

/// The nodes and pods a disruption pass reads.
#[derive(Debug, Clone, Default)]
pub struct ClusterView {
    pub nodes: Vec<NodeView>,
    pub pods: Vec<PodView>,
    pub pdbs: Vec<PdbView>,
}

/// Graceful methods (emptiness, consolidation) respect every protection; eventual ones (drift) proceed past
/// blocking pods on NodeClaims with a terminationGracePeriod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodClass {
    Graceful,
    Eventual,
}

/// Why a node is not a candidate, in words a user can act on; `None` when it is one.
pub fn blocked_reason(view: &ClusterView, node: usize, class: MethodClass, now: Timestamp) -> Option<String> {
    let n = &view.nodes[node];
    if n.node_claim.is_none() {
        return Some("node is not managed by Karpenter (no NodeClaim)".into());
    }
    if n.node_pool.is_none() {
        return Some("node's NodePool was not found".into());
    }
    if n.deleting {
        return Some("node is already being deleted".into());
    }
    if n.rebooting {
        return Some("node is rebooting".into());
    }
    if !n.initialized {
        return Some("node is not initialized yet".into());
    }
    if let Some(pod) = &n.nominated_for {
        return Some(format!("node is nominated for pending pod {pod}"));
    }
    if n.do_not_disrupt {
        return Some("node has karpenter.sh/do-not-disrupt".into());
    }
    if class == MethodClass::Eventual && n.has_termination_grace_period {
        // Draining will honour the pods' protections until the NodeClaim's terminationGracePeriod ends.
        return None;
    }
    pod_blocker(view, node, now)
}

/// The first pod that blocks a voluntary disruption of the node, as upstream checks them: do-not-disrupt on any
/// active pod first, then the PodDisruptionBudgets of the pods eviction would call on.
fn pod_blocker(view: &ClusterView, node: usize, now: Timestamp) -> Option<String> {
    let pods = || view.nodes[node].pods.iter().map(|&p| &view.pods[p]);
    if let Some(pod) = pods().find(|p| p.is_active() && p.do_not_disrupt.blocks(now)) {
        return Some(format!("pod {} has karpenter.sh/do-not-disrupt", pod.id()));
    }
    let limits = PdbLimits::new(&view.pdbs);
    pods().filter(|p| p.is_evictable()).find_map(|pod| {
        let block = limits
            .check(&view.pdbs, pod.namespace, &pod.labels, pod.ready)
            .err()?;
        Some(format!("pod {} {block}", pod.id()))
    })
}

/// Whether a node's pods all leave with it and it runs no CapacityBuffer placeholder: what emptiness removes.
pub fn is_empty(view: &ClusterView, node: usize) -> bool {
    let n = &view.nodes[node];
    !n.holds_capacity_buffer && n.pods.iter().all(|&p| !view.pods[p].is_reschedulable())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disruption::protection::DoNotDisrupt;
    use crate::{
        requirements::LabelInterner,
        scheduling::{LabelSelector, SelectorExpression, SelectorOperator},
    };

    #[test]
    fn a_pod_view_stays_six_words() {
        // One view per pod of the cluster each pass: at 600,000 pods every word is 4.6 MiB.
        assert!(size_of::<PodView>() <= 48, "{}", size_of::<PodView>());
        assert_eq!(size_of::<PodDoNotDisrupt>(), 8);
    }

    #[test]
    fn a_pod_without_do_not_disrupt_reads_as_no() {
        assert_eq!(*PodDoNotDisrupt::default(), DoNotDisrupt::No);
        assert_eq!(
            PodDoNotDisrupt::from(DoNotDisrupt::No),
            PodDoNotDisrupt::default()
        );
        let always = PodDoNotDisrupt::from(DoNotDisrupt::Always);
        assert!(always.blocks(at("2026-12-02T11:00:00Z")));
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    struct Fx {
        i: LabelInterner,
        view: ClusterView,
    }

    impl Fx {
        fn new() -> Self {
            let mut fx = Self {
                i: LabelInterner::new(),
                view: ClusterView::default(),
            };
            fx.view.nodes.push(NodeView {
                name: "node-1".into(),
                node_claim: Some("default-abc".into()),
                node_pool: Some("default".into()),
                initialized: true,
                deleting: false,
                rebooting: false,
                deleted: false,
                instance_terminating: false,
                ready: true,
                do_not_disrupt: false,
                has_termination_grace_period: false,
                pods: Vec::new(),
                holds_capacity_buffer: false,
                nominated_for: None,
            });
            fx
        }

        fn pod(&mut self, name: &str) -> usize {
            let mut compact = CompactPod::default();
            compact.metadata.name = Some(name.into());
            compact.metadata.namespace = Some("default".into());
            let pod = PodView {
                pod: Arc::new(compact),
                namespace: self.i.intern("default"),
                labels: Labels::new(vec![(self.i.intern_key("app"), self.i.intern("web"))]),
                node: 0,
                daemon_or_mirror: false,
                mirror: false,
                terminal: false,
                terminating: false,
                ready: true,
                do_not_disrupt: DoNotDisrupt::No.into(),
                tolerates_disrupted: false,
            };
            self.view.pods.push(pod);
            let idx = self.view.pods.len() - 1;
            self.view.nodes[0].pods.push(idx);
            idx
        }

        fn pdb(&mut self, allowed: i64) {
            let app = self.i.intern_key("app");
            let web = self.i.intern("web");
            self.view.pdbs.push(PdbView {
                name: "default/web".into(),
                namespace: self.i.intern("default"),
                selector: LabelSelector {
                    expressions: vec![SelectorExpression {
                        key: app,
                        operator: SelectorOperator::In,
                        values: vec![web],
                    }],
                },
                disruptions_allowed: allowed,
                always_allow_unhealthy: false,
            });
        }
    }

    const NOW: &str = "2026-12-02T10:00:00Z";

    #[test]
    fn a_managed_initialized_node_is_a_candidate() {
        let mut fx = Fx::new();
        fx.pod("a");
        assert_eq!(blocked_reason(&fx.view, 0, MethodClass::Graceful, at(NOW)), None);
    }

    #[test]
    fn unmanaged_deleting_uninitialized_and_annotated_nodes_are_not_candidates() {
        for (edit, reason) in [
            (
                (|n: &mut NodeView| n.node_claim = None) as fn(&mut NodeView),
                "not managed",
            ),
            (|n| n.node_pool = None, "NodePool was not found"),
            (|n| n.deleting = true, "already being deleted"),
            (|n| n.rebooting = true, "node is rebooting"),
            (|n| n.initialized = false, "not initialized"),
            (
                |n| n.do_not_disrupt = true,
                "node has karpenter.sh/do-not-disrupt",
            ),
        ] {
            let mut fx = Fx::new();
            edit(&mut fx.view.nodes[0]);
            let why = blocked_reason(&fx.view, 0, MethodClass::Graceful, at(NOW)).unwrap();
            assert!(why.contains(reason), "{why}");
        }
    }

    #[test]
    fn a_do_not_disrupt_pod_blocks_until_its_duration_ends() {
        let mut fx = Fx::new();
        let p = fx.pod("batch");
        fx.view.pods[p].do_not_disrupt = DoNotDisrupt::Until(at("2026-12-02T11:00:00Z")).into();
        let why = blocked_reason(&fx.view, 0, MethodClass::Graceful, at(NOW)).unwrap();
        assert_eq!(why, "pod default/batch has karpenter.sh/do-not-disrupt");
        assert_eq!(
            blocked_reason(&fx.view, 0, MethodClass::Graceful, at("2026-12-02T11:00:01Z")),
            None
        );
    }

    #[test]
    fn a_pdb_that_allows_no_eviction_blocks_graceful_methods() {
        let mut fx = Fx::new();
        fx.pod("web-1");
        fx.pdb(0);
        let why = blocked_reason(&fx.view, 0, MethodClass::Graceful, at(NOW)).unwrap();
        assert!(
            why.contains("PodDisruptionBudget default/web allows no more disruptions"),
            "{why}"
        );
        fx.view.pdbs[0].disruptions_allowed = 1;
        assert_eq!(blocked_reason(&fx.view, 0, MethodClass::Graceful, at(NOW)), None);
    }

    #[test]
    fn terminating_and_terminal_pods_do_not_block() {
        let mut fx = Fx::new();
        fx.pdb(0);
        for edit in [(|p: &mut PodView| p.terminal = true) as fn(&mut PodView), |p| {
            p.terminating = true
        }] {
            let p = fx.pod("x");
            fx.view.pods[p].do_not_disrupt = DoNotDisrupt::Always.into();
            edit(&mut fx.view.pods[p]);
        }
        assert_eq!(blocked_reason(&fx.view, 0, MethodClass::Graceful, at(NOW)), None);
        assert!(is_empty(&fx.view, 0), "none of those pods needs a new place");
    }

    #[test]
    fn do_not_disrupt_on_daemonset_and_mirror_pods_blocks_as_upstream() {
        for edit in [
            (|p: &mut PodView| p.daemon_or_mirror = true) as fn(&mut PodView),
            |p| {
                p.daemon_or_mirror = true;
                p.mirror = true;
            },
            |p| p.tolerates_disrupted = true,
        ] {
            let mut fx = Fx::new();
            let p = fx.pod("agent");
            edit(&mut fx.view.pods[p]);
            assert!(is_empty(&fx.view, 0), "the pod needs no new place");
            assert_eq!(blocked_reason(&fx.view, 0, MethodClass::Graceful, at(NOW)), None);
            fx.view.pods[p].do_not_disrupt = DoNotDisrupt::Always.into();
            assert_eq!(
                blocked_reason(&fx.view, 0, MethodClass::Graceful, at(NOW)).as_deref(),
                Some("pod default/agent has karpenter.sh/do-not-disrupt"),
                "an active pod's do-not-disrupt blocks whatever owns it"
            );
        }
    }

    #[test]
    fn pdbs_apply_to_daemonset_pods_but_not_to_pods_eviction_skips() {
        let mut fx = Fx::new();
        fx.pdb(0);
        let p = fx.pod("agent");
        fx.view.pods[p].daemon_or_mirror = true;
        let why = blocked_reason(&fx.view, 0, MethodClass::Graceful, at(NOW)).unwrap();
        assert!(why.contains("PodDisruptionBudget default/web"), "{why}");
        for edit in [(|p: &mut PodView| p.mirror = true) as fn(&mut PodView), |p| {
            p.tolerates_disrupted = true
        }] {
            let mut pod = fx.view.pods[p].clone();
            edit(&mut pod);
            let mut view = fx.view.clone();
            view.pods[p] = pod;
            assert_eq!(blocked_reason(&view, 0, MethodClass::Graceful, at(NOW)), None);
        }
    }

    #[test]
    fn eventual_methods_proceed_past_blocking_pods_with_a_termination_grace_period() {
        let mut fx = Fx::new();
        let p = fx.pod("batch");
        fx.view.pods[p].do_not_disrupt = DoNotDisrupt::Always.into();
        assert!(
            blocked_reason(&fx.view, 0, MethodClass::Eventual, at(NOW)).is_some(),
            "no grace period: blocked"
        );
        fx.view.nodes[0].has_termination_grace_period = true;
        assert_eq!(blocked_reason(&fx.view, 0, MethodClass::Eventual, at(NOW)), None);
        assert!(
            blocked_reason(&fx.view, 0, MethodClass::Graceful, at(NOW)).is_some(),
            "graceful methods still wait"
        );
    }

    #[test]
    fn a_node_holding_capacity_buffer_headroom_is_not_empty() {
        let mut fx = Fx::new();
        assert!(is_empty(&fx.view, 0));
        fx.view.nodes[0].holds_capacity_buffer = true;
        assert!(!is_empty(&fx.view, 0));
    }
}
