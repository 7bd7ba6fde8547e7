//! The DaemonSet pods every node runs: what they request (from a running pod of the DaemonSet when the snapshot
//! has one, since admission may have changed it, else from the template), the tolerations they carry and the node
//! requirements they need (the template's node selector and required node affinity, since a running pod's
//! affinity is pinned to its node). A node (or a NodePool's new node) runs a DaemonSet's pod when it tolerates
//! the node's taints and one of its requirement alternatives fits the node.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{PodSpec, Toleration as KubeToleration};

use crate::{
    requirements::{Requirements, WellKnownKeys},
    resources::{Resources, pod_requests},
    scheduling::{Taint, Toleration, pod::untolerated},
};

use super::{
    Snapshot,
    compact_pod::{CompactPod, CompactPodSpec},
    context::{Context, describe},
    pods::{daemon_set_owner, is_terminal},
    taints::tolerations,
};

/// Tolerations the DaemonSet controller adds to every pod it creates (so node conditions do not evict them).
const DAEMON_TOLERATIONS: [(&str, &str); 6] = [
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
];

/// One DaemonSet's pod, as scheduling sees it.
#[derive(Debug, Clone)]
pub(super) struct DaemonPod {
    pub requests: Resources,
    pub tolerations: Vec<Toleration>,
    /// The node must satisfy one of these: the node selector with each required node-affinity term (or alone).
    pub alternatives: Vec<Requirements>,
}

#[derive(Debug, Default)]
pub(super) struct DaemonPods {
    pub pods: Vec<DaemonPod>,
    index: HashMap<(String, String), usize>,
}

impl DaemonPods {
    pub fn build(cx: &mut Context, snapshot: &Snapshot) -> Self {
        let mut out = Self::default();
        if snapshot.daemon_sets.is_empty() {
            return out;
        }
        // One running pod per DaemonSet, for its actual requests.
        let mut running: HashMap<(String, String), &CompactPod> = HashMap::new();
        for pod in &snapshot.pods {
            if let Some(owner) = daemon_set_owner(pod)
                && !is_terminal(pod)
            {
                running.entry(owner).or_insert(pod);
            }
        }
        for ds in &snapshot.daemon_sets {
            if ds.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let namespace = ds.metadata.namespace.clone().unwrap_or_else(|| "default".into());
            let name = ds.metadata.name.clone().unwrap_or_default();
            let object = describe("DaemonSet", Some(&namespace), Some(&name));
            let Some(template) = ds.spec.as_ref().and_then(|s| s.template.spec.as_ref()) else {
                continue;
            };
            let key = (namespace, name);
            let requests = match running.get(&key).and_then(|p| p.spec.as_ref()) {
                Some(spec) => pod_requests(spec, &mut cx.table),
                None => pod_requests(&CompactPodSpec::from(template), &mut cx.table),
            };
            let requests = match requests {
                Ok(r) => r,
                Err(e) => {
                    cx.note(object, format!("{e}; its pods are not counted as node overhead"));
                    continue;
                }
            };
            let alternatives = match alternatives(template, cx) {
                Ok(a) => a,
                Err(e) => {
                    cx.note(object, format!("{e}; its pods are not counted as node overhead"));
                    continue;
                }
            };
            let mut tols: Vec<KubeToleration> = template.tolerations.clone().unwrap_or_default();
            tols.extend(DAEMON_TOLERATIONS.iter().map(|(key, effect)| KubeToleration {
                key: Some((*key).into()),
                operator: Some("Exists".into()),
                effect: Some((*effect).into()),
                ..Default::default()
            }));
            out.index.insert(key, out.pods.len());
            out.pods.push(DaemonPod {
                requests,
                tolerations: tolerations(Some(&tols), &mut cx.interner),
                alternatives,
            });
        }
        out
    }

    /// The DaemonSet `namespace/name`, if known.
    pub fn index_of(&self, key: &(String, String)) -> Option<usize> {
        self.index.get(key).copied()
    }

    /// Whether a node with these taints and label requirements runs pod `d`. `allow_undefined`: keys the node
    /// side need not define (a NodePool's well-known keys; none for a real node's labels).
    pub fn runs_on(
        &self,
        d: usize,
        taints: &[Taint],
        node: &Requirements,
        allow_undefined: &WellKnownKeys,
    ) -> bool {
        let pod = &self.pods[d];
        // PreferNoSchedule is only a preference; the DaemonSet controller places its pods there anyway.
        untolerated(&pod.tolerations, taints, false).is_none()
            && pod
                .alternatives
                .iter()
                .any(|a| node.is_compatible(a, allow_undefined))
    }

    /// The summed requests of every DaemonSet pod a node with these taints and requirements runs.
    pub fn overhead(
        &self,
        taints: &[Taint],
        node: &Requirements,
        allow_undefined: &WellKnownKeys,
    ) -> Resources {
        let mut total = Resources::zero();
        for d in 0..self.pods.len() {
            if self.runs_on(d, taints, node, allow_undefined) {
                total.add_assign(&self.pods[d].requests);
            }
        }
        total
    }
}

fn alternatives(spec: &PodSpec, cx: &mut Context) -> Result<Vec<Requirements>, String> {
    let base = Requirements::from_labels(
        spec.node_selector
            .iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.as_str())),
        &mut cx.interner,
    );
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    if terms.is_empty() {
        return Ok(vec![base]);
    }
    terms
        .iter()
        .map(|t| {
            Requirements::from_node_selector_term(t, &mut cx.interner)
                .map(|r| base.intersect(&r))
                .map_err(|e| format!("required node affinity: {e}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::{BuildOptions, build_schedule_inputs};

    fn daemon_set(name: &str, cpu: &str, spec_extra: &str) -> String {
        format!(
            "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: {name}, namespace: kube-system}}\nspec:\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      containers: [{{name: c, resources: {{requests: {{cpu: \"{cpu}\"}}}}}}]\n{spec_extra}"
        )
    }

    const TAINTED_POOL: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: gpu}\nspec:\n  template:\n    spec:\n      taints: [{key: dedicated, value: gpu, effect: NoSchedule}]\n      requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n";

    #[test]
    fn daemonset_overhead_counts_only_tolerating_daemonsets() {
        let tolerant = daemon_set("tolerant", "200m", "      tolerations: [{operator: Exists}]\n");
        let snap = snapshot(&[
            DEFAULT_POOL,
            TAINTED_POOL,
            &daemon_set("plain", "100m", ""),
            &tolerant,
        ]);
        let built = build_schedule_inputs(&snap, &catalog(), &BuildOptions::default());
        let by_name =
            |n: &str| &built.input.templates[built.template_names.iter().position(|t| t == n).unwrap()];
        assert_eq!(by_name("default").daemon_overhead.cpu(), 300);
        assert_eq!(by_name("gpu").daemon_overhead.cpu(), 200);
    }

    #[test]
    fn daemonset_overhead_respects_node_affinity() {
        let arm_only = daemon_set(
            "arm-agent",
            "100m",
            "      affinity:\n        nodeAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n            nodeSelectorTerms:\n            - matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [arm64]}]\n",
        );
        let zoned = daemon_set(
            "zoned",
            "50m",
            "      nodeSelector: {topology.kubernetes.io/zone: test-zone-1}\n",
        );
        let custom = daemon_set(
            "custom",
            "25m",
            "      nodeSelector: {example.com/undeclared: x}\n",
        );
        let snap = snapshot(&[
            TAINTED_POOL
                .replace(
                    "taints: [{key: dedicated, value: gpu, effect: NoSchedule}]",
                    "taints: []",
                )
                .as_str(),
            &arm_only,
            &zoned,
            &custom,
        ]);
        let built = build_schedule_inputs(&snap, &catalog(), &BuildOptions::default());
        // amd64 pool: the arm64 DaemonSet does not run; the zone is well known so may be undeclared; a custom
        // label the NodePool does not declare cannot be met.
        assert_eq!(built.input.templates[0].daemon_overhead.cpu(), 50);
    }

    #[test]
    fn running_daemon_pod_requests_win_over_the_template() {
        let pod = bound_pod("kube-system", "agent-abc", "n1", "300m", "").replace(
            "metadata: {",
            "metadata: {ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: agent, uid: u}], ",
        );
        let snap = snapshot(&[DEFAULT_POOL, &daemon_set("agent", "100m", ""), &pod]);
        let built = build_schedule_inputs(&snap, &catalog(), &BuildOptions::default());
        assert_eq!(built.input.templates[0].daemon_overhead.cpu(), 300);
    }
}
