//! The disruption projection of a snapshot: each node with its NodeClaim, NodePool and readiness, each bound pod
//! with what protects it, and the PodDisruptionBudgets, as `disruption::candidates` reads them.

use std::collections::HashMap;

use karpenter_api::{labels, nodeclaim::conditions};

use crate::{
    disruption::{
        candidates::{ClusterView, NodeView, PodView},
        protection::{DoNotDisrupt, PdbView},
    },
    requirements::LabelInterner,
    scheduling::Labels,
};

use super::{
    Snapshot, label_in,
    nodes::is_deleting,
    pods::{daemon_set_owner, is_mirror, is_terminal, is_terminating, node_name, pod_id},
    selectors::label_selector,
    taints::tolerations,
};

fn annotation<'a>(
    annotations: Option<&'a std::collections::BTreeMap<String, String>>,
    key: &str,
) -> Option<&'a str> {
    annotations.and_then(|a| a.get(key)).map(String::as_str)
}

/// Whether the NodeClaim's condition `kind` is True.
fn has_true_condition(claim: &karpenter_api::nodeclaim::NodeClaim, kind: &str) -> bool {
    claim.status.as_ref().is_some_and(|s| {
        karpenter_api::common::find_condition(&s.conditions, kind)
            .is_some_and(|c| c.status == karpenter_api::common::ConditionStatus::True)
    })
}

/// Builds the view. Pods bound to nodes missing from the snapshot are left out (they block nothing here).
pub fn build_cluster_view(snapshot: &Snapshot, interner: &mut LabelInterner) -> ClusterView {
    let pools: std::collections::HashSet<&str> = snapshot
        .node_pools
        .iter()
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    let claims_by_node: HashMap<&str, &karpenter_api::nodeclaim::NodeClaim> = snapshot
        .node_claims
        .iter()
        .map(std::sync::Arc::as_ref)
        .filter_map(|c| Some((c.status.as_ref()?.node_name.as_deref()?, c)))
        .collect();
    let mut view = ClusterView::default();
    view.nodes.reserve_exact(snapshot.nodes.len());
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(snapshot.nodes.len());
    for node in &snapshot.nodes {
        let Some(name) = node.metadata.name.as_deref() else {
            continue;
        };
        let node_labels = node.metadata.labels.as_ref();
        let claim = claims_by_node.get(name).copied();
        let node_pool = label_in(node_labels, labels::NODEPOOL_LABEL)
            .filter(|p| pools.contains(p))
            .map(str::to_string);
        let initialized = label_in(node_labels, labels::INITIALIZED_LABEL) == Some("true")
            || claim.is_some_and(|c| has_true_condition(c, conditions::INITIALIZED));
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True");
        let holds_capacity_buffer = snapshot.capacity_buffer_nodes.contains(name)
            || claim
                .and_then(|c| c.metadata.name.as_deref())
                .is_some_and(|c| snapshot.capacity_buffer_nodes.contains(c));
        index.insert(name, view.nodes.len());
        view.nodes.push(NodeView {
            name: name.to_string(),
            node_claim: claim.and_then(|c| c.metadata.name.clone()),
            node_pool,
            initialized,
            deleting: is_deleting(node) || claim.is_some_and(|c| c.metadata.deletion_timestamp.is_some()),
            deleted: node.metadata.deletion_timestamp.is_some()
                || claim.is_some_and(|c| c.metadata.deletion_timestamp.is_some()),
            instance_terminating: claim
                .is_some_and(|c| has_true_condition(c, conditions::INSTANCE_TERMINATING)),
            ready,
            do_not_disrupt: DoNotDisrupt::for_node(annotation(
                node.metadata.annotations.as_ref(),
                labels::DO_NOT_DISRUPT_ANNOTATION,
            )),
            has_termination_grace_period: claim.is_some_and(|c| c.spec.termination_grace_period.is_some()),
            rebooting: claim.is_some_and(karpenter_api::nodeclaim::is_rebooting),
            pods: Vec::new(),
            holds_capacity_buffer,
            nominated_for: None,
        });
    }
    let disrupted_key = interner.intern_key(labels::DISRUPTED_TAINT_KEY);
    let disrupted = crate::scheduling::Taint {
        key: disrupted_key,
        value: None,
        effect: crate::scheduling::TaintEffect::NoSchedule,
    };
    // Pods that share their metadata group (the replicas of a workload, as the state cache keeps them) share one
    // copy of their interned labels: keyed by the group's address, which the snapshot keeps alive throughout.
    let mut labels_of_group: HashMap<usize, Labels> = HashMap::new();
    // Most pods are bound: sized once, rather than grown by doubling to up to twice what 150,000 pods need.
    view.pods.reserve_exact(snapshot.pods.len());
    for pod in &snapshot.pods {
        let Some(node) = node_name(pod).and_then(|n| index.get(n).copied()) else {
            // A pending pod nominated to a node (preemption, or a node just launched for it) pins that node.
            let nominated = pod
                .status
                .as_ref()
                .and_then(|s| s.nominated_node_name.as_deref())
                .and_then(|n| index.get(n).copied());
            if let Some(n) = nominated
                && node_name(pod).is_none()
                && !is_terminal(pod)
                && !is_terminating(pod)
            {
                view.nodes[n].nominated_for.get_or_insert_with(|| pod_id(pod));
            }
            continue;
        };
        let meta = &pod.metadata;
        let pod_labels = labels_of_group
            .entry(std::sync::Arc::as_ptr(&meta.group) as usize)
            .or_insert_with(|| {
                Labels::new(
                    meta.labels
                        .iter()
                        .flatten()
                        .map(|(k, v)| (interner.intern(k), interner.intern(v)))
                        .collect(),
                )
            })
            .clone();
        let started = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .or(meta.creation_timestamp.as_ref())
            .map(|t| t.0);
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True");
        let tols = tolerations(pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()), interner);
        let is_buffer = annotation(
            meta.annotations.as_ref(),
            labels::CAPACITY_BUFFER_FAKE_POD_ANNOTATION,
        ) == Some("true");
        if is_buffer {
            view.nodes[node].holds_capacity_buffer = true;
        }
        view.nodes[node].pods.push(view.pods.len());
        view.pods.push(PodView {
            pod: std::sync::Arc::clone(pod),
            namespace: interner.intern(meta.namespace.as_deref().unwrap_or("default")),
            labels: pod_labels,
            node: u32::try_from(node).unwrap_or(u32::MAX),
            daemon_or_mirror: daemon_set_owner(pod).is_some() || is_mirror(pod),
            mirror: is_mirror(pod),
            terminal: is_terminal(pod),
            terminating: is_terminating(pod),
            ready,
            do_not_disrupt: DoNotDisrupt::for_pod(
                annotation(meta.annotations.as_ref(), labels::DO_NOT_DISRUPT_ANNOTATION),
                started,
            )
            .into(),
            tolerates_disrupted: tols.iter().any(|t| t.tolerates(&disrupted)),
        });
    }
    for pdb in &snapshot.pdbs {
        let namespace = pdb.metadata.namespace.as_deref().unwrap_or("default");
        let name = format!(
            "{namespace}/{}",
            pdb.metadata.name.as_deref().unwrap_or("<unnamed>")
        );
        let Ok(selector) = label_selector(pdb.spec.as_ref().and_then(|s| s.selector.as_ref()), interner)
        else {
            continue;
        };
        view.pdbs.push(PdbView {
            name,
            namespace: interner.intern(namespace),
            selector,
            disruptions_allowed: i64::from(pdb.status.as_ref().map_or(0, |s| s.disruptions_allowed)),
            always_allow_unhealthy: pdb
                .spec
                .as_ref()
                .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
                == Some("AlwaysAllow"),
        });
    }
    view
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use crate::disruption::candidates::{MethodClass, blocked_reason};

    #[test]
    fn nodes_pods_and_pdbs_are_projected_for_disruption() {
        let snap = snapshot(&[
            &node(
                "n1",
                ", karpenter.sh/nodepool: default, karpenter.sh/initialized: \"true\"",
                "",
            ),
            &bound_pod("default", "web", "n1", "100m", ""),
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      requirements: []\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n",
            "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {name: default-x}\nspec:\n  requirements: []\n  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\nstatus: {nodeName: n1}\n",
            "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web, namespace: default}\nspec: {selector: {matchLabels: {app: web}}, maxUnavailable: 0}\nstatus: {disruptionsAllowed: 0, currentHealthy: 1, desiredHealthy: 1, expectedPods: 1}\n",
        ]);
        let mut interner = LabelInterner::new();
        let view = build_cluster_view(&snap, &mut interner);
        assert_eq!(view.nodes.len(), 1);
        assert_eq!(view.nodes[0].node_claim.as_deref(), Some("default-x"));
        assert_eq!(view.nodes[0].node_pool.as_deref(), Some("default"));
        assert_eq!(view.pods.len(), 1);
        let why = blocked_reason(
            &view,
            0,
            MethodClass::Graceful,
            "2026-12-02T10:00:00Z".parse().unwrap(),
        );
        assert_eq!(
            why.as_deref(),
            Some("pod default/web PodDisruptionBudget default/web allows no more disruptions")
        );
    }

    #[test]
    fn a_node_or_node_claim_holding_buffer_placeholders_is_marked() {
        let managed = ", karpenter.sh/nodepool: default, karpenter.sh/initialized: \"true\"";
        let mut snap = snapshot(&[
            &node("n1", managed, ""),
            &node("n2", managed, ""),
            &node("n3", managed, ""),
            "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {name: default-b}\nspec:\n  requirements: []\n  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\nstatus: {nodeName: n2}\n",
        ]);
        snap.capacity_buffer_nodes = ["n1".to_string(), "default-b".to_string()].into();
        let view = build_cluster_view(&snap, &mut LabelInterner::new());
        let held: Vec<bool> = view.nodes.iter().map(|n| n.holds_capacity_buffer).collect();
        assert_eq!(held, vec![true, true, false]);
    }

    #[test]
    fn a_node_nominated_for_a_pending_pod_is_not_a_candidate() {
        let managed = ", karpenter.sh/nodepool: default, karpenter.sh/initialized: \"true\"";
        let claim = |n: &str| {
            format!(
                "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {{name: c-{n}}}\nspec:\n  requirements: []\n  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\nstatus: {{nodeName: {n}}}\n"
            )
        };
        let nominated = format!(
            "{}status: {{phase: Pending, nominatedNodeName: n1}}\n",
            pending_pod("default", "incoming", "1", "")
        );
        let snap = snapshot(&[
            &node("n1", managed, ""),
            &node("n2", managed, ""),
            &claim("n1"),
            &claim("n2"),
            DEFAULT_POOL,
            &nominated,
        ]);
        let mut interner = LabelInterner::new();
        let view = build_cluster_view(&snap, &mut interner);
        let now = "2026-12-02T10:00:00Z".parse().unwrap();
        assert_eq!(
            blocked_reason(&view, 0, MethodClass::Graceful, now).as_deref(),
            Some("node is nominated for pending pod default/incoming")
        );
        assert_eq!(
            blocked_reason(&view, 0, MethodClass::Eventual, now),
            blocked_reason(&view, 0, MethodClass::Graceful, now)
        );
        assert_eq!(blocked_reason(&view, 1, MethodClass::Graceful, now), None);
    }
}
