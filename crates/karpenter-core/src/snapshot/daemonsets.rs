//! The DaemonSet pods every node runs: what they request and the host ports they bind (from a running pod of the
//! DaemonSet when the snapshot has one, since admission may have changed it, else from the template), the
//! tolerations they carry and the node requirements they need (the template's node selector and required node
//! affinity, since a running pod's affinity is pinned to its node). A node runs a DaemonSet's pod when it
//! tolerates the node's taints and one of its requirement alternatives fits the node; a NodePool's new node, when
//! it tolerates the NodePool's taints and one alternative fits both the NodePool's requirements and the instance
//! type the node launches as (upstream's rule since kubernetes-sigs/karpenter#2975).

use std::{collections::HashMap, sync::Arc};

use k8s_openapi::api::core::v1::{PodSpec, Toleration as KubeToleration};

use crate::{
    instance_type::InstanceType,
    requirements::{Requirements, WellKnownKeys},
    resources::Resources,
    scheduling::{DaemonOverhead, DaemonOverheads, HostPort, Taint, Toleration, pod::untolerated},
    snapshot::pod_requests::pod_requests,
};

use super::{
    Snapshot,
    compact_pod::{CompactPod, CompactPodSpec},
    context::{Context, describe},
    pods::{daemon_set_owner, host_ports, is_terminal},
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
    pub host_ports: Vec<HostPort>,
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
            let from_template;
            let spec = match running.get(&key).and_then(|p| p.spec.as_ref()) {
                Some(spec) => spec,
                None => {
                    from_template = CompactPodSpec::from(template);
                    &from_template
                }
            };
            let ports = host_ports(spec, cx);
            let requests = match pod_requests(spec, &mut cx.table) {
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
                host_ports: ports,
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

    /// The DaemonSet pods a NodePool's new node runs, per instance type: those that tolerate the NodePool's
    /// `taints` and have a requirement alternative that both the NodePool's `requirements` (with
    /// `allow_undefined` keys it need not declare) and the instance type allow. Keys only the DaemonSet
    /// constrains are judged by the NodePool alone, since an instance type does not define custom labels.
    pub fn overheads_by_instance_type(
        &self,
        taints: &[Taint],
        requirements: &Requirements,
        allow_undefined: &WellKnownKeys,
        instance_types: &[Arc<InstanceType>],
    ) -> DaemonOverheads {
        // Per DaemonSet that can run on the NodePool at all, the alternatives the NodePool allows.
        let candidates: Vec<(usize, Vec<&Requirements>)> = (0..self.pods.len())
            .filter(|&d| untolerated(&self.pods[d].tolerations, taints, false).is_none())
            .map(|d| {
                let allowed = self.pods[d]
                    .alternatives
                    .iter()
                    .filter(|a| requirements.is_compatible(a, allow_undefined))
                    .collect::<Vec<_>>();
                (d, allowed)
            })
            .filter(|(_, allowed)| !allowed.is_empty())
            .collect();
        let mut groups: Vec<DaemonOverhead> = Vec::new();
        let mut group_by_members: HashMap<Vec<usize>, u32> = HashMap::new();
        let mut group_of = Vec::with_capacity(instance_types.len());
        let mut members = Vec::with_capacity(candidates.len());
        for it in instance_types {
            members.clear();
            members.extend(
                candidates
                    .iter()
                    .filter(|(_, allowed)| allowed.iter().any(|a| it.requirements.intersects(a).is_ok()))
                    .map(|(d, _)| *d),
            );
            let g = match group_by_members.get(&members) {
                Some(&g) => g,
                None => {
                    let g = u32::try_from(groups.len()).unwrap_or(u32::MAX);
                    let mut overhead = DaemonOverhead::default();
                    for &d in &members {
                        overhead.requests.add_assign(&self.pods[d].requests);
                        overhead
                            .host_ports
                            .extend(self.pods[d].host_ports.iter().copied());
                    }
                    groups.push(overhead);
                    group_by_members.insert(members.clone(), g);
                    g
                }
            };
            group_of.push(g);
        }
        DaemonOverheads::new(groups, group_of)
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
    use super::super::{BuildOptions, ScheduleInputs, build_schedule_inputs};

    fn daemon_set(name: &str, cpu: &str, spec_extra: &str) -> String {
        format!(
            "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: {name}, namespace: kube-system}}\nspec:\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      containers: [{{name: c, resources: {{requests: {{cpu: \"{cpu}\"}}}}}}]\n{spec_extra}"
        )
    }

    /// The CPU (millicores) of the DaemonSet overhead NodePool `pool`'s new nodes carry as instance type `it`.
    fn overhead_cpu(built: &ScheduleInputs, pool: &str, it: &str) -> i64 {
        let t = &built.input.templates[built.template_names.iter().position(|t| t == pool).unwrap()];
        let i = t.instance_types.iter().position(|x| x.name == it).unwrap();
        t.daemon_overheads.of(i).requests.cpu()
    }

    const TAINTED_POOL: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: gpu}\nspec:\n  template:\n    spec:\n      taints: [{key: dedicated, value: gpu, effect: NoSchedule}]\n      requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n";

    const ARM_ONLY: &str = "      affinity:\n        nodeAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n            nodeSelectorTerms:\n            - matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [arm64]}]\n";

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
        assert_eq!(overhead_cpu(&built, "default", "small"), 300);
        assert_eq!(overhead_cpu(&built, "gpu", "small"), 200);
    }

    #[test]
    fn daemonset_overhead_respects_node_affinity() {
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
            &daemon_set("arm-agent", "100m", ARM_ONLY),
            &zoned,
            &custom,
        ]);
        let built = build_schedule_inputs(&snap, &catalog(), &BuildOptions::default());
        // amd64 pool: the arm64 DaemonSet does not run; the zone is well known so may be undeclared; a custom
        // label the NodePool does not declare cannot be met.
        assert_eq!(overhead_cpu(&built, "gpu", "small"), 50);
        assert_eq!(overhead_cpu(&built, "gpu", "large"), 50);
    }

    #[test]
    fn daemonset_overhead_is_per_instance_type() {
        // The default NodePool allows every type: `small` (amd64, spot and on-demand), `large` (amd64,
        // on-demand only) and `arm` (arm64, on-demand only).
        let snap = snapshot(&[
            DEFAULT_POOL,
            &daemon_set("everywhere", "50m", ""),
            &daemon_set("arm-agent", "100m", ARM_ONLY),
            &daemon_set("large-only", "200m", "      nodeSelector: {size: large}\n"),
            &daemon_set(
                "spot-only",
                "400m",
                "      nodeSelector: {karpenter.sh/capacity-type: spot}\n",
            ),
        ]);
        let built = build_schedule_inputs(&snap, &catalog(), &BuildOptions::default());
        assert_eq!(overhead_cpu(&built, "default", "small"), 50 + 400);
        assert_eq!(overhead_cpu(&built, "default", "large"), 50 + 200);
        assert_eq!(overhead_cpu(&built, "default", "arm"), 50 + 100);
    }

    #[test]
    fn daemonset_host_ports_count_only_on_the_types_it_runs_on() {
        let exporter = daemon_set(
            "arm-exporter",
            "10m",
            &format!("{ARM_ONLY}      hostNetwork: true\n"),
        )
        .replace(
            "containers: [{name: c, ",
            "containers: [{name: c, ports: [{containerPort: 9100}], ",
        );
        let snap = snapshot(&[DEFAULT_POOL, &exporter]);
        let built = build_schedule_inputs(&snap, &catalog(), &BuildOptions::default());
        let t = &built.input.templates[0];
        let ports = |it: &str| {
            let i = t.instance_types.iter().position(|x| x.name == it).unwrap();
            t.daemon_overheads
                .of(i)
                .host_ports
                .iter()
                .map(|p| p.port)
                .collect::<Vec<_>>()
        };
        assert_eq!(ports("arm"), [9100]);
        assert!(ports("small").is_empty());
    }

    #[test]
    fn running_daemon_pod_requests_win_over_the_template() {
        let pod = bound_pod("kube-system", "agent-abc", "n1", "300m", "").replace(
            "metadata: {",
            "metadata: {ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: agent, uid: u}], ",
        );
        let snap = snapshot(&[DEFAULT_POOL, &daemon_set("agent", "100m", ""), &pod]);
        let built = build_schedule_inputs(&snap, &catalog(), &BuildOptions::default());
        assert_eq!(overhead_cpu(&built, "default", "small"), 300);
    }

    /// What a user sees in `karpenter schedule`: the instance types and launch of the one NodeClaim opened for
    /// the snapshot's pending pods, and the pods left pending.
    fn schedule(objects: &[&str]) -> (Vec<String>, Option<String>, Vec<String>) {
        let mut built = build_schedule_inputs(&snapshot(objects), &catalog(), &BuildOptions::default());
        let results = crate::scheduling::schedule(&built.input, &mut built.interner, &built.table);
        let claim = results.new_node_claims.first();
        (
            claim
                .map(|c| c.instance_types.iter().map(|it| it.name.clone()).collect())
                .unwrap_or_default(),
            claim.and_then(|c| c.launch.as_ref().map(|l| l.instance_type.name.clone())),
            results.pod_errors.iter().map(|(_, e)| e.clone()).collect(),
        )
    }

    #[test]
    fn a_pod_that_fills_an_amd64_type_still_fits_it_when_a_daemonset_runs_only_on_arm64() {
        // `small` has 1900m allocatable: exactly the pod. The arm64 agent would not fit beside it, but it never
        // runs there; on `arm` (3900m) it leaves too little.
        let pod = pending_pod("default", "web", "1900m", "");
        let arm_agent = daemon_set("arm-agent", "2100m", ARM_ONLY);
        let (types, launch, errors) = schedule(&[DEFAULT_POOL, &arm_agent, &pod]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(types, ["small", "large"]);
        assert_eq!(launch.as_deref(), Some("small"));

        // A DaemonSet that runs everywhere leaves room only on `large`.
        let (types, _, _) = schedule(&[DEFAULT_POOL, &daemon_set("agent", "2100m", ""), &pod]);
        assert_eq!(types, ["large"]);
    }

    #[test]
    fn a_pod_binding_a_daemonsets_host_port_avoids_only_the_types_that_daemonset_runs_on() {
        let exporter = daemon_set("arm-exporter", "10m", ARM_ONLY).replace(
            "containers: [{name: c, ",
            "containers: [{name: c, ports: [{containerPort: 9100, hostPort: 9100}], ",
        );
        let pod = pending_pod(
            "default",
            "scraper",
            "100m",
            "  nodeSelector: {kubernetes.io/arch: arm64}\n",
        )
        .replace(
            "containers: [{name: c, ",
            "containers: [{name: c, ports: [{containerPort: 9100, hostPort: 9100}], ",
        );
        let (types, _, errors) = schedule(&[DEFAULT_POOL, &exporter, &pod]);
        assert!(types.is_empty(), "{types:?}");
        assert!(
            errors.len() == 1
                && errors[0].contains(
                    "checking host port usage, IP=0.0.0.0 Port=9100 Proto=TCP conflicts with existing HostPort configuration"
                ),
            "{errors:?}"
        );

        // On amd64 the exporter does not run, so the port is free there.
        let anywhere = pod.replace("  nodeSelector: {kubernetes.io/arch: arm64}\n", "");
        let (types, launch, errors) = schedule(&[DEFAULT_POOL, &exporter, &anywhere]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(types, ["small", "large"]);
        assert_eq!(launch.as_deref(), Some("small"));
    }
}
